"""The simulation runner and the `cxlsim simulate` command.

`run(scenario)` turns a validated `cxlsim.config.Scenario` into one projected
latency per message size:
1. resolve the preset with the scenario's overrides (`resolve_preset`);
2. build the topology graph (`build_graph`) and the placement of ranks;
3. per size, pick the algorithm (or ask the MPICH/Open MPI selector when it
   is 'auto') and either evaluate its closed form (`engine: analytic`) or
   simulate it on a freshly built network (`engine: des`), checking every
   rank's payload labels.

`cxlsim simulate [SCENARIO.yaml] [--nodes N ...]` prints an OSU-style table
and writes a run workspace (cxlsim.results). With no scenario file it uses
DEFAULT_SCENARIO, so `cxlsim simulate --nodes 8 --preset ib-hdr` just works.

CXL pools. When `fabric.preset` names a CXL pool preset (`cxl2-pool`,
`cxl3-pool`; cxlsim.fabric.cxl_presets) the fabric is `fabric.nodes` hosts,
one rank each, on a CXL switch (or a two-level tree) sharing the pool, set by
the `fabric.cxl` section (coherence, devices, switch_levels, load_latency,
outstanding_lines, device_bandwidth, chunk; `resolve_cxl`). Only pool
algorithms run there (`cxl_pool`, `cxl_pool_zero_copy`; 'auto' means
`cxl_pool`): the DES engine simulates them on a `CXLPoolTransport`, the
analytic engine evaluates `cxl_pool_closed_form` on the same transport's
figures. Network algorithms on a CXL preset, pool algorithms on a network
preset, and network-only keys (links, switch, nic, topology other than star,
several ranks per node) are errors that name the key.

Calibration profiles. `fabric.preset` may name a profile written by `cxlsim
calibrate` (a `.json` path): the allgather is then projected with it as `cxlsim
calibrate --profile` does (`cxlsim.calibrate.project`).
"""
from __future__ import annotations

import dataclasses
import sys
import time

from cxlsim import config
from cxlsim.calibrate.project import is_profile, run_profile
from cxlsim.errors import InputError, RunError
from cxlsim.fabric import topology
from cxlsim.fabric.cxl_presets import CXL_PRESETS, get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.presets import PRESETS, get_preset
from cxlsim.fabric.transport import NetworkTransport
from cxlsim.models.collectives import analytic, runner
from cxlsim.models.collectives.base import check_transport, lookup
from cxlsim.models.collectives.cxl_pool import cxl_pool_closed_form
from cxlsim.models.collectives.selectors import select
from cxlsim.results import Workspace, make_rng
from cxlsim.units import format_size, parse_sizes

__all__ = ["DEFAULT_SCENARIO", "resolve_preset", "resolved", "build_graph", "build_transport", "is_cxl",
           "resolve_cxl", "CXLSetup", "build_pool_transport", "run", "osu_table", "register"]

DEFAULT_SCENARIO = {
    "name": "simulate",
    "fabric": {"preset": "ib-hdr", "nodes": 8},
    "workload": {"collective": "allgather", "algorithm": "auto", "sizes": "1B:1MiB"},
}
"""The scenario used when no file is given (flags override it)."""


def _merge(params, overrides):
    values = {f.name: getattr(overrides, f.name) for f in dataclasses.fields(overrides)
              if getattr(overrides, f.name) is not None and hasattr(params, f.name)}
    try:
        return dataclasses.replace(params, **values)
    except ValueError as exc:
        raise InputError(f"fabric: {exc}") from None


def is_cxl(fabric: config.FabricConfig) -> bool:
    """True if `fabric.preset` names a CXL pool preset."""
    return fabric.preset in CXL_PRESETS


def _unknown_preset(name):
    known = sorted(PRESETS) + sorted(CXL_PRESETS)
    return InputError(f"fabric.preset: unknown preset {name!r}; expected one of {', '.join(known)}")


@dataclasses.dataclass(frozen=True)
class CXLSetup:
    """A scenario's CXL pool: the preset with its overrides, and the choices made for the run."""

    preset: object
    """The `CXLPoolPreset` with `fabric.cxl` and `fabric.host` overrides applied."""
    coherence: str
    switch_levels: int
    devices: int
    chunk_bytes: int


