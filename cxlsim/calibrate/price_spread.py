"""How a local-host profile prices one pool collective, and how far its own jobs spread around that price.

A replay (`cxlsim.replay.pool_profile`) prices a traced pool call with the profile's DES model of the
kernel alone (`kernel_model`: no per-call software) at the call's size. That price comes from a few of
the model's fields (`price_fields`): the collective's copy pattern at that size
(`pattern_curves[mode][pattern][size]`; absent, the DES's copies run at the allgather's concurrent-copy
bandwidth instead), the fold (`fold_curves['float32 sum']` at the bytes a rank folds), the flag round
trip and the path solved from it (`roundtrip_ns`, `path_ns`), and the symmetric flag exchange
(`exchange_ns`). Each of the profile's collectives jobs measured these beside its own calls in its
blocks (`collectives.jobs`, one record per job and host placement); `job_prices` prices the call with
each job's figures (`collectives.job_model`, `row_model`), so the spread of a profile's price is the
range of its jobs' prices, per placement, beside the round trip each job's blocks saw.

Why a profile's own price is not repeatable (measured, np 2, hw, session 26): a call's kernel time
follows the flag round trip its stretch of the machine had, within a placement as well as between
them. Five profiles of session 25 priced the 64 KiB allreduce (the large algorithm) 6.1-12.7 us: their
jobs' prices were 6.9 us at a 63 ns round trip, 10.2-13.1 us at 108-114 ns and 42.2 us at 441 ns (the
slow placement), and the calls measured beside them 7.0, 10.4-15.1 and 43.7 us; three of the five had no
fast job of that size at all, and their model's copies fell back to the allgather's bandwidth. So a
profile's price is the price of the round trip its jobs happened to see. A job's price over its
round trip, though, stayed within 0.9-1.3x across them (64 KiB: 110, 92-117 and 96 ns per ns; 8 B:
1.14-1.27 fast and 1.11-1.16 slow): the kernel's copies are line transfers between the two cores, which
the round trip times. Within the fast placement, though, the call followed its round trip only weakly in session 29
(measured,
17:20 UTC, load 0.5, 30 fresh two-rank jobs in the fast placement, each probing the best of three ping-pongs, then
the calls: at 71-85 ns the 64 KiB large allreduce took 3.31-3.99 us, correlation +0.29, elasticity 0.33 at the
mean; the small one -0.22, the 8 B allreduce 0.27, the 4 KiB allgather 0.24), and the round trips are not one
statistic: a job's blocks report the median of short ping-pongs (95-97 ns beside a 73 ns best-of-three of the same
profile), the library's set-up probe its best of a few. Scaling a job at 95 ns to a run's 82 ns probe priced the
64 KiB allreduce 2.8 us against the 3.0 us the jobs' figures gave and the 3.3-3.7 us the library's calls took. So
`price_at` prices a call at a given round trip (the traced run's, which the library's stats header gives) as the
median of the prices of the profile's jobs of that round trip's placement, unscaled; where no job of that
placement measured the size (or sizes around it), the profile model's price if the model's primitives were
measured in that placement, and only then the other placement's jobs moved to it by the call's flag round trips
(`shifted_price`; in proportion to the round trip, as before session 36, priced the 64 KiB allreduce of a fast run
from slow jobs at 3.3 us where fast jobs measured 8.6-11.2): the 0.9-1.3x above does not hold at every size (the library's 64 KiB small allreduce took 38 ns per ns of round trip fast and 15 slow,
2026-12-02; `price_at`). The fast placement's spread of session 25 (63 against 108-114 ns) is then in the price's
range (its jobs' low and high), not followed. Units: ns, bytes.
"""
from __future__ import annotations

import dataclasses
import statistics

from cxlsim.calibrate.collectives import COLLECTIVES, job_model, predict_collective, row_model
from cxlsim.calibrate.local_model import LocalModel
from cxlsim.calibrate.patterns import fold_bytes, pattern_name
from cxlsim.coherence import Coherence
from cxlsim.emulator.host import placement_of

BENCH_FOLD = "float32 sum"


