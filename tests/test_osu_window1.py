"""--from-osu with a window-1 osu_bibw (issue 18 item 2): the exchange step measured as its excess over a
one-way message, by hand on synthetic tables; the profile projects the same; the refusals."""
import pytest

from cxlsim.calibrate import network_model as nm
from cxlsim.calibrate.osu_fit import from_osu, report_from_osu, table_kind, window1_excess
from cxlsim.emulator.osu import OSUTable, parse_osu
from cxlsim.errors import InputError
from cxlsim.loggp import LogGPFit, Regime

SIZES = [0] + [2**i for i in range(18)]  # 0 B..128 KiB
EAGER = Regime(min_size_bytes=0, max_size_bytes=4096, latency_ns=800.0, overhead_ns=200.0, gap_ns=200.0,
               gap_per_byte_ns=0.2, rms_rel_error=0.0)
RNDV = Regime(min_size_bytes=8192, max_size_bytes=131072, latency_ns=3000.0, overhead_ns=200.0, gap_ns=200.0,
              gap_per_byte_ns=0.1, rms_rel_error=0.0)
TRUTH = LogGPFit(regimes=(EAGER, RNDV), identified="truth")
FRESH = "send buffer rewritten before each send"


def excess_ns(size):
    """The synthetic exchange step's excess over a one-way message: 500 ns + 0.05 ns/B."""
    return 500.0 + 0.05 * size


def osu_text(title, column, rows):
    return "\n".join([f"# {title}", f"# Size      {column:>18}"] + [f"{s:<10d} {v:18.6f}" for s, v in rows]) + "\n"


def write(tmp_path, name, title, column, rows):
    path = tmp_path / f"{name}.txt"
    path.write_text(osu_text(title, column, rows))
    return str(path)


def one_way_us(size, fresh):
    """The latency tables: TRUTH's line; the rewritten buffer adds a copy at 10 bytes/ns."""
    return (TRUTH.regime_for(size).one_way_ns(size) + (size / 10.0 if fresh else 0.0)) / 1e3


def window1_bibw(size, fresh):
    """MB/s of a window-1 bibw whose iteration takes the one-way time plus excess_ns."""
    return 2 * size / ((one_way_us(size, fresh) * 1e3 + excess_ns(size)) * 1e-9) / 1e6


def synthetic(tmp_path, window1="unchanged"):
    files = {
        "latency": write(tmp_path, "latency", "OSU MPI Latency Test v5.3", "Latency (us)",
                         [(s, one_way_us(s, False)) for s in SIZES]),
        "fresh": write(tmp_path, "fresh", f"OSU MPI Latency Test v5.3, {FRESH}", "Latency (us)",
                       [(s, one_way_us(s, True)) for s in SIZES]),
        "bw": write(tmp_path, "bw", "OSU MPI Bandwidth Test v5.3", "Bandwidth (MB/s)",
                    [(s, s / 200.0 * 1e3 if s == 1 else 5000.0) for s in SIZES if s]),
        "allgather": write(tmp_path, "allgather", "OSU MPI Allgather Latency Test v5.3", "Avg Latency(us)",
                           [(s, 10.0 + s / 1000.0) for s in SIZES if s]),
        "bibw1": write(tmp_path, "bibw1", "OSU MPI Bi-Directional Bandwidth Test v5.3, window 1", "Bandwidth (MB/s)",
                       [(s, window1_bibw(s, False)) for s in SIZES if s]),
        "freshbibw1": write(tmp_path, "freshbibw1", f"OSU MPI Bi-Directional Bandwidth Test v5.3, window 1, {FRESH}",
                            "Bandwidth (MB/s)", [(s, window1_bibw(s, True)) for s in SIZES if s]),
        "bibw": write(tmp_path, "bibw", "OSU MPI Bi-Directional Bandwidth Test v5.3", "Bandwidth (MB/s)",
                      [(s, 4000.0) for s in SIZES if s]),
        "bw1": write(tmp_path, "bw1", "OSU MPI Bandwidth Test v7.3 (window size: 1)", "Bandwidth (MB/s)",
                     [(s, 100.0) for s in SIZES if s]),
    }
    return files


def test_window_1_titles():
    kinds = {"OSU MPI Bi-Directional Bandwidth Test v5.3, window 1": "bibw_window1",
             f"OSU MPI Bi-Directional Bandwidth Test v5.3, window 1, {FRESH}": "fresh_bibw_window1",
             "OSU MPI Bandwidth Test v7.3 (window size: 1)": "bw_window1",
             "OSU MPI Bi-Directional Bandwidth Test v5.3, window 16": "bibw",
             "OSU MPI Bandwidth Test v5.3, window 64": "bw"}
    for title, kind in kinds.items():
        assert table_kind(OSUTable(title=title, columns=("Size", "x"), rows=((1, 1.0),))) == kind


