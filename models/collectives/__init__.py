"""Collective algorithms over the transport interface, with closed-form costs.

Importing this package registers every algorithm (`base.ALGORITHMS`, looked
up by `base.lookup(collective, name, P)`), the pool algorithms (`cxl_pool`,
`cxl_pool_zero_copy`, marked `transport="pool"`) included. `runner.run` simulates one call on
a transport; `analytic.cost` evaluates its closed form; `selectors.select`
mimics MPICH's and Open MPI's default choice.
"""
from cxlsim.models.collectives import allgather, analytic, cxl_pool, reductions, rooted, runner, selectors  # noqa: F401
from cxlsim.models.collectives.base import ALGORITHMS, lookup, names, network_algorithms

__all__ = ["ALGORITHMS", "lookup", "names", "network_algorithms", "allgather", "analytic", "cxl_pool", "reductions",
           "rooted", "runner", "selectors"]
