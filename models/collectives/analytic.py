"""The analytic engine: one call's latency by its algorithm's closed form, on its transport's figures.

`closed_form(algo, figures, P, size_bytes, ctx)` evaluates the `cost` of any
algorithm record: a network algorithm on a `CostModel` (the LogGP figures of a
built network, `network_forms`), a pool algorithm on a pool's `PoolFigures`
(`CXLPoolTransport.figures()`). An algorithm without a closed form, or figures
of the wrong kind, is an InputError naming the algorithm.

`cost(collective, name, P, size_bytes, cm, ctx)` is the network entry by name:
it looks the algorithm up (with its fallback), evaluates its form and notes
when the form is only approximate for the placement (the record's `exact`).
"""
from __future__ import annotations

from cxlsim.errors import InputError
from cxlsim.fabric.pool_transport import PoolFigures
from cxlsim.models.collectives.base import NETWORK, NO_CONTEXT, Algorithm, Context, NoClosedForm
from cxlsim.models.collectives.network_forms import (CostModel, bcast_tree, gather_tree, network_closed_form,
                                                     pairwise_steps, ring_recurrence, scatter_tree)
from cxlsim.models.collectives.registry import lookup

__all__ = ["closed_form", "cost", "CostModel", "bcast_tree", "gather_tree", "scatter_tree", "ring_recurrence",
           "pairwise_steps"]


def closed_form(algo: Algorithm, figures, p: int, size_bytes: int, ctx: Context = NO_CONTEXT) -> float:
    """Latency (ns) of one call of `algo` on `p` ranks by its closed form, every rank starting together on a
    fresh fabric. `figures`: a `CostModel` for a network algorithm, a `PoolFigures` for a pool one."""
    if algo.transport == NETWORK:
        if not isinstance(figures, CostModel):
            raise InputError(f"workload.algorithm: {algo.name} exchanges messages; its closed form takes a "
                             f"network CostModel, got {type(figures).__name__}")
        return network_closed_form(algo, figures, p, size_bytes, ctx)
    if isinstance(algo.cost, NoClosedForm):
        raise InputError(f"workload.algorithm: {algo.collective} algorithm {algo.name} has no closed form "
                         f"({algo.cost.reason}); use engine des")
    if not isinstance(figures, PoolFigures):
        raise InputError(f"workload.algorithm: {algo.name} runs on a CXL pool; its closed form takes the pool's "
                         f"PoolFigures (CXLPoolTransport.figures()), got {type(figures).__name__}")
    return algo.cost(figures, p, size_bytes, ctx)


def cost(collective: str, name: str, p: int, size_bytes: int, cm: CostModel, ctx) -> tuple[float, str, str | None]:
    """(latency ns, algorithm actually used, note) of one call of a network algorithm, by closed form.

    The note says when the requested algorithm fell back to another, and when the
    form is only approximate for the placement (the record's `exact` rule: e.g. a
    flat algorithm other than a ring under block placement, with several ranks on
    some of several hosts; the forms charge every message as a network one, the
    DES also models shared-memory copies and ranks sharing a NIC).
    """
    algo, note = lookup(collective, name, p)
    latency = network_closed_form(algo, cm, p, size_bytes, ctx)
    if p > 1 and len(ctx.groups or ()) != 1 and not algo.exact(p, ctx):
        approx = f"approximate: {algo.approximation} (use the DES)"
        note = f"{note}; {approx}" if note else approx
    return latency, algo.name, note
