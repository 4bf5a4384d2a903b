"""`cxlsim bench allgather|allreduce|reduce_scatter|broadcast|alltoall|barrier`: a pool collective
measured OSU-style (the loop of osu_allgather, osu_allreduce, ...), optionally beside its MPI call;
`cxlsim bench train`: data-parallel training on the pool (cxlsim.emulator.training.cli).

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
from cxlsim.emulator import bench
from cxlsim.emulator.bench import BenchPlan, probe_bytes, rank_buffer_bytes, run_rounds, summarize, timing_warnings
from cxlsim.emulator.comm import ALLREDUCE_LARGE_BYTES
from cxlsim.emulator.bench_collectives import (COLLECTIVES, MPI_NAMES, ZERO_COPY_COLLECTIVES, check_size,
                                               slot_bytes_for)
from cxlsim.emulator.host import (BenchLock, concurrency_warning, cores_warning, placement_warning,
                                  probe_roundtrip_ns, roundtrip_ns)
from cxlsim.emulator.launch import check_np, run_local, run_mpi
from cxlsim.emulator.osu import ALLGATHER_COLUMNS, OSUTable, format_osu
from cxlsim.emulator.pool import check_room, parse_pool_spec
from cxlsim.emulator.training import cli as train_cli
from cxlsim.errors import InputError, RunError
from cxlsim.results import atomic_write, provenance
from cxlsim.units import (UnitError, format_bandwidth, format_size, format_time, parse_bandwidth, parse_option,
                          parse_sizes, parse_time)

MPI_ENV_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
OSU_LOOPS = {c: "osu_" + {"broadcast": "bcast"}.get(c, c) for c in COLLECTIVES}
DEFAULT_SIZES = {"allreduce": "4B:1MiB", "reduce_scatter": None}  # OMB's reductions start at 4 B
SIZE_MEANING = {"allgather": "sizes in bytes per rank", "allreduce": "sizes in bytes of each rank's float vector",
                "reduce_scatter": "sizes in bytes of each rank's float vector (1/np of it reaches each rank)",
                "broadcast": "sizes in bytes broadcast from rank 0", "alltoall": "sizes in bytes per destination",
                "barrier": "no sizes (one row, size 0)"}


def register(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="measure the emulated pool on this machine")
    kinds = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for collective in COLLECTIVES:
        _add_bench(kinds, collective)
    train_cli.register(kinds)


def _add_bench(kinds, collective: str) -> None:
    mpi_name, loop = MPI_NAMES[collective], OSU_LOOPS[collective]
    p = kinds.add_parser(
        collective, help=f"OSU-style {collective} latency on the pool (and {mpi_name} with --baseline mpi)",
        description=f"Measure the pool {collective} OSU-style ({loop}'s loop and iteration counts); "
                    f"latencies in microseconds, {SIZE_MEANING[collective]}.")
    p.add_argument("--np", type=_int_arg("--np"), default=None, help="local ranks (default 2; under mpiexec: the MPI size)")
    if collective != "barrier":
        default = DEFAULT_SIZES.get(collective, "1B:1MiB")
        p.add_argument("--sizes", default=default,
                       help=f"{SIZE_MEANING[collective]}: LO:HI doubling, or a list like 4,4KiB "
                            f"(default {default or '4 x np B:1MiB, one float per rank first'})")
    p.add_argument("--iterations", type=_int_arg("--iterations"), default=None,
                   help="timed iterations per size (default OMB's: 1000 up to 8 KiB, 100 above)")
    p.add_argument("--warmup", type=_int_arg("--warmup"), default=None,
                   help="warm-up iterations per size (default OMB's: 200 up to 8 KiB, 10 above)")
    p.add_argument("--pool", default="shm", help="pool backend: shm (default), file:PATH, dax:PATH or numa:N")
    p.add_argument("--coherence", choices=Coherence.names(), default=None,
                   help="hw: plain stores (CXL 3.x back-invalidation); flush: clflushopt/clwb + fences "
                        "(default: hw, but flush on dax)")
    if collective == "allreduce":
        p.add_argument("--allreduce-large", default=None, metavar="SIZE",
                       help="chunks of at least SIZE bytes use the large pool algorithm (reduce-scatter + allgather), "
                            "smaller ones the small one (every rank folds every block); default 64KiB; 0: always large")
    if collective in ZERO_COPY_COLLECTIVES:
        p.add_argument("--zero-copy", action="store_true",
                       help="the fused zero-copy call: the kernel puts the data into the pool slot, the ranks read "
                            "the result in place (one read pass, timed)")
    p.add_argument("--baseline", choices=("mpi",), default=None, help=f"also time {mpi_name} on the same ranks")
    p.add_argument("--validate", action="store_true", help="check received contents every iteration (OSU -c)")
    p.add_argument("--output", default=None, metavar="FILE.csv", help="also write the rows as CSV (atomically)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds a rank waits for the others before failing (default 10)")
    p.add_argument("--pool-latency", default=None, metavar="TIME",
                   help="emulated CXL timing: inject this pool access latency, e.g. 250ns: once per wait for "
                        "the other ranks' flags and once per block read (default: none)")
    p.add_argument("--pool-bandwidth", default=None, metavar="BW",
                   help="emulated CXL timing: pace the kernel's copies into and out of the pool at this "
                        "bandwidth, e.g. 32GB/s (default: not paced; zero-copy reads are never paced)")
    p.add_argument("--repeat", type=_int_arg("--repeat"), default=3, metavar="K",
                   help="interleaved rounds over all sizes (default 3): the table gives the median of the round "
                        "means and their min-max (95%% confidence interval from 5 rounds)")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 1) when the emulated CXL timing is delivered more than 10%% off the asked one "
                        "(default: a warning in the table header)")
    p.add_argument("--launcher", choices=("auto", "local", "mpi"), default="auto",
                   help="auto: MPI if started by mpiexec or --baseline mpi, else local processes")
    p.set_defaults(func=bench_collective, collective=collective)


def _int_arg(flag):
    def parse(text):
        try:
            return int(text)
        except ValueError:
            raise InputError(f"{flag}: expected a whole number, got {text!r}") from None
    return parse


def _size_arg(flag: str, text: str) -> int:
    try:
        (value,) = parse_sizes(text)
    except (InputError, UnitError, ValueError) as exc:
        raise InputError(f"{flag}: expected one size such as 64KiB, got {text!r} ({exc})") from None
    return value


def pool_timing(args) -> dict:
    """The emulated-timing keywords of run_local/run_mpi from --pool-latency and --pool-bandwidth."""
    timing = dict(pool_latency_ns=0.0, pool_bw_bytes_per_ns=0.0)
    for flag, text, parse, key in (("--pool-latency", args.pool_latency, parse_time, "pool_latency_ns"),
                                   ("--pool-bandwidth", args.pool_bandwidth, parse_bandwidth, "pool_bw_bytes_per_ns")):
        if text is not None:
            timing[key] = parse_option(flag, text, parse)
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
        raise InputError("no mpiexec found (for --baseline mpi and the MPI runs); install the MPI extra: "
                         "pip install 'cxlsim[mpi]'")
    return found


def bench_collective(args) -> int:
    collective = args.collective
    args.zero_copy = getattr(args, "zero_copy", False)
    nranks = args.np if args.np is not None else int(os.environ.get("PMI_SIZE") or
                                                      os.environ.get("OMPI_COMM_WORLD_SIZE") or 2)
    if collective == "barrier":
        sizes = (0,)
    else:
        sizes = tuple(parse_sizes(args.sizes or f"{4 * nranks}B:1MiB"))
    spec = parse_pool_spec(args.pool)
    if not args.timeout > 0:
        raise InputError(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    if args.repeat < 1:
        raise InputError(f"--repeat: expected a whole number >= 1, got {args.repeat}")
    sides = ("zero-copy" if args.zero_copy else "copy",) + (("mpi",) if args.baseline else ())
    plan = BenchPlan(sizes=sizes, sides=sides, iterations=args.iterations, warmup=args.warmup, validate=args.validate,
                     collective=collective)
    timing = pool_timing(args)
    for size in sizes:
        check_size(collective, size, nranks)
    slot_bytes = max(max(slot_bytes_for(collective, n, nranks) for n in sizes), 64,
                     probe_bytes(sizes) if timing["pool_bw_bytes_per_ns"] else 0)
    options = dict(pool=spec, slot_bytes=slot_bytes, coherence=args.coherence, timeout_s=args.timeout, **timing)
    large = getattr(args, "allreduce_large", None)
    if large is not None:
        options["allreduce_large_bytes"] = _size_arg("--allreduce-large", large)
    launcher = args.launcher
    if launcher == "auto":
        launcher = "mpi" if inside_mpi() else ("relaunch" if args.baseline else "local")
    if launcher == "relaunch":
        return _relaunch_under_mpiexec(check_np(args.np if args.np is not None else 2))
    job = (plan, args.repeat, bool(timing["pool_latency_ns"] or timing["pool_bw_bytes_per_ns"]))
    runner = _run_under_mpi if launcher == "mpi" else _run_local
    run = runner(args, spec, plan, job, options)
    if run is None:  # an MPI rank other than 0: rank 0 reports
        return 0
    timing_problems = timing_warnings(timing, run["delivered"])
    if args.zero_copy and timing["pool_bw_bytes_per_ns"]:
        timing_problems.append(f"emulated pool bandwidth not delivered: asked "
                               f"{format_bandwidth(timing['pool_bw_bytes_per_ns'])}, but --zero-copy reads and writes "
                               "the slots with the caller's own loads and stores, which the kernels cannot pace "
                               "(only --pool-latency applies)")
    if timing_problems and args.strict:
        raise RunError("--strict: " + "; ".join(timing_problems))
    warnings = (cores_warning(run["nranks"], run["cores"]) + concurrency_warning(run["others"]) + run["lock_warnings"]
                + [f"WARNING: {p}: the figures below ran at the delivered timing, not the asked one"
                   for p in timing_problems]
                + (placement_warning(run["roundtrips"]) if run["roundtrips"] else
                   ["note: the host placement is probed under mpiexec only at np 2 in hw mode (on the run's own "
                    "pool; a probe of two fresh processes would fork MPI processes)"]))
    rows = summarize(run["rounds"])
    warnings = ([copy_in_line(run["copy_in"])] if run["copy_in"] else []) + warnings
    coherence = Coherence.parse(args.coherence or spec.default_coherence, "--coherence")
    if collective == "allreduce":
        threshold = options.get("allreduce_large_bytes", ALLREDUCE_LARGE_BYTES)
        warnings = [f"large algorithm (reduce-scatter + allgather) from {format_size(threshold)} per chunk, "
                    "the small one (every rank folds every block) below"] + warnings
    print(render(rows, pool=str(spec) + timing_label(timing), coherence=coherence, zero_copy=args.zero_copy,
                 warnings=warnings, collective=collective), end="")
    if args.output:
        atomic_write(args.output, rows_to_csv(rows, pool=str(spec), coherence=coherence, **timing))
        sidecar = os.path.splitext(args.output)[0] + ".provenance.json"
        info = dict(bench_provenance(args, spec, coherence), repeat=args.repeat, warnings=warnings,
                    delivered_timing=run["delivered"], host_roundtrip_ns=run["roundtrips"], copy_in=run["copy_in"])
        atomic_write(sidecar, json.dumps(info, indent=2) + "\n")
        print(f"# wrote {args.output} and {sidecar}")
    return 0


def _run_local(args, spec, plan, job, options) -> dict:
    """The bench on local ranks, its lock held and the host probed before and after: `_measure`'s dict plus
    nranks, cores (this process's), others (pids of other benches seen), lock_warnings, roundtrips (ns)."""
    if args.baseline:
        raise InputError("--baseline mpi needs MPI ranks: use --launcher auto or mpi (or run under mpiexec)")
    nranks = check_np(args.np if args.np is not None else 2)
    check_room(spec, nranks, options["slot_bytes"], rank_buffer_bytes(plan, nranks),
               asked=f"--sizes {format_size(max(plan.sizes))} at --np {nranks}")
    with BenchLock() as lock:
        others = set(lock.others())
        roundtrips = [probe_roundtrip_ns()]
        result = run_local(nranks, _local_rank, job, **options)[0]
        roundtrips.append(probe_roundtrip_ns())
        others |= set(lock.others()) | set(lock.visitors())
    return dict(result, nranks=nranks, cores=len(os.sched_getaffinity(0)), others=others,
                lock_warnings=lock.warnings(), roundtrips=roundtrips)


def _run_under_mpi(args, spec, plan, job, options) -> dict | None:
    """The bench on the ranks of this MPI job (rank 0 holds the lock): as `_run_local`'s dict on rank 0
    (cores: those of every rank; roundtrips: None unless np 2 in hw mode), None on the other ranks."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if args.np is not None and args.np != world.size:
        raise InputError(f"--np {args.np} differs from the MPI job's size {world.size}")
    _check_room_on_rank0(world, spec, options["slot_bytes"], plan)
    lock = BenchLock().acquire() if world.rank == 0 else None
    try:
        others = set(lock.others()) if lock else set()
        (result, cores), rank = run_mpi(_mpi_rank, job, **options)
        if rank != 0:
            return None
        others |= set(lock.others()) | set(lock.visitors())
    finally:
        if lock:
            lock.release()
    return dict(result, nranks=world.size, cores=cores, others=others, lock_warnings=lock.warnings())


def _check_room_on_rank0(world, spec, slot_bytes, plan) -> None:
    """check_room on rank 0 of an MPI job, its verdict shared, so every rank stops or none does."""
    error = None
    if world.rank == 0:
        try:
            check_room(spec, world.size, slot_bytes, rank_buffer_bytes(plan, world.size),
                       asked=f"--sizes {format_size(max(plan.sizes))} at np {world.size}")
        except InputError as exc:
            error = exc
    error = world.bcast(error, root=0)
    if error is not None:
        if world.rank == 0:
            raise error
        raise SystemExit(2)


def bench_provenance(args, spec, coherence) -> dict:
    """What the bench ran with: versions, machine, CPU line ops, MPI library (no random draws: seed None)."""
    from cxlsim.emulator._kernels import cpu_features

    info = {**provenance(None), "collective": args.collective, "pool": str(spec), "coherence": coherence,
            "zero_copy": args.zero_copy,
            "cpu_line_ops": sorted(cpu_features()), "cores": len(os.sched_getaffinity(0))}
    if args.baseline:
        from mpi4py import MPI

        info["mpi_library"] = MPI.Get_library_version().split("\n")[0].strip()
    return info


def _progress(comm, plan, repeat):
    if comm.rank != 0 or not sys.stderr.isatty():
        return None
    bar = tqdm(total=repeat * len(plan.sizes), desc=f"{plan.collective} sizes", unit="size", leave=False, file=sys.stderr)
    return lambda n: (bar.update(1), bar.set_postfix_str(format_size(n)))


def _measure(comm, plan, repeat, timed, mpi=None) -> dict:
    """On every rank: the copy-ins of this placement (`copy_ins`; None for the barrier, which moves no data), the
    delivered emulated timing (if on), then the interleaved rounds."""
    copy_in = copy_ins(comm, timed) if plan.collective != "barrier" else None  # a barrier copies nothing in
    delivered = bench.delivered_timing(comm, probe_bytes(plan.sizes)) if timed else None
    rounds = run_rounds(comm, plan, repeat, mpi=mpi, progress=_progress(comm, plan, repeat))
    return dict(rounds=rounds, delivered=delivered, copy_in=copy_in)


def copy_ins(comm, timed: bool) -> dict:
    """The stores of the pool's copy-ins, as the MPI library picks them (`PoolComm.choose_copy_in`, a collective
    call): at np 2 in hw mode the probed slow placement copies in with non-temporal stores from NT_SLOW_MIN_BYTES
    (at 64 KiB the small allreduce took 9.5 us so, against 19.3 us with plain stores, slow placement), else plain
    ones. Under emulated CXL timing the probe's round trip holds the injected latency, so the stores stay plain.
    Returns choose_copy_in's dict, or {'nt_min_bytes': 0, 'placement': why not probed}."""
    if timed:
        return dict(roundtrip_ns=None, placement="not probed under emulated timing", nt_min_bytes=0)
    return comm.choose_copy_in()