def kernel_model(model: LocalModel, ranks: int | None = None) -> LocalModel:
    """`model` with no per-call software overhead (the kernel alone, as a replay prices a library call), at
    `ranks` ranks (default the model's)."""
    return dataclasses.replace(model, np=model.np if ranks is None else ranks,
                               overhead_ns=dict(model.overhead_ns, copy=0.0),
                               collective_overhead_ns={c: 0.0 for c in COLLECTIVES}, rank_overhead_ns={})


def price_fields(model: LocalModel, coherence: Coherence | str, collective: str, size_bytes: int,
                 large_bytes: int) -> dict:
    """The model's fields one call's price comes from: {'pattern' (the kernel's copy pattern, None for the
    barrier), 'pattern_ns' (its data time at this size; None: not measured there, the allgather's
    concurrent copy stands in), 'fold_bytes', 'fold_ns' (None: no fold or not measured), 'roundtrip_ns',
    'path_ns', 'exchange_ns' (None: not measured)}."""
    mode = Coherence.parse(coherence, "coherence")
    name = pattern_name(collective, size_bytes, large_bytes)
    folded = fold_bytes(collective, size_bytes, large_bytes, model.np)
    return {"pattern": name,
            "pattern_ns": model.pattern_ns(name, size_bytes, mode) if name and size_bytes > 0 else None,
            "fold_bytes": folded, "fold_ns": model.fold_ns(folded, BENCH_FOLD) if folded else None,
            "roundtrip_ns": model.roundtrip_ns.get(mode.value), "path_ns": model.path_ns.get(mode.value),
            "exchange_ns": model.exchange_ns.get(mode.value)}


def profile_price(profile: dict, coherence: Coherence | str, collective: str, size_bytes: int,
                  large_bytes: int) -> float:
    """The profile model's price (ns) of one kernel call, as a replay prices it."""
    model = kernel_model(LocalModel.from_dict(profile["model"]))
    return predict_collective(model, coherence, collective, size_bytes, large_bytes)


def job_prices(profile: dict, coherence: Coherence | str, collective: str, size_bytes: int,
               large_bytes: int) -> list[dict]:
    """The call priced with each collectives job's own figures, for every job record of the mode with a
    block of this collective and size: [{'id', 'placement', 'roundtrip_ns' (its blocks' round trip),
    'blocks', 'measured_ns' (its calls, with their software), 'pattern_ns', 'price_ns' (the kernel
    alone)}], in job order."""
    mode = Coherence.parse(coherence, "coherence")
    base = LocalModel.from_dict(profile["model"])
    out = []
    for job in (profile.get("collectives") or {}).get("jobs", []):
        got = job.get("measured", {}).get(collective, {}).get(str(size_bytes))
        if job["coherence"] != mode.value or not got or not job.get("roundtrip_ns"):
            continue
        model = kernel_model(row_model(job_model(base, job), job, collective, size_bytes))
        name = pattern_name(collective, size_bytes, large_bytes)
        out.append({"id": job["id"], "placement": job["placement"],
                    "roundtrip_ns": job.get("call_roundtrip_ns", {}).get(collective, {}).get(str(size_bytes)),
                    "blocks": got["blocks"], "measured_ns": got["measured_ns"],
                    "pattern_ns": model.pattern_ns(name, size_bytes, mode) if name and size_bytes > 0 else None,
                    "price_ns": predict_collective(model, mode, collective, size_bytes, large_bytes)})
    return out


def spread(prices: list[dict], placement: str) -> dict | None:
    """{'jobs', 'median_ns', 'low_ns', 'high_ns'} of the `job_prices` of one placement; None without any."""
    got = [p["price_ns"] for p in prices if p["placement"] == placement]
    if not got:
        return None
    return {"jobs": len(got), "median_ns": statistics.median(got), "low_ns": min(got), "high_ns": max(got)}



EXTRAPOLATE_SPAN = 2.0
"""A size beyond every size the profile's jobs measured is priced in proportion to the bytes from the nearest
one only within this factor of it (at 8x, from 8 KiB to 64 KiB, that gave 5.3 us against 8.6-9.9 us from
jobs that measured 64 KiB)."""