def test_excess_is_the_exchange_minus_the_one_way_time():
    bibw = parse_osu(osu_text("OSU MPI Bi-Directional Bandwidth Test, window 1", "Bandwidth (MB/s)",
                              [(1000, 1000.0), (4000, 2000.0)]))[0]
    latency = parse_osu(osu_text("OSU MPI Latency Test", "Latency (us)", [(0, 0.5), (1000, 1.5), (4000, 3.0)]))[0]
    # 2 x 1000 B at 1000 MB/s: 2 us per iteration, 1.5 us one way; 2 x 4000 B at 2000 MB/s: 4 us, 3 us
    assert window1_excess(bibw, latency) == {1000: pytest.approx(500.0), 4000: pytest.approx(1000.0)}
    other = parse_osu(osu_text("OSU MPI Latency Test", "Latency (us)", [(8, 1.0)]))[0]
    with pytest.raises(InputError, match="share no message size"):
        window1_excess(bibw, other)


@pytest.mark.parametrize("cache_state", ["unchanged", "rewritten"])
def test_exchange_term_is_the_measured_excess(tmp_path, cache_state):
    files = synthetic(tmp_path)
    bibw = files["bibw1"] if cache_state == "unchanged" else files["freshbibw1"]
    given = [files["fresh"], files["bw"], bibw, files["allgather"]]
    if cache_state == "unchanged":
        given.append(files["latency"])  # the one-way reference of the unchanged exchange
    result = from_osu(given, protocol_switch_bytes=8192)
    exchange = result["model"]["exchange"]
    assert exchange["fin_ns"] == 0.0 and "inside the window-1 exchange" in exchange["fin_source"]
    assert result["model"]["files"]["bibw_window1"] == bibw
    assert result["model"]["files"]["latency"] == files["fresh"]  # the fit's line: the rewritten buffer
    for row in result["rows"]:
        s = row["size_bytes"]
        want = excess_ns(s) if s >= 8192 else 0.0  # below the switch an eager exchange runs in one-way time
        assert row["exchange_ns"] == pytest.approx(want, rel=1e-6, abs=1e-6)
        assert row["full_ns"] == pytest.approx(row["pure_ns"] + row["exchange_ns"]
                                               + result["model"]["collective_overhead_ns"])
    assert "measured exchange step: window-1 osu_bibw" in report_from_osu(result)
    again = nm.predict_network(result["model"], [r["size_bytes"] for r in result["rows"]], 2)
    assert [r["exchange_ns"] for r in again] == pytest.approx([r["exchange_ns"] for r in result["rows"]], rel=1e-9)


def test_two_steps_at_np_4_each_take_their_excess(tmp_path):
    files = synthetic(tmp_path)
    result = from_osu([files["fresh"], files["bw"], files["latency"], files["bibw1"]], nodes=4,
                      protocol_switch_bytes=8192, sizes=[8192, 32768])
    rows = {r["size_bytes"]: r["exchange_ns"] for r in result["rows"]}
    # recursive doubling at np 4: steps of m and 2m bytes, each with the excess measured at its size
    assert rows[8192] == pytest.approx(excess_ns(8192) + excess_ns(16384), rel=1e-6)
    assert rows[32768] == pytest.approx(excess_ns(32768) + excess_ns(65536), rel=1e-6)


def test_window1_refusals(tmp_path):
    f = synthetic(tmp_path)
    with pytest.raises(InputError, match="window-1 osu_bibw .* compared with osu_latency"):
        from_osu([f["fresh"], f["bw"], f["bibw1"]], protocol_switch_bytes=8192)
    with pytest.raises(InputError, match="compared with a rewritten-buffer latency table"):
        from_osu([f["latency"], f["bw"], f["freshbibw1"]], protocol_switch_bytes=8192)
    with pytest.raises(InputError, match="each give the exchange term"):
        from_osu([f["fresh"], f["latency"], f["bw"], f["bibw1"], f["bibw"]], protocol_switch_bytes=8192)
    with pytest.raises(InputError, match="is a window-1 osu_bw: its smallest message gives a latency"):
        from_osu([f["latency"], f["bw1"]])
    with pytest.raises(InputError, match="--rendezvous-fin: a window-1 osu_bibw measures the exchange step"):
        from_osu([f["fresh"], f["latency"], f["bw"], f["bibw1"]], protocol_switch_bytes=8192, rendezvous_fin=True)
    with pytest.raises(InputError, match="both give the fit's line; give one \\(both only with a window-1"):
        from_osu([f["fresh"], f["latency"], f["bw"]])


