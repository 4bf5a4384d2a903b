"""Where a small pool allreduce's time goes at np=2 (hw), and the line-flag path against the slot path.

    python benchmarks/allreduce_split.py [--sizes 4B:4KiB] [--batches 9] [--iterations 2000]

Compiles a C program on the kernel headers (cxl_coll.h, cxl_pool.h: the code the MPI library
runs) and forks two ranks on one shm pool, no MPI. For each size (float32 sum) it times, in
interleaved batches so drift hits every side alike:
  - `lines`: cxl_coll_allreduce with the whole inline area on (cxl_coll_t.inline_bytes =
    CXL_COLL_LINES_MAX: inputs up to 560 B take the line-flag path; the MPI library sets this in
    the slow placement and 280 B in the fast one);
  - `slot`: the same call with inline_bytes 0 (flag, then the slot's lines);
  - the slot path's steps one by one (the same calls cxl_coll_allreduce makes), with the time
    stamp counter between them: claim + copy-in, publish (sfence + flag store), wait (until the
    peer's flag shows: its arrival and the flag line's transfer), fold (reading the peer's slot
    lines, folding, writing the result);
  - the line-flag path's steps: publish (payload lines, their epochs, the flag), read (poll until
    every line of the peer's shows its epoch, copy the payloads out), fold.
Prints the flag round trip (the host placement, by mpi_interpose.py's rule: fast below 200 ns,
the cores share a cache; slow below 2 us; disturbed above) and the load average, then per size the median [min, max] over batches, in ns per call.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from cxlsim.units import format_size, parse_sizes
from mpi_interpose import placement_of  # the benchmark beside this one: the same placement rule

EMULATOR = Path(__file__).resolve().parent.parent / "cxlsim" / "emulator"

PROGRAM = r"""
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <x86intrin.h>
#include "cxl_pool.h"
#include "cxl_coll.h"

enum { LINES, SLOT, SLOT_STEPS, LINES_STEPS, NVARIANTS };
static double steps[2][4]; /* ticks per variant's step, summed over a batch */

static void slot_steps(cxl_coll_t *c, const char *send, char *recv, uint64_t count)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round, t0 = __rdtsc();
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cxl_coll_copy_in(c, cxl_slot(p, round, p->rank), send, count * 4);
    uint64_t t1 = __rdtsc();
    cxl_publish(p, cxl_coll_written(e), round, count * 4);
    uint64_t t2 = __rdtsc();
    cxl_coll_wait_all(c, cxl_coll_written(e));
    cxl_coll_note_all_written(c, e);
    uint64_t t3 = __rdtsc();
    cxl_coll_fold_slots(c, CXL_F32, CXL_SUM, round, 0, recv, count, NULL);
    uint64_t t4 = __rdtsc();
    steps[0][0] += t1 - t0; steps[0][1] += t2 - t1; steps[0][2] += t3 - t2; steps[0][3] += t4 - t3;
}

static void lines_steps(cxl_coll_t *c, const char *send, char *recv, uint64_t count)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round, t0 = __rdtsc();
    char peer[CXL_COLL_LINES_MAX];
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cxl_coll_lines_publish(c, e, round, send, count * 4);
    uint64_t t1 = __rdtsc();
    cxl_coll_lines_read(c, 1 - p->rank, e, round, peer, count * 4);
    uint64_t t2 = __rdtsc();
    const char *blocks[2] = {p->rank == 0 ? send : peer, p->rank == 0 ? peer : send};
    cxl_coll_note_all_written(c, e);
    cxl_fold(CXL_F32, CXL_SUM, recv, blocks, 2, count);
    uint64_t t3 = __rdtsc();
    steps[1][0] += t1 - t0; steps[1][1] += t2 - t1; steps[1][2] += t3 - t2;
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

