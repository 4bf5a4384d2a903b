"""The pool communicator: allgather among ranks that share one emulated CXL pool.

Each call has an epoch (1, 2, ...), and each call that carries data a data round
(1, 2, ...; zero-byte calls such as `barrier` have none). A rank writes its block into
its slot of buffer ``round % 2``, publishes ``epoch`` on its own flag line, waits until
every flag shows ``epoch``, then reads all slots. Two buffers make back-to-back calls
safe: a rank reuses round k's buffer only in round k + 2, after every rank published the
epoch of round k + 1, which each does only after it finished reading round k. Counting
rounds rather than epochs keeps the buffers alternating when barriers come between
calls (as in the OSU loop); reusing the buffer just read costs 2-3x in copy time.

Copy mode::

    comm.allgather(sendbuf, recvbuf)          # recvbuf holds size x sendbuf

Zero-copy mode: write straight into the pool, read the result in place::

    block = comm.send_view(count, dtype)       # writable view of this rank's next slot
    block[:] = ...                             # or primitives.write_block(block, src): a memcpy
    result = comm.allgather_zero_copy(block)   # read-only (size, count) view of all slots
    result.array[r]                            # valid until this rank's next collective

The fused calls put the data in themselves; read the result's `rows`, in which this rank's
own block is its send buffer (in its cache, where the pool copy is not)::

    result = comm.allgather_view(sendbuf)      # or broadcast_view(count, dtype, root, sendbuf), alltoall_view
    result.rows[r]                             # rank r's block (this rank's: a view of sendbuf)

Touching `result` after the next call raises StaleViewError (an epoch check).
"""
from __future__ import annotations

import os

import numpy as np

from cxlsim.coherence import Coherence
from cxlsim.emulator import _kernels, _pool_kernel, _probes
from cxlsim.emulator.pool import Pool
from cxlsim.errors import InputError, RunError

CollectiveTimeout = _pool_kernel.CollectiveTimeout
StaleViewError = _pool_kernel.StaleViewError
ZeroCopyResult = _pool_kernel.ZeroCopyResult
count_and_dtype = _pool_kernel.count_and_dtype
own_block = _pool_kernel.own_block
rows_with_own = _pool_kernel.rows_with_own
WRITEBACK_OPS = {"clflushopt": _kernels.OP_CLFLUSHOPT, "clwb": _kernels.OP_CLWB, "clflush": _kernels.OP_CLFLUSH}

ALLREDUCE_LARGE_BYTES = _pool_kernel.ALLREDUCE_LARGE_BYTES  # measured if CXLSIM_PROFILE names a profile (tuning.py)
ALLREDUCE_LARGE_SOURCE = _pool_kernel.ALLREDUCE_LARGE_SOURCE
SLOW_ROUNDTRIP_NS = 200.0  # = host.py's (host imports the launcher, which imports this module: no import here)
NT_SLOW_MIN_BYTES = 2048  # non-temporal copy-ins from this size in the slow placement (choose_copy_in; = pools.c)
DISTURBED_ROUNDTRIP_NS = 2000.0  # = host.py's and pools.c's: a probe above this lost a CPU, no placement
PROBE_TRIES = 5  # probes tried before a disturbed host keeps plain copy-ins (= pools.c)
SPIN_ITERS = 4096
OVERSUBSCRIBED_SPIN_ITERS = 8


def choose_line_ops(writeback: str = "auto") -> tuple[int, int]:
    """Pick (writer op, reader op) for flush mode from the CPU's features.

    The writer writes lines back with clflushopt (or clwb if asked; it keeps the line
    cached), else clflush. The reader must drop stale lines, so it uses clflushopt,
    else clflush, never clwb.
    """
    features = _kernels.cpu_features()
    reader = "clflushopt" if "clflushopt" in features else "clflush"
    if writeback == "auto":
        writer = reader
    elif writeback in WRITEBACK_OPS:
        writer = writeback
    else:
        raise InputError(f"writeback: expected 'auto', 'clflushopt', 'clwb' or 'clflush', got {writeback!r}")
    for op in {reader, writer}:
        if op not in features:
            raise InputError(f"coherence 'flush' needs {op}, which this CPU lacks (it has: {sorted(features) or 'none'})")
    return WRITEBACK_OPS[writer], WRITEBACK_OPS[reader]