ROUNDTRIPS_PER_CALL = {"allreduce": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0, "broadcast": 0.5, "barrier": 0.5}
"""Flag round trips on a call's critical path at np 2, per step (the large allreduce has two steps): a data step
waits for its buffer's last use and for the other rank's publish, a hop each; a bcast's reader and a barrier wait
one hop. Fitted across placements (hw, the jobs of eight profiles of 2026-12-04, fast 189-198 ns, slow 512-621 ns):
the 8-byte allreduce 272-296 ns fast and 616-917 slow, 1.07 ns per ns of round trip; 4 KiB 937-963 and
1146-1782, 0.92; the 4 KiB broadcast 663-829 and 792-934, 0.43; the 64 KiB allreduce 8.6-11.2 us fast and 8.4-11.2 slow (17.8
in the one profile made before session 35's non-temporal copy-ins)."""


def shifted_price(price_ns: float, from_roundtrip_ns: float, to_roundtrip_ns: float, collective: str,
                  size_bytes: int, large_bytes: int) -> float:
    """A price measured at one flag round trip moved to another by the call's round trips (`ROUNDTRIPS_PER_CALL`),
    kept between the price as measured and the price in proportion to the round trips (its kernel's time follows
    the round trip at most in proportion, and at least not at all)."""
    steps = 2 if collective == "allreduce" and size_bytes >= large_bytes else 1
    moved = price_ns + steps * ROUNDTRIPS_PER_CALL.get(collective, 1.0) * (to_roundtrip_ns - from_roundtrip_ns)
    ratio = price_ns * to_roundtrip_ns / from_roundtrip_ns
    return min(max(moved, min(price_ns, ratio)), max(price_ns, ratio))


def placement_prices(profile: dict, coherence: Coherence | str, collective: str, size_bytes: int, large_bytes: int,
                     roundtrip_ns: float, placement: str | None = None,
                     borrow: bool = True) -> tuple[list[float], list[str]]:
    """Each job's price of this call (`job_prices`): as priced, over the jobs of `placement` if any of them measured
    the size, else (if `borrow`) every job's moved to the round trip `roundtrip_ns` (`shifted_price`); with the
    placements of the jobs used (sorted, distinct)."""
    jobs = [j for j in job_prices(profile, coherence, collective, size_bytes, large_bytes) if j["roundtrip_ns"]]
    mine = [j for j in jobs if j["placement"] == placement]
    if mine:
        return [j["price_ns"] for j in mine], [placement]
    if not borrow:
        return [], []
    return ([shifted_price(j["price_ns"], j["roundtrip_ns"], roundtrip_ns, collective, size_bytes, large_bytes)
             for j in jobs], sorted({j["placement"] for j in jobs}))


def price_at(profile: dict, coherence: Coherence | str, collective: str, size_bytes: int, large_bytes: int,
             roundtrip_ns: float) -> dict:
    """The kernel's price of one call at a flag round trip `roundtrip_ns` (the traced run's, ns): {'price_ns',
    'low_ns', 'high_ns' (the range: the profile's spread), 'jobs', 'rule' (which of these, in words)}.
    In order: the median of the prices of the profile's jobs of the run's placement (`host.placement_of`), unscaled,
    at the size, else interpolated linearly between the nearest measured sizes on either side (priced with this
    call's algorithm: an allreduce block measures both algorithms' patterns and folds), else the nearest one's in
    proportion to the bytes within EXTRAPOLATE_SPAN of it (`_from_jobs`); then, where the profile model's
    primitives are of the run's placement, the model's price (`profile_price`); else the other placement's jobs
    the same way, each moved to the run's round trip by the call's round trips (`shifted_price`), then the model's
    price moved alike.
    Why the model before the other placement's jobs: a price does not follow the round trip across placements at
    every size (2026-12-02: the library's 64 KiB small allreduce took 2.88-2.94 us at 70-76 ns and 6.75-6.96 us
    at 448-471 ns, 38 against 15 ns per ns of round trip, where session 25's 64 KiB large allreduce and 8 B calls
    stayed within 0.9-1.3x); and within the fast placement the calls followed the round trip with an elasticity of
    about 0.3 (module docstring), so jobs of the run's placement are not scaled."""
    placement = placement_of(roundtrip_ns)
    mode = Coherence.parse(coherence, "coherence").value
    own = LocalModel.from_dict(profile["model"]).roundtrip_ns[mode]
    if placement_of(own) == placement:  # this placement's jobs, else the model of this placement's primitives
        got = _from_jobs(profile, coherence, collective, size_bytes, large_bytes, roundtrip_ns, placement, False)
        if got is not None:
            return got
        price = profile_price(profile, coherence, collective, size_bytes, large_bytes)
        return {"price_ns": price, "low_ns": price, "high_ns": price, "jobs": 0,
                "rule": f"the profile model's price, of this placement's primitives (no {placement}-placement job "
                        f"measured this size, sizes on both sides of it or one within {EXTRAPOLATE_SPAN:g}x)"}
    got = _from_jobs(profile, coherence, collective, size_bytes, large_bytes, roundtrip_ns, placement, True)
    if got is not None:
        return got
    price = shifted_price(profile_price(profile, coherence, collective, size_bytes, large_bytes), own, roundtrip_ns,
                          collective, size_bytes, large_bytes)
    return {"price_ns": price, "low_ns": price, "high_ns": price, "jobs": 0,
            "rule": f"the profile model's price moved from its round trip {own:.0f} ns ({placement_of(own)} "
                    f"placement) (no job measured this size, sizes on both sides of it or one within "
                    f"{EXTRAPOLATE_SPAN:g}x)"}


