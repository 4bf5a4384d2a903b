"""Shared training state on the emulated pool: per-worker push slots and a global step counter.

The async and hybrid modes share parameters without a barrier. Nobody adds into a shared
vector: worker w alone writes its slot w, a sequence-locked pair of copies of one vector and
64 bytes of metadata (8 uint64 words), and a reader that wants the shared value reads every
slot and merges them itself (`SharedState.merge`, a sum in worker order). A worker killed
part-way through a push leaves its previous push readable and the torn copy unread: no
reader ever sees a mix of two pushes (cxlsim/emulator/cxl_seqlock.h has the protocol).

The global counter hands out tickets (`fetch_add`) by one of the DES's two CXL schemes
(`cxlsim.models.training.hybrid`, docs/training.md):

- ``cxl-device``: one atomic fetch-and-add on the counter's line, as a CXL 3.x device executes
  same-line atomics in order; it needs hardware coherence (the default there);
- ``cxl-flush-lock``: a bakery lock of single-writer flags around a plain load and store, each
  flag written back and each read after an invalidation: no cross-host CPU atomic, so it runs
  on a pool without multi-host coherence (the default, and the only scheme, in flush mode).

A waiter of the lock that sees no progress for `LIVENESS_SLICE_S` asks the operating system
whether the worker it waits for still lives (its pid, published in the region at attach): a
dead worker's flags are then ignored, so the others go on without it; a live one is waited for
until `timeout_s`, then `SharedTimeout` names it.

Layout of the region inside a pool segment (`cxlsim.emulator.pool`, whose data area holds it;
bytes from the region's start, every word on its own 64-byte line)::

    0              counter (uint64)
    64             choosing[w], then number[w], then pid[w]: 3 x W lines
    slots          slot w at slots + w x slot_stride: two copies of
                   [sequence line | meta line (8 x uint64) | vector, padded to 64 B]

The segment is created by `shared_region` in the launcher, beside the run's collective pool
(`region_spec`), removed on the way out, also on failure (a crashed launcher's shm segment is
swept by the next pool's creation, as every pool's), and attached by each worker with
`SharedState.attach`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import time

import numpy as np

from cxlsim.coherence import Coherence
from cxlsim.emulator.comm import OVERSUBSCRIBED_SPIN_ITERS, SPIN_ITERS, choose_line_ops
from cxlsim.emulator.pool import LINE, Pool, PoolHandle, PoolSpec, parse_pool_spec
from cxlsim.emulator.training._shared_state import META_BYTES, SharedKernel
from cxlsim.errors import InputError, RunError

COUNTER_SCHEMES = ("cxl-device", "cxl-flush-lock")
"""How the global counter's fetch-and-add runs (see the module docstring)."""
DEFAULT_COUNTER = {Coherence.HW: "cxl-device", Coherence.FLUSH: "cxl-flush-lock"}
META_WORDS = META_BYTES // 8
LIVENESS_SLICE_S = 0.05
"""A waiter checks the liveness of the worker it waits for after this long without progress (s)."""
READ_TRIES = 1000
"""Seqlock read attempts per C call before Python checks the timeout and calls again."""


