"""Issue 4, the study side: pool algorithms in the registry, `cxlsim simulate` on a CXL preset,
the CXL-vs-network experiment (analytic mode, tiny grid) and the emulator against the DES."""
import csv
import subprocess
import sys

import numpy as np
import pytest

from cxlsim import config
from cxlsim.coherence import PoolEvent
from cxlsim.cli import main as cli_main
from cxlsim.emulator.launch import run_local
from cxlsim.errors import InputError
from cxlsim.fabric import Environment, NetworkTransport, Placement, build, get_preset, star
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.models.collectives import analytic, base, registry, runner, selectors
from cxlsim.models.collectives.cxl_pool import PoolLayout
from cxlsim.models.collectives.cxl_pool import cxl_pool as des_copy
from cxlsim.models.collectives.cxl_pool import cxl_pool_zero_copy as des_zero
from cxlsim.simulate import resolved, run


def resolve_cxl(fabric):
    """The CXL pool a scenario's fabric section elaborates to (`CXLPoolPreset.elaborate`)."""
    return get_cxl_preset(fabric.preset).elaborate(fabric)


# ---------------------------------------------------------------- registration and skipping

def test_pool_algorithms_are_always_registered_and_marked():
    # The registry lists the pool algorithms among its built-ins.
    for name in ("cxl_pool", "cxl_pool_zero_copy"):
        assert registry.algorithms()[("allgather", name)].transport == "pool"
    assert registry.algorithms()[("allgather", "ring")].transport == "network"
    network = registry.network_algorithms()
    assert ("allgather", "ring") in network and ("allreduce", "ring") in network
    assert not any(name.startswith("cxl_pool") for _, name in network)
    assert "cxl_pool" in registry.names("allgather") and "cxl_pool" not in registry.names("allgather", "network")
    assert registry.names("allgather", "pool") == ["cxl_pool", "cxl_pool_zero_copy"]
    ring = registry.algorithm("allgather", "ring")
    with pytest.raises(InputError, match="transport: expected one of network, pool, hybrid, got 'carrier-pigeon'"):
        base.Algorithm("allgather", "x", ring.run, ring.cost, transport="carrier-pigeon")


def test_selectors_never_pick_a_pool_algorithm():
    for library in ("mpich", "ompi"):
        for p in (2, 3, 8, 16, 33, 64, 300):
            for m in (1, 1024, 65536, 1 << 20):
                name, _ = selectors.select(library, "allgather", p, m)
                assert registry.algorithms()[("allgather", name)].transport == "network"


def test_a_transport_mismatch_is_a_clear_error():
    net = NetworkTransport(build(star(4), get_preset("ib-hdr"), Environment()), Placement(4, 1))
    with pytest.raises(InputError, match="cxl_pool needs a CXL pool transport"):
        runner.run(net, "allgather", "cxl_pool", 64)
    pool = CXLPoolTransport(get_cxl_preset("cxl3-pool"), 4, coherence="hw")
    with pytest.raises(InputError, match="ring exchanges messages and needs a network; a CXL pool fabric runs "
                                         "only cxl_pool, cxl_pool_zero_copy"):
        runner.run(pool, "allgather", "ring", 64)
    cm = analytic.CostModel.from_network(build(star(4), get_preset("ib-hdr"), Environment()), 65536)
    with pytest.raises(InputError, match="cxl_pool runs on a CXL pool; its closed form is cxl_pool.cxl_pool_closed_form"):
        analytic.cost("allgather", "cxl_pool", 4, 64, cm, runner.Context())
    # The pool transport says what it is; the network one is the default kind.
    assert pool.kind == "pool" and net.kind == "network"


# ---------------------------------------------------------------- simulate on a CXL preset

def _scenario(preset="cxl3-pool", nodes=4, engine="des", algorithm="cxl_pool", sizes=(1, 64, 4096, 65536, 1 << 20),
              **cxl):
    return config.from_dict({"engine": engine,
                             "fabric": {"preset": preset, "nodes": nodes, "cxl": cxl},
                             "workload": {"algorithm": algorithm, "sizes": list(sizes)}})


@pytest.mark.parametrize("preset, coherence, nodes, algorithm", [
    ("cxl3-pool", "hw", 8, "cxl_pool"), ("cxl3-pool", "flush", 5, "cxl_pool"),
    ("cxl3-pool", "hw", 4, "cxl_pool_zero_copy"), ("cxl2-pool", "flush", 4, "cxl_pool"),
    ("cxl3-pool", "hw", 10, "auto")])
