"""The OSU-style allgather harness, run on every rank.

It follows osu_allgather (OMB 5.3): per size, a barrier, then warm-up plus timed
iterations, each timing one allgather alone with a barrier after it outside the
timed span; the per-rank mean is reported as avg/min/max across ranks, in us.
Iteration counts default to OMB's: 200 warm-up + 1000 timed up to 8 KiB, 10 + 100
above. Every side (pool copy, pool zero-copy, bare sync, MPI) runs through the same
loop, on the same ranks, in the same process run, one after the other per size.

Spread. One pass over the sizes is a round; `run_rounds` makes K of them, interleaved
(round 1 over every size, then round 2, ...), so a passing disturbance hits one round of
every size rather than every round of one size. `summarize` reports per size the median
of the K round means, with their min-max (K < 5) or a 95% confidence interval of their
mean (Student's t, K >= 5). The emulated CXL timing is checked in the same run:
`delivered_timing` times what the kernels deliver against what was asked.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time

import numpy as np

from cxlsim.emulator import _kernels
from cxlsim.emulator.bench_collectives import (COLLECTIVES, ZERO_COPY_COLLECTIVES, CollectiveSide, TimedSide,
                                               ValidationError, pattern, read_pass_holds)
from cxlsim.errors import InputError
from cxlsim.units import format_bandwidth, format_size, format_time

LARGE_MESSAGE_BYTES = 8192  # OMB's LARGE_MESSAGE_SIZE
SIDES = ("copy", "copy-read", "zero-copy", "sync", "mpi")
CI_FROM_ROUNDS = 5  # from this many rounds the spread is a 95% confidence interval, below it the min-max
# Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom (any statistics table).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)
PROBE_MIN_BYTES, PROBE_MAX_BYTES = 64 << 10, 4 << 20  # the delivered-bandwidth probe's block size bounds


def osu_counts(size_bytes: int, iterations: int | None = None, warmup: int | None = None) -> tuple[int, int]:
    """(warm-up, timed) iterations for a message size, OMB 5.3 defaults unless given."""
    small = size_bytes <= LARGE_MESSAGE_BYTES
    return (warmup if warmup is not None else (200 if small else 10),
            iterations if iterations is not None else (1000 if small else 100))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """What to measure. sizes: bytes per rank. sides: any of SIDES, run in this order per size.
    iterations/warmup: None for OMB's defaults. validate: check contents every iteration
    (the contents change every iteration, so a stale epoch is caught). collective: one of
    bench_collectives.COLLECTIVES; allgather has every side, broadcast and alltoall also
    'zero-copy' (their fused view calls) and 'copy-read', the others 'copy' (the pool) and 'mpi'.
    'copy-read' is the copy call plus one read pass over its result (recvbuf): what a copy-mode
    caller that uses its result does, so it is zero-copy's fair baseline (zero-copy times its
    call plus one read pass over the result's rows, in place)."""

    sizes: tuple[int, ...]
    sides: tuple[str, ...] = ("copy",)
    iterations: int | None = None
    warmup: int | None = None
    validate: bool = False
    collective: str = "allgather"

    def __post_init__(self):
        if self.collective not in COLLECTIVES:
            raise InputError(f"collective: expected one of {COLLECTIVES}, got {self.collective!r}")
        for side in self.sides:
            if side not in SIDES:
                raise InputError(f"side: expected one of {SIDES}, got {side!r}")
            if self.collective not in ZERO_COPY_COLLECTIVES and side not in ("copy", "mpi"):
                raise InputError(f"side {side!r}: {self.collective} runs on the pool ('copy') or MPI ('mpi') only")
            if self.collective != "allgather" and side == "sync":
                raise InputError(f"side 'sync': only allgather has a bare-sync side, not {self.collective}")
        for name in ("iterations", "warmup"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < (1 if name == "iterations" else 0)):
                raise InputError(f"--{name}: expected a whole number {'>= 1' if name == 'iterations' else '>= 0'}, got {value!r}")


