"""`cxlsim replay`: the command (built from its own `register`), its outputs, its refusals, the fabric
specs and placements, and the generated stencil trace."""
from __future__ import annotations

import argparse
import csv
import json
import os

import pytest

from cxlsim.errors import InputError
from cxlsim.replay import cli, engine, fabrics, generate, simgrid

TRACES = os.path.join(os.path.dirname(__file__), "data", "traces")
HALO = os.path.join(TRACES, "halo", "halo.txt")
P2P = os.path.join(TRACES, "p2p", "p2p.txt")


def run(argv):
    parser = argparse.ArgumentParser(prog="cxlsim")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", *argv])
    return args.func(args)


def test_replay_on_two_fabrics_writes_tables_and_plots(tmp_path, capsys):
    out = tmp_path / "run"
    assert run([HALO, "--fabric", "eth-100g-tcp", "--fabric", "ib-hdr", "--output", str(out),
                "--timeline-ms", "2"]) == 0
    text = capsys.readouterr().out
    assert "eth-100g-tcp" in text and "ib-hdr" in text and "allreduce recursive_doubling" in text
    totals = json.loads((out / "totals.json").read_text())
    assert [t["fabric"] for t in totals] == ["eth-100g-tcp", "ib-hdr"]
    speedup = list(csv.DictReader((out / "speedup.csv").open()))
    assert float(speedup[0]["speedup"]) == 1.0
    assert float(speedup[1]["speedup"]) == pytest.approx(totals[0]["total_s"] / totals[1]["total_s"])
    assert float(speedup[1]["speedup"]) > 1.0  # InfiniBand beats TCP on the same trace
    calls = json.loads((out / "calls.json").read_text())
    assert {c["kind"] for c in calls} >= {"compute", "waitall", "allreduce", "isend", "irecv"}
    for name in ("totals.png", "calls.png", "timeline-eth-100g-tcp.png", "timeline-ib-hdr.png", "ranks.csv",
                 "notes.json", "config.yaml", "provenance.json"):
        assert (out / name).is_file(), name
    ranks = list(csv.DictReader((out / "ranks.csv").open()))
    assert len(ranks) == 8
    # the compute itself is the same on both fabrics (overheads landing during it are 'progress')
    compute = {t["fabric"]: t["compute_share"] * t["total_s"] for t in totals}
    assert compute["eth-100g-tcp"] == pytest.approx(compute["ib-hdr"], rel=1e-12)


def test_replay_without_a_host_speed_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"--trace-host-speed: .*smpi/host-speed"):
        run([P2P, "--fabric", "ib-hdr", "--output", str(tmp_path), "--no-plots"])
    assert run([P2P, "--fabric", "ib-hdr", "--trace-host-speed", "20kf", "--output", str(tmp_path),
                "--no-plots"]) == 0


@pytest.mark.parametrize("argv, message", [
    (["--compute-scale", "fast"], r"--compute-scale file 'fast'"),
    (["--compute-scale", "-1"], r"--compute-scale: expected a factor >= 0"),
    (["--timeline-ms", "0"], r"--timeline-ms: expected a time > 0 ms"),
    (["--trace-host-speed", "quick"], r"--trace-host-speed: expected a speed"),
    (["--placement", "scattered"], r"--placement file 'scattered'"),
])
def test_bad_options_are_refused_naming_them(tmp_path, argv, message):
    with pytest.raises(InputError, match=message):
        run([HALO, "--fabric", "ib-hdr", "--output", str(tmp_path), "--no-plots", *argv])


def test_a_missing_profile_and_workload_keys_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"x\.json"):
        fabrics.resolve("x.json", 4)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("fabric:\n  preset: ib-hdr\nworkload:\n  collective: allreduce\n")
    with pytest.raises(InputError, match=r"workload\.collective: the trace is the workload"):
        fabrics.resolve(str(scenario), 4)
    with pytest.raises(InputError, match="unknown preset|no-such"):
        fabrics.resolve("no-such-preset", 4)


def test_compute_scale_file_gives_per_rank_factors(tmp_path):
    factors = tmp_path / "scale.txt"
    factors.write_text("# one factor per rank\n1\n1\n1\n3\n")
    assert cli.compute_scale(str(factors), 4) == [1.0, 1.0, 1.0, 3.0]
    with pytest.raises(InputError, match="lists 4 factors, the trace has 5 ranks"):
        cli.compute_scale(str(factors), 5)
    factors.write_text("1\nfast\n")
    with pytest.raises(InputError, match=r"scale\.txt:2: expected a compute factor"):
        cli.compute_scale(str(factors), 2)


