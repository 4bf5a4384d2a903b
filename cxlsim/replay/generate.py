"""Generated traces of mini-app communication patterns, written as SimGrid time-independent traces.

Each generator writes one file per rank (`NAME_rank-1.txt` ... numbered from 1,
the lines holding 0-based ranks, as `smpirun -trace-ti` does), an index file
`NAME.txt` and the sidecar `NAME.txt.meta.json` with the host speed the
compute is counted at (1 Gflop/s: one flop is one ns). Ranks sit on a periodic
X x Y x Z grid, rank = x + X*(y + Y*z) (`neighbours`).

- `write_stencil`: a 3-D halo-exchange stencil. Each iteration a rank
  computes, posts six irecv (one per face, tag = the direction the message
  travels), sends its six faces with isend, waits for all twelve, and joins an
  allreduce of one double (8 B, the residual norm). The default is the issue's
  benchmark: 8 x 8 x 16 = 1024 ranks, 64 KiB faces, 10 iterations.
- `write_cg`: an allreduce-heavy conjugate-gradient solver (HPCG-like): each
  iteration the sparse matrix-vector product (its halo exchange with the six
  neighbours, then its compute), two dot products (an 8-byte allreduce each)
  and the vector updates (compute).
- `write_training`: a data-parallel training step: forward compute, then the
  backward pass in `buckets` equal parts, each followed by a blocking
  allreduce of its gradient bucket (a TI trace has no non-blocking
  collectives, so the overlap DDP gets from asynchronous allreduces is not in
  it: the projection is an upper bound of the step time).

Compute figures are flops at 1 Gflop/s; choose them to match the application.
"""
from __future__ import annotations

import argparse
import json
import math
import os

from cxlsim.errors import InputError
from cxlsim.results import atomic_write

__all__ = ["HOST_SPEED_FLOPS_PER_S", "neighbours", "grid", "write_ti", "write_stencil", "write_cg",
           "write_training"]

HOST_SPEED_FLOPS_PER_S = 1e9
"""The speed generated compute is counted at: one flop per ns."""

_DIRECTIONS = ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))


