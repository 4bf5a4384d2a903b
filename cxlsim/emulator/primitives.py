"""The CPU and buffer primitives of the emulator's C data path, for code outside the emulator.

The pool's kernels are built from a few machine operations on memory: cache-line
write-back and invalidation (clflush, clflushopt, clwb) with their fences, the monotonic
clock, memcpy, a read pass that loads every byte, the reduction's fold. The calibration
times each of them on this machine, and a zero-copy application stores and reads its
slots with them. They are compiled (`cxlsim.emulator._kernels`, `_pool_kernel`); this module
is their public name. Times are ns of CLOCK_MONOTONIC, sizes bytes.

- `cpu_features()`: the line instructions this CPU has; `OP_*` their codes, `OP_NAMES` their names;
- `now_ns()`, `clock_read_ns(n)`: the kernels' clock, and what reading it twice costs;
- `memcpy_ns(dst, src, n)`, `paced_copy_ns(dst, src, bw)`: a timed memcpy, plain or paced at bw bytes/ns
  (the emulated CXL bandwidth); `spin_overhead_ns()` the pacing busy-wait's own cost;
- `line_op_ns(buf, op, dirty, fence, n)`: one write-back or invalidation pass over a buffer, timed;
- `write_block(dst, src)`, `read_pass(buf)`: a zero-copy application's store of its block and load of
  every block; `checksum_of_fill(value, n)` is what `read_pass` returns for n bytes of `value`;
- `pattern_copy(comm, steps, iterations)`: one collective's copies on a two-rank pool, every rank at
  once, each phase timed (`_probes.pattern_copy`); the calibration's per-collective primitive;
- `flag_exchange(comm, iterations, gap_ns)`: every rank of a pool publishes and waits at once, back to back
  (the barrier's step, `_probes.flag_exchange`), mean ns per exchange;
- `fold_samples_ns(nbytes, dtype, op, iterations)`: the pool kernels' own fold (cxl_reduce.h) of
  two blocks into an output, the blocks in this core's cache, or (with `between`, on a shared pool)
  one of them rewritten by another core first.
"""
import numpy as np

from cxlsim.emulator._kernels import (LINE_BYTES, OP_CLFLUSH, OP_CLFLUSHOPT, OP_CLWB, OP_NAMES, OP_NONE,
                                      checksum_of_fill, clock_read_ns, cpu_features, line_op_ns, memcpy_ns,
                                      now_ns, paced_copy_ns, read_pass, spin_overhead_ns, write_block)
from cxlsim.emulator._pool_kernel import PoolKernel
from cxlsim.emulator._probes import flag_exchange, pattern_copy
from cxlsim.errors import InputError

__all__ = ["LINE_BYTES", "OP_CLFLUSH", "OP_CLFLUSHOPT", "OP_CLWB", "OP_NAMES", "OP_NONE", "checksum_of_fill",
           "clock_read_ns", "cpu_features", "flag_exchange", "fold_layout", "fold_other_block", "fold_samples_ns", "line_op_ns", "memcpy_ns", "now_ns",
           "paced_copy_ns", "pattern_copy", "read_pass", "spin_overhead_ns", "write_block"]

NEVER_LARGE = 1 << 62  # the allreduce threshold that keeps every call on the small algorithm (one fold)


def fold_layout(nbytes: int) -> tuple[int, int, int]:
    """(slot stride, data offset, total bytes) of the two-kernel pool `fold_samples_ns` lays out for n-byte blocks."""
    stride = -(-int(nbytes) // LINE_BYTES) * LINE_BYTES
    data_offset = 2 * LINE_BYTES
    return stride, data_offset, data_offset + 4 * stride


def fold_other_block(nbytes: int, call: int) -> int:
    """Byte offset, in `fold_samples_ns`'s pool, of rank 1's block in call `call` (0, 1, ...; its data round
    is call + 1, and rounds alternate between two buffers)."""
    stride, data_offset, _ = fold_layout(nbytes)
    return data_offset + (((call + 1) & 1) * 2 + 1) * stride


def fold_samples_ns(nbytes: int, dtype="float32", op: str = "sum", iterations: int = 50, pool=None,
                    between=None) -> list[float]:
    """ns per call, `iterations` samples, of the pool kernels' fold of two blocks of `nbytes` (a whole
    number of `dtype` elements) into an output array under `op`.

    How: two rank kernels (np 2, hw) over one buffer (`pool`, a writable uint8 array of at least
    `fold_layout(nbytes)[2]` bytes; default a private one); both start an allreduce
    (`allreduce_start` copies each input into its slot and publishes it), then rank 0's
    `allreduce_wait` is timed: its flags are already there, so it is cxl_coll_fold_slots of
    both slots into the output (cxl_reduce.h's vectorised left fold, small algorithm), plus
    the call's own cost (the caller subtracts a tiny call's to get the fold alone). Without
    `between`, both blocks were just written by this core: the fold's compute and cache rate.
    `between(call)`, if given, runs after both inputs are published and before the timed fold
    (call = 0, 1, ... of the calls, warm-up included); another process may then rewrite rank 1's
    block in a shared `pool` (at `fold_other_block(nbytes, call)`), so that the fold reads lines
    another core holds Modified, as a rank's fold of the other rank's block does.
    """
    dtype = np.dtype(dtype)
    if nbytes <= 0 or nbytes % dtype.itemsize:
        raise InputError(f"fold: expected a positive whole number of {dtype} elements in bytes, got {nbytes}")
    stride, data_offset, total = fold_layout(nbytes)
    pool = np.zeros(total, np.uint8) if pool is None else pool
    pool[:data_offset] = 0  # fresh flag lines: the two kernels start at epoch 0
    kernels = [PoolKernel(pool, nranks=2, rank=r, flags_offset=0, data_offset=data_offset, slot_stride=stride,
                          slot_bytes=stride) for r in range(2)]
    count = nbytes // dtype.itemsize
    sends = [np.ones(count, dtype), np.full(count, 2, dtype)]
    recvs = [np.empty(count, dtype) for _ in range(2)]
    out = []
    try:
        for i in range(iterations + 2):  # the first two calls warm the slots and outputs
            for k, s, r in zip(kernels, sends, recvs):
                k.allreduce_start(s, r, op, NEVER_LARGE)
            if between is not None:
                between(i)
            t0 = now_ns()
            kernels[0].allreduce_wait()
            t1 = now_ns()
            kernels[1].allreduce_wait()
            if i >= 2:
                out.append(t1 - t0)
    finally:
        for k in kernels:
            k.close()
    return out
