"""Training modes beyond the first slice: EDDIS hybrid, Horovod, flow-level collectives, who aggregates
in sync mode, transient slowdowns and failed nodes."""
import doctest

import numpy as np
import pytest

from cxlsim.errors import InputError, RunError
from cxlsim.fabric import topology
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.presets import get_preset
from cxlsim.models.collectives import analytic
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.models.training import asynchronous, cluster, convergence, core, ddp, flow, horovod, hybrid, modes, stragglers, sync
from cxlsim.models.training.core import MIB


def spec_of(nodes, interconnect="ib-hdr", precision="amp", **extra):
    return cluster.from_dict({"interconnect": interconnect, "precision": precision, "nodes": nodes, **extra})


MIXED = [{"gpu": "v100", "repeat": 2}, {"gpu": "gtx1080ti", "repeat": 2}]


@pytest.mark.parametrize("module", [hybrid, horovod, flow, stragglers, convergence])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_every_mode_is_registered():
    assert set(modes.names()) == {"sync", "async", "hybrid", "ddp", "horovod"}


# ---------------------------------------------------------------- hybrid

def test_hybrid_rounds_close_on_the_counter_and_every_ticket_is_accounted_for():
    spec = spec_of(MIXED, memory_servers=2)
    job = core.make_job(spec, "resnet50")
    for R in (2, 4, 7):
        r = hybrid.run_hybrid(spec, job, steps=6, round_size=R, staleness=100, seed=1)
        x = r.extra
        assert x["rounds_applied"] == 6 and len(r.step_end_ns) == 6
        assert list(r.step_end_ns) == sorted(r.step_end_ns) and r.elapsed_ns == r.step_end_ns[-1]
        assert x["accepted"] + x["dropped"] == 6 * R == x["atomics"] - x["unused_after_budget"]
        assert x["dropped"] == 0 and sum(x["staleness_histogram"].values()) == x["accepted"]
        assert r.samples == x["accepted"] * job.batch == sum(w.samples for w in r.workers)
        assert r.params["round_size"] == R
    # The V100s are 3.6x faster than the 1080 Tis: they take most tickets, and the slow workers'
    # contributions land in later rounds than the parameters they started from (late, folded).
    assert x["per_worker_accepted"][0] > x["per_worker_accepted"][3]
    assert max(x["staleness_histogram"]) >= 1


@pytest.mark.parametrize("s", [0, 1, 2])
def test_hybrid_staleness_bound_is_respected(s):
    spec = spec_of(MIXED)
    job = core.make_job(spec, "resnet50")
    r = hybrid.run_hybrid(spec, job, steps=8, staleness=s, seed=2, cv=0.1)
    x = r.extra
    assert max(x["staleness_histogram"]) <= s
    assert x["accepted"] + x["dropped"] == 8 * spec.size
    if s == 0:  # the slow GPUs' gradients always come a round late: dropped, and counted as wasted
        assert x["dropped"] > 0 and sum(x["per_worker_accepted"][2:]) < sum(x["per_worker_dropped"][2:]) + 1
    loose = hybrid.run_hybrid(spec, job, steps=8, staleness=50, seed=2, cv=0.1)
    assert loose.extra["dropped"] == 0
    assert loose.throughput_samples_per_s >= r.throughput_samples_per_s


