"""The pool allreduce's threshold, measured: from which size the large algorithm beats the small one.

At np ranks (default 2) on this machine, per round and per size (float32 sums, osu_allreduce's
loop: `bench.time_loop`, a barrier between calls), the small algorithm (every rank folds every
block) and the large one (reduce-scatter through the pool, then an allgather of the shares)
are timed one right after the other, so the machine's drift hits both. Per size the medians
over the rounds are compared; the threshold is the smallest measured size from which the
large algorithm is faster at that size and at every larger one measured (an isolated
disturbed row below cannot set it). If the large one never wins, the threshold is twice the
largest size measured ("above the measured range"). The crossover lies between the size
below the threshold and the threshold itself: sizes double, so the threshold is exact to a
factor of 2. The hw flag round trip before and after tells the host placement (below 200 ns:
the fast one), which the result records, since the crossover moves with it; the copy-ins are
the ones `PoolComm.choose_copy_in` picks for that placement (non-temporal from 4 KiB in the
slow one), recorded as nt_min_bytes.

`cxlsim calibrate` keeps the result in its profile as ``emulator`` (threshold, rows,
placement); `cxlsim.emulator.tuning` reads it back as the emulator's default. Units: ns, bytes.
"""
from __future__ import annotations

import statistics

import numpy as np

from cxlsim.coherence import Coherence
from cxlsim.emulator.host import SLOW_ROUNDTRIP_NS
from cxlsim.errors import InputError

DEFAULT_SIZES = tuple(4096 << k for k in range(9))  # 4 KiB .. 1 MiB
FAST_ROUNDTRIP_NS = SLOW_ROUNDTRIP_NS  # below: the fast placement
TAKING_TURNS_NS = 10000.0  # a flag round trip this long: the ranks were sharing one CPU
NEVER = 1 << 62  # the 'always small' large_bytes