def test_des_equals_analytic_on_an_uncongested_pool(preset, coherence, nodes, algorithm):
    des = run(_scenario(preset, nodes, "des", algorithm, coherence=coherence))
    ana = run(_scenario(preset, nodes, "analytic", algorithm, coherence=coherence))
    for d, a in zip(des, ana):
        assert d["algorithm"] == a["algorithm"] == ("cxl_pool" if algorithm == "auto" else algorithm)
        assert d["latency_us"] == pytest.approx(a["latency_us"], rel=1e-9), d["size_bytes"]
        assert d["events"] > 0 and a["events"] == 0
    # More bytes, more time.
    assert [r["latency_us"] for r in des] == sorted(r["latency_us"] for r in des)


def test_cxl_settings_are_resolved_and_checked():
    setup = resolve_cxl(_scenario("cxl2-pool").fabric)
    assert (setup.coherence, setup.switch_levels, setup.devices) == ("flush", 1, 1)
    assert resolve_cxl(_scenario(nodes=16).fabric).switch_levels == 2    # 16 hosts + 1 device > 16 ports
    assert resolve_cxl(_scenario(nodes=15).fabric).switch_levels == 1
    # load_latency scales every latency figure: the one-level load equals it, and b = 48 * 64 B / L.
    fig = CXLPoolTransport(resolve_cxl(_scenario(load_latency="500 ns").fabric).preset, 2, coherence="hw").figures()
    assert fig.load_ns == pytest.approx(500.0) and fig.host_bw_bytes_per_ns == pytest.approx(48 * 64 / 500.0)
    # The resolved config writes the choices out and re-resolves to the same pool.
    out = resolved(_scenario(nodes=16, load_latency="400 ns", outstanding_lines=96))
    assert (out.fabric.cxl.coherence, out.fabric.cxl.switch_levels, out.fabric.cxl.outstanding_lines) == ("hw", 2, 96)
    assert out.fabric.cxl.load_latency_ns == pytest.approx(400.0)
    assert resolve_cxl(out.fabric) == resolve_cxl(_scenario(nodes=16, load_latency="400 ns",
                                                           outstanding_lines=96).fabric)


@pytest.mark.parametrize("data, message", [
    ({"fabric": {"preset": "cxl2-pool", "nodes": 4, "cxl": {"coherence": "hw"}}},
     "fabric.cxl.coherence: cxl2-pool .CXL 2.0. supports only flush, got 'hw'"),
    ({"fabric": {"preset": "cxl2-pool", "nodes": 4, "cxl": {"switch_levels": 2}}},
     "fabric.cxl.switch_levels: cxl2-pool .CXL 2.0. allows at most 1 level"),
    ({"fabric": {"preset": "cxl2-pool", "nodes": 16}},
     "fabric.nodes: 16 on 1 switch level.s.: switch ports: 16 hosts . 1 device ports need 17 x16 ports"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 226}}, "fabric.nodes: 226 on 2 switch level.s.: .*at most 225 hosts"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4, "ranks_per_node": 2}},
     r"fabric.ranks_per_node: the CXL pool preset cxl3-pool does not use it \(it applies to network presets\)"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4, "links": {"bandwidth": "25 GB/s"}}},
     r"fabric.links.bandwidth: the CXL pool preset cxl3-pool does not use it \(it applies to network presets and "
     r"hybrid pod fabrics\)"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4, "topology": "fat_tree"}},
     r"fabric.topology: the CXL pool preset cxl3-pool does not use it \(it applies to network presets and "
     r"hybrid pod fabrics\)"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4}, "workload": {"algorithm": "bruck"}},
     "workload.algorithm: bruck exchanges messages and needs a network"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4}, "workload": {"collective": "gather"}},
     "workload.collective: a CXL pool has no gather algorithm; it runs allgather, allreduce, alltoall"),
    ({"fabric": {"preset": "ib-hdr", "nodes": 4}, "workload": {"algorithm": "cxl_pool"}},
     "workload.algorithm: cxl_pool needs a CXL pool transport"),
    ({"fabric": {"preset": "cxl9-pool", "nodes": 4}},
     "fabric.preset: unknown preset 'cxl9-pool'; expected one of cxl-pods, cxl2-pool, cxl3-pool, .*ib-ndr"),
])
def test_bad_cxl_scenarios_name_the_key(data, message):
    with pytest.raises(InputError, match=message):
        run(config.from_dict(data))


