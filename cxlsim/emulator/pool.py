"""The emulated CXL pool: a shared mapping every local rank attaches to.

Backends (the `--pool` argument):

- ``shm`` (default): a POSIX shared-memory file in /dev/shm, opened with os.open and
  mmap (not multiprocessing.shared_memory, whose resource tracker in Python 3.11
  unlinks segments when any attached process exits). Mode 0600, named
  ``cxlsim-<owner pid>-<random>``, space reserved with posix_fallocate so a full
  /dev/shm is a clear error instead of a SIGBUS later.
- ``file:PATH``: a regular file (created if missing, removed again if we created it).
- ``dax:PATH``: a devdax character device or a file on a filesystem mounted with
  ``dax``; the mapping length is a multiple of 2 MiB. Real CXL 2.0 memory is not
  coherent across hosts, so its default coherence mode is ``flush``.
- ``numa:N``: an shm segment whose pages are bound to NUMA node N with mbind: CXL
  memory onlined as system RAM shows up as a CPU-less NUMA node.

(The dax and numa checks and the mbind call are in `pool_devices`.)

Segments we create are unlinked as soon as every rank has attached (the last one to
attach does it), so even a SIGKILLed run leaves nothing behind once it is running.
`sweep_stale` removes segments whose owner process is dead, never a live run's.

Layout (bytes from the start; every flag and slot on its own 64-byte lines)::

    0     header: magic, version, nranks, slot_bytes, slot_stride, offsets, owner pid
    64    attach counter (uint32, atomic)
    4096  flag lines: rank r's epoch (uint64) at flags_offset + 64 r, single writer
    ...   data: buffer b (epoch parity), slot r at data_offset + (b nranks + r) slot_stride
    ...   inline area: rank r's INLINE_AREA_BYTES at inline_offset + r INLINE_AREA_BYTES,
          single writer (the MPI library's line-flag allreduce, cxl_coll_reduce.h)
"""
from __future__ import annotations

import dataclasses
import errno
import mmap
import os
import re
import secrets
import stat
import struct

from cxlsim.coherence import Coherence
from cxlsim.emulator import _kernels
from cxlsim.emulator.pool_devices import check_dax, check_numa_node, dax_device_size, mbind
from cxlsim.errors import InputError, RunError

MAGIC = 0x43584C53494D5031  # "CXLSIMP1"
VERSION = 2
LINE = 64
INLINE_AREA_BYTES = 1280  # = CXL_POOL_INLINE_AREA_BYTES (cxl_pool.h): 2 halves x 10 lines per rank
PAGE = 4096
DAX_ALIGN = 2 << 20
SHM_DIR = "/dev/shm"
SEGMENT_PREFIX = "cxlsim-"
_HEADER = struct.Struct("<QIIQQQQQQ")  # magic, version, nranks, slot_bytes, slot_stride, flags, data, total, owner
_ATTACH_OFFSET = 64
_NAME_RE = re.compile(r"^cxlsim-(\d+)-[0-9a-f]+$")


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclasses.dataclass(frozen=True, kw_only=True)
class PoolSpec:
    """A parsed `--pool` argument.

    kind: 'shm', 'file', 'dax' or 'numa'. path: the file or device (file, dax).
    numa_node: the node to bind pages to (numa).
    """

    kind: str
    path: str | None = None
    numa_node: int | None = None

    @property
    def default_coherence(self) -> Coherence:
        """FLUSH on dax (CXL 2.0 memory is not coherent across hosts), else HW."""
        return Coherence.FLUSH if self.kind == "dax" else Coherence.HW

    def __str__(self) -> str:
        if self.kind == "numa":
            return f"numa:{self.numa_node}"
        return self.kind if self.path is None else f"{self.kind}:{self.path}"