def copy_in_line(copy_in: dict) -> str:
    """The header line that says which stores the pool's copy-ins used, and why."""
    rt = copy_in.get("roundtrip_ns")
    why = (f"the MPI library's choice in the {copy_in['placement']} placement: flag round trip {rt:.0f} ns"
           if rt is not None else "not probed: np 1 or flush mode, as in the MPI library"
           if copy_in["placement"] == "not probed" else copy_in["placement"])
    stores = (f"non-temporal stores from {format_size(copy_in['nt_min_bytes'])}" if copy_in["nt_min_bytes"]
              else "plain stores")
    return f"pool copy-ins: {stores} ({why})"


def _local_rank(comm, plan, repeat, timed):
    return _measure(comm, plan, repeat, timed)


def _mpi_rank(comm, world, plan, repeat, timed):
    cores = len(set().union(*world.allgather(os.sched_getaffinity(0))))
    probe = world.size == 2 and comm.coherence is Coherence.HW  # the hw flag round trip, on the run's own pool
    before = roundtrip_ns(comm) if probe else None
    result = _measure(comm, plan, repeat, timed, mpi=world)
    result["roundtrips"] = [before, roundtrip_ns(comm)] if probe else None
    return (result, cores), world.rank


def _relaunch_under_mpiexec(nranks: int) -> int:
    argv = [a for a in sys.argv[1:]]
    command = [find_mpiexec(), "-n", str(nranks), sys.executable, "-m", "cxlsim", *argv, "--launcher", "mpi"]
    result = subprocess.run(command)
    if result.returncode != 0:
        raise RunError(f"the MPI run failed with exit code {result.returncode}: {' '.join(command)}")
    return 0