def _one_level_load_ns(preset) -> float:
    link = preset.link.traversal_ns
    return 2 * (preset.host_path.port_latency_ns + 2 * link + preset.switch.hop_latency_ns) + \
        preset.device.media_latency_ns


def resolve_cxl(fabric: config.FabricConfig) -> CXLSetup:
    """The CXL pool a scenario names, checked: preset, overrides, coherence and switch levels.

    `fabric.cxl.load_latency` scales every latency figure of the preset (core
    to port, links and retimers, switch hop, media) by one factor, so the
    unloaded load through one switch level equals it; the host bandwidth,
    outstanding requests x 64 B / load latency, moves with it (Little's law).
    """
    if not is_cxl(fabric):
        raise _unknown_preset(fabric.preset)
    for key, overrides in (("links", fabric.links), ("switch", fabric.switch), ("nic", fabric.nic)):
        given = [f.metadata["key"] for f in dataclasses.fields(overrides) if getattr(overrides, f.name) is not None]
        if given:
            raise InputError(f"fabric.{key}.{given[0]}: a network setting, but {fabric.preset} is a CXL pool; "
                             "set CXL figures in fabric.cxl")
    if fabric.topology != "star":
        raise InputError(f"fabric.topology: a CXL pool builds its own switch (or switch tree, "
                         f"fabric.cxl.switch_levels); expected 'star' (the default), got {fabric.topology!r}")
    if fabric.ranks_per_node != 1:
        raise InputError(f"fabric.ranks_per_node: the CXL pool model runs one rank per host; expected 1, "
                         f"got {fabric.ranks_per_node}")
    preset = get_cxl_preset(fabric.preset)
    cx = fabric.cxl
    if cx.load_latency_ns is not None:
        k = cx.load_latency_ns / _one_level_load_ns(preset)
        preset = dataclasses.replace(
            preset,
            host_path=dataclasses.replace(preset.host_path, port_latency_ns=preset.host_path.port_latency_ns * k),
            link=dataclasses.replace(preset.link, latency_ns=preset.link.latency_ns * k,
                                     retimer_latency_ns=preset.link.retimer_latency_ns * k),
            switch=dataclasses.replace(preset.switch, hop_latency_ns=preset.switch.hop_latency_ns * k),
            device=dataclasses.replace(preset.device, media_latency_ns=preset.device.media_latency_ns * k))
    if cx.outstanding_lines is not None:
        preset = dataclasses.replace(preset, host_path=dataclasses.replace(
            preset.host_path, outstanding_lines=cx.outstanding_lines))
    if cx.device_bw_bytes_per_ns is not None:
        preset = dataclasses.replace(preset, device=dataclasses.replace(
            preset.device, media_bw_bytes_per_ns=cx.device_bw_bytes_per_ns))
    preset = dataclasses.replace(preset, host=_merge(preset.host, fabric.host))
    coherence = cx.coherence or ("hw" if "hw" in preset.coherence_modes else "flush")
    ports = cx.devices * preset.device.heads
    levels = cx.switch_levels or (1 if fabric.nodes + ports <= preset.switch.max_ports
                                  or preset.max_switch_levels == 1 else 2)
    try:
        preset.check(coherence, levels)
    except InputError as exc:
        raise InputError(f"fabric.cxl.{exc}") from None
    try:
        if levels == 1:
            preset.switch.check_ports(fabric.nodes, ports)
        else:
            preset.switch.tree_leaves(fabric.nodes, ports)
    except InputError as exc:
        raise InputError(f"fabric.nodes: {fabric.nodes} on {levels} switch level(s): {exc}") from None
    return CXLSetup(preset, coherence, levels, cx.devices, cx.chunk_bytes)


def build_pool_transport(scenario: config.Scenario, setup: CXLSetup | None = None) -> CXLPoolTransport:
    """A fresh environment and CXL pool transport for one simulated call."""
    setup = setup or resolve_cxl(scenario.fabric)
    return CXLPoolTransport(setup.preset, scenario.fabric.nodes, coherence=setup.coherence, env=Environment(),
                            devices=setup.devices, chunk_bytes=setup.chunk_bytes, switch_levels=setup.switch_levels)


