"""benchmarks/replay_validate.py's coll diagnostics: the profile's price of one iteration of coll's pool calls, and
the profile's own bench of the allreduce beside it (#17 item 4: does coll's error follow the profile?)."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

from cxlsim.replay.pool_profile import PoolPricing, read_library_stats

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL = os.path.join(HERE, "data", "local_host_profile_np2.json")


def benchmark_module(name):
    """benchmarks/NAME.py, imported as a module."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def validate_module():
    return benchmark_module("replay_validate")


def coll_trace(tmp_path, write_trace):
    """Two iterations of coll's calls on 2 ranks, between barriers, and the library's stats: all on the pool."""
    step = ["allreduce 65536 0", "allgather 4096 4096", "bcast 4096 0", "allreduce 8 0"]
    lines = ["barrier", *step * 2, "barrier"]
    directory = write_trace(tmp_path / "coll", {0: lines, 1: lines})
    stats = tmp_path / "coll.stats.txt"
    stats.write_text("cxlsim-mpi stats: 2 ranks, sums over ranks; pool shm, coherence hw, allreduce large 65536 B\n"
                     "MPI_Allgather 4 0 0 4 0 0\nMPI_Allreduce 8 0 0 8 0 0\nMPI_Bcast 4 0 0 4 0 0\n"
                     "MPI_Barrier 4 0 0 4 0 0\n")
    return str(directory), str(stats)


def test_coll_s_price_per_iteration_is_the_sum_of_what_the_profile_charges_its_four_calls(tmp_path, write_trace):
    validate = validate_module()
    directory, stats = coll_trace(tmp_path, write_trace)
    prices = validate.pool_prices(directory, LOCAL, stats)
    from cxlsim.replay import simgrid
    pricing = PoolPricing(LOCAL, 2, read_library_stats(stats), simgrid.read(directory))
    by_hand = {key: pricing.cost_ns(*key) for key in validate.COLL_CALLS}
    assert {key: prices[key] for key in validate.COLL_CALLS} == by_hand
    assert set(prices) == set(validate.COLL_CALLS) | {("barrier", 0)}
    assert validate.coll_price_us(prices) == pytest.approx(sum(by_hand.values()) / 1e3)
    # the 64 KiB allreduce is at the run's large threshold: the large algorithm, dearer than the 8-byte call
    assert prices[("allreduce", 65536)] > prices[("allreduce", 8)] > 0


def test_the_profile_s_own_allreduce_bench_is_quoted_with_its_jobs_range(tmp_path):
    validate = validate_module()
    with open(LOCAL) as fh:
        profile = json.load(fh)
    assert validate.bench_row(LOCAL, "allreduce", 8) == "not in the profile"
    profile["collectives"] = {"rows": [
        {"coherence": "flush", "collective": "allreduce", "size_bytes": 8, "measured_ns": 900.0},
        {"coherence": "hw", "placement": "fast", "collective": "allreduce", "size_bytes": 8, "large_bytes": 2097152,
         "measured_ns": 488.25, "spread_ns": [466.0, 490.5], "jobs": 3}]}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    assert validate.bench_row(str(path), "allreduce", 8) == ("488 ns [466-490 over 3 jobs], fast placement, large "
                                                            "from 2097152 B")
    assert validate.bench_row(str(path), "allreduce", 65536) == "not in the profile"



def test_the_options_line_carries_the_pool_spin_to_replay_validate():
    import importlib.util as util
    from cxlsim.replay.cpu_sharing import CPUSharing
    spec = util.spec_from_file_location("replay_cpu_sharing", os.path.join(HERE, "..", "benchmarks",
                                                                           "replay_cpu_sharing.py"))
    figures = util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    sharing = CPUSharing(2, 2171e3, 4.5e3, 1.25e3, pool_spin_ns=105.36e3)
    line = figures.options_line(sharing)
    assert "--pool-spin 105.36us --cpu-switch 0.000us --cpu-switch-cv 0.000" in line
    assert validate_module().cpu_figures(line + "\n") == sharing
    # an output of before the spin was measured: no spin
    assert validate_module().cpu_figures(line.rsplit(" --pool-spin", 1)[0] + "\n").pool_spin_ns == 0.0
    # and of before the hand-over cost was fitted: free hand-overs
    old = validate_module().cpu_figures(line.rsplit(" --cpu-switch ", 1)[0] + "\n")
    assert old.pool_spin_ns == 105.36e3 and old.switch_ns == 0.0 and old.switch_cv == 0.0


