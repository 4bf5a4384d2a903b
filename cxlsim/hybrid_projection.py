"""A collective projected on a hybrid pod fabric (`cxl-pods`): the pods' pools and the network, or the network alone.

`run_hybrid(scenario, setup)` takes a validated scenario and its elaborated fabric
(`cxlsim.fabric.pod_setup.PodsSetup`) and gives one row per size, as
`cxlsim.projection.run_network` does. It runs allgather, allreduce, broadcast and alltoall.
`workload.algorithm` picks what runs:

- `pods`: the hierarchical collective over the pods
  (`cxlsim.models.collectives.hierarchical_pods`): pool phases inside every pod and one
  multi-leader network phase between pods, its algorithm the `workload.selector` library's
  choice for n pods and the phase's size;
- a network algorithm (`ring`, `bruck`, ...): on the network alone, every host one rank;
- `auto`: per size, whichever of the two is faster by their closed forms (`pods`, or the
  selector's network algorithm on every host). The selector thus decides by size whether the
  pod pools are worth using.

`engine: analytic` evaluates the closed forms; `engine: des` simulates the chosen algorithm
(the pods in one SimPy environment with the network, `cxlsim.fabric.pods.PodsTransport`) and
checks every rank's payload labels. A `pods` row notes where its form is not exact
(`form_note`): on a fat tree (every network message charged the longest route, no shared
uplinks), a broadcast whose network algorithm has no per-rank form, a pool whose hosts together
outrun one device, unaligned pool columns (`hierarchical_pods` says why). `stats`, a list, gets (size_bytes, `cxlsim.fabric.stats.RunStats`)
per DES run: the network's ports and every pod's (`cxlsim.fabric.pod_stats`), or the network's
alone when the network algorithm ran. Units: ns inside, us in the rows.
"""
from __future__ import annotations

import time

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError, RunError
from cxlsim.fabric import stats as fabric_stats
from cxlsim.fabric.cxl import line_span
from cxlsim.fabric.pod_stats import collect_pods
from cxlsim.models.collectives import analytic, registry, runner
from cxlsim.models.collectives.broadcast_ends import ENDS
from cxlsim.models.collectives.hierarchical_pods import PODS_COLLECTIVES, PodFigures, phase_sizes, sparse_allreduce_first
from cxlsim.models.collectives.registry import check_transport, lookup
from cxlsim.models.collectives.selectors import select

__all__ = ["PODS", "PODS_RECORDS", "run_hybrid", "choose", "form_note"]

PODS = "pods"
"""The hierarchical pods collectives' name."""

PODS_RECORDS = {c: registry.algorithm(c, PODS) for c in PODS_COLLECTIVES}
"""The `pods` record of each collective in `hierarchical_pods.PODS_COLLECTIVES`."""

_FAT_TREE = ("approximate: on a fat tree the closed form charges every network message the longest route and "
             "no shared uplinks (use the DES)")
_BROADCAST = ("approximate: the network algorithm between pods has no per-rank form (broadcast_ends), so the form "
              "takes each phase to start on every rank together; use the DES")
_QUEUED = ("approximate: the pool phases' forms leave out queueing (exact on one switch or none with q x host "
           "bandwidth within one device's; several devices share the load by chunk, but the flags and small "
           "slots all fall on the first); use the DES")
_QUEUED_BROADCAST = ("within 1%: the hw pool broadcast's form leaves out queueing (as measured on pods of 8-16 "
                     "hosts on 1-3 devices, 1 B-1 MiB: up to 0.9% at 1 MiB on 16 hosts of one cxl3-pool device); "
                     "use the DES")
_COLUMNS = ("within 0.5%: the pool phase's columns span different line counts, and the DES's order of equal "
            "times decides which rank polls last (the form takes every rank as the last)")


def form_note(collective: str, fig: PodFigures, size: int, star: bool, inter: str | None = None) -> str | None:
    """The caveat of the `pods` closed form of `collective` at `size` on this fabric, or None where DES = form;
    `inter` is the broadcast's network algorithm between pods (its name)."""
    if not star:
        return _FAT_TREE
    q = fig.hosts
    if collective == "allgather":
        return None  # the pool allgather's form is exact
    if collective == "allreduce" and fig.heads and sparse_allreduce_first(fig.pool, q, size, fig.heads) == "allgather":
        return None  # a sparse pod's allreduce by allgather: allgathers and a fold
    if collective == "broadcast" and fig.pods > 1 and inter is not None and inter not in ENDS:
        return _BROADCAST
    pool, on_pool = fig.pool, fig.heads or q
    queued = pool.leaf_hosts or on_pool * pool.host_bw_bytes_per_ns > pool.one_device_bw_bytes_per_ns * (1 + 1e-12)
    if collective == "broadcast":  # the pool allgather's and the flush broadcast's forms hold under queueing
        return _QUEUED_BROADCAST if queued and Coherence.parse(pool.coherence) is Coherence.HW else None
    if queued:
        return _QUEUED
    block = (phase_sizes("allreduce", size, q, fig.pods) if collective == "allreduce" else fig.pods * size)
    return None if len({line_span(r * block, block)[1] for r in range(on_pool)}) == 1 else _COLUMNS


