"""cxlsim bench train (issue 19): models, data, record, settings, and the sync and ddp modes on real ranks."""
from __future__ import annotations

import glob
import json
import math
import os
import sys

import numpy as np
import pytest

from cxlsim.cli import main
from cxlsim.coherence import Coherence
from cxlsim.emulator.launch import RankFailure
from cxlsim.emulator.training import config as settings
from cxlsim.emulator.training import data, models, modes, run_record
from cxlsim.emulator.training.context import Pacer
from cxlsim.emulator.training.ddp import bucket_spans
from cxlsim.emulator.training.launcher import check_options, train
from cxlsim.errors import InputError
from cxlsim.models.training import profiles, stragglers


def config(mode="sync", nranks=2, **kw) -> settings.TrainConfig:
    return settings.TrainConfig(mode=mode, nranks=nranks, **kw)


def run(cfg) -> dict:
    """A run without the placement probes (the sync fixture and the CLI tests keep them)."""
    return train(cfg, progress=False, probe_host=False)


def test_config_defaults_and_refusals():
    c = config(nranks=3, coherence="flush")
    assert c.factors == (1.0,) * 3 and c.gpus == (None,) * 3 and c.coherence is Coherence.FLUSH
    assert config("ddp").overlap is True and config("ddp", overlap=False).overlap is False
    assert config("sync").overlap is None
    with pytest.raises(InputError, match="--coherence"):
        config(coherence="mesi")
    with pytest.raises(InputError, match="--fail: needs --np 2"):
        config(nranks=1, failure=stragglers.Failure(worker=0, step=1))


@pytest.mark.parametrize("mode", ["sync", "hybrid"])
def test_a_failure_past_the_last_step_is_refused(mode):
    """The straggler matrix has `steps` rows, so a failure at step >= steps is in none of them: the rank would
    never fail, and the run would say nothing about it."""
    with pytest.raises(InputError, match=r"--fail: step: 20 is past the last iteration \(19\): the worker would never fail"):
        config(mode, steps=20, failure=stragglers.Failure(worker=1, step=20))
    assert math.isinf(config(mode, steps=20, failure=stragglers.Failure(worker=1, step=19)).multipliers()[19, 1])


def own_segments() -> list[str]:
    return glob.glob(f"/dev/shm/cxlsim-{os.getpid()}-*")


# -- models ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_gradient_matches_central_differences(name):
    model = models.build(name)
    rng = np.random.default_rng(0)
    params = model.init(3) + rng.normal(0, 0.05, model.size)  # nonzero biases
    x, y = rng.normal(size=(5, models.FEATURES)), rng.integers(0, models.CLASSES, 5)
    grad = np.empty(model.size)
    model.loss_grad(params, x, y, grad)
    h = 1e-6
    for i in rng.choice(model.size, size=min(60, model.size), replace=False):
        up, down = params.copy(), params.copy()
        up[i] += h
        down[i] -= h
        numeric = (model.loss_grad(up, x, y, np.empty(model.size)) -
                   model.loss_grad(down, x, y, np.empty(model.size))) / (2 * h)
        assert grad[i] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (name, i)


def test_backward_reports_each_layer_once_from_the_end():
    model = models.build("mlp")
    seen = []
    grad = np.full(model.size, np.nan)

    def ready(offset):
        assert not np.isnan(grad[offset:]).any()  # everything from offset on is written
        seen.append(offset)

    x, y = data.load("synthetic", 1).batch(0, 0, 1, 8)
    model.loss_grad(model.init(1), x, y, grad, on_ready=ready)
    assert seen == model.layer_starts() == sorted(seen, reverse=True) and seen[-1] == 0


def test_unknown_model_and_dataset_are_input_errors():
    with pytest.raises(InputError, match="--model"):
        models.build("resnet")
    with pytest.raises(InputError, match="--dataset"):
        data.load("mnist", 1)


# -- data -----------------------------------------------------------------------------------------

def test_batches_partition_each_global_batch_and_repeat_for_one_seed():
    ds = data.load("synthetic", 7)
    a = [ds.batch(3, r, 2, 16) for r in range(2)]
    b = data.load("synthetic", 7).batch(3, 1, 2, 16)
    np.testing.assert_array_equal(a[1][0], b[0])
    rows = {tuple(row) for x, _ in a for row in x}
    assert len(rows) == 32  # the two ranks' batches share no sample
    with pytest.raises(InputError, match="--batch-size"):
        ds.batch(0, 0, 2, 4000)


def test_digits_without_scikit_learn_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # import fails as if not installed
    with pytest.raises(InputError, match=r"--dataset digits: needs scikit-learn: pip install 'cxlsim\[digits\]'"):
        data.load("digits", 1)


