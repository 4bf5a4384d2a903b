"""A collective projected on a hybrid pod fabric (`cxl-pods`): the pods' pools and the network, or the network alone.

`run_hybrid(scenario, setup)` takes a validated scenario and its elaborated fabric
(`cxlsim.fabric.pod_setup.PodsSetup`) and gives one row per size, as
`cxlsim.projection.run_network` does. `workload.algorithm` picks what runs:

- `pods`: the hierarchical allgather over the pods
  (`cxlsim.models.collectives.hierarchical_pods`): a multi-leader network allgather between
  pods, its algorithm the `workload.selector` library's choice for n pods and the block size,
  then the pool allgather inside every pod;
- a network algorithm (`ring`, `bruck`, ...): on the network alone, every host one rank;
- `auto`: per size, whichever of the two is faster by their closed forms (`pods`, or the
  selector's network algorithm on every host). The selector thus decides by size whether the
  pod pools are worth using.

`engine: analytic` evaluates the closed forms; `engine: des` simulates the chosen algorithm
(the pods in one SimPy environment with the network, `cxlsim.fabric.pods.PodsTransport`) and
checks every rank's payload labels. The `pods` form is exact on a star network (the tests
hold DES = form); on a fat tree the row notes the form as approximate (it charges every
network message the longest route, and the pods' concurrent exchanges may share uplinks). Units: ns inside, us in the rows.
"""
from __future__ import annotations

import time

from cxlsim.errors import InputError, RunError
from cxlsim.models.collectives import analytic, runner
from cxlsim.models.collectives.hierarchical_pods import PodFigures
from cxlsim.models.collectives.registry import algorithm, check_transport, lookup
from cxlsim.models.collectives.selectors import select

__all__ = ["PODS", "run_hybrid", "choose"]

PODS = "pods"
"""The hierarchical pods allgather's name."""

_FAT_TREE = ("approximate: on a fat tree the closed form charges every network message the longest route and "
             "no shared uplinks (use the DES)")


class _Forms:
    """The closed forms of one hybrid fabric, with its figures built once."""

    def __init__(self, scenario, setup):
        self.wl, self.setup = scenario.workload, setup
        net = setup.network
        self.cm = analytic.CostModel.from_network(net.network(), self.wl.chunk_bytes)
        self.fig = PodFigures(setup.pool_figures(), self.cm, setup.hosts, setup.pods)
        self.net_ctx = runner.Context(groups=tuple(map(tuple, net.placement.groups())))
        self.p = net.placement.size

    def inter(self, size: int) -> tuple[str, str | None]:
        """The network phase's algorithm among the pods (the selector's, with its fallback) and a note."""
        name, _ = select(self.wl.selector, "allgather", self.setup.pods, size)
        algo, fallback = lookup("allgather", name, self.setup.pods)
        return algo.name, fallback

    def pods(self, size: int, inter: str) -> float:
        return algorithm("allgather", PODS).cost(self.fig, self.p, size, runner.Context(inter=inter))

    def network(self, name: str, size: int) -> tuple[float, str, str | None]:
        return analytic.cost("allgather", name, self.p, size, self.cm, self.net_ctx)


def choose(forms: _Forms, size: int) -> tuple[str, str]:
    """('pods' or the selector's network algorithm on every host, whichever is faster by closed form; a note)."""
    inter, _ = forms.inter(size)
    name, _ = select(forms.wl.selector, "allgather", forms.p, size)
    if forms.pods(size, inter) < forms.network(name, size)[0]:
        return PODS, f"auto: pods, faster than the network's {name} by closed form"
    return name, f"auto: the network's {name}, faster than pods by closed form"


def run_hybrid(scenario, setup, bar=None) -> list[dict]:
    """One row per size (size_bytes, latency_us, algorithm, note, engine, events, wall_s) on a hybrid fabric."""
    wl = scenario.workload
    if wl.collective != "allgather":
        raise InputError(f"workload.collective: a hybrid pod fabric (cxl-pods) runs allgather only, "
                         f"got {wl.collective!r}")
    forms = _Forms(scenario, setup)
    p = forms.p
    rows = []
    for size in wl.sizes_bytes:
        start = time.perf_counter()
        name, why = choose(forms, size) if wl.algorithm == "auto" else (wl.algorithm, None)
        notes = [why] if why else []
        if name == PODS:
            inter, fallback = forms.inter(size)
            notes += [f"between pods: {inter}" + (f" ({fallback})" if fallback else "")]
            ctx = runner.Context(inter=inter)
            if scenario.engine == "analytic":
                latency_ns, used, events = forms.pods(size, inter), PODS, 0
                if not setup.topology_uncongested:
                    notes.append(_FAT_TREE)
            else:
                outcome = runner.run_algorithm(setup.new_transport(wl.chunk_bytes), algorithm("allgather", PODS),
                                               size, ctx, wl.iterations, wl.warmup)
                latency_ns, used, events = outcome.latency_ns, PODS, outcome.events
        else:
            ctx = forms.net_ctx
            check_transport(lookup("allgather", name, p)[0], "network")
            if scenario.engine == "analytic":
                latency_ns, used, note = forms.network(name, size)
                events = 0
            else:
                outcome = runner.run(setup.network_transport(wl.chunk_bytes), "allgather", name, size, ctx,
                                     wl.iterations, wl.warmup)
                latency_ns, used, note, events = outcome.latency_ns, outcome.algorithm, outcome.note, outcome.events
            notes += [note] if note else []
        if scenario.engine == "des":
            try:
                runner.verify("allgather", p, ctx, outcome.results)
            except AssertionError as exc:
                raise RunError(f"payload check failed for {used} at {size} B: {exc}") from None
        rows.append({"size_bytes": size, "latency_us": latency_ns / 1e3, "algorithm": used,
                     "note": "; ".join(notes), "engine": scenario.engine, "events": events,
                     "wall_s": time.perf_counter() - start})
        if bar:
            bar.update(1)
    return rows
