"""What the host does to a bench: the conditions under which its figures cannot be taken at face value.

A pool allgather on one machine is timed with the ranks' own cores, so three things outside
the bench change what it measures, often by several times:

- more ranks than cores this process may use: ranks take turns on a core, and every wait
  for another rank's flag lasts until the scheduler runs it;
- another cxlsim bench at the same time: both compete for the cores and the caches (runs
  were seen to slow down up to 10x). Pool segments are unlinked once attached, so /dev/shm
  cannot show a running bench; instead every bench holds a lock file for its lifetime
  (`BenchLock`: flock'ed, so the kernel releases it when the bench dies), looks for the
  others' held locks when it starts and when it ends, and writes its pid into each one it
  finds, so a bench that came and went in between is known too;
- the host's slow placement or a disturbance: this machine's vCPUs sometimes sit where a
  flag round trip between two processes takes ~450 ns instead of 55-110 ns. `probe_roundtrip_ns`
  measures the hw flag round trip between two fresh processes (as benchmarks/calibration_error.py
  does; under mpiexec, `roundtrip_ns` on the run's own pool); above SLOW_ROUNDTRIP_NS the run was
  disturbed or in the slow placement.

Each check returns warning lines for the table header; none of them stops a run.
"""
from __future__ import annotations

import fcntl
import glob
import os
import tempfile

from cxlsim.coherence import Coherence

SLOW_ROUNDTRIP_NS = 200.0  # hw flag round trip above which the host is disturbed or in its slow placement
DISTURBED_ROUNDTRIP_NS = 2000.0  # a probe above this lost a CPU during its round trips: no placement (= pools.c)
LOCK_PREFIX = "cxlsim-bench-"
PROBE_WARMUP, PROBE_CALLS = 50, 100  # round trips: ~10 us on a quiet host, ~0.2 s when ranks take turns


def placement_of(roundtrip_ns: float) -> str:
    """The host placement a hw flag round trip (ns) shows, by the emulator probe's rule (comm.PoolComm,
    pools.c): 'fast' up to SLOW_ROUNDTRIP_NS, 'slow' up to DISTURBED_ROUNDTRIP_NS, 'disturbed' above."""
    if roundtrip_ns <= SLOW_ROUNDTRIP_NS:
        return "fast"
    return "slow" if roundtrip_ns <= DISTURBED_ROUNDTRIP_NS else "disturbed"


def lock_dir() -> str:
    """Where benches keep their lock files: the system's temporary directory (TMPDIR, else /tmp)."""
    return tempfile.gettempdir()


class BenchLock:
    """This bench's lock file, held (flock, exclusive) from `acquire` to `release`, and a look at the others'.

    The file is <tmp>/cxlsim-bench-<pid>.lock. Another bench's file whose lock can be taken
    belongs to a bench that is gone: it is removed.
    """

    def __init__(self, directory: str | None = None):
        self.directory = directory or lock_dir()
        self.path = os.path.join(self.directory, f"{LOCK_PREFIX}{os.getpid()}.lock")
        self.fd = None
        self.error = None  # why the lock could not be taken, if it could not

    def acquire(self) -> "BenchLock":
        # Locked under a name no other bench looks at, then renamed: another bench never sees the file unlocked.
        hidden = self.path + ".new"
        try:
            self.fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(hidden, self.path)
        except OSError as exc:
            self.error = f"{hidden}: {exc.strerror}"
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
        return self

    def warnings(self) -> list[str]:
        """A warning when this bench could not take its lock (then other benches cannot see it)."""
        if self.error is None:
            return []
        return [f"WARNING: no bench lock could be taken ({self.error}): a cxlsim bench running at the same time "
                "would go unnoticed by both"]

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self.fd)  # closing releases the lock
            self.fd = None

    def __enter__(self) -> "BenchLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def others(self) -> list[int]:
        """Pids of the other benches that hold their lock now (stale files of dead benches are removed)."""
        running = []
        for path in sorted(glob.glob(os.path.join(self.directory, f"{LOCK_PREFIX}*.lock"))):
            if path == self.path:
                continue
            try:
                fd = os.open(path, os.O_RDWR)
            except OSError:
                continue  # gone meanwhile, or not ours to open
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                running.append(_pid_of(path))
                self._visit(path)
            else:
                try:
                    os.unlink(path)  # nobody holds it: its bench is gone
                except OSError:
                    pass
            finally:
                os.close(fd)
        return running


    def _visit(self, path: str) -> None:
        """Leave this bench's pid in a running bench's lock file, so that it learns of this one even if
        this one starts and ends between its own two looks."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except OSError:
            return
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)

    def visitors(self) -> list[int]:
        """Pids of the benches that found this one running (they wrote them into its lock file)."""
        if self.fd is None:
            return []
        text = os.pread(self.fd, os.fstat(self.fd).st_size, 0).decode(errors="replace")
        return sorted({int(word) for word in text.split() if word.isdigit()})


def _pid_of(path: str) -> int:
    stem = os.path.basename(path)[len(LOCK_PREFIX):-len(".lock")]
    return int(stem) if stem.isdigit() else -1


def concurrency_warning(pids) -> list[str]:
    pids = sorted(set(pids))
    if not pids:
        return []
    return [f"WARNING: {len(pids)} other cxlsim bench(es) ran at the same time (pid {', '.join(map(str, pids))}): "
            "they share this machine's cores and caches, so these figures may be several times too slow"]


def cores_warning(nranks: int, cores: int | None = None) -> list[str]:
    """A warning when `nranks` outnumber the cores this process may use (its CPU affinity)."""
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    if nranks <= cores:
        return []
    return [f"WARNING: {nranks} ranks on {cores} core(s) this process may use: ranks take turns on a core, so "
            "every wait for another rank lasts until it is scheduled; these figures measure the scheduler"]


def roundtrip_ns(comm) -> float:
    """The flag round trip on `comm`'s pool now (ns; np = 2, both ranks call it): the best of 3 short ping-pongs."""
    comm.flag_pingpong(PROBE_WARMUP)
    return min(comm.flag_pingpong(PROBE_CALLS) for _ in range(3))


def probe_roundtrip_ns() -> float:
    """The hw flag round trip now (ns), between two fresh processes (`roundtrip_ns` on a pool of their own)."""
    from cxlsim.emulator.launch import run_local

    return run_local(2, roundtrip_ns, coherence=Coherence.HW, slot_bytes=64, timeout_s=10.0)[0]


def placement_warning(roundtrips_ns) -> list[str]:
    """A warning when a probe's hw flag round trip exceeded SLOW_ROUNDTRIP_NS (`roundtrips_ns`: before, after)."""
    slow = [rt for rt in roundtrips_ns if rt > SLOW_ROUNDTRIP_NS]
    if not slow:
        return []
    shown = ", ".join(f"{rt:.0f}" for rt in roundtrips_ns)
    return [f"WARNING: the host was disturbed or in its slow placement: hw flag round trip {shown} ns "
            f"(probed before and after the run; a quiet host's is under {SLOW_ROUNDTRIP_NS:.0f} ns)"]
