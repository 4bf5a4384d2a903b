"""The registry of collective algorithms: the built-in records, listed here, and the plug-ins' ones.

`BUILTIN` lists every built-in `Algorithm` record explicitly; the records of
plug-in modules (`cxlsim.plugins.records("ALGORITHMS")`, modules named in
`CXLSIM_PLUGINS` or a `cxlsim.plugins` entry point) follow. Nothing registers
on import. `algorithms()` is the table by (collective, name), `lookup` finds
the record to run on P ranks (following fallbacks), `names` and
`network_algorithms` list what there is, `check_transport` refuses a record on
the wrong kind of transport. A plug-in record whose (collective, name) is
taken, or an entry of `ALGORITHMS` that is not a record, is an InputError.

The hierarchical allgather's leaders run an algorithm found by name, so its
record is made here with this module's `lookup`.
"""
from __future__ import annotations

import os
from types import MappingProxyType

from cxlsim import plugins
from cxlsim.errors import InputError
from cxlsim.models.collectives import (allgather, alltoall, barrier, chain, cxl_pool, hierarchical_pods,
                                      pool_collective_forms, reduce, reduce_scatter, reduce_scatter_butterfly, reductions,
                                      rooted, tree_bcast)
from cxlsim.models.collectives.base import COLLECTIVES, HYBRID, NETWORK, POOL, Algorithm

__all__ = ["BUILTIN", "algorithms", "algorithm", "lookup", "names", "network_algorithms", "check_transport"]


def lookup(collective: str, name: str, ranks: int) -> tuple[Algorithm, str | None]:
    """The algorithm to run for `name` on `ranks` ranks, and a note if it fell back to another.

    Raises InputError for an unknown collective or name, or an algorithm that
    cannot run on this many ranks and has no fallback.
    """
    if collective not in COLLECTIVES:
        raise InputError(f"workload.collective: expected one of {', '.join(COLLECTIVES)}, got {collective!r}")
    algo = algorithm(collective, name)
    reason = algo.check(ranks) if algo.check else None
    if reason is None:
        return algo, None
    if algo.fallback is None:
        raise InputError(f"workload.algorithm: {name} cannot run on P={ranks}: {reason}")
    substitute, note = lookup(collective, algo.fallback, ranks)
    note = f"{name} {reason}; fell back to {substitute.name}" + (f" ({note})" if note else "")
    return substitute, note


BUILTIN = (
    allgather.RING, allgather.RECURSIVE_DOUBLING, allgather.BRUCK, allgather.NEIGHBOR_EXCHANGE, allgather.TWO_PROC,
    allgather.hierarchical_algorithm(lookup),
    cxl_pool.CXL_POOL, cxl_pool.CXL_POOL_ZERO_COPY, *hierarchical_pods.pods_algorithms(lookup),
    *pool_collective_forms.RECORDS,
    reductions.ALLREDUCE_RING, reductions.ALLREDUCE_RECURSIVE_DOUBLING, reductions.ALLREDUCE_RABENSEIFNER,
    reductions.REDUCE_SCATTER_RING, *reduce_scatter.RECORDS, reduce_scatter_butterfly.BUTTERFLY,
    *alltoall.RECORDS, *barrier.RECORDS,
    rooted.BROADCAST_BINOMIAL, rooted.SCATTER_RING_ALLGATHER, rooted.SCATTER_RECURSIVE_DOUBLING_ALLGATHER,
    rooted.GATHER_BINOMIAL, rooted.SCATTER_BINOMIAL, reduce.BINOMIAL, chain.PIPELINED_CHAIN, *tree_bcast.RECORDS,
)
"""Every built-in algorithm record."""

_tables: dict = {}  # CXLSIM_PLUGINS value -> the table (entry points do not change within a process)


def algorithms() -> MappingProxyType:
    """Every algorithm record, built-in and plug-in, by (collective, name)."""
    key = os.environ.get(plugins.ENV_VAR, "")
    table = _tables.get(key)
    if table is None:
        table = {}
        for i, algo in enumerate((*BUILTIN, *plugins.records("ALGORITHMS"))):
            if not isinstance(algo, Algorithm):
                raise InputError(f"{plugins.ENV_VAR}: ALGORITHMS entry {i - len(BUILTIN)} is {algo!r}, "
                                 "not a cxlsim.models.collectives.base.Algorithm")
            if (algo.collective, algo.name) in table:
                raise InputError(f"{plugins.ENV_VAR}: a plug-in declares {algo.collective} algorithm "
                                 f"{algo.name!r}, which already exists")
            table[(algo.collective, algo.name)] = algo
        table = _tables[key] = MappingProxyType(table)
    return table


def algorithm(collective: str, name: str) -> Algorithm:
    """The record of (collective, name); InputError listing the known names if there is none."""
    algo = algorithms().get((collective, name))
    if algo is None:
        raise InputError(f"workload.algorithm: unknown {collective} algorithm {name!r}; "
                         f"expected one of {', '.join(names(collective))}")
    return algo


def names(collective: str, transport: str | None = None) -> list[str]:
    """Known names of `collective`, sorted; only those needing `transport` if it is given."""
    return sorted(name for (c, name), a in algorithms().items()
                  if c == collective and (transport is None or a.transport == transport))


def network_algorithms() -> list[tuple[str, str]]:
    """Every (collective, name) that runs over messages, i.e. on a network transport, sorted."""
    return sorted(key for key, a in algorithms().items() if a.transport == NETWORK)


def check_transport(algo: Algorithm, kind: str, where: str = "workload.algorithm") -> None:
    """InputError if `algo` cannot run on a transport of `kind` ('network' or 'pool')."""
    if algo.transport == kind:
        return
    if algo.transport == HYBRID:
        raise InputError(f"{where}: {algo.name} needs a hybrid pod fabric (fabric.preset: cxl-pods), "
                         f"but the fabric is a {kind}")
    if algo.transport == POOL:
        raise InputError(f"{where}: {algo.name} needs a CXL pool transport (a CXL preset such as cxl3-pool), "
                         f"but the fabric is a {kind}")
    raise InputError(f"{where}: {algo.name} exchanges messages and needs a network; a CXL pool fabric runs "
                     f"only {', '.join(names(algo.collective, POOL)) or 'pool algorithms'}")