def test_digits_dataset_when_installed():
    pytest.importorskip("sklearn")
    ds = data.load("digits", 1)
    assert ds.x_train.shape[1] == 64 and len(ds.y_train) + len(ds.y_test) == 1797
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0


# -- settings -------------------------------------------------------------------------------------

def test_gpu_factors_are_catalog_ratios():
    a100, v100 = profiles.gpu("a100-sxm4-80gb"), profiles.gpu("v100")
    factors = settings.gpu_factors(["a100-sxm4-80gb", "v100"])
    expected = v100.resnet50_ns_per_sample("tf32") / a100.resnet50_ns_per_sample("tf32")
    assert factors == (1.0, pytest.approx(expected)) and expected > 1.0


def test_straggler_matrix_is_the_des_draw():
    cfg = config(cv=0.2, failure=stragglers.Failure(worker=1, step=5), steps=12)
    m = cfg.multipliers()
    stream = np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(2)[1])
    np.testing.assert_array_equal(m, stragglers.multipliers(stream, 12, 2, 0.2,
                                                            failure=stragglers.Failure(worker=1, step=5)))
    assert np.isinf(m[5:, 1]).all() and np.isfinite(m[:, 0]).all()
    assert cfg.stragglers == {"cv": 0.2, "slowdown": None, "failure": {"worker": 1, "step": 5}}


def test_factor_past_the_straggler_rows_repeats_them_and_a_failure_stays():
    from cxlsim.emulator.training.context import RankContext

    class Comm:
        rank, size = 1, 2

    cfg = config(steps=4, factors=(1.0, 2.0), failure=stragglers.Failure(worker=1, step=3))
    m = np.array([[1.0, 1.5], [1.0, 1.0], [1.0, 3.0], [1.0, np.inf]])
    ctx = RankContext(comm=Comm(), config=cfg, model=None, data=None, params0=None, multipliers=m, synchronous=False)
    assert [ctx.factor(s) for s in range(3)] == [3.0, 2.0, 6.0] and np.isinf(ctx.factor(10))
    m[3, 1] = 1.0
    assert [ctx.factor(s) for s in (4, 5, 6)] == [3.0, 2.0, 6.0]


def test_pacer_waits_factor_minus_one_times_the_work():
    with Pacer(3.0) as pacer:
        total = 0.0
        for i in range(200000):
            total += i
    assert pacer.work_cpu_s > 0
    assert pacer.waited_s >= 2.0 * pacer.work_cpu_s
    # the work's wall time is its CPU time up to the two clocks' disagreement (CI saw 0.8 us short)
    assert pacer.seconds >= 3.0 * pacer.work_cpu_s - 1e-4


def test_pinned_cores_give_each_rank_its_own_cpu_when_there_are_enough():
    cpus = sorted(os.sched_getaffinity(0))
    assert settings.pinned_cores(len(cpus), "auto") == cpus
    assert settings.pinned_cores(len(cpus) + 1, "auto") == [None] * (len(cpus) + 1)
    assert settings.pinned_cores(len(cpus) + 1, "on") == cpus + cpus[:1]
    assert settings.pinned_cores(1, "off") == [None]
    with pytest.raises(InputError, match="--pin"):
        config(pin="always")


def test_bucket_spans_cover_the_vector_from_its_end():
    spans = bucket_spans(10, 4)
    assert spans == [(8, 10), (5, 8), (2, 5), (0, 2)]
    assert sum(hi - lo for lo, hi in spans) == 10