SPREAD_COLUMNS = {"min-max": ("Round Min(us)", "Round Max(us)"), "95% CI": ("95% CI Lo(us)", "95% CI Hi(us)")}


def render(rows: list[dict], *, pool: str, coherence: str, zero_copy: bool, warnings=(),
           collective: str = "allgather") -> str:
    """OSU-format tables: the pool side (with an MPI/pool ratio column if MPI ran), then MPI.

    After OSU's columns come the spread of the round means (see `bench.summarize`); the header
    says how the columns were made and carries every warning line.
    """
    out = []
    by_side = {}
    for row in rows:
        by_side.setdefault(row["side"], []).append(row)
    mpi = {r["size_bytes"]: r for r in by_side.get("mpi", [])}
    for side, side_rows in by_side.items():
        np_, rounds, kind = side_rows[0]["np"], side_rows[0]["rounds"], side_rows[0]["spread"]
        if side == "mpi":
            title = f"{MPI_NAMES[collective]} through mpi4py (np {np_}), same ranks and run, cxlsim v{__version__}"
        else:
            title = (f"cxlsim pool {collective} v{__version__} (pool {pool}, coherence {coherence}, "
                     f"{side}, np {np_})")
        columns = ALLGATHER_COLUMNS + SPREAD_COLUMNS[kind] + (("MPI/pool",) if side != "mpi" and mpi else ())
        spread_text = ("the lowest and highest round mean" if kind == "min-max" else
                       "the 95% confidence interval of the round means' mean (Student's t)")
        notes = [f"{rounds} interleaved round(s): Avg, Min and Max Latency are the medians of the rounds' "
                 f"(Avg: of the round means); the {kind} columns are {spread_text}"]
        if rounds == 1:
            notes.append("note: one round (--repeat 1): no spread is measured")
        table_rows = []
        for r in side_rows:
            cells = (r["size_bytes"], r["avg_us"], r["min_us"], r["max_us"], r["iterations"],
                     r["spread_lo_us"], r["spread_hi_us"])
            if side != "mpi" and mpi:
                cells += (mpi[r["size_bytes"]]["avg_us"] / r["avg_us"] if r["avg_us"] > 0 else float("nan"),)
            table_rows.append(cells)
        table = format_osu(OSUTable(title=title, columns=columns, rows=tuple(table_rows)))
        head, rest = table.split("\n", 1)
        out.append("\n".join([head] + [f"# {line}" for line in notes + list(warnings)] + [rest]))
    return "\n".join(out)


def rows_to_csv(rows: list[dict], **extra) -> str:
    """One CSV line per (side, size) of `bench.summarize`'s rows, with `extra` columns (pool, coherence)
    repeated; round_avg_us holds the round means joined by ';'."""
    buffer = io.StringIO()
    fields = list(extra) + ["side", "np", "size_bytes", "avg_us", "min_us", "max_us", "iterations", "rounds",
                            "spread", "spread_lo_us", "spread_hi_us", "round_avg_us"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**extra, **row, "round_avg_us": ";".join(f"{v:.6g}" for v in row["round_avg_us"])})
    return buffer.getvalue()
