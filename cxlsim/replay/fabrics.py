"""A `--fabric` spec made into the transport a replay runs on, and `--placement` into a rank map.

A spec is a preset name (a network preset such as `ib-hdr`, a CXL pool
preset, or `cxl-pods`, the hybrid pod fabric of 16-host pods), or a scenario file `PATH.yaml` whose `fabric:` section is used (the
topology, overrides and node count; a scenario's `workload:` keys other than
`chunk` and its `engine` are refused, since the trace is the workload). The
fabric is elaborated by `cxlsim.simulate` (`scenario_from`, `elaborate`), so
every key a preset does not use is refused there.

Hosts: a preset gets ceil(P / ranks_per_node) hosts on a star; a scenario file
keeps its `fabric.nodes` (default: the same count) and topology. `--placement`
is `block` (rank r on host r // K), `round_robin` (r % hosts), or a file with
one host index per line, rank order (blank lines and '#' comments skipped).
A network transport places the ranks itself. On a CXL pool or a pod fabric
`Fabric.at` carries the placement (`cxlsim.replay.placed`): on a pool it says
which host of the pool (and of a switch tree's leaves) each rank runs on; on
pods it decides which ranks share a pod. With one rank per host (the default)
there are P hosts and a placement is one-to-one; with K ranks per host there
are P / K hosts (a preset's; a scenario file's `fabric.nodes`), the ranks of a
host share its pool port and NIC, and a placement puts at most K ranks on a
host (`cxlsim.replay.shared_hosts`). There K is `--ranks-per-node`, taken by
the replay, not by the preset (which refuses a scenario file's
`fabric.ranks_per_node`).
A calibration profile (PATH.json, `cxlsim calibrate`) of kind `network` (a
`--from-osu` fit) is a network fabric: its base preset on a star with one LogGP
regime's figures as NIC and link (switch latency 0, so a message costs
o + k*G + L + o, as `cxlsim.calibrate.network_model.project_regime` projects
it). A NIC has one set of figures, so the regime is the one covering
`message_bytes` (the trace's bytes-weighted median point-to-point message,
`typical_message_bytes`) and the description says which; every message size
runs with it. A `local-host` profile alone is refused: it models the emulator's pool
collectives on one host, not messages. `NET.json+LOCAL.json` joins the two for a
trace of the interposition library: the messages on the network profile, the
collectives the library ran on its pool priced by the local-host profile
(`cxlsim.replay.pool_profile`; which ran there: `--library-stats`).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable

from cxlsim import config, simulate
from cxlsim.fabric.preset import uses
from cxlsim.calibrate.profile import load_profile
from cxlsim.errors import InputError
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.pod_setup import PodsSetup
from cxlsim.fabric.transport import NetworkTransport
from cxlsim.loggp import LogGPFit
from cxlsim.replay.placed import check_one_to_one
from cxlsim.replay.pool_profile import PoolPricing
from cxlsim.replay.shared_hosts import SHARED_NOTE, fabric_ranks
from cxlsim.replay.trace import COLLECTIVES

__all__ = ["Fabric", "RankMap", "rank_map", "resolve", "typical_message_bytes"]

_WORKLOAD_KEYS = ("chunk",)


class RankMap(Placement):
    """A placement given host by host: `host_of[r]` is trace rank r's host index."""

    def __init__(self, host_of: list, nodes: int, policy: str):
        self.nodes, self.size, self.policy = nodes, len(host_of), policy
        self.host_of = list(host_of)
        self.ranks_per_node = max((host_of.count(h) for h in range(nodes)), default=1)


