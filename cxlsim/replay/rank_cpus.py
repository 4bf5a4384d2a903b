"""The CPUs a local MPI run's ranks were on, observed while it runs (for `cxlsim replay --cpus --cpu-map`).

Ranks that busy-poll never leave a CPU idle, so the kernel keeps each where it started it, but where it
starts them is its choice (cxlsim.replay.cpu_sharing). `RankCPUs(pid)` samples, every `interval_s`, the
`processor` field of /proc/PID/stat of every descendant of `pid` with PMI_RANK in its environment (MPICH's
launcher names its ranks so), and what the scheduler did to each rank (/proc/PID/schedstat and status: its CPU
time, its time runnable but waiting for a CPU, its context switches). Every `others_every`-th sample it also
weighs the runnable tasks that are not the run's ranks (every thread in state R of /proc/*/task/*/stat, but
this process's, on the CPU its `processor` field names, weighted as Linux weighs its nice level:
`NICE_WEIGHT`, in nice-0 tasks): `foreign_weight()`, their mean per CPU, is the load other processes put
beside the ranks, which the replay by turns takes as measured (cxlsim.replay.cpu_sharing). Linux only (/proc).

The sampler takes CPU from the ranks it watches (each sample lists /proc): where ranks outnumber the CPUs it
slows the run (C halo np 4 on 2 CPUs, 6 interleaved pairs under load: wall median 44.1 ms sampled every 10 ms
against 32.6 ms unsampled). So the validation's apps record their own CPUs instead
(tests/data/traces/src/cpu_record.h: sched_getcpu() once an iteration, written to DIR/rank<R>.cpus.txt after
the run's last barrier), and `read_recorded(DIR, n)` reads them into a `RecordedCPUs`, which answers
`cpu_map(n)` and `moves` as a `RankCPUs` does, with each rank's `RankSched` over the recorded loop.
"""
from __future__ import annotations

import os
import re
import subprocess
import threading
from dataclasses import dataclass

from cxlsim.errors import InputError

__all__ = ["RankCPUs", "RankSched", "RecordedCPUs", "read_recorded", "run_seeing_cpus", "NICE_WEIGHT"]

NICE_WEIGHT = dict(zip(range(-20, 20), (
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904, 3906,
    3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
    110, 87, 70, 56, 45, 36, 29, 23, 18, 15)))
"""Linux's weight of a task per nice level (kernel/sched/core.c sched_prio_to_weight); nice 0 is 1024."""


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