def test_a_profile_with_jobs_prices_the_allreduce_at_the_traced_run_s_round_trip(tmp_path, write_trace, monkeypatch):
    """Where the profile has collectives jobs and the run's stats header gives a fast or slow round trip, the
    allreduce is priced by calibrate.price_spread.price_at at that round trip (its figure is used as given:
    price_spread's own tests check it), with the run's large threshold; without the round trip, at another np,
    or for another kind, the profile's model prices it, and the fabric line says which."""
    from cxlsim.replay import pool_profile, simgrid
    calls = []

    def fake(profile, coherence, collective, size_bytes, large_bytes, roundtrip_ns):
        calls.append((collective, size_bytes, large_bytes, roundtrip_ns))
        return {"price_ns": 1000.0 + size_bytes, "low_ns": 900.0, "high_ns": 1100.0, "jobs": 3, "rule": "by hand"}
    monkeypatch.setattr(pool_profile, "price_at", fake)
    with open(LOCAL) as fh:
        profile = json.load(fh)
    profile["collectives"] = {"jobs": [{"id": "0 fast"}]}
    with_jobs = tmp_path / "jobs.json"
    with_jobs.write_text(json.dumps(profile))
    directory, stats = coll_trace(tmp_path, write_trace)
    header = open(stats).read().replace("allreduce large 65536 B", "allreduce large 65536 B, placement fast (flag "
                                         "round trip 87 ns)")
    (tmp_path / "placed.stats.txt").write_text(header)
    placed = read_library_stats(str(tmp_path / "placed.stats.txt"))
    trace = simgrid.read(directory)
    pricing = PoolPricing(str(with_jobs), 2, placed, trace)
    assert pricing.cost_ns("allreduce", 8) == 1008.0 and pricing.cost_ns("allreduce", 65536) == 1000.0 + 65536
    assert sorted(calls) == [("allreduce", 8, 65536, 87.0), ("allreduce", 65536, 65536, 87.0)]
    assert "allreduce priced at the run's flag round trip 87 ns" in pricing.describe() and "by hand" in \
        pricing.describe()
    model = PoolPricing(LOCAL, 2, placed, trace)  # no jobs: the model
    assert model.cost_ns("allreduce", 8) == PoolPricing(LOCAL, 2, read_library_stats(stats), trace).cost_ns(
        "allreduce", 8) != 1008.0
    assert "allreduce priced by the profile's model" in model.describe()
    no_probe = PoolPricing(str(with_jobs), 2, read_library_stats(stats), trace)  # no round trip in the header
    assert no_probe.at_roundtrip_ns is None and no_probe.cost_ns("allreduce", 8) == model.cost_ns("allreduce", 8)
    assert pricing.cost_ns("bcast", 4096) == model.cost_ns("bcast", 4096)  # another kind: the model


def coll_kinds_module():
    return benchmark_module("replay_coll_kinds")


def test_replay_coll_kinds_reads_own_times_and_prices_each_block_by_the_cold_rule(tmp_path):
    """benchmarks/replay_coll_kinds.py: a call's own time is its return less the last rank's entry; in the app's
    block the 4 KiB calls are cold (after the 64 KiB allreduce) and priced with their extra, alone they are not."""
    m = coll_kinds_module()
    rows = {0: [("app", "bcast4096", 0, 100, 900), ("app", "allreduce8", 0, 950, 1100)],
            1: [("app", "bcast4096", 0, 300, 1000), ("app", "allreduce8", 0, 1050, 1150)]}
    for r, calls in rows.items():
        (tmp_path / f"times{r}.tsv").write_text("block\tkind\tcall\tentry_ns\treturn_ns\n"
                                                + "".join("\t".join(map(str, c)) + "\n" for c in calls))
    got = m.read_times(str(tmp_path), 2)
    assert [c["own_ns"] for c in got] == [[600.0, 700.0], [50.0, 100.0]]
    assert [c["durations_ns"] for c in got] == [[800.0, 700.0], [150.0, 100.0]]
    pricing = PoolPricing(LOCAL, 2)
    pricing.cold_extra_ns = lambda kind, size: {"allgather": 11.0, "bcast": 22.0}.get(kind, 0.0)
    app = m.block_prices(pricing, "app:RGBr:1")
    assert {k: cold for k, (_, cold) in app.items()} == {"allreduce65536": False, "allgather4096": True,
                                                         "bcast4096": True, "allreduce8": True}
    assert app["bcast4096"][0] == pytest.approx(pricing.cost_ns("bcast", 4096) + 22.0)
    alone = m.block_prices(pricing, "alone-B:B:1")
    assert alone == {"bcast4096": (pytest.approx(pricing.cost_ns("bcast", 4096)), False)}
    assert set(m.WARM.values()) <= {b.split(":")[0] for b in m.BLOCKS}


def _tool(name: str) -> str | None:
    import shutil
    import sys
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


@pytest.mark.mpi
@pytest.mark.skipif(_tool("mpiexec") is None or _tool("mpicc") is None, reason="no mpiexec/mpicc (install cxlsim[mpi])")
def test_replay_coll_kinds_runs_its_blocks_under_the_library_and_matches_the_sidecar(tmp_path):
    """One short traced run of coll_kinds.c (3 iterations a block): every block and kind has both ranks' own times,
    the library's sidecar lines up with the program's calls (the set-up and barriers left out), prices are set."""
    import subprocess
    m = coll_kinds_module()
    exe = tmp_path / "coll_kinds"
    subprocess.run([_tool("mpicc"), "-O0", m.SOURCE, "-o", str(exe)], check=True, timeout=120)
    row = m.one_run(str(exe), str(tmp_path / "run"), True, 3, 100, 1, LOCAL)
    assert {(c["block"], c["kind"]) for c in row["cells"]} >= {("app", k) for k in
                                                             ("allreduce65536", "allgather4096", "bcast4096", "allreduce8")}
    for c in row["cells"]:
        assert c["own_ns0"] is not None and c["own_ns1"] is not None and c["price_ns"] > 0
        if c["kind"] != "barrier":  # a bcast root's own time may be below 0 (it may leave before the reader enters)
            assert c["library_ns0"] is not None and c["library_ns1"] is not None