@pytest.mark.parametrize("data, message", [
    ({"cxl": {"switch_levels": 3}}, "fabric.cxl.switch_levels: expected 1 or 2, got 3"),
    ({"cxl": {"coherence": "snoopy"}}, "fabric.cxl.coherence: expected 'hw' or 'flush', got 'snoopy'"),
    ({"cxl": {"chunk": "100 B"}}, "fabric.cxl.chunk: expected a multiple of 64 B"),
    ({"cxl": {"devices": 0}}, "fabric.cxl.devices: expected an integer >= 1, got 0"),
    ({"cxl": {"load_latency": "fast"}}, "fabric.cxl.load_latency: expected a time like '250 ns', got 'fast'"),
])
def test_bad_cxl_keys_are_config_errors(data, message):
    with pytest.raises(config.ConfigError, match=message):
        config.from_dict({"fabric": {"preset": "cxl3-pool", "nodes": 4, **data}})


def test_simulate_cli_on_a_cxl_preset_both_engines(tmp_path, capsys):
    tables = {}
    for engine in ("des", "analytic"):
        out = tmp_path / engine
        code = cli_main(["simulate", "--quiet", "--preset", "cxl3-pool", "--nodes", "6", "--coherence", "flush",
                         "--algorithm", "cxl_pool", "--sizes", "1:64KiB", "--engine", engine,
                         "--output", str(out), "--seed", "3"])
        assert code == 0
        text = capsys.readouterr().out
        assert "# fabric: cxl3-pool, flush coherence, 1 device(s), 1 switch level(s), 6 hosts x 1 rank" in text
        with open(out / "latency.csv") as fh:
            tables[engine] = [(int(r["size_bytes"]), float(r["latency_us"])) for r in csv.DictReader(fh)]
        assert (out / "latency.png").exists()
        again = config.load(str(out / "config.yaml"))
        assert again.fabric.cxl.coherence == "flush" and again.fabric.cxl.switch_levels == 1
    assert [s for s, _ in tables["des"]] == [1 << k for k in range(17)]
    for (s, d), (_, a) in zip(tables["des"], tables["analytic"]):
        assert d == pytest.approx(a, rel=1e-9), s
    # A bad combination exits 2 with the key named.
    assert cli_main(["simulate", "--quiet", "--preset", "cxl2-pool", "--coherence", "hw", "--nodes", "2",
                     "--output", str(tmp_path / "bad")]) == 2
    assert "fabric.cxl.coherence: cxl2-pool (CXL 2.0) supports only flush" in capsys.readouterr().err


