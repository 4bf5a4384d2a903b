"""LogGP fitting from OSU tables: recovery of known parameters and clear errors."""
import os

import pytest

import cxlsim
from cxlsim.emulator.osu import OSUTable, read_osu
from cxlsim.errors import InputError
from cxlsim.loggp import LogGPFit, Regime, fit_latency_lines, fit_loggp

SIZES = [0] + [2**i for i in range(23)]
EAGER = Regime(min_size_bytes=0, max_size_bytes=8192, latency_ns=900.0, overhead_ns=300.0, gap_ns=300.0,
               gap_per_byte_ns=0.08, rms_rel_error=0.0)
RNDV = Regime(min_size_bytes=16384, max_size_bytes=2**22, latency_ns=4000.0, overhead_ns=300.0, gap_ns=300.0,
              gap_per_byte_ns=0.04, rms_rel_error=0.0)


def synthetic_tables():
    truth = LogGPFit(regimes=(EAGER, RNDV), identified="truth")
    latency = OSUTable(title="OSU MPI Latency Test", columns=("Size", "Latency (us)"),
                       rows=tuple((k, truth.regime_for(k).one_way_ns(k) / 1e3) for k in SIZES))
    # osu_bw's smallest message: rate 1 / max(g, o) = 1 / 300 ns -> 1 byte / 300 ns = 3.333 MB/s
    bw = OSUTable(title="OSU MPI Bandwidth Test", columns=("Size", "Bandwidth (MB/s)"),
                  rows=((1, 1 / 300e-9 / 1e6), (2**20, 25000.0)))
    return latency, bw


def test_fit_recovers_known_parameters_within_2_percent():
    latency, bw = synthetic_tables()
    fit = fit_loggp(latency, bw)
    assert len(fit.regimes) == 2
    assert fit.regimes[0].max_size_bytes == 8192 and fit.regimes[1].min_size_bytes == 16384
    for got, want in zip(fit.regimes, (EAGER, RNDV)):
        for name in ("latency_ns", "overhead_ns", "gap_ns", "gap_per_byte_ns"):
            assert getattr(got, name) == pytest.approx(getattr(want, name), rel=0.02), name
        assert got.rms_rel_error < 1e-3  # only the size-0 point is off the line (k - 1 < 0)


def test_without_bandwidth_o_is_not_identified():
    latency, _ = synthetic_tables()
    fit = fit_loggp(latency)
    assert "no osu_bw" in fit.identified
    assert all(r.overhead_ns == 0 for r in fit.regimes)
    assert fit.regimes[0].latency_ns == pytest.approx(900 + 600, rel=0.02)  # L takes L + 2o


def test_single_regime_when_no_break():
    rows = tuple((k, (1000 + 0.05 * k) / 1e3) for k in SIZES)
    fit = fit_loggp(OSUTable(title="OSU MPI Latency Test", columns=("Size", "Latency (us)"), rows=rows))
    assert len(fit.regimes) == 1 and fit.regimes[0].gap_per_byte_ns == pytest.approx(0.05, rel=0.02)


def test_round_trip_and_bad_inputs():
    latency, bw = synthetic_tables()
    fit = fit_loggp(latency, bw)
    assert LogGPFit.from_dict(fit.to_dict()) == fit
    with pytest.raises(InputError, match="expected keys"):
        LogGPFit.from_dict({"regimes": []})
    with pytest.raises(InputError, match="expected an osu_latency table"):
        fit_loggp(bw)
    with pytest.raises(InputError, match="expected an osu_bw table"):
        fit_loggp(latency, latency)
    with pytest.raises(InputError, match="need 3"):
        fit_loggp(OSUTable(title="OSU Latency", columns=("Size", "Latency (us)"), rows=((1, 1.0),)))


def test_shipped_examples_fit():
    data = os.path.join(os.path.dirname(cxlsim.__file__), "data", "osu")
    [latency] = read_osu(os.path.join(data, "osu_latency_np2_mpi4py_mpich.txt"))
    [bw] = read_osu(os.path.join(data, "osu_bw_np2_mpi4py_mpich.txt"))
    fit = fit_loggp(latency, bw)
    assert 1 <= len(fit.regimes) <= 2
    assert all(r.gap_per_byte_ns > 0 and r.rms_rel_error < 0.3 for r in fit.regimes)


def test_rows_above_a_known_switch_split_where_the_line_bends():
    # eager line to 4 KiB; above the 8 KiB switch 0.2 ns/B to 64 KiB, then 0.1 ns/B (a cache level)
    def one_way_ns(k):
        if k < 8192:
            return 1000 + 0.1 * k
        return 3000 + 0.2 * k if k <= 65536 else 5000 + 0.1 * 65536 + 0.1 * k
    sizes = [0] + [2**i for i in range(21)]
    latency = OSUTable(title="OSU MPI Latency Test", columns=("Size", "Latency (us)"),
                       rows=tuple((k, one_way_ns(k) / 1e3) for k in sizes))
    fit = fit_loggp(latency, split_at=8192)
    assert [(r.min_size_bytes, r.max_size_bytes) for r in fit.regimes] == [(0, 4096), (8192, 65536), (131072, 2**20)]
    assert [r.gap_per_byte_ns for r in fit.regimes] == pytest.approx([0.1, 0.2, 0.1], rel=1e-6)
    assert all(fit.regime_for(k).one_way_ns(k) == pytest.approx(one_way_ns(k), rel=1e-3) for k in sizes if k >= 8192)
    # without a switch the split is one, found from the rows
    assert len(fit_loggp(latency).regimes) <= 2


def test_a_bend_that_needs_a_negative_intercept_is_not_a_regime():
    # a loaded set's rewritten-buffer latency (us): 512 KiB slowed 8x by other jobs; the best split of the
    # rows above 8 KiB would put 256 KiB..1 MiB on a line of intercept -290 us, which L, o >= 0 cannot give
    loaded = [(8192, 6.11), (16384, 8.17), (32768, 12.08), (65536, 18.6), (131072, 34.56), (262144, 116.72),
              (524288, 920.3), (1048576, 1152.33)]
    latency = OSUTable(title="OSU MPI Latency Test", columns=("Size", "Latency (us)"),
                       rows=((0, 1.0), (1, 1.0), (64, 1.1), (1024, 1.2), (4096, 1.5)) + tuple(loaded))
    lines = fit_latency_lines(latency, split_at=8192)
    assert len(lines) >= 2
    for lo, hi, intercept, slope, _ in lines:
        assert intercept + slope >= 0, (lo, hi)  # L + 2o >= 0: no line the fit would have to clip