def neighbours(rank: int, dims: tuple) -> list[int]:
    """The ranks one step away in each of the six directions (periodic), in _DIRECTIONS order."""
    nx_, ny, nz = dims
    x, y, z = rank % nx_, (rank // nx_) % ny, rank // (nx_ * ny)
    return [(x + dx) % nx_ + nx_ * ((y + dy) % ny + ny * ((z + dz) % nz)) for dx, dy, dz in _DIRECTIONS]


def grid(ranks: int) -> tuple:
    """The most cubic X x Y x Z grid of `ranks` ranks (X <= Y <= Z): the least Z, then the least Z - X."""
    if not isinstance(ranks, int) or ranks < 1:
        raise InputError(f"ranks: expected an integer >= 1, got {ranks!r}")
    best = (1, 1, ranks)
    for x in range(1, round(ranks ** (1 / 3)) + 2):
        if ranks % x:
            continue
        for y in range(x, math.isqrt(ranks // x) + 1):
            if (ranks // x) % y == 0:
                z = ranks // x // y
                if z >= y and (z, z - x) < (max(best), max(best) - min(best)):
                    best = (x, y, z)
    return best


def _check_dims(dims):
    if len(dims) != 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise InputError(f"dims: expected three integers >= 1, got {dims!r}")
    return dims[0] * dims[1] * dims[2]


def _halo(r: int, near: list, count: int) -> list[str]:
    """Six irecv (from the opposite neighbour of each direction), six isend, one waitall."""
    lines = [f"{r} irecv {near[d ^ 1]} {d} {count} 0" for d in range(6)]
    lines += [f"{r} isend {near[d]} {d} {count} 0" for d in range(6)]
    return lines + [f"{r} waitall 12"]


def _doubles(name: str, size_bytes: int) -> int:
    if not isinstance(size_bytes, int) or size_bytes < 8 or size_bytes % 8:
        raise InputError(f"{name}: expected a multiple of 8 B (MPI_DOUBLE) >= 8, got {size_bytes!r}")
    return size_bytes // 8


def write_ti(directory: str, name: str, ranks: list, tracer: str) -> str:
    """Write rank r's lines `ranks[r]` (without init/finalize) as a TI trace; return the index path."""
    os.makedirs(directory, exist_ok=True)
    files = []
    for r, lines in enumerate(ranks):
        file = f"{name}_rank-{r + 1}.txt"
        atomic_write(os.path.join(directory, file), "\n".join([f"{r} init", *lines, f"{r} finalize"]) + "\n")
        files.append(file)
    index = os.path.join(directory, f"{name}.txt")
    atomic_write(index, "\n".join(files) + "\n")
    atomic_write(index + ".meta.json", json.dumps({"host_speed_flops_per_s": HOST_SPEED_FLOPS_PER_S,
                                                  "tracer": tracer}) + "\n")
    return index


def write_stencil(directory: str, dims: tuple = (8, 8, 16), halo_bytes: int = 64 * 1024, iterations: int = 10,
                  compute_flops: float = 1e6) -> str:
    """The 3-D stencil trace (see the module docstring); returns the index file's path."""
    p = _check_dims(dims)
    count = _doubles("halo_bytes", halo_bytes)
    ranks = []
    for r in range(p):
        near = neighbours(r, dims)
        lines = []
        for _ in range(iterations):
            lines.append(f"{r} compute {compute_flops:g}")
            lines += _halo(r, near, count)
            lines.append(f"{r} allreduce 1 0 0")
        ranks.append(lines)
    return write_ti(directory, "stencil", ranks, "cxlsim.replay.generate.write_stencil")


def write_cg(directory: str, dims: tuple, halo_bytes: int = 8 * 1024, iterations: int = 20,
             spmv_flops: float = 2e5, update_flops: float = 5e4) -> str:
    """The CG solver trace (see the module docstring); returns the index file's path."""
    p = _check_dims(dims)
    count = _doubles("halo_bytes", halo_bytes)
    ranks = []
    for r in range(p):
        near = neighbours(r, dims)
        lines = []
        for _ in range(iterations):
            lines += _halo(r, near, count)
            lines += [f"{r} compute {spmv_flops:g}", f"{r} allreduce 1 0 0", f"{r} compute {update_flops:g}",
                      f"{r} allreduce 1 0 0", f"{r} compute {update_flops:g}"]
        ranks.append(lines)
    return write_ti(directory, "cg", ranks, "cxlsim.replay.generate.write_cg")


def write_training(directory: str, ranks: int, gradient_bytes: int = 16 * 2**20, buckets: int = 4,
                   forward_flops: float = 2e7, backward_flops: float = 4e7, steps: int = 2) -> str:
    """The data-parallel training trace (see the module docstring); returns the index file's path."""
    if not isinstance(buckets, int) or buckets < 1:
        raise InputError(f"buckets: expected an integer >= 1, got {buckets!r}")
    count = _doubles("gradient_bytes", gradient_bytes)
    if count % buckets:
        raise InputError(f"gradient_bytes: {gradient_bytes} B is not {buckets} equal buckets of doubles")
    lines = []
    for _ in range(steps):
        lines.append(f"compute {forward_flops:g}")
        for _ in range(buckets):
            lines += [f"compute {backward_flops / buckets:g}", f"allreduce {count // buckets} 0 0"]
    if not isinstance(ranks, int) or ranks < 1:
        raise InputError(f"ranks: expected an integer >= 1, got {ranks!r}")
    return write_ti(directory, "training", [[f"{r} {line}" for line in lines] for r in range(ranks)],
                    "cxlsim.replay.generate.write_training")


def main(argv=None) -> int:
    """`python -m cxlsim.replay.generate stencil|cg|training DIR --ranks N`: write a trace, print its index."""
    ap = argparse.ArgumentParser(prog="python -m cxlsim.replay.generate",
                                 description="Write a generated mini-app trace (SimGrid TI format) into DIR.")
    ap.add_argument("kind", choices=["stencil", "cg", "training"])
    ap.add_argument("directory")
    ap.add_argument("--ranks", type=int, default=16, help="ranks, on the most cubic grid (default 16)")
    ap.add_argument("--iterations", type=int, help="stencil and cg iterations, or training steps")
    args = ap.parse_args(argv)
    if args.kind == "training":
        index = write_training(args.directory, args.ranks, steps=args.iterations or 2)
    elif args.kind == "cg":
        index = write_cg(args.directory, grid(args.ranks), iterations=args.iterations or 20)
    else:
        index = write_stencil(args.directory, grid(args.ranks), iterations=args.iterations or 10)
    print(index)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
