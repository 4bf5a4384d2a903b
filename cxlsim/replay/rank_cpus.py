"""The CPUs a local MPI run's ranks were on, observed while it runs (for `cxlsim replay --cpus --cpu-map`).

Ranks that busy-poll never leave a CPU idle, so the kernel keeps each where it started it, but where it
starts them is its choice (cxlsim.replay.cpu_sharing). `RankCPUs(pid)` samples, every `interval_s`, the
`processor` field of /proc/PID/stat of every descendant of `pid` with PMI_RANK in its environment (MPICH's
launcher names its ranks so), and what the scheduler did to each rank (/proc/PID/schedstat and status: its CPU
time, its time runnable but waiting for a CPU, its context switches), and the machine's busy time per CPU
over the run (/proc/stat): the CPU time the run's ranks did not take is other processes' (`foreign_share`),
the load the replay by turns takes as measured (cxlsim.replay.cpu_sharing). Linux only (/proc).
"""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass

__all__ = ["RankCPUs", "RankSched", "run_seeing_cpus", "cpu_busy_ns"]

USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""The unit of /proc/stat's CPU times (ticks per second)."""


def cpu_busy_ns() -> dict:
    """{CPU: the time it has been busy since boot (ns)}, from /proc/stat (user, nice, system, irq, softirq and
    steal; to the kernel's tick of 1 / USER_HZ s); {} where there is no /proc/stat."""
    busy = {}
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                m = re.match(r"cpu(\d+) (.*)", line)
                if m:
                    ticks = [int(v) for v in m.group(2).split()]
                    busy[int(m.group(1))] = (sum(ticks[:8]) - ticks[3] - ticks[4]) * 1e9 / USER_HZ
    except OSError:
        pass
    return busy


@dataclass(frozen=True)
class RankSched:
    """What the scheduler did to one rank over a run (its last sample, within `interval_s` of its end)."""

    cpu_ns: float
    """CPU time it ran (ns)."""
    waited_ns: float
    """Time it was runnable but waiting for its CPU (ns)."""
    switches: int
    """Context switches away from it: a sched_yield or a preemption that handed the CPU to another task."""
    sleeps: int
    """Switches where it blocked (slept)."""


def run_seeing_cpus(cmd: list, env: dict | None = None, timeout_s: float = 600.0):
    """Run `cmd` to its end while sampling its ranks' CPUs: (its CompletedProcess with text stdout and
    stderr, the RankCPUs). subprocess.TimeoutExpired after `timeout_s` (s), the process killed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with RankCPUs(proc.pid) as seen:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), seen


class RankCPUs:
    """While a run goes (a `with` block), samples the CPU each of its rank processes is on (the `processor`
    field of /proc/PID/stat of every descendant of `root_pid` with PMI_RANK in its environment, as MPICH's
    launcher sets it) every `interval_s`: `cpu_map(n)`, the CPU each rank was seen on most (None if a rank was
    not seen), and `moves`, the samples at which a rank was on another CPU than at its previous one."""

    def __init__(self, root_pid: int, interval_s: float = 0.005):
        self.root, self.interval_s, self.seen, self.last, self.moves = str(root_pid), interval_s, {}, {}, 0
        self._ranks, self._stop = {}, threading.Event()
        self.sched = {}
        """{rank: RankSched} at its last sample."""
        self.busy_ns = {}
        """{CPU: the time it was busy over the run (ns), every process's}; {} without /proc/stat."""
        self.wall_ns = 0.0

    def _descends(self, pid: str) -> bool:
        for _ in range(64):
            if pid == self.root:
                return True
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    pid = fh.read().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                return False
            if pid in ("0", "1"):
                return False
        return False

    def _rank_of(self, pid: str):
        if pid not in self._ranks:
            if not self._descends(pid):
                self._ranks[pid] = None
                return None
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    env = fh.read().split(b"\0")
                ranks = [int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"PMI_RANK=")]
            except (OSError, ValueError):
                return None  # gone: look again next time
            if not ranks:
                return None  # the launcher, or a rank forked but not yet exec'd: look again next time
            self._ranks[pid] = ranks[0]
        return self._ranks[pid]

    def _sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or (rank := self._rank_of(pid)) is None:
                continue
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    cpu = int(fh.read().rsplit(")", 1)[1].split()[36])
            except (OSError, IndexError, ValueError):
                continue
            counts = self.seen.setdefault(rank, {})
            counts[cpu] = counts.get(cpu, 0) + 1
            self.moves += rank in self.last and self.last[rank] != cpu
            self.last[rank] = cpu
            try:
                with open(f"/proc/{pid}/schedstat") as fh:
                    ran, waited, _ = fh.read().split()
                with open(f"/proc/{pid}/status") as fh:
                    status = fh.read()
                sleeps = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
                switches = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
            except (OSError, ValueError, AttributeError):
                continue
            self.sched[rank] = RankSched(float(ran), float(waited), switches, sleeps)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self):
        self._busy0, self._t0 = cpu_busy_ns(), time.monotonic_ns()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.wall_ns = float(time.monotonic_ns() - self._t0)
        busy = cpu_busy_ns()
        self.busy_ns = {c: busy[c] - self._busy0[c] for c in busy if c in self._busy0}

    def foreign_share(self, n: int) -> tuple | None:
        """Per CPU, the share of the run's wall time other processes kept it busy: its busy time less the CPU
        time of the ranks seen on it (each rank counted on the CPU `cpu_map` gives), over the wall time, in
        [0, 1]; None without /proc/stat, a map or every rank's schedstat. The busy time is to the tick
        (1 / USER_HZ s), and includes the launcher's and this sampler's own time."""
        where = self.cpu_map(n)
        if where is None or not self.busy_ns or any(r not in self.sched for r in range(n)) or self.wall_ns <= 0:
            return None
        ranks = {c: sum(self.sched[r].cpu_ns for r in range(n) if where[r] == c) for c in self.busy_ns}
        return tuple(min(1.0, max(0.0, (self.busy_ns[c] - ranks[c]) / self.wall_ns)) for c in sorted(self.busy_ns))

    def cpu_map(self, n: int) -> tuple | None:
        if any(r not in self.seen for r in range(n)):
            return None
        return tuple(max(self.seen[r], key=self.seen[r].get) for r in range(n))
