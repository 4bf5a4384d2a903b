"""The `cxlsim` command line.

Each subcommand lives in its own module, which exposes `register(subparsers)`
and sets `func` on its parser. Commands load lazily: `COMMANDS` names each
command's module and its one-line help, `cxlsim --help` lists them from that
table, and only the module of the command being run is imported. So a command
runs without the dependencies of the others (`cxlsim simulate` without the
emulator's compiled extension, for one). Add a command by adding its row.

Bad input (`cxlsim.errors.InputError`) exits with code 2; a failed run
(`cxlsim.errors.RunError`) exits with code 1.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys

from cxlsim import __version__
from cxlsim.errors import InputError, RunError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Command:
    """One subcommand. module: where its `register(subparsers)` is. help: its line in `cxlsim --help`
    (the same text the module's parser is registered with; tests/test_lazy_cli.py checks that)."""

    module: str
    help: str


COMMANDS = {
    "simulate": Command(module="cxlsim.simulate",
                        help="project a collective's latency on a simulated network fabric"),
    "sweep": Command(module="cxlsim.sweep",
                     help="run the factorial product of varied scenario keys (what-if studies)"),
    "plot": Command(module="cxlsim.plot",
                    help="plot a sweep's CSV (lines or a heatmap) into its workspace"),
    "train": Command(module="cxlsim.train",
                     help="project data-parallel training throughput (EDDIS sync/async/hybrid, PyTorch DDP, Horovod)"),
    "bench": Command(module="cxlsim.emulator.cli",
                     help="measure the emulated pool on this machine"),
    "calibrate": Command(module="cxlsim.calibrate.cli",
                         help="measure this machine (or read OSU files), fit the simulator, report its error"),
    "mpi": Command(module="cxlsim.mpi.cli", help="run unmodified MPI programs with their collectives on the pool"),
    "compare": Command(module="cxlsim.compare",
                       help="one collective on two or more fabrics, side by side, with ratios and crossovers"),
    "list": Command(module="cxlsim.catalog",
                    help="list the presets, algorithms, GPUs, DNNs or training modes, with their key figures and sources"),
    "replay": Command(module="cxlsim.replay.cli",
                      help="project a traced MPI application (SimGrid TI trace) onto network and pool fabrics"),
}


def command_of(argv: list[str]) -> str | None:
    """The subcommand named in `argv`: its first word that is not an option (the top-level
    options, --help and --version, take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command listed; only `command`'s module is imported and registered
    (the others are bare entries that carry their help line)."""
    parser = argparse.ArgumentParser(
        prog="cxlsim",
        description="Emulate and simulate allgather and training over CXL shared-memory pools.",
    )
    parser.add_argument("--version", action="version", version=f"cxlsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, entry in COMMANDS.items():
        if name == command:
            importlib.import_module(entry.module).register(subparsers)
        else:
            subparsers.add_parser(name, help=entry.help, add_help=False)
    return parser


COMPILED_PREFIX = "cxlsim.emulator._"  # the emulator's compiled modules (setup.py's ext_modules)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = command_of(argv)
    try:
        parser = build_parser(command)
    except ImportError as exc:
        if not (exc.name or "").startswith(COMPILED_PREFIX):
            raise
        print(f"cxlsim {command}: failed: this command needs the emulator's compiled extension ({exc.name}), "
              "which is not built: run `pip install -e .` (or `python setup.py build_ext --inplace`) "
              "in the source tree", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"cxlsim {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:
        print(f"cxlsim {args.command}: failed: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of our output went away (e.g. `| head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(f"cxlsim {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