def _from_jobs(profile: dict, coherence, collective: str, size_bytes: int, large_bytes: int, roundtrip_ns: float,
               placement: str, borrow: bool) -> dict | None:
    """`price_at` from the profile's jobs (`placement_prices`, borrowing the other placement's only if `borrow`):
    at the size, else interpolated between measured sizes or in proportion from one side; None: no job fits."""
    mode = Coherence.parse(coherence, "coherence").value

    def at(n, large):  # the jobs' prices of size n at the round trip, or None: no job priced it
        got, placements = placement_prices(profile, coherence, collective, n, large, roundtrip_ns, placement, borrow)
        if not got:
            return None
        whose = (f"{placement}-placement jobs' prices" if placements == [placement] else
                 f"{'/'.join(placements)}-placement jobs' prices moved to {roundtrip_ns:.0f} ns (no {placement}-"
                 f"placement job measured {n} B)")
        return {"price_ns": statistics.median(got), "low_ns": min(got), "high_ns": max(got), "jobs": len(got),
                "rule": f"the median of {len(got)} {whose}"}
    own_size = at(size_bytes, large_bytes)
    if own_size is not None:
        return own_size
    # the neighbours run this call's algorithm (every allreduce block measured both algorithms' figures)
    algorithm = large_bytes if collective != "allreduce" else 0 if size_bytes >= large_bytes else 1 << 62
    listed = sorted({int(n) for j in (profile.get("collectives") or {}).get("jobs", []) if j["coherence"] == mode
                     for n in j.get("measured", {}).get(collective, {}) if int(n) > 0 and int(n) != size_bytes})
    priced = {n: got for n in listed if (got := at(n, algorithm)) is not None}
    below = [n for n in priced if n < size_bytes]
    above = [n for n in priced if n > size_bytes]
    if not above:
        below = [n for n in below if n >= size_bytes / EXTRAPOLATE_SPAN]
    if not below:
        above = [n for n in above if n <= size_bytes * EXTRAPOLATE_SPAN]
    if not (below or above):
        return None
    lo, hi = (below or above)[-1 if below else 0], (above or below)[0 if above else -1]
    a, b = priced[lo], priced[hi]
    if lo != hi:
        w = (size_bytes - lo) / (hi - lo)
        how = f"interpolated between {lo} and {hi} B"
    else:  # one side only: in proportion to the bytes
        w, b = 0.0, a
        a = {k: a[k] * size_bytes / lo if k.endswith("_ns") else a[k] for k in a}
        how = f"from {lo} B in proportion to the bytes (no job priced a size on the other side of {size_bytes} B)"
    return {"price_ns": a["price_ns"] + w * (b["price_ns"] - a["price_ns"]),
            "low_ns": a["low_ns"] + w * (b["low_ns"] - a["low_ns"]),
            "high_ns": a["high_ns"] + w * (b["high_ns"] - a["high_ns"]), "jobs": min(a["jobs"], b["jobs"]),
            "rule": f"{how} ({a['rule']})"}
