"""Collective algorithms over the transport interface, with closed-form costs.

Importing this package registers every algorithm (`base.ALGORITHMS`, looked
up by `base.lookup(collective, name, P)`). `runner.run` simulates one call on
a transport; `analytic.cost` evaluates its closed form; `selectors.select`
mimics MPICH's and Open MPI's default choice.
"""
from cxlsim.models.collectives import allgather, analytic, reductions, rooted, runner, selectors  # noqa: F401
from cxlsim.models.collectives.base import ALGORITHMS, lookup, names

__all__ = ["ALGORITHMS", "lookup", "names", "allgather", "analytic", "reductions", "rooted", "runner", "selectors"]