def test_hybrid_counter_takes_its_latencies_from_the_cxl_preset():
    import dataclasses

    spec = spec_of([{"gpu": "v100", "repeat": 4}])
    job = core.make_job(spec, "resnet50")
    cxl3 = get_cxl_preset("cxl3-pool")
    # The preset's figures: 2 x (host port 25 + link 2.5 + switch 50 + link 2.5) + media 90 = 250 ns.
    assert hybrid.CounterCosts.of_pool(cxl3) == hybrid.CounterCosts(cxl_load_ns=250.0, device_atomic_service_ns=90.0)
    r = hybrid.run_hybrid(spec, job, steps=2, counter="cxl-device", seed=0)
    assert r.params["counter_pool"] == "cxl3-pool" and r.params["counter_costs"] == {"cxl_load_ns": 250.0,
                                                                                     "device_atomic_service_ns": 90.0}
    # A slower switch and media move the counter's atomic with them.
    slow = dataclasses.replace(cxl3, switch=dataclasses.replace(cxl3.switch, hop_latency_ns=100.0),
                               device=dataclasses.replace(cxl3.device, media_latency_ns=150.0))
    costs = hybrid.CounterCosts.of_pool(slow)
    assert (costs.cxl_load_ns, costs.device_atomic_service_ns) == (2 * (25 + 2.5 + 100 + 2.5) + 150, 150.0)
    r = hybrid.run_hybrid(spec, job, steps=2, counter="cxl-device", counter_costs=costs, seed=0)
    assert r.extra["atomic_min_ns"] == pytest.approx(costs.cxl_load_ns + costs.device_atomic_service_ns)
    assert r.params["counter_pool"] is None  # the figures were given, not a preset's


def test_hybrid_counter_atomic_costs_by_placement():
    spec = spec_of([{"gpu": "v100", "repeat": 4}])
    job = core.make_job(spec, "resnet50")
    net = build(topology.star(5), get_preset("ib-hdr"), Environment())
    cm = analytic.CostModel.from_network(net, core.DEFAULT_TRAINING_CHUNK_BYTES)
    costs = hybrid.CounterCosts.of_pool(get_cxl_preset("cxl3-pool"))
    got = {c: hybrid.run_hybrid(spec, job, steps=3, counter=c, seed=0).extra for c in hybrid.COUNTER_PLACEMENTS}
    # RDMA: request and reply are 8-byte messages through the fabric (o + wire + o each way).
    assert got["rdma"]["atomic_min_ns"] == pytest.approx(2 * cm.T(8), rel=1e-9)
    # CXL 3.x device atomic: one pool round trip plus the device's execution.
    assert got["cxl-device"]["atomic_min_ns"] == pytest.approx(costs.cxl_load_ns + costs.device_atomic_service_ns)
    # Flush-mode flag lock: own flag, W-1 other flags, then 3 round trips in the critical section.
    assert got["cxl-flush-lock"]["atomic_min_ns"] == pytest.approx((4 + 3) * costs.cxl_load_ns)
    assert got["cxl-device"]["atomic_min_ns"] < got["cxl-flush-lock"]["atomic_min_ns"] < got["rdma"]["atomic_min_ns"]
    # The RDMA atomic queues behind gradient pushes on the memory server's link; the CXL ones do not.
    assert got["rdma"]["atomic_mean_ns"] > got["rdma"]["atomic_min_ns"]
    # Contended lock: the critical sections serialise, so a 16-worker lock costs more per atomic.
    big = spec_of([{"gpu": "v100", "repeat": 16}])
    lock16 = hybrid.run_hybrid(big, core.make_job(big, "resnet50"), steps=2, counter="cxl-flush-lock", seed=0)
    assert lock16.extra["atomic_min_ns"] == pytest.approx(19 * costs.cxl_load_ns)
    assert lock16.extra["atomic_mean_ns"] > lock16.extra["atomic_min_ns"]


def test_hybrid_homogeneous_is_at_least_as_fast_as_sync_and_matches_async_throughput():
    spec = spec_of([{"gpu": "rtx3090", "repeat": 4}], memory_servers=2, server_cores=2)
    job = core.make_job(spec, "resnet50")
    h = hybrid.run_hybrid(spec, job, steps=10, seed=0)
    s = sync.run_sync(spec, job, steps=10, seed=0)
    assert h.throughput_samples_per_s >= s.throughput_samples_per_s
    assert h.extra["dropped"] == 0


