"""Copy bandwidth of this machine, measured with the kernels' memcpy (GIL released).

The benchmark and the calibration use it to put allgather times against the
copy-bandwidth bound. Results are bytes per ns (= GB/s).
"""
from __future__ import annotations

import numpy as np

from cxlsim.emulator import _kernels


def copy_bandwidth(size_bytes: int, min_time_s: float = 0.005, repeats: int = 3) -> float:
    """Best-of-`repeats` single-thread memcpy bandwidth in bytes/ns for copies of `size_bytes`.

    Each repeat copies the same buffers for at least `min_time_s`, so small copies are
    cache-resident and large ones stream from DRAM, as in a real allgather.
    """
    size_bytes = max(int(size_bytes), 1)
    src = np.ones(size_bytes, dtype=np.uint8)
    dst = np.zeros(size_bytes, dtype=np.uint8)
    ns = _kernels.memcpy_ns(dst, src, 1)  # warm up and size the loop
    iterations = max(1, int(min_time_s * 1e9 / max(ns, 1.0)))
    best = min(_kernels.memcpy_ns(dst, src, iterations) for _ in range(repeats))
    return size_bytes / max(best, 1e-3)


def copy_bandwidth_curve(sizes, min_time_s: float = 0.005) -> dict[int, float]:
    """{size_bytes: bytes/ns} for each size."""
    return {int(s): copy_bandwidth(s, min_time_s) for s in sizes}