class SharedTimeout(RunError):
    """A worker waited longer than its timeout on the shared region; `worker` names the one it waited for."""

    def __init__(self, message: str, worker: int):
        super().__init__(message)
        self.worker = worker


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegionLayout:
    """Byte offsets of a shared region for `nworkers` slots of `vector_bytes`, from the mapping's start."""

    nworkers: int
    vector_bytes: int
    base: int
    counter_offset: int
    choosing_offset: int
    number_offset: int
    pid_offset: int
    slots_offset: int
    copy_stride: int
    slot_stride: int
    end: int

    @classmethod
    def plan(cls, nworkers: int, vector_bytes: int, base: int = 0) -> "RegionLayout":
        """The layout of the module docstring, starting at byte `base` (a multiple of 64) of a mapping."""
        if isinstance(nworkers, bool) or not isinstance(nworkers, int) or nworkers < 1:
            raise InputError(f"shared region: expected 1 or more workers, got {nworkers!r}")
        if isinstance(vector_bytes, bool) or not isinstance(vector_bytes, int) or vector_bytes < 0:
            raise InputError(f"shared region: expected a vector size >= 0 bytes, got {vector_bytes!r}")
        if base % LINE:
            raise InputError(f"shared region: base {base} is not a multiple of {LINE}")
        counter = base
        choosing = counter + LINE
        number = choosing + nworkers * LINE
        pid = number + nworkers * LINE
        slots = pid + nworkers * LINE
        copy = 2 * LINE + _round_up(vector_bytes, LINE)
        return cls(nworkers=nworkers, vector_bytes=vector_bytes, base=base, counter_offset=counter,
                   choosing_offset=choosing, number_offset=number, pid_offset=pid, slots_offset=slots,
                   copy_stride=copy, slot_stride=2 * copy, end=slots + nworkers * 2 * copy)

    @property
    def region_bytes(self) -> int:
        return self.end - self.base


@dataclasses.dataclass(frozen=True, kw_only=True)
class SharedHandle:
    """What a worker needs to attach: picklable, made by `shared_region` in the launcher."""

    pool: PoolHandle
    layout: RegionLayout
    nitems: int
    dtype: str
    coherence: Coherence
    counter: str
    timeout_s: float


def check_counter(counter: str | None, coherence: Coherence) -> str:
    """The counter scheme for `coherence` (None: its default); InputError naming --counter otherwise."""
    if counter is None:
        return DEFAULT_COUNTER[coherence]
    if counter not in COUNTER_SCHEMES:
        raise InputError(f"--counter: expected one of {', '.join(COUNTER_SCHEMES)}, got {counter!r}")
    if counter == "cxl-device" and coherence is not Coherence.HW:
        raise InputError(f"--counter cxl-device: needs --coherence {Coherence.HW.value} (a device-side atomic on a "
                         f"coherent CXL 3.x pool); with --coherence {coherence.value} use cxl-flush-lock")
    return counter


