"""`--fabric NET.json+LOCAL.json`: a library trace's messages on a network profile and the collectives the
library ran on its pool priced by a local-host profile (cxlsim.replay.pool_profile), against hand sums."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os

import pytest

from cxlsim.calibrate.collectives import COLLECTIVES, predict_collective
from cxlsim.calibrate.des import predict_local
from cxlsim.calibrate.local_model import LocalModel
from cxlsim.calibrate.profile import load_profile
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.replay import cli, engine, fabrics, simgrid
from cxlsim.replay.pool_profile import ALLREDUCE_LARGE_BYTES, read_library_stats

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL = os.path.join(HERE, "data", "local_host_profile_np2.json")
LIBRARY = os.path.join(HERE, "data", "traces", "library")
L_NS, O_NS, G_NS_PER_B = 1000.0, 200.0, 0.1  # the network profile's one regime


def kernel_model(coherence=Coherence.HW) -> LocalModel:
    """The test profile's model without its per-call overheads (the Python bench's), as the replay prices."""
    m = LocalModel.from_dict(load_profile(LOCAL)["model"])
    return dataclasses.replace(m, overhead_ns=dict(m.overhead_ns, copy=0.0),
                               collective_overhead_ns={c: 0.0 for c in COLLECTIVES})


# collectives separated by barriers, compute gaps of different lengths per rank (ns: host speed 1e9)
CALLS = [("allreduce 8 0", "allreduce", 8), ("allgather 4096 4096", "allgather", 4096),
         ("bcast 1024 0", "broadcast", 1024), ("alltoall 64 64", "alltoall", 64),
         ("reducescatter 64 64 0", "reduce_scatter", 128), ("allreduce 131072 0", "allreduce", 1 << 17)]


def read_trace(write_trace, tmp_path, per_rank) -> simgrid.Trace:
    return simgrid.read(write_trace(tmp_path / "trace", dict(enumerate(per_rank))), 1e9)


def collectives_trace(write_trace, tmp_path):
    per_rank = [[], []]
    for k, (line, _, _) in enumerate(CALLS):
        for r in range(2):
            per_rank[r] += [f"compute {1000 * (k + 1) * (r + 1)}", line, f"compute {300 * (2 - r)}", "barrier"]
    return read_trace(write_trace, tmp_path, per_rank)


def expected_end_ns(model, coherence) -> float:
    """The hand sum: each call ends at the last rank's entry + the profile's time for it."""
    def price(collective, size):
        if collective == "allgather":
            return predict_local(model, coherence, "copy", size)
        return predict_collective(model, coherence, collective, size, ALLREDUCE_LARGE_BYTES)

    barrier, t = price("barrier", 0), 0.0
    for k, (_, collective, size) in enumerate(CALLS):
        t += max(1000 * (k + 1) * (r + 1) for r in range(2)) + price(collective, size)
        t += max(300 * (2 - r) for r in range(2)) + barrier
    return t


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_collectives_between_barriers_cost_the_hand_sum_of_the_profiles_prices(
        tmp_path, write_trace, coherence, network_profile, library_stats_text):
    trace = collectives_trace(write_trace, tmp_path)
    stats = tmp_path / "stats.txt"
    n = len(CALLS)
    stats.write_text(library_stats_text({"MPI_Allreduce": (4, 4, 0), "MPI_Allgather": (2, 2, 0), "MPI_Bcast": (2, 2, 0),
                                 "MPI_Alltoall": (2, 2, 0), "MPI_Reduce_scatter_block": (2, 2, 0),
                                 "MPI_Barrier": (2 * n, 2 * n, 0)}, coherence=coherence))
    fab = fabrics.resolve(f"{network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)}+{LOCAL}", 2, trace=trace,
                          library_stats=read_library_stats(str(stats)))
    assert fab.label == "net+local_host_profile_np2"
    assert f"local-host profile local_host_profile_np2.json ({coherence})" in fab.describe
    timeline = engine.replay(trace, fab.make(), priced=fab.priced)
    expected = expected_end_ns(kernel_model(), Coherence.parse(coherence, "coherence"))
    assert timeline.finish_ns == pytest.approx([expected, expected], rel=1e-12)
    assert set(timeline.algorithms) == {"allreduce", "allgather", "bcast", "alltoall", "reducescatter", "barrier"}
    assert all(names == ["local-host profile"] for names in timeline.algorithms.values())
    assert any("root also waits" in note for note in timeline.notes)


def test_messages_take_the_network_profile_and_a_kind_with_no_pool_call_its_network_algorithm(
        tmp_path, write_trace, network_profile, library_stats_text):
    trace = read_trace(write_trace, tmp_path, [["send 1 0 1000", "allreduce 8 0", "barrier"],
                                   ["recv 0 0 1000", "allreduce 8 0", "barrier"]])
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text({"MPI_Allreduce": (2, 0, 2), "MPI_Barrier": (2, 2, 0)}))
    fab = fabrics.resolve(f"{network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)}+{LOCAL}", 2, trace=trace,
                          library_stats=read_library_stats(str(stats)))
    assert "barrier (those every call of which ran on the pool" in fab.describe
    timeline = engine.replay(trace, fab.make(), priced=fab.priced)
    message = 2 * O_NS + 1000 * G_NS_PER_B + L_NS  # o + k*G + L + o, the fit's line
    recv_end = timeline.segments[1][0][1]
    assert recv_end == pytest.approx(message, rel=1e-9)
    assert timeline.algorithms["allreduce"] != ["local-host profile"]  # fell back to MPI: the network's
    assert timeline.algorithms["barrier"] == ["local-host profile"]
    allreduce_end = max(timeline.segments[r][1][1] for r in range(2))
    barrier = predict_collective(kernel_model(), Coherence.HW, "barrier", 0, ALLREDUCE_LARGE_BYTES)
    assert timeline.finish_ns == pytest.approx([allreduce_end + barrier] * 2, rel=1e-9)


def test_without_stats_every_pool_kind_is_priced_and_said_to_be_assumed(tmp_path, write_trace, network_profile):
    trace = collectives_trace(write_trace, tmp_path)
    fab = fabrics.resolve(f"{network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)}+{LOCAL}", 2, trace=trace)
    assert "assumed: every kind the library runs on its pool (no --library-stats)" in fab.describe
    timeline = engine.replay(trace, fab.make(), priced=fab.priced)
    assert timeline.total_ns == pytest.approx(expected_end_ns(kernel_model(), Coherence.HW), rel=1e-12)


@pytest.mark.parametrize("rows, message", [
    ({"MPI_Allreduce": (2, 1, 1), "MPI_Barrier": (2, 2, 0)},
     r"allreduce: 1 of 2 calls ran on the pool and 1 fell back to MPI; the trace does not say which"),
    ({"MPI_Allreduce": (4, 4, 0), "MPI_Barrier": (2, 2, 0)},
     r"allreduce: the stats count 4 calls \(summed over ranks\), the trace 2; they are not of the same run"),
])
def test_stats_that_do_not_say_which_calls_ran_on_the_pool_are_refused(
        tmp_path, write_trace, rows, message, network_profile, library_stats_text):
    trace = read_trace(write_trace, tmp_path, [["allreduce 8 0", "barrier"], ["allreduce 8 0", "barrier"]])
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text(rows))
    with pytest.raises(InputError, match=message):
        fabrics.resolve(f"{network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)}+{LOCAL}", 2, trace=trace,
                        library_stats=read_library_stats(str(stats)))


def test_bad_joined_specs_and_stats_are_refused(tmp_path, network_profile, library_stats_text):
    net = network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)
    with pytest.raises(InputError, match=r"the part before '\+' carries the messages: expected a network profile"):
        fabrics.resolve(f"{LOCAL}+{LOCAL}", 2)
    with pytest.raises(InputError, match=r"the part after '\+' prices the library's pool collectives: expected a "
                                         r"local-host profile"):
        fabrics.resolve(f"{net}+{net}", 2)
    with pytest.raises(InputError, match=r"--ranks-per-node: .* models one host's ranks"):
        fabrics.resolve(f"{net}+{LOCAL}", 2, ranks_per_node=2)
    bad = tmp_path / "bad.txt"
    bad.write_text("no table here\n")
    with pytest.raises(InputError, match=r"--library-stats .*bad\.txt: no 'cxlsim-mpi stats"):
        read_library_stats(str(bad))
    bad.write_text(library_stats_text({}) + "MPI_Scan 1 0 0 0 0 1\n")
    with pytest.raises(InputError, match=r"bad\.txt:9: MPI_Scan: not a collective of the library's stats"):
        read_library_stats(str(bad))
    with pytest.raises(InputError, match=r"--library-stats: the stats are of 4 ranks, the trace has 2"):
        fabrics.resolve(f"{net}+{LOCAL}", 2, trace=simgrid.read(LIBRARY),
                        library_stats={"ranks": 4, "coherence": Coherence.HW, "rows": {}})


def run(argv):
    parser = argparse.ArgumentParser(prog="cxlsim")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", *argv])
    return args.func(args)


def test_the_command_replays_the_library_trace_on_the_joined_profiles(
        tmp_path, capsys, network_profile, library_stats_text):
    net = network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)
    trace = simgrid.read(LIBRARY)
    counts = {k: sum(c.kind == k for calls in trace.ranks for c in calls) for k in ("allreduce", "barrier")}
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text({"MPI_Allreduce": (counts["allreduce"],) * 2 + (0,),
                                 "MPI_Barrier": (counts["barrier"],) * 2 + (0,)}))
    out = tmp_path / "run"
    assert run([LIBRARY, "--fabric", net, "--fabric", f"{net}+{LOCAL}", "--library-stats", str(stats),
                "--output", str(out), "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "# net+local_host_profile_np2: " in text and "allreduce, barrier (those every call" in text
    totals = {t["fabric"]: t["total_s"] for t in json.loads((out / "totals.json").read_text())}
    assert set(totals) == {"net", "net+local_host_profile_np2"}
    with pytest.raises(InputError, match=r"--library-stats: says which collectives ran on the library's pool, "
                                         r"for a --fabric NET.json\+LOCAL.json; no --fabric is one"):
        run([LIBRARY, "--fabric", net, "--library-stats", str(stats), "--output", str(out), "--no-plots"])


def _beside_python(name: str) -> str | None:
    import shutil
    import sys

    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


@pytest.mark.mpi
@pytest.mark.skipif(_beside_python("mpiexec") is None or _beside_python("mpicc") is None,
                    reason="no mpiexec/mpicc (install cxlsim[mpi])")
def test_a_real_library_run_s_stats_say_its_allreduce_and_barriers_ran_on_the_pool(tmp_path, network_profile):
    """The halo program under the library (stats and trace, 3 iterations): its stats parse, agree with its
    trace, and name the kinds the joined replay prices; the replay then runs."""
    import subprocess
    import sys

    exe = tmp_path / "halo_timed"
    subprocess.run([_beside_python("mpicc"), "-O0", os.path.join(HERE, "data", "traces", "src", "halo_timed.c"),
                    "-o", str(exe)], check=True, timeout=120)
    directory = tmp_path / "trace"
    done = subprocess.run([sys.executable, "-m", "cxlsim", "mpi", "run", "--stats", "--trace", str(directory), "--",
                           _beside_python("mpiexec"), "-n", "2", str(exe), "3", "1000"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    stats = tmp_path / "stats.txt"
    stats.write_text(done.stderr)
    got = read_library_stats(str(stats))
    assert got["ranks"] == 2 and got["coherence"] == Coherence.HW
    assert got["rows"]["allreduce"]["calls"] == got["rows"]["allreduce"]["pool"] == 2 * 3
    trace = simgrid.read(str(directory))
    fab = fabrics.resolve(f"{network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)}+{LOCAL}", 2, trace=trace, library_stats=got)
    assert fab.priced.kinds == {"allreduce", "barrier"}
    timeline = engine.replay(trace, fab.make(), priced=fab.priced)
    assert timeline.algorithms["allreduce"] == timeline.algorithms["barrier"] == ["local-host profile"]


@pytest.mark.parametrize("large", [1 << 20, None])
def test_the_runs_allreduce_threshold_from_the_stats_prices_its_allreduces(
        tmp_path, write_trace, large, network_profile, library_stats_text):
    """A run with CXLSIM_MPI_ALLREDUCE_LARGE=1MiB ran its 128 KiB allreduce with the small algorithm: the
    stats' header says so, and the price follows; a header without it takes the default and says so."""
    trace = read_trace(write_trace, tmp_path, [["allreduce 131072 0"], ["allreduce 131072 0"]])
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text({"MPI_Allreduce": (2, 2, 0)}, large=large))
    got = read_library_stats(str(stats))
    assert got["allreduce_large_bytes"] == large
    fab = fabrics.resolve(f"{network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)}+{LOCAL}", 2, trace=trace, library_stats=got)
    timeline = engine.replay(trace, fab.make(), priced=fab.priced)
    threshold = ALLREDUCE_LARGE_BYTES if large is None else large
    price = predict_collective(kernel_model(), Coherence.HW, "allreduce", 1 << 17, threshold)
    assert timeline.finish_ns == pytest.approx([price, price], rel=1e-12)
    other = predict_collective(kernel_model(), Coherence.HW, "allreduce", 1 << 17,
                               ALLREDUCE_LARGE_BYTES if large else 1 << 20)
    assert other != pytest.approx(price, rel=1e-6)  # the two algorithms price 128 KiB differently
    assert (f"allreduce large from {threshold} B "
            + ("(the run's)" if large else "(the library's default, assumed: not in the stats)")) in fab.describe


