"""Fit LogGP network parameters from OSU output (osu_latency, osu_bw), per protocol regime.

Within one protocol regime, osu_latency (half a ping-pong) follows
T(k) = L + 2o + (k - 1) G: the slope is G and the intercept is L + 2o - G. The
eager-to-rendezvous switch shows up as a change of line, so the sizes are split
at the breakpoint that minimises the relative residual, and each regime gets its
own line (a split is kept only if one line misses by 1% rms or more and the split
halves the residual). When the protocol switch is known (an MPI library's documented
eager/rendezvous threshold, e.g. MPICH's MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD), `split_at`
places the split there instead: sizes below it form one regime, the rest the other.
Above a known switch (a single-copy rendezvous) the per-byte cost of the copy changes where
the message outgrows a cache level, so those rows are split again wherever their line bends,
by the same rule; each piece is a regime of its own (three or more rows, L and o >= 0).

o and L cannot be told apart from latency alone. osu_bw's smallest messages give
the message rate, whose inverse is max(g, o); cxlsim assumes g = o (as its presets
do), so o = g = size / bandwidth at the smallest size, and L = intercept - 2o + G.
Without osu_bw, o = 0 and L takes the whole intercept; the fit says which case it is.
Fits are weighted least squares on relative error (numpy.linalg.lstsq), because
latencies span three orders of magnitude.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from cxlsim.emulator.osu import OSUTable
from cxlsim.errors import InputError

MIN_POINTS = 3  # per regime
GOOD_FIT = 0.01  # a single line within 1% rms is not split


@dataclasses.dataclass(frozen=True, kw_only=True)
class Regime:
    """LogGP parameters for messages of min_size_bytes..max_size_bytes (ns, ns/byte)."""

    min_size_bytes: int
    max_size_bytes: int
    latency_ns: float
    overhead_ns: float
    gap_ns: float
    gap_per_byte_ns: float
    rms_rel_error: float
    """Root-mean-square relative residual of the latency line on its own points."""

    def one_way_ns(self, size_bytes: int) -> float:
        """L + 2o + (k - 1) G: the model's osu_latency figure for `size_bytes`."""
        return self.latency_ns + 2 * self.overhead_ns + max(size_bytes - 1, 0) * self.gap_per_byte_ns


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogGPFit:
    """Regimes in size order, and how o was identified."""

    regimes: tuple[Regime, ...]
    identified: str

    def regime_for(self, size_bytes: int) -> Regime:
        for regime in self.regimes:
            if size_bytes <= regime.max_size_bytes:
                return regime
        return self.regimes[-1]

    def to_dict(self) -> dict:
        return {"identified": self.identified, "regimes": [dataclasses.asdict(r) for r in self.regimes]}

    @classmethod
    def from_dict(cls, data: dict) -> "LogGPFit":
        try:
            return cls(identified=str(data["identified"]),
                       regimes=tuple(Regime(**r) for r in data["regimes"]))
        except (KeyError, TypeError) as exc:
            raise InputError(f"LogGP fit: expected keys 'identified' and 'regimes' with Regime fields ({exc})") from None


def _line(sizes: np.ndarray, times: np.ndarray) -> tuple[float, float, float]:
    """Weighted least squares T = a + b k on relative error; returns (a, b, rms relative residual)."""
    design = np.stack([np.ones_like(sizes), sizes], axis=1) / times[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(times), rcond=None)
    rel = (a + b * sizes - times) / times
    return float(a), float(b), float(np.sqrt(np.mean(rel**2)))


def _best_split(sizes: np.ndarray, times: np.ndarray, bend: bool = False):
    """The index splitting the rows into two lines, or None when one line is good (rms < GOOD_FIT) or no
    split of MIN_POINTS+ rows each halves the squared relative residual.

    bend: a split inside a protocol regime, kept only if both lines are LogGP lines (intercept
    L + 2o - G >= -G, i.e. L, o >= 0); a steeper line through a load-slowed point can need a
    negative intercept, which the fit would clip."""
    a, b, rms = _line(sizes, times)
    best, best_sse = None, rms**2 * len(sizes)
    if rms < GOOD_FIT:
        return None
    for split in range(MIN_POINTS, len(sizes) - MIN_POINTS + 1):
        (a1, b1, r1), (a2, b2, r2) = _line(sizes[:split], times[:split]), _line(sizes[split:], times[split:])
        if bend and (a1 + max(b1, 0.0) < 0 or a2 + max(b2, 0.0) < 0):
            continue
        sse = r1**2 * split + r2**2 * (len(sizes) - split)
        if sse < 0.5 * best_sse:
            best, best_sse = split, sse
    return best


