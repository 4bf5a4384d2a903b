"""The simulation runner and the `cxlsim simulate` command.

`run(scenario)` turns a validated `cxlsim.config.Scenario` into one projected
latency per message size:
1. find the preset `fabric.preset` names (`find_preset`): a registered network
   or CXL pool preset (`cxlsim.fabric.preset`, plug-ins included) or a
   calibration profile PATH.json (`cxlsim.calibrate.project`);
2. refuse every scenario key the preset does not use (`unused_keys`): each
   preset kind declares its keys, and a setting it would ignore is an error
   naming the key and the kinds it applies to;
3. elaborate the fabric (`Preset.elaborate`: the preset with the scenario's
   overrides, and the run's choices) and project the collective on it: a network
   by `cxlsim.projection.run_network`, a CXL pool by its pool algorithms
   (`cxl_pool`, `cxl_pool_zero_copy`; 'auto' means `cxl_pool`) on a
   `CXLPoolTransport` (DES) or by their closed form on the same transport's
   figures (analytic), a calibration profile as `cxlsim calibrate --profile` does.

`cxlsim simulate [SCENARIO.yaml] [--nodes N ...]` prints an OSU-style table and
writes a run workspace (cxlsim.results) whose config.yaml holds every figure the
run used. A scenario file's keys override DEFAULT_SCENARIO's, so an empty file,
like no file, is the defaults (`cxlsim simulate --nodes 8 --preset ib-hdr`
just works); flags override both. A flag the preset does not use is refused
like its key.
"""
from __future__ import annotations

import copy
import dataclasses
import sys

from cxlsim import config
from cxlsim.calibrate.project import PROFILE_KEYS, ProfilePreset, ProfileSetup, is_profile, run_profile
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_setup import CXLSetup
from cxlsim.fabric import stats as fabric_stats
from cxlsim.fabric.cxl_presets import BUILTIN_CXL_PRESETS
from cxlsim.fabric.network_setup import NetworkSetup
from cxlsim.fabric.pod_setup import PodsSetup
from cxlsim.fabric.preset import COMMON_KEYS, Preset, covers, find, presets, unused, uses
from cxlsim.fabric.presets import BUILTIN_NETWORK_PRESETS
from cxlsim.hybrid_projection import run_hybrid
from cxlsim.projection import run_network, run_pool
from cxlsim.results import Workspace, make_rng
from cxlsim.units import format_size, parse_option, parse_sizes

__all__ = ["DEFAULT_SCENARIO", "FLAGS", "SIZELESS", "find_preset", "unused_keys", "applies_to", "elaborate", "resolved",
           "run", "osu_table", "register"]

DEFAULT_SCENARIO = {
    "name": "simulate",
    "fabric": {"preset": "ib-hdr", "nodes": 8},
    "workload": {"collective": "allgather", "algorithm": "auto", "sizes": "1B:1MiB"},
}
"""The scenario a scenario file's keys override (and that runs when no file is given)."""

FLAGS = {"fabric.nodes": "--nodes", "fabric.ranks_per_node": "--ranks-per-node", "fabric.placement": "--placement",
         "fabric.preset": "--preset", "fabric.topology": "--topology", "workload.algorithm": "--algorithm",
         "workload.collective": "--collective", "workload.selector": "--selector", "engine": "--engine",
         "seed": "--seed", "fabric.cxl.coherence": "--coherence", "fabric.cxl.switch_levels": "--switch-levels",
         "fabric.cxl.devices": "--devices", "workload.chunk": "--chunk", "output.dir": "--output",
         "workload.iterations": "--iterations", "workload.warmup": "--warmup", "workload.sizes": "--sizes"}
"""The scenario key each `cxlsim simulate` option sets."""

SIZELESS = ("barrier",)
"""Collectives without a size: `cxlsim simulate` prints their one row at size 0 and refuses sizes."""


def find_preset(name: str) -> Preset:
    """The preset `fabric.preset` names: a calibration profile PATH.json, or a registered preset."""
    return ProfilePreset.load(name) if is_profile(name) else find(name)


def _kinds() -> dict:
    """{kind: its scenario keys} over the registered presets' kinds and the calibration profiles'."""
    kinds = {}
    for preset in presets().values():
        kinds.setdefault(preset.kind, tuple(preset.scenario_keys))
    for profile_kind, keys in PROFILE_KEYS.items():
        kinds.setdefault(ProfilePreset.kind_of[profile_kind], keys)
    return kinds