int main(int argc, char **argv)
{
    int batches = atoi(argv[1]), iters = atoi(argv[2]);
    cxl_pool_spec_t spec;
    char err[1024];
    cxl_segment_t seg;
    cxl_pool_spec_parse("shm", &spec, err, sizeof err);
    if (cxl_segment_create(&spec, 2, 1 << 16, &seg, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 2; }
    cxl_segment_unlink(&seg); /* both ranks have it mapped across the fork */
    uint64_t a = __rdtsc();
    double ta = cxl_now_ns();
    usleep(20000);
    double ns_per_tick = (cxl_now_ns() - ta) / (double)(__rdtsc() - a);
    pid_t child = fork();
    int rank = child == 0;
    cxl_pool_t p;
    memset(&p, 0, sizeof p);
    p.base = seg.base; p.flags_offset = seg.layout.flags_offset; p.data_offset = seg.layout.data_offset;
    p.slot_stride = seg.layout.slot_stride; p.nranks = 2; p.rank = rank; p.spin_iters = 4096;
    cxl_coll_t c;
    cxl_coll_init(&c, &p, 1 << 16, 30e9);
    for (int i = 0; i < 200; i++) cxl_coll_barrier(&c);
    double rt = cxl_coll_flag_pingpong(&c, 2000);
    if (!rank) printf("ROUNDTRIP %.1f\n", rt);
    float *s = malloc(1 << 16), *r = malloc(1 << 16), *w = malloc(1 << 16);
    double *t = malloc(sizeof(double) * NVARIANTS * batches), *parts = malloc(sizeof(double) * 7 * batches);
    for (int z = 3; z < argc; z++) {
        uint64_t bytes = strtoull(argv[z], NULL, 10), count = bytes / 4;
        for (uint64_t i = 0; i < count; i++) s[i] = (float)(rank + 1) * 0.37f + (float)(i % 7);
        int inline_ok = bytes <= CXL_COLL_LINES_MAX, bad = 0;
        for (int b = 0; b < batches; b++)
            for (int v = 0; v < NVARIANTS; v++) {
                memset(steps, 0, sizeof steps);
                c.inline_bytes = v == LINES ? CXL_COLL_LINES_MAX : 0;
                cxl_coll_barrier(&c);
                double t0 = cxl_now_ns();
                for (int i = 0; i < iters; i++) {
                    if (v == LINES || v == SLOT) cxl_coll_allreduce(&c, (char *)s, (char *)(v == LINES ? r : w), count, CXL_F32, CXL_SUM, 1u << 30);
                    else if (v == SLOT_STEPS) slot_steps(&c, (char *)s, (char *)w, count);
                    else if (inline_ok) lines_steps(&c, (char *)s, (char *)w, count);
                }
                t[v * batches + b] = (cxl_now_ns() - t0) / iters;
                if (v != LINES && (v != LINES_STEPS || inline_ok)) bad |= memcmp(r, w, bytes) != 0;
                if (v == SLOT_STEPS) for (int k = 0; k < 4; k++) parts[k * batches + b] = steps[0][k] * ns_per_tick / iters;
                if (v == LINES_STEPS) for (int k = 0; k < 3; k++) parts[(4 + k) * batches + b] = steps[1][k] * ns_per_tick / iters;
            }
        if (rank) continue;
        printf("SIZE %llu%s", (unsigned long long)bytes, bad ? " MISMATCH" : "");
        for (int v = 0; v < NVARIANTS + 7; v++) {
            double *row = v < NVARIANTS ? t + v * batches : parts + (v - NVARIANTS) * batches;
            if (v == LINES_STEPS || (v >= NVARIANTS + 4 && !inline_ok)) { printf(" nan nan nan"); continue; }
            qsort(row, batches, sizeof(double), cmpd);
            printf(" %.1f %.1f %.1f", row[batches / 2], row[0], row[batches - 1]);
        }
        printf("\n");
        fflush(stdout);
    }
    if (child) waitpid(child, NULL, 0);
    return 0;
}
"""
def cell(med: list[float], lo: list[float], hi: list[float], i: int) -> str:
    """Median [min-max] of column i, or a dash where the column was not measured (nan)."""
    return f"{med[i]:6.0f} [{lo[i]:4.0f}-{hi[i]:5.0f}]" if med[i] == med[i] else f"{'-':>18}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4B:4KiB")
    parser.add_argument("--batches", type=int, default=9)
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    sizes = [n for n in parse_sizes(args.sizes) if n >= 4]
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "allreduce_split")
        Path(exe + ".c").write_text(PROGRAM)
        subprocess.run([cc, "-O3", "-std=gnu11", "-D_GNU_SOURCE", "-Wall", "-Wno-unused-function", "-I", str(EMULATOR),
                        exe + ".c", "-o", exe], check=True)
        load_before = open("/proc/loadavg").read().split()[0]
        done = subprocess.run([exe, str(args.batches), str(args.iterations), *map(str, sizes)], capture_output=True,
                              text=True, timeout=1800)
        load_after = open("/proc/loadavg").read().split()[0]
    if done.returncode != 0:
        raise SystemExit(f"the split program failed ({done.returncode}): {done.stderr}")
    lines = done.stdout.splitlines()
    roundtrip = float(lines[0].split()[1])
    placement = placement_of(roundtrip)
    print(f"# pool allreduce at np=2, hw, float32 sum, no MPI: ns per call, median [min-max] over {args.batches} "
          f"batches of {args.iterations}; flag round trip {roundtrip:.0f} ns ({placement}: fast below 200 ns, slow "
          f"below 2 us, disturbed above); load average {load_before} before, {load_after} after (the machine may be "
          f"shared). `lines` is the line-flag path up to 560 B (the MPI library's up to 280 B in the fast placement, 560 B in the slow); steps are timed with rdtsc.")
    print(f"{'size':>7} {'lines':>18} {'slot':>18} {'slot/lines':>10} | slot steps: {'claim+copy-in':>13} "
          f"{'publish':>7} {'wait':>6} {'fold':>6} | lines steps: {'publish':>7} {'read':>6} {'fold':>9}")
    for row in lines[1:]:
        words = row.split()
        n = int(words[1])
        bad = words[2] == "MISMATCH"
        vals = [float(x) for x in words[3 if bad else 2:]]
        med = vals[0::3]
        lo, hi = vals[1::3], vals[2::3]
        ratio = med[1] / med[0]
        lines_part = " ".join(f"{med[i]:>{w}.0f}" if med[i] == med[i] else f"{'-':>{w}}"
                              for i, w in zip((8, 9, 10), (7, 6, 9)))
        print(f"{format_size(n):>7} {cell(med, lo, hi, 0)} {cell(med, lo, hi, 1)} {ratio:10.2f} | {'':12}{med[4]:13.0f} {med[5]:7.0f} "
              f"{med[6]:6.0f} {med[7]:6.0f} | {'':13}{lines_part}" + ("  RESULTS DIFFER" if bad else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
