"""`cxlsim bench allgather`: the pool allgather measured OSU-style, optionally beside MPI_Allgather.

With no MPI launch, ranks are local processes (`--np`, default 2). Under
``mpiexec -n N python -m cxlsim bench allgather`` MPI gives rank and size. Asking
for ``--baseline mpi`` outside mpiexec re-launches the command under the mpiexec of
the installed MPI (the PyPI mpich wheel), so one command measures both sides.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig

from tqdm import tqdm

from cxlsim import __version__
from cxlsim.coherence import Coherence
from cxlsim.emulator.bench import BenchPlan, run_plan
from cxlsim.emulator.launch import check_np, run_local, run_mpi
from cxlsim.emulator.osu import ALLGATHER_COLUMNS, OSUTable, format_osu
from cxlsim.emulator.pool import parse_pool_spec
from cxlsim.errors import InputError, RunError
from cxlsim.results import atomic_write, provenance
from cxlsim.units import UnitError, format_bandwidth, format_size, format_time, parse_bandwidth, parse_sizes, parse_time

MPI_ENV_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


def register(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="measure the emulated pool on this machine")
    kinds = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    p = kinds.add_parser(
        "allgather", help="OSU-style allgather latency on the pool (and MPI_Allgather with --baseline mpi)",
        description="Measure the pool allgather OSU-style (osu_allgather's loop and iteration counts); "
                    "latencies in microseconds, sizes in bytes per rank.")
    p.add_argument("--np", type=_int_arg("--np"), default=None, help="local ranks (default 2; under mpiexec: the MPI size)")
    p.add_argument("--sizes", default="1B:1MiB", help="bytes per rank: LO:HI doubling, or a list like 1,4KiB (default 1B:1MiB)")
    p.add_argument("--iterations", type=_int_arg("--iterations"), default=None,
                   help="timed iterations per size (default OMB's: 1000 up to 8 KiB, 100 above)")
    p.add_argument("--warmup", type=_int_arg("--warmup"), default=None,
                   help="warm-up iterations per size (default OMB's: 200 up to 8 KiB, 10 above)")
    p.add_argument("--pool", default="shm", help="pool backend: shm (default), file:PATH, dax:PATH or numa:N")
    p.add_argument("--coherence", choices=Coherence.names(), default=None,
                   help="hw: plain stores (CXL 3.x back-invalidation); flush: clflushopt/clwb + fences "
                        "(default: hw, but flush on dax)")
    p.add_argument("--zero-copy", action="store_true", help="write into the pool slot and read the result in place")
    p.add_argument("--baseline", choices=("mpi",), default=None, help="also time MPI_Allgather on the same ranks")
    p.add_argument("--validate", action="store_true", help="check received contents every iteration (OSU -c)")
    p.add_argument("--output", default=None, metavar="FILE.csv", help="also write the rows as CSV (atomically)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds a rank waits for the others before failing (default 10)")
    p.add_argument("--pool-latency", default=None, metavar="TIME",
                   help="emulated CXL timing: inject this pool access latency, e.g. 250ns: once per wait for "
                        "the other ranks' flags and once per block read (default: none)")
    p.add_argument("--pool-bandwidth", default=None, metavar="BW",
                   help="emulated CXL timing: pace the kernel's copies into and out of the pool at this "
                        "bandwidth, e.g. 32GB/s (default: not paced; zero-copy reads are never paced)")
    p.add_argument("--launcher", choices=("auto", "local", "mpi"), default="auto",
                   help="auto: MPI if started by mpiexec or --baseline mpi, else local processes")
    p.set_defaults(func=bench_allgather)


def _int_arg(flag):
    def parse(text):
        try:
            return int(text)
        except ValueError:
            raise InputError(f"{flag}: expected a whole number, got {text!r}") from None
    return parse


def pool_timing(args) -> dict:
    """The emulated-timing keywords of run_local/run_mpi from --pool-latency and --pool-bandwidth."""
    timing = dict(pool_latency_ns=0.0, pool_bw_bytes_per_ns=0.0)
    for flag, text, parse, key in (("--pool-latency", args.pool_latency, parse_time, "pool_latency_ns"),
                                   ("--pool-bandwidth", args.pool_bandwidth, parse_bandwidth, "pool_bw_bytes_per_ns")):
        if text is not None:
            try:
                timing[key] = parse(text)
            except UnitError as exc:
                raise InputError(f"{flag}: {exc}") from None
    return timing


def timing_label(timing: dict) -> str:
    """', pool latency 250 ns, pool bandwidth 32 GB/s' (only what is on), for table titles."""
    parts = []
    if timing["pool_latency_ns"]:
        parts.append(f"pool latency {format_time(timing['pool_latency_ns'])}")
    if timing["pool_bw_bytes_per_ns"]:
        parts.append(f"pool bandwidth {format_bandwidth(timing['pool_bw_bytes_per_ns'])}")
    return "".join(", " + p for p in parts)


def inside_mpi() -> bool:
    return any(v in os.environ for v in MPI_ENV_VARS)


def find_mpiexec() -> str:
    """The mpiexec beside this Python (the mpich wheel puts it there), else the one on PATH."""
    candidate = os.path.join(sysconfig.get_path("scripts"), "mpiexec")
    found = candidate if os.path.exists(candidate) else shutil.which("mpiexec")
    if not found:
        raise InputError("--baseline mpi: no mpiexec found; install the MPI extra: pip install 'cxlsim[mpi]'")
    return found


def bench_allgather(args) -> int:
    sizes = tuple(parse_sizes(args.sizes))
    spec = parse_pool_spec(args.pool)
    if not args.timeout > 0:
        raise InputError(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    sides = ("zero-copy" if args.zero_copy else "copy",) + (("mpi",) if args.baseline else ())
    plan = BenchPlan(sizes=sizes, sides=sides, iterations=args.iterations, warmup=args.warmup, validate=args.validate)
    timing = pool_timing(args)
    if args.zero_copy and timing["pool_bw_bytes_per_ns"]:
        print("cxlsim bench: note: --pool-bandwidth paces the kernel's copies; in --zero-copy mode the reads "
              "and writes of the slots are the caller's and run unpaced (only --pool-latency applies)",
              file=sys.stderr)
    options = dict(pool=spec, slot_bytes=max(max(sizes), 64), coherence=args.coherence, timeout_s=args.timeout,
                   **timing)
    launcher = args.launcher
    if launcher == "auto":
        launcher = "mpi" if inside_mpi() else ("relaunch" if args.baseline else "local")
    if launcher == "relaunch":
        return _relaunch_under_mpiexec(check_np(args.np if args.np is not None else 2))
    if launcher == "mpi":
        rows, rank = run_mpi(_mpi_rank, (plan, args.np), **options)
        if rank != 0:
            return 0
    else:
        if args.baseline:
            raise InputError("--baseline mpi needs MPI ranks: use --launcher auto or mpi (or run under mpiexec)")
        nranks = check_np(args.np if args.np is not None else 2)
        rows = run_local(nranks, _local_rank, (plan,), **options)[0]
    coherence = args.coherence or spec.default_coherence
    print(render(rows, pool=str(spec) + timing_label(timing), coherence=coherence, zero_copy=args.zero_copy), end="")
    if args.output:
        atomic_write(args.output, rows_to_csv(rows, pool=str(spec), coherence=coherence, **timing))
        sidecar = os.path.splitext(args.output)[0] + ".provenance.json"
        atomic_write(sidecar, json.dumps(bench_provenance(args, spec, coherence), indent=2) + "\n")
        print(f"# wrote {args.output} and {sidecar}")
    return 0


def bench_provenance(args, spec, coherence) -> dict:
    """What the bench ran with: versions, machine, CPU line ops, MPI library (no random draws: seed None)."""
    from cxlsim.emulator._kernels import cpu_features

    info = {**provenance(None), "pool": str(spec), "coherence": coherence, "zero_copy": args.zero_copy,
            "cpu_line_ops": sorted(cpu_features()), "cores": len(os.sched_getaffinity(0))}
    if args.baseline:
        from mpi4py import MPI

        info["mpi_library"] = MPI.Get_library_version().split("\n")[0].strip()
    return info


def _progress(comm, plan):
    if comm.rank != 0 or not sys.stderr.isatty():
        return None
    bar = tqdm(total=len(plan.sizes), desc="allgather sizes", unit="size", leave=False, file=sys.stderr)
    return lambda n: (bar.update(1), bar.set_postfix_str(format_size(n)))


def _local_rank(comm, plan):
    return run_plan(comm, plan, progress=_progress(comm, plan))


def _mpi_rank(comm, world, plan, np_arg):
    if np_arg is not None and np_arg != world.size:
        raise InputError(f"--np {np_arg} differs from the MPI job's size {world.size}")
    return run_plan(comm, plan, mpi=world, progress=_progress(comm, plan)), world.rank


def _relaunch_under_mpiexec(nranks: int) -> int:
    argv = [a for a in sys.argv[1:]]
    command = [find_mpiexec(), "-n", str(nranks), sys.executable, "-m", "cxlsim", *argv, "--launcher", "mpi"]
    result = subprocess.run(command)
    if result.returncode != 0:
        raise RunError(f"the MPI run failed with exit code {result.returncode}: {' '.join(command)}")
    return 0


def render(rows: list[dict], *, pool: str, coherence: str, zero_copy: bool) -> str:
    """OSU-format tables: the pool side (with an MPI/pool ratio column if MPI ran), then MPI."""
    out = []
    by_side = {}
    for row in rows:
        by_side.setdefault(row["side"], []).append(row)
    mpi = {r["size_bytes"]: r for r in by_side.get("mpi", [])}
    for side, side_rows in by_side.items():
        np_ = side_rows[0]["np"]
        if side == "mpi":
            title = f"MPI_Allgather through mpi4py (np {np_}), same ranks and run, cxlsim v{__version__}"
            columns = ALLGATHER_COLUMNS
        else:
            title = (f"cxlsim pool allgather v{__version__} (pool {pool}, coherence {coherence}, "
                     f"{side}, np {np_})")
            columns = ALLGATHER_COLUMNS + (("MPI/pool",) if mpi else ())
        table_rows = []
        for r in side_rows:
            cells = (r["size_bytes"], r["avg_us"], r["min_us"], r["max_us"], r["iterations"])
            if side != "mpi" and mpi:
                cells += (mpi[r["size_bytes"]]["avg_us"] / r["avg_us"] if r["avg_us"] > 0 else float("nan"),)
            table_rows.append(cells)
        out.append(format_osu(OSUTable(title=title, columns=columns, rows=tuple(table_rows))))
    return "\n".join(out)


def rows_to_csv(rows: list[dict], **extra) -> str:
    """One CSV line per (side, size), with `extra` columns (pool, coherence) repeated."""
    buffer = io.StringIO()
    fields = list(extra) + ["side", "np", "size_bytes", "avg_us", "min_us", "max_us", "iterations"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**extra, **row})
    return buffer.getvalue()