def resolve_preset(fabric: config.FabricConfig):
    """The scenario's preset with its `links`, `switch`, `nic` and `host` overrides applied."""
    if is_cxl(fabric):
        raise InputError(f"fabric.preset: {fabric.preset} is a CXL pool; use resolve_cxl")
    try:
        preset = get_preset(fabric.preset)
    except InputError:
        raise _unknown_preset(fabric.preset) from None
    kind = fabric.switch.kind or preset.switch_kind
    return dataclasses.replace(
        preset,
        switch_kind=kind,
        link=_merge(preset.link, fabric.links),
        switch=_merge(preset.switch, fabric.switch),
        nic=_merge(preset.nic, fabric.nic),
        host=_merge(preset.host, fabric.host),
    )


def resolved(scenario: config.Scenario) -> config.Scenario:
    """The scenario with every preset figure written out, so the run does not depend on the preset table."""
    gbs, ns = (lambda v: f"{v!r} GB/s"), (lambda v: f"{v!r} ns")
    if is_profile(scenario.fabric.preset):  # its figures are the profile file's (kept beside the run)
        return scenario
    if is_cxl(scenario.fabric):
        setup = resolve_cxl(scenario.fabric)
        p = setup.preset
        return config.with_overrides(scenario, {
            "fabric.cxl.coherence": setup.coherence, "fabric.cxl.switch_levels": setup.switch_levels,
            "fabric.cxl.load_latency": ns(_one_level_load_ns(p)),
            "fabric.cxl.outstanding_lines": p.host_path.outstanding_lines,
            "fabric.cxl.device_bandwidth": gbs(p.device.media_bw_bytes_per_ns),
            "fabric.host.memcpy_bandwidth": gbs(p.host.memcpy_bw_bytes_per_ns),
            "fabric.host.reduce_bandwidth": gbs(p.host.reduce_bw_bytes_per_ns),
        })
    p = resolve_preset(scenario.fabric)
    return config.with_overrides(scenario, {
        "fabric.links.bandwidth": gbs(p.link.bw_bytes_per_ns), "fabric.links.latency": ns(p.link.latency_ns),
        "fabric.switch.kind": p.switch_kind, "fabric.switch.latency": ns(p.switch.latency_ns),
        "fabric.switch.mode": p.switch.mode, "fabric.nic.overhead": ns(p.nic.overhead_ns),
        "fabric.nic.gap": ns(p.nic.gap_ns), "fabric.nic.gap_per_byte": ns(p.nic.gap_per_byte_ns),
        "fabric.host.memcpy_bandwidth": gbs(p.host.memcpy_bw_bytes_per_ns),
        "fabric.host.reduce_bandwidth": gbs(p.host.reduce_bw_bytes_per_ns),
    })


def build_graph(fabric: config.FabricConfig):
    """The topology graph the scenario names (star, fat_tree or a file)."""
    if fabric.topology == "star":
        return topology.star(fabric.nodes)
    if fabric.topology == "fat_tree":
        per_leaf = fabric.hosts_per_leaf or fabric.nodes
        return topology.fat_tree(fabric.nodes, per_leaf, fabric.oversubscription, fabric.spines)
    if fabric.topology.endswith((".yaml", ".yml", ".graphml", ".xml")):
        graph = topology.load(fabric.topology)
        found = len(topology.hosts(graph))
        if found != fabric.nodes:
            raise InputError(f"fabric.nodes: {fabric.nodes} but topology {fabric.topology!r} has {found} hosts")
        return graph
    raise InputError(f"fabric.topology: expected 'star', 'fat_tree' or a .yaml/.graphml file, "
                     f"got {fabric.topology!r}")


def build_transport(scenario: config.Scenario, preset=None, graph=None) -> NetworkTransport:
    """A fresh environment, network and transport for one simulated call."""
    fabric = scenario.fabric
    net = build(graph if graph is not None else build_graph(fabric), preset or resolve_preset(fabric), Environment())
    placement = Placement(fabric.nodes, fabric.ranks_per_node, fabric.placement)
    return NetworkTransport(net, placement, scenario.workload.chunk_bytes)


