"""What every collective algorithm builds on: its record, the call context, process groups and payload labels.

An algorithm is a generator function run once per rank on a group `g` (an
`Endpoint` or a `Group`): it calls `g.sendrecv`, `g.send`, `g.recv`, `g.copy`
and `g.reduce` (a pool algorithm: the pool operations of `g.transport`, a
`PoolTransport`) and returns the rank's result. Its `Algorithm` record names
it and carries everything the engines need: `run` for the DES (`runner`),
`cost`, its closed form, for the analytic engine (`analytic`), the kind of
transport it runs on, the rank counts it supports and its fallback. The
registry (`registry`) lists the records; nothing registers on import.

Every algorithm moves real, tiny payload labels alongside the modelled bytes,
so tests check that each rank ends with every block in order:

- allgather/gather blocks: any object per rank (the runner uses the rank id);
- reduction vectors: tuples of ints; element i of rank r is
  (i + 1) << (REDUCE_BITS * r), reductions add, so a missing or doubled
  contribution, or a mixed-up element, gives a wrong sum (`reduced_vector`).

Transports. Most algorithms exchange messages (`transport="network"`) and run
on any transport. Some talk only through a shared CXL pool
(`transport="pool"`, e.g. `cxl_pool`): they run only on a pool transport
(`cxlsim.fabric.pool_transport.PoolTransport`, whose `kind` is "pool").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cxlsim.errors import InputError

__all__ = ["Algorithm", "NoClosedForm", "Context", "NO_CONTEXT", "COLLECTIVES", "TRANSPORTS", "NETWORK", "POOL", "HYBRID", "flat_exact",
           "ReturnedAtOnce", "RETURNED_AT_ONCE",
           "Group", "REDUCE_BITS", "reduced_vector", "vector_of", "add_vectors", "fold_vectors", "split", "is_pow2"]

COLLECTIVES = ("allgather", "allreduce", "reduce_scatter", "broadcast", "gather", "alltoall", "barrier", "scatter",
               "reduce")
REDUCE_BITS = 24
NETWORK = "network"
"""Transport kind: messages (`Transport.kind`); network algorithms run on any fabric with messages."""
POOL = "pool"
"""Transport kind: a shared CXL pool only (`PoolTransport.kind`)."""
HYBRID = "hybrid"
"""Transport kind: pods on CXL pools joined by a network (`cxlsim.fabric.pods.PodsTransport.kind`)."""
TRANSPORTS = (NETWORK, POOL, HYBRID)


@dataclass(frozen=True)
class NoClosedForm:
    """An algorithm's `cost` when it has no closed form: the analytic engine reports `reason`."""

    reason: str


@dataclass(frozen=True)
class Context:
    """What some algorithms need besides the size."""

    groups: tuple = ()
    """Ranks per host (tuples), for hierarchical algorithms."""
    inter: str = "ring"
    """Allgather algorithm among node leaders (hierarchical)."""
    root: int = 0
    """Root rank of broadcast, gather, scatter and reduce."""
    elements: int = 0
    """Label elements per reduction vector (0: max(P, 4))."""


NO_CONTEXT = Context()
"""The default context: no host groups, ring among leaders, root 0 (frozen, so shared)."""


def flat_exact(p: int, ctx: Context) -> bool:
    """Whether a flat algorithm's closed form, which charges every message alike, is exact for the
    placement in `ctx`: one rank per host, or every rank on one host."""
    groups = ctx.groups or ()
    return len(groups) <= 1 or all(len(g) <= 1 for g in groups)


@dataclass(frozen=True)
class Algorithm:
    """One collective algorithm: what it is, how the DES runs it and what its closed form is."""

    collective: str
    """One of COLLECTIVES."""
    name: str
    """Its name in scenarios and on the command line."""
    run: Callable
    """Generator function run per rank: run(g, size_bytes, data, ctx) -> the rank's result."""
    cost: Callable | NoClosedForm
    """Closed form, cost(figures, P, size_bytes, ctx) -> ns, on its transport's figures (a network
    `analytic.CostModel`, or a pool's `PoolFigures`); or NoClosedForm(reason)."""
    transport: str = NETWORK
    """Kind of transport it needs: 'network' (messages; runs on any fabric) or 'pool' (a CXL pool only)."""
    check: Callable | None = None
    """check(P) -> None or a reason why this algorithm cannot run on P ranks."""
    fallback: str | None = None
    """Algorithm used instead when `check` fails (None: the failure is an error)."""
    source: str = ""
    """Which library implements it this way."""
    exact: Callable = flat_exact
    """exact(P, ctx) -> whether `cost` is exact for that placement (the analytic engine notes when not)."""
    approximation: str = "the closed form charges every message as a network one"
    """Why `cost` is approximate where `exact` is false: the analytic engine's note."""

    def __post_init__(self):
        where = f"algorithm {self.collective}/{self.name}"
        if self.collective not in COLLECTIVES:
            raise InputError(f"{where}: collective: expected one of {', '.join(COLLECTIVES)}, got {self.collective!r}")
        if self.transport not in TRANSPORTS:
            raise InputError(f"{where}: transport: expected one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if not callable(self.run):
            raise InputError(f"{where}: run: expected a generator function, got {self.run!r}")
        if not (callable(self.cost) or isinstance(self.cost, NoClosedForm)):
            raise InputError(f"{where}: cost: expected a closed form or NoClosedForm(reason), got {self.cost!r}")


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


class ReturnedAtOnce:
    """The result of a zero-byte call that returns at once without a message or a pool access (MPICH's
    alltoall and reduce_scatter on recvcount 0, the emulator's pool kernels but the allgather and the
    barrier on a count of 0): there is no data to hold. `runner.verify` accepts it when every rank
    returned it; `runner.run_algorithm` refuses it from a call that carries data."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RETURNED_AT_ONCE"


RETURNED_AT_ONCE = ReturnedAtOnce()
"""The one `ReturnedAtOnce`: what every rank of a zero-byte call that returns at once returns."""


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


def fold_vectors(vectors) -> tuple | None:
    """Left fold over ranks 0..P-1 of their reduction labels (`add_vectors`); None if a contribution is missing."""
    if any(v is None or not isinstance(v, tuple) for v in vectors):
        return None
    out = vectors[0]
    for v in vectors[1:]:
        out = add_vectors(out, v)
    return out


def split(vec: tuple, parts: int) -> list[tuple]:
    """`vec` cut into `parts` contiguous, near-equal segments (some empty if it is short)."""
    n = len(vec)
    bounds = [i * n // parts for i in range(parts + 1)]
    return [vec[bounds[i]:bounds[i + 1]] for i in range(parts)]