def time_calls(op, barrier, warmup: int, iterations: int, before=None, after=None) -> np.ndarray:
    """osu_allgather's loop (`barrier()` first and after every call, outside the timed span; `before(i)` and
    `after(i)` around call i, untimed): this rank's seconds for each of the `iterations` timed `op()` calls."""
    out = np.empty(iterations)
    barrier()
    for i in range(warmup + iterations):
        if before is not None:
            before(i)
        t0 = time.perf_counter()
        op()
        t1 = time.perf_counter()
        if i >= warmup:
            out[i - warmup] = t1 - t0
        if after is not None:
            after(i)
        barrier()
    return out


def time_loop(op, barrier, warmup: int, iterations: int, before=None, after=None) -> float:
    """osu_allgather's loop (`time_calls`): this rank's mean seconds per timed `op()`, as OSU reports."""
    return float(time_calls(op, barrier, warmup, iterations, before, after).mean())


class AllgatherSide(TimedSide):
    """Buffers and the timed operation of one allgather side at one size (uint8 blocks of n bytes)."""

    def __init__(self, name: str, comm, mpi, n: int, validate: bool):
        super().__init__()
        self.name, self.comm, self.n = name, comm, n
        size, rank = comm.size, comm.rank
        self.send = np.full(n, pattern(rank, 0), dtype=np.uint8)
        self.recv = np.zeros(size * n, dtype=np.uint8)
        self.op = {
            "copy": lambda: comm.allgather(self.send, self.recv),
            "copy-read": self._copy_read_op(),
            "zero-copy": self._zero_copy_op(),
            "sync": lambda: comm.allgather_in_place(n),
            "mpi": lambda: mpi.Allgather(self.send, self.recv),
        }[name]
        self.before = self.after = None
        if validate and name != "sync":
            self.before, self.after = self._fill, self._check

    def _copy_read_op(self):
        """The copy call and one read pass over its result in recvbuf (local memory): what a caller that
        uses a copy-mode result does, timed as zero-copy's call and read pass in place are."""
        allgather, send, recv, read_pass, out = self.comm.allgather, self.send, self.recv, _kernels.read_pass, self.out

        def copy_read():
            allgather(send, recv)
            out[1] = read_pass(recv)
        return copy_read

    def _zero_copy_op(self):
        """What an application does per zero-copy call, with its buffers bound as the copy side's are:
        the fused call (the kernel copies the block into the slot, as copy mode's copy-in) and one
        read pass over every block of the result's `rows`, in place (its own block from send)."""
        view, send, read_pass, out = self.comm.allgather_view, self.send, _kernels.read_pass, self.out

        def zero_copy():
            out[0] = result = view(send)
            out[1] = read_pass(result.rows)
        return zero_copy

    def _fill(self, i):
        self.send.fill(pattern(self.comm.rank, i))

    def _check(self, i):
        if self.n == 0:
            return
        if self.name in ("zero-copy", "copy-read"):
            # Check the timed read pass (read_pass_holds), so validation leaves the caches as the call did
            # (an extra read would change which caches hold the lines the next write invalidates).
            blocks = self.result.rows if self.name == "zero-copy" else self.recv.reshape(self.comm.size, self.n)
            if read_pass_holds(self.checksum, blocks, [pattern(r, i) for r in range(self.comm.size)], self.n):
                return
        if self.name == "zero-copy":
            got = np.array(self.result.array)
        else:
            got = self.recv.reshape(self.comm.size, self.n)
        expected = np.array([pattern(r, i) for r in range(self.comm.size)], dtype=np.uint8)
        bad = np.nonzero(~np.all(got == expected[:, None], axis=1))[0]
        if bad.size:
            r = int(bad[0])
            raise ValidationError(f"rank {self.comm.rank}, {self.name} allgather of {self.n} B, iteration {i}: "
                                  f"block {r} holds {np.unique(got[r])[:4].tolist()}, expected {int(expected[r])} "
                                  f"(stale or torn data)")


def _no_sync() -> None:
    """Nothing between iterations (osu_barrier's loop times back-to-back barriers)."""


def side_op(name: str, comm, n: int, mpi=None):
    """The operation the bench times for side `name` at n bytes per rank (no validation): what
    the calibration's per-call overhead measures at np = 1, 0 B, so it is the same code."""
    return AllgatherSide(name, comm, mpi, n, False).op


