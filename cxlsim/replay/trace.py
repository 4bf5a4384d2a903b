"""A replayable MPI trace: one sequence of calls per rank, read from any format.

A `Call` is one traced MPI call (or a compute gap) of one rank, with the file
and line it came from so every later error can name them. Sizes are bytes
(counts times the datatype size, converted by the reader), compute is in
flops at the tracing host's speed (`Trace.host_speed_flops_per_s` turns it
into seconds), ranks are 0-based world ranks.

Point-to-point fields follow the SimGrid time-independent format, which has
no communicator field: `peer` is the destination of a send and the source of
a receive (ANY_SOURCE for any source), `tag` may be ANY_TAG on a receive.
`wait` and `test` name a request by (`src`, `dst`, `tag`) as it was posted.

Collectives are taken to be on MPI_COMM_WORLD. `check_collectives` refuses a
trace whose ranks disagree on the sequence of collectives (kind, root and
size), naming the first line where a rank differs from rank 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cxlsim.errors import InputError

__all__ = ["ANY_SOURCE", "ANY_TAG", "POINT_TO_POINT", "COLLECTIVES", "LOCAL", "Call", "Trace", "check_collectives"]

ANY_SOURCE = -333
"""SimGrid's MPI_ANY_SOURCE, as it appears in a trace."""
ANY_TAG = -444
"""SimGrid's MPI_ANY_TAG, as it appears in a trace."""

POINT_TO_POINT = ("send", "isend", "recv", "irecv", "wait", "waitall", "test", "sendrecv")
"""Point-to-point kinds (sendrecv is SimGrid's `sendRecv`)."""
COLLECTIVES = ("barrier", "bcast", "reduce", "allreduce", "allgather", "alltoall", "gather", "scatter",
               "reducescatter")
"""Collective kinds, on MPI_COMM_WORLD."""
LOCAL = ("compute", "sleep")
"""Kinds that take time without communicating: `compute` (flops) and `sleep` (seconds)."""


class Call(NamedTuple):
    """One traced call of one rank. Fields a kind does not use are 0 (see the module docstring)."""

    kind: str
    """One of POINT_TO_POINT, COLLECTIVES or LOCAL."""
    file: str
    line: int
    """1-based line number in `file`."""
    peer: int = 0
    """send/isend: destination; recv/irecv: source (ANY_SOURCE allowed); sendrecv: destination."""
    tag: int = 0
    """Point-to-point tag (ANY_TAG allowed on a receive); sendrecv uses tag 0, as SimGrid replays it."""
    size_bytes: int = 0
    """Point-to-point: message bytes (sendrecv: the bytes sent). Collectives, as cxlsim's runner counts them:
    allgather, gather, scatter, alltoall: the block per rank (per destination for alltoall); bcast, reduce,
    allreduce, reducescatter: the whole vector."""
    recv_bytes: int = 0
    """sendrecv: the bytes received."""
    src: int = 0
    """sendrecv: the source; wait/test: the request's source."""
    dst: int = 0
    """wait/test: the request's destination."""
    root: int = 0
    """bcast, reduce, gather, scatter: the root rank."""
    amount: float = 0.0
    """compute: flops; sleep: seconds; reduce, allreduce, reducescatter: flops of the reduction operator."""
    counts: tuple = ()
    """reducescatter: the bytes each rank receives."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Trace:
    """Every rank's calls, rank r at index r."""

    ranks: list
    """ranks[r]: rank r's calls in program order (a list of `Call`)."""
    files: list
    """The file each rank was read from, by rank."""
    source: str
    """The path the trace was read from."""
    host_speed_flops_per_s: float | None = None
    """The `smpi/host-speed` in force when tracing (flops per second), if the trace says so."""

    @property
    def size(self) -> int:
        return len(self.ranks)

    def calls(self) -> int:
        return sum(len(calls) for calls in self.ranks)


def _signature(call: Call) -> tuple:
    if call.kind in ("bcast", "reduce", "gather", "scatter"):
        return call.kind, call.size_bytes, call.root
    if call.kind == "reducescatter":
        return call.kind, call.counts
    return call.kind, call.size_bytes


def _describe(call: Call) -> str:
    text = f"{call.kind} of {call.size_bytes} B"
    if call.kind in ("bcast", "reduce", "gather", "scatter"):
        text += f" (root {call.root})"
    if call.kind == "reducescatter":
        text = f"reducescatter of {list(call.counts)} B"
    return text


def check_collectives(trace: Trace) -> int:
    """Check every rank makes the same collectives in the same order; return how many each makes.

    Raises InputError naming the first line where a rank's sequence differs from
    rank 0's (or where one rank has a collective another lacks).
    """
    sequences = [[c for c in calls if c.kind in COLLECTIVES] for calls in trace.ranks]
    reference = sequences[0]
    for rank, seq in enumerate(sequences[1:], start=1):
        for k, (ours, theirs) in enumerate(zip(seq, reference)):
            if _signature(ours) != _signature(theirs):
                raise InputError(f"{ours.where}: rank {rank}'s collective #{k + 1} is {_describe(ours)}, but "
                                 f"rank 0's is {_describe(theirs)} ({theirs.where}); the ranks disagree on the "
                                 f"sequence of collectives (all are taken to be on MPI_COMM_WORLD)")
        if len(seq) != len(reference):
            longer, who = (seq, rank) if len(seq) > len(reference) else (reference, 0)
            extra = longer[min(len(seq), len(reference))]
            other = 0 if who == rank else rank
            raise InputError(f"{extra.where}: rank {who}'s collective #{min(len(seq), len(reference)) + 1} "
                             f"({_describe(extra)}) has no counterpart on rank {other}, which makes only "
                             f"{min(len(seq), len(reference))} collectives")
    return len(reference)
