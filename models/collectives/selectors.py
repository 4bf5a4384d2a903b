"""Default algorithm choice of MPICH and Open MPI, by rank count and message size.

Allgather (../shared/reference/allgather.md):
- MPICH (<=3.3 `src/mpi/coll/allgather/allgather.c`; 3.4-4.x
  `maint/tuning/coll/mpir/generic.json`, same decisions) looks at the total
  n = P*m with strict '<': power-of-two P and n < 524288 (LONG_MSG_SIZE):
  recursive doubling; otherwise n < 81920 (SHORT_MSG_SIZE): Bruck; otherwise ring.
- Open MPI coll/tuned fixed decision (4.1.x/5.0.x `coll_tuned_decision_fixed.c`)
  looks at the per-rank m: P = 2: two-proc; P < 32: recursive doubling
  (Bruck for non-power-of-two P); P < 64: m < 1024 RD, m < 65536 neighbour
  exchange, else ring; P < 128: m < 512 RD, < 65536 NE, else ring; P < 256:
  m < 512 RD, < 131072 NE, < 524288 ring, < 1048576 NE, else ring. Neighbour
  exchange with odd P falls back to ring. For P >= 256 the reference does not
  list the rows, so the P < 256 row is reused (and the note says so).

Allreduce, MPICH <= 3.3 (`src/mpi/coll/allreduce/allreduce.c`,
MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE = 2048): s < 2048 bytes: recursive
doubling, otherwise Rabenseifner. Broadcast, MPICH <= 3.3
(`src/mpi/coll/bcast/bcast.c`, MPIR_CVAR_BCAST_SHORT_MSG_SIZE = 12288,
MPIR_CVAR_BCAST_LONG_MSG_SIZE = 524288, MPIR_CVAR_BCAST_MIN_PROCS = 8):
s < 12288 or P < 8: binomial; s < 524288 and power-of-two P: scatter +
recursive-doubling allgather; otherwise scatter + ring allgather. These two
thresholds come from the MPICH source, not from the project's reference
notes. Gather and scatter (binomial, the one implemented) always get it.
Reduce, MPICH <= 3.3 (`src/mpi/coll/reduce/reduce.c`,
MPIR_CVAR_REDUCE_SHORT_MSG_SIZE = 2048): binomial up to 2048 B; above, for a
built-in op and count >= pof2, reduce_scatter_gather, which is not modelled:
binomial runs and the note says so. Open MPI's reduce rows are not modelled:
binomial runs, noted.

Alltoall, barrier and reduce-scatter, and Open MPI's allreduce and broadcast
(read in MPICH 3.3 and 4.1 and Open MPI 5.0.9):
- MPICH alltoall (3.3 `src/mpi/coll/alltoall/alltoall.c`; 4.x
  `maint/tuning/coll/mpir/generic.json`, the same rule), m the bytes per
  destination: m <= 256 (MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE) and P >= 8:
  Bruck; m <= 32768 (..._MEDIUM_MSG_SIZE): scattered; otherwise pairwise.
  (MPI_IN_PLACE runs pairwise_sendrecv_replace, not modelled.)
- MPICH barrier: dissemination (3.3 `barrier.c`; 4.x k_dissemination, k = 2).
- MPICH reduce_scatter, commutative op (3.3 `reduce_scatter.c`, 4.x
  generic.json), s the whole vector: s < 524288
  (MPIR_CVAR_REDUCE_SCATTER_COMMUTATIVE_LONG_MSG_SIZE): recursive halving;
  otherwise pairwise.
- Open MPI allreduce (commutative op), broadcast, alltoall, barrier and
  reduce_scatter: the rows of `ompi/mca/coll/tuned/coll_tuned_decision_fixed.c`
  (5.0.9) in `_OMPI_ALLREDUCE`, `_OMPI_BROADCAST`, `_OMPI_ALLTOALL`,
  `_OMPI_BARRIER`, `_OMPI_REDUCE_SCATTER`: by P (strict '<'), then by the
  bytes per destination (alltoall) or of the whole message (allreduce,
  broadcast, reduce_scatter), strict '<'. Their ids map to the algorithms here:
  - allreduce: 3 recursive_doubling, 4 ring, 5 segmented ring (its segment
    size 0 in the fixed rule runs the ring), 6 rabenseifner (Open MPI's pairs
    by doubling distance, the same cost here, and folds a non-power-of-two P
    by exchanging halves: noted);
  - broadcast (segment size 0: the whole message): 1 linear, 2 chain and 3
    pipeline -> chain, 5 binary_tree, 6 ompi_binomial, 7 knomial (`tree_bcast`);
  - alltoall: 1 linear, 2 pairwise, 3 modified_bruck, 4 linear_sync -> linear
    (its default max_requests 0 posts every request at once, as linear), 5
    two_proc -> pairwise (one exchange and a local copy: pairwise at P = 2);
  - barrier: 1 linear, 3 recursive_doubling, 4 bruck -> dissemination (the
    same messages), 6 tree;
  - reduce_scatter: 2 recursive_halving (the same fold, steps and copies as
    MPICH's), 3 ring, 4 butterfly.
  Choices not modelled run a substitute and the note names both: allreduce 2
  nonoverlapping -> recursive_doubling; broadcast 4 split binary tree ->
  binary_tree, 8 scatter_allgather -> MPICH's scatter + recursive-doubling
  allgather; reduce_scatter 1 non-overlapping (reduce, then scatterv) ->
  recursive_halving.
"""
from __future__ import annotations

