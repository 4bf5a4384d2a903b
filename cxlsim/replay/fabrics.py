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
Calibration profiles (PATH.json) are refused: a profile projects one
collective, not a whole application's messages.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable

from cxlsim import config, simulate
from cxlsim.errors import InputError
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.pod_setup import PodsSetup
from cxlsim.fabric.transport import NetworkTransport

__all__ = ["Fabric", "RankMap", "rank_map", "resolve"]

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
    """Trace ranks per host (tuples, hosts in order), for hierarchical algorithms."""


def _scenario(spec: str, ranks: int, ranks_per_node: int | None):
    if spec.endswith(".json"):
        raise InputError(f"--fabric {spec}: a calibration profile projects one collective, not an application's "
                         "messages; give a preset or a scenario file")
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
        if ranks_per_node is not None:
            overrides["fabric.ranks_per_node"] = ranks_per_node
        label = os.path.splitext(os.path.basename(spec))[0]
        return label, simulate.scenario_from(spec, overrides)[0], rpn
    rpn = ranks_per_node or 1
    overrides = {"fabric.preset": spec, "fabric.nodes": math.ceil(ranks / rpn)}
    if rpn != 1:
        overrides["fabric.ranks_per_node"] = rpn
    return spec, simulate.scenario_from(None, overrides)[0], rpn


def _one_rank_per_host(spec: str, what: str, placement: str, rpn: int) -> None:
    if placement not in ("block", "round_robin") or rpn != 1:
        raise InputError(f"--fabric {spec}: {what} runs one rank per host; --placement and --ranks-per-node "
                         "do not apply")


def resolve(spec: str, ranks: int, placement: str = "block", ranks_per_node: int | None = None) -> Fabric:
    """The Fabric of `--fabric spec` for a trace of `ranks` ranks."""
    label, scenario, rpn = _scenario(spec, ranks, ranks_per_node)
    try:
        _, setup = simulate.elaborate(scenario)
    except InputError as exc:
        raise InputError(f"--fabric {spec}: {exc}") from None
    hosts = scenario.fabric.nodes
    chunk = scenario.workload.chunk_bytes
    if isinstance(setup, PodsSetup):  # pods of hosts on CXL pools, joined by a network
        _one_rank_per_host(spec, "a hybrid pod fabric", placement, rpn)
        if hosts != ranks:
            raise InputError(f"--fabric {spec}: the pod fabric has {hosts} hosts (fabric.nodes) and runs one rank "
                             f"per host, but the trace has {ranks} ranks")
        return Fabric(label, "hybrid", setup.describe(hosts), lambda: setup.new_transport(chunk),
                      tuple(tuple(range(k * setup.hosts, (k + 1) * setup.hosts)) for k in range(setup.pods)))
    if hasattr(setup, "network"):  # a network: NICs, links and switches
        mapping = rank_map(placement, ranks, hosts, rpn)
        where = f"{setup.describe(hosts)}; placement {mapping.policy}"
        return Fabric(label, "network", where, lambda: NetworkTransport(setup.network(), mapping, chunk),
                      tuple(tuple(g) for g in mapping.groups() if g))
    _one_rank_per_host(spec, "a CXL pool", placement, rpn)
    return Fabric(label, "pool", setup.describe(hosts), lambda: setup.new_transport(ranks),
                  tuple((r,) for r in range(ranks)))
