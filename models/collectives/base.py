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

`register` records an algorithm with the rank counts it supports and the
kind of transport it needs; `lookup` finds one by name with an error that
lists the known names.

Transports. Most algorithms exchange messages (`transport="network"`) and run
on any transport. Some talk only through a shared CXL pool
(`transport="pool"`, e.g. `cxl_pool`): they are always registered, but they
run only on a pool transport (`CXLPoolTransport`, whose `kind` is "pool"),
so loops over the network algorithms use `names(collective, "network")` or
`network_algorithms()`, and `runner.run` rejects a mismatch with a clear error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cxlsim.errors import InputError

__all__ = ["Algorithm", "register", "lookup", "names", "network_algorithms", "check_transport", "TRANSPORTS",
           "ALGORITHMS", "Group", "REDUCE_BITS",
           "reduced_vector", "vector_of", "add_vectors", "split", "is_pow2"]

COLLECTIVES = ("allgather", "allreduce", "reduce_scatter", "broadcast", "gather")
REDUCE_BITS = 24
TRANSPORTS = ("network", "pool")
"""Kinds of transport an algorithm can need (`Transport.kind`)."""


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
    transport: str = "network"
    """Kind of transport it needs: 'network' (messages; runs on any fabric) or 'pool' (a CXL pool only)."""


ALGORITHMS: dict = {}


def register(collective: str, name: str, *, check=None, fallback=None, source="", transport="network"):
    """Decorator: register a generator function as (collective, name), run on a `transport` kind."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport: expected one of {', '.join(TRANSPORTS)}, got {transport!r}")

    def wrap(fn):
        ALGORITHMS[(collective, name)] = Algorithm(collective, name, fn, check, fallback, source, transport)
        return fn
    return wrap


def names(collective: str, transport: str | None = None) -> list[str]:
    """Registered names of `collective`, sorted; only those needing `transport` if it is given."""
    return sorted(name for (c, name), a in ALGORITHMS.items()
                  if c == collective and (transport is None or a.transport == transport))


def network_algorithms() -> list[tuple[str, str]]:
    """Every (collective, name) that runs over messages, i.e. on a network transport, sorted."""
    return sorted(key for key, a in ALGORITHMS.items() if a.transport == "network")


def check_transport(algo: Algorithm, kind: str, where: str = "workload.algorithm") -> None:
    """InputError if `algo` cannot run on a transport of `kind` ('network' or 'pool')."""
    if algo.transport == kind:
        return
    if algo.transport == "pool":
        raise InputError(f"{where}: {algo.name} needs a CXL pool transport (a CXL preset such as cxl3-pool), "
                         f"but the fabric is a {kind}")
    raise InputError(f"{where}: {algo.name} exchanges messages and needs a network; a CXL pool fabric runs "
                     f"only {', '.join(names(algo.collective, 'pool')) or 'pool algorithms'}")


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