@pytest.mark.parametrize("argv, flag", [
    (["--mode", "bogus"], "--mode"),
    (["--mode", "sync", "--overlap", "on"], "--overlap"),
    (["--mode", "sync", "--buckets", "8"], "--buckets"),
    (["--mode", "ddp", "--buckets", "0"], "--buckets"),
    (["--factors", "1,2,3"], "--factors"),
    (["--factors", "0.5"], "--factors"),
    (["--gpus", "a100-sxm4-80gb,tpu"], "gpu"),
    (["--factors", "1,2", "--gpus", "v100"], "--factors and --gpus"),
    (["--fail", "one"], "--fail"),
    (["--fail", "5:1"], "--fail: rank: expected a rank in 0..1, got 5"),
    (["--batch-size", "3000"], "--batch-size"),
    (["--lr", "-1"], "--lr"),
    (["--model", "vgg"], "--model"),
    (["--coherence", "hw", "--target-accuracy", "high"], "--target-accuracy"),
])
def test_bad_options_exit_2_naming_the_option(argv, flag, capsys):
    assert main(["bench", "train", "--np", "2", "--steps", "2", *argv]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and flag in err and "Traceback" not in err


def test_record_validation_names_the_key():
    record = json.loads(json.dumps(RECORD))
    assert run_record.validate(record) is record
    del record["lr"]
    with pytest.raises(InputError, match="'lr'"):
        run_record.validate(record)
    with pytest.raises(InputError, match="ranks\\[0\\].loss"):
        run_record.validate({**RECORD, "ranks": [{**RECORD["ranks"][0], "loss": []}]})
    with pytest.raises(InputError, match="mode"):
        run_record.validate({**RECORD, "mode": "gossip"})


def test_record_write_and_read(tmp_path):
    json_path, csv_path = run_record.write(str(tmp_path / "run"), RECORD)
    assert run_record.read(str(tmp_path / "run")) == RECORD
    lines = open(csv_path).read().splitlines()
    assert lines[0] == "rank,step,step_s,compute_s,comm_s,loss,t_end_s" and len(lines) == 1 + 2
    assert run_record.throughput_samples_per_s(RECORD["ranks"], 4) == pytest.approx(4 * 2 / 0.5)
    spread = run_record.step_throughput(RECORD["ranks"], 4)
    assert spread["median"] == pytest.approx(4 / 0.25)
    assert spread["p10_p90"] == [pytest.approx(4 / 0.29), pytest.approx(4 / 0.21)]
    assert run_record.time_to_accuracy(RECORD["eval"], (0.5, 0.99)) == {"0.5": 0.3, "0.99": None}
    assert run_record.time_to_accuracy_window(RECORD["eval"], (0.5, 0.1, 0.99)) == {"0.5": [0.2, 0.3],
                                                                                   "0.1": [0.0, 0.2], "0.99": None}


RECORD = {"mode": "sync", "np": 1, "model": "mlp", "dataset": "synthetic", "steps": 2, "batch_size": 4, "lr": 0.1,
          "seed": 1, "coherence": "hw", "pool": "shm", "param_count": 3, "param_bytes": 24, "overlap": None,
          "buckets": None, "lockstep": True, "factors": [1.0], "gpus": [None], "stragglers": None,
          "placement": "unknown",
          "ranks": [{"rank": 0, "steps_done": 2, "step_s": [0.2, 0.3], "compute_s": [0.1, 0.1],
                     "comm_s": [0.1, 0.2], "loss": [2.0, 1.5], "t_end_s": [0.2, 0.5]}],
          "eval": [{"t_s": 0.2, "step": 1, "loss": 2.0, "accuracy": 0.2}, {"t_s": 0.3, "step": 2, "loss": 1.0,
                                                                           "accuracy": 0.6}],
          "throughput_samples_per_s": 16.0, "time_to_accuracy_s": {"0.5": 0.3}, "final_accuracy": 0.6,
          "failed_ranks": [], "versions": {}}


# -- real runs ------------------------------------------------------------------------------------

CONVERGENCE = dict(steps=200, eval_every=50)
STATED_ACCURACY = 0.9  # mlp on the synthetic set, np 2, 200 steps of 2 x 32 samples, lr 0.1 (seed 1: 0.928)


@pytest.fixture(scope="module")
def sync_run():
    return train(config("sync", **CONVERGENCE), progress=False)  # with the placement probes


def test_sync_converges_and_is_bitwise_identical_across_ranks(sync_run):
    assert sync_run["final_accuracy"] >= STATED_ACCURACY
    digests = sync_run["final_param_sha256"]
    assert digests[0] is not None and len(set(digests)) == 1
    run_record.validate(sync_run)
    assert [r["steps_done"] for r in sync_run["ranks"]] == [200, 200]
    assert sync_run["time_to_accuracy_s"]["0.9"] is not None and sync_run["throughput_samples_per_s"] > 0
    assert sync_run["eval"][-1]["step"] == 200 and sync_run["failed_ranks"] == []
    assert len(sync_run["host_roundtrip_ns"]) == 2 and isinstance(sync_run["warnings"], list)
    assert sync_run["placement"] in ("fast", "slow", "unknown") and sync_run["lockstep"] is True
    assert own_segments() == []  # the pool segment is gone after a run
    assert sync_run["pinned_cores"] == settings.pinned_cores(2, "auto")
    assert sync_run["slot_bytes"] == 139264 and sync_run["allreduce_large_bytes"] >= 0  # 137,808 B to a page
    assert sync_run["threads_at_start"] == [1, 1]  # no BLAS worker beside a rank (test_bench_train_blas)


def test_sync_repeats_bitwise_for_one_seed(sync_run):
    again = run(config("sync", **CONVERGENCE))
    assert again["final_param_sha256"] == sync_run["final_param_sha256"]
    assert [e["accuracy"] for e in again["eval"]] == [e["accuracy"] for e in sync_run["eval"]]
    assert [r["loss"] for r in again["ranks"]] == [r["loss"] for r in sync_run["ranks"]]


@pytest.mark.parametrize("overlap", [True, False])
def test_ddp_converges_bitwise_as_sync(sync_run, overlap):
    ddp = run(config("ddp", overlap=overlap, **CONVERGENCE))
    assert ddp["final_accuracy"] >= STATED_ACCURACY
    assert ddp["final_param_sha256"] == sync_run["final_param_sha256"]  # the same left folds, in buckets
    assert ddp["buckets"] == 4 and ddp["overlap"] is overlap


def test_sync_converges_on_digits_when_installed():
    pytest.importorskip("sklearn")
    digits = run(config("sync", dataset="digits", steps=200, eval_every=100))
    assert digits["final_accuracy"] >= 0.93  # seed 1: 0.950


def test_ddp_many_buckets_on_the_cnn_with_slow_ranks():
    ddp = run(config("ddp", model="cnn-small", overlap=True, buckets=7, steps=10, factors=(1.0, 2.0)))
    sync = run(config("sync", model="cnn-small", steps=10, factors=(1.0, 2.0)))
    assert ddp["final_param_sha256"] == sync["final_param_sha256"] and len(set(ddp["final_param_sha256"])) == 1
    assert ddp["buckets"] == 7 and ddp["factors"] == [1.0, 2.0] and ddp["placement"] == "unknown"


def test_flush_coherence_gives_the_same_parameters():
    hw = run(config("sync", steps=15))
    flush = run(config("sync", steps=15, coherence=Coherence.FLUSH))
    assert flush["coherence"] == "flush" and flush["final_param_sha256"] == hw["final_param_sha256"]


@pytest.mark.parametrize("mode", ["sync", "ddp"])
def test_a_killed_rank_fails_the_synchronous_modes_cleanly(mode):
    before = own_segments()
    with pytest.raises(RankFailure) as info:
        run(config(mode, steps=50, failure=stragglers.Failure(worker=1, step=5)))
    assert "SIGKILL" in info.value.failures[1]
    assert set(info.value.failures) == {0, 1}
    assert own_segments() == before == []


def test_cli_writes_the_record(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["bench", "train", "--np", "2", "--mode", "ddp", "--overlap", "off", "--model", "logreg",
                 "--steps", "20", "--eval-every", "5", "--gpus", "a100-sxm4-80gb,v100", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mode ddp, np 2, model logreg" in text and "throughput" in text
    record = run_record.read(str(out / "train.json"))
    assert record["gpus"] == ["a100-sxm4-80gb", "v100"] and record["factors"][0] == 1.0 < record["factors"][1]
    assert record["overlap"] is False and [e["step"] for e in record["eval"]] == [5, 10, 15, 20]
    assert len(open(out / "steps.csv").read().splitlines()) == 1 + 2 * 20


def test_options_a_mode_does_not_use_are_refused():
    check_options(config("sync", lockstep=True), modes.mode("sync"))  # sync always moves in lockstep
    check_options(config("async", lockstep=True), modes.mode("async"))
    with pytest.raises(InputError, match="--overlap: mode async does not use it.*ddp"):
        check_options(config("async", overlap=True), modes.mode("async"))
    plain = modes.TrainMode(name="plain", help="", loop="m:f", synchronous=True)  # neither uses nor implies it
    with pytest.raises(InputError, match="--lockstep: mode plain does not use it"):
        check_options(config("sync", lockstep=True), plain)


def test_modes_name_their_des_mode_and_loops():
    from cxlsim import train_projection
    for m in modes.MODES.values():  # the record's des_mode names the design the projection runs
        words = train_projection.DES_MODES[m.name]
        assert m.des_mode.split()[0] == words.split()[0] and "pool" in m.des_mode and "pool" in words, m.name
    assert modes.mode("sync").des_mode == "sync, aggregation allreduce, on the pool"
    assert modes.mode("sync").resolve().__name__ == "sync_loop"
    with pytest.raises(InputError, match="--mode"):
        modes.mode("gossip")


def test_cli_failed_sync_exits_1_naming_the_rank(capsys):
    assert main(["bench", "train", "--np", "2", "--steps", "20", "--fail", "1:3"]) == 1
    err = capsys.readouterr().err
    assert "failed:" in err and "rank 1: died from SIGKILL" in err and "Traceback" not in err
    assert own_segments() == []


def test_progress_bar_on_rank_0(capfd):
    run_with_bar = train(config("sync", steps=5), progress=True, probe_host=False)
    assert run_with_bar["ranks"][0]["steps_done"] == 5
    assert "sync steps (rank 0)" in capfd.readouterr().err