def applies_to(key: str) -> list[str]:
    """The preset kinds that use the dotted scenario `key` (one table: the kinds' own declarations)."""
    if covers(COMMON_KEYS, key):
        return ["every preset"]
    return [f"{kind}s" for kind, keys in _kinds().items() if covers(keys, key)]


def _refuse(preset: Preset, keys: list[str], flags: dict) -> None:
    """InputError naming each of `keys` (as its CLI option when `flags` maps it) and what it applies to."""
    if not keys:
        return
    groups = {}  # what they apply to -> the keys (as the user gave them)
    for key in keys:
        groups.setdefault(" and ".join(applies_to(key)) or "no preset", []).append(flags.get(key, key))
    clauses = [f"{'it' if len(keys) == 1 else ' and '.join(names)} appl{'ies' if len(names) == 1 else 'y'} to "
               f"{kinds}" for kinds, names in groups.items()]
    given = ", ".join(f"{flags[k]} ({k})" if k in flags else k for k in keys)
    raise InputError(f"{given}: the {preset.kind} {preset.name} does not use {'it' if len(keys) == 1 else 'them'} "
                     f"({'; '.join(clauses)}); remove {'it' if len(keys) == 1 else 'them'}")


def unused_keys(scenario: dict) -> list[str]:
    """The dotted keys a raw scenario mapping (as from YAML) sets that its preset does not use.

    A key is set when it is present with a value other than None. The preset is the mapping's
    `fabric.preset` (none: [], the schema reports it missing); an unknown preset or unreadable
    profile is an InputError naming it. Keys the schema does not know are left to
    `cxlsim.config.from_dict`. `cxlsim simulate` refuses a scenario for which this is not empty.
    """
    name = (scenario.get("fabric") or {}).get("preset") if isinstance(scenario, dict) else None
    if not isinstance(name, str) or not name:
        return []
    return unused(find_preset(name), config.set_keys(scenario))


def elaborate(scenario: config.Scenario):
    """(preset, setup) of a validated scenario: its preset, refusing any key it does not use that the
    scenario sets away from its default, and the fabric elaborated for the run."""
    preset = find_preset(scenario.fabric.preset)
    _refuse(preset, unused(preset, config.changed_keys(scenario)), {})
    return preset, preset.elaborate(scenario.fabric)


def resolved(scenario: config.Scenario) -> config.Scenario:
    """The scenario with every preset figure written out, so the run does not depend on the preset table."""
    _, setup = elaborate(scenario)
    return config.with_overrides(scenario, setup.written_out())


def _used_only(data: dict, preset: Preset, path: str = "") -> dict:
    """`data` (a config's YAML form) without the keys `preset` does not use."""
    out = {}
    for key, value in data.items():
        dotted = f"{path}.{key}" if path else key
        if isinstance(value, dict):
            kept = _used_only(value, preset, dotted)
            if kept:
                out[key] = kept
        elif uses(preset, dotted):
            out[key] = value
    return out


RUNNERS = {NetworkSetup: run_network, CXLSetup: run_pool, PodsSetup: run_hybrid, ProfileSetup: run_profile}
"""How each kind of elaborated fabric projects a scenario: runner(scenario, setup, bar) -> rows."""


STATS_RUNNERS = (run_network, run_pool, run_hybrid)
"""The runners that count per-port and pool statistics (`stats=`)."""


def run(scenario: config.Scenario, progress: bool = False, stats: list | None = None) -> list[dict]:
    """One row per size: size_bytes, latency_us, algorithm, note, engine, events, wall_s.

    With `workload.iterations` (and `warmup`) the DES makes back-to-back calls and
    latency_us is the time per timed call; the closed forms cost one call only.
    stats: a list that gets (size_bytes, `cxlsim.fabric.stats.RunStats`) per size; DES runs on a
    network or CXL pool only (InputError otherwise).
    """
    wl = scenario.workload
    if scenario.engine == "analytic" and (wl.iterations, wl.warmup) != (1, 0):
        raise InputError(f"workload.iterations: the closed forms cost one call on a fresh fabric; back-to-back "
                         f"calls (iterations {wl.iterations}, warmup {wl.warmup}) need engine: des")
    _, setup = elaborate(scenario)
    runner = next((r for kind, r in RUNNERS.items() if isinstance(setup, kind)), None)
    if runner is None:
        raise InputError(f"fabric.preset: {scenario.fabric.preset} elaborates to a {type(setup).__name__}, which no "
                         f"runner projects; expected one of {', '.join(k.__name__ for k in RUNNERS)}")
    extra = {}
    if stats is not None:
        if scenario.engine != "des":
            raise InputError("--stats: the statistics count what the DES did on each port; engine analytic "
                             "evaluates closed forms and runs no fabric (use --engine des)")
        if runner not in STATS_RUNNERS:
            raise InputError(f"--stats: counted on network, CXL pool and hybrid pod fabrics; {scenario.fabric.preset} "
                             f"elaborates to a {type(setup).__name__}")
        extra["stats"] = stats
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(scenario.workload.sizes_bytes), desc="simulate", unit="size", file=sys.stderr,
                   leave=False)
    try:
        return runner(scenario, setup, bar, **extra)
    finally:
        if bar:
            bar.close()