def run_seeing_cpus(cmd: list, env: dict | None = None, timeout_s: float = 600.0, interval_s: float = 0.005,
                    others_every: int = 10):
    """Run `cmd` to its end while sampling its ranks' CPUs every `interval_s` (s), weighing the other tasks every
    `others_every`-th sample (0: never): (its CompletedProcess with text stdout and stderr, the RankCPUs). subprocess.TimeoutExpired after `timeout_s` (s), the process killed. The
    sampling slows the run it watches where ranks share CPUs: an np 4 MPICH ring on 2 CPUs took 29.5 us an
    iteration at 5 ms, 15.1 at 50 ms, 14.0 with nothing sampling (interleaved, load ~1)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with RankCPUs(proc.pid, interval_s=interval_s, others_every=others_every) as seen:
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

    def __init__(self, root_pid: int, interval_s: float = 0.005, others_every: int = 10):
        self.root, self.interval_s, self.seen, self.last, self.moves = str(root_pid), interval_s, {}, {}, 0
        self._ranks, self._stop = {}, threading.Event()
        self.sched = {}
        """{rank: RankSched} at its last sample."""
        self.others_every, self._samples = others_every, 0
        self.others = []
        """Per weighing of the other tasks: {CPU: their summed weight, in nice-0 tasks}."""

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

    def _weigh_others(self, pids: list) -> None:
        """Add a weighing of the runnable tasks that are not ranks (see the module)."""
        mine, weights = str(os.getpid()), {}
        for pid in pids:
            if pid == mine or self._ranks.get(pid) is not None:
                continue
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for task in tasks:
                try:
                    with open(f"/proc/{pid}/task/{task}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if fields[0] == "R":  # fields: state, ppid, ...: nice is the 17th, processor the 37th
                    cpu = int(fields[36])
                    weights[cpu] = weights.get(cpu, 0.0) + NICE_WEIGHT.get(int(fields[16]), 1024) / 1024
        self.others.append(weights)

    def _sample(self) -> None:
        pids = [pid for pid in os.listdir("/proc") if pid.isdigit()]
        for pid in pids:
            if (rank := self._rank_of(pid)) is None:
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
        self._samples += 1
        if self.others_every and self._samples % self.others_every == 0:
            self._weigh_others(pids)

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

    def foreign_weight(self, cpus: int) -> tuple | None:
        """Per CPU (0..cpus-1), the mean weight of the runnable tasks other than the ranks over the weighings
        (nice-0 tasks; None before the first weighing). It includes the launcher's and the other processes of
        this job but this one, and each weighing sees a moment, so a run of a few weighings is a coarse figure."""
        if not self.others:
            return None
        return tuple(sum(w.get(c, 0.0) for w in self.others) / len(self.others) for c in range(cpus))

    def cpu_map(self, n: int) -> tuple | None:
        if any(r not in self.seen for r in range(n)):
            return None
        return tuple(max(self.seen[r], key=self.seen[r].get) for r in range(n))


@dataclass(frozen=True)
class RecordedCPUs:
    """The CPUs a run's ranks recorded themselves (cpu_record.h), one per iteration."""

    cpus: tuple
    """Per rank, the CPU it was on at each iteration's start (a tuple of CPU numbers)."""
    sched: dict
    """{rank: RankSched} over the recorded loop (from before its first barrier to after its last)."""

    @property
    def moves(self) -> int:
        """Iterations, over all ranks, at which a rank was on another CPU than at its previous one."""
        return sum(a != b for mine in self.cpus for a, b in zip(mine, mine[1:]))

    def cpu_map(self, n: int) -> tuple | None:
        """The CPU each of ranks 0..n-1 was on at most iterations (the lowest on a tie); None if one recorded none."""
        if len(self.cpus) < n or any(not self.cpus[r] for r in range(n)):
            return None
        return tuple(max(sorted(set(self.cpus[r])), key=self.cpus[r].count) for r in range(n))


SCHED_FIELDS = ("cpu_ns", "waited_ns", "switches", "sleeps")
"""The first line's keys of a rank's record, in order."""


def read_recorded(directory: str, n: int) -> RecordedCPUs:
    """Read DIR/rank<R>.cpus.txt of ranks 0..n-1 (cpu_record.h's format); InputError naming the file, the line
    and the field where one is missing or malformed."""
    cpus, sched = [], {}
    for rank in range(n):
        path = os.path.join(directory, f"rank{rank}.cpus.txt")
        try:
            with open(path) as fh:
                lines = fh.read().splitlines()
        except OSError as e:
            raise InputError(f"{path}: rank {rank}'s CPU record: {e.strerror}") from None
        if len(lines) != 2:
            raise InputError(f"{path}: expected 2 lines (the scheduler's figures, the CPUs), got {len(lines)}")
        fields = lines[0].split()
        keys = tuple(fields[0::2])
        if keys != SCHED_FIELDS or len(fields) != 2 * len(SCHED_FIELDS):
            raise InputError(f"{path}:1: expected the fields {' '.join(SCHED_FIELDS)} with a value each, "
                             f"got {lines[0]!r}")
        try:
            values = [float(v) for v in fields[1::2]]
        except ValueError:
            raise InputError(f"{path}:1: a field's value is not a number: {lines[0]!r}") from None
        sched[rank] = RankSched(values[0], values[1], int(values[2]), int(values[3]))
        words = lines[1].split()
        if not words or words[0] != "cpus":
            raise InputError(f"{path}:2: expected the field 'cpus' then a CPU per iteration, got {lines[1]!r}")
        try:
            mine = tuple(int(w) for w in words[1:])
        except ValueError:
            raise InputError(f"{path}:2: field 'cpus': a CPU is not a whole number: {lines[1]!r}") from None
        if any(c < 0 for c in mine):
            raise InputError(f"{path}:2: field 'cpus': sched_getcpu() failed (a CPU of -1): {lines[1]!r}")
        cpus.append(mine)
    return RecordedCPUs(tuple(cpus), sched)
