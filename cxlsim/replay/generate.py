"""A generated trace of a 3-D stencil: halo exchanges with six neighbours and an allreduce per iteration.

`write_stencil(directory, dims=(8, 8, 16), ...)` writes one SimGrid
time-independent file per rank (`stencil_rank-1.txt` ... numbered from 1, the
lines holding 0-based ranks, as `smpirun -trace-ti` does), an index file
`stencil.txt` and the sidecar `stencil.txt.meta.json` with the host speed the
compute is counted at. Ranks sit on a periodic X x Y x Z grid, rank =
x + X*(y + Y*z). Each iteration a rank computes, posts six irecv (one per
face, tag = the direction the message travels), sends its six faces with
isend, waits for all twelve, and joins an allreduce of one double (8 B, the
residual norm). Every face is `halo_bytes` of MPI_DOUBLE.

The default is the issue's benchmark: 8 x 8 x 16 = 1024 ranks, 64 KiB faces,
10 iterations.
"""
from __future__ import annotations

import json
import os

from cxlsim.errors import InputError
from cxlsim.results import atomic_write

__all__ = ["neighbours", "write_stencil"]

_DIRECTIONS = ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))


def neighbours(rank: int, dims: tuple) -> list[int]:
    """The ranks one step away in each of the six directions (periodic), in _DIRECTIONS order."""
    nx_, ny, nz = dims
    x, y, z = rank % nx_, (rank // nx_) % ny, rank // (nx_ * ny)
    return [(x + dx) % nx_ + nx_ * ((y + dy) % ny + ny * ((z + dz) % nz)) for dx, dy, dz in _DIRECTIONS]


def write_stencil(directory: str, dims: tuple = (8, 8, 16), halo_bytes: int = 64 * 1024, iterations: int = 10,
                  compute_flops: float = 1e6, host_speed_flops_per_s: float = 1e9) -> str:
    """Write the trace into `directory` (created); return the index file's path."""
    if len(dims) != 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise InputError(f"dims: expected three integers >= 1, got {dims!r}")
    if halo_bytes % 8:
        raise InputError(f"halo_bytes: expected a multiple of 8 (MPI_DOUBLE), got {halo_bytes}")
    os.makedirs(directory, exist_ok=True)
    p = dims[0] * dims[1] * dims[2]
    count = halo_bytes // 8
    files = []
    for r in range(p):
        near = neighbours(r, dims)
        lines = [f"{r} init"]
        for _ in range(iterations):
            lines.append(f"{r} compute {compute_flops:g}")
            for d in range(6):  # the message travelling in direction d comes from the opposite neighbour
                lines.append(f"{r} irecv {near[d ^ 1]} {d} {count} 0")
            for d in range(6):
                lines.append(f"{r} isend {near[d]} {d} {count} 0")
            lines.append(f"{r} waitall 12")
            lines.append(f"{r} allreduce 1 0 0")
        lines.append(f"{r} finalize")
        name = f"stencil_rank-{r + 1}.txt"
        atomic_write(os.path.join(directory, name), "\n".join(lines) + "\n")
        files.append(name)
    index = os.path.join(directory, "stencil.txt")
    atomic_write(index, "\n".join(files) + "\n")
    atomic_write(index + ".meta.json", json.dumps({"host_speed_flops_per_s": host_speed_flops_per_s,
                                                  "tracer": "cxlsim.replay.stencil"}) + "\n")
    return index
