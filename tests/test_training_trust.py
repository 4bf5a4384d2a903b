"""Issue 12 (trust), the training cases: no option silently ignored (5), no crash on a bad cluster file (6),
no worker named that does not exist and no hidden store bottleneck (9). Each test failed before its fix."""
import pytest

from cxlsim import cli, train
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.presets import get_preset
from cxlsim.models.training import cluster, core, hybrid, modes, sync

FOUR = "name: four\ninterconnect: ib-hdr\nprecision: amp\nmemory_servers: 1\nserver_cores: 2\nnodes: [{gpu: v100, repeat: 4}]\n"


def _cluster(tmp_path, text=FOUR, name="c.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _train(tmp_path, capsys, path, *args):
    code = cli.main(["train", path, "--model", "resnet50", *args, "--output", str(tmp_path / "out")])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------- case 5: every option is used or refused

def test_ddp_refuses_the_options_of_other_modes_naming_them_and_where_they_apply(tmp_path, capsys):
    path = _cluster(tmp_path)
    code, _, err = _train(tmp_path, capsys, path, "--mode", "ddp", "--tau", "5", "--counter", "cxl-device")
    assert code == 2
    assert "--mode ddp does not take --tau (applies to async); --counter (applies to hybrid)" in err
    code, _, err = _train(tmp_path, capsys, path, "--mode", "ddp", "--pool-devices", "2")
    assert code == 2 and "--pool-devices (applies to sync)" in err
    assert not (tmp_path / "out").exists()


def test_every_mode_option_is_refused_by_every_mode_that_does_not_declare_it(tmp_path, capsys):
    """The Mode records are the one table: the CLI's refusals follow it for every flag and mode."""
    path = _cluster(tmp_path)
    table = train.option_table()
    assert table["--tau"][1] == ["async"] and table["--collective"][1] == ["ddp", "horovod"]
    assert table["--chunk"][1] == ["sync", "ddp", "async", "hybrid", "horovod"]
    assert table["--memory-servers"][1] == ["sync", "async", "hybrid"]
    for mode in modes.BUILT_IN:
        assert all(table[o.flag][0] == o and mode.name in table[o.flag][1] for o in mode.options)
    samples = {"--no-overlap": [], "--pool": ["cxl3-pool"], "--coherence": ["flush"], "--counter": ["rdma"],
               "--aggregation": ["workers"], "--collective": ["des"], "--horovod-defaults": ["pre-v0.21"]}
    for flag, (_, users) in table.items():
        for mode in modes.names():
            if mode in users:
                continue
            code, _, err = _train(tmp_path, capsys, path, "--mode", mode, flag, *samples.get(flag, ["2"]))
            assert code == 2 and f"--mode {mode} does not take {flag} (applies to {', '.join(users)})" in err


def test_options_that_apply_only_with_another_are_refused_without_it():
    spec = cluster.from_dict({"interconnect": "ib-hdr", "precision": "amp", "nodes": [{"gpu": "v100", "repeat": 2}]})
    job = core.make_job(spec, "resnet50")
    with pytest.raises(InputError, match="coherence: applies to a CXL-pool store only"):
        sync.run_sync(spec, job, steps=1, coherence=Coherence.FLUSH)
    with pytest.raises(InputError, match="pool_devices: applies to a CXL-pool store only"):
        sync.run_sync(spec, job, steps=1, pool_devices=2)
    for key in ("memory_servers", "server_cores", "chunk_bytes"):
        with pytest.raises(InputError, match=f"{key}: a CXL-pool store .* has no memory servers"):
            sync.run_sync(spec, job, steps=1, aggregation="workers", pool="cxl3-pool", **{key: 2})
    with pytest.raises(InputError, match="counter_pool: applies to the CXL counter placements"):
        hybrid.run_hybrid(spec, job, steps=1, counter_pool="cxl3-pool")
    with pytest.raises(InputError, match="cxl2-pool .* supports only flush"):  # no device-side coherent atomics
        hybrid.run_hybrid(spec, job, steps=1, counter="cxl-device", counter_pool="cxl2-pool")


def test_a_refused_option_is_not_the_same_result_any_more(tmp_path, capsys):
    """Before: `--mode ddp --tau 5 --counter cxl-device` exited 0 with the plain ddp result."""
    path = _cluster(tmp_path)
    assert _train(tmp_path, capsys, path, "--mode", "ddp", "--steps", "2", "--seed", "1")[0] == 0
    assert _train(tmp_path, capsys, path, "--mode", "ddp", "--steps", "2", "--seed", "1", "--tau", "5")[0] == 2


# ---------------------------------------------------------------- case 6: bad cluster files

@pytest.mark.parametrize("content, message", [
    (b"\x00\x01binary\xff" * 20, "a binary file"),
    ("interconnect: ib-hdr\n".encode("utf-16"), "UTF-16 text"),
    (b"interconnect: ib-hdr\nprecision: amp\nprecision: fp32\nnodes: [{gpu: v100}]\n",
     "duplicate key precision (first given at line 2)"),
    (b"- just\n- a list\n", "expected a mapping of keys"),
])
def test_a_bad_cluster_file_is_an_error_naming_it(tmp_path, capsys, content, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    code, _, err = _train(tmp_path, capsys, str(path), "--mode", "sync")
    assert code == 2 and f"cluster file {str(path)!r}" in err and message in err and "Traceback" not in err


# ---------------------------------------------------------------- case 9: a failed worker, a store bottleneck

def test_a_stalled_run_names_only_workers_that_exist(tmp_path, capsys):
    """4 workers and 2 store ranks: before, 'workers [0, 2, 3, 4, 5] never finished' counted the store ranks."""
    path = _cluster(tmp_path)
    code, _, err = _train(tmp_path, capsys, path, "--mode", "sync", "--fail", "1:5")
    assert code == 1
    assert "worker 1 failed at iteration 5" in err and "workers [0, 2, 3] never finished" in err
    code, _, err = _train(tmp_path, capsys, path, "--mode", "sync", "--aggregation", "workers", "--fail", "1:5")
    assert code == 1 and "workers [0, 2, 3] never finished" in err


def test_hybrid_says_when_the_store_is_the_bottleneck(tmp_path, capsys):
    big = _cluster(tmp_path, "interconnect: ib-hdr\nprecision: amp\nnodes: [{gpu: v100, repeat: 32}]\n", "big.yaml")
    code, out, _ = _train(tmp_path, capsys, big, "--mode", "hybrid", "--steps", "2", "--seed", "0")
    assert code == 0 and "NOTE: the store is the bottleneck" in out and "store rank 0" in out
    code, out, _ = _train(tmp_path, capsys, big, "--mode", "hybrid", "--steps", "2", "--seed", "0",
                          "--memory-servers", "4", "--server-cores", "4")
    assert code == 0 and "store load: busiest" in out and "bottleneck" not in out


def test_the_store_bound_is_the_closed_form_of_its_cpu_work():
    """One store rank (1 x 1): per round of R = W contributions it reduces W gradients (W - 1 into the
    accumulator, one apply) and pays o per push received and 2 o per pull (request in, parameters
    out); the store bound is the accepted samples over that time, and the throughput cannot exceed it."""
    spec = cluster.from_dict({"interconnect": "ib-hdr", "precision": "amp", "nodes": [{"gpu": "v100", "repeat": 32}]})
    job = core.make_job(spec, "resnet50")
    r = hybrid.run_hybrid(spec, job, steps=2, seed=0)
    preset = get_preset("ib-hdr")
    W, steps, o = spec.size, 2, preset.nic.overhead_ns
    assert r.extra["dropped"] == 0 and r.extra["accepted"] == W * steps
    busy = steps * W * job.gradient_bytes / preset.host.reduce_bw_bytes_per_ns + o * (W * steps + 2 * r.extra["pulls"])
    booked = W * steps * job.batch / r.extra["store_bound_samples_per_s"] * 1e9
    # Pull requests still being served when the last round is applied are booked too (at most W - 1).
    assert busy * (1 - 1e-12) <= booked <= (busy + 2 * o * (W - 1)) * (1 + 1e-12)
    assert r.extra["gpu_bound_samples_per_s"] == pytest.approx(W * 828.0)  # V100 AMP ResNet-50: 828 img/s
    assert r.throughput_samples_per_s <= r.extra["store_bound_samples_per_s"]
    assert r.extra["store_bound"] and r.extra["store_utilisation"]["cpu"] == pytest.approx(booked / r.elapsed_ns)