def test_the_stats_file_beside_a_library_trace_is_used_and_named_when_no_option_is_given(
        tmp_path, capsys, network_profile, library_stats_text):
    """`CXLSIM_MPI_TRACE=DIR` writes DIR/cxlsim_mpi_stats.txt: the reader skips it, and without --library-stats
    the joined fabric prices by it (here: the allreduces fell back to MPI, so only barrier is the profile's) and
    its line names the file; a network-only replay of the same directory ignores it."""
    import shutil

    directory = tmp_path / "trace"
    shutil.copytree(LIBRARY, directory)
    trace = simgrid.read(LIBRARY)
    counts = {k: sum(c.kind == k for calls in trace.ranks for c in calls) for k in ("allreduce", "barrier")}
    beside = directory / simgrid.LIBRARY_STATS_NAME
    beside.write_text(library_stats_text({"MPI_Allreduce": (counts["allreduce"], 0, counts["allreduce"]),
                                  "MPI_Barrier": (counts["barrier"],) * 2 + (0,)}))
    copied = simgrid.read(str(directory))
    assert [[c._replace(file="") for c in calls] for calls in copied.ranks] == \
        [[c._replace(file="") for c in calls] for calls in trace.ranks]
    net = network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)
    out = tmp_path / "run"
    assert run([str(directory), "--fabric", net, "--fabric", f"{net}+{LOCAL}", "--output", str(out),
                "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert (f"barrier (those every call of which ran on the pool, by the library's stats: found beside the trace "
            f"(no --library-stats): {beside})") in text
    import yaml

    assert yaml.safe_load((out / "config.yaml").read_text())["library_stats"].endswith(str(beside))
    assert run([str(directory), "--fabric", net, "--output", str(tmp_path / "net"), "--no-plots"]) == 0
    assert "library's stats" not in capsys.readouterr().out


def test_the_inline_limit_is_the_librarys_slow_placement_limit():
    """INLINE_MAX_BYTES mirrors pools.c's INLINE_SLOW_BYTES (the larger of its two limits), read from the sources."""
    import re
    from pathlib import Path
    from cxlsim.replay.pool_profile import INLINE_MAX_BYTES
    root = Path(__file__).resolve().parents[1] / "cxlsim"
    pools = (root / "mpi" / "pools.c").read_text()
    header = (root / "emulator" / "cxl_coll_reduce.h").read_text()
    payload = int(re.search(r"#define CXL_COLL_LINE_PAYLOAD (\d+)", header).group(1))
    lines = {name: int(n) for name, n in
             re.findall(r"#define INLINE_(FAST|SLOW)_BYTES \((\d+) \* CXL_COLL_LINE_PAYLOAD\)", pools)}
    assert set(lines) == {"FAST", "SLOW"}
    assert INLINE_MAX_BYTES == max(lines.values()) * payload


# cold lines (cxlsim.replay.pool_profile.cold_calls, PoolPricing.cold_extra_ns; benchmarks/replay_coll_kinds.py)
COLD_CURVES = {"broadcast": {"4": 40.0, "4096": 220.0, "65536": 9600.0},
               "copyin": {"4": 35.0, "4096": 280.0, "65536": 10240.0},
               "copyout": {"4": 30.0, "4096": 270.0, "65536": 3600.0}}
"""Warm up to 4 KiB and cold at 64 KiB, as this host's profiles measure them: broadcast and copy-in 0.05-0.07 ns/B
against 0.15-0.16 at 64 KiB; copy-out no slower per byte at 64 KiB (3600 / 16 = 225 < 270)."""


def cold_profile(tmp_path) -> str:
    """The test profile with COLD_CURVES as its hw broadcast pattern and concurrent copy-in and copy-out."""
    profile = json.loads(open(LOCAL).read())
    model = profile["model"]
    model["pattern_curves"] = {"hw": {"broadcast": COLD_CURVES["broadcast"]}}
    model["concurrent_curves"]["hw"].update(copyin=COLD_CURVES["copyin"], copyout=COLD_CURVES["copyout"])
    path = tmp_path / "cold.json"
    path.write_text(json.dumps(profile))
    return str(path)


def calls(*spec):
    from cxlsim.replay.trace import Call
    return [Call(kind, "t", i, size_bytes=size) for i, (kind, size) in enumerate(spec)]


def test_a_call_is_cold_after_a_larger_call_or_first_and_warm_in_the_benchs_loop():
    from cxlsim.replay.pool_profile import cold_calls
    app = [("allreduce", 65536), ("allgather", 4096), ("bcast", 4096), ("allreduce", 8)]
    # coll_timed.c's iterations between barriers: every call but the 64 KiB allreduce has it since its last run
    assert cold_calls(calls(("barrier", 0), *app * 3, ("barrier", 0)), 2) == [True] * 5 + [False, True, True, True] \
        + [False, True, True, True] + [True]
    assert cold_calls(calls(*[("bcast", 4096)] * 4), 2) == [True, False, False, False]  # the bench's loop
    # 4 KiB allgathers (8 KiB a rank at np 2) between bcasts leave them warm; at np 4 (16 KiB) they do not
    assert cold_calls(calls(*[("allgather", 4096), ("bcast", 4096)] * 2), 2) == [True, True, False, False]
    assert cold_calls(calls(*[("allgather", 4096), ("bcast", 4096)] * 2), 4) == [True, True, False, True]
    # another size of the same kind is another call
    assert cold_calls(calls(("bcast", 4096), ("bcast", 8192), ("bcast", 4096)), 2) == [True, True, False]


def test_a_cold_calls_copies_take_the_profiles_per_byte_time_at_the_reference_size(tmp_path):
    from cxlsim.replay.pool_profile import COLD_REFERENCE_BYTES, PoolPricing
    assert COLD_REFERENCE_BYTES == 65536
    pricing = PoolPricing(cold_profile(tmp_path), 2)
    per_byte = {name: curve["65536"] / 65536 for name, curve in COLD_CURVES.items()}
    assert pricing.cold_extra_ns("bcast", 4096) == pytest.approx(4096 * per_byte["broadcast"] - 220.0)
    # the allgather's copy-in is slower cold, its copy-out is not: never less than warm
    assert pricing.cold_extra_ns("allgather", 4096) == pytest.approx(4096 * per_byte["copyin"] - 280.0)
    assert pricing.cold_extra_ns("bcast", 65536) == 0.0  # already the cold rate
    assert pricing.cold_extra_ns("barrier", 0) == 0.0
    assert pricing.cold_extra_ns("alltoall", 4096) == 0.0  # no alltoall pattern in this profile


def test_the_replay_charges_a_bcast_after_a_large_allreduce_its_cold_copies_and_not_one_after_a_bcast(
        tmp_path, write_trace, network_profile, library_stats_text):
    from cxlsim.replay.pool_profile import PoolPricing
    lines = ["allreduce 65536 0", "bcast 4096 0", "barrier", "bcast 4096 0", "barrier"]
    trace = read_trace(write_trace, tmp_path, [lines, lines])
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text({"MPI_Allreduce": (2, 2, 0), "MPI_Bcast": (4, 4, 0),
                                         "MPI_Barrier": (4, 4, 0)}))
    local = cold_profile(tmp_path)
    fab = fabrics.resolve(f"{network_profile(tmp_path, L_NS, O_NS, G_NS_PER_B)}+{local}", 2, trace=trace,
                          library_stats=read_library_stats(str(stats)))
    assert "a cold call's copies at the profile's per-byte time at 65536 B" in fab.describe
    timeline = engine.replay(trace, fab.make(), priced=fab.priced)
    pricing = PoolPricing(local, 2)
    warm, extra = pricing.cost_ns("bcast", 4096), pricing.cold_extra_ns("bcast", 4096)
    assert extra > 100.0
    for r in range(2):
        first, second = (end - start for start, end, kind, _, _ in timeline.segments[r] if kind == "bcast")
        assert first == pytest.approx(warm + extra, rel=1e-9)
        assert second == pytest.approx(warm, rel=1e-9)


def test_a_slow_placement_runs_streamed_copy_ins_are_never_cold(tmp_path):
    """In the slow placement the library copies calls from NT_SLOW_MIN_BYTES into the pool with non-temporal stores
    (pools.c, read from the source here): no cold extra there; below it, and in the fast placement, the extra."""
    import re
    from pathlib import Path
    from cxlsim.replay.pool_profile import NT_SLOW_MIN_BYTES, PoolPricing
    pools = (Path(__file__).resolve().parents[1] / "cxlsim" / "mpi" / "pools.c").read_text()
    assert NT_SLOW_MIN_BYTES == int(re.search(r"#define NT_SLOW_MIN_BYTES (\d+)u", pools).group(1))
    local = cold_profile(tmp_path)
    extra = PoolPricing(local, 2).cold_extra_ns("bcast", 4096)
    for placement, at_4k in (("fast", extra), ("slow", 0.0), ("not probed", extra)):
        stats = {"ranks": 2, "coherence": Coherence.HW, "rows": {"bcast": {"calls": 2, "pool": 2, "hier": 0,
                                                                          "fallback": 0}},
                 "placement": {"class": placement, "roundtrip_ns": None if placement == "not probed" else 400.0}}
        pricing = PoolPricing(local, 2, stats)  # no trace: the stats' pool kinds
        assert pricing.kinds == {"bcast"}
        assert pricing.cold_extra_ns("bcast", 4096) == pytest.approx(at_4k)
        assert pricing.cold_extra_ns("bcast", 1024) > 0.0


def test_at_more_than_two_ranks_the_library_keeps_plain_copy_ins_in_the_slow_placement_too(tmp_path):
    """pools.c streams its copy-ins only in a pool of 2 ranks (np > 2: the fast placement's stores, whatever the
    probe), so at np 3 a slow run's 4 KiB bcast is cold as in the fast placement."""
    from cxlsim.replay.pool_profile import PoolPricing
    local = cold_profile(tmp_path)
    row = {"calls": 3, "pool": 3, "hier": 0, "fallback": 0}
    extras = {}
    for placement in ("fast", "slow"):
        stats = {"ranks": 3, "coherence": Coherence.HW, "rows": {"bcast": row},
                 "placement": {"class": placement, "roundtrip_ns": 400.0}}
        extras[placement] = PoolPricing(local, 3, stats).cold_extra_ns("bcast", 4096)
    assert extras["slow"] == pytest.approx(extras["fast"]) and extras["slow"] > 0.0
