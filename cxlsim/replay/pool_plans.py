"""Which traced collectives a CXL pool fabric runs with its own pool algorithms, and where in the pool.

On a pool fabric (one rank per host, or K) `pool_plan` gives:
- allgather: the pool allgather (`cxl_pool`) in region 0 of the pool;
- barrier, allreduce, alltoall and reducescatter with equal counts: the pool step
  collectives of `cxlsim.models.collectives.pool_collectives` (the emulator's cxl_coll.h
  protocols) in region 1; allreduce takes `cxl_pool` (small) or `cxl_pool_large`, the cheaper
  by their closed forms on this pool (`pool_collective_forms.select_pool`);
- every other collective (bcast, reduce, gather, scatter, uneven reducescatter) its network
  algorithm over the pool's send/recv protocol (`cxlsim.replay.pool_messages`), noted. The
  pool broadcast is not used: its root reuses a buffer once every reader acknowledged the
  broadcast before last, which it takes to have been a broadcast from the same root, and a
  trace mixes collectives freely.

Regions (`cxlsim.fabric.pods.PoolRegion`, REGIONS equal parts of the pool) keep the
allgather's flags and the step collectives' flags apart, as the MPI library keeps
communicators apart; the point-to-point mailboxes sit above region 1 (`mailbox_floor`).
A region's plan runs on the rank's endpoint of that region (`RegionPlan.run`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from cxlsim.fabric.pods import REGIONS, PoolRegion
from cxlsim.models.collectives import runner
from cxlsim.models.collectives.pool_collective_forms import select_pool
from cxlsim.replay.collectives import Plan, plan

__all__ = ["RegionPlan", "pool_plan", "regions_of", "mailbox_floor"]

_STEP = {"barrier": "barrier", "allreduce": "allreduce", "alltoall": "alltoall", "reducescatter": "reduce_scatter"}
"""Traced kind -> the pool step collective that runs it (region 1)."""
_REGIONS_USED = 2


@dataclass(frozen=True)
class RegionPlan(Plan):
    """A traced collective run by a pool algorithm of the registry in region `region` of the pool."""

    region: int = 0

    def run(self, ep, tag: int):
        ctx = replace(self.ctx, elements=ep.size)
        data = runner.initial(self.collective, ep.rank, ep.size, ctx)
        return (yield from runner.call(ep, self.collective, self.algorithm, self.size_bytes, data, ctx, 0))


def pool_plan(call, p: int, library: str, ctx: runner.Context, figures) -> Plan:
    """The Plan of traced collective `call` on a pool of `p` hosts with figures `figures` (see the module docstring)."""
    kind = call.kind
    ctx = replace(ctx, root=call.root)
    if kind == "allgather":
        return RegionPlan(kind, "allgather", "cxl_pool", call.size_bytes, ctx, "", on_pool=True, region=0)
    if kind in _STEP and not (kind == "reducescatter" and len(set(call.counts)) > 1):
        collective = _STEP[kind]
        size = 0 if kind == "barrier" else call.size_bytes
        name, why = select_pool(collective, figures, p, size)
        return RegionPlan(kind, collective, name, size, ctx, why or "", on_pool=True, region=1)
    base = plan(call, p, library, ctx, True)
    if kind == "bcast":
        why = ("bcast: the pool broadcast reuses its buffer on the assumption that the call before last was a "
               "broadcast from the same root, which a trace does not promise")
        return replace(base, note="; ".join(filter(None, [base.note, why])))
    return base


def regions_of(pool) -> list:
    """The pool's regions 0 and 1, for the RegionPlans' endpoints."""
    span = pool.pool_bytes // REGIONS
    return [PoolRegion(pool, k * span, span) for k in range(_REGIONS_USED)]


def mailbox_floor(pool) -> int:
    """The lowest byte the point-to-point mailboxes may use: above regions 0 and 1."""
    return _REGIONS_USED * (pool.pool_bytes // REGIONS)