def timing_options(cls, pool_latency_ns: float = 0.0, pool_bw_bytes_per_ns: float = 0.0) -> dict:
    """Check emulated CXL timing values for communicator class `cls`; return its constructor keywords.

    Both 0 (off) gives {}, so kernels without timing (the pure-Python twin) keep working;
    asking a kernel that cannot inject timing for it is an InputError.
    """
    _kernels.check_timing(pool_latency_ns, pool_bw_bytes_per_ns)
    if not (pool_latency_ns or pool_bw_bytes_per_ns):
        return {}
    if not issubclass(cls, _pool_kernel.PoolKernel):
        raise InputError(f"emulated CXL timing (pool latency/bandwidth) runs in the Cython kernels only; "
                         f"{cls.__name__} cannot inject it")
    return dict(pool_latency_ns=float(pool_latency_ns), pool_bw_bytes_per_ns=float(pool_bw_bytes_per_ns))


class CommMixin:
    """The public communicator API, on top of a kernel class (Cython or the pure-Python twin)."""

    @classmethod
    def open(cls, pool: Pool, rank: int, *, coherence: Coherence | str | None = None, timeout_s: float = 10.0,
             writeback: str = "auto", pool_latency_ns: float = 0.0, pool_bw_bytes_per_ns: float = 0.0,
             allreduce_large_bytes: int = ALLREDUCE_LARGE_BYTES) -> "PoolComm":
        """Attach `rank` to `pool`. coherence: 'hw' or 'flush' (default: the backend's).
        timeout_s: how long any wait may take before CollectiveTimeout names the missing ranks.
        allreduce_large_bytes: allreduce chunks of at least this many bytes use the large pool
        algorithm (reduce-scatter + allgather), smaller ones the small one (every rank folds every
        block); every rank must pass the same value. The default is the threshold measured by
        `cxlsim calibrate`, from the profile the environment variable CXLSIM_PROFILE names, else
        64 KiB (`cxlsim.emulator.tuning`).

        Emulated CXL device timing (Cython kernels only; 0, the default, is off and costs one
        branch per call), with L = pool_latency_ns and B = pool_bw_bytes_per_ns (bytes/ns = GB/s),
        all busy-waits on CLOCK_MONOTONIC inside the kernel:

        - flags: after a rank has seen every other rank's flag it waits L more, so each wait
          for flags (each flag hop, each barrier or bare sync) costs native + L; nothing at np = 1;
        - block reads: each of the np blocks of a call with nbytes > 0 costs one L, one after
          the other, when it is read: before its copy-out, or (zero-copy) np x L before the
          call returns the blocks;
        - copies: the kernel's copy of this rank's block into the pool and of every block out
          of it go in 4 KiB chunks, each started only once B x elapsed time covers the bytes
          so far plus the chunk (a copy-out's clock starts after its L), so a copy of n bytes
          takes max(native, n/B), plus at most one chunk's native copy time;
        - the busy-wait's own cost (about 20-40 ns, calibrated once per process) is subtracted
          from each delay; a copy whose n/B is below it is not paced.

        One copy-mode allgather of n bytes per rank therefore costs native sync + L + n/B +
        np x (L + n/B). In zero-copy mode the caller's own loads and stores of the slots cannot
        be intercepted, so they get the per-block L but are not paced. The exact schedule is in
        the header comment of cxl_ops.h; `set_timing` changes it between calls.
        """
        coherence = Coherence.parse(coherence or pool.handle.spec.default_coherence, "--coherence")
        if not timeout_s > 0:
            raise InputError(f"--timeout: expected a positive number of seconds, got {timeout_s!r}")
        timing = timing_options(cls, pool_latency_ns, pool_bw_bytes_per_ns)
        writer, reader = choose_line_ops(writeback) if coherence is Coherence.FLUSH else (0, 0)
        lay = pool.layout
        cores = len(os.sched_getaffinity(0))
        # Spin briefly when every rank has a core; when ranks outnumber cores, yield almost at once.
        spin_iters = SPIN_ITERS if lay.nranks <= cores else OVERSUBSCRIBED_SPIN_ITERS
        comm = cls(pool.mapping, nranks=lay.nranks, rank=rank, flags_offset=lay.flags_offset,
                   data_offset=lay.data_offset, slot_stride=lay.slot_stride, slot_bytes=lay.slot_bytes,
                   coherence=coherence, writeback_op=writer, invalidate_op=reader, timeout_ns=timeout_s * 1e9,
                   spin_iters=spin_iters, **timing)
        comm.pool = pool
        comm.allreduce_large_bytes = _pool_kernel.check_large_bytes(allreduce_large_bytes)
        # Views are built on one array that holds a buffer export of the mapping: while any view
        # lives it pins the mapping, so closing never leaves a view over unmapped memory.
        comm._pool_view = np.frombuffer(pool.mapping, dtype=np.uint8)  # holds a buffer export
        comm._views = {}
        return comm

    def _check_views(self) -> None:
        if self._pool_view is None:
            raise RunError("the pool communicator is closed")

    def _slot_array(self, round: int, count: int, dtype, all_ranks: bool) -> np.ndarray:
        """A cached view of slots of data round `round`'s buffer: this rank's (writable, 1-D) or all (read-only, 2-D).

        Views are cached per (buffer, kind, count, dtype), so the hot path is one dict lookup.
        """
        key = (round & 1, all_ranks, count, dtype)
        view = self._views.get(key)
        if view is None:
            view = self._make_view(round, count, np.dtype(dtype), all_ranks)
            self._views[key] = view
            self._views[(round & 1, all_ranks, count, view.dtype)] = view
        return view

    def _make_view(self, round: int, count: int, dtype: np.dtype, all_ranks: bool) -> np.ndarray:
        if not isinstance(count, (int, np.integer)) or count < 0 or count * dtype.itemsize > self.slot_bytes:
            raise InputError(f"allgather: {count} x {dtype} per rank does not fit the pool's "
                             f"{self.slot_bytes}-byte slots")
        rows = self.size if all_ranks else 1
        first = self.slot_offset(round, 0 if all_ranks else self.rank)
        view = np.ndarray((rows, count), dtype=dtype, buffer=self._pool_view, offset=first,
                          strides=(self.pool.layout.slot_stride, dtype.itemsize))
        if all_ranks:
            view.flags.writeable = False
            return view
        return view[0]

    def send_view(self, count: int, dtype=np.uint8) -> np.ndarray:
        """A writable view of this rank's slot for the next call: `count` items of `dtype`.

        The same (count, dtype) and buffer always give the same array object, so asking again
        each call costs one lookup (in the Cython kernel, an identity and an int comparison).
        """
        self._check_views()
        self.prepare_write()
        return self._slot_array(self.data_round + 1, count, dtype, False)

    def allgather_zero_copy(self, block: np.ndarray) -> ZeroCopyResult:
        """Publish `block` (the view from `send_view`) and return a view of every rank's block."""
        self._check_views()
        try:
            count, dtype = block.shape[0], block.dtype
        except (AttributeError, IndexError):
            count = dtype = None
        sent = self._views.get(((self.data_round + 1) & 1, False, count, dtype))
        if sent is None or sent is not block:  # (None is no view: a missing key must not match it)
            raise InputError("allgather_zero_copy: pass the view returned by send_view() for this call")
        self.allgather_in_place(block.nbytes)
        return ZeroCopyResult(self, self.epoch, self._slot_array(self.data_round, count, dtype, True))

    def _broadcast_array(self, round: int, root: int, count: int, dtype) -> np.ndarray:
        """The read-only 1-D view of `count` items of `dtype` in root's slot of data round `round` (cached)."""
        dtype = np.dtype(dtype)
        view = np.ndarray((count,), dtype=dtype, buffer=self._pool_view, offset=self.slot_offset(round, root))
        view.flags.writeable = False
        self._views[("broadcast", round & 1, root, count, dtype)] = view
        return view

    def _alltoall_array(self, round: int, count: int, dtype) -> np.ndarray:
        """The read-only (size, count) view of this rank's column of data round `round` (cached): row r is
        the block rank r sent to this rank, at its slot plus rank x block bytes."""
        dtype = np.dtype(dtype)
        first = self.slot_offset(round, 0) + self.rank * count * dtype.itemsize
        view = np.ndarray((self.size, count), dtype=dtype, buffer=self._pool_view, offset=first,
                          strides=(self.pool.layout.slot_stride, dtype.itemsize))
        view.flags.writeable = False
        self._views[("alltoall", round & 1, count, dtype)] = view
        return view

    def allgather_view(self, sendbuf) -> ZeroCopyResult:
        """Zero-copy allgather with the put fused in (see PoolKernel.allgather_view)."""
        self._check_views()
        count, dtype = count_and_dtype(sendbuf)
        self.allgather_from(sendbuf)
        view = self._slot_array(self.data_round, count, dtype, True)
        return ZeroCopyResult(self, self.epoch, view, rows_with_own(view, self.rank, own_block(sendbuf, 0, count)))

    def broadcast_view(self, count, dtype=np.uint8, root: int = 0, sendbuf=None) -> ZeroCopyResult:
        """Zero-copy broadcast of `count` items of `dtype` from root (see PoolKernel.broadcast_view)."""
        self._check_views()
        dtype = np.dtype(dtype)
        self.broadcast_in_place(count, dtype, root, sendbuf)
        view = self._views.get(("broadcast", self.data_round & 1, root, count, dtype))
        if view is None:
            view = self._broadcast_array(self.data_round, root, count, dtype)
        return ZeroCopyResult(self, self.epoch, view)

    def alltoall_view(self, sendbuf) -> ZeroCopyResult:
        """Zero-copy alltoall: row r of the result is the block rank r sent (see PoolKernel.alltoall_view)."""
        self._check_views()
        total, dtype = count_and_dtype(sendbuf)
        self.alltoall_in_place(sendbuf)
        count = total // self.size
        view = self._views.get(("alltoall", self.data_round & 1, count, dtype))
        if view is None:
            view = self._alltoall_array(self.data_round, count, dtype)
        own = own_block(sendbuf, self.rank * count, count)
        return ZeroCopyResult(self, self.epoch, view, rows_with_own(view, self.rank, own))

    def close(self) -> None:
        """Drop views and the kernel's mapping, then unmap the pool."""
        self._views = {}
        self._pool_view = None
        super().close()
        try:
            self.pool.close()
        except BufferError:
            pass  # a caller still holds a view, which pins the mapping; it is unmapped when the view goes