def test_steps_beyond_the_cache_take_the_stretch_of_the_largest_size_that_fits(tmp_path):
    """cache_bytes 64 KiB: steps up to 32 KiB (2 x 32 KiB fit) keep their measured excess; 64 and 128 KiB take
    32 KiB's stretch c = 1 + excess(32 KiB) / (32 KiB G), so their excess is (c - 1) k G, linear in k."""
    f = synthetic(tmp_path)
    given = [f["fresh"], f["bw"], f["latency"], f["bibw1"], f["allgather"]]
    plain = {r["size_bytes"]: r for r in from_osu(given, protocol_switch_bytes=8192)["rows"]}
    result = from_osu(given, protocol_switch_bytes=8192, cache_bytes=65536)
    g = result["fit"].regime_for(32768).gap_per_byte_ns
    stretch = 1.0 + excess_ns(32768) / (32768 * g)
    for row in result["rows"]:
        s = row["size_bytes"]
        if s <= 32768:
            assert row["exchange_ns"] == pytest.approx(plain[s]["exchange_ns"], rel=1e-12)
        else:
            want = (stretch - 1.0) * s * result["fit"].regime_for(s).gap_per_byte_ns
            assert row["exchange_ns"] == pytest.approx(want, rel=1e-9)
            assert row["exchange_ns"] != pytest.approx(excess_ns(s), rel=1e-3)  # not the measured excess
    assert "exceed the 65536-byte cache per core take c of 32768 B" in result["model"]["exchange"]["contention_source"]
    again = nm.predict_network(result["model"], sorted(plain), 2)
    assert [r["exchange_ns"] for r in again] == pytest.approx([r["exchange_ns"] for r in result["rows"]], rel=1e-9)


def test_cache_bytes_refusals(tmp_path):
    f = synthetic(tmp_path)
    with pytest.raises(InputError, match="--cache-bytes: it bounds the sizes at which a window-1 osu_bibw of unchanged"):
        from_osu([f["fresh"], f["bw"], f["freshbibw1"]], protocol_switch_bytes=8192, cache_bytes=1 << 20)
    with pytest.raises(InputError, match="--cache-bytes: it bounds"):
        from_osu([f["fresh"], f["bw"]], protocol_switch_bytes=8192, cache_bytes=1 << 20)
    with pytest.raises(InputError, match="--cache-bytes 8192: no window-1 osu_bibw size at or above the protocol switch"):
        from_osu([f["fresh"], f["bw"], f["latency"], f["bibw1"]], protocol_switch_bytes=8192, cache_bytes=8192)
    for bad in (0, True, 1.5, "1MiB"):
        with pytest.raises(InputError, match="--cache-bytes: expected a size >= 1 byte"):
            from_osu([f["fresh"], f["bw"], f["latency"], f["bibw1"]], protocol_switch_bytes=8192, cache_bytes=bad)


def test_calibrate_cli_passes_cache_bytes_and_refuses_it_elsewhere(tmp_path):
    """`cxlsim calibrate --from-osu ... --cache-bytes 64KiB` gives the profile from_osu(cache_bytes=65536) gives;
    a bad value and a local calibration's --cache-bytes exit 2 naming the flag."""
    import json
    import subprocess
    import sys

    f = synthetic(tmp_path)
    given = [f["fresh"], f["bw"], f["latency"], f["bibw1"], f["allgather"]]
    base = [sys.executable, "-m", "cxlsim", "calibrate", "--from-osu", *given, "--protocol-switch", "8KiB", "--quiet"]
    done = subprocess.run(base + ["--cache-bytes", "64KiB", "--output", str(tmp_path / "w")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads((tmp_path / "w" / "profile.json").read_text())
    want = from_osu(given, protocol_switch_bytes=8192, cache_bytes=65536)
    assert got["model"]["exchange"]["contention_source"] == want["model"]["exchange"]["contention_source"]
    assert "65536-byte cache" in want["model"]["exchange"]["contention_source"]
    for argv in (base + ["--cache-bytes", "lots", "--output", str(tmp_path / "x")],
                 [sys.executable, "-m", "cxlsim", "calibrate", "--cache-bytes", "1MiB", "--no-mpi",
                  "--output", str(tmp_path / "y")]):
        bad = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and "--cache-bytes" in bad.stderr and "Traceback" not in bad.stderr