def rank_map(spec: str, ranks: int, hosts: int, ranks_per_node: int) -> RankMap:
    """The ranks' hosts for `--placement spec` with `hosts` hosts and `ranks_per_node` ranks per host."""
    if spec in ("block", "round_robin"):
        if hosts * ranks_per_node < ranks:
            raise InputError(f"--placement {spec}: {ranks} ranks do not fit on {hosts} hosts x {ranks_per_node} "
                             "ranks per node")
        host_of = [r // ranks_per_node if spec == "block" else r % hosts for r in range(ranks)]
        return RankMap(host_of, hosts, spec)
    text = config.read_text(spec, "--placement file")
    host_of = []
    for number, raw in enumerate(text.splitlines(), start=1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            host = int(entry)
        except ValueError:
            raise InputError(f"{spec}:{number}: expected a host index (an integer), got {entry!r}") from None
        if not 0 <= host < hosts:
            raise InputError(f"{spec}:{number}: host {host} of rank {len(host_of)}: the fabric has hosts "
                             f"0..{hosts - 1}")
        host_of.append(host)
    if len(host_of) != ranks:
        raise InputError(f"--placement {spec}: lists {len(host_of)} ranks, the trace has {ranks}")
    return RankMap(host_of, hosts, os.path.basename(spec))


@dataclass
class Fabric:
    """One fabric to replay on."""

    label: str
    kind: str
    """'network', 'pool' or 'hybrid' (the transport's kind)."""
    describe: str
    make: Callable
    """make() -> a fresh transport with one rank per trace rank."""
    groups: tuple = field(default=())
    """Fabric ranks per host (tuples, hosts in order), for hierarchical algorithms."""
    at: tuple = field(default=())
    """Pool and pod fabrics: trace rank r runs as fabric rank at[r] (`cxlsim.replay.placed`); () on a network,
    whose transport places the ranks itself (then fabric ranks are trace ranks)."""
    priced: PoolPricing | None = None
    """`NET.json+LOCAL.json`: the collectives priced by the local-host profile (`cxlsim.replay.pool_profile`)."""


def typical_message_bytes(trace) -> int:
    """The bytes-weighted median point-to-point message of `trace` (half its bytes go in messages no larger);
    without point-to-point, the same over its collectives' sizes; 0 for neither."""
    sizes = [c.size_bytes for calls in trace.ranks for c in calls if c.kind in ("send", "isend", "sendrecv")]
    if not sizes:
        sizes = [c.size_bytes for c in trace.ranks[0] if c.kind in COLLECTIVES]
    sizes = sorted(s for s in sizes if s > 0)
    half, run = sum(sizes) / 2, 0
    for s in sizes:
        run += s
        if run >= half:
            return s
    return 0


def _profile_terms_note(model: dict) -> str:
    """What of a --from-osu fit the replay's messages do not use, or use as fitted (said beside the result)."""
    parts = []
    exchange = model.get("exchange") or {}
    if exchange.get("contention") or exchange.get("fin_ns"):
        parts.append("its collectives' exchange terms (two-way contention, rendezvous FIN) are not applied: "
                     "each message costs the LogGP line alone")
    if model.get("own_copy_in_line"):
        parts.append("its line was fitted on rewritten send buffers, so each message carries the cost of "
                     "sending freshly written data")
    return "".join(f"; {p}" for p in parts)


def _profile(spec: str, ranks: int, ranks_per_node: int | None, message_bytes: int):
    """(label, scenario, ranks per node, note) of a network calibration profile (see the module docstring)."""
    profile = load_profile(spec)
    if profile["kind"] != "network":
        raise InputError(f"--fabric {spec}: a {profile['kind']} profile models the emulator's pool collectives on "
                         "one host, not an application's messages; give a network profile (cxlsim calibrate "
                         "--from-osu), a preset or a scenario file, or join them as NET.json+LOCAL.json (the "
                         "messages on the network profile, the library's pool collectives on the local-host one)")
    model = profile["model"]
    regime = LogGPFit.from_dict(model["loggp"]).regime_for(message_bytes)
    g = regime.gap_per_byte_ns
    rpn = ranks_per_node or 1
    fabric = {"preset": model["base_preset"], "nodes": math.ceil(ranks / rpn), "topology": "star",
              "ranks_per_node": rpn,
              "links": {"latency": f"{regime.latency_ns / 2!r} ns", "bandwidth": f"{(1.0 / g if g > 0 else 1e6)!r} GB/s"},
              "switch": {"latency": "0 ns"},
              "nic": {"overhead": f"{regime.overhead_ns!r} ns", "gap": f"{regime.gap_ns!r} ns",
                      "gap_per_byte": f"{g!r} ns"}}
    note = (f"network profile {os.path.basename(spec)} (fitted at np {model['np']}): its LogGP regime "
            f"{regime.min_size_bytes}..{regime.max_size_bytes} B (L {regime.latency_ns:.0f} ns, o = g "
            f"{regime.overhead_ns:.0f} ns, G {g:.5f} ns/B), chosen for the trace's typical message of "
            f"{message_bytes} B, for every message" + _profile_terms_note(model))
    scenario = config.from_dict({"name": "replay-network-profile", "fabric": fabric})
    return os.path.splitext(os.path.basename(spec))[0], scenario, rpn, note


def _scenario(spec: str, ranks: int, ranks_per_node: int | None, message_bytes: int = 0):
    if spec.endswith(".json"):
        return _profile(spec, ranks, ranks_per_node, message_bytes)
    if spec.endswith((".yaml", ".yml")):
        if not os.path.isfile(spec):
            raise InputError(f"--fabric: no scenario file {spec!r}")
        raw = config.load_yaml(spec, "scenario file")
        raw = raw if isinstance(raw, dict) else {}
        extra = [f"workload.{k}" for k in (raw.get("workload") or {}) if k not in _WORKLOAD_KEYS]
        extra += ["engine"] if "engine" in raw else []
        if extra:
            raise InputError(f"--fabric {spec}: {extra[0]}: the trace is the workload; a replay uses only the "
                             f"scenario's fabric section (and workload.chunk); remove {', '.join(extra)}")
        fabric = raw.get("fabric") or {}
        rpn = ranks_per_node or fabric.get("ranks_per_node") or 1
        overrides = {} if "nodes" in fabric else {"fabric.nodes": math.ceil(ranks / rpn)}
        if ranks_per_node is not None and (ranks_per_node == 1 or _places_ranks(
                simulate.scenario_from(spec, overrides)[0].fabric.preset)):
            overrides["fabric.ranks_per_node"] = ranks_per_node  # (the replay places a pool's or pods' ranks)
        label = os.path.splitext(os.path.basename(spec))[0]
        return label, simulate.scenario_from(spec, overrides)[0], rpn, ""
    rpn = ranks_per_node or 1
    overrides = {"fabric.preset": spec, "fabric.nodes": math.ceil(ranks / rpn)}
    if rpn != 1 and _places_ranks(spec):
        overrides["fabric.ranks_per_node"] = rpn
    return spec, simulate.scenario_from(None, overrides)[0], rpn, ""


def _places_ranks(preset_name: str) -> bool:
    """True if the preset places several ranks per host itself (a network's `fabric.ranks_per_node`); False for a
    pool or pods, whose ranks per host the replay places (`cxlsim.replay.shared_hosts`)."""
    return uses(simulate.find_preset(preset_name), "fabric.ranks_per_node")


def _one_to_one(placement: str, ranks: int) -> RankMap:
    """`--placement` on a fabric of one rank per host (`ranks` hosts): a one-to-one RankMap."""
    mapping = rank_map(placement, ranks, ranks, 1)
    check_one_to_one(mapping.host_of, ranks, f"--placement {placement}")
    return mapping


def _joined(spec: str, ranks: int, placement: str, ranks_per_node: int | None, message_bytes: int,
            trace, library_stats: dict | None) -> Fabric:
    """`NET.json+LOCAL.json`: the network profile's Fabric with the local-host profile pricing the pool
    collectives (`cxlsim.replay.pool_profile`)."""
    network, _, local = spec.partition("+")
    if not (network.endswith(".json") and local.endswith(".json")):
        raise InputError(f"--fabric {spec}: expected NET.json+LOCAL.json (a --from-osu network profile and a "
                         "local-host profile)")
    if load_profile(network)["kind"] != "network":
        raise InputError(f"--fabric {spec}: the part before '+' carries the messages: expected a network profile "
                         "(cxlsim calibrate --from-osu)")
    if (ranks_per_node or 1) != 1:
        raise InputError(f"--ranks-per-node: {spec} models one host's ranks, one per CPU; remove the option")
    fab = resolve(network, ranks, placement, None, message_bytes)
    priced = PoolPricing(local, ranks, library_stats, trace)
    label = f"{fab.label}+{os.path.splitext(os.path.basename(local))[0]}"
    return Fabric(label, fab.kind, f"{fab.describe}; {priced.describe()}", fab.make, fab.groups, fab.at, priced)


def resolve(spec: str, ranks: int, placement: str = "block", ranks_per_node: int | None = None,
            message_bytes: int = 0, trace=None, library_stats: dict | None = None) -> Fabric:
    """The Fabric of `--fabric spec` for a trace of `ranks` ranks (`message_bytes`: a network profile's
    regime is the one covering it; `trace` and `library_stats`, `cxlsim.replay.pool_profile.read_library_stats`,
    for a joined `NET.json+LOCAL.json`)."""
    if ".json+" in spec:
        return _joined(spec, ranks, placement, ranks_per_node, message_bytes, trace, library_stats)
    label, scenario, rpn, note = _scenario(spec, ranks, ranks_per_node, message_bytes)
    try:
        _, setup = simulate.elaborate(scenario)
    except InputError as exc:
        raise InputError(f"--fabric {spec}: {exc}") from None
    hosts = scenario.fabric.nodes
    chunk = scenario.workload.chunk_bytes
    if isinstance(setup, PodsSetup) and rpn > 1:  # pods whose hosts run rpn ranks each
        mapping = rank_map(placement, ranks, hosts, rpn)
        at = fabric_ranks(mapping.host_of, hosts, rpn, f"--placement {placement}")
        if setup.design:
            raise InputError("--fabric: sparse (Octopus) pods are not replayed: their pools run only the allgather")
        q = setup.hosts * rpn
        return Fabric(label, "hybrid", f"{setup.describe(hosts, rpn)}; placement {mapping.policy}; {SHARED_NOTE}",
                      lambda: setup.new_transport(chunk, rpn),
                      tuple(tuple(range(k * q, (k + 1) * q)) for k in range(setup.pods)), at)
    if isinstance(setup, PodsSetup):  # pods of hosts on CXL pools, joined by a network
        if hosts != ranks:
            raise InputError(f"--fabric {spec}: the pod fabric has {hosts} hosts (fabric.nodes) and runs one rank "
                             f"per host, but the trace has {ranks} ranks")
        mapping = _one_to_one(placement, ranks)
        return Fabric(label, "hybrid", f"{setup.describe(hosts)}; placement {mapping.policy}",
                      lambda: setup.new_transport(chunk),
                      tuple(tuple(range(k * setup.hosts, (k + 1) * setup.hosts)) for k in range(setup.pods)),
                      tuple(mapping.host_of))
    if hasattr(setup, "network"):  # a network: NICs, links and switches
        mapping = rank_map(placement, ranks, hosts, rpn)
        where = f"{setup.describe(hosts)}; placement {mapping.policy}" + (f"; {note}" if note else "")
        return Fabric(label, "network", where, lambda: NetworkTransport(setup.network(), mapping, chunk),
                      tuple(tuple(g) for g in mapping.groups() if g))
    if rpn > 1:  # a pool whose hosts run rpn ranks each
        mapping = rank_map(placement, ranks, hosts, rpn)
        at = fabric_ranks(mapping.host_of, hosts, rpn, f"--placement {placement}")
        return Fabric(label, "pool", f"{setup.describe(hosts, rpn)}; placement {mapping.policy}; {SHARED_NOTE}",
                      lambda: setup.new_transport(hosts, rpn),
                      tuple(tuple(range(h * rpn, (h + 1) * rpn)) for h in range(hosts)), at)
    mapping = _one_to_one(placement, ranks)
    return Fabric(label, "pool", f"{setup.describe(ranks)}; placement {mapping.policy}",
                  lambda: setup.new_transport(ranks), tuple((r,) for r in range(ranks)), tuple(mapping.host_of))
