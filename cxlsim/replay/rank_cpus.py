"""The CPUs a local MPI run's ranks were on, observed while it runs (for `cxlsim replay --cpus --cpu-map`).

Ranks that busy-poll never leave a CPU idle, so the kernel keeps each where it started it, but where it
starts them is its choice (cxlsim.replay.cpu_sharing). `RankCPUs(pid)` samples, every `interval_s`, the
`processor` field of /proc/PID/stat of every descendant of `pid` with PMI_RANK in its environment (MPICH's
launcher names its ranks so). Linux only (/proc).
"""
from __future__ import annotations

import os
import subprocess
import threading

__all__ = ["RankCPUs", "run_seeing_cpus"]


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

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self):
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def cpu_map(self, n: int) -> tuple | None:
        if any(r not in self.seen for r in range(n)):
            return None
        return tuple(max(self.seen[r], key=self.seen[r].get) for r in range(n))
