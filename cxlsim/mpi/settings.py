"""The library's settings: CXLSIM_MPI_* environment variables, and the `cxlsim mpi run` options that set them.

The C library reads the variables at MPI_Init and aborts the job on a value it cannot
parse (cxlsim/mpi/settings.c). `environment()` turns command-line values (with units:
'1MiB', '250ns', '32GB/s') into those variables, and `check_environment()` applies the C
library's own rules before launching, so a typo is an error naming the variable here
rather than an aborted job; it also checks that a numa: node or a dax: device exists, which
the library would only warn about (and fall back, reason setup).
"""
from __future__ import annotations

import math
import os

from cxlsim.coherence import Coherence
from cxlsim.emulator.pool import parse_pool_spec
from cxlsim.emulator.pool_devices import check_dax, check_numa_node
from cxlsim.errors import InputError
from cxlsim.units import parse_bandwidth, parse_size, parse_time

PREFIX = "CXLSIM_MPI_"
MAX_BYTES = 1 << 36


def _number(name: str, text: str, *, positive: bool) -> None:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        expected = "a number > 0" if positive else "a number >= 0 (0 = off)"
        raise InputError(f"{name}: expected {expected}, got {text!r}")


def _bytes(name: str, text: str, lo: int) -> None:
    if not text.isdigit() or not lo <= int(text) <= MAX_BYTES:
        raise InputError(f"{name}: expected a whole number of bytes from {lo} to {MAX_BYTES}, got {text!r}")


def _count(name: str, text: str, hi: int) -> None:
    if not text.isdigit() or int(text) > hi:
        raise InputError(f"{name}: expected a whole number from 0 to {hi}, got {text!r}")


def _choice(name: str, text: str, choices: tuple[str, ...]) -> None:
    if text not in choices:
        raise InputError(f"{name}: expected one of {', '.join(choices)}, got {text!r}")


def _pool(name: str, text: str) -> None:
    """A pool spec whose device exists (numa: the node is online; dax: a devdax device or DAX file)."""
    try:
        spec = parse_pool_spec(text)
        if spec.kind == "numa":
            check_numa_node(spec.numa_node)
        elif spec.kind == "dax":
            check_dax(spec.path)
    except InputError as exc:
        raise InputError(f"{name}: {exc}") from None


# Each variable the library reads, with the check its C parser applies.
CHECKS = {
    "CXLSIM_MPI_POOL": _pool,
    "CXLSIM_MPI_COHERENCE": lambda n, t: _choice(n, t, Coherence.names()),
    "CXLSIM_MPI_SLOT": lambda n, t: _bytes(n, t, 64),
    "CXLSIM_MPI_ALLREDUCE_LARGE": lambda n, t: _bytes(n, t, 0),
    "CXLSIM_MPI_LATENCY_NS": lambda n, t: _number(n, t, positive=False),
    "CXLSIM_MPI_BANDWIDTH": lambda n, t: _number(n, t, positive=False),
    "CXLSIM_MPI_TIMEOUT": lambda n, t: _number(n, t, positive=True),
    "CXLSIM_MPI_VERBOSE": lambda n, t: _choice(n, t, ("0", "1", "2")),
    "CXLSIM_MPI_STATS": lambda n, t: _choice(n, t, ("0", "1")),
    "CXLSIM_MPI_DISABLE": lambda n, t: _choice(n, t, ("0", "1")),
    "CXLSIM_MPI_TRACE": lambda n, t: None,
    "CXLSIM_MPI_FAKE_NODES": lambda n, t: _count(n, t, 4096),
    "CXLSIM_MPI_POOL_SHARED": lambda n, t: _choice(n, t, ("0", "1")),
}


def check_environment(env: dict[str, str]) -> None:
    """Apply the library's rules to every CXLSIM_MPI_* variable in env; refuse unknown ones."""
    for name, text in env.items():
        if not name.startswith(PREFIX) or text == "":
            continue
        check = CHECKS.get(name)
        if check is None:
            raise InputError(f"{name}: not a setting of the library (known: {', '.join(sorted(CHECKS))})")
        check(name, text)
    if env.get("CXLSIM_MPI_POOL_SHARED") == "1" and parse_pool_spec(env.get("CXLSIM_MPI_POOL") or "shm").kind not in (
            "file", "dax"):
        raise InputError("CXLSIM_MPI_POOL: expected 'file:PATH' or 'dax:PATH' with CXLSIM_MPI_POOL_SHARED=1 (memory "
                         f"every node maps), got {env.get('CXLSIM_MPI_POOL') or 'shm'!r}")


def environment(*, pool: str | None = None, coherence: str | None = None, slot: str | None = None,
                allreduce_large: str | None = None, pool_latency: str | None = None,
                pool_bandwidth: str | None = None, timeout: float | None = None, verbose: int | None = None,
                stats: bool = False, trace: str | None = None, disable: bool = False,
                fake_nodes: int | None = None, pool_shared: bool = False) -> dict[str, str]:
    """The CXLSIM_MPI_* variables for these `cxlsim mpi run` options (None = leave unset)."""
    env: dict[str, str] = {}
    if pool is not None:
        env["CXLSIM_MPI_POOL"] = str(parse_pool_spec(pool))
    if coherence is not None:
        env["CXLSIM_MPI_COHERENCE"] = str(Coherence.parse(coherence, "--coherence"))
    for option, name, value in (("--slot", "CXLSIM_MPI_SLOT", slot),
                                ("--allreduce-large", "CXLSIM_MPI_ALLREDUCE_LARGE", allreduce_large)):
        if value is not None:
            try:
                env[name] = str(parse_size(value))
            except InputError as exc:
                raise InputError(f"{option}: {exc}") from None
    if pool_latency is not None:
        try:
            env["CXLSIM_MPI_LATENCY_NS"] = repr(parse_time(pool_latency))
        except InputError as exc:
            raise InputError(f"--pool-latency: {exc}") from None
    if pool_bandwidth is not None:
        try:
            env["CXLSIM_MPI_BANDWIDTH"] = repr(parse_bandwidth(pool_bandwidth))
        except InputError as exc:
            raise InputError(f"--pool-bandwidth: {exc}") from None
    if timeout is not None:
        env["CXLSIM_MPI_TIMEOUT"] = repr(float(timeout))
    if verbose is not None:
        env["CXLSIM_MPI_VERBOSE"] = str(verbose)
    if stats:
        env["CXLSIM_MPI_STATS"] = "1"
    if trace is not None:
        env["CXLSIM_MPI_TRACE"] = os.path.abspath(trace)
    if disable:
        env["CXLSIM_MPI_DISABLE"] = "1"
    if fake_nodes is not None:
        env["CXLSIM_MPI_FAKE_NODES"] = str(fake_nodes)
    if pool_shared:
        env["CXLSIM_MPI_POOL_SHARED"] = "1"
    option_names = {"CXLSIM_MPI_SLOT": "--slot", "CXLSIM_MPI_ALLREDUCE_LARGE": "--allreduce-large",
                    "CXLSIM_MPI_TIMEOUT": "--timeout", "CXLSIM_MPI_VERBOSE": "--verbose",
                    "CXLSIM_MPI_FAKE_NODES": "--fake-nodes", "CXLSIM_MPI_POOL_SHARED": "--pool-shared"}
    for name, text in env.items():
        try:
            CHECKS[name](name, text)
        except InputError as exc:
            raise InputError(f"{option_names.get(name, name)}: {exc}") from None
    return env
