"""MPICH's shared-memory segments that a failed job left behind.

MPICH (ch4:shm) keeps its intra-node buffers in `/dev/shm/mpich_shm_*` files and unlinks them at
`MPI_Finalize`. A job that aborts (`MPI_Abort`, a cxlsim timeout) or loses a rank never gets there,
and its files stay until the machine reboots. `cxlsim mpi run` removes the ones such a job left:
files that appeared while the job ran and that no process maps any more.
"""
from __future__ import annotations

import glob
import os

SHM_DIR = "/dev/shm"
PATTERN = "mpich_shm_*"


def segments(directory: str = SHM_DIR) -> set[str]:
    """The names of MPICH's segment files in `directory`."""
    return {os.path.basename(path) for path in glob.glob(os.path.join(directory, PATTERN))}


def mapped_names(proc: str = "/proc") -> set[str]:
    """Every file name some process maps (from each /proc/PID/maps this user may read)."""
    names = set()
    for maps in glob.glob(os.path.join(proc, "[0-9]*", "maps")):
        try:
            with open(maps) as f:
                for line in f:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6:
                        names.add(os.path.basename(fields[5].strip().removesuffix(" (deleted)")))
        except OSError:  # the process ended, or it is another user's
            continue
    return names


def remove_left_by_job(before: set[str], directory: str = SHM_DIR, proc: str = "/proc") -> list[str]:
    """Remove the segment files that appeared since `before` and that no process maps; return their names.

    A file another running job still uses is mapped, so it stays."""
    in_use = mapped_names(proc)
    removed = []
    for name in sorted(segments(directory) - before):
        if name in in_use:
            continue
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:  # its job removed it meanwhile
            continue
        removed.append(name)
    return removed