from cxlsim.errors import InputError
from cxlsim.models.collectives.base import is_pow2

__all__ = ["select", "SELECTORS"]

MPICH_ALLGATHER_SHORT = 81920
MPICH_ALLGATHER_LONG = 524288
MPICH_ALLREDUCE_SHORT = 2048
MPICH_BCAST_SHORT = 12288
MPICH_BCAST_LONG = 524288
MPICH_BCAST_MIN_PROCS = 8
MPICH_ALLTOALL_SHORT = 256
MPICH_ALLTOALL_MEDIUM = 32768
MPICH_ALLTOALL_BRUCK_MIN_PROCS = 8
MPICH_REDSCAT_LONG = 524288
MPICH_REDUCE_SHORT = 2048


def mpich_allgather(p: int, m: int) -> tuple[str, str | None]:
    n = p * m
    if is_pow2(p) and n < MPICH_ALLGATHER_LONG:
        return "recursive_doubling", None
    if n < MPICH_ALLGATHER_SHORT:
        return "bruck", None
    return "ring", None


_OMPI_ROWS = (  # (P below, [(m below, algorithm), ...], fallthrough)
    (64, [(1024, "recursive_doubling"), (65536, "neighbor_exchange")], "ring"),
    (128, [(512, "recursive_doubling"), (65536, "neighbor_exchange")], "ring"),
    (256, [(512, "recursive_doubling"), (131072, "neighbor_exchange"), (524288, "ring"),
           (1048576, "neighbor_exchange")], "ring"),
)


def ompi_allgather(p: int, m: int) -> tuple[str, str | None]:
    note = None
    if p == 2:
        return "two_proc", None
    if p < 32:
        choice = "recursive_doubling"
    else:
        for below, rows, rest in _OMPI_ROWS:
            if p < below or below == 256:
                choice = next((algo for limit, algo in rows if m < limit), rest)
                if p >= 256:
                    note = "Open MPI's rows for P >= 256 are not in the reference; used the P < 256 row"
                break
    if choice == "recursive_doubling" and not is_pow2(p):
        return "bruck", "recursive doubling needs a power-of-two P; Open MPI uses Bruck"
    if choice == "neighbor_exchange" and p % 2:
        return "ring", "neighbour exchange needs an even P; Open MPI uses ring"
    return choice, note


def mpich_allreduce(p: int, s: int) -> tuple[str, str | None]:
    return ("recursive_doubling" if s < MPICH_ALLREDUCE_SHORT else "rabenseifner"), None


def ompi_allreduce(p: int, s: int) -> tuple[str, str | None]:
    name, note = _ompi_table("allreduce", _OMPI_ALLREDUCE, p, s)
    return name, (None if name == "rabenseifner" and is_pow2(p) else note)


def mpich_broadcast(p: int, s: int) -> tuple[str, str | None]:
    if s < MPICH_BCAST_SHORT or p < MPICH_BCAST_MIN_PROCS:
        return "binomial", None
    if s < MPICH_BCAST_LONG and is_pow2(p):
        return "scatter_recursive_doubling_allgather", None
    return "scatter_ring_allgather", None


def ompi_broadcast(p: int, s: int) -> tuple[str, str | None]:
    return _ompi_table("broadcast", _OMPI_BROADCAST, p, s)


def mpich_alltoall(p: int, m: int) -> tuple[str, str | None]:
    if m <= MPICH_ALLTOALL_SHORT and p >= MPICH_ALLTOALL_BRUCK_MIN_PROCS:
        return "bruck", None
    if m <= MPICH_ALLTOALL_MEDIUM:
        return "scattered", None
    return "pairwise", None