class _Forms:
    """The closed forms of one hybrid fabric, with its figures built once."""

    def __init__(self, scenario, setup):
        self.wl, self.setup = scenario.workload, setup
        net = setup.network
        self.cm = analytic.CostModel.from_network(net.network(), self.wl.chunk_bytes)
        self.fig = PodFigures(setup.pool_figures(), self.cm, setup.hosts, setup.pods,
                              heads=len(setup.design[0]) if setup.design else 0)
        self.p = net.placement.size
        self.net_ctx = runner.Context(groups=tuple(map(tuple, net.placement.groups())), root=self.wl.root)
        self._pods = {}

    def inter(self, size: int) -> tuple[str, str | None]:
        """The network phase's algorithm among the pods (the selector's, with its fallback) and a note."""
        c, n = self.wl.collective, self.setup.pods
        name, _ = select(self.wl.selector, c, n, phase_sizes(c, size, self.setup.hosts, n))
        algo, fallback = lookup(c, name, n)
        return algo.name, fallback

    def context(self, inter: str) -> runner.Context:
        return runner.Context(inter=inter, root=self.wl.root)

    def pods(self, size: int, inter: str) -> float:
        key = (size, inter)
        if key not in self._pods:  # choose and the analytic row both need it
            self._pods[key] = PODS_RECORDS[self.wl.collective].cost(self.fig, self.p, size, self.context(inter))
        return self._pods[key]

    def network(self, name: str, size: int) -> tuple[float, str, str | None]:
        return analytic.cost(self.wl.collective, name, self.p, size, self.cm, self.net_ctx)


def choose(forms: _Forms, size: int) -> tuple[str, str]:
    """('pods' or the selector's network algorithm on every host, whichever is faster by closed form; a note)."""
    inter, _ = forms.inter(size)
    name, _ = select(forms.wl.selector, forms.wl.collective, forms.p, size)
    if forms.pods(size, inter) < forms.network(name, size)[0]:
        return PODS, f"auto: pods, faster than the network's {name} by closed form"
    return name, f"auto: the network's {name}, faster than pods by closed form"


def _check(wl, p):
    if wl.collective not in PODS_COLLECTIVES:
        raise InputError(f"workload.collective: a hybrid pod fabric (cxl-pods) runs "
                         f"{', '.join(PODS_COLLECTIVES)}, got {wl.collective!r}")
    if wl.root and wl.collective != "broadcast":
        raise InputError(f"workload.root: applies to broadcast, not {wl.collective}")
    if not 0 <= wl.root < p:
        raise InputError(f"workload.root: expected a rank below P={p}, got {wl.root}")


def run_hybrid(scenario, setup, bar=None, stats: list | None = None) -> list[dict]:
    """One row per size (size_bytes, latency_us, algorithm, note, engine, events, wall_s) on a hybrid fabric."""
    wl = scenario.workload
    forms = _Forms(scenario, setup)
    p = forms.p
    _check(wl, p)
    rows = []
    for size in wl.sizes_bytes:
        start = time.perf_counter()
        name, why = choose(forms, size) if wl.algorithm == "auto" else (wl.algorithm, None)
        notes = [why] if why else []
        if name == PODS:
            inter, fallback = forms.inter(size)
            notes += [f"between pods: {inter}" + (f" ({fallback})" if fallback else "") if setup.pods > 1
                      else "one pod: no network phase"]
            ctx = forms.context(inter)
            if scenario.engine == "analytic":
                latency_ns, used, events = forms.pods(size, inter), PODS, 0
                caveat = form_note(wl.collective, forms.fig, size, setup.topology_uncongested, inter)
                notes += [caveat] if caveat else []
            else:
                transport = setup.new_transport(wl.chunk_bytes)
                outcome = runner.run_algorithm(transport, PODS_RECORDS[wl.collective], size, ctx,
                                               wl.iterations, wl.warmup)
                latency_ns, used, events = outcome.latency_ns, PODS, outcome.events
                if stats is not None:
                    stats.append((size, collect_pods(transport)))
        else:
            ctx = forms.net_ctx
            check_transport(lookup(wl.collective, name, p)[0], "network")
            if scenario.engine == "analytic":
                latency_ns, used, note = forms.network(name, size)
                events = 0
            else:
                transport = setup.network_transport(wl.chunk_bytes)
                outcome = runner.run(transport, wl.collective, name, size, ctx, wl.iterations, wl.warmup)
                latency_ns, used, note, events = outcome.latency_ns, outcome.algorithm, outcome.note, outcome.events
                if stats is not None:
                    stats.append((size, fabric_stats.collect(transport)))
            notes += [note] if note else []
        if scenario.engine == "des":
            try:
                runner.verify(wl.collective, p, ctx, outcome.results)
            except AssertionError as exc:
                raise RunError(f"payload check failed for {used} at {size} B: {exc}") from None
        rows.append({"size_bytes": size, "latency_us": latency_ns / 1e3, "algorithm": used,
                     "note": "; ".join(notes), "engine": scenario.engine, "events": events,
                     "wall_s": time.perf_counter() - start})
        if bar:
            bar.update(1)
    return rows
