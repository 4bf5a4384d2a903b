"""--from-osu exchange terms (issue 18 item 2): contention from osu_bibw, the protocol switch and its
FIN, the rewritten-buffer latency; hand-computed values on synthetic tables, and the refusals."""
import math

import pytest

from cxlsim.calibrate import network_model as nm
from cxlsim.calibrate.osu_fit import from_osu, report_from_osu, table_kind
from cxlsim.emulator.osu import OSUTable, parse_osu
from cxlsim.errors import InputError
from cxlsim.loggp import LogGPFit, Regime, fit_loggp

SIZES = [0] + [2**i for i in range(18)]  # 0 B..128 KiB
EAGER = Regime(min_size_bytes=0, max_size_bytes=4096, latency_ns=800.0, overhead_ns=200.0, gap_ns=200.0,
               gap_per_byte_ns=0.2, rms_rel_error=0.0)
RNDV = Regime(min_size_bytes=8192, max_size_bytes=131072, latency_ns=3000.0, overhead_ns=200.0, gap_ns=200.0,
              gap_per_byte_ns=0.1, rms_rel_error=0.0)
TRUTH = LogGPFit(regimes=(EAGER, RNDV), identified="truth")


def osu_text(title, column, rows):
    lines = [f"# {title}", f"# Size      {column:>18}"]
    lines += [f"{s:<10d} {v:18.6f}" for s, v in rows]
    return "\n".join(lines) + "\n"


def write_set(tmp_path, fresh=False, bibw_factor=None, allgather=True, mbw_pairs=None):
    """Synthetic OSU files: latency on TRUTH's lines, bw with o = g = 200 ns at 1 B, bibw = 2 bw / c."""
    files = []
    title = "OSU MPI Latency Test v5.3" + (", send buffer rewritten before each send" if fresh else "")
    lat = [(s, TRUTH.regime_for(s).one_way_ns(s) / 1e3) for s in SIZES]
    path = tmp_path / ("fresh.txt" if fresh else "latency.txt")
    path.write_text(osu_text(title, "Latency (us)", lat))
    files.append(str(path))
    bw = {s: s / 200.0 * 1e3 if s == 1 else 5000.0 for s in SIZES if s}  # MB/s; 1 B: 1 byte per 200 ns
    if mbw_pairs is None:
        (tmp_path / "bw.txt").write_text(osu_text("OSU MPI Bandwidth Test v5.3", "Bandwidth (MB/s)", bw.items()))
        files.append(str(tmp_path / "bw.txt"))
    else:
        text = osu_text("OSU MPI Multiple Bandwidth / Message Rate Test v5.3", "MB/s", bw.items())
        text = text.replace("\n", f"\n# [ pairs: {mbw_pairs} ] [ window size: 64 ]\n", 1)
        (tmp_path / "mbw.txt").write_text(text)
        files.append(str(tmp_path / "mbw.txt"))
    if bibw_factor is not None:
        bibw = [(s, 2 * v / bibw_factor(s)) for s, v in bw.items()]
        (tmp_path / "bibw.txt").write_text(osu_text("OSU MPI Bi-Directional Bandwidth Test v5.3",
                                                    "Bandwidth (MB/s)", bibw))
        files.append(str(tmp_path / "bibw.txt"))
    if allgather:
        ag = [(s, 10.0 + s / 1000.0) for s in SIZES if s]
        (tmp_path / "allgather.txt").write_text(osu_text("OSU MPI Allgather Latency Test v5.3", "Avg Latency(us)", ag))
        files.append(str(tmp_path / "allgather.txt"))
    return files


def test_titles_name_the_kind():
    kinds = {"OSU MPI Bi-Directional Bandwidth Test v5.3": "bibw", "OSU MPI Bandwidth Test v7.3": "bw",
             "OSU MPI Multiple Bandwidth / Message Rate Test v5.3": "mbw_mr", "OSU MPI Latency Test v5.3": "latency",
             "OSU MPI Latency Test v5.3, send buffer rewritten before each send": "fresh",
             "OSU MPI Allgather Latency Test v5.3": "allgather"}
    for title, kind in kinds.items():
        assert table_kind(OSUTable(title=title, columns=("Size", "x"), rows=((1, 1.0),))) == kind


def test_exchange_steps_follow_mpich_algorithms():
    assert nm.exchange_steps("ring", 2, 100) == [100]
    assert nm.exchange_steps("recursive_doubling", 8, 100) == [100, 200, 400]
    assert nm.exchange_steps("ring", 4, 100) == [100, 100, 100]
    assert nm.exchange_steps("bruck", 3, 100) == [100, 100]  # distances 1, 2: min(1, 2), min(2, 1)
    assert nm.exchange_steps("bruck", 6, 10) == [10, 20, 20]
    with pytest.raises(InputError, match="no step schedule for allgather algorithm 'neighbor_exchange'"):
        nm.exchange_steps("neighbor_exchange", 4, 100)