def mpich_barrier(p: int, s: int) -> tuple[str, str | None]:
    return "dissemination", None


def mpich_reduce_scatter(p: int, s: int) -> tuple[str, str | None]:
    return ("recursive_halving" if s < MPICH_REDSCAT_LONG else "pairwise"), None


# Open MPI 5.0.9 coll_tuned_decision_fixed.c: (P below or None, [(bytes below, id), ...], id otherwise)
_OMPI_ALLTOALL = (
    (3, [(2, 2), (4, 5), (16, 2), (64, 5), (256, 2), (4096, 5), (32768, 2), (262144, 4), (1048576, 5)], 2),
    (8, [(8192, 4), (16384, 1), (65536, 4), (524288, 1), (1048576, 2)], 1),
    (16, [(262144, 4)], 1),
    (32, [(4, 4), (512, 3), (8192, 4), (32768, 1), (262144, 4), (524288, 1)], 4),
    (64, [(512, 3), (524288, 1)], 4),
    (128, [(1024, 3), (2048, 1), (4096, 4), (262144, 1)], 2),
    (256, [(1024, 3), (2048, 4), (262144, 1)], 2),
    (512, [(1024, 3), (8192, 4), (32768, 1)], 2),
    (1024, [(512, 3), (8192, 4), (16384, 1), (131072, 4), (262144, 1)], 2),
    (2048, [(512, 3), (1024, 4), (2048, 1), (16384, 4), (262144, 1)], 4),
    (4096, [(1024, 3), (4096, 4), (8192, 1), (131072, 4)], 1),
    (None, [(2048, 3), (8192, 4), (16384, 1), (32768, 4), (65536, 1)], 4),
)
_OMPI_ALLREDUCE = (  # commutative operations
    (4, [(8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5)], 6),
    (8, [(16, 4), (8192, 3)], 6),
    (16, [(8192, 3)], 6),
    (32, [(64, 5), (4096, 3)], 6),
    (64, [(128, 5)], 6),
    (128, [(262144, 3)], 6),
    (256, [(131072, 2), (262144, 3)], 6),
    (512, [(4096, 2)], 6),
    (2048, [(2048, 2), (16384, 3)], 6),
    (4096, [(2048, 2), (4096, 5), (16384, 3)], 6),
    (None, [(2048, 2), (16384, 5), (32768, 3)], 6),
)
_OMPI_BROADCAST = (
    (4, [(32, 3), (256, 5), (512, 3), (1024, 7), (32768, 1), (131072, 5), (262144, 2), (524288, 1), (1048576, 6)], 5),
    (8, [(64, 5), (128, 6), (2048, 5), (8192, 6), (1048576, 1)], 2),
    (16, [(8, 7), (64, 5), (4096, 7), (16384, 5), (32768, 6)], 1),
    (32, [(4096, 7), (1048576, 6)], 8),
    (64, [(2048, 6)], 7),
    (128, [], 7),
    (256, [(2, 6), (16384, 5), (32768, 1), (65536, 5)], 7),
    (1024, [(16384, 7), (32768, 4)], 7),
    (2048, [(524288, 7)], 8),
    (4096, [(262144, 7)], 8),
    (None, [(8192, 7), (16384, 5), (262144, 7)], 8),
)
_OMPI_BARRIER = ((4, [], 3), (8, [], 1), (64, [], 3), (256, [], 4), (512, [], 6), (1024, [], 4), (4096, [], 6),
                 (None, [], 4))
_OMPI_REDUCE_SCATTER = (
    (4, [(65536, 3), (131072, 4)], 3),
    (8, [(8, 1), (262144, 2)], 3),
    (32, [(262144, 2)], 3),
    (64, [(64, 1), (2048, 2), (524288, 4)], 3),
    (128, [(256, 1), (512, 2), (2048, 4), (4096, 2)], 4),
    (256, [(256, 1), (512, 2)], 4),
    (512, [(256, 1), (1024, 2)], 4),
    (1024, [(512, 1), (2048, 2), (8192, 4), (16384, 2)], 4),
    (2048, [(512, 1), (4096, 2), (16384, 4), (32768, 2)], 4),
    (4096, [(512, 1), (4096, 2)], 4),
    (None, [(1024, 1), (8192, 2)], 4),
)


def _not_modelled(what: str, ran: str) -> str:
    return f"Open MPI picks {what} here, which is not modelled; ran {ran}"