def test_placements_and_a_scenario_fabric(tmp_path):
    trace = simgrid.read(HALO)
    two_per_host = fabrics.resolve("ib-hdr", 4, "block", ranks_per_node=2)
    assert two_per_host.groups == ((0, 1), (2, 3))
    robin = fabrics.resolve("ib-hdr", 4, "round_robin", ranks_per_node=2)
    assert robin.groups == ((0, 2), (1, 3))
    mapping = tmp_path / "hosts.txt"
    mapping.write_text("1\n0\n1\n0\n")
    by_file = fabrics.resolve("ib-hdr", 4, str(mapping), ranks_per_node=2)
    assert by_file.groups == ((1, 3), (0, 2))
    mapping.write_text("1\n0\n5\n0\n")
    with pytest.raises(InputError, match=r"hosts\.txt:3: host 5 of rank 2: the fabric has hosts 0\.\.1"):
        fabrics.resolve("ib-hdr", 4, str(mapping), ranks_per_node=2)
    shared = engine.replay(trace, two_per_host.make())
    alone = engine.replay(trace, fabrics.resolve("ib-hdr", 4).make())
    assert shared.total_ns != alone.total_ns  # two ranks share a NIC and talk through shared memory
    scenario = tmp_path / "tree.yaml"
    scenario.write_text("fabric:\n  preset: eth-100g-roce\n  topology: fat_tree\n  hosts_per_leaf: 2\n"
                        "workload:\n  chunk: 16 KiB\n")
    tree = fabrics.resolve(str(scenario), 4)
    assert tree.label == "tree" and "fat_tree" in tree.describe
    assert engine.replay(trace, tree.make()).total_ns > 0


def test_the_generated_stencil_trace(tmp_path):
    index = generate.write_stencil(str(tmp_path), dims=(2, 2, 3), halo_bytes=1024, iterations=2,
                                  compute_flops=1e4)
    trace = simgrid.read(index)
    assert trace.size == 12 and trace.host_speed_flops_per_s == 1e9
    assert generate.neighbours(0, (2, 2, 3)) == [1, 1, 2, 2, 4, 8]
    sends = [c for c in trace.ranks[5] if c.kind == "isend"]
    assert len(sends) == 12 and {c.size_bytes for c in sends} == {1024}
    assert sorted(c.peer for c in sends[:6]) == sorted(generate.neighbours(5, (2, 2, 3)))
    timeline = engine.replay(trace, fabrics.resolve("ib-hdr", 12).make())
    assert timeline.total_ns > 2 * 1e4  # two compute gaps of 10 us at 1 Gflop/s, plus the exchanges
    with pytest.raises(InputError, match="halo_bytes"):
        generate.write_stencil(str(tmp_path / "x"), halo_bytes=7)


@pytest.mark.parametrize("ranks, dims", [(16, (2, 2, 4)), (64, (4, 4, 4)), (1024, (8, 8, 16)), (7, (1, 1, 7)),
                                         (12, (2, 2, 3))])
def test_grid_is_the_most_cubic(ranks, dims):
    assert generate.grid(ranks) == dims


def test_the_generated_cg_and_training_traces(tmp_path):
    cg = simgrid.read(generate.write_cg(str(tmp_path / "cg"), (2, 2, 2), halo_bytes=64, iterations=3,
                                        spmv_flops=1000, update_flops=100))
    kinds = [c.kind for c in cg.ranks[3]]
    assert kinds.count("allreduce") == 6 and kinds.count("isend") == 18 and kinds.count("waitall") == 3
    timeline = engine.replay(cg, fabrics.resolve("ib-hdr", 8).make())
    assert timeline.total_ns > 3 * (1000 + 2 * 100)
    training = simgrid.read(generate.write_training(str(tmp_path / "dp"), 4, gradient_bytes=8 * 1024, buckets=4,
                                                    forward_flops=1000, backward_flops=4000, steps=2))
    assert [c.size_bytes for c in training.ranks[0] if c.kind == "allreduce"] == [2048] * 8
    assert sum(c.amount for c in training.ranks[2] if c.kind == "compute") == 2 * (1000 + 4000)
    with pytest.raises(InputError, match="not 3 equal buckets"):
        generate.write_training(str(tmp_path / "x"), 4, gradient_bytes=8 * 1024, buckets=3)