def run_plan(comm, plan: BenchPlan, mpi=None, progress=None) -> list[dict]:
    """Measure every size and side; returns rows (identical on every rank) of
    side, np, size_bytes, avg_us, min_us, max_us, iterations."""
    if "mpi" in plan.sides and mpi is None:
        raise InputError("the MPI baseline needs an MPI launch (mpiexec, or --baseline mpi)")
    rows = []
    for n in plan.sizes:
        warmup, iterations = osu_counts(n, plan.iterations, plan.warmup)
        for name in plan.sides:
            side = (AllgatherSide(name, comm, mpi, n, plan.validate) if plan.collective == "allgather" else
                    CollectiveSide(plan.collective, name, comm, mpi, n, plan.validate))
            between = comm.barrier if plan.collective != "barrier" else _no_sync  # osu_barrier: no extra barrier
            mean_s = time_loop(side.op, between, warmup, iterations, side.before, side.after)
            means = np.empty(comm.size, dtype=np.float64)
            comm.allgather(np.array([mean_s]), means)
            rows.append(dict(side=name, np=comm.size, size_bytes=n, avg_us=float(means.mean() * 1e6),
                             min_us=float(means.min() * 1e6), max_us=float(means.max() * 1e6),
                             iterations=iterations))
            del side  # free its buffers before the next side's are allocated
        if progress is not None:
            progress(n)
    return rows


def rank_buffer_bytes(plan: BenchPlan, nranks: int) -> int:
    """Bytes of private buffers one rank holds at most while running `plan` on `nranks` ranks: the largest
    side's send and receive buffers (with validation, also its two comparison arrays), plus those of
    the delivered-bandwidth probe."""
    n = max(plan.sizes, default=0)
    return ((nranks + 1) * (n + probe_bytes(plan.sizes)) + (2 * nranks * n if plan.validate else 0)
            + (nranks * n if plan.collective == "alltoall" else 0))


def run_rounds(comm, plan: BenchPlan, repeat: int, mpi=None, progress=None) -> list[list[dict]]:
    """`repeat` interleaved rounds of `run_plan`; one list of rows per round (identical on every rank)."""
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise InputError(f"--repeat: expected a whole number >= 1, got {repeat!r}")
    return [run_plan(comm, plan, mpi=mpi, progress=progress) for _ in range(repeat)]


def spread(values) -> tuple[str, float, float]:
    """(kind, low, high) of round means: ('min-max', min, max) below CI_FROM_ROUNDS values, else
    ('95% CI', mean -/+ t x s / sqrt(K)), the 95% confidence interval of their mean."""
    values = [float(v) for v in values]
    k = len(values)
    if k < CI_FROM_ROUNDS:
        return "min-max", min(values), max(values)
    t = T975[k - 2] if k - 1 <= len(T975) else 1.96
    half = t * statistics.stdev(values) / math.sqrt(k)
    mean = statistics.fmean(values)
    return "95% CI", mean - half, mean + half


def summarize(rounds: list[list[dict]]) -> list[dict]:
    """One row per (side, size) over the rounds: avg_us, min_us, max_us are the medians of the rounds'
    (so avg_us is the median of the round means); spread, spread_lo_us, spread_hi_us the round means'
    spread (see `spread`); rounds: K; round_avg_us: the round means, in order."""
    by_key = {}
    for rows in rounds:
        for row in rows:
            by_key.setdefault((row["side"], row["size_bytes"]), []).append(row)
    out = []
    for (side, size), rows in by_key.items():
        means = [r["avg_us"] for r in rows]
        kind, lo, hi = spread(means)
        out.append(dict(side=side, np=rows[0]["np"], size_bytes=size, avg_us=statistics.median(means),
                        min_us=statistics.median(r["min_us"] for r in rows),
                        max_us=statistics.median(r["max_us"] for r in rows), iterations=rows[0]["iterations"],
                        rounds=len(rows), spread=kind, spread_lo_us=lo, spread_hi_us=hi, round_avg_us=means))
    return out


def probe_bytes(sizes) -> int:
    """The delivered-bandwidth probe's block size per rank: the largest bench size, within 64 KiB..4 MiB
    (below 64 KiB a copy's time is mostly the call's own cost, not the bandwidth's)."""
    return min(max(max(sizes, default=0), PROBE_MIN_BYTES), PROBE_MAX_BYTES)