@contextlib.contextmanager
def shared_region(nworkers: int, nitems: int, dtype="float64", *, pool: str = "shm",
                  coherence: Coherence | str = Coherence.HW, counter: str | None = None, timeout_s: float = 30.0):
    """Create a shared region for `nworkers` vectors of `nitems` items of `dtype` in a new pool segment;
    yield its `SharedHandle`; remove the segment on the way out (the workers' mappings stay valid)."""
    coherence = Coherence.parse(coherence, "--coherence")
    counter = check_counter(counter, coherence)
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise InputError(f"--timeout: expected a positive number of seconds, got {timeout_s!r}")
    dtype = np.dtype(dtype)
    if isinstance(nitems, bool) or not isinstance(nitems, int) or nitems < 1:
        raise InputError(f"shared region: expected a vector of 1 or more items, got {nitems!r}")
    spec = region_spec(parse_pool_spec(pool))
    vector_bytes = nitems * dtype.itemsize
    # The pool's data area (2 buffers x nworkers slots) holds the region: size its slots to fit.
    region = RegionLayout.plan(nworkers, vector_bytes).region_bytes
    created = Pool.create(spec, nworkers, -(-region // (2 * nworkers)))
    try:
        layout = RegionLayout.plan(nworkers, vector_bytes, base=created.layout.data_offset)  # a fresh file: zeros
        created.close()
        yield SharedHandle(pool=created.handle, layout=layout, nitems=nitems, dtype=dtype.str, coherence=coherence,
                           counter=counter, timeout_s=float(timeout_s))
    finally:
        created.close()
        created.unlink()


def region_spec(spec: PoolSpec) -> PoolSpec:
    """Where the region goes for the run's `--pool`: a segment of its own beside the collective pool's.

    shm and numa:N make a fresh segment anyway; file:PATH gives a fresh file beside PATH
    (PATH.<pid>-<hex>, removed once every rank attached, as any temporary pool); dax:PATH is
    refused, since the device holds the collective pool and a pool takes a device whole.
    """
    if spec.kind == "file":
        return PoolSpec(kind="file", path=f"{spec.path}.{os.getpid()}-{secrets.token_hex(4)}")
    if spec.kind == "dax":
        raise InputError(f"--pool {spec}: async and hybrid need a second pool segment for their shared region, and a "
                         f"dax device holds one pool; use --pool file:PATH on the DAX filesystem, shm or numa:N")
    return spec


def fold_rows(rows: np.ndarray, out: np.ndarray) -> None:
    """out = rows[0] + rows[1] + ..., added in row order (one rounding order on every reader)."""
    out[:] = rows[0]
    for row in rows[1:]:
        out += row


def pid_alive(pid: int) -> bool:
    """Whether process `pid` lives (a zombie does not: it died and awaits its parent's wait)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@dataclasses.dataclass(frozen=True)
class SlotRead:
    """One slot as read: its push `version` (0: never pushed) and its 8 metadata words."""

    version: int
    meta: tuple


class SharedState:
    """Worker `worker`'s handle on a shared region: push its slot, read and merge every slot, take tickets."""

    def __init__(self, handle: SharedHandle, worker: int, pool: Pool, kernel: SharedKernel):
        self.handle, self.worker, self.pool, self.kernel = handle, worker, pool, kernel
        self.nworkers = handle.layout.nworkers
        self.dtype = np.dtype(handle.dtype)
        self.version = 0  # pushes this worker completed
        self.dead = np.zeros(self.nworkers, dtype=np.uint8)  # workers found dead while waiting for them
        self._meta_out = np.zeros(META_WORDS, dtype=np.uint64)
        self._meta_in = np.zeros(META_WORDS, dtype=np.uint64)
        self._rows = np.zeros((self.nworkers, handle.nitems), dtype=self.dtype)

    @classmethod
    def attach(cls, handle: SharedHandle, worker: int, writeback: str = "auto") -> "SharedState":
        """Map the region in this process as worker `worker` and publish this process's pid."""
        lay = handle.layout
        if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < lay.nworkers:
            raise InputError(f"shared region: worker {worker!r} is outside 0..{lay.nworkers - 1}")
        pool = Pool.attach(handle.pool)
        flush = handle.coherence is Coherence.FLUSH
        writer, reader = choose_line_ops(writeback) if flush else (0, 0)
        spin = SPIN_ITERS if lay.nworkers <= len(os.sched_getaffinity(0)) else OVERSUBSCRIBED_SPIN_ITERS
        try:
            kernel = SharedKernel(pool.mapping, counter_offset=lay.counter_offset, choosing_offset=lay.choosing_offset,
                                  number_offset=lay.number_offset, slots_offset=lay.slots_offset,
                                  slot_stride=lay.slot_stride, copy_stride=lay.copy_stride,
                                  vector_bytes=lay.vector_bytes, nworkers=lay.nworkers, flush=flush,
                                  writeback_op=writer, invalidate_op=reader, spin_iters=spin)
        except BaseException:
            pool.close()
            raise
        state = cls(handle, worker, pool, kernel)
        kernel.store_word(lay.pid_offset + worker * LINE, os.getpid())
        return state

    def close(self) -> None:
        """Release the kernel and unmap the region (once the caller's own views of the mapping are gone)."""
        self.kernel.close()
        try:
            self.pool.close()
        except BufferError:
            pass  # a caller still holds a view, which pins the mapping; it is unmapped when the view goes

    # -- slots --------------------------------------------------------------------
    def _vector(self, vector, writable: bool) -> np.ndarray:
        arr = np.ascontiguousarray(vector) if not writable else vector
        if not isinstance(arr, np.ndarray) or arr.dtype != self.dtype or arr.size != self.handle.nitems or \
                (writable and not (arr.flags.c_contiguous and arr.flags.writeable)):
            raise InputError(f"shared slot: expected {'a writable contiguous' if writable else 'a'} vector of "
                             f"{self.handle.nitems} {self.dtype}, got {getattr(arr, 'shape', None)} "
                             f"{getattr(arr, 'dtype', type(vector).__name__)}")
        return arr

    def push(self, vector, meta=()) -> int:
        """Publish `vector` (and up to 8 uint64 `meta` words) as this worker's next push; return its version."""
        vector = self._vector(vector, writable=False)
        if len(meta) > META_WORDS:
            raise InputError(f"shared slot: at most {META_WORDS} meta words, got {len(meta)}")
        self._meta_in[:] = 0
        self._meta_in[:len(meta)] = meta
        self.kernel.write(self.worker, self.version + 1, self._meta_in, vector)
        self.version += 1
        return self.version

    def read(self, worker: int, out: np.ndarray) -> SlotRead:
        """Copy slot `worker`'s newest complete push into `out`; SharedTimeout if writers outran every try."""
        out = self._vector(out, writable=True)
        deadline = time.monotonic() + self.handle.timeout_s
        while True:
            version = self.kernel.read(worker, self._meta_out, out, READ_TRIES)
            if version >= 0:
                return SlotRead(version, tuple(int(w) for w in self._meta_out))
            if time.monotonic() > deadline:
                raise SharedTimeout(f"shared region: worker {self.worker} could not read a complete push of "
                                    f"slot {worker} in {self.handle.timeout_s:g} s (its writer kept overwriting it)",
                                    worker)

    def read_all(self) -> tuple[np.ndarray, list[SlotRead]]:
        """Every slot's newest complete push, as the rows of a (W, n) array that the next call reuses, and
        each slot's `SlotRead`."""
        return self._rows, [self.read(w, self._rows[w]) for w in range(self.nworkers)]

    def merge(self, out: np.ndarray) -> list[SlotRead]:
        """out = the sum of every slot's newest complete push, added in worker order (the same bits on
        every reader that read the same pushes); returns each slot's `SlotRead`."""
        out = self._vector(out, writable=True)
        rows, reads = self.read_all()
        fold_rows(rows, out)
        return reads

    # -- the counter ----------------------------------------------------------------
    def counter(self) -> int:
        """The global counter's value now."""
        return int(self.kernel.counter())

    def fetch_add(self, n: int = 1) -> int:
        """Add `n` to the global counter by the region's scheme; return the value before (this worker's ticket)."""
        if self.handle.counter == "cxl-device":
            return int(self.kernel.fetch_add(n))
        self.kernel.bakery_doorway(self.worker)
        acquired = False
        try:
            deadline = time.monotonic() + self.handle.timeout_s
            while True:
                waiting = self.kernel.bakery_wait(self.worker, self.dead, LIVENESS_SLICE_S * 1e9)
                if waiting < 0:
                    break
                if not self.alive(waiting):
                    self.dead[waiting] = 1
                elif time.monotonic() > deadline:
                    raise SharedTimeout(f"shared counter: worker {self.worker} waited {self.handle.timeout_s:g} s "
                                        f"for worker {waiting}'s bakery lock", waiting)
            acquired = True
            return int(self.kernel.bakery_add_and_release(self.worker, n))
        finally:
            if not acquired:  # withdraw, so nobody waits for this worker's number
                self.kernel.store_word(self.handle.layout.number_offset + self.worker * LINE, 0)

    # -- liveness ---------------------------------------------------------------------
    def pid(self, worker: int) -> int:
        """The pid worker `worker` published at attach (0: not attached yet)."""
        return int(self.kernel.load_word(self.handle.layout.pid_offset + worker * LINE))

    def alive(self, worker: int) -> bool:
        """False once worker `worker`'s process has died (a worker not attached yet counts as alive)."""
        pid = self.pid(worker)
        return pid == 0 or pid_alive(pid)