_OMPI_IDS = {
    "broadcast": {1: ("linear", None), 2: ("chain", None), 3: ("chain", None),
                  4: ("binary_tree", _not_modelled("its split binary tree (id 4)", "the binary tree")),
                  5: ("binary_tree", None), 6: ("ompi_binomial", None), 7: ("knomial", None),
                  8: ("scatter_recursive_doubling_allgather",
                      _not_modelled("its scatter_allgather (id 8: binomial scatter, recursive-doubling allgather)",
                                    "MPICH's scatter + recursive-doubling allgather"))},
    "allreduce": {2: ("recursive_doubling", _not_modelled("nonoverlapping (id 2: reduce, then broadcast)",
                                                          "recursive doubling")),
                  3: ("recursive_doubling", None), 4: ("ring", None),
                  5: ("ring", "Open MPI's segmented ring (id 5) with the fixed rule's segment size 0 runs its ring"),
                  6: ("rabenseifner", "Open MPI's rabenseifner (id 6) folds a non-power-of-two P by exchanging "
                                      "halves; ran MPICH's (whole-vector fold)")},
    "alltoall": {1: ("linear", None), 2: ("pairwise", None), 3: ("modified_bruck", None),
                 4: ("linear", "Open MPI's linear_sync (id 4) with its default max_requests 0 posts every request "
                               "at once, as linear"),
                 5: ("pairwise", "Open MPI's two_proc (id 5) is one exchange and a local copy: pairwise at P=2")},
    "barrier": {1: ("linear", None), 3: ("recursive_doubling", None), 4: ("dissemination", None),
                6: ("tree", None)},
    "reduce_scatter": {1: ("recursive_halving", _not_modelled("non-overlapping (id 1: reduce, then scatterv)",
                                                              "recursive halving")),
                       2: ("recursive_halving", None),
                       3: ("ring", None),
                       4: ("butterfly", None)},
}


def _ompi_table(collective, rows, p, size):
    for below, limits, rest in rows:
        if below is None or p < below:
            return _OMPI_IDS[collective][next((i for limit, i in limits if size < limit), rest)]
    raise AssertionError("the last row of an Open MPI table has no bound")


def ompi_alltoall(p: int, m: int) -> tuple[str, str | None]:
    return _ompi_table("alltoall", _OMPI_ALLTOALL, p, m)


def ompi_barrier(p: int, s: int) -> tuple[str, str | None]:
    return _ompi_table("barrier", _OMPI_BARRIER, p, s)


def ompi_reduce_scatter(p: int, s: int) -> tuple[str, str | None]:
    return _ompi_table("reduce_scatter", _OMPI_REDUCE_SCATTER, p, s)


def mpich_reduce(p: int, s: int) -> tuple[str, str | None]:
    if s <= MPICH_REDUCE_SHORT:
        return "binomial", None
    return "binomial", (f"MPICH picks reduce_scatter_gather above {MPICH_REDUCE_SHORT} B (a built-in op, count "
                        ">= the power of two below P), which is not modelled; binomial runs")


def ompi_reduce(p: int, s: int) -> tuple[str, str | None]:
    return "binomial", "Open MPI's reduce decision is not modelled; MPICH's binomial runs"


_SINGLE = {"gather": "binomial", "scatter": "binomial"}
SELECTORS = {
    ("mpich", "reduce"): mpich_reduce,
    ("ompi", "reduce"): ompi_reduce,
    ("mpich", "alltoall"): mpich_alltoall,
    ("ompi", "alltoall"): ompi_alltoall,
    ("mpich", "barrier"): mpich_barrier,
    ("ompi", "barrier"): ompi_barrier,
    ("mpich", "reduce_scatter"): mpich_reduce_scatter,
    ("ompi", "reduce_scatter"): ompi_reduce_scatter,
    ("mpich", "allgather"): mpich_allgather,
    ("ompi", "allgather"): ompi_allgather,
    ("mpich", "allreduce"): mpich_allreduce,
    ("ompi", "allreduce"): ompi_allreduce,
    ("mpich", "broadcast"): mpich_broadcast,
    ("ompi", "broadcast"): ompi_broadcast,
}


def select(library: str, collective: str, p: int, size_bytes: int) -> tuple[str, str | None]:
    """(algorithm name, note) that `library` ('mpich' or 'ompi') would pick."""
    if library not in ("mpich", "ompi"):
        raise InputError(f"workload.selector: expected 'mpich' or 'ompi', got {library!r}")
    if collective in _SINGLE:
        return _SINGLE[collective], None
    try:
        return SELECTORS[(library, collective)](p, size_bytes)
    except KeyError:
        known = sorted({c for _, c in SELECTORS} | set(_SINGLE))
        raise InputError(f"workload.collective: expected one of {', '.join(known)}, got {collective!r}") from None