class PoolComm(CommMixin, _pool_kernel.PoolKernel):
    """A rank's communicator over a pool, on the Cython kernels; build it with `PoolComm.open(pool, rank)`."""

    # The same contracts as CommMixin's, without Python overhead on the hot path: the kernel keeps
    # the views of the last (count, dtype) per buffer, and checks a block by identity against them.
    send_view = _pool_kernel.PoolKernel.send_view
    allgather_zero_copy = _pool_kernel.PoolKernel.allgather_zero_copy
    allgather_view = _pool_kernel.PoolKernel.allgather_view
    broadcast_view = _pool_kernel.PoolKernel.broadcast_view
    alltoall_view = _pool_kernel.PoolKernel.alltoall_view

    def choose_copy_in(self) -> dict:
        """Probe this placement and pick its stores for copies into the pool; a collective call (every rank calls it).

        At np >= 2 in hw mode: probe the flag round trip between ranks 0 and 1 (the best of 3 x 100 round
        trips after 50, `probe_pingpong`: at np > 2 the other ranks wait, yielding, so the pair has the
        CPUs; the probe of the MPI library, cxlsim/mpi/pools.c). The ranks decide on the largest round trip
        any of them measured, so they decide alike. Above SLOW_ROUNDTRIP_NS (the slow placement) an np-2 pool's
        copies of at least NT_SLOW_MIN_BYTES use non-temporal stores, below it plain ones (`nt_min_bytes` 0);
        at np > 2 the copy-ins stay as they are (the measurements below are np 2's) and the probe only reports
        the placement, as the library's. A round trip above DISTURBED_ROUNDTRIP_NS means a rank lost its CPU
        during the probe, not a placement: the probe is repeated up to PROBE_TRIES times, and if every try is
        disturbed the plain stores stay (placement 'disturbed'), as in the library, where a disturbed probe
        read as slow gave a fast placement non-temporal copy-ins 0.9-1.1x MPICH.
        Measured on this machine, np 2: in the slow placement non-temporal
        copy-ins made copy-mode broadcast, allgather, alltoall and allreduce 1.3-1.6x faster at
        2 KiB (C harness benchmarks/pool_kernels_ab.c, mean of the ranks' medians, 0.77 -> 0.57 us
        broadcast, 1.30 -> 0.83 allgather, 1.33 -> 0.84 alltoall, 1.39 -> 1.07 allreduce: the
        root's plain stores first take the lines back from the reader's cache, and the reader then
        reads them from the writer's), 1.2-1.5x at 4 KiB and 1.5-6x from 8 KiB (a line the other
        core holds Modified costs far more to read there than one in memory), and 1.1-1.2x slower
        at 1 KiB; in the fast placement (the cores share their cache) 1.1-2.4x slower at every
        size. Flush mode and np 1 are not probed and left as they are. Returns roundtrip_ns (None if
        not probed), placement ('fast', 'slow' or 'disturbed'), tries and nt_min_bytes.
        """
        if self.size < 2 or self.coherence is not Coherence.HW:
            return dict(roundtrip_ns=None, placement="not probed", nt_min_bytes=self.nt_min_bytes)
        every = np.empty(self.size)
        tries, worst = 0, float("inf")
        while tries < PROBE_TRIES and worst > DISTURBED_ROUNDTRIP_NS:
            self.probe_pingpong(50, SPIN_ITERS)
            mine = np.array([min(self.probe_pingpong(100, SPIN_ITERS) for _ in range(3))])  # 0 on ranks > 1
            self.allgather(mine, every)
            worst, tries = float(every.max()), tries + 1
        placement = ("disturbed" if worst > DISTURBED_ROUNDTRIP_NS else
                     "slow" if worst > SLOW_ROUNDTRIP_NS else "fast")
        if self.size == 2:
            self.nt_min_bytes = NT_SLOW_MIN_BYTES if placement == "slow" else 0
        return dict(roundtrip_ns=worst, placement=placement, tries=tries, nt_min_bytes=self.nt_min_bytes)

    def flag_pingpong(self, iterations: int) -> float:
        """Calibration probe on this pool (np = 2): mean ns per flag round trip; see `_probes.flag_pingpong`."""
        return _probes.flag_pingpong(self, iterations)

    def concurrent_copy(self, nbytes: int, iterations: int, read: bool = False) -> np.ndarray:
        """Calibration probe on this pool: (iterations, 4) ns per phase; see `_probes.concurrent_copy`."""
        return _probes.concurrent_copy(self, nbytes, iterations, read)