def test_hybrid_bad_inputs():
    spec = spec_of(MIXED)
    job = core.make_job(spec, "resnet50")
    with pytest.raises(InputError, match="round_size: expected an integer >= 1"):
        hybrid.run_hybrid(spec, job, steps=1, round_size=0)
    with pytest.raises(InputError, match="staleness: expected an integer >= 0 .*got -1"):
        hybrid.run_hybrid(spec, job, steps=1, staleness=-1)
    with pytest.raises(InputError, match="counter: expected one of rdma, cxl-device, cxl-flush-lock, got 'nvlink'"):
        hybrid.run_hybrid(spec, job, steps=1, counter="nvlink")
    with pytest.raises(InputError, match="cxl_load_ns: expected a time >= 0 ns"):
        hybrid.CounterCosts(cxl_load_ns=-1.0, device_atomic_service_ns=90.0)


# ---------------------------------------------------------------- Horovod and the flow-level collectives

def test_fusion_packs_what_is_ready_each_cycle_up_to_the_threshold():
    G = 97 * MIB + 12345
    # A cycle longer than the backward pass: one tick fuses everything, split at the threshold.
    plan = horovod.fusion_plan([0.0, 1.0e6], [50e6, 60e6], G, cycle_ns=100e6, threshold_bytes=64 * MIB)
    assert [size for _, size in plan] == [64 * MIB, G - 64 * MIB] and {t for t, _ in plan} == {100e6}
    # 1 ms cycles: a buffer per cycle, paced by the slower rank (ready 1/60 of G per ms after its start).
    plan = horovod.fusion_plan([0.0, 1.0e6], [50e6, 60e6], G, cycle_ns=1e6, threshold_bytes=128 * MIB)
    assert len(plan) == 60 and sum(s for _, s in plan) == G
    assert plan[0] == (2e6, int(G / 60)) and all(b[0] > a[0] for a, b in zip(plan, plan[1:]))
    assert all(size <= 128 * MIB for _, size in plan)


def test_horovod_records_which_defaults_it_used():
    spec = spec_of(MIXED)
    job = core.make_job(spec, "resnet50")
    now = horovod.run_horovod(spec, job, steps=2, seed=0)
    old = horovod.run_horovod(spec, job, steps=2, seed=0, defaults="pre-v0.21")
    custom = horovod.run_horovod(spec, job, steps=2, seed=0, cycle_time_ns=2.5e6)
    assert (now.params["horovod_defaults"], now.params["fusion_threshold_bytes"], now.params["cycle_time_ns"]) == \
        ("v0.21+", 128 * MIB, 1e6)
    assert (old.params["horovod_defaults"], old.params["fusion_threshold_bytes"], old.params["cycle_time_ns"]) == \
        ("pre-v0.21", 64 * MIB, 5e6)
    assert custom.params["horovod_defaults"] == "custom"
    # Longer cycles fuse more per buffer: fewer, larger all-reduces.
    assert old.extra["fusion_buffers_per_step"] < now.extra["fusion_buffers_per_step"]
    with pytest.raises(InputError, match="defaults: expected one of v0.21\\+, pre-v0.21, got 'v1'"):
        horovod.run_horovod(spec, job, steps=1, defaults="v1")
    with pytest.raises(InputError, match="fusion_threshold_bytes: expected a size >= 1 B, got 0"):
        horovod.run_horovod(spec, job, steps=1, fusion_threshold_bytes=0)


