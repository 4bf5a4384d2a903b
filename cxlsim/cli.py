"""The `cxlsim` command line.

Each subcommand lives in its own module, which exposes `register(subparsers)`
and sets `func` on its parser. Add a module to COMMAND_MODULES to add a
subcommand. Bad input (`cxlsim.errors.InputError`) exits with code 2; a failed
run (`cxlsim.errors.RunError`) exits with code 1.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from cxlsim import __version__
from cxlsim.errors import InputError, RunError

COMMAND_MODULES = [
    "cxlsim.simulate",
    "cxlsim.sweep",
    "cxlsim.plot",
    "cxlsim.train",
    "cxlsim.emulator.cli",
    "cxlsim.calibrate",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cxlsim",
        description="Emulate and simulate allgather and training over CXL shared-memory pools.",
    )
    parser.add_argument("--version", action="version", version=f"cxlsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
    except KeyboardInterrupt:
        print(f"cxlsim {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