def _time_both(comm, sizes, rounds, iterations, warmup):
    from cxlsim.emulator.bench import time_loop
    from cxlsim.emulator.host import roundtrip_ns

    probe = comm.size == 2 and comm.coherence is Coherence.HW
    roundtrips = [roundtrip_ns(comm)] if probe else []
    copy_in = comm.choose_copy_in()["nt_min_bytes"]  # the copy-ins this placement gets (np 2, hw; else plain)
    times = {}
    for _ in range(rounds):
        for n in sizes:
            send = np.ones(n // 4, np.float32)
            recv = np.empty_like(send)
            for name, large in (("small", NEVER), ("large", 0)):
                def call(send=send, recv=recv, large=large):
                    comm.allreduce(send, recv, "sum", large_bytes=large)
                mean_s = time_loop(call, comm.barrier, warmup, iterations)
                means = np.empty(comm.size)
                comm.allgather(np.array([mean_s]), means)
                times.setdefault((name, n), []).append(float(means.max() * 1e9))  # the slowest rank's
    if probe:
        roundtrips.append(roundtrip_ns(comm))
    return times, roundtrips, copy_in


def choose_threshold(rows: list[dict]) -> int:
    """The threshold from rows of size_bytes, small_ns, large_ns (see the module docstring)."""
    rows = sorted(rows, key=lambda r: r["size_bytes"])
    threshold = 2 * rows[-1]["size_bytes"]
    for row in reversed(rows):
        if row["large_ns"] >= row["small_ns"]:
            break
        threshold = row["size_bytes"]
    return threshold


def measure_allreduce_threshold(sizes=DEFAULT_SIZES, nranks: int = 2, rounds: int = 3, iterations: int = 30,
                                warmup: int = 5, coherence: Coherence | str = Coherence.HW) -> dict:
    """Measure both allreduce algorithms at `sizes` (bytes per rank, multiples of 4) and pick the threshold.

    Returns allreduce_large_bytes, rows (size_bytes, small_ns, large_ns and their round values),
    np, coherence, rounds, iterations, roundtrips_ns, placement ('fast', 'slow or disturbed',
    'mixed', or 'not probed' when np != 2 or in flush mode) and nt_min_bytes (the copy-ins used).
    """
    from cxlsim.emulator.launch import run_local

    coherence = Coherence.parse(coherence, "coherence")
    sizes = tuple(sorted(set(int(n) for n in sizes)))
    if len(sizes) < 2 or any(n < 4 or n % 4 for n in sizes):
        raise InputError(f"allreduce threshold: expected at least two sizes, each a multiple of 4 bytes, got {list(sizes)}")
    if rounds < 1 or iterations < 1:
        raise InputError(f"allreduce threshold: rounds and iterations must be >= 1, got {rounds} and {iterations}")
    out = run_local(nranks, _time_both, (sizes, rounds, iterations, warmup), slot_bytes=max(sizes),
                    coherence=coherence, timeout_s=120.0)
    times, roundtrips, copy_in = out[0]
    rows = [dict(size_bytes=n, small_ns=statistics.median(times[("small", n)]),
                 large_ns=statistics.median(times[("large", n)]), small_rounds_ns=times[("small", n)],
                 large_rounds_ns=times[("large", n)]) for n in sizes]
    fast = [r for r in roundtrips if r < FAST_ROUNDTRIP_NS]
    placement = ("not probed" if not roundtrips else "fast" if len(fast) == len(roundtrips)
                 else "slow or disturbed" if not fast else "mixed")
    return dict(allreduce_large_bytes=choose_threshold(rows), rows=rows, np=nranks, coherence=coherence.value,
                rounds=rounds, iterations=iterations, roundtrips_ns=roundtrips, placement=placement,
                nt_min_bytes=copy_in)


def format_threshold(result: dict) -> str:
    """The measurement as comment lines for `cxlsim calibrate`'s report."""
    above = result["allreduce_large_bytes"] > result["rows"][-1]["size_bytes"]
    lines = [f"# allreduce threshold (np {result['np']}, {result['coherence']}, {result['rounds']} rounds, "
             f"placement {result['placement']}, copy-ins "
             f"{'non-temporal from ' + str(result['nt_min_bytes']) + ' B' if result['nt_min_bytes'] else 'plain'}): "
             f"large from {result['allreduce_large_bytes']} B"
             + (" (above the measured range: the small algorithm won everywhere)" if above else
                " (exact to a factor of 2: sizes double)"),
             f"#   {'size':>8} {'small(us)':>10} {'large(us)':>10} {'small/large':>11}"]
    turns = [r for r in result["roundtrips_ns"] if r > TAKING_TURNS_NS]
    if turns:
        lines.insert(1, f"# WARNING: flag round trips of {', '.join(f'{r / 1e3:.0f}' for r in turns)} us: the ranks "
                        "were taking turns on one CPU, so these times are the scheduler's; re-measure on a quiet host")
    for r in result["rows"]:
        lines.append(f"#   {r['size_bytes']:>8} {r['small_ns'] / 1e3:10.2f} {r['large_ns'] / 1e3:10.2f} "
                     f"{r['small_ns'] / r['large_ns']:11.2f}")
    return "\n".join(lines) + "\n"


def algorithm_errors(model, result: dict) -> dict:
    """Both algorithms' calls of the threshold measurement, held out and predicted by `model` (a `LocalModel` of
    the same np, `collectives.predict_collective` with the algorithm forced): {'small'|'large': {'rows': [(size,
    measured_ns, predicted_ns, error)], 'median', 'worst', 'worst_size'}}. The large algorithm is otherwise
    validated only from the threshold on (at np 2 in the fast placement, often 1 MiB alone), though a library may run
    it lower. The measured time is the slowest rank's per-call mean (osu_allreduce's loop), the prediction the
    DES's bench loop: both include the per-call software."""
    from cxlsim.calibrate.collectives import predict_collective

    out = {}
    for name, large in (("small", NEVER), ("large", 0)):
        rows = []
        for r in result["rows"]:
            measured = r[f"{name}_ns"]
            predicted = predict_collective(model, result["coherence"], "allreduce", r["size_bytes"], large)
            rows.append((r["size_bytes"], measured, predicted, predicted / measured - 1.0))
        worst = max(rows, key=lambda row: abs(row[3]))
        out[name] = {"rows": rows, "median": statistics.median(abs(row[3]) for row in rows), "worst": abs(worst[3]),
                     "worst_size": worst[0]}
    return out