def test_horovod_one_gpu_and_a_cycle_longer_than_the_step():
    spec = spec_of([{"gpu": "v100"}])
    job = core.make_job(spec, "resnet50")
    one = horovod.run_horovod(spec, job, steps=3, seed=0)
    it = job.iteration_ns[0]
    # One rank: nothing to reduce, but the optimizer still waits for the cycle that "fuses" the gradient.
    assert one.step_end_ns[0] == pytest.approx(it if it % 1e6 == 0 else 1e6 * (it // 1e6 + 1))
    two = spec_of([{"gpu": "v100", "repeat": 2}])
    job2 = core.make_job(two, "resnet50")
    slow = horovod.run_horovod(two, job2, steps=1, seed=0, cycle_time_ns=1e9)
    cm = flow.cost_model(two, core.DEFAULT_TRAINING_CHUNK_BYTES)
    end = flow.ring_allreduce(cm, [0, 1], job2.gradient_bytes, [1e9, 1e9], [1 / x for x in job2.reduce_bw_bytes_per_ns])
    assert slow.step_end_ns[0] == pytest.approx(max(end), rel=1e-12)  # all fused at the 1 s tick, one ring


@pytest.mark.parametrize("mode, extra", [
    ("horovod", {}), ("horovod", {"defaults": "pre-v0.21"}), ("ddp", {}), ("ddp", {"overlap": False}),
])
def test_flow_level_collectives_match_the_des_within_2_percent(mode, extra):
    # Heterogeneous GPUs (different reduction speeds), two GPUs on some nodes (shared-memory ring
    # edges), jitter: every rank starts its all-reduces at a different time.
    spec = spec_of([{"gpu": "v100", "repeat": 2, "gpus": 2}, {"gpu": "gtx1080ti", "repeat": 2}, {"gpu": "t4"}])
    job = core.make_job(spec, "resnet50")
    des = modes.simulate(spec, job, mode, steps=4, seed=5, cv=0.2, collective="des", **extra)
    fl = modes.simulate(spec, job, mode, steps=4, seed=5, cv=0.2, collective="flow", **extra)
    assert des.events > 0 and fl.events == 0
    assert fl.elapsed_ns == pytest.approx(des.elapsed_ns, rel=0.02)
    assert fl.step_end_ns == pytest.approx(des.step_end_ns, rel=0.02)
    for a, b in zip(des.workers, fl.workers):
        assert b.finished_ns == pytest.approx(a.finished_ns, rel=0.02)
    print(f"{mode} {extra}: DES {des.elapsed_ns:.1f} ns, flow {fl.elapsed_ns:.1f} ns, "
          f"difference {fl.elapsed_ns / des.elapsed_ns - 1:+.2e}")


def test_bad_collective():
    spec = spec_of(MIXED)
    job = core.make_job(spec, "resnet50")
    with pytest.raises(InputError, match="collective: expected one of flow, des, got 'nccl'"):
        ddp.run_ddp(spec, job, steps=1, collective="nccl")
    with pytest.raises(InputError, match="collective: expected one of flow, des, got 'nccl'"):
        horovod.run_horovod(spec, job, steps=1, collective="nccl")


# ---------------------------------------------------------------- sync: who aggregates

def test_sync_aggregation_by_the_workers_over_the_shared_region():
    spec = spec_of([{"gpu": "rtx3090", "repeat": 8}])
    job = core.make_job(spec, "resnet50")
    servers = sync.run_sync(spec, job, steps=3, seed=1, cv=0.1)
    workers = sync.run_sync(spec, job, steps=3, seed=1, cv=0.1, aggregation="workers")
    assert servers.params["aggregation"] == "memory servers" and workers.params["aggregation"] == "workers"
    assert workers.params["slice_bytes"] == -(-job.gradient_bytes // 8)
    for w in workers.workers:
        assert w.busy_ns + w.communicating_ns + w.waiting_ns == pytest.approx(w.finished_ns, rel=1e-12)
    # One memory-server core reduces 7 x 97.5 MiB per step at CPU speed; 8 GPUs share that work.
    assert workers.elapsed_ns < servers.elapsed_ns
    with pytest.raises(InputError, match="aggregation: expected 'servers' or 'workers', got 'gpu'"):
        sync.run_sync(spec, job, steps=1, aggregation="gpu")


def test_sync_by_workers_on_one_gpu_is_the_compute_time():
    spec = spec_of([{"gpu": "v100"}])
    job = core.make_job(spec, "resnet50")
    r = sync.run_sync(spec, job, steps=2, seed=0, aggregation="workers")
    assert r.step_end_ns == pytest.approx((job.iteration_ns[0], 2 * job.iteration_ns[0]), rel=1e-12)


# ---------------------------------------------------------------- stragglers, slowdowns, failed nodes

def test_transient_slowdowns():
    rng = np.random.default_rng(3)
    m = stragglers.multipliers(rng, 4000, 4, 0.0, slowdown=stragglers.Slowdown(probability=0.05, factor=1.5,
                                                                                 duration_steps=10))
    slow = (m == 1.5).mean()
    # A two-state chain: a slow episode of 10 steps starts with p = 0.05 per normal step.
    assert slow == pytest.approx(0.05 * 10 / (1 + 0.05 * 10), abs=0.03)
    assert set(np.unique(m)) == {1.0, 1.5}
    spec = spec_of(MIXED)
    job = core.make_job(spec, "resnet50")
    calm = sync.run_sync(spec, job, steps=6, seed=4)
    bumpy = sync.run_sync(spec, job, steps=6, seed=4, slowdown=stragglers.Slowdown(probability=0.3, factor=1.5,
                                                                                    duration_steps=2))
    assert bumpy.elapsed_ns > calm.elapsed_ns and bumpy.params["slowdown"]["factor"] == 1.5
    with pytest.raises(InputError, match="slowdown.factor: expected a finite multiplier >= 1, got 0.5"):
        stragglers.Slowdown(probability=0.1, factor=0.5, duration_steps=1)
    with pytest.raises(InputError, match="slowdown.probability: expected a probability in \\[0, 1\\], got 2"):
        stragglers.Slowdown(probability=2, factor=1.5, duration_steps=1)


def test_failed_node_stalls_synchronous_modes_and_not_async_or_hybrid():
    spec = spec_of(MIXED)
    job = core.make_job(spec, "resnet50")
    fail = stragglers.Failure(worker=1, step=2)
    for mode, extra in (("sync", {}), ("sync", {"aggregation": "workers"}), ("ddp", {}), ("horovod", {}),
                        ("horovod", {"collective": "des"})):
        with pytest.raises(RunError, match="worker 1 failed at iteration 2 and this synchronous mode waits"):
            modes.simulate(spec, job, mode, steps=5, seed=0, failure=fail, **extra)
    ok = hybrid.run_hybrid(spec, job, steps=5, seed=0, failure=fail)
    assert ok.extra["rounds_applied"] == 5
    assert ok.workers[1].steps <= 2 and ok.params["failure"] == {"worker": 1, "step": 2}
    healthy = hybrid.run_hybrid(spec, job, steps=5, seed=0)
    assert ok.elapsed_ns > healthy.elapsed_ns
    a = asynchronous.run_async(spec, job, steps=5, seed=0, failure=fail)
    assert a.workers[1].steps == 2 and sum(w.steps for w in a.workers) == 5 * spec.size
    with pytest.raises(InputError, match="failure.worker: expected a worker index in 0..3, got 4"):
        sync.run_sync(spec, job, steps=1, failure=stragglers.Failure(worker=4, step=0))


def test_a_failure_at_or_past_the_last_iteration_is_refused_not_ignored():
    spec = spec_of(MIXED)
    job = core.make_job(spec, "resnet50")
    with pytest.raises(InputError, match=r"failure.step: 5 is past the last iteration \(4\)"):
        modes.simulate(spec, job, "sync", steps=5, seed=0, failure=stragglers.Failure(worker=1, step=5))
    with pytest.raises(InputError, match="failure.step: 40 is past the last iteration"):
        asynchronous.run_async(spec, job, steps=10, seed=0, failure=stragglers.Failure(worker=1, step=40))
    last = asynchronous.run_async(spec, job, steps=10, seed=0, failure=stragglers.Failure(worker=1, step=39))
    assert last.workers[1].steps <= 39


def test_determinism_by_seed_for_the_new_modes():
    spec = spec_of(MIXED)
    job = core.make_job(spec, "yolov5m")
    slow = stragglers.Slowdown(probability=0.2, factor=1.4, duration_steps=2)
    for mode, extra in (("hybrid", {"staleness": 1}), ("horovod", {}), ("sync", {"aggregation": "workers"})):
        a = modes.simulate(spec, job, mode, steps=4, seed=9, cv=0.3, slowdown=slow, **extra)
        b = modes.simulate(spec, job, mode, steps=4, seed=9, cv=0.3, slowdown=slow, **extra)
        c = modes.simulate(spec, job, mode, steps=4, seed=10, cv=0.3, slowdown=slow, **extra)
        assert a.worker_rows() == b.worker_rows() and a.elapsed_ns == b.elapsed_ns and a.extra == b.extra
        assert a.intervals == b.intervals
        assert a.elapsed_ns != c.elapsed_ns


# ---------------------------------------------------------------- convergence model (optional, labelled)

def test_convergence_discount_and_estimates_are_monotone_in_staleness():
    from cxlsim.models.training import convergence

    ds = [convergence.discount(x) for x in (0, 0.5, 1, 2, 8)]
    assert ds[0] == 1.0 and all(a > b for a, b in zip(ds, ds[1:]))
    with pytest.raises(InputError, match="staleness: expected >= 0"):
        convergence.discount(-1)
    spec = spec_of(MIXED)
    job = core.make_job(spec, "resnet50")
    synced = sync.run_sync(spec, job, steps=8, seed=1)
    est = convergence.estimate(synced, modes.get("sync").convergence)
    assert est["progress_factor"] == 1.0 and "ESTIMATE" in est["label"]
    assert est["time_to_target_s"] == pytest.approx(90 * 1_281_167 / synced.throughput_samples_per_s)
    # Hybrid: a looser staleness bound accepts staler contributions: the factor can only drop,
    # while throughput (accepted samples/s) can only rise.
    factors, rates = [], []
    for s in (0, 1, 2, 4):
        r = hybrid.run_hybrid(spec, job, steps=8, staleness=s, seed=1)
        factors.append(modes.get(r.mode).convergence(r))
        rates.append(r.throughput_samples_per_s)
    assert factors[0] == 1.0
    assert all(a >= b for a, b in zip(factors, factors[1:])) and factors[-1] < 1.0
    assert all(a <= b * (1 + 1e-9) for a, b in zip(rates, rates[1:]))
    # Async: exchanging less often (tau) means more centre updates by others between a worker's exchanges.
    a1 = modes.get("async").convergence(asynchronous.run_async(spec, job, steps=8, tau=1, seed=1))
    a4 = modes.get("async").convergence(asynchronous.run_async(spec, job, steps=8, tau=4, seed=1))
    assert 0 < a4 < a1 < 1


# ---------------------------------------------------------------- cxlsim train: new modes and outputs

def test_train_cli_hybrid_and_horovod_write_a_timeline_and_the_labelled_estimate(tmp_path, capsys):
    import json

    from cxlsim import cli

    path = tmp_path / "c.yaml"
    path.write_text("name: mix\ninterconnect: ib-hdr\nprecision: amp\nnodes:\n  - {gpu: v100, repeat: 2}\n"
                    "  - {gpu: gtx1080ti}\n")
    out = tmp_path / "h"
    assert cli.main(["train", str(path), "--model", "resnet50", "--mode", "hybrid", "--steps", "4", "--seed", "3",
                     "--staleness", "1", "--counter", "cxl-device", "--convergence", "--slowdown", "0.1,1.5,2",
                     "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ESTIMATE from the staleness-aware convergence model" in printed and "time to target" in printed
    head = json.loads((out / "summary.json").read_text())
    assert head["params"]["counter"] == "cxl-device" and head["params"]["staleness"] == 1
    assert head["params"]["slowdown"] == {"probability": 0.1, "factor": 1.5, "duration_steps": 2}
    assert head["convergence_model"]["progress_factor"] <= 1.0
    png = (out / "timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp-")]  # atomic writes left nothing behind
    out2 = tmp_path / "v"
    assert cli.main(["train", str(path), "--model", "resnet50", "--mode", "horovod", "--steps", "2", "--seed", "3",
                     "--horovod-defaults", "pre-v0.21", "--output", str(out2)]) == 0
    head = json.loads((out2 / "summary.json").read_text())
    assert (head["params"]["horovod_defaults"], head["params"]["cycle_time_ns"]) == ("pre-v0.21", 5e6)
    assert "convergence_model" not in head and (out2 / "timeline.png").exists()
    capsys.readouterr()
    bad = [(["--mode", "sync", "--fail", "1:x"], 2, "--fail: expected WORKER:ITERATION"),
           (["--mode", "sync", "--fail", "1:1"], 1, "worker 1 failed at iteration 1"),
           (["--mode", "ddp", "--slowdown", "0.1,1.5"], 2, "--slowdown: expected PROBABILITY,FACTOR,STEPS"),
           (["--mode", "horovod", "--cycle-time", "5"], 2, "--cycle-time: expected a time with a unit")]
    for args, code, message in bad:
        assert cli.main(["train", str(path), "--model", "resnet50", *args, "--output", str(tmp_path / "x")]) == code
        assert message in capsys.readouterr().err


# ---------------------------------------------------------------- sync with the store on a CXL pool

def test_sync_on_a_cxl_pool_store():
    from cxlsim.models.training import pool_store

    spec = spec_of([{"gpu": "v100", "repeat": 3}, {"gpu": "rtx3090"}])
    job = core.make_job(spec, "resnet50")
    hw = sync.run_sync(spec, job, steps=3, seed=1, cv=0.1, aggregation="workers", pool="cxl3-pool")
    fl = sync.run_sync(spec, job, steps=3, seed=1, cv=0.1, aggregation="workers", pool="cxl3-pool",
                        coherence="flush")
    assert hw.params["store"] == "CXL pool cxl3-pool" and hw.params["coherence"] == "hw"
    assert hw.params["switch_levels"] == 1 and fl.params["coherence"] == "flush"
    for r in (hw, fl):
        for w in r.workers:
            assert w.busy_ns + w.communicating_ns + w.waiting_ns == pytest.approx(w.finished_ns, rel=1e-12)
    # Flush mode pays clflushopt over every gradient line and polls by invalidating: slower than hw.
    assert fl.elapsed_ns > hw.elapsed_ns
    # The 'landed' shortcut of flush-mode polling against the transport's own poll loop, event by event.
    J = stragglers.multipliers(np.random.default_rng(1), 3, 4, 0.1)
    noise = {"cv": 0.1, "slowdown": None, "failure": None}
    kw = dict(pool="cxl3-pool", coherence="flush", devices=1)
    landed = pool_store.run_sync_on_pool(spec, job, 3, 1, J, None, noise, **kw)
    spin = pool_store.run_sync_on_pool(spec, job, 3, 1, J, None, noise, flush_poll="spin", **kw)
    assert landed.elapsed_ns == pytest.approx(spin.elapsed_ns, rel=1e-4)
    assert spin.events > landed.events
    # 4 MiB pool chunks (the default) against 1 MiB: the same times to 0.1%, fewer events.
    fine = pool_store.run_sync_on_pool(spec, job, 3, 1, J, None, noise, chunk_bytes=1 << 20, **kw)
    assert landed.params["pool_chunk_bytes"] == 4 << 20
    assert landed.elapsed_ns == pytest.approx(fine.elapsed_ns, rel=1e-3) and fine.events > landed.events
    # 16 nodes do not fit one 256-lane switch with a device: CXL 3.x uses a two-level tree, CXL 2.0 cannot.
    big = spec_of([{"gpu": "v100", "repeat": 16}])
    bjob = core.make_job(big, "resnet50")
    assert sync.run_sync(big, bjob, steps=1, seed=0, aggregation="workers", pool="cxl3-pool").params["switch_levels"] == 2
    with pytest.raises(InputError, match="switch ports: 16 hosts \\+ 1 device ports need 17"):
        sync.run_sync(big, bjob, steps=1, seed=0, aggregation="workers", pool="cxl2-pool", coherence="flush")
    with pytest.raises(InputError, match="aggregation: a CXL-pool store has no CPU next to the memory"):
        sync.run_sync(spec, job, steps=1, pool="cxl3-pool")
    with pytest.raises(InputError, match="pool: a CXL-pool store runs one worker per node"):
        sync.run_sync(spec_of([{"gpu": "v100", "gpus": 2}]), core.make_job(spec_of([{"gpu": "v100", "gpus": 2}]),
                       "resnet50"), steps=1, aggregation="workers", pool="cxl3-pool")
