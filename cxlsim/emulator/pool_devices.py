"""Pool backends on device memory: a devdax device or DAX file (`dax:PATH`), pages bound to a NUMA node (`numa:N`).

Real CXL memory reaches a host in one of two forms. As a devdax character device
(/dev/daxX.Y), or a file on a filesystem mounted with the `dax` option, it is mapped
directly; `check_dax` accepts only those (an ordinary file is `file:PATH`) and
`dax_device_size` reads a device's size from sysfs. Onlined as system RAM, it is a
CPU-less NUMA node; `check_numa_node` checks that the node exists and `mbind` binds a
mapping's pages to it (MPOL_BIND, before any page exists, so they land there).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import stat

from cxlsim.emulator import _kernels
from cxlsim.errors import InputError, RunError


def dax_device_size(path: str) -> int | None:
    """Size of a devdax character device from sysfs, or None if it is not one."""
    st = os.stat(path)
    if not stat.S_ISCHR(st.st_mode):
        return None
    sysdir = f"/sys/dev/char/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    try:
        with open(os.path.join(sysdir, "size")) as f:
            return int(f.read())
    except OSError:
        return None


def check_dax(path: str) -> None:
    """Accept a devdax device or a file on a filesystem mounted with the dax option."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(f"--pool dax:{path}: {exc.strerror}") from None
    if stat.S_ISCHR(st.st_mode):
        subsystem = os.path.realpath(f"/sys/dev/char/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}/subsystem")
        if os.path.basename(subsystem) != "dax":
            raise InputError(f"--pool dax:{path}: a character device, but not a devdax device "
                             f"(its sysfs subsystem is {os.path.basename(subsystem) or 'unknown'})")
        return
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"--pool dax:{path}: expected a devdax device (/dev/daxX.Y) or a file on a DAX filesystem")
    mount = _mount_of(path)
    if mount is None or "dax" not in mount[1]:
        raise InputError(f"--pool dax:{path}: the file is not on a filesystem mounted with 'dax' "
                         f"(mount {mount[0] if mount else '?'} has options {mount[1] if mount else '?'}); "
                         f"use --pool file:{path} to map it as an ordinary file")


def _mount_of(path: str) -> tuple[str, str] | None:
    """(mount point, options) of the mount holding `path`, from /proc/mounts."""
    path = os.path.realpath(path)
    best = None
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")):
                    if best is None or len(parts[1]) > len(best[0]):
                        best = (parts[1], parts[3])
    except OSError:
        return None
    return best


# -- numa --------------------------------------------------------------------------
NODE_DIR = "/sys/devices/system/node"
_MPOL_BIND = 2
_MPOL_MF_STRICT = 1
_MPOL_MF_MOVE = 2


def _online_nodes() -> list[int]:
    try:
        return sorted(int(n[4:]) for n in os.listdir(NODE_DIR) if n.startswith("node") and n[4:].isdigit())
    except OSError:
        return []


def check_numa_node(node: int) -> None:
    nodes = _online_nodes()
    if node not in nodes:
        raise InputError(f"--pool numa:{node}: no NUMA node {node} on this machine (nodes: {nodes or 'none found'})")


def mbind(mapping: mmap.mmap, length: int, node: int) -> None:
    """Bind the pages of `mapping` to NUMA node `node` (MPOL_BIND, moving pages already there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    nr_mbind = {"x86_64": 237, "aarch64": 235}.get(os.uname().machine)
    if nr_mbind is None:
        raise RunError(f"--pool numa:{node}: mbind is not wired for {os.uname().machine}")
    mask_words = node // 64 + 1
    nodemask = (ctypes.c_ulong * mask_words)()
    nodemask[node // 64] = 1 << (node % 64)
    addr = _kernels.buffer_address(mapping)
    rc = libc.syscall(ctypes.c_long(nr_mbind), ctypes.c_void_p(addr), ctypes.c_ulong(length),
                      ctypes.c_int(_MPOL_BIND), nodemask, ctypes.c_ulong(mask_words * 64 + 1),
                      ctypes.c_uint(_MPOL_MF_STRICT | _MPOL_MF_MOVE))
    if rc != 0:
        err = ctypes.get_errno()
        raise RunError(f"--pool numa:{node}: mbind failed: {os.strerror(err)}")
