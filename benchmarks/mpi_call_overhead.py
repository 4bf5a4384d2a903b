"""What libcxlsim_mpi's MPI_* wrapper adds to its pool kernel's call, at np=2 (hw), in one MPI job.

    python benchmarks/mpi_call_overhead.py [--sizes 256B:4KiB] [--batches 9] [--iterations 2000]

Compiles one C program with mpicc from the library's own sources (cxlsim/mpi/*.c, linked in, so its
MPI_* wrappers are the program's and its internals, such as the communicator's pool, are at hand)
and runs it on two ranks. For each size it times, in interleaved batches (the order reversed every
other batch, so drift and order hit every variant alike), each call alone with the time stamp
counter:
  - `wrapper`: MPI_Allreduce (float32 sum) or MPI_Allgather (MPI_CHAR) through the library: the
    per-call checks, the communicator's pool look-up, the thread guard, stats and trace
    bookkeeping, then the kernel;
  - `kernel`: the same kernel call (cxl_coll_allreduce / cxl_coll_allgather) on the same pool,
    called directly;
  - `kernel-64k`: the kernel on a second pool with 64 KiB slots (benchmarks/allreduce_split.py's
    layout, which forks its ranks without MPI);
  - `pmpi`: PMPI_Allreduce / PMPI_Allgather (MPICH's own);
  - `wrapper-0B`: the wrapper with a count of 0 (every step of the library's path but the kernel)
    and `empty`: nothing (the clock's own cost);
  - `kernel-plain`: `kernel` with plain copy-ins whatever the probe chose (the copy-in kind's A/B:
    the same as `kernel` where the probe chose plain ones, the fast placement);
  - `kernel-runtime`: `kernel` (allreduce) with the type and op read at run time, as the wrapper
    passes them, where `kernel` has them as constants the compiler can fold into the call.
After the batches, the wrapper's, the kernels' and MPICH's results are compared bitwise (RESULTS
DIFFER otherwise). Prints per size the median [min-max] over batches of each variant's per-call median (ns), the
wrapper's cost over the kernel, the flag round trip before each size (best of 3 x 100: fast below
200 ns, slow below 2 us, disturbed above; mpi_interpose.py's rule) and the load average.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from cxlsim.emulator.cli import find_mpiexec
from cxlsim.mpi.build import CFLAGS, EMULATOR_DIR, MPI_DIR, find_mpicc
from cxlsim.units import format_size, parse_sizes
from mpi_interpose import placement_of  # the benchmark beside this one: the same placement rule

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <x86intrin.h>
#include "cxlsim_mpi.h"

enum { WRAPPER, KERNEL, KERNEL_64K, PMPI, WRAPPER_0B, EMPTY, KERNEL_PLAIN, KERNEL_RUNTIME, NV };
/* the type and op as the wrapper passes them: values read at run time, not constants */
static volatile int runtime_dtype = CXL_F32, runtime_op = CXL_SUM; /* NAMES below, in this order */
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static void call(int v, int allreduce, cxlsim_pool_t *pool, cxlsim_pool_t *pool64, char *s, char *r, long n)
{
    cxl_coll_t *c = v == KERNEL_64K ? &pool64->coll : &pool->coll;
    long m = v == WRAPPER_0B ? 0 : n;
    uint64_t nt = c->pool.nt_min_bytes;
    if (v == KERNEL_PLAIN) c->pool.nt_min_bytes = 0;
    if (v == EMPTY) __asm__ volatile("" ::: "memory");
    else if (allreduce && (v == WRAPPER || v == WRAPPER_0B)) MPI_Allreduce(s, r, (int)(m / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (allreduce && v == PMPI) PMPI_Allreduce(s, r, (int)(n / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (allreduce && v == KERNEL_RUNTIME)
        cxl_coll_allreduce(c, s, r, (uint64_t)n / 4, runtime_dtype, runtime_op, cxlsim_settings.large_bytes);
    else if (allreduce) cxl_coll_allreduce(c, s, r, (uint64_t)n / 4, CXL_F32, CXL_SUM, cxlsim_settings.large_bytes);
    else if (v == WRAPPER || v == WRAPPER_0B) MPI_Allgather(s, (int)m, MPI_CHAR, r, (int)m, MPI_CHAR, MPI_COMM_WORLD);
    else if (v == PMPI) PMPI_Allgather(s, (int)n, MPI_CHAR, r, (int)n, MPI_CHAR, MPI_COMM_WORLD);
    else cxl_coll_allgather(c, s, r, (uint64_t)n);
    c->pool.nt_min_bytes = nt;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, why = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int batches = atoi(argv[1]), iters = atoi(argv[2]);
    long max = atol(argv[3]);
    for (int i = 0; i < 200; i++) MPI_Barrier(MPI_COMM_WORLD); /* sets the world's pool up */
    cxlsim_pool_t *pool = cxlsim_pool_of(MPI_COMM_WORLD, &why);
    MPI_Comm dup;
    PMPI_Comm_dup(MPI_COMM_WORLD, &dup);
    uint64_t slot = cxlsim_settings.slot_bytes;
    cxlsim_settings.slot_bytes = 65536;
    cxlsim_pool_t *pool64 = cxlsim_pool_flat(dup);
    cxlsim_settings.slot_bytes = slot;
    if (!pool || !pool64->usable || max > 65536) {
        if (!rank) fprintf(stderr, "no pool at np 2 (or a size above 64 KiB)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    uint64_t a = __rdtsc();
    double ta = cxl_now_ns();
    usleep(20000);
    double ns_per_tick = (cxl_now_ns() - ta) / (double)(__rdtsc() - a);
    char *s = malloc(max), *r = malloc(2 * max), *w = malloc(2 * max);
    double *each = malloc(sizeof(double) * iters), *med = malloc(sizeof(double) * NV * batches);
    if (!rank) printf("INLINE %llu NT %llu\n", (unsigned long long)pool->coll.inline_bytes,
                      (unsigned long long)pool->coll.pool.nt_min_bytes);
    for (int z = 4; z < argc; z += 2) {
        int allreduce = strcmp(argv[z], "allreduce") == 0;
        long n = atol(argv[z + 1]);
        for (long i = 0; i < n / 4; i++) ((float *)s)[i] = (float)(rank + i % 7);
        for (long i = n / 4 * 4; i < n; i++) s[i] = (char)rank;
        double rt = -1.0;
        for (int i = 0; i < 3; i++) {
            double t = cxl_coll_flag_pingpong(&pool->coll, 100);
            if (rt < 0.0 || t < rt) rt = t;
        }
        for (int b = 0; b < batches; b++)
            for (int k = 0; k < NV; k++) {
                int v = b % 2 ? NV - 1 - k : k;
                PMPI_Barrier(MPI_COMM_WORLD);
                for (int i = 0; i < iters; i++) {
                    uint64_t t = __rdtsc();
                    call(v, allreduce, pool, pool64, s, r, n);
                    each[i] = (double)(__rdtsc() - t);
                }
                qsort(each, iters, sizeof(double), cmpd);
                med[v * batches + b] = each[iters / 2] * ns_per_tick;
            }
        int same = 1; /* the wrapper's, the kernel's and MPICH's results, bitwise (np 2: a + b on both sides) */
        for (int v = WRAPPER; v <= PMPI; v++) {
            memset(w, 0, 2 * n);
            call(v, allreduce, pool, pool64, s, w, n);
            if (v == WRAPPER) memcpy(r, w, 2 * n);
            else same &= memcmp(r, w, allreduce ? n / 4 * 4 : 2 * n) == 0;
        }
        if (rank) continue;
        printf("ROW %s %ld %.0f %s", argv[z], n, rt, same ? "same" : "DIFFER");
        for (int v = 0; v < NV; v++) {
            double *row = med + v * batches;
            qsort(row, batches, sizeof(double), cmpd);
            printf(" %.0f %.0f %.0f", row[batches / 2], row[0], row[batches - 1]);
        }
        printf("\n");
        fflush(stdout);
    }
    cxlsim_pool_destroy(pool64);
    PMPI_Comm_free(&dup);
    MPI_Finalize();
    return 0;
}
"""
NAMES = ("wrapper", "kernel", "kernel-64k", "pmpi", "wrapper-0B", "empty", "kernel-plain", "kernel-runtime")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="256B:4KiB")
    parser.add_argument("--batches", type=int, default=9)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--collectives", nargs="+", default=["allreduce", "allgather"],
                        choices=["allreduce", "allgather"])
    args = parser.parse_args()
    sizes = [n for n in parse_sizes(args.sizes) if n >= 4]
    if not sizes or max(sizes) > 65536 or args.batches < 1 or args.iterations < 1:
        parser.error("--sizes: from 4 B to 64 KiB; --batches and --iterations at least 1")
    rows = [word for kind in args.collectives for n in sizes for word in (kind, str(n))]
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "mpi_call_overhead")
        Path(exe + ".c").write_text(PROGRAM)
        sources = [str(f) for f in sorted(MPI_DIR.glob("*.c"))]
        flags = [f for f in CFLAGS if f not in ("-fPIC", "-shared")]
        subprocess.run([find_mpicc(), *flags, "-I", str(EMULATOR_DIR), "-I", str(MPI_DIR), exe + ".c", *sources,
                        "-o", exe], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CXLSIM_MPI_")}
        load_before = open("/proc/loadavg").read().split()[0]
        done = subprocess.run([find_mpiexec(), "-n", "2", exe, str(args.batches), str(args.iterations),
                               str(max(sizes)), *rows], env=env, capture_output=True, text=True, timeout=1800)
        load_after = open("/proc/loadavg").read().split()[0]
    if done.returncode != 0:
        raise SystemExit(f"the program failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    inline, nt = map(int, re.search(r"INLINE (\d+) NT (\d+)", done.stdout).groups())
    print(f"# libcxlsim_mpi's wrapper against its kernel, np=2, hw, one MPI job: ns per call, the median [min-max] "
          f"over {args.batches} batches of each batch's per-call median ({args.iterations} calls, each timed with "
          f"rdtsc); load average {load_before} before, {load_after} after (the machine may be shared). The world "
          f"pool's probe chose allreduce inputs up to {inline} B in the inline area and "
          + (f"non-temporal copy-ins from {nt} B." if nt else "plain copy-ins at every size."))
    print(f"{'collective':<10} {'size':>7} " + " ".join(f"{n:>16}" for n in NAMES)
          + f" {'wrapper-kernel':>14}  placement (flag round trip)")
    for line in done.stdout.splitlines():
        if not line.startswith("ROW "):
            continue
        words = line.split()
        kind, n, rt, same = words[1], int(words[2]), float(words[3]), words[4] == "same"
        vals = [float(x) for x in words[5:]]
        cells = [f"{vals[3 * v]:5.0f} [{vals[3 * v + 1]:4.0f}-{vals[3 * v + 2]:4.0f}]" for v in range(len(NAMES))]
        print(f"{kind:<10} {format_size(n):>7} " + " ".join(cells)
              + f" {vals[0] - vals[3]:14.0f}  {placement_of(rt)} ({rt:.0f} ns)" + ("" if same else "  RESULTS DIFFER"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
