"""Collective algorithms: a registry by (collective, name), process groups and payload labels.

An algorithm is a generator function run once per rank on a group `g` (an
`Endpoint` or a `Group`): it calls `g.sendrecv`, `g.send`, `g.recv`, `g.copy`
and `g.reduce` and returns the rank's result. Every algorithm moves real,
tiny payload labels alongside the modelled bytes, so tests check that each
rank ends with every block in order:

- allgather/gather blocks: any object per rank (the runner uses the rank id);
- reduction vectors: tuples of ints; element i of rank r is
  (i + 1) << (REDUCE_BITS * r), reductions add, so a missing or doubled
  contribution, or a mixed-up element, gives a wrong sum (`reduced_vector`).

`register` records an algorithm with the rank counts it supports; `lookup`
finds one by name with an error that lists the known names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cxlsim.errors import InputError

__all__ = ["Algorithm", "register", "lookup", "names", "ALGORITHMS", "Group", "REDUCE_BITS",
           "reduced_vector", "vector_of", "add_vectors", "split", "is_pow2"]

COLLECTIVES = ("allgather", "allreduce", "reduce_scatter", "broadcast", "gather")
REDUCE_BITS = 24


@dataclass(frozen=True)
class Algorithm:
    """A named collective algorithm."""

    collective: str
    name: str
    run: Callable
    """Generator function run per rank (signature depends on the collective)."""
    check: Callable | None = None
    """check(P) -> None or a reason why this algorithm cannot run on P ranks."""
    fallback: str | None = None
    """Algorithm used instead when `check` fails (None: the failure is an error)."""
    source: str = ""
    """Which library implements it this way."""


ALGORITHMS: dict = {}


def register(collective: str, name: str, *, check=None, fallback=None, source=""):
    """Decorator: register a generator function as (collective, name)."""
    def wrap(fn):
        ALGORITHMS[(collective, name)] = Algorithm(collective, name, fn, check, fallback, source)
        return fn
    return wrap


def names(collective: str) -> list[str]:
    return sorted(name for c, name in ALGORITHMS if c == collective)


def lookup(collective: str, name: str, ranks: int) -> tuple[Algorithm, str | None]:
    """The algorithm to run for `name` on `ranks` ranks, and a note if it fell back to another.

    Raises InputError for an unknown collective or name, or an algorithm that
    cannot run on this many ranks and has no fallback.
    """
    if collective not in COLLECTIVES:
        raise InputError(f"workload.collective: expected one of {', '.join(COLLECTIVES)}, got {collective!r}")
    algo = ALGORITHMS.get((collective, name))
    if algo is None:
        raise InputError(f"workload.algorithm: unknown {collective} algorithm {name!r}; "
                         f"expected one of {', '.join(names(collective))}")
    reason = algo.check(ranks) if algo.check else None
    if reason is None:
        return algo, None
    if algo.fallback is None:
        raise InputError(f"workload.algorithm: {name} cannot run on P={ranks}: {reason}")
    substitute, note = lookup(collective, algo.fallback, ranks)
    note = f"{name} {reason}; fell back to {substitute.name}" + (f" ({note})" if note else "")
    return substitute, note


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class Group:
    """A sub-communicator: `members` (global ranks) seen as ranks 0..len-1, with its own tag."""

    __slots__ = ("ep", "members", "rank", "size", "tag")

    def __init__(self, ep, members, tag: int):
        self.ep, self.members, self.tag = ep, list(members), tag
        self.rank = self.members.index(ep.rank)
        self.size = len(self.members)

    def send(self, dst, size_bytes, payload=None, tag=0):
        return self.ep.send(self.members[dst], size_bytes, payload, self.tag + tag)

    def recv(self, src, tag=0):
        return self.ep.recv(self.members[src], self.tag + tag)

    def sendrecv(self, dst, size_bytes, payload, src, tag=0):
        return self.ep.sendrecv(self.members[dst], size_bytes, payload, self.members[src], self.tag + tag)

    def copy(self, size_bytes):
        return self.ep.copy(size_bytes)

    def reduce(self, size_bytes):
        return self.ep.reduce(size_bytes)


# ---------------------------------------------------------------- reduction labels

def vector_of(rank: int, elements: int) -> tuple:
    """Rank `rank`'s input vector of `elements` labels."""
    return tuple((i + 1) << (REDUCE_BITS * rank) for i in range(elements))


def reduced_vector(ranks: int, elements: int) -> tuple:
    """The correct reduction over ranks 0..ranks-1 of `vector_of`."""
    full = sum(1 << (REDUCE_BITS * r) for r in range(ranks))
    return tuple((i + 1) * full for i in range(elements))


def add_vectors(a: tuple, b: tuple) -> tuple:
    if len(a) != len(b):
        raise AssertionError(f"reduction of segments of different lengths {len(a)} and {len(b)}")
    return tuple(x + y for x, y in zip(a, b))


def split(vec: tuple, parts: int) -> list[tuple]:
    """`vec` cut into `parts` contiguous, near-equal segments (some empty if it is short)."""
    n = len(vec)
    bounds = [i * n // parts for i in range(parts + 1)]
    return [vec[bounds[i]:bounds[i + 1]] for i in range(parts)]
