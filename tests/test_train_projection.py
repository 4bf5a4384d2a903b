"""The DES's projection of `cxlsim bench train` runs (cxlsim/train_projection.py) and the DES modes it uses
(models/training/pool_sync.py, pool_shared.py, ddp on a calibrated pool), on synthetic train.json records."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cxlsim import train_clock, train_costs, train_phases
from cxlsim import train_projection as tp
from cxlsim.coherence import Coherence
from cxlsim.emulator.training import elastic, run_record
from cxlsim.errors import InputError
from cxlsim.models.collectives import pool_collective_forms as forms
from cxlsim.models.training import cluster, core, pool_shared, pool_sync, sync
from cxlsim.models.training.pool_allreduce import PoolAllreduce
from cxlsim.models.training.stragglers import measured_multipliers

PROFILE = os.path.join(os.path.dirname(__file__), "data", "local_host_profile_np2.json")


@pytest.fixture(scope="module")
def profile():
    with open(PROFILE) as fh:
        return json.load(fh)


def record(mode, *, local_s, comm_s, nranks=2, steps=12, G=80000, batch=16, coherence="hw", buckets=None,
           overlap=None, evals=((0.5, 0.8), (1.0, 0.9))):
    """A schema-valid train.json: rank r's step s spends local_s[r] (a number or a list per step) outside pool
    calls and comm_s in them; evals are (fraction of the steps, accuracy)."""
    ranks = []
    for r in range(nranks):
        loc = np.broadcast_to(np.asarray(local_s[r], float), (steps,))
        step = loc + comm_s
        ranks.append(run_record.rank_entry(r, step, loc, [comm_s] * steps, [1.0] * steps, np.cumsum(step)))
    ev = [{"t_s": float(ranks[0]["t_end_s"][int(f * steps) - 1]), "step": int(f * steps), "loss": 1 - a,
           "accuracy": a} for f, a in evals]
    rec = {"mode": mode, "np": nranks, "model": "mlp", "dataset": "synthetic", "steps": steps, "batch_size": batch,
           "lr": 0.1, "seed": 1, "coherence": coherence, "pool": "shm", "param_count": G // 8, "param_bytes": G,
           "overlap": overlap, "buckets": buckets, "lockstep": False, "factors": [1.0] * nranks,
           "gpus": [None] * nranks, "stragglers": None, "placement": "unknown", "ranks": ranks, "eval": ev,
           "throughput_samples_per_s": run_record.throughput_samples_per_s(ranks, batch),
           "time_to_accuracy_s": run_record.time_to_accuracy(ev, [a for _, a in evals]),
           "final_accuracy": ev[-1]["accuracy"], "failed_ranks": [], "versions": {}}
    return run_record.validate(rec)


def allreduce_form(profile, coherence, G, W, large_bytes=tp.DEFAULT_LARGE_BYTES):
    """The closed form of the pool all-reduce the projection runs for a G-byte gradient, ns."""
    preset = tp.pool_preset(profile, coherence, G, W)
    fig = PoolAllreduce(tp._spec(W), preset, coherence=coherence).figures
    form = forms.allreduce_large_cost if G >= large_bytes else forms.allreduce_small_cost
    return form(fig, W, G)


@pytest.mark.parametrize("coherence", list(Coherence))
@pytest.mark.parametrize("G", [4096, 80000, 1 << 20])
def test_pool_sync_step_is_compute_plus_the_allreduce_closed_form(profile, coherence, G):
    W, steps, t = 2, 4, 1e6
    preset = tp.pool_preset(profile, coherence, G, W)
    spec = tp._spec(W)
    job = core.Job(model="mlp", batch=8, precision="fp32", gradient_dtype="fp64", gradient_bytes=G,
                   iteration_ns=(t,) * W, reduce_bw_bytes_per_ns=(preset.host.reduce_bw_bytes_per_ns,) * W)
    for large in (0, 1 << 30):
        r = pool_sync.run_sync_allreduce(spec, job, steps, 1, np.ones((steps, W)), None, {}, pool=preset,
                                         coherence=coherence, large_bytes=large)
        assert r.params["allreduce"] == ("cxl_pool_large" if large == 0 else "cxl_pool")
        fig = PoolAllreduce(spec, preset, coherence=coherence).figures
        form = (forms.allreduce_large_cost if large == 0 else forms.allreduce_small_cost)(fig, W, G)
        assert r.elapsed_ns == pytest.approx(steps * (t + form), abs=steps * 1.0)  # to 1 ns per step


def test_slot_chunking_runs_one_allreduce_per_slot(profile):
    W, G, slot = 2, 3 * 65536, 65536
    preset = tp.pool_preset(profile, Coherence.HW, slot, W)
    spec = tp._spec(W)
    job = core.Job(model="mlp", batch=8, precision="fp32", gradient_dtype="fp64", gradient_bytes=G,
                   iteration_ns=(1e5,) * W, reduce_bw_bytes_per_ns=(preset.host.reduce_bw_bytes_per_ns,) * W)
    whole = pool_sync.run_sync_allreduce(spec, job, 1, 1, np.ones((1, W)), None, {}, pool=preset,
                                         coherence=Coherence.HW, large_bytes=0)
    parts = pool_sync.run_sync_allreduce(spec, job, 1, 1, np.ones((1, W)), None, {}, pool=preset,
                                         coherence=Coherence.HW, large_bytes=0, slot_bytes=slot)
    fig = PoolAllreduce(spec, preset).figures
    assert parts.elapsed_ns - 1e5 == pytest.approx(3 * forms.allreduce_large_cost(fig, W, slot), abs=3.0)
    assert whole.elapsed_ns != parts.elapsed_ns and parts.params["slot_bytes"] == slot


def test_cli_sync_allreduce_on_a_pool_preset_and_its_refusals():
    spec = cluster.from_dict({"interconnect": "ib-hdr", "precision": "amp", "nodes": [{"gpu": "v100", "repeat": 2}]})
    job = core.make_job(spec, "resnet50")
    r = sync.run_sync(spec, job, steps=2, seed=1, aggregation="allreduce", pool="cxl3-pool")
    assert r.params["aggregation"] == "allreduce" and r.params["pool"] == "cxl3-pool"
    assert r.elapsed_ns > 2 * job.iteration_ns[0]
    with pytest.raises(InputError, match="'allreduce' all-reduces on a CXL pool"):
        sync.run_sync(spec, job, steps=1, aggregation="allreduce")
    with pytest.raises(InputError, match="pool_devices: the pool all-reduce runs on one device"):
        sync.run_sync(spec, job, steps=1, aggregation="allreduce", pool="cxl3-pool", pool_devices=2)


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_sync_projection_of_a_run_whose_comm_is_the_closed_form_is_exact(profile, coherence):
    G, W = 80000, 2
    comm = allreduce_form(profile, Coherence.parse(coherence), G, W) / 1e9
    run = record("sync", local_s=[2e-3, 2e-3], comm_s=comm, G=G, coherence=coherence)
    row = tp.project(run, profile, pass_ns=0.0, bucket_ns=0.0)
    assert row["throughput_error"] == pytest.approx(0.0, abs=1e-6)
    assert row["des_mode"] == tp.DES_MODES["sync"]
    for t in row["time_to_accuracy"]:
        assert t["error"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("coherence", list(Coherence))
def test_an_np_1_sync_step_pays_the_hand_off_and_the_one_rank_pool_call(profile, coherence):
    """The emulator's np 1 sync hands its gradient to its thread and calls the pool's all-reduce at every step;
    the DES's sync makes no call for one worker, so the projection adds both: a run whose comm is the hand-off
    plus the closed form of the one-rank small all-reduce is projected exactly."""
    G, handoff_ns = 80000, 70e3
    preset = tp.pool_preset(profile, coherence, G, 1)
    form = forms.allreduce_small_cost(PoolAllreduce(tp._spec(1), preset, coherence=coherence).figures, 1, G)
    assert form > 0 and tp.one_rank_allreduce_ns(preset, coherence, G, 81920) == pytest.approx(form, abs=1.0)
    run = record("sync", local_s=[2e-3], comm_s=(handoff_ns + form) / 1e9, nranks=1, G=G, coherence=coherence.value)
    row = tp.project(run, profile, pass_ns=0.0, bucket_ns=handoff_ns)
    assert row["throughput_error"] == pytest.approx(0.0, abs=1e-6)
    assert row["des"]["one_rank_handoff_ns"] == handoff_ns
    assert row["des"]["one_rank_allreduce_ns"] == pytest.approx(form, abs=1.0)
    two = tp.project(record("sync", local_s=[2e-3] * 2, comm_s=1e-4, G=G), profile, pass_ns=0.0, bucket_ns=handoff_ns)
    assert "one_rank_allreduce_ns" not in two["des"]  # at np 2 the DES makes the call itself


def test_sync_projection_waits_for_the_slower_rank(profile):
    """Rank 1 twice as slow: every step takes the slower rank's local time plus the all-reduce."""
    G, steps = 80000, 10
    form = allreduce_form(profile, Coherence.HW, G, 2)
    local = [1e-3, 2e-3]
    # the record's comm_s is made up (the projection replaces it); rank 0's wall step is the slower one's
    ranks = record("sync", local_s=local, comm_s=0.0, G=G, steps=steps)
    row = tp.project(ranks, profile, pass_ns=0.0, bucket_ns=0.0)
    assert row["projected_elapsed_s"] == pytest.approx(steps * (2e-3 + form / 1e9), rel=1e-6)
    assert row["projected_throughput"] == pytest.approx(2 * steps * 16 / row["projected_elapsed_s"], rel=1e-12)


