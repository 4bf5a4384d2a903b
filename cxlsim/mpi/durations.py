"""The library's call durations: `DIR/rank<r>.durations.tsv` beside each rank's trace `DIR/rank<r>.txt`.

With `CXLSIM_MPI_TRACE=DIR` the library writes SimGrid's time-independent trace, which has no field
for a call's time, and beside it one row per action line a call wrote (not `init`, not `compute`):

    line  start_ns  duration_ns  path  setup

`line` is the 1-based line number in `rank<r>.txt` (`Call.line` of cxlsim's trace reader);
`start_ns` the call's entry on CLOCK_MONOTONIC (one clock for every rank of a host, so ranks'
calls can be lined up); `duration_ns` entry to return; `path` `pool`, `hier` (the many-node
path), `fallback:REASON` (a collective passed to MPI, REASON as in the stats) or `mpi` (a call
the library only traces); `setup` 1 if the call set up its communicator's pool. The lines one
call writes (a Waitall that completed several requests) share start and duration. The trace's own
writes are in neither a duration nor a compute line (docs/mpi.md says what they cost).
"""
from __future__ import annotations

import os
from typing import NamedTuple

from cxlsim import config
from cxlsim.errors import InputError

__all__ = ["HEADER", "CallTime", "durations_path", "read"]

HEADER = ("line", "start_ns", "duration_ns", "path", "setup")
"""The file's header row, in column order."""
PATHS = ("pool", "hier", "mpi")
"""The paths a call can take; a fallback is `fallback:REASON`."""


class CallTime(NamedTuple):
    """One traced call's time, for one line of its rank's trace."""

    line: int
    """1-based line number in rank<r>.txt."""
    start_ns: int
    """The call's entry, CLOCK_MONOTONIC ns."""
    duration_ns: int
    """Entry to return, ns."""
    path: str
    """pool, hier, mpi, or fallback:REASON."""
    setup: bool
    """The call set up its communicator's pool."""

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


def durations_path(rank_file: str) -> str:
    """The durations file beside a rank's trace file `.../rank<r>.txt`."""
    return os.path.splitext(rank_file)[0] + ".durations.tsv"


def read(rank_file: str) -> dict[int, CallTime]:
    """The call times of the trace `rank_file` (rank<r>.txt), by its line number.

    Raises InputError naming the durations file and line for a missing file or a malformed row.
    """
    path = durations_path(rank_file)
    if not os.path.isfile(path):
        raise InputError(f"{rank_file}: no call durations beside it ({path} not found; the library writes it "
                         f"with CXLSIM_MPI_TRACE)")
    rows = config.read_text(path, "call durations").splitlines()
    if not rows or tuple(rows[0].split("\t")) != HEADER:
        raise InputError(f"{path}:1: expected the header {' '.join(HEADER)!r} (tab-separated)")
    times: dict[int, CallTime] = {}
    for number, row in enumerate(rows[1:], start=2):
        fields = row.split("\t")
        if len(fields) != len(HEADER):
            raise InputError(f"{path}:{number}: expected {len(HEADER)} tab-separated fields "
                             f"({' '.join(HEADER)}), found {len(fields)}")
        try:
            line, start, duration, setup = (int(fields[i]) for i in (0, 1, 2, 4))
        except ValueError:
            raise InputError(f"{path}:{number}: line, start_ns, duration_ns and setup must be integers, "
                             f"got {row!r}") from None
        where = fields[3]
        if line < 1 or duration < 0 or setup not in (0, 1) or line in times or \
                not (where in PATHS or where.startswith("fallback:")):
            raise InputError(f"{path}:{number}: expected a new line number >= 1, a duration >= 0, a path "
                             f"({', '.join(PATHS)} or fallback:REASON) and setup 0 or 1, got {row!r}")
        times[line] = CallTime(line, start, duration, where, bool(setup))
    return times