def parse_pool_spec(text: str) -> PoolSpec:
    """Parse 'shm', 'file:PATH', 'dax:PATH' or 'numa:N'."""
    expected = "expected 'shm', 'file:PATH', 'dax:PATH' or 'numa:N'"
    if not isinstance(text, str) or not text:
        raise InputError(f"--pool: {expected}, got {text!r}")
    kind, _, rest = text.partition(":")
    if kind == "shm" and not rest:
        return PoolSpec(kind="shm")
    if kind in ("file", "dax") and rest:
        return PoolSpec(kind=kind, path=rest)
    if kind == "numa" and rest.isdigit():
        return PoolSpec(kind="numa", numa_node=int(rest))
    raise InputError(f"--pool: {expected}, got {text!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SegmentLayout:
    """Byte layout of a pool for `nranks` ranks with slots of `slot_bytes`."""

    nranks: int
    slot_bytes: int
    slot_stride: int
    flags_offset: int
    data_offset: int
    inline_offset: int
    total_bytes: int

    @classmethod
    def plan(cls, nranks: int, slot_bytes: int, align: int = PAGE) -> "SegmentLayout":
        if nranks < 1:
            raise InputError(f"nranks: expected 1 or more, got {nranks}")
        if slot_bytes < 0:
            raise InputError(f"slot_bytes: expected 0 or more, got {slot_bytes}")
        stride = max(LINE, _round_up(slot_bytes, LINE))
        flags = PAGE
        data = flags + _round_up(nranks * LINE, PAGE)
        inline = data + 2 * nranks * stride
        total = _round_up(inline + nranks * INLINE_AREA_BYTES, align)
        return cls(nranks=nranks, slot_bytes=slot_bytes, slot_stride=stride, flags_offset=flags,
                   data_offset=data, inline_offset=inline, total_bytes=total)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PoolHandle:
    """What a rank needs to attach: picklable, sent from the creator to every rank."""

    spec: PoolSpec
    path: str
    layout: SegmentLayout
    temporary: bool  # we created the file: the last rank to attach unlinks it


class Pool:
    """A mapped pool. Create it once (`Pool.create`), attach it in every rank (`Pool.attach`)."""

    def __init__(self, handle: PoolHandle, mapping: mmap.mmap):
        self.handle = handle
        self.mapping = mapping

    @property
    def layout(self) -> SegmentLayout:
        return self.handle.layout

    # -- creation -----------------------------------------------------------------
    @classmethod
    def create(cls, spec: PoolSpec | str, nranks: int, slot_bytes: int) -> "Pool":
        """Create and initialise a pool for `nranks` ranks with `slot_bytes` per slot."""
        if isinstance(spec, str):
            spec = parse_pool_spec(spec)
        if spec.kind in ("shm", "numa"):
            sweep_stale()
            layout = SegmentLayout.plan(nranks, slot_bytes)
            if spec.kind == "numa":
                check_numa_node(spec.numa_node)
            path = os.path.join(SHM_DIR, f"{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
            fd = _open_new(path, spec)
            temporary = True
        elif spec.kind == "file":
            layout = SegmentLayout.plan(nranks, slot_bytes)
            path = os.path.abspath(spec.path)
            temporary = not os.path.exists(path)
            fd = _open_new(path, spec) if temporary else _open_existing(path, spec, layout.total_bytes)
        else:
            layout = SegmentLayout.plan(nranks, slot_bytes, align=DAX_ALIGN)
            path = os.path.abspath(spec.path)
            check_dax(path)
            temporary = False
            fd = _open_existing(path, spec, layout.total_bytes)
        mapping = None
        try:
            if temporary:
                os.ftruncate(fd, layout.total_bytes)
            mapping = mmap.mmap(fd, layout.total_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            if spec.kind == "numa":  # bind before any page exists, so reserving places them on the node
                mbind(mapping, layout.total_bytes, spec.numa_node)
            if temporary:
                _reserve(fd, path, layout.total_bytes, spec)
        except BaseException:
            if mapping is not None:
                mapping.close()
            if temporary:
                _unlink_quietly(path)
            raise
        finally:
            os.close(fd)
        pool = cls(PoolHandle(spec=spec, path=path, layout=layout, temporary=temporary), mapping)
        try:
            pool._write_header()
        except BaseException:
            pool.close()
            pool.unlink()
            raise
        return pool

    def _write_header(self) -> None:
        lay = self.layout
        self.mapping[: lay.data_offset] = bytes(lay.data_offset)  # zero header and flags
        header = _HEADER.pack(0, VERSION, lay.nranks, lay.slot_bytes, lay.slot_stride,
                              lay.flags_offset, lay.data_offset, lay.total_bytes, os.getpid())
        self.mapping[: _HEADER.size] = header
        self.mapping[:8] = struct.pack("<Q", MAGIC)  # written last: a valid magic means a complete header

    # -- attaching ----------------------------------------------------------------
    @classmethod
    def attach(cls, handle: PoolHandle) -> "Pool":
        """Map an existing pool, check its header, count this rank in, unlink once all are in."""
        try:
            fd = os.open(handle.path, os.O_RDWR)
        except FileNotFoundError:
            raise RunError(f"pool {handle.path} is gone: its creator exited or every rank already attached") from None
        try:
            size = os.fstat(fd).st_size
            if stat.S_ISREG(os.fstat(fd).st_mode) and size < handle.layout.total_bytes:
                raise RunError(f"pool {handle.path} has {size} bytes, expected {handle.layout.total_bytes}")
            mapping = mmap.mmap(fd, handle.layout.total_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        pool = cls(handle, mapping)
        pool._check_header()
        count = _kernels.atomic_add_u32(mapping, _ATTACH_OFFSET, 1)
        if count == handle.layout.nranks:
            pool.unlink()
        return pool

    def _check_header(self) -> None:
        fields = _HEADER.unpack_from(self.mapping, 0)
        magic, version, nranks, slot_bytes, stride, flags, data, total, _owner = fields
        lay = self.layout
        if magic != MAGIC:
            raise RunError(f"pool {self.handle.path}: bad magic {magic:#x} (not a cxlsim pool, or not initialised)")
        if version != VERSION:
            raise RunError(f"pool {self.handle.path}: layout version {version}, this cxlsim reads {VERSION}")
        if (nranks, slot_bytes, stride, flags, data, total) != (
                lay.nranks, lay.slot_bytes, lay.slot_stride, lay.flags_offset, lay.data_offset, lay.total_bytes):
            raise RunError(f"pool {self.handle.path}: header says {nranks} ranks x {slot_bytes} B, expected "
                           f"{lay.nranks} x {lay.slot_bytes} B")

    # -- teardown -----------------------------------------------------------------
    def close(self) -> None:
        """Unmap (fails with BufferError while a communicator or view still uses the mapping)."""
        if not self.mapping.closed:
            self.mapping.close()

    def unlink(self) -> None:
        """Remove the backing file if we created it (idempotent)."""
        if self.handle.temporary:
            _unlink_quietly(self.handle.path)


MEMINFO = "/proc/meminfo"


def available_memory_bytes() -> int | None:
    """The kernel's estimate of memory available to new allocations (MemAvailable), or None."""
    try:
        with open(MEMINFO) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _amount(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def check_room(spec: PoolSpec | str, nranks: int, slot_bytes: int, rank_bytes: int, asked: str) -> None:
    """Refuse a run this machine has no room for, before anything is allocated (InputError naming `asked`).

    The pool (`nranks` slots of `slot_bytes`, twice) lives in RAM for shm and numa, in
    /dev/shm for shm and numa, on its file or device otherwise; every rank also allocates
    `rank_bytes` of private buffers. A run that needs more memory than MemAvailable would get
    a rank killed by the out-of-memory killer part-way; one whose pool does not fit /dev/shm
    fails to reserve it.
    """
    spec = parse_pool_spec(spec) if isinstance(spec, str) else spec
    pool_bytes = SegmentLayout.plan(nranks, slot_bytes).total_bytes
    in_ram = spec.kind in ("shm", "numa")
    if in_ram:
        free = _free_bytes(SHM_DIR)
        if 0 <= free < pool_bytes:
            raise InputError(f"{asked}: the pool needs {_amount(pool_bytes)} in {SHM_DIR}, which has "
                             f"{_amount(free)} free: lower --sizes or --np, or use --pool file:PATH")
    needed = (pool_bytes if in_ram else 0) + nranks * rank_bytes
    available = available_memory_bytes()
    if available is not None and needed > available:
        pool_part = f"a {_amount(pool_bytes)} pool in {SHM_DIR} and " if in_ram else ""
        raise InputError(f"{asked}: the run needs {_amount(needed)} of memory ({pool_part}{nranks} rank(s) x "
                         f"{_amount(rank_bytes)} of buffers), but this machine has {_amount(available)} available "
                         f"(MemAvailable): lower --sizes or --np")


def _open_new(path: str, spec: PoolSpec) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise InputError(f"--pool {spec}: cannot create {path}: {exc.strerror}") from None


def _open_existing(path: str, spec: PoolSpec, total_bytes: int) -> int:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise InputError(f"--pool {spec}: cannot open {path}: {exc.strerror}") from None
    st = os.fstat(fd)
    size = st.st_size if stat.S_ISREG(st.st_mode) else dax_device_size(path)
    if size is not None and size < total_bytes:
        if stat.S_ISREG(st.st_mode) and spec.kind == "file":
            try:
                os.ftruncate(fd, total_bytes)
                return fd
            except OSError as exc:
                os.close(fd)
                raise InputError(f"--pool {spec}: cannot grow {path} to {total_bytes} bytes: {exc.strerror}") from None
        os.close(fd)
        raise InputError(f"--pool {spec}: {path} has {size} bytes but the pool needs {total_bytes}")
    return fd


def _reserve(fd: int, path: str, total_bytes: int, spec: PoolSpec) -> None:
    """Allocate every byte now, so running out of room is an error here, not a SIGBUS later."""
    try:
        os.posix_fallocate(fd, 0, total_bytes)
    except OSError as exc:
        where = os.path.dirname(path)
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
            free = _free_bytes(where)
            raise RunError(
                f"--pool {spec}: no room for a {total_bytes}-byte pool in {where} "
                f"({free} bytes free): free space there, lower --sizes or --np, or use --pool file:PATH") from None
        raise RunError(f"--pool {spec}: cannot allocate {total_bytes} bytes for {path}: {exc.strerror}") from None


def _free_bytes(directory: str) -> int:
    try:
        st = os.statvfs(directory)
        return st.f_bavail * st.f_frsize
    except OSError:
        return -1


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def sweep_stale(directory: str = SHM_DIR) -> list[str]:
    """Remove cxlsim segments whose owner process is dead; return the removed paths.

    A live owner's segment (a concurrent run) is never touched.
    """
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = _NAME_RE.match(name)
        if not m or _pid_alive(int(m.group(1))):
            continue
        path = os.path.join(directory, name)
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