def test_measured_multipliers_reproduce_the_times_and_refuse_bad_ones():
    J = measured_multipliers([2.0, 4.0], [[2.0, 8.0], [6.0, 4.0]])
    assert J.tolist() == [[1.0, 2.0], [3.0, 1.0]]
    with pytest.raises(InputError, match="compute_ns: expected steps x 2"):
        measured_multipliers([2.0, 4.0], [1.0, 2.0])
    with pytest.raises(InputError, match="compute_ns: expected times > 0"):
        measured_multipliers([2.0, 4.0], [[0.0, 1.0]])


def test_ddp_projection_overlap_hides_buckets_and_off_adds_them(profile):
    G, steps, local = 4 * 65536, 6, 2e-3
    on = tp.project(record("ddp", local_s=[local] * 2, comm_s=0.0, G=G, steps=steps, buckets=4, overlap=True),
                    profile, pass_ns=0.0, bucket_ns=0.0)
    run_off = record("ddp", local_s=[local] * 2, comm_s=0.0, G=G, steps=steps, buckets=4, overlap=False)
    off = tp.project(run_off, profile, pass_ns=0.0, bucket_ns=0.0)
    handed = tp.project(run_off, profile, pass_ns=0.0, bucket_ns=3000.0)
    form = allreduce_form(profile, Coherence.HW, G // 4, 2)
    assert on["des"]["buckets"] == 4 and off["des"]["overlap"] is False
    # overlap off: all four buckets after the local work; on: only the last bucket is exposed
    assert off["projected_elapsed_s"] == pytest.approx(steps * (local + 4 * form / 1e9), rel=1e-6)
    assert steps * (local + form / 1e9) * (1 - 1e-6) <= on["projected_elapsed_s"] < off["projected_elapsed_s"]
    # each bucket's hand-off to the communication thread comes before its all-reduce
    assert (handed["projected_elapsed_s"] - off["projected_elapsed_s"]) * 1e9 == pytest.approx(steps * 4 * 3000.0,
                                                                                              rel=1e-6)
    assert 0 < train_costs.handoff_ns(calls=20) < 1e9


def test_async_projection_shares_the_ticket_budget_and_never_waits(profile):
    steps, G = 8, 80000
    run = record("async", local_s=[1e-3, 3e-3], comm_s=0.0, G=G, steps=steps)
    preset = tp.pool_preset(profile, Coherence.HW, G, 2)
    spec = tp._spec(2)
    job = tp._job(run, preset, [train_clock.local_work_ns(r) for r in run["ranks"]])
    alone = pool_shared.run_async_on_pool(spec, job, steps=steps, local_ns=[[1e6], [3e6]], pool=preset,
                                          tau=100)  # no exchange: only the tickets touch the pool
    fast, slow = alone.extra["local_steps"]
    assert fast + slow == 2 * steps == alone.extra["tickets"] and (fast, slow) == (12, 4)
    costs = exchange_costs(G, push_ns=4000.0, read_ns=8000.0, ticket_ns=500.0)
    result, _ = tp._run_des(run, profile, 65536, 1 << 20, 0.0, exchange=costs)
    assert sum(result.extra["local_steps"]) == 2 * steps
    # each step of the fast worker: its local time, a ticket, a merge and a push, microseconds on this pool
    starts, _, ends = zip(*result.intervals[0])
    steps_ns = np.array(ends) - np.array(starts)
    assert np.all(steps_ns > 1e6) and np.all(steps_ns < 1.1e6)
    row = tp.project(run, profile, pass_ns=0.0, bucket_ns=0.0, exchange=costs)
    assert row["projected_throughput"] == pytest.approx(2 * steps * 16 / (result.elapsed_ns / 1e9), rel=1e-9)
    # calm steps of async: each rank's own rate, summed (every step of this record is calm)
    assert row["undisturbed_share"] == 1.0
    assert row["measured_undisturbed_throughput"] == pytest.approx(16 / 1e-3 + 16 / 3e-3, rel=1e-9)


def test_vector_passes_add_to_each_step(profile):
    steps, extra = 6, 5000.0
    run = record("sync", local_s=[1e-3, 1e-3], comm_s=0.0, steps=steps)
    base = tp.project(run, profile, pass_ns=0.0, bucket_ns=0.0)["projected_elapsed_s"]
    more = tp.project(run, profile, pass_ns=extra, bucket_ns=0.0)["projected_elapsed_s"]
    assert (more - base) * 1e9 == pytest.approx(steps * tp.VECTOR_PASSES["sync"][0] * extra, rel=1e-6)
    handed = tp.project(run, profile, pass_ns=0.0, bucket_ns=extra)["projected_elapsed_s"]
    assert (handed - base) * 1e9 == pytest.approx(steps * extra, rel=1e-6)  # sync: one hand-off per step
    assert train_costs.vector_pass_ns(1000, repeats=2, calls=5) > 0


def test_hybrid_projection_hands_the_faster_worker_more_tickets(profile):
    steps = 10
    run = record("hybrid", local_s=[1e-3, 3e-3], comm_s=0.0, steps=steps)
    result, _ = tp._run_des(run, profile, 65536, 1 << 20, 0.0)
    assert result.extra["tickets"] == steps * 2 == sum(result.extra["local_steps"])
    fast, slow = result.extra["local_steps"]
    assert fast > slow and fast + slow == 20
    for coherence in ("hw", "flush"):
        r, _ = tp._run_des(record("hybrid", local_s=[1e-3, 1e-3], comm_s=0.0, steps=4, coherence=coherence),
                           profile, 65536, 1 << 20, 0.0)
        assert r.params["counter"] == pool_shared.COUNTERS[Coherence.parse(coherence)]


def test_bad_records_are_input_errors_naming_the_key(profile, tmp_path):
    run = record("sync", local_s=[1e-3, 1e-3], comm_s=1e-5)
    bad = {k: v for k, v in run.items() if k != "param_bytes"}
    with pytest.raises(InputError, match="missing key"):
        tp.check_run(bad)
    with pytest.raises(InputError, match="ranks: expected 3 entries"):
        tp.check_run({**run, "np": 3})
    with pytest.raises(InputError, match="profile: the projection needs a local-host profile"):
        tp.pool_preset({"kind": "network"}, Coherence.HW, 64, 2)
    path = tmp_path / "train.json"
    path.write_text(json.dumps(bad))
    env = {**os.environ}
    out = subprocess.run([sys.executable, "-m", "cxlsim.train_projection", str(path), "--profile", PROFILE],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "param_bytes" in out.stderr and "Traceback" not in out.stderr


def test_cli_prints_the_table_and_writes_json(tmp_path):
    d = tmp_path / "run"
    run_record.write(str(d), record("sync", local_s=[1e-3, 1e-3], comm_s=1e-4))
    out_json = tmp_path / "rows.json"
    out = subprocess.run([sys.executable, "-m", "cxlsim.train_projection", str(d), "--profile", PROFILE,
                          "--json", str(out_json)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "sync" in out.stdout and "target (issue 19" in out.stdout
    rows = json.loads(out_json.read_text())
    assert rows[0]["mode"] == "sync" and rows[0]["throughput_error"] is not None


def sync_record(local, comm, extra):
    """A sync train.json in which every step ends together: rank w's step s spends local[w] outside the pool,
    waits for the slowest rank, then `comm` + extra[s] s in the all-reduce (extra: a descheduled rank)."""
    steps, slowest = len(extra), max(local)
    ends = np.cumsum(slowest + comm + np.asarray(extra, float))
    run = record("sync", local_s=local, comm_s=comm, steps=steps)
    for w, r in enumerate(run["ranks"]):
        r["comm_s"] = [slowest - local[w] + comm + e for e in extra]
        r["step_s"] = [local[w] + c for c in r["comm_s"]]
        r["t_end_s"] = ends.tolist()
    return run_record.validate(run)


def test_undisturbed_steps_leave_out_a_descheduled_pool_call_but_not_waiting(profile):
    comm = allreduce_form(profile, Coherence.HW, 80000, 2) / 1e9
    extra = [0.0] * 20
    for s in (5, 9, 14):
        extra[s] = 4e-3  # a time slice inside the all-reduce: the DES cannot know of it
    row = tp.project(sync_record([1e-3, 2e-3], comm, extra), profile, pass_ns=0.0, bucket_ns=0.0)
    kept = (20 - 2 - 3) / (20 - 2)  # 2 warm-up steps (10% of 20), 3 disturbed
    assert row["warmup_steps"] == 2 and row["undisturbed_share"] == pytest.approx(kept)
    assert row["undisturbed_throughput_error"] == pytest.approx(0.0, abs=1e-6)  # waiting for rank 1 is kept
    whole = 20 * (2e-3 + comm)
    assert row["throughput_error"] == pytest.approx((whole + 12e-3) / whole - 1, rel=1e-6)  # the DES is faster


def test_a_failed_async_rank_stops_where_it_failed_and_the_others_take_its_tickets(profile):
    steps = 10
    run = record("async", local_s=[1e-3, 1e-3], comm_s=0.0, steps=steps)
    r1 = run["ranks"][1]
    for key in ("step_s", "compute_s", "comm_s", "loss", "t_end_s"):
        r1[key] = r1[key][:3]
    r1["steps_done"] = 3
    run["failed_ranks"] = [1]
    result, _ = tp._run_des(run_record.validate(run), profile, 65536, 1 << 20, 0.0)
    assert result.extra["local_steps"] == [2 * steps - 3, 3]
    with pytest.raises(InputError, match="stop_after: expected 2 entries"):
        pool_shared.run_async_on_pool(tp._spec(2), tp._job(run, tp.pool_preset(profile, Coherence.HW, 80000, 2),
                                                           [[1e6], [1e6]]), steps=2, local_ns=[[1e6], [1e6]],
                                      pool=tp.pool_preset(profile, Coherence.HW, 80000, 2), stop_after=[1])


@pytest.mark.parametrize("mode", ["sync", "hybrid"])
def test_a_real_bench_train_run_is_projected_step_by_step(profile, tmp_path, mode):
    """End to end: `cxlsim bench train` at np 2, then its projection. The DES's steps are never shorter than the
    measured time outside the pool calls (the part it is given); how close the rest comes depends on the
    machine's load, so no error bound is asserted here (experiments/eddis_local.py reports them)."""
    out = tmp_path / mode
    done = subprocess.run([sys.executable, "-m", "cxlsim", "bench", "train", "--np", "2", "--mode", mode,
                           "--steps", "20", "--batch-size", "32", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run = tp.load_run(str(out))
    row = tp.project(run, profile)
    assert row["des_mode"] == tp.DES_MODES[mode] and row["np"] == 2
    assert row["projected_throughput"] > 0 and row["measured_throughput"] == pytest.approx(
        run["throughput_samples_per_s"], rel=1e-9)
    if mode in ("sync", "ddp"):  # the run's own hand-offs to its communication thread price the DES's
        assert row["des"]["bucket_handoff_source"] == "run"
        assert row["des"]["bucket_handoff_ns"] == tp.recorded_handoff_ns(run) > 0
    result, _ = tp._run_des(run, profile, tp.DEFAULT_LARGE_BYTES, tp.slot_bytes_of(run), 0.0)
    for w, per in enumerate(result.intervals):
        local = train_clock.local_work_ns(run["ranks"][w])
        for k, (start, _, end) in enumerate(per[:len(local)]):
            assert end - start >= local[k] * (1 - 1e-9)


@pytest.mark.parametrize("coherence", list(Coherence))
@pytest.mark.parametrize("G", [4096, 137808])
def test_slot_merge_costs_one_load_and_its_lines_and_a_push_at_least_its_streamed_lines(coherence, G):
    """Cross-check of the pool slots on cxl3-pool (uncongested): a merge of W = 2 slots is one load plus its
    lines at the host's bandwidth (flush mode: first a clflushopt per line and a fence); a push streams its
    vector and meta line and waits for their write-back (2 x path) before the sequence store."""
    from cxlsim.fabric.cxl_presets import get_cxl_preset

    region = pool_shared.SharedRegion(get_cxl_preset("cxl3-pool"), 2, G, coherence)
    fig = region.tr.figures()
    env = region.env
    env.run(env.process(region.merge(0, 0.0)))
    lines = 2 * region.slot_stride // 64
    expect = fig.load_ns + lines * 64 / fig.host_bw_bytes_per_ns
    if coherence is Coherence.FLUSH:
        expect += lines * fig.flush_ns_per_line + fig.fence_ns + fig.invalidate_ns
    assert env.now == pytest.approx(expect, rel=1e-9)
    other = pool_shared.SharedRegion(get_cxl_preset("cxl3-pool"), 2, G, coherence)
    other.env.run(other.env.process(other.push(0, 1)))
    streamed = (region.slot_stride - 64) / fig.host_bw_bytes_per_ns
    assert other.env.now >= streamed + 2 * fig.path_ns
    assert other.env.now <= streamed + 2 * fig.path_ns + 4 * fig.load_ns + (region.slot_stride // 64) * (
        fig.flush_ns_per_line + 64 / fig.host_bw_bytes_per_ns) + 2 * fig.fence_ns


def test_hybrid_exchange_waits_after_the_step_when_the_thread_shares_the_ranks_cpu(profile):
    run = record("hybrid", local_s=[1e-3, 1e-3], comm_s=0.0, steps=8)
    free, _ = tp._run_des(run, profile, 65536, 1 << 20, 0.0, 5000.0)
    assert free.params["thread_shares_cpu"] is False  # no pinned_cores: the thread has a CPU of its own
    run["pinned_cores"] = [0, 1]
    assert tp.pinned_one_cpu(run) and not tp.pinned_one_cpu({**run, "pinned_cores": [None, None]})
    shared, _ = tp._run_des(run, profile, 65536, 1 << 20, 0.0, 5000.0)
    assert shared.params["thread_shares_cpu"] is True
    for per_free, per_shared in zip(free.intervals, shared.intervals):
        # overlapped: only the ticket after the local work; shared CPU: the hand-off and the exchange too
        for (_, c0, e0), (_, c1, e1) in zip(per_free, per_shared):
            assert e0 - c0 < 5000.0 <= e1 - c1


def test_recorded_handoff_is_the_ranks_median_per_call_and_none_unless_every_rank_has_it():
    run = {"mode_stats": [{"handoff_s_median": 4e-4, "calls_per_step": 4}, {"handoff_s_median": 2e-4,
                                                                            "calls_per_step": 4}]}
    assert tp.recorded_handoff_ns(run) == pytest.approx(75e3)  # (100 us + 50 us) / 2 per call
    assert tp.recorded_handoff_ns({"mode_stats": [run["mode_stats"][0], None]}) is None
    assert tp.recorded_handoff_ns({"mode_stats": [{"exchanges": 3}]}) is None  # async's stats
    assert tp.recorded_handoff_ns({}) is None
    hybrid = [{"overlap": True, "exchange_phases_s": {"handoff": {"median_s": s, "mean_s": s, "steps": 9}}}
              for s in (3e-5, 5e-5)]
    assert tp.recorded_handoff_ns({"mode": "hybrid", "mode_stats": hybrid}) is None  # its main thread works on
    inline = [{**h, "overlap": False} for h in hybrid]
    assert not tp.threaded_exchange({"mode": "hybrid", "mode_stats": inline}) and tp.threaded_exchange({})


def exchange_costs(G, **kw):
    """Exchange costs as `train_costs.measure_exchange` returns them, with given figures (ns)."""
    values = dict(model="mlp", batch=16, workers=2, vector_bytes=G, push_ns=6000.0, read_ns=20000.0, ticket_ns=900.0,
                  handoff_ns=30000.0, repeats=1, spread_ns={})
    return train_costs.ExchangeCosts(**{**values, **kw})


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_async_des_step_is_local_ticket_passes_and_the_measured_exchange(profile, coherence):
    """Cross-check: with exchange costs given, an async DES step on the uncongested local-host pool is its local
    time + the ticket's call + 9 vector passes + the fold at the profile's rate + (hw) the push and the merge's
    copies, which take together what was measured for them."""
    G, local = 137808, 1e-3
    run = record("async", local_s=[local, local], comm_s=0.0, G=G, steps=6, coherence=coherence)
    given, pass_ns = exchange_costs(G), 700.0
    result, preset = tp._run_des(run, profile, 65536, 1 << 20, pass_ns, exchange=given)
    phases = result.extra["phases_ns"]
    reduce_bw = tp.pool_preset(profile, Coherence.parse(coherence), G, 2).host.reduce_bw_bytes_per_ns
    assert phases["fold"] == pytest.approx(G / reduce_bw, rel=1e-9)
    plain, _ = tp._run_des(run, profile, 65536, 1 << 20, pass_ns)  # the profile's pool, no ticket call
    # the call, then the counter's line ops (hw: ns; flush: the bakery's flushes and fences, as without the call)
    assert phases["ticket"] == pytest.approx(given.ticket_ns + plain.extra["phases_ns"]["ticket"], abs=20.0)
    if coherence == "hw":
        assert phases["push"] + phases["read"] == pytest.approx(given.push_ns + given.read_ns, rel=1e-4)
        starts, _, ends = zip(*result.intervals[0])
        expect = (local * 1e9 + given.ticket_ns + tp.VECTOR_PASSES["async"][0] * pass_ns + phases["fold"]
                  + given.push_ns + given.read_ns)
        assert np.array(ends) - np.array(starts) == pytest.approx(expect, rel=1e-4)
    else:  # flush: the profile's copies from memory, its line flushes and fences
        assert phases["read"] == pytest.approx(plain.extra["phases_ns"]["read"], rel=1e-9)
    assert result.params["ticket_ns"] == given.ticket_ns


def test_phase_rows_put_each_measured_phase_beside_the_des():
    run = record("async", local_s=[1e-3, 1e-3], comm_s=100e-6, steps=4)
    stats = {"phases_s": {name: {"median_s": 1e-5 * (i + 1), "mean_s": 1e-5, "steps": 4}
                          for i, name in enumerate(elastic.ASYNC_PHASES)},
             "schedule": {"main": {"run_s": 0.004, "runnable_s": 0.0008, "slices": 10}}}
    run["mode_stats"] = [stats, stats]
    des = {"ticket": 1000.0, "read": 15000.0, "fold": 7000.0, "push": 7500.0}
    rows = {r["phase"]: r for r in train_phases.phase_rows(run, des, pass_ns=4000.0, handoff_ns=0.0)}
    assert rows["read"]["des_s"] == pytest.approx(15e-6) and rows["read"]["measured_s"] == pytest.approx(5e-5)
    assert rows["fold"]["des_s"] == pytest.approx(7e-6 + 2 * 4e-6)
    assert rows["elastic"]["des_s"] == pytest.approx(4 * 4e-6)
    assert rows["push"]["des_s"] == pytest.approx(7.5e-6 + 4e-6)
    passes = sum(n for _, n in train_phases.PASSES["async"]["main"].values())
    assert passes == tp.VECTOR_PASSES["async"][0]
    assert rows["comm_s (step total)"]["des_s"] == pytest.approx((1000 + 15000 + 7000 + 7500 + 9 * 4000) / 1e9)
    assert rows["comm_s (step total)"]["measured_s"] == pytest.approx(100e-6)
    assert rows["runnable, not running (per step)"]["measured_s"] == pytest.approx(0.0008 / 4)
    hybrid = {k: sum(n for _, n in v.values()) for k, v in train_phases.PASSES["hybrid"].items()}
    assert (hybrid["main"], hybrid["exchange"]) == tp.VECTOR_PASSES["hybrid"]
    assert train_phases.phase_rows({**run, "mode": "sync"}, des, 4000.0, 0.0) == []
    assert len(train_phases.format_phase_rows(list(rows.values()))) == len(rows) + 1


def test_hybrid_without_a_thread_is_projected_in_line_without_a_hand_off(profile):
    run = record("hybrid", local_s=[1e-3, 1e-3], comm_s=0.0, steps=4)
    run["mode_stats"] = [{"overlap": False}, {"overlap": False}]
    result, _ = tp._run_des(run, profile, 65536, 1 << 20, 0.0, 5000.0)
    assert result.params["handoff_ns"] == 0.0 and result.params["thread_shares_cpu"]
    run["mode_stats"] = [{"overlap": True}, {"overlap": True}]
    threaded, _ = tp._run_des(run, profile, 65536, 1 << 20, 0.0, 5000.0)
    assert threaded.params["handoff_ns"] == 5000.0


def test_hybrid_hands_off_at_the_exchanges_measured_cost(profile):
    run = record("hybrid", local_s=[1e-3, 1e-3], comm_s=0.0, steps=4)
    given = exchange_costs(80000, handoff_ns=45000.0)
    row = tp.project(run, profile, pass_ns=0.0, exchange=given)
    assert row["des"]["bucket_handoff_ns"] == 45000.0 and row["des"]["bucket_handoff_source"] == "exchange"
    assert row["des"]["exchange"]["handoff_ns"] == 45000.0 and row["des"]["ticket_ns"] == given.ticket_ns


@pytest.mark.parametrize("mode", ["async", "hybrid"])
def test_a_rank_that_finished_no_step_computes_through_the_whole_run(profile, mode):
    """Under load one rank can use the whole shared step budget (hybrid: steps x W tickets) before the other
    finishes a step: the record is valid, and the DES gives the idle rank one step as long as the whole run (a
    lower bound), so it takes at most one ticket, and the row says so."""
    steps = 10
    run = record(mode, local_s=[1e-3, 1e-3], comm_s=0.0, steps=2 * steps)
    run["steps"] = steps  # rank 0 did the budget's 2 x steps local steps, rank 1 none
    run["ranks"][1] = run_record.rank_entry(1, [], [], [], [], [])
    run["throughput_samples_per_s"] = run_record.throughput_samples_per_s(run["ranks"], run["batch_size"])
    run = run_record.validate(run)
    result, _ = tp._run_des(run, profile, 65536, 1 << 20, 0.0)
    end = run["ranks"][0]["t_end_s"][-1] * 1e9
    (start, _, first_end), *_ = result.intervals[1]
    assert first_end - start >= end * (1 - 1e-9)
    if mode == "hybrid":
        assert sum(result.extra["local_steps"]) == 2 * steps and result.extra["local_steps"][1] <= 1
    row = tp.project(run, profile, pass_ns=0.0, bucket_ns=0.0, exchange=exchange_costs(run["param_bytes"]))
    assert row["notes"] and "rank 1 finished no local step" in row["notes"][0]
    assert "rank 1 finished no local step" in tp.format_projection([row])
