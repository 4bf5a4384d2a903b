"""`cxlsim mpi build` and `cxlsim mpi run`: unmodified MPI programs with their collectives on the pool.

``cxlsim mpi build`` builds libcxlsim_mpi.so with the environment's mpicc into the cache
(cxlsim/mpi/build.py) and prints its path. ``cxlsim mpi run [options] -- mpiexec -n 2 ./app``
builds it if needed and runs the command with LD_PRELOAD naming it and the CXLSIM_MPI_*
settings of the options (cxlsim/mpi/settings.py), returning the command's exit code; after a failed
job it removes the shared-memory segments MPICH left (cxlsim/mpi/leftovers.py).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError, RunError
from cxlsim.mpi import leftovers
from cxlsim.mpi.build import build
from cxlsim.emulator.tuning import PROFILE_VARIABLE, allreduce_large_bytes
from cxlsim.mpi.settings import check_environment, environment
from cxlsim.units import format_size


def register(subparsers) -> None:
    mpi = subparsers.add_parser("mpi", help="run unmodified MPI programs with their collectives on the pool",
                                description="Build and use libcxlsim_mpi.so, a PMPI interposition library "
                                            "that runs MPI collectives on the emulated CXL pool (docs/mpi.md).")
    actions = mpi.add_subparsers(dest="mpi_action", metavar="ACTION", required=True)
    b = actions.add_parser("build", help="build the library with this environment's mpicc and print its path")
    b.add_argument("--mpicc", default=None, help="the MPI compiler wrapper (default: CXLSIM_MPICC, the one beside "
                                                 "this Python, or mpicc on PATH)")
    b.add_argument("--force", action="store_true", help="rebuild even if the cache has this build")
    b.set_defaults(func=build_command)
    r = actions.add_parser("run", help="run a command with the library preloaded: cxlsim mpi run -- mpiexec -n 2 ./app",
                           description="Run COMMAND (usually mpiexec ...) with LD_PRELOAD naming the library and "
                                       "the settings below in the environment; exits with COMMAND's code.")
    r.add_argument("--mpicc", default=None, help="the MPI compiler wrapper to build with (as for build)")
    r.add_argument("--pool", default=None, help="pool backend: shm (default), file:PATH, dax:PATH or numa:N")
    r.add_argument("--coherence", choices=Coherence.names(), default=None,
                   help="hw: plain stores; flush: clflushopt/clwb + fences (default: hw, but flush on dax)")
    r.add_argument("--slot", default=None, metavar="SIZE",
                   help="pool bytes per rank per buffer; larger calls go through in chunks (default 1MiB)")
    r.add_argument("--allreduce-large", default=None, metavar="SIZE",
                   help="allreduce chunks of at least this size use reduce-scatter + allgather (default: "
                        "CXLSIM_MPI_ALLREDUCE_LARGE, else the threshold of the calibration profile CXLSIM_PROFILE "
                        "names, as the emulator's, else 64KiB)")
    r.add_argument("--pool-latency", default=None, metavar="TIME", help="emulated pool latency, e.g. 250ns (default off)")
    r.add_argument("--pool-bandwidth", default=None, metavar="BW", help="emulated pool bandwidth, e.g. 32GB/s (default off)")
    r.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="longest wait for another rank before the job aborts naming it (default 60)")
    r.add_argument("--stats", action="store_true", help="print per-collective calls, bytes, pool calls and fallbacks "
                                                      "at MPI_Finalize")
    r.add_argument("--trace", default=None, metavar="DIR", help="write one SimGrid time-independent trace per rank")
    r.add_argument("--verbose", type=int, choices=(0, 1, 2), default=None,
                   help="0 silent, 1 warnings (default), 2 also every pool set-up")
    r.add_argument("--fake-nodes", type=int, default=None, metavar="K",
                   help="pretend each communicator's rank r is on node r %% K, to exercise the hierarchical path "
                        "(pool in each node, MPI between nodes) on one machine")
    r.add_argument("--pool-shared", action="store_true",
                   help="the file: or dax: memory of --pool is the same on every node (CXL 3 memory shared by hosts, "
                        "QEMU's shared CXL): a communicator that spans nodes runs on it (docs/mpi.md)")
    r.add_argument("--disable", action="store_true", help="load the library but send every call to MPI (the "
                                                        "library's own overhead)")
    r.add_argument("program", metavar="command", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- mpiexec -n 2 ./app")
    r.set_defaults(func=run_command)


def build_command(args) -> int:
    print(build(mpicc=args.mpicc, force=args.force))
    return 0


def run_settings(args, environ) -> dict[str, str]:
    """The CXLSIM_MPI_* variables `cxlsim mpi run` adds to `environ`: its options' (`environment`), and where
    neither --allreduce-large nor CXLSIM_MPI_ALLREDUCE_LARGE gives the allreduce threshold, the one of the
    calibration profile CXLSIM_PROFILE names (the emulator's default, `cxlsim.emulator.tuning`), said on stderr."""
    settings = environment(pool=args.pool, coherence=args.coherence, slot=args.slot,
                           allreduce_large=args.allreduce_large, pool_latency=args.pool_latency,
                           pool_bandwidth=args.pool_bandwidth, timeout=args.timeout, verbose=args.verbose,
                           stats=args.stats, trace=args.trace, disable=args.disable, fake_nodes=args.fake_nodes,
                           pool_shared=args.pool_shared)
    name = "CXLSIM_MPI_ALLREDUCE_LARGE"
    if name not in settings and name not in environ and environ.get(PROFILE_VARIABLE):
        value, source = allreduce_large_bytes(environ)
        settings[name] = str(value)
        if args.verbose != 0:
            print(f"cxlsim mpi run: allreduce chunks from {format_size(value)} use reduce-scatter + allgather "
                  f"({source})", file=sys.stderr)
    return settings


def run_command(args) -> int:
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError("mpi run: give the command after --, e.g. cxlsim mpi run -- mpiexec -n 2 ./app")
    env = dict(os.environ)
    env.update(run_settings(args, env))
    check_environment(env)
    library = build(mpicc=args.mpicc)
    env["LD_PRELOAD"] = ":".join([str(library)] + [p for p in env.get("LD_PRELOAD", "").split(":") if p])
    before = leftovers.segments()
    try:
        returncode = subprocess.run(command, env=env).returncode
    except FileNotFoundError:
        raise InputError(f"mpi run: no such command {command[0]!r}") from None
    except OSError as exc:
        raise RunError(f"mpi run: cannot start {command[0]!r}: {exc}") from None
    if returncode != 0:
        removed = leftovers.remove_left_by_job(before)
        if removed:
            print(f"cxlsim mpi run: the job failed ({returncode}); removed {len(removed)} shared-memory segment(s) "
                  f"MPICH left in {leftovers.SHM_DIR}", file=sys.stderr)
    return returncode


def main(argv: list[str] | None = None) -> int:
    """`python -m cxlsim.mpi.cli ...`: the `cxlsim mpi` command, with the CLI's own error handling."""
    from cxlsim import cli

    return cli.main(["mpi", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