def test_exchange_extra_by_hand():
    exchange = {"contention": {"8192": 1.5, "65536": 2.0}, "protocol_switch_bytes": 8192, "fin_ns": 1000.0}
    assert nm.exchange_extra_ns(exchange, TRUTH, "recursive_doubling", 2, 4096) == 0.0  # eager: no terms
    assert nm.exchange_extra_ns(exchange, TRUTH, "recursive_doubling", 2, 8192) == pytest.approx(
        0.5 * 8192 * 0.1 + 1000.0)
    c = 1.5 + (15 - 13) / (16 - 13) * 0.5  # log2 interpolation at 32 KiB
    assert nm.exchange_extra_ns(exchange, TRUTH, "ring", 2, 32768) == pytest.approx((c - 1) * 32768 * 0.1 + 1000.0)
    assert nm.exchange_extra_ns(exchange, TRUTH, "ring", 2, 1 << 20) == pytest.approx(1.0 * (1 << 20) * 0.1 + 1000.0)
    # two steps at np 4 (8 KiB, 16 KiB), each with its own contention and FIN
    c16 = 1.5 + 1 / 3 * 0.5
    assert nm.exchange_extra_ns(exchange, TRUTH, "recursive_doubling", 4, 8192) == pytest.approx(
        0.5 * 8192 * 0.1 + (c16 - 1) * 16384 * 0.1 + 2000.0)
    # without a switch the contention applies at every size, and there is no FIN
    no_switch = {"contention": {"1": 1.2}, "fin_ns": 0.0}
    assert nm.exchange_extra_ns(no_switch, TRUTH, "ring", 2, 1024) == pytest.approx(0.2 * 1024 * 0.2)
    assert nm.exchange_extra_ns({}, TRUTH, "ring", 2, 1024) == 0.0


def test_contention_curve_is_2bw_over_bibw():
    bw = parse_osu(osu_text("OSU MPI Bandwidth Test", "Bandwidth (MB/s)", [(1, 2.0), (1024, 1000.0)]))[0]
    bibw = parse_osu(osu_text("OSU MPI Bi-Directional Bandwidth Test", "Bandwidth (MB/s)",
                              [(1024, 1600.0), (2048, 3000.0)]))[0]
    assert nm.contention_curve(bw, bibw) == {1024: pytest.approx(1.25)}
    other = parse_osu(osu_text("OSU MPI Bi-Directional Bandwidth Test", "Bandwidth (MB/s)", [(4096, 1.0)]))[0]
    with pytest.raises(InputError, match="share no message size"):
        nm.contention_curve(bw, other)


def test_from_osu_adds_the_exchange_terms(tmp_path):
    def factor(s):
        return 1.0 + 0.5 * math.log2(s) / 17  # 1 at 1 B, 1.5 at 128 KiB
    files = write_set(tmp_path, bibw_factor=factor)
    plain = from_osu([f for f in files if "bibw" not in f], memcpy_bw_bytes_per_ns=20.0, protocol_switch_bytes=8192)
    result = from_osu(files, memcpy_bw_bytes_per_ns=20.0, protocol_switch_bytes=8192, rendezvous_fin=True)
    fit = result["fit"]
    assert [r.min_size_bytes for r in fit.regimes] == [0, 8192]  # the split sits at the switch
    fin = fit.regimes[0].latency_ns + 2 * fit.regimes[0].overhead_ns
    assert fin == pytest.approx(EAGER.latency_ns + 2 * EAGER.overhead_ns, rel=0.02)
    for row, base in zip(result["rows"], plain["rows"]):
        s = row["size_bytes"]
        want = 0.0 if s < 8192 else (factor(s) - 1) * s * fit.regime_for(s).gap_per_byte_ns + fin
        assert row["exchange_ns"] == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert row["pure_ns"] == pytest.approx(base["pure_ns"], rel=1e-12)
        assert base["exchange_ns"] == 0.0  # no bibw, no FIN: no terms
        assert row["full_ns"] == pytest.approx(row["pure_ns"] + row["exchange_ns"] + row["own_copy_ns"]
                                               + result["model"]["collective_overhead_ns"])
    assert result["rows"][0]["full_ns"] == pytest.approx(result["rows"][0]["measured_ns"])  # the 1 B anchor
    text = report_from_osu(result)
    assert "exchange terms: contention c = 2 bw / bibw" in text and "per step of 8192 B or more" in text
    # a profile projects the same rows
    again = nm.predict_network(result["model"], [r["size_bytes"] for r in result["rows"]], 2)
    assert [r["full_ns"] for r in again] == pytest.approx([r["full_ns"] for r in result["rows"]], rel=1e-9)