def osu_table(scenario: config.Scenario, rows: list[dict]) -> str:
    """OSU-format text: '#' header lines, then the columns 'Size  Avg Latency(us)'."""
    spans = []  # (first size, last size, algorithm) runs
    for row in rows:
        if spans and spans[-1][2] == row["algorithm"]:
            spans[-1][1] = row["size_bytes"]
        else:
            spans.append([row["size_bytes"], row["size_bytes"], row["algorithm"]])
    algos = "; ".join(f"{format_size(a)}{'' if a == b else '-' + format_size(b)} {name}" for a, b, name in spans)
    where = elaborate(scenario)[1].describe(scenario.fabric.nodes)
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
    """{dotted key: value} of the options given on the command line."""
    given = {key: getattr(args, flag[2:].replace("-", "_")) for key, flag in FLAGS.items()}
    given["workload.sizes"] = parse_option("--sizes", given["workload.sizes"], parse_sizes)
    return {k: v for k, v in given.items() if v is not None}


def _layered(base: dict, top: dict) -> dict:
    """`top` (a nested mapping) over `base`, key by key."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _layered(out[key], value)
        else:
            out[key] = value
    return out


def _sizeless(data: dict, file_keys: dict, overrides: dict) -> None:
    """A barrier moves no data: its one row is size 0, and sizes given by the file or `--sizes` are
    refused (naming where they came from) rather than each printed as the same row."""
    workload = data.get("workload")
    if not isinstance(workload, dict) or workload.get("collective") not in SIZELESS:
        return
    if "workload.sizes" in overrides:
        raise InputError(f"--sizes (workload.sizes): a {workload['collective']} moves no data and takes no size; "
                         "remove it")
    if isinstance(file_keys.get("workload"), dict) and file_keys["workload"].get("sizes") is not None:
        raise InputError(f"workload.sizes: a {workload['collective']} moves no data and takes no size; "
                         "remove it from the scenario file")
    workload["sizes"] = "0"


def scenario_from(path: str | None, overrides: dict) -> tuple[config.Scenario, Preset]:
    """The scenario `cxlsim simulate` runs: the file's keys over DEFAULT_SCENARIO, then `overrides`
    (dotted keys), validated; every set key the preset does not use is refused, named by its flag.
    A barrier runs at size 0 only (`SIZELESS`)."""
    file_keys = config.load_yaml(path, "scenario file") if path else {}
    data = _layered(DEFAULT_SCENARIO, file_keys)
    if not isinstance(data, dict):
        raise config.ConfigError(f"scenario file {path!r}: expected a mapping of keys, got {data!r}")
    for dotted, value in overrides.items():
        node = data
        *sections, last = dotted.split(".")
        for key in sections:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[last] = value
    _sizeless(data, file_keys if isinstance(file_keys, dict) else {}, overrides)
    scenario = config.from_dict(data)
    preset = find_preset(scenario.fabric.preset)
    _refuse(preset, unused(preset, config.set_keys(data)), {k: FLAGS[k] for k in overrides})
    return scenario, preset


def main(args) -> int:
    scenario, preset = scenario_from(args.scenario, _overrides(args))
    _, seed = make_rng(scenario.seed)  # the DES is deterministic; the seed is recorded for provenance
    scenario = resolved(config.with_overrides(scenario, {"seed": seed}))
    stats = [] if args.stats else None
    rows = run(scenario, progress=not args.quiet and sys.stderr.isatty(), stats=stats)
    sys.stdout.write(osu_table(scenario, rows))
    for note in sorted({r["note"] for r in rows if r["note"]}):
        print(f"# note: {note}")
    if stats:
        print("\n".join(fabric_stats.summary(stats)))
    out = scenario.output.dir
    workspace = Workspace(out) if out else Workspace.new("runs", scenario.name)
    workspace.write_config(_used_only(config.to_dict(scenario), preset))
    workspace.write_provenance(seed)
    columns = ["size_bytes", "latency_us", "algorithm", "note", "engine", "events"]
    workspace.write_csv("latency", rows, columns)
    workspace.write_json("latency", [{k: r[k] for k in columns + ["wall_s"]} for r in rows])
    if stats:
        workspace.write_csv("stats", [{"size_bytes": size, **row} for size, s in stats for row in s.rows()],
                            ["size_bytes", *fabric_stats.PORT_COLUMNS])
        workspace.write_json("stats", [{"size_bytes": size, "elapsed_ns": s.elapsed_ns,
                                        "pool": dataclasses.asdict(s.pool) if s.pool else None,
                                        "ports": s.rows()} for size, s in stats])
    if scenario.output.plot:
        _plot(workspace, scenario, rows)
    print(f"# workspace: {workspace.path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="project a collective's latency on a simulated network fabric",
        description="Project the latency of a collective (default: allgather) on a simulated fabric. "
                    "The defaults, which a SCENARIO.yaml's keys and then the options override: preset ib-hdr, "
                    "8 nodes, 1 rank per node, star topology, sizes 1B:1MiB, algorithm auto (MPICH's "
                    "selector), DES engine. A key or option the preset does not use is an error.")
    p.add_argument("scenario", nargs="?", help="scenario YAML file (optional)")
    p.add_argument("--nodes", type=int, help="number of hosts (default 8)")
    p.add_argument("--ranks-per-node", type=int, help="ranks on each host (default 1)")
    p.add_argument("--placement", choices=["block", "round_robin"],
                   help="ranks on hosts: block (default; consecutive ranks share a host) or round_robin")
    p.add_argument("--preset", help="fabric preset (default ib-hdr): a network preset "
                                    f"({', '.join(p.name for p in BUILTIN_NETWORK_PRESETS)}), a CXL pool preset "
                                    f"({', '.join(p.name for p in BUILTIN_CXL_PRESETS)}; algorithm cxl_pool or "
                                    "cxl_pool_zero_copy), the hybrid pod fabric cxl-pods (fabric.pods in a scenario file; "
                                    "docs/hybrid.md), a plug-in's preset (CXLSIM_PLUGINS), or a calibration "
                                    "profile PATH.json written by 'cxlsim calibrate'; an option the preset does "
                                    "not use is an error")
    p.add_argument("--coherence", choices=list(Coherence.names()),
                   help="CXL pool coherence (default: hw if the preset has it, else flush)")
    p.add_argument("--switch-levels", type=int, choices=[1, 2],
                   help="CXL switch levels (default: 1 if the hosts fit on one switch, else 2)")
    p.add_argument("--devices", type=int, help="CXL pool devices, interleaved (default 1)")
    p.add_argument("--topology", help="star (default), fat_tree (set hosts_per_leaf and oversubscription in a "
                                      "scenario file), or a .yaml/.graphml topology file")
    p.add_argument("--collective", help="allgather (default), allreduce, reduce_scatter, broadcast, gather, "
                                         "scatter, reduce, alltoall or barrier (on a CXL pool: the pool's own algorithms "
                                         "for allgather, allreduce, reduce_scatter, broadcast, alltoall, barrier)")
    p.add_argument("--algorithm", help="algorithm name, or 'auto' for the library selector")
    p.add_argument("--selector", help="library whose default choice 'auto' mimics: mpich or ompi")
    p.add_argument("--sizes", help="message sizes: 'LO:HI' doubling (e.g. 1B:1MiB) or 'A,B,C'; bytes per rank "
                                   "for allgather and gather, the whole vector for the others (default 1B:1MiB; "
                                   "a barrier takes none and prints one row)")
    p.add_argument("--chunk", help="pipelining chunk size (e.g. 64KiB; default 64 KiB)")
    p.add_argument("--engine", choices=["des", "analytic"], help="des (default) or the closed forms")
    p.add_argument("--iterations", type=int, help="DES: timed back-to-back calls; the latency is per call, as "
                                                  "OSU reports it (default 1: one call on a fresh fabric)")
    p.add_argument("--warmup", type=int, help="DES: untimed calls before the timed ones (default 0)")
    p.add_argument("--seed", type=int, help="random seed to record (drawn if not given)")
    p.add_argument("--output", help="workspace directory (default runs/NAME-TIMESTAMP)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--stats", action="store_true",
                   help="DES: print per size the busiest port (utilisation, bytes, peak queue) and a pool's "
                        "back-invalidation snoops, recalls and snoop-filter evictions; every port's figures go "
                        "to stats.csv and stats.json in the workspace")
    p.set_defaults(func=main)