def test_a_fabric_given_twice_gets_its_own_label_and_pools_run_from_the_command(tmp_path, capsys):
    out = tmp_path / "run"
    assert run([HALO, "--fabric", "ib-hdr", "--fabric", "ib-hdr", "--fabric", "cxl3-pool", "--output", str(out),
                "--no-plots", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "# cxl3-pool: cxl3-pool, hw coherence" in captured.err
    speedup = json.loads((out / "speedup.json").read_text())
    assert [s["fabric"] for s in speedup] == ["ib-hdr", "ib-hdr#2", "cxl3-pool"]
    assert speedup[1]["speedup"] == 1.0  # the DES is deterministic
    assert not list(out.glob("*.png"))
    notes = json.loads((out / "notes.json").read_text())
    assert notes["cxl3-pool"] == {"notes": [], "algorithms": {"allreduce": ["cxl_pool"]}}  # the pool's own


def test_a_trace_of_the_interposition_library_replays_on_several_fabrics(tmp_path):
    library = os.path.join(TRACES, "library")  # rank0.txt, rank1.txt, trace.meta.json (make_library_trace.sh)
    trace = simgrid.read(library)
    assert trace.size == 2 and trace.host_speed_flops_per_s == 1e9  # compute in ns
    kinds = {c.kind for calls in trace.ranks for c in calls}
    assert kinds == {"compute", "barrier", "irecv", "isend", "wait", "allreduce"}
    compute_ns = [sum(c.amount for c in calls if c.kind == "compute") for calls in trace.ranks]
    one_host = tmp_path / "one-host.yaml"
    one_host.write_text("fabric:\n  preset: ib-hdr\n  nodes: 1\n  ranks_per_node: 2\n")
    totals = {}
    for spec in ("ib-hdr", "eth-100g-tcp", "cxl3-pool", str(one_host)):
        timeline = engine.replay(trace, fabrics.resolve(spec, 2).make())
        totals[spec] = timeline.total_ns
        assert timeline.total_ns > max(compute_ns)
    assert totals["ib-hdr"] < totals["eth-100g-tcp"]


def _network_profile(tmp_path, **extra):
    from cxlsim.calibrate.profile import make_profile, save_profile
    from cxlsim.loggp import LogGPFit, Regime

    small = Regime(min_size_bytes=0, max_size_bytes=8191, latency_ns=1000.0, overhead_ns=200.0, gap_ns=200.0,
                   gap_per_byte_ns=0.1, rms_rel_error=0.01)
    large = Regime(min_size_bytes=8192, max_size_bytes=1 << 22, latency_ns=3000.0, overhead_ns=500.0, gap_ns=500.0,
                   gap_per_byte_ns=0.05, rms_rel_error=0.01)
    model = {"base_preset": "ib-hdr", "np": 2, "loggp": LogGPFit(regimes=(small, large), identified="test").to_dict(),
             "collective_overhead_ns": 0.0, "memcpy_bw_bytes_per_ns": {"1": 10.0}, **extra}
    return save_profile(str(tmp_path / "net.json"), make_profile("network", model, []))


def test_a_network_profile_says_which_of_its_fit_the_messages_do_not_use(tmp_path):
    plain = fabrics.resolve(_network_profile(tmp_path), 2, message_bytes=100).describe
    assert "exchange terms" not in plain and "rewritten" not in plain
    exchange = {"contention": {"65536": 1.4}, "contention_source": "test", "protocol_switch_bytes": 8192,
                "fin_ns": 1400.0, "fin_source": "test"}
    fitted = fabrics.resolve(_network_profile(tmp_path, exchange=exchange, own_copy_in_line=True), 2,
                             message_bytes=100).describe
    assert "exchange terms (two-way contention, rendezvous FIN) are not applied" in fitted
    assert "fitted on rewritten send buffers" in fitted


@pytest.mark.parametrize("size, regime", [(100, (1000.0, 200.0, 0.1)), (32768, (3000.0, 500.0, 0.05))])
def test_a_network_profile_replays_with_the_regime_of_the_typical_message(tmp_path, size, regime):
    profile = _network_profile(tmp_path)
    trace_dir = tmp_path / "t"
    trace_dir.mkdir()
    (trace_dir / "t_rank-1.txt").write_text(f"0 init\n0 send 1 0 {size}\n0 finalize\n")
    (trace_dir / "t_rank-2.txt").write_text(f"1 init\n1 recv 0 0 {size}\n1 finalize\n")
    trace = simgrid.read(str(trace_dir), 1e9)
    typical = fabrics.typical_message_bytes(trace)
    assert typical == size
    fab = fabrics.resolve(profile, 2, message_bytes=typical)
    assert f"chosen for the trace's typical message of {size} B" in fab.describe
    timeline = engine.replay(trace, fab.make())
    latency, overhead, per_byte = regime
    # the fit's line: o + k*G + L + o (one link each way, switch latency 0)
    assert timeline.finish_ns[1] == pytest.approx(2 * overhead + size * per_byte + latency, rel=1e-9)


def test_a_local_host_profile_is_refused(tmp_path):
    import json

    from cxlsim.calibrate.profile import MODEL_KEYS

    data = json.loads(open(_network_profile(tmp_path)).read())
    data.update(kind="local-host", model={k: 0 for k in MODEL_KEYS["local-host"]})
    path = tmp_path / "local.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"--fabric .*local\.json: a local-host profile models the emulator's pool "
                                         r"collectives on one host"):
        fabrics.resolve(str(path), 2)