def _context(scenario, placement) -> runner.Context:
    wl = scenario.workload
    if wl.root >= placement.size:
        raise InputError(f"workload.root: expected a rank below P={placement.size}, got {wl.root}")
    if wl.inter_algorithm == "hierarchical":
        raise InputError("workload.inter_algorithm: expected a flat allgather algorithm, got 'hierarchical'")
    return runner.Context(groups=tuple(map(tuple, placement.groups())), inter=wl.inter_algorithm, root=wl.root)


def _run_pool(scenario: config.Scenario, bar) -> list[dict]:
    setup = resolve_cxl(scenario.fabric)
    wl = scenario.workload
    p = scenario.fabric.nodes
    if wl.collective != "allgather":
        raise InputError(f"workload.collective: a CXL pool runs only allgather (cxl_pool, cxl_pool_zero_copy), "
                         f"got {wl.collective!r}")
    name = "cxl_pool" if wl.algorithm == "auto" else wl.algorithm
    algo, fallback = lookup(wl.collective, name, p)
    check_transport(algo, "pool")
    figures = None
    rows = []
    for size in wl.sizes_bytes:
        start = time.perf_counter()
        if scenario.engine == "analytic":
            if figures is None:
                figures = build_pool_transport(scenario, setup).figures()
            latency_ns = cxl_pool_closed_form(figures, p, size, setup.coherence,
                                              zero_copy=algo.name == "cxl_pool_zero_copy")
            events = 0
        else:
            outcome = runner.run(build_pool_transport(scenario, setup), wl.collective, algo.name, size,
                                 iterations=wl.iterations, warmup=wl.warmup)
            try:
                runner.verify(wl.collective, p, runner.Context(), outcome.results)
            except AssertionError as exc:
                raise RunError(f"payload check failed for {outcome.algorithm} at {size} B: {exc}") from None
            latency_ns, events = outcome.latency_ns, outcome.events
        rows.append({"size_bytes": size, "latency_us": latency_ns / 1e3, "algorithm": algo.name,
                     "note": fallback or "", "engine": scenario.engine, "events": events,
                     "wall_s": time.perf_counter() - start})
        if bar:
            bar.update(1)
    return rows


def run(scenario: config.Scenario, progress: bool = False) -> list[dict]:
    """One row per size: size_bytes, latency_us, algorithm, note, engine, events, wall_s.

    With `workload.iterations` (and `warmup`) the DES makes back-to-back calls and
    latency_us is the time per timed call; the closed forms cost one call only.
    """
    wl = scenario.workload
    if scenario.engine == "analytic" and (wl.iterations, wl.warmup) != (1, 0):
        raise InputError(f"workload.iterations: the closed forms cost one call on a fresh fabric; back-to-back "
                         f"calls (iterations {wl.iterations}, warmup {wl.warmup}) need engine: des")
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(scenario.workload.sizes_bytes), desc="simulate", unit="size", file=sys.stderr,
                   leave=False)
    try:
        if is_profile(scenario.fabric.preset):
            return run_profile(scenario, bar)
        if is_cxl(scenario.fabric):
            return _run_pool(scenario, bar)
        return _run_network(scenario, bar)
    finally:
        if bar:
            bar.close()