def _one_line(sizes: np.ndarray, times: np.ndarray) -> tuple[int, int, float, float, float]:
    a, b, rms = _line(sizes, times)
    return (int(sizes[0]), int(sizes[-1]), a, b, rms)


def _lines(sizes: np.ndarray, times: np.ndarray) -> list[tuple[int, int, float, float, float]]:
    """The rows as lines, split again wherever a line bends (`_best_split`), recursively."""
    split = _best_split(sizes, times, bend=True)
    if split is None:
        return [_one_line(sizes, times)]
    return _lines(sizes[:split], times[:split]) + _lines(sizes[split:], times[split:])


def fit_latency_lines(table: OSUTable, split_at: int | None = None) -> list[tuple[int, int, float, float, float]]:
    """Split osu_latency rows into regimes, one line each: (lo, hi, intercept_ns, slope_ns_per_byte, rms).

    split_at: the first size (bytes) of the protocol's second regime (a single-copy rendezvous); its
    rows are then split again wherever their line bends, by the same rule as the split (one line
    missing by GOOD_FIT rms or more, a split halving the residual, MIN_POINTS rows a line): the
    per-byte cost of a copy changes where the message outgrows a cache level. None: the one split
    (at most) is found from the rows."""
    if table.kind != "latency":
        raise InputError(f"expected an osu_latency table, got {table.kind!r} ({table.title!r})")
    sizes = np.array(table.sizes, dtype=float)
    times = np.array(table.column(table.columns[1]), dtype=float) * 1e3  # us -> ns
    if len(sizes) < MIN_POINTS or np.any(times <= 0):
        raise InputError(f"osu_latency table {table.title!r}: need {MIN_POINTS}+ rows of positive latencies")
    if split_at is None:
        split = _best_split(sizes, times)
        if split is None:
            return [_one_line(sizes, times)]
        return [_one_line(sizes[:split], times[:split]), _one_line(sizes[split:], times[split:])]
    split = int(np.searchsorted(sizes, split_at))
    if split < MIN_POINTS or len(sizes) - split < MIN_POINTS:
        raise InputError(f"protocol threshold {split_at} B: osu_latency table {table.title!r} needs "
                         f"{MIN_POINTS}+ rows on each side of it ({split} below, {len(sizes) - split} at or above)")
    return [_one_line(sizes[:split], times[:split])] + _lines(sizes[split:], times[split:])


def fit_loggp(latency: OSUTable, bandwidth: OSUTable | None = None, split_at: int | None = None) -> LogGPFit:
    """LogGP regimes from osu_latency, with o = g from osu_bw's smallest message if given.

    split_at: the protocol switch (bytes) where the second regime starts; None finds it."""
    lines = fit_latency_lines(latency, split_at)
    if bandwidth is not None:
        if bandwidth.kind != "bw":
            raise InputError(f"expected an osu_bw table, got {bandwidth.kind!r} ({bandwidth.title!r})")
        size, mb_per_s = bandwidth.rows[0][0], bandwidth.rows[0][1]
        if size <= 0 or mb_per_s <= 0:
            raise InputError(f"osu_bw table {bandwidth.title!r}: first row needs a positive size and bandwidth")
        overhead = size / (mb_per_s * 1e6) * 1e9  # ns per message at the smallest size
        identified = f"o = g = {overhead:.0f} ns from osu_bw's {size}-byte message rate (assumes g = o)"
    else:
        overhead = 0.0
        identified = "no osu_bw: o = g = 0 and L holds the whole intercept L + 2o - G"
    regimes = []
    for lo, hi, intercept, slope, rms in lines:
        gap_per_byte = max(slope, 0.0)
        o = min(overhead, max(intercept + gap_per_byte, 0.0) / 2)  # never more than the intercept allows
        latency_ns = max(intercept - 2 * o + gap_per_byte, 0.0)
        regimes.append(Regime(min_size_bytes=lo, max_size_bytes=hi, latency_ns=latency_ns, overhead_ns=o,
                              gap_ns=o, gap_per_byte_ns=gap_per_byte, rms_rel_error=rms))
    return LogGPFit(regimes=tuple(regimes), identified=identified)