def _mean_ns(op, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        op()
    return (time.perf_counter_ns() - t0) / calls


def delivered_timing(comm, nbytes: int, calls: int = 200, batch_ns: float = 20e6) -> dict:
    """What the emulated CXL timing delivers on this run's ranks; every rank calls it at the same point.

    latency_ns: (zero-copy call of 64 B with the latency on - the same call with it off) / L's count
    in such a call (one per wait for flags when np > 1, one per block read: np); the median over 5
    alternating pairs of batches of `calls` calls each.
    bw_bytes_per_ns: what the pool allgather's copies deliver at the asked bandwidth (latency off):
    a copy call of `nbytes` per rank moves (np + 1) x nbytes through the pool (its block in, every
    block out), so (np + 1) x nbytes / (copy call - bare sync), the median over 5 alternating pairs
    of batches of about `batch_ns` each. Above what the machine's copies reach, that is the native
    rate, not the asked one. Both are the ranks' mean; None where that timing is off.
    """
    asked_latency, asked_bw = comm.pool_latency_ns, comm.pool_bw_bytes_per_ns
    size = comm.size
    got = np.array([math.nan, math.nan])
    if asked_latency:
        def in_place():
            comm.allgather_in_place(64)
        differences = []
        for _ in range(5):
            on = _mean_ns(in_place, calls)
            comm.set_timing(0.0, asked_bw)
            off = _mean_ns(in_place, calls)
            comm.set_timing(asked_latency, asked_bw)
            differences.append(on - off)
        got[0] = statistics.median(differences) / (size + (size > 1))
    if asked_bw:
        if nbytes > comm.slot_bytes:
            raise InputError(f"delivered_timing: {nbytes} bytes per rank but pool slots hold {comm.slot_bytes}")
        send, recv = np.ones(nbytes, np.uint8), np.empty(size * nbytes, np.uint8)
        moved = (size + 1) * nbytes
        # The same count on every rank (it depends on the arguments only): each batch is ~batch_ns at
        # the asked bandwidth or at 10 GB/s, whichever is slower.
        copies = max(3, min(200, int(batch_ns / (moved / min(asked_bw, 10.0) + 10e3))))

        def copy():
            comm.allgather(send, recv)
        comm.set_timing(0.0, asked_bw)
        copy()
        differences = []
        for _ in range(5):
            differences.append(_mean_ns(copy, copies) - _mean_ns(comm.barrier, copies))
        comm.set_timing(asked_latency, asked_bw)
        spent = statistics.median(differences)
        got[1] = moved / spent if spent > 0 else math.inf
    everyone = np.empty(2 * size)
    comm.allgather(got, everyone)
    mean = everyone.reshape(size, 2).mean(axis=0)
    return dict(latency_ns=float(mean[0]) if asked_latency else None,
                bw_bytes_per_ns=float(mean[1]) if asked_bw else None, probe_bytes=nbytes)


def timing_warnings(asked: dict, delivered: dict | None, tolerance: float = 0.10) -> list[str]:
    """One line for each emulated-timing figure delivered more than `tolerance` off the asked one.

    asked: pool_latency_ns, pool_bw_bytes_per_ns (0 = off); delivered: `delivered_timing`'s dict.
    """
    if not delivered:
        return []
    out = []
    checks = (("latency", "pool_latency_ns", "latency_ns", format_time, "per pool access"),
              ("bandwidth", "pool_bw_bytes_per_ns", "bw_bytes_per_ns", format_bandwidth,
               f"the pool allgather's copies at {format_size(delivered.get('probe_bytes', 0))} per rank"))
    for what, asked_key, got_key, fmt, how in checks:
        want, got = asked.get(asked_key) or 0.0, delivered.get(got_key)
        if not want or got is None:
            continue
        if not math.isfinite(got) or abs(got - want) > tolerance * want:
            shown = fmt(got) if math.isfinite(got) else "unmeasurable"
            out.append(f"emulated pool {what} not delivered: asked {fmt(want)}, delivered {shown} "
                       f"({how}, the ranks' mean, more than {tolerance:.0%} off)")
    return out
