"""Building libcxlsim_mpi.so with the environment's own MPI compiler wrapper.

The library's C sources ship in the package (cxlsim/mpi/*.c, *.h, and the pool kernels'
headers in cxlsim/emulator), so a non-editable install can build it. It is built with the
`mpicc` of the MPI that will run the program (the mpich wheel's, beside the Python
interpreter, unless CXLSIM_MPICC names another) into a cache directory
(CXLSIM_CACHE_DIR, else $XDG_CACHE_HOME/cxlsim or ~/.cache/cxlsim) under ``mpi/<key>/``.

The key hashes every source file, the compile flags, what ``mpicc -show`` runs, and the
MPI library's MPI_Get_library_version string, so a different MPI, or the same MPI
upgraded, builds its own library instead of reusing an incompatible one.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cxlsim.errors import InputError, RunError
from cxlsim.results import atomic_write

LIBRARY_NAME = "libcxlsim_mpi.so"
CFLAGS = ("-O3", "-fPIC", "-shared", "-std=gnu11", "-D_GNU_SOURCE", "-Wall", "-Wno-unused-function")
MPI_DIR = Path(__file__).resolve().parent
EMULATOR_DIR = MPI_DIR.parent / "emulator"
KERNEL_HEADERS = ("cxl_ops.h", "cxl_reduce.h", "cxl_coll.h", "cxl_coll_core.h", "cxl_coll_move.h", "cxl_coll_reduce.h",
                  "cxl_pool.h", "cxl_pool_backends.h")
MAX_LIBRARY_VERSION = 16384  # bytes; MPICH's MPI_MAX_LIBRARY_VERSION_STRING is 8192


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """The MPI a library is built for.

    mpicc: the compiler wrapper's path. show: what `mpicc -show` prints (the compiler and
    flags it runs). library_version: MPI_Get_library_version of the libmpi it links.
    """

    mpicc: str
    show: str
    library_version: str


def sources() -> list[Path]:
    """Every file the library is built from: its C sources and headers, and the kernel headers."""
    files = sorted(MPI_DIR.glob("*.c")) + sorted(MPI_DIR.glob("*.h"))
    files += [EMULATOR_DIR / name for name in KERNEL_HEADERS]
    missing = [str(f) for f in files if not f.is_file()]
    if missing or not any(f.suffix == ".c" for f in files):
        raise RunError(f"the library's sources are missing from the installed package: {missing or 'no .c files'} "
                       f"(reinstall cxlsim)")
    return files


def find_mpicc() -> str:
    """CXLSIM_MPICC, else the mpicc beside this Python (the mpich wheel's), else mpicc on PATH."""
    named = os.environ.get("CXLSIM_MPICC")
    if named:
        path = shutil.which(named)
        if not path:
            raise InputError(f"CXLSIM_MPICC: {named!r} is not an executable")
        return path
    beside = os.path.join(os.path.dirname(sys.executable), "mpicc")
    if os.access(beside, os.X_OK):
        return beside
    path = shutil.which("mpicc")
    if not path:
        raise RunError("no mpicc found beside this Python or on PATH: install the MPI extra "
                       "(pip install 'cxlsim[mpi]', which brings the mpich wheel) or set CXLSIM_MPICC")
    return path


def _run(cmd: list[str], what: str) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunError(f"{what}: {shlex.join(cmd)} failed: {exc}") from None
    if done.returncode != 0:
        raise RunError(f"{what}: {shlex.join(cmd)} exited with {done.returncode}:\n{done.stderr.strip()}")
    return done.stdout


def library_version(show: str) -> str:
    """MPI_Get_library_version of the libmpi that `show` (mpicc -show) links, loaded with ctypes.

    MPI allows this call before MPI_Init, so nothing is started.
    """
    # ctypes.util.find_library is the last resort when the -L directories hold no such file
    words = shlex.split(show)
    dirs = [w[2:] for w in words if w.startswith("-L")]
    names = [w[2:] for w in words if w.startswith("-l") and "mpi" in w]
    for name in names or ["mpi"]:
        # lib{name}.so may be a linker script (the mpich wheel's is): also try the versioned files
        candidates = [str(f) for d in dirs for f in [Path(d) / f"lib{name}.so", *sorted(Path(d).glob(f"lib{name}.so.*"))]
                      if f.is_file()] or [ctypes.util.find_library(name)]
        for path in candidates:
            if not path:
                continue
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
                fn = lib.MPI_Get_library_version
            except (OSError, AttributeError):
                continue
            buf = ctypes.create_string_buffer(MAX_LIBRARY_VERSION)
            length = ctypes.c_int(0)
            if fn(buf, ctypes.byref(length)) == 0:
                return buf.value.decode("utf-8", "replace").strip()
    raise RunError(f"cannot find the MPI library that mpicc links (mpicc -show: {show.strip()}) "
                   f"to read its MPI_Get_library_version")


def toolchain(mpicc: str | None = None) -> Toolchain:
    """Describe the MPI behind `mpicc` (default: find_mpicc())."""
    mpicc = mpicc or find_mpicc()
    show = _run([mpicc, "-show"], "mpicc -show").strip()
    return Toolchain(mpicc=mpicc, show=show, library_version=library_version(show))


def build_key(tools: Toolchain, files: list[Path] | None = None) -> str:
    """The cache key: a hash of the sources, the flags, `mpicc -show` and the MPI library version."""
    digest = hashlib.sha256()
    for f in files if files is not None else sources():
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    for part in (" ".join(CFLAGS), tools.show, tools.library_version):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:20]


def cache_root() -> Path:
    """CXLSIM_CACHE_DIR, else $XDG_CACHE_HOME/cxlsim, else ~/.cache/cxlsim."""
    named = os.environ.get("CXLSIM_CACHE_DIR")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cxlsim"


def build(*, mpicc: str | None = None, force: bool = False) -> Path:
    """Build the library if its cache entry is missing (or `force`); return its path.

    The compile goes to a temporary directory beside the entry and is moved into place,
    so a concurrent or interrupted build never leaves a half-written library.
    """
    tools = toolchain(mpicc)
    files = sources()
    entry = cache_root() / "mpi" / build_key(tools, files)
    library = entry / LIBRARY_NAME
    if library.is_file() and not force:
        return library
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry, prefix=".build-") as tmp:
        out = os.path.join(tmp, LIBRARY_NAME)
        c_files = [str(f) for f in files if f.suffix == ".c"]
        _run([tools.mpicc, *CFLAGS, "-I", str(EMULATOR_DIR), "-I", str(MPI_DIR), *c_files, "-o", out],
             f"building {LIBRARY_NAME}")
        os.replace(out, library)
    atomic_write(str(entry / "build.json"), json.dumps({
        "mpicc": tools.mpicc, "mpicc_show": tools.show, "mpi_library_version": tools.library_version,
        "cflags": list(CFLAGS), "sources": [str(f) for f in files]}, indent=2) + "\n")
    return library