def _run_network(scenario: config.Scenario, bar) -> list[dict]:
    preset = resolve_preset(scenario.fabric)
    graph = build_graph(scenario.fabric)
    wl = scenario.workload
    placement = Placement(scenario.fabric.nodes, scenario.fabric.ranks_per_node, scenario.fabric.placement)
    ctx = _context(scenario, placement)
    p = placement.size
    cost_model = None
    rows = []
    for size in wl.sizes_bytes:
        name, note = (wl.algorithm, None)
        if name == "auto":
            name, note = select(wl.selector, wl.collective, p, size)
        check_transport(lookup(wl.collective, name, p)[0], "network")
        start = time.perf_counter()
        if scenario.engine == "analytic":
            if cost_model is None:
                cost_model = analytic.CostModel.from_network(build(graph, preset, Environment()), wl.chunk_bytes)
            latency_ns, used, fallback = analytic.cost(wl.collective, name, p, size, cost_model, ctx)
            events = 0
        else:
            transport = build_transport(scenario, preset, graph)
            outcome = runner.run(transport, wl.collective, name, size, ctx, wl.iterations, wl.warmup)
            try:
                runner.verify(wl.collective, p, ctx, outcome.results)
            except AssertionError as exc:
                raise RunError(f"payload check failed for {outcome.algorithm} at {size} B: {exc}") from None
            latency_ns, used, fallback, events = outcome.latency_ns, outcome.algorithm, outcome.note, outcome.events
        inter_note = None
        if used == "hierarchical":  # the leaders' algorithm may fall back too
            _, inter_note = lookup("allgather", ctx.inter, len(ctx.groups))
        notes = "; ".join(n for n in (note, fallback, inter_note and f"leaders: {inter_note}") if n)
        rows.append({"size_bytes": size, "latency_us": latency_ns / 1e3, "algorithm": used,
                     "note": notes, "engine": scenario.engine, "events": events,
                     "wall_s": time.perf_counter() - start})
        if bar:
            bar.update(1)
    return rows


def osu_table(scenario: config.Scenario, rows: list[dict]) -> str:
    """OSU-format text: '#' header lines, then the columns 'Size  Avg Latency(us)'."""
    f = scenario.fabric
    spans = []  # (first size, last size, algorithm) runs
    for row in rows:
        if spans and spans[-1][2] == row["algorithm"]:
            spans[-1][1] = row["size_bytes"]
        else:
            spans.append([row["size_bytes"], row["size_bytes"], row["algorithm"]])
    algos = "; ".join(f"{format_size(a)}{'' if a == b else '-' + format_size(b)} {name}" for a, b, name in spans)
    where = (f"calibration profile {f.preset}, {f.nodes} ranks" if is_profile(f.preset) else
             f"{f.preset}, {f.cxl.coherence} coherence, {f.cxl.devices} device(s), {f.cxl.switch_levels} switch "
             f"level(s), {f.nodes} hosts x 1 rank" if is_cxl(f) else
             f"{f.preset}, {f.topology}, {f.nodes} nodes x {f.ranks_per_node} ranks ({f.placement})")
    lines = [f"# cxlsim projected {scenario.workload.collective} latency ({scenario.engine} engine)",
             f"# fabric: {where}",
             f"# algorithms: {algos}",
             f"# {'Size':<10} {'Avg Latency(us)':>18}"]
    lines += [f"{row['size_bytes']:<12d} {row['latency_us']:>18.2f}" for row in rows]
    return "\n".join(lines) + "\n"


def _plot(workspace, scenario, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["size_bytes"] or 1 for r in rows], [r["latency_us"] for r in rows], marker="o")
    ax.set_xscale("log")
    if all(r["latency_us"] > 0 for r in rows):  # P=1 takes no time
        ax.set_yscale("log")
    ax.set_xlabel("size per rank (bytes)")
    ax.set_ylabel("latency (us)")
    ax.set_title(f"{scenario.workload.collective}: {scenario.fabric.preset}, P="
                 f"{scenario.fabric.nodes * scenario.fabric.ranks_per_node} ({scenario.engine})")
    ax.grid(True, which="both", alpha=0.3)
    workspace.save_plot("latency", fig)
    plt.close(fig)


def _overrides(args) -> dict:
    flags = {"fabric.nodes": args.nodes, "fabric.ranks_per_node": args.ranks_per_node,
             "fabric.placement": args.placement,
             "fabric.preset": args.preset, "fabric.topology": args.topology,
             "workload.algorithm": args.algorithm, "workload.collective": args.collective,
             "workload.selector": args.selector, "engine": args.engine, "seed": args.seed,
             "fabric.cxl.coherence": args.coherence, "fabric.cxl.switch_levels": args.switch_levels,
             "fabric.cxl.devices": args.devices,
             "workload.chunk": args.chunk, "output.dir": args.output,
             "workload.iterations": args.iterations, "workload.warmup": args.warmup}
    if args.sizes is not None:
        flags["workload.sizes"] = parse_sizes(args.sizes)
    return {k: v for k, v in flags.items() if v is not None}


