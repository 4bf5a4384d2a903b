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
notes. Open MPI's fixed allreduce and broadcast rules are not in the
reference, so 'ompi' uses MPICH's and says so. Collectives with one
implemented algorithm (reduce_scatter ring, gather binomial) always get it.
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
    name, _ = mpich_allreduce(p, s)
    return name, "Open MPI's allreduce rule is not in the reference; used MPICH's"


def mpich_broadcast(p: int, s: int) -> tuple[str, str | None]:
    if s < MPICH_BCAST_SHORT or p < MPICH_BCAST_MIN_PROCS:
        return "binomial", None
    if s < MPICH_BCAST_LONG and is_pow2(p):
        return "scatter_recursive_doubling_allgather", None
    return "scatter_ring_allgather", None


def ompi_broadcast(p: int, s: int) -> tuple[str, str | None]:
    name, _ = mpich_broadcast(p, s)
    return name, "Open MPI's broadcast rule is not in the reference; used MPICH's"


_SINGLE = {"reduce_scatter": "ring", "gather": "binomial"}
SELECTORS = {
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
        raise InputError(f"workload.collective: expected one of allgather, allreduce, "
                         f"{', '.join(_SINGLE)}, got {collective!r}") from None