def test_simulate_cli_runs_as_a_user_would(tmp_path):
    out = subprocess.run([sys.executable, "-m", "cxlsim", "simulate", "--quiet", "--preset", "cxl3-pool",
                          "--nodes", "17", "--sizes", "4KiB", "--output", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "hw coherence, 1 device(s), 2 switch level(s), 17 hosts" in out.stdout


# ---------------------------------------------------------------- the emulator's kernels against the DES

CALLS = (False, True, False, True)  # copy, zero-copy, copy, zero-copy: both buffers used twice, modes mixed
EMU_OPS = {PoolEvent.WRITE: "write", PoolEvent.WRITEBACK: "flush", PoolEvent.FLUSH: "flush",
           PoolEvent.SFENCE: "fence", PoolEvent.MFENCE: "fence", PoolEvent.FLAG_STORE: "store",
           PoolEvent.POLL_CACHED: "poll", PoolEvent.POLL_FLUSHED: "poll", PoolEvent.READ: "read"}


def contents(rank, call, m) -> bytes:
    """Block of `rank` in call `call`: differs by rank and call, so a stale or misplaced block shows."""
    return bytes((rank * 37 + i * 11 + call * 101) % 256 for i in range(m))


def _where(offset, flags, data, stride, p):
    """A pool offset as ('flag', rank) or ('slot', buffer, rank): the layouts' own addresses differ."""
    if flags <= offset < flags + 64 * p:
        return ("flag", (offset - flags) // 64)
    index, rest = divmod(offset - data, stride)
    assert rest == 0 and 0 <= index < 2 * p, offset
    return ("slot", index // p, index % p)


def _emulator_rank(comm, m):
    comm.enable_log(2000)
    blocks = []
    for call, zero_copy in enumerate(CALLS):
        mine = np.frombuffer(contents(comm.rank, call, m), dtype=np.uint8)
        if zero_copy:
            view = comm.send_view(m)
            view[:] = mine
            got = comm.allgather_zero_copy(view).array
            blocks.append([got[r].tobytes() for r in range(comm.size)])
        else:
            recv = np.empty(comm.size * m, np.uint8)
            comm.allgather(mine, recv)
            blocks.append([recv[r * m:(r + 1) * m].tobytes() for r in range(comm.size)])
    lay = comm.pool.layout
    events = [(EMU_OPS[op], None if op in (PoolEvent.SFENCE, PoolEvent.MFENCE) else
               _where(off, lay.flags_offset, lay.data_offset, lay.slot_stride, comm.size), arg)
              for op, off, arg in comm.log_events().tolist()]
    return blocks, events


def _des(p, m, coherence, skip_invalidations=False):
    t = CXLPoolTransport(get_cxl_preset("cxl3-pool"), p, coherence=coherence)
    t.enable_log()
    if skip_invalidations:  # a broken protocol: readers do not drop their copies of the others' slots
        lay, real_flush = PoolLayout(p, m), t.flush
        theirs = {r: {lay.slot(e, w) for e in (0, 1) for w in range(p) if w != r} for r in range(p)}
        t.flush = lambda rank, off, size: real_flush(rank, off, 0 if off in theirs[rank] else size)
    blocks = {r: [] for r in range(p)}

    def rank(r):
        ep = t.endpoint(r)
        for call, zero_copy in enumerate(CALLS):
            algo = des_zero if zero_copy else des_copy
            blocks[r].append((yield from algo(ep, m, contents(r, call, m))))
    t.run({r: rank(r) for r in range(p)})
    lay = PoolLayout(p, m)
    events = {r: [(EMU_OPS[op], None if EMU_OPS[op] == "fence" else
                   _where(off, 0, lay.data_offset, lay.stride_bytes, p), arg)
                  for rr, op, off, arg in t.log if rr == r] for r in range(p)}
    return blocks, events


@pytest.mark.parametrize("coherence", ["flush", "hw"])
@pytest.mark.parametrize("p, m", [(2, 100), (3, 4099), (4, 1)])
def test_emulator_and_des_deliver_the_same_blocks_with_the_same_protocol(p, m, coherence):
    if coherence == "flush":
        try:
            from cxlsim.emulator.comm import choose_line_ops
            choose_line_ops()
        except InputError as exc:
            pytest.skip(f"this CPU cannot run the emulator's flush mode: {exc}")
    emulated = run_local(p, _emulator_rank, args=(m,), coherence=coherence, slot_bytes=m, timeout_s=30.0)
    des_blocks, des_events = _des(p, m, coherence)
    expected = [[contents(w, call, m) for w in range(p)] for call in range(len(CALLS))]
    for r in range(p):
        emu_blocks, emu_events = emulated[r]
        # The same blocks in the same order, on every rank, in both copy and zero-copy calls.
        assert emu_blocks == expected and des_blocks[r] == expected, r
        # The same operations in the same order: write, (flush), fence, flag store, (flush), the
        # polls, (the invalidations, fence), the reads; the same slots and flags, sizes and epochs.
        assert des_events[r] == emu_events, r
    # The mapping is not vacuous: flush mode has every kind of op, and each call polls P-1 flags.
    kinds = [op for op, _, _ in des_events[0]]
    assert kinds.count("poll") == len(CALLS) * (p - 1) and kinds.count("read") == len(CALLS) * p
    assert ("flush" in kinds) == (coherence == "flush")


def test_the_event_comparison_catches_a_protocol_change():
    # A DES without the readers' invalidation (step 5) differs from the emulator's flush-mode log
    # by exactly those flushes, P-1 per call.
    try:
        from cxlsim.emulator.comm import choose_line_ops
        choose_line_ops()
    except InputError as exc:
        pytest.skip(f"this CPU cannot run the emulator's flush mode: {exc}")
    p, m = 3, 100
    emulated = run_local(p, _emulator_rank, args=(m,), coherence="flush", slot_bytes=m, timeout_s=30.0)
    _, broken = _des(p, m, "flush", skip_invalidations=True)
    emu_events = emulated[0][1]
    missing = [e for e in emu_events if e not in broken[0]]
    assert broken[0] != emu_events and len(emu_events) - len(broken[0]) == len(CALLS) * (p - 1)
    assert missing and all(op == "flush" and where[0] == "slot" and where[2] != 0 for op, where, _ in missing)


# ---------------------------------------------------------------- the experiment, analytic mode on a tiny grid

def _experiment():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "allgather_cxl_vs_network.py"
    spec = importlib.util.spec_from_file_location("allgather_cxl_vs_network", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_experiment_analytic_tiny_grid_writes_the_workspace(tmp_path, capsys):
    exp = _experiment()
    out = tmp_path / "study"
    assert exp.main(["--engine", "analytic", "--max-size", "64B", "--max-nodes", "4", "--sensitivity",
                     "--output", str(out), "--quiet", "--seed", "5"]) == 0
    text = capsys.readouterr().out
    assert "published: 2.91x .. 42.14x" in text and "grid wall time (analytic engine)" in text
    rows = _read(out / "results.csv")
    assert list(rows[0]) == exp.COLUMNS
    # 2 node counts x 7 sizes x (6 networks x (3 baselines + MPICH) + 3 CXL variants)
    assert len(rows) == 2 * 7 * (6 * 4 + 3)
    assert {r["variant"] for r in rows} == {"ring", "recursive_doubling", "bruck", "mpich", "cxl3-hw",
                                            "cxl3-flush", "cxl2-flush"}
    mpich = [r for r in rows if r["variant"] == "mpich"]
    assert {r["algorithm"] for r in mpich} == {"recursive_doubling"}  # P = 2, 4 and n < 512 KiB
    # Each MPICH row is its algorithm's row at the same point.
    by = {(r["fabric"], r["variant"], r["nodes"], r["size_bytes"]): r["latency_us"] for r in rows}
    assert all(by[(r["fabric"], r["algorithm"], r["nodes"], r["size_bytes"])] == r["latency_us"] for r in mpich)
    sp = _read(out / "speedup.csv")
    assert all(float(s["speedup"]) == pytest.approx(float(s["network_us"]) / float(s["cxl_us"])) for s in sp)
    table = _read(out / "speedup_table.csv")
    overall = next(t for t in table if t["cxl"] == "cxl3-hw" and t["network"] == "all" and t["baseline"] == "mpich")
    hw = [float(s["speedup"]) for s in sp if s["cxl"] == "cxl3-hw" and s["baseline"] == "mpich"]
    assert float(overall["min_speedup"]) == min(hw) and float(overall["max_speedup"]) == max(hw)
    assert "nodes" in overall["min_at"] and "B" in overall["max_at"]
    for name in ("latency_vs_size.png", "speedup_heatmap.png", "speedup_table.md", "crossover.csv",
                 "provenance.json", "timing.json", "sensitivity.csv", "sensitivity_range.csv",
                 "network_wins.csv", "sensitivity.png"):
        assert (out / name).exists(), name
    ranges = _read(out / "sensitivity_range.csv")
    lat = {float(r["value"]): float(r["max_speedup"]) for r in ranges
           if r["parameter"] == "load_latency_ns" and r["cxl"] == "cxl3-hw" and r["network"] == "all"}
    assert lat[150.0] > lat[250.0] > lat[600.0]  # a slower pool, a smaller gain
    # The 250 ns setting is the preset, so it reproduces the main grid's range.
    assert lat[250.0] == pytest.approx(max(hw))


def test_experiment_rejects_bad_flags(capsys):
    exp = _experiment()
    with pytest.raises(SystemExit):
        exp.main(["--max-size", "32MiB"])
    assert "--max-size: expected 1 B..16 MiB" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        exp.main(["--max-nodes", "128"])
    assert "--max-nodes: expected 2..64" in capsys.readouterr().err


# ---------------------------------------------------------------- back-to-back calls (OSU style)

def test_back_to_back_calls_cost_the_hw_pools_invalidations_only():
    def latency(preset, engine="des", **workload):
        fabric = {"preset": preset, "nodes": 8}
        if preset.startswith("cxl"):
            fabric["cxl"] = {"coherence": workload.pop("coherence")}
        algorithm = "cxl_pool" if preset.startswith("cxl") else "recursive_doubling"
        scenario = config.from_dict({"engine": engine, "fabric": fabric,
                                     "workload": {"algorithm": algorithm, "sizes": [64, 65536], **workload}})
        return [r["latency_us"] for r in run(scenario)]
    fresh, steady = latency("cxl3-pool", coherence="hw"), latency("cxl3-pool", coherence="hw", warmup=2, iterations=3)
    # hw: every later call first takes the flag and slot lines back from the previous call's readers.
    assert all(s > f + 0.1 for f, s in zip(fresh, steady))
    # Flush mode leaves no cached copies behind (the readers dropped them); the network keeps no state.
    for preset, kw in (("cxl3-pool", {"coherence": "flush"}), ("ib-hdr", {})):
        assert latency(preset, warmup=2, iterations=3, **dict(kw)) == pytest.approx(latency(preset, **dict(kw)),
                                                                                    rel=1e-12)
    # The per-call time of a loop is the loop's span divided by the timed calls.
    t = CXLPoolTransport(get_cxl_preset("cxl3-pool"), 4, coherence="hw")
    one = runner.run(t, "allgather", "cxl_pool", 4096).latency_ns       # call 1
    two = runner.run(t, "allgather", "cxl_pool", 4096).latency_ns       # call 2, the pool as call 1 left it
    t2 = CXLPoolTransport(get_cxl_preset("cxl3-pool"), 4, coherence="hw")
    assert runner.run(t2, "allgather", "cxl_pool", 4096, iterations=2).latency_ns == pytest.approx((one + two) / 2)
    with pytest.raises(InputError, match="workload.iterations: the closed forms cost one call on a fresh fabric"):
        latency("cxl3-pool", engine="analytic", coherence="hw", iterations=2)
    with pytest.raises(InputError, match="workload.iterations: expected an integer >= 1, got 0"):
        runner.run(t2, "allgather", "cxl_pool", 64, iterations=0)


BARRIER_CALLS = ((False, True), (False, False), (True, True), (False, False), (False, True), (True, True))
"""(zero_copy, carries data): zero-byte calls (barriers) between data calls must not flip the buffer."""


def _emulator_rank_with_barriers(comm, m):
    comm.enable_log(2000)
    for call, (zero_copy, data) in enumerate(BARRIER_CALLS):
        if not data:
            comm.barrier()
        elif zero_copy:
            view = comm.send_view(m)
            view[:] = np.frombuffer(contents(comm.rank, call, m), np.uint8)
            comm.allgather_zero_copy(view)
        else:
            comm.allgather(np.frombuffer(contents(comm.rank, call, m), np.uint8), np.empty(comm.size * m, np.uint8))
    lay = comm.pool.layout
    return [(EMU_OPS[op], _where(off, lay.flags_offset, lay.data_offset, lay.slot_stride, comm.size))
            for op, off, arg in comm.log_events().tolist() if op in (PoolEvent.WRITE, PoolEvent.READ) and arg > 0]


def test_emulator_and_des_pick_the_same_buffers_when_barriers_come_between_calls():
    p, m = 2, 100
    emulated = run_local(p, _emulator_rank_with_barriers, args=(m,), slot_bytes=m, timeout_s=30.0)
    t = CXLPoolTransport(get_cxl_preset("cxl3-pool"), p, coherence="hw")
    t.enable_log()

    def rank(r):
        ep = t.endpoint(r)
        for call, (zero_copy, data) in enumerate(BARRIER_CALLS):
            size = m if data else 0
            yield from (des_zero if zero_copy else des_copy)(ep, size, contents(r, call, size))
    t.run({r: rank(r) for r in range(p)})
    lay = PoolLayout(p, m)
    for r in range(p):
        des = [(EMU_OPS[op], _where(off, 0, lay.data_offset, lay.stride_bytes, p))
               for rr, op, off, arg in t.log if rr == r and op in (PoolEvent.WRITE, PoolEvent.READ) and arg > 0]
        assert des == emulated[r], r
        buffers = [where[1] for op, where in des if op == "write"]
        assert buffers == [1, 0, 1, 0], buffers  # four data calls alternate; the two barriers do not count