def main(args) -> int:
    base = config.load(args.scenario) if args.scenario else config.from_dict(DEFAULT_SCENARIO)
    scenario = config.with_overrides(base, _overrides(args))
    _, seed = make_rng(scenario.seed)  # the DES is deterministic; the seed is recorded for provenance
    scenario = resolved(config.with_overrides(scenario, {"seed": seed}))
    rows = run(scenario, progress=not args.quiet and sys.stderr.isatty())
    sys.stdout.write(osu_table(scenario, rows))
    for note in sorted({r["note"] for r in rows if r["note"]}):
        print(f"# note: {note}")
    out = scenario.output.dir
    workspace = Workspace(out) if out else Workspace.new("runs", scenario.name)
    workspace.write_config(config.to_dict(scenario))
    workspace.write_provenance(seed)
    columns = ["size_bytes", "latency_us", "algorithm", "note", "engine", "events"]
    workspace.write_csv("latency", rows, columns)
    workspace.write_json("latency", [{k: r[k] for k in columns + ["wall_s"]} for r in rows])
    if scenario.output.plot:
        _plot(workspace, scenario, rows)
    print(f"# workspace: {workspace.path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="project a collective's latency on a simulated network fabric",
        description="Project the latency of a collective (default: allgather) on a simulated fabric. "
                    "Without SCENARIO.yaml the defaults are: preset ib-hdr, 8 nodes, 1 rank per node, "
                    "star topology, sizes 1B:1MiB, algorithm auto (MPICH's selector), DES engine.")
    p.add_argument("scenario", nargs="?", help="scenario YAML file (optional)")
    p.add_argument("--nodes", type=int, help="number of hosts (default 8)")
    p.add_argument("--ranks-per-node", type=int, help="ranks on each host (default 1)")
    p.add_argument("--placement", choices=["block", "round_robin"],
                   help="ranks on hosts: block (default; consecutive ranks share a host) or round_robin")
    p.add_argument("--preset", help=f"fabric preset: {', '.join(sorted(PRESETS))} (default ib-hdr), a CXL pool: "
                                    f"{', '.join(sorted(CXL_PRESETS))} (algorithm cxl_pool or cxl_pool_zero_copy), "
                                    "or a calibration profile PATH.json written by 'cxlsim calibrate'")
    p.add_argument("--coherence", choices=["hw", "flush"],
                   help="CXL pool coherence (default: hw if the preset has it, else flush)")
    p.add_argument("--switch-levels", type=int, choices=[1, 2],
                   help="CXL switch levels (default: 1 if the hosts fit on one switch, else 2)")
    p.add_argument("--devices", type=int, help="CXL pool devices, interleaved (default 1)")
    p.add_argument("--topology", help="star (default), fat_tree (set hosts_per_leaf and oversubscription in a "
                                      "scenario file), or a .yaml/.graphml topology file")
    p.add_argument("--collective", help="allgather (default), allreduce, reduce_scatter, broadcast, gather")
    p.add_argument("--algorithm", help="algorithm name, or 'auto' for the library selector")
    p.add_argument("--selector", help="library whose default choice 'auto' mimics: mpich or ompi")
    p.add_argument("--sizes", help="message sizes: 'LO:HI' doubling (e.g. 1B:1MiB) or 'A,B,C'; bytes per rank "
                                   "for allgather and gather, the whole vector for the others (default 1B:1MiB)")
    p.add_argument("--chunk", help="pipelining chunk size (e.g. 64KiB; default 64 KiB)")
    p.add_argument("--engine", choices=["des", "analytic"], help="des (default) or the closed forms")
    p.add_argument("--iterations", type=int, help="DES: timed back-to-back calls; the latency is per call, as "
                                                  "OSU reports it (default 1: one call on a fresh fabric)")
    p.add_argument("--warmup", type=int, help="DES: untimed calls before the timed ones (default 0)")
    p.add_argument("--seed", type=int, help="random seed to record (drawn if not given)")
    p.add_argument("--output", help="workspace directory (default runs/NAME-TIMESTAMP)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)
