"""The CPU and buffer primitives of the emulator's C data path, for code outside the emulator.

The pool's kernels are built from a few machine operations on memory: cache-line
write-back and invalidation (clflush, clflushopt, clwb) with their fences, the monotonic
clock, memcpy, a read pass that loads every byte. The calibration times each of them on
this machine, and a zero-copy application stores and reads its slots with them. They are
compiled (`cxlsim.emulator._kernels`); this module is their public name. Times are ns of
CLOCK_MONOTONIC, sizes bytes.

- `cpu_features()`: the line instructions this CPU has; `OP_*` their codes, `OP_NAMES` their names;
- `now_ns()`, `clock_read_ns(n)`: the kernels' clock, and what reading it twice costs;
- `memcpy_ns(dst, src, n)`, `paced_copy_ns(dst, src, bw)`: a timed memcpy, plain or paced at bw bytes/ns
  (the emulated CXL bandwidth); `spin_overhead_ns()` the pacing busy-wait's own cost;
- `line_op_ns(buf, op, dirty, fence, n)`: one write-back or invalidation pass over a buffer, timed;
- `write_block(dst, src)`, `read_pass(buf)`: a zero-copy application's store of its block and load of
  every block; `checksum_of_fill(value, n)` is what `read_pass` returns for n bytes of `value`.
"""
from cxlsim.emulator._kernels import (LINE_BYTES, OP_CLFLUSH, OP_CLFLUSHOPT, OP_CLWB, OP_NAMES, OP_NONE,
                                      checksum_of_fill, clock_read_ns, cpu_features, line_op_ns, memcpy_ns,
                                      now_ns, paced_copy_ns, read_pass, spin_overhead_ns, write_block)

__all__ = ["LINE_BYTES", "OP_CLFLUSH", "OP_CLFLUSHOPT", "OP_CLWB", "OP_NAMES", "OP_NONE", "checksum_of_fill",
           "clock_read_ns", "cpu_features", "line_op_ns", "memcpy_ns", "now_ns", "paced_copy_ns", "read_pass",
           "spin_overhead_ns", "write_block"]