def test_without_bibw_the_report_states_the_assumption(tmp_path):
    result = from_osu(write_set(tmp_path), memcpy_bw_bytes_per_ns=20.0)
    assert "no osu_bibw: c = 1" in result["model"]["exchange"]["contention_source"]
    assert all(r["exchange_ns"] == 0.0 for r in result["rows"])


def test_rewritten_buffer_latency_holds_the_own_copy(tmp_path):
    files = write_set(tmp_path, fresh=True)
    with pytest.raises(InputError, match="--memcpy-bandwidth: the rewritten-buffer latency table .* leave it out"):
        from_osu(files, memcpy_bw_bytes_per_ns=20.0)
    result = from_osu(files)  # no copy bandwidth measured or needed
    assert result["model"]["own_copy_in_line"] and result["model"]["files"]["latency_rewritten"]
    assert result["model"]["memcpy_bw_bytes_per_ns"] == {} and "not used" in result["model"]["memcpy_source"]
    assert all(r["own_copy_ns"] == 0.0 for r in result["rows"])
    again = nm.predict_network(result["model"], [1024, 65536], 2)
    rows = {r["size_bytes"]: r for r in result["rows"]}
    assert [r["full_ns"] for r in again] == pytest.approx([rows[s]["full_ns"] for s in (1024, 65536)], rel=1e-9)
    (tmp_path / "clean").mkdir()
    clean = from_osu(write_set(tmp_path / "clean", fresh=False), memcpy_bw_bytes_per_ns=20.0)
    assert clean["rows"][-1]["own_copy_ns"] == pytest.approx(131072 / 20.0)


def test_one_pair_mbw_mr_stands_for_osu_bw(tmp_path):
    (tmp_path / "bw").mkdir()
    one = from_osu(write_set(tmp_path, mbw_pairs=1), memcpy_bw_bytes_per_ns=20.0)
    bw = from_osu(write_set(tmp_path / "bw", mbw_pairs=None), memcpy_bw_bytes_per_ns=20.0)
    assert one["model"]["loggp"] == bw["model"]["loggp"]


def test_refusals_name_the_problem(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    files = write_set(tmp_path, bibw_factor=lambda s: 1.2)
    with pytest.raises(InputError, match="osu_bibw .* add osu_bw or osu_mbw_mr"):
        from_osu([f for f in files if not f.endswith("bw.txt") or "bibw" in f], memcpy_bw_bytes_per_ns=20.0)
    mbw = write_set(tmp_path / "a", mbw_pairs=1)
    with pytest.raises(InputError, match="osu_bw .* and osu_mbw_mr .* both give the one-way bandwidth"):
        from_osu(files + [f for f in mbw if "mbw" in f], memcpy_bw_bytes_per_ns=20.0)
    with pytest.raises(InputError, match="osu_mbw_mr with 2 pairs"):
        from_osu(write_set(tmp_path / "b", mbw_pairs=2), memcpy_bw_bytes_per_ns=20.0)
    fresh = write_set(tmp_path / "a", fresh=True)
    with pytest.raises(InputError, match="rewritten-buffer latency .* both give the fit's line"):
        from_osu(files + [f for f in fresh if "fresh" in f])
    with pytest.raises(InputError, match="--rendezvous-fin: .* give --protocol-switch"):
        from_osu(files, memcpy_bw_bytes_per_ns=20.0, rendezvous_fin=True)
    for bad in (0, -5, 1.5, True):
        with pytest.raises(InputError, match="--protocol-switch: expected a message size"):
            from_osu(files, memcpy_bw_bytes_per_ns=20.0, protocol_switch_bytes=bad)
    with pytest.raises(InputError, match="protocol threshold 65536 B: .* needs 3\\+ rows on each side"):
        from_osu(files, memcpy_bw_bytes_per_ns=20.0, protocol_switch_bytes=65536)
    with pytest.raises(InputError, match="per-size curve needs a value > 0 at every size"):
        from_osu(files, memcpy_bw_bytes_per_ns={1: 20.0})


def test_loggp_split_at_a_given_switch():
    latency = OSUTable(title="OSU MPI Latency Test", columns=("Size", "Latency (us)"),
                       rows=tuple((s, TRUTH.regime_for(s).one_way_ns(s) / 1e3) for s in SIZES))
    fit = fit_loggp(latency, split_at=8192)
    assert [(r.min_size_bytes, r.max_size_bytes) for r in fit.regimes] == [(0, 4096), (8192, 131072)]
    assert fit.regimes[1].gap_per_byte_ns == pytest.approx(0.1, rel=1e-6)
    moved = fit_loggp(latency, split_at=2048)  # a wrong switch: the eager line then bends into the second regime
    assert moved.regimes[1].min_size_bytes == 2048 and moved.regimes[1].rms_rel_error > 0.01
