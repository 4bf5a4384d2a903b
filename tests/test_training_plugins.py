"""Plug-in training modes (CXLSIM_PLUGINS): their records join the registry and the CLI's flags; a broken
plug-in is an error naming it when `cxlsim train` runs, never a traceback, and the built-in modes keep working."""
import sys
import textwrap

import pytest

from cxlsim import cli, train
from cxlsim.errors import InputError
from cxlsim.models.training import cluster, core, modes

CLUSTER = "interconnect: ib-hdr\nprecision: amp\nnodes: [{gpu: v100, repeat: 2}]\n"
HEADER = """
from cxlsim.models.training import convergence
from cxlsim.models.training.core import Mode, Option, StepLog, check_run, synchronous_result, time_text


def run(spec, job, *, steps, seed=None, cv=0.0, slowdown=None, failure=None, pause_ns=0.0):
    check_run(spec, job, steps)
    log, t = StepLog(spec.size), 0.0
    for s in range(steps):
        end = t + max(job.iteration_ns) + pause_ns
        for w in range(spec.size):
            log.add(w, t, t + job.iteration_ns[w], end)
        t = end
    return synchronous_result("{mode}", spec, job, steps, log, {{"pause_ns": pause_ns}}, seed or 0, 0)
"""


def plugin(tmp_path, monkeypatch, name, mode, records):
    """Write module `name` whose run function reports mode `mode`, declaring `records`, and name it in
    CXLSIM_PLUGINS (each test uses its own module name: plug-ins load once per list of names)."""
    (tmp_path / f"{name}.py").write_text(HEADER.format(mode=mode) + textwrap.dedent(records))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CXLSIM_PLUGINS", name)
    sys.modules.pop(name, None)


def _train(tmp_path, capsys, *args):
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER)
    code = cli.main(["train", str(path), "--model", "resnet50", *args, "--output", str(tmp_path / "out")])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_plugin_mode_joins_the_registry_and_the_flags(tmp_path, monkeypatch, capsys):
    plugin(tmp_path, monkeypatch, "pausing_mode", "pausing", """
        MODES = [Mode(name="pausing", run=run, convergence=convergence.all_fresh,
                      options=(Option(name="pause_ns", flag="--pause", parse=time_text, help="pause per step"),))]
        """)
    assert modes.names()[:5] == [m.name for m in modes.BUILT_IN] and modes.names()[5:] == ["pausing"]
    assert train.option_table()["--pause"][1] == ["pausing"]
    code, out = _train(tmp_path, capsys, "--mode", "pausing", "--pause", "1 ms", "--steps", "3")
    assert code == 0 and "# cxlsim training projection: pausing" in out
    spec = cluster.from_dict({"interconnect": "ib-hdr", "precision": "amp", "nodes": [{"gpu": "v100", "repeat": 2}]})
    job = core.make_job(spec, "resnet50")
    assert modes.simulate(spec, job, "pausing", steps=3, pause_ns=1e6).elapsed_ns == \
        pytest.approx(3 * (max(job.iteration_ns) + 1e6))
    code, out = _train(tmp_path, capsys, "--mode", "ddp", "--pause", "1 ms")
    assert code == 2 and "--mode ddp does not take --pause (applies to pausing)" in out
    code, out = _train(tmp_path, capsys, "--mode", "pausing", "--convergence", "--steps", "1")
    assert code == 0 and "progress factor 1.000" in out


@pytest.mark.parametrize("case, records, message", [
    (1, 'MODES = [Mode(name="sync", run=run)]', "mode 'sync' is declared twice"),
    (2, 'MODES = ["not a record"]', "a MODES entry must be a cxlsim.models.training.core.Mode"),
    (3, 'MODES = [Mode(name="stepper", run=run, options=(Option(name="steps", flag="--steps", parse=int, help="x"),))]',
     "--steps: the option of mode(s) stepper clashes with a cxlsim train option"),
    (4, 'MODES = [Mode(name="chunky", run=run, options=(Option(name="chunk_bytes", flag="--chunk", parse=str, '
     'help="x"),))]', "--chunk: declared differently by modes sync, ddp, async, hybrid, horovod and chunky"),
])
def test_a_broken_plugin_is_an_error_naming_it(tmp_path, monkeypatch, capsys, case, records, message):
    plugin(tmp_path, monkeypatch, f"broken_mode_{case}", "broken", records)
    code, out = _train(tmp_path, capsys, "--mode", "ddp", "--steps", "1")
    assert code == 2 and message in out and "Traceback" not in out


def test_a_mode_without_a_convergence_rule_says_so(tmp_path, monkeypatch, capsys):
    plugin(tmp_path, monkeypatch, "ruleless_mode", "ruleless", 'MODES = [Mode(name="ruleless", run=run)]')
    code, out = _train(tmp_path, capsys, "--mode", "ruleless", "--steps", "1")
    assert code == 0
    code, out = _train(tmp_path, capsys, "--mode", "ruleless", "--steps", "1", "--convergence")
    assert code == 2 and "mode: 'ruleless' has no convergence rule" in out


def test_records_are_checked():
    with pytest.raises(InputError, match="give exactly one of parse"):
        core.Option(name="x", flag="--x", help="x")
    with pytest.raises(InputError, match="expected a keyword name and a '--flag'"):
        core.Option(name="x", flag="-x", parse=int, help="x")
    with pytest.raises(InputError, match="options must be distinct Option records"):
        core.Mode(name="twice", run=print, options=(core.CHUNK, core.CHUNK))


def test_hybrid_prices_its_counter_with_a_plugin_cxl_preset(tmp_path, monkeypatch, capsys):
    import json

    (tmp_path / "slow_pool_preset.py").write_text(textwrap.dedent("""
        import dataclasses
        from cxlsim.fabric.cxl_presets import get_cxl_preset

        base = get_cxl_preset("cxl3-pool")
        PRESETS = [dataclasses.replace(base, name="slow-pool",
                                       switch=dataclasses.replace(base.switch, hop_latency_ns=100.0))]
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CXLSIM_PLUGINS", "slow_pool_preset")
    code, out = _train(tmp_path, capsys, "--mode", "hybrid", "--steps", "2", "--seed", "0", "--counter", "cxl-device",
                       "--counter-pool", "slow-pool")
    assert code == 0, out
    head = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert head["params"]["counter_pool"] == "slow-pool"
    assert head["params"]["counter_costs"] == {"cxl_load_ns": 2 * (25 + 2.5 + 100 + 2.5) + 90, "device_atomic_service_ns": 90}
    assert head["atomic_min_ns"] == pytest.approx(350.0 + 90.0)
