"""The CLI loads lazily: simulate, sweep, train and plot run with the emulator's compiled extension absent.

Each command runs in a subprocess whose `sys.modules` maps every compiled module of
cxlsim.emulator (each .pyx beside it) to None, so importing one raises ImportError, as on
an install where the extension was never built.
"""
import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cxlsim import cli

ROOT = Path(__file__).resolve().parents[1]
COMPILED = sorted(f"cxlsim.emulator.{p.stem}" for p in (ROOT / "cxlsim" / "emulator").glob("*.pyx"))
WITHOUT_EXTENSION = (
    "import sys\n"
    f"for name in {COMPILED!r}:\n"
    "    sys.modules[name] = None\n"
    "from cxlsim.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
SCENARIO = "name: lazy\nengine: analytic\nfabric: {preset: ib-hdr, nodes: 2}\nworkload: {algorithm: ring, sizes: [1 KiB]}\n"
CLUSTER = ("name: lazy\ninterconnect: ib-hdr\nprecision: amp\nmemory_servers: 1\nserver_cores: 1\n"
           "nodes:\n  - {gpu: v100, repeat: 2}\n")


def run_without_extension(cwd, *args, timeout=120):
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTENSION, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_the_block_is_effective(tmp_path):
    """The emulator's own command needs the extension: under the block it says so (exit 1, no traceback)."""
    assert "cxlsim.emulator._kernels" in COMPILED
    result = run_without_extension(tmp_path, "bench", "allgather", "--np", "1", "--sizes", "1", "--repeat", "1")
    assert result.returncode == 1
    assert "needs the emulator's compiled extension (cxlsim.emulator._" in result.stderr
    assert "Traceback" not in result.stderr


def test_simulate_sweep_plot_and_train_run_without_the_extension(tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "c.yaml").write_text(CLUSTER)
    commands = [
        ["simulate", "--preset", "ib-hdr", "--nodes", "2", "--engine", "analytic", "--sizes", "1KiB"],
        ["sweep", "s.yaml", "--vary", "fabric.nodes=2,4", "--output", "w"],
        ["plot", "w", "--x", "fabric.nodes", "--y", "latency_us"],
        ["train", "c.yaml", "--model", "resnet50", "--mode", "sync", "--steps", "2", "--output", "t"],
    ]
    for args in commands:
        result = run_without_extension(tmp_path, *args)
        assert result.returncode == 0, f"cxlsim {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    assert list((tmp_path / "w").glob("*.png")), "the plot was not written"


def _collapse(text):
    return re.sub(r"\s+", " ", text)


def test_help_lists_every_command_with_its_help_line_without_the_extension(tmp_path):
    result = run_without_extension(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    listing = _collapse(result.stdout)
    for name, entry in cli.COMMANDS.items():
        assert f" {name} {_collapse(entry.help)}" in listing, name


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_each_help_line_is_the_one_its_module_registers(name):
    """The table's help lines are what the modules themselves register (they cannot drift apart)."""
    subparsers = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(cli.COMMANDS[name].module).register(subparsers)
    registered = {action.dest: action.help for action in subparsers._choices_actions}
    assert registered == {name: cli.COMMANDS[name].help}


def test_unknown_command_is_refused_with_the_list(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["no-such-command"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
