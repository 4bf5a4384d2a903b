"""What an oversubscribed rank costs here: the figures `cxlsim replay --cpus N` models CPU sharing with, and a
check of that model (EEVDF by CPU time, cxlsim.replay.cpu_sharing) on loops where ranks outnumber CPUs.

    python benchmarks/replay_cpu_sharing.py [--rounds 3] [--quick]

Measurements, each repeated `--rounds` times (median [min-max] printed, with the load average before
and after each):
0. **What a yield costs the yielder**: on CPU 0, a busy loop and a poller that calls sched_yield every
   2, 20 or 200 us; each one's share of the CPU. Under EEVDF a yield of an eligible task forfeits the
   rest of its slice to the tasks of its own scheduling group, so in the busy loop's session the poller
   gets far less than half. Then the poller in a session of its own, as MPICH's launcher (hydra) starts
   every rank: under the kernel's autogroup each session is a group, the yield forfeits nothing across
   them and the poller gets about the busy loop's share. Which of the two it is decides the model's rule
   for the ranks (`CPUSharing.yield_forfeits`; measured here at load 5.6: 0.5% in one session, 29-31%
   against the busy loop's 32-34% in its own). Then two processes pass a flag back and forth on CPU 0,
   yielding at every poll, in one session and each in its own: where a yield hands the CPU over at once
   a round trip takes one poll a side; where it does not, the yielder polls on until it has had more CPU
   time than the other (measured at load 6: 1 poll and 1 switch a side, 16-20 us; in own sessions 24-326
   polls and 1.05-1.3 switches, 94-851 us).
1. **The scheduler's slice for CPU-bound processes**: two busy loops pinned to one CPU, each reading the
   clock; a gap over 20 us is a time the other ran. The median run between gaps is the slice a CPU-bound
   rank gets before it is preempted (`--cpu-slice`).
2. **MPICH's yield interval**: an 8-byte ping-pong under MPICH (no library) with both ranks pinned to one
   CPU. A waiting rank busy-polls and calls sched_yield; `--mpi-yield` is the interval with which the
   model (part 0's rule, the slice of part 1, part 3's hand-over cost) gives the measured time of that pinned ping-pong (a
   bisection over the DES of its trace: in steady state the model's round trip on one CPU is 6 yield
   intervals, MPICH's three turns a message (cxlsim.replay.cpu_sharing: the poll that sees a message is
   followed by a yield), not 2 plus the round trip on two CPUs, so half the excess over two CPUs is not the
   interval). The ping-pong on two CPUs gives the messages' cost (half its round trip). Then the check of
   those turns: the ring program at np 2 (the same ping-pong) pinned to one CPU, each rank's switches away
   per round trip, measured against the model's with that interval (perf sched: one hand-over a message
   would be 1; MPICH's are about 3).
3. **The library's pool wait and a hand-over's cost**: MPI_Barrier on the library's pool (`cxlsim mpi run`),
   both ranks pinned to one CPU (the library sees one core for two ranks and yields after 8 polls), and four
   ranks bound to CPUs 0,0,1,1 (two a CPU, `mpiexec -bind-to user:0,0,1,1`), their switches a rank and barrier;
   one poll of the oversubscribed wait (a flag load and a sched_yield, alone on CPU 0) is `--pool-yield`, as
   measured. `--cpu-switch`, the CPU time a hand-over costs the task that gets the CPU, is the mean with which the
   model gives the pinned barrier loop its measured time, and `--cpu-switch-cv`, the spread of that cost (gamma
   draws), the one with which it gives the 0,0,1,1 loop its measured hand-overs (a constant cost keeps the two
   CPUs in step, 0.50 a rank and barrier; the spread lets one fall behind while the other's two ranks wait;
   fitted in turn, twice). MPICH's yield interval (part 2) is then inverted with that hand-over cost. And the
   library's spin before its first yield where the ranks do not outnumber the CPUs (4096 polls, timed alone:
   `--pool-spin`).
4. **The check, where ranks outnumber CPUs (np 3 and 4 on this machine's CPUs, unpinned)**, measured and
   replayed by the model with the figures of 1-3 (nothing fitted here): an 8-byte ring exchange under MPICH
   (each rank sends to its right and receives from its left, blocking), the library's MPI_Barrier loop, and
   the library's loop of the validation's collective-bound app (an allreduce of 64 KiB, an allgather and a
   bcast of 4 KiB, an allreduce of 8 B: 5 waits for every rank per iteration; also at np 2, one CPU each),
   time per iteration, the loop's collectives priced by `--pool-profile`, and the model's error (no other
   processes in it). Each rank reports, over the timed loop, its CPU time, switches, sleeps, run delay, the CPU
   it started and ended on and its moves between CPUs (/proc/self/sched). The kernel places the ranks anew in
   each run, and a map's model is not another's (np 4 ring: 7.4 us an iteration on 0,1,0,1, 14.9 on 1,1,0,0), so
   each run is modelled on the CPUs its ranks started the loop on, and the loop's error is the median over its
   runs of each run's error against its own map's model. Nothing samples the runs: a sampling process's wakeups take turns
   on the ranks' CPUs and slow the loop it watches (an np 4 ring beside cxlsim.replay.rank_cpus's sampler at
   5 ms: 29.5 against 14.0 us an iteration, interleaved, load ~1). Each loop is sized to run about LOOP_S s
   (from a 200-iteration run), so the ranks' figures measure the loop, printed per iteration beside the
   model's, with the ranks' CPU use (their CPU time over the wall time; 1 - that, per CPU, is what other
   processes took).
5. **A blocking exchange at np 2-4** (skipped with `--quick`): the halo program (tests/data/traces/src/
   halo_timed.c) without work, under MPICH alone and under the library: time per iteration.
6. **A large send waits for its receiver's turn** (skipped with `--quick`): MPICH sends a
   message of 8 KiB or more through its CMA path (MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD): the receiver copies
   it in its own progress and sends an ACK, and only then is the send complete (ch4 shm/ipc ipc_control.c),
   where an eager message (4 KiB) is complete once written. Rank 0 on CPU 0, rank 1 on CPU 1; each iteration
   rank 1 posts a receive and a send and waits, rank 0 computes 50 us first: rank 0's Waitall, mean and
   median, 4 KiB against 32 KiB, with rank 1 alone on its CPU and beside a busy loop there (in a session of
   its own). The halo apps' 32 KiB exchanges pay this where ranks share CPUs; the replay with `--cpus`
   completes such a send once its receiver has polled after the match (cxlsim.replay.cpu_sharing.CMA_BYTES); each
   row prints that replay of the same program beside the measurement (`turns_model`).
It ends with the replay options these figures give (one set, for every np). Placement: the ranks of 0-3
share one CPU (taskset); 4 and 5 are unpinned. The machine's load from other jobs disturbs every figure
(the model has no other processes): read the load columns and the other processes' share.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import tempfile

from cxlsim.calibrate.profile import load_profile, make_profile, save_profile
from cxlsim.loggp import LogGPFit, Regime
from cxlsim.emulator.cli import find_mpiexec
from cxlsim.mpi.build import build, find_mpicc
from cxlsim.replay import engine, fabrics, pool_profile, simgrid
from cxlsim.replay.cpu_sharing import CPUSharing

HERE = os.path.dirname(os.path.abspath(__file__))
HALO = os.path.join(HERE, "..", "tests", "data", "traces", "src", "halo_timed.c")

SLICER = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
/* slicer N CPU SECONDS: N busy processes pinned to CPU; each prints the median length of its runs between
 * gaps over 20 us (ms) and its share of the CPU. */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
  int n = atoi(argv[1]), cpu = atoi(argv[2]);
  double span = atof(argv[3]) * 1e9;
  for (int i = 0; i < n; i++) {
    if (fork() == 0) {
      cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); sched_setaffinity(0, sizeof s, &s);
      static double runs[100000];
      int k = 0;
      double start = now(), last = start, run_start = start, gaps = 0;
      while (last - start < span) {
        double t = now();
        if (t - last > 20000) { if (k < 100000) runs[k++] = last - run_start; gaps += t - last; run_start = t; }
        last = t;
      }
      qsort(runs, k, sizeof runs[0], cmp);
      printf("slice_ms %.4f share %.3f runs %d\n", k ? runs[k / 2] / 1e6 : 0.0, 1 - gaps / span, k);
      exit(0);
    }
  }
  while (wait(NULL) > 0) {}
  return 0;
}
"""

YIELDER = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
/* yielder SECONDS POLL_NS [OWN]: on CPU 0, process A busy-loops, process B polls and calls sched_yield every POLL_NS
 * of polling (in a session of its own with OWN 1, as MPICH's launcher starts each rank); each prints its share of
 * the CPU (its time less its gaps over 20 us, the other's turns). */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
  double span = atof(argv[1]) * 1e9, poll = atof(argv[2]);
  int own = argc > 3 && atoi(argv[3]);
  for (int who = 0; who < 2; who++) {
    if (fork() == 0) {
      if (who == 1 && own) setsid();
      cpu_set_t s; CPU_ZERO(&s); CPU_SET(0, &s); sched_setaffinity(0, sizeof s, &s);
      double start = now(), last = start, gaps = 0, since = start;
      while (last - start < span) {
        double t = now();
        if (t - last > 20000) gaps += t - last;
        last = t;
        if (who == 1 && t - since >= poll) { sched_yield(); since = now(); }
      }
      printf("%s %.4f\n", who ? "yielder_share" : "busy_share", 1 - gaps / span);
      exit(0);
    }
  }
  while (wait(NULL) > 0) {}
  return 0;
}
"""

FLAG_PINGPONG = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
/* flag_pingpong ITERATIONS OWN: two processes pinned to CPU 0 pass a shared flag back and forth, calling sched_yield
 * at every poll (as MPICH and the library do once they yield); OWN 1: each in a session of its own, as MPICH's
 * launcher starts ranks. Each prints us per round trip, its polls and its switches away while runnable per round
 * trip: one poll a round trip where a yield hands the CPU over at once, many where the yielder keeps it until it
 * has had more CPU time than the other. */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
  int it = atoi(argv[1]), own = atoi(argv[2]);
  volatile uint64_t *f = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  for (int who = 0; who < 2; who++) {
    if (fork() == 0) {
      if (own) setsid();
      cpu_set_t s; CPU_ZERO(&s); CPU_SET(0, &s); sched_setaffinity(0, sizeof s, &s);
      __atomic_add_fetch(&f[1], 1, __ATOMIC_SEQ_CST);
      while (__atomic_load_n(&f[1], __ATOMIC_ACQUIRE) < 2) sched_yield();
      struct rusage a, b; double polls = 0;
      getrusage(RUSAGE_SELF, &a);
      double t0 = now();
      for (uint64_t i = 0; i < (uint64_t)it; i++) {
        uint64_t mine = 2 * i + who;
        while (__atomic_load_n(&f[0], __ATOMIC_ACQUIRE) != mine) { sched_yield(); polls++; }
        __atomic_store_n(&f[0], mine + 1, __ATOMIC_RELEASE);
      }
      double t = now() - t0;
      getrusage(RUSAGE_SELF, &b);
      printf("side %d us %.3f polls %.2f switches %.3f\n", who, t / it / 1e3, polls / it,
             (double)(b.ru_nivcsw - a.ru_nivcsw) / it);
      exit(0);
    }
  }
  while (wait(NULL) > 0) {}
  return 0;
}
"""

SPIN = r"""
#include <stdint.h>
#include <stdio.h>
#include <time.h>
/* spin: the time of the library's pool-wait spin (cxlsim/mpi/pools.c SPIN_ITERS = 4096 polls of a flag, a pause
 * each, as cxl_backoff does before its first yield), the best of 200 (ns). */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(void) {
  volatile uint64_t flag = 0; double best = 1e18;
  for (int r = 0; r < 200; r++) {
    double t0 = now();
    for (int i = 0; i < 4096; i++) {
      if (__atomic_load_n(&flag, __ATOMIC_ACQUIRE) >= 1) break;
#if defined(__x86_64__) || defined(__i386__)
      __asm__ volatile("pause");
#endif
    }
    double t = now() - t0;
    if (t < best) best = t;
  }
  printf("spin_ns %.0f\n", best);
  return 0;
}
"""

POLL_YIELD = r"""
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
/* poll_yield: one poll of the library's oversubscribed pool wait (cxl_backoff after its spin: a flag load, then
 * sched_yield), alone on its CPU: the best of 20 means of 20000 polls (ns a poll). */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(void) {
  volatile uint64_t flag = 0; double best = 1e18;
  for (int r = 0; r < 20; r++) {
    double t0 = now();
    for (int i = 0; i < 20000; i++) {
      if (__atomic_load_n(&flag, __ATOMIC_ACQUIRE) >= 1) break;
      sched_yield();
    }
    double t = (now() - t0) / 20000;
    if (t < best) best = t;
  }
  printf("poll_ns %.1f\n", best);
  return 0;
}
"""

PINGPONG = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* pingpong ITERATIONS: 8-byte round trips between ranks 0 and 1 (us per round trip) */
int main(int argc, char **argv) {
  int rank; char b[8] = {0};
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int it = atoi(argv[1]);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < it; i++) {
    if (rank == 0) { MPI_Send(b, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD); MPI_Recv(b, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(b, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(b, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD); }
  }
  if (rank == 0) printf("us %.3f\n", (MPI_Wtime() - t0) / it * 1e6);
  MPI_Finalize();
  return 0;
}
"""

LOOP_STATS = r"""
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
/* What the scheduler did to each rank over the timed loop: its CPU time (CLOCK_PROCESS_CPUTIME_ID, ns), its
 * switches away while runnable (a preemption or a yield that handed the CPU over: ru_nivcsw), its sleeps
 * (ru_nvcsw), its time runnable off the CPU (/proc/self/schedstat's run delay, ns; -1 without it), the CPU it
 * started the loop on and the one it ended on, and its moves between CPUs over the loop (/proc/self/sched's
 * se.nr_migrations; -1 without it); rank 0 prints one line per rank after the loop. The ranks report these
 * themselves: a sampling process beside them would take turns on their CPUs and slow the loop it watches. */
static struct rusage ru0;
static double cpu0, delay0, moves0, start_cpu;
static double cpu_ns(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static double delay_ns(void) {
  unsigned long long ran, delay; FILE *f = fopen("/proc/self/schedstat", "r");
  int got = f ? fscanf(f, "%llu %llu", &ran, &delay) : 0;
  if (f) fclose(f);
  return got == 2 ? (double)delay : -1.0;
}
static double migrations(void) {
  char line[256]; double got = -1.0; FILE *f = fopen("/proc/self/sched", "r");
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "se.nr_migrations", 16) == 0) { char *colon = strchr(line, ':'); if (colon) got = atof(colon + 1); }
  if (f) fclose(f);
  return got;
}
static void stats_start(void) {
  moves0 = migrations(); start_cpu = sched_getcpu(); getrusage(RUSAGE_SELF, &ru0); cpu0 = cpu_ns(); delay0 = delay_ns();
}
static void stats_end(int rank, int size) {
  struct rusage ru; getrusage(RUSAGE_SELF, &ru);
  double delay = delay_ns(), moves = migrations();
  double mine[7] = {cpu_ns() - cpu0, (double)(ru.ru_nivcsw - ru0.ru_nivcsw), (double)(ru.ru_nvcsw - ru0.ru_nvcsw),
                    delay < 0 || delay0 < 0 ? -1.0 : delay - delay0, (double)sched_getcpu(), start_cpu,
                    moves < 0 || moves0 < 0 ? -1.0 : moves - moves0};
  double *all = malloc(sizeof mine * size);
  MPI_Gather(mine, 7, MPI_DOUBLE, all, 7, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0)
    for (int r = 0; r < size; r++)
      printf("rank %d cpu_ns %.0f switches %.0f sleeps %.0f delay_ns %.0f on %.0f from %.0f moves %.0f\n", r,
             all[7 * r], all[7 * r + 1], all[7 * r + 2], all[7 * r + 3], all[7 * r + 4], all[7 * r + 5], all[7 * r + 6]);
  free(all);
}
"""

RING = LOOP_STATS + r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* ring ITERATIONS: us per iteration of an 8-byte send to the right and receive from the left (blocking) */
int main(int argc, char **argv) {
  int rank, size; char s[8] = {0}, r[8];
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  int it = atoi(argv[1]), right = (rank + 1) % size, left = (rank + size - 1) % size;
  MPI_Barrier(MPI_COMM_WORLD);
  stats_start();
  double t0 = MPI_Wtime();
  for (int i = 0; i < it; i++) {
    if (rank % 2 == 0) { MPI_Send(s, 8, MPI_CHAR, right, 0, MPI_COMM_WORLD); MPI_Recv(r, 8, MPI_CHAR, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(r, 8, MPI_CHAR, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(s, 8, MPI_CHAR, right, 0, MPI_COMM_WORLD); }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("us %.3f\n", (MPI_Wtime() - t0) / it * 1e6);
  stats_end(rank, size);
  MPI_Finalize();
  return 0;
}
"""

BARRIERS = LOOP_STATS + r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* barriers ITERATIONS: us per MPI_Barrier */
int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  int it = atoi(argv[1]);
  MPI_Barrier(MPI_COMM_WORLD);
  stats_start();
  double t0 = MPI_Wtime();
  for (int i = 0; i < it; i++) MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("us %.3f\n", (MPI_Wtime() - t0) / it * 1e6);
  stats_end(rank, size);
  MPI_Finalize();
  return 0;
}
"""


COLLS = LOOP_STATS + r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* colls ITERATIONS: us per iteration of the validation's collective-bound app without its work (replay_validate.py) */
static float v[16384], w[16384];
static char block[4096], all[4 * 4096], b[4096];
int main(int argc, char **argv) {
  int rank, size; double res = 1.0, sum;
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  int it = atoi(argv[1]);
  MPI_Barrier(MPI_COMM_WORLD);
  stats_start();
  double t0 = MPI_Wtime();
  for (int i = 0; i < it; i++) {
    MPI_Allreduce(v, w, 16384, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allgather(block, 4096, MPI_CHAR, all, 4096, MPI_CHAR, MPI_COMM_WORLD);
    MPI_Bcast(b, 4096, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Allreduce(&res, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("us %.3f\n", (MPI_Wtime() - t0) / it * 1e6);
  stats_end(rank, size);
  MPI_Finalize();
  return 0;
}
"""
TURNS = r"""
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
/* turns SIZE ITERATIONS DELAY_US: rank r pinned to CPU r; each iteration rank 1 posts an irecv and an isend of SIZE
 * bytes at once and waits (MPI_Waitall), rank 0 spins DELAY_US first, then does the same; a barrier ends each
 * iteration. Rank 0 prints each rank's mean and median Waitall (us). */
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
  int rank; MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int size = atoi(argv[1]), it = atoi(argv[2]); double delay = atof(argv[3]);
  cpu_set_t s; CPU_ZERO(&s); CPU_SET(rank, &s); sched_setaffinity(0, sizeof s, &s);
  char *a = calloc(size, 1), *b = calloc(size, 1); double *w = calloc(it, sizeof(double)), sum = 0;
  MPI_Request r[2]; int peer = 1 - rank;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < it; i++) {
    if (rank == 0) { double t = MPI_Wtime(); while ((MPI_Wtime() - t) * 1e6 < delay) {} }
    MPI_Irecv(b, size, MPI_CHAR, peer, 0, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(a, size, MPI_CHAR, peer, 0, MPI_COMM_WORLD, &r[1]);
    double t = MPI_Wtime();
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    w[i] = (MPI_Wtime() - t) * 1e6; sum += w[i];
    MPI_Barrier(MPI_COMM_WORLD);
  }
  qsort(w, it, sizeof(double), cmp);
  double mine[2] = {sum / it, w[it / 2]}, all[4];
  MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("mean0 %.2f median0 %.2f mean1 %.2f median1 %.2f\n", all[0], all[1], all[2], all[3]);
  MPI_Finalize(); return 0;
}
"""

BUSY = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
/* busy CPU: a busy loop pinned to CPU, in a session of its own, until killed */
int main(int argc, char **argv) {
  cpu_set_t s; CPU_ZERO(&s); CPU_SET(atoi(argv[1]), &s); sched_setaffinity(0, sizeof s, &s); setsid();
  volatile unsigned long x = 0; for (;;) x++;
}
"""

COLL_STEP = ["allreduce 65536 0", "allgather 4096 4096", "bcast 4096 0", "allreduce 8 0"]
"""The colls loop's calls per iteration, as the library traces them (bytes)."""


def loadavg() -> float:
    return os.getloadavg()[0]


def compile_c(tmp: str, name: str, source: str, mpi: bool) -> str:
    src, exe = os.path.join(tmp, name + ".c"), os.path.join(tmp, name)
    with open(src, "w") as fh:
        fh.write(source)
    subprocess.run([find_mpicc() if mpi else "cc", "-O2", src, "-o", exe], check=True)
    return exe


def run(cmd: list, pin: str | None = None, library: bool = False) -> str:
    """stdout of `cmd` (MPI programs through mpiexec; under the library with `library`; pinned to CPUs `pin`). Nothing
    samples the run: a sampler's wakeups take turns on the ranks' CPUs (an np 4 ring beside RankCPUs at 5 ms ran
    2.1x slower, measured); the loop programs report their own CPUs (LOOP_STATS)."""
    if library:
        cmd = [sys.executable, "-m", "cxlsim", "mpi", "run", "--", *cmd]
    if pin is not None:
        cmd = ["taskset", "-c", pin, *cmd]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{' '.join(cmd)}: over 600 s; stopped") from None
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def run_maps(runs: list) -> str:
    """Each run's CPU map (each rank's CPU at the loop's start) and its ranks' moves between CPUs over the loop."""
    return "; ".join(",".join(map(str, r["map"])) + (f" ({r['moves']:.0f} moves)" if r["moves"] else "") for r in runs)


def spread(values: list) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def measure(rounds: int, label: str, once) -> list:
    """`once()` -> a figure, `rounds` times, each with the load before and after; prints the row."""
    got, loads = [], []
    for _ in range(rounds):
        before = loadavg()
        got.append(once())
        loads.append((before, loadavg()))
    load = f"load {min(min(p) for p in loads):.2f}-{max(max(p) for p in loads):.2f}"
    print(f"  {label:<58} {spread(got):>28}   {load}", flush=True)
    return got


def ring_step(n: int):
    """The ring program's calls per rank and iteration (SimGrid TI lines): r -> lines."""
    def lines(r):
        right, left = (r + 1) % n, (r + n - 1) % n
        return [f"send {right} 0 8", f"recv {left} 0 8"] if r % 2 == 0 else [f"recv {left} 0 8", f"send {right} 0 8"]
    return lines


def write_trace(directory: str, n: int, lines) -> str:
    os.makedirs(directory)
    for r in range(n):
        with open(os.path.join(directory, f"t_rank-{r + 1}.txt"), "w") as fh:
            fh.write("".join(f"{r} {line}\n" for line in ["init", *lines(r), "finalize"]))
    return directory


def message_profile(tmp: str, one_way_ns: float) -> str:
    """A network profile whose every message costs `one_way_ns` (the measured half round trip), for the DES."""
    regime = Regime(min_size_bytes=0, max_size_bytes=1 << 22, latency_ns=one_way_ns, overhead_ns=0.0, gap_ns=0.0,
                    gap_per_byte_ns=0.0, rms_rel_error=0.0)
    model = {"base_preset": "ib-hdr", "np": 2, "loggp": LogGPFit(regimes=(regime,), identified="measured").to_dict(),
             "collective_overhead_ns": 0.0, "memcpy_bw_bytes_per_ns": {"1": 10.0}}
    return save_profile(os.path.join(tmp, "messages.json"), make_profile("network", model, []))


def modelled_us(trace, spec: str, iterations: int, sharing: CPUSharing | None, stats: str | None = None):
    """The DES's time per iteration of a loop trace between its barriers (rank 0), us, and its Timeline; `stats`:
    the library's stats table of the loop, for a joined NET.json+LOCAL.json `spec`."""
    library = pool_profile.read_library_stats(stats, "the loop's") if stats else None
    fab = fabrics.resolve(spec, trace.size, trace=trace, library_stats=library)
    timeline = engine.replay(trace, fab.make(), priced=fab.priced, sharing=sharing)
    barriers = [seg for seg in timeline.segments[0] if seg[2] == "barrier"]
    return (barriers[-1][1] - barriers[0][1]) / iterations / 1e3, timeline


CAPS = {"ring": 20000, "barrier loop": 20000, "collective loop": 3000}
"""The most iterations of each loop (the DES replays every call, so its time grows with them)."""
LOOP_S = 0.25
"""How long each loop is sized to run (s), so the ranks' CPU times measure more than its start."""
RANK_LINE = re.compile(r"rank (\d+) cpu_ns (\S+) switches (\S+) sleeps (\S+) delay_ns (\S+) on (\d+) from (\d+) "
                       r"moves (\S+)")


def loop_run(exe: str, n: int, iterations: int, library: bool, pin: str | None = None, bind: str | None = None) -> dict:
    """One run of a loop program (np n, unpinned, or on CPUs `pin`, or each rank bound to its CPU of the map `bind`,
    e.g. 0,0,1,1): {'us': per iteration, 'cpu_ns', 'switches', 'sleeps', 'delay_ns'
    (time runnable off its CPU): per rank over the loop, 'map': the CPU each rank started the loop on, 'moves': the
    ranks' moves between CPUs over the loop (summed; -1 if /proc/self/sched was not readable), 'others': per CPU,
    the share of the loop's wall time the ranks on it did not run (1 - their CPU time / the wall time; a CPU with a
    busy-polling rank is never idle, so that time is other processes'; 0 for a CPU without a rank)}."""
    binding = ["-bind-to", f"user:{bind}"] if bind else []
    out = run([find_mpiexec(), "-n", str(n), *binding, exe, str(iterations)], pin, library)
    us = float(re.search(r"us (\S+)", out).group(1))
    ranks = sorted((int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5)),
                    int(m.group(6)), int(m.group(7)), float(m.group(8))) for m in RANK_LINE.finditer(out))
    if len(ranks) != n:
        raise SystemExit(f"{exe}: {len(ranks)} rank lines in its output, {n} expected:\n{out}")
    where = tuple(r[6] for r in ranks)
    moves = -1.0 if any(r[7] < 0 for r in ranks) else sum(r[7] for r in ranks)
    wall = us * iterations * 1e3
    cpus = os.cpu_count() or 1
    foreign = [0.0] * cpus
    for c in set(where):
        if c < cpus:
            foreign[c] = max(0.0, 1 - sum(r[1] for r in ranks if where[r[0]] == c) / wall)
    return {"us": us, "cpu_ns": [r[1] for r in ranks], "switches": [r[2] for r in ranks],
            "sleeps": [r[3] for r in ranks], "delay_ns": [r[4] for r in ranks], "map": where, "moves": moves,
            "others": foreign, "wall_ns": wall}


def record(runs: list, got: dict) -> float:
    runs.append(got)
    return got["us"]


def loop_iterations(exe: str, n: int, library: bool, cap: int) -> int:
    """Iterations for about LOOP_S s of the loop (from a 200-iteration run), 200 to `cap`; the run is not a round."""
    us = loop_run(exe, n, 200, library)["us"]
    return max(200, min(cap, int(LOOP_S * 1e6 / max(us, 1e-3))))


def loop_lines(step: list, iterations: int):
    """A loop program's calls per rank (a SimGrid TI trace): `step` (r -> lines) `iterations` times between two
    barriers."""
    return lambda r: ["barrier", *step(r) * iterations, "barrier"]


def mechanism(runs: list, timeline, iterations: int, n: int) -> str:
    """The scheduler's work per iteration, measured (median over the rounds) and modelled: switches away while
    runnable per rank (mean over ranks), sleeps, and the ranks' CPU time over the wall time."""
    def med(key):
        return statistics.median(sum(r[key]) / len(r[key]) / iterations for r in runs)
    busy = statistics.median(sum(r["cpu_ns"]) / r["wall_ns"] for r in runs)
    window = timeline.finish_ns[0]
    model = (f"{sum(timeline.switches) / n / iterations:.2f} switches, ranks' CPU {sum(timeline.cpu_ns) / window:.2f} "
             f"CPUs" if timeline.switches is not None else "one CPU each: no switches")
    return (f"per iteration and rank: measured {med('switches'):.2f} switches, {med('sleeps'):.3f} sleeps, ranks' "
            f"CPU {busy:.2f} CPUs; model {model}")


def options_line(sharing: CPUSharing) -> str:
    """The output's last line: the `cxlsim replay` options of these figures (benchmarks/replay_validate.py reads it)."""
    return (f"# replay options (parts 1-3, for every np): --cpus {sharing.cpus} --cpu-slice "
            f"{sharing.slice_ns / 1e3:.0f}us --mpi-yield {sharing.mpi_yield_ns / 1e3:.2f}us --pool-yield "
            f"{sharing.pool_yield_ns / 1e3:.3f}us --pool-spin {sharing.pool_spin_ns / 1e3:.2f}us --cpu-switch "
            f"{sharing.switch_ns / 1e3:.3f}us --cpu-switch-cv {sharing.switch_cv:.3f}")


def check(label: str, runs: list, models: dict, others: str) -> list:
    """Print the model of each run's CPU map beside the run, each run's error and their median (the verdict's
    statistic: the kernel places the ranks anew in every run and the model of one map is not the model of
    another, so each run is compared with the model of its own map); returns the errors (%)."""
    errors = [(models[r["map"]] - r["us"]) / r["us"] * 100 for r in runs]
    per_map = "; ".join(f"{','.join(map(str, m))}: {us:.1f} us" for m, us in models.items())
    print(f"    model (the figures of 1-3) of each run's CPUs ({run_maps(runs)}): {per_map}; error per run "
          + ", ".join(f"{e:+.1f}" for e in errors) + f"%, median {statistics.median(errors):+.1f}% ({label}; no "
          f"other processes; they took {others} of the CPUs)", flush=True)
    return errors


def library_rows(trace) -> dict:
    """{the library's MPI name: calls summed over ranks} of a trace's collectives, every one on the pool."""
    names = {kind: name for name, kind in pool_profile.LIBRARY_NAMES.items()}
    rows = {}
    for calls in trace.ranks:
        for c in calls:
            if c.kind in names:
                rows[names[c.kind]] = rows.get(names[c.kind], 0) + 1
    return rows


def stats_file(path: str, n: int, rows: dict) -> str:
    """A library stats table saying every call of `rows` ({MPI name: calls summed over ranks}) ran on the pool."""
    with open(path, "w") as fh:
        fh.write(f"cxlsim-mpi stats: {n} ranks, sums over ranks; pool shm, coherence hw\n"
                 + "".join(f"{name} {calls} 0 0 {calls} 0 0\n" for name, calls in rows.items()))
    return path


def flag_pingpong(exe: str, own_session: bool, got: list) -> float:
    """One run of FLAG_PINGPONG (20000 round trips): us a round trip; appends (polls, switches) per round trip and
    side (the mean of the two sides) to `got`."""
    out = run([exe, "20000", "1" if own_session else "0"])
    sides = re.findall(r"side \d us (\S+) polls (\S+) switches (\S+)", out)
    got.append((sum(float(x[1]) for x in sides) / 2, sum(float(x[2]) for x in sides) / 2))
    return max(float(x[0]) for x in sides)


TARGET_PCT = 10.0
"""Part 4's target (#17): the model within this of each loop (the median of its runs' errors, %)."""
FORFEIT_SHARE = 0.25
"""Part 0: a poller in its own session that gets less than this share of the busy loop's share forfeits its slice
at a yield across sessions (it gets about as much as the busy loop where it does not, under 1% where it does)."""


def autogroup() -> str:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as fh:
            return "on" if fh.read().strip() == "1" else "off"
    except OSError:
        return "not in this kernel"


def pinned_trace(tmp: str, what: str, iterations: int):
    """The trace of part 2's ping-pong or part 3's barrier loop (np 2), between two barriers, and its stats file."""
    step = (lambda r: ["send 1 0 8", "recv 1 0 8"] if r == 0 else ["recv 0 0 8", "send 0 0 8"]) \
        if what == "ping-pong" else (lambda r: ["barrier"])
    name = f"pinned-{what}-{len(os.listdir(tmp))}"
    trace = simgrid.read(write_trace(os.path.join(tmp, name), 2,
                                     loop_lines(step, iterations - (what == "barrier loop"))), 1e9)
    stats = stats_file(os.path.join(tmp, name + ".stats"), 2, library_rows(trace)) if what != "ping-pong" else None
    return trace, stats


PINNED_ITERATIONS = 3000
"""Round trips (barriers) of parts 2-3's pinned runs, whose times the yield intervals are inverted from. 300 lasted
about 5 ms (1 ms of barriers), two slices or less, so one preemption by another task weighed in it: interleaved at
load 2.9, the pinned ping-pong took 13.2-32.5 us a round trip over 300 and 12.1-15.6 over 3000; at load 3.8 the
pinned pool barrier 3.70-3.98 us over 300 and 2.42-2.78 over 3000 (three runs each)."""
PINNED_TURNS = 3000
"""Round trips of part 2's check of MPICH's turns (the np 2 ring pinned to CPU 0)."""


def pinned_turns(tmp: str, ring: str, rounds: int, one_cpu: CPUSharing, spec: str) -> str:
    """Part 2's check of the hand-overs: the ring program at np 2 (a ping-pong) with both ranks on CPU 0, each
    rank's switches away per round trip (median over `rounds` runs, their range) against the model's on one CPU
    with the inverted MPI interval (`one_cpu`), and the time per round trip of both."""
    runs = [loop_run(ring, 2, PINNED_TURNS, False, pin="0") for _ in range(rounds)]
    switches = [sum(r["switches"]) / 2 / PINNED_TURNS for r in runs]
    trace = simgrid.read(write_trace(os.path.join(tmp, f"pinned-turns-{len(os.listdir(tmp))}"), 2,
                                     loop_lines(ring_step(2), PINNED_TURNS)), 1e9)
    us, timeline = modelled_us(trace, spec, PINNED_TURNS, one_cpu)
    return (f"  MPICH's turns, the np 2 ring pinned to CPU 0 ({PINNED_TURNS} round trips): switches away per round "
            f"trip and rank measured {spread(switches)}, model {sum(timeline.switches) / 2 / PINNED_TURNS:.2f}; "
            f"us a round trip measured {spread([r['us'] for r in runs])}, model {us:.2f} (load {loadavg():.2f})")


TURN_SIZES = (4096, 32768)
"""Part 6's sizes: eager (complete once written) and MPICH's CMA path (complete at the receiver's ACK)."""


def turns_model(tmp: str, size: int, beside: bool, sharing: CPUSharing, spec: str) -> tuple[float, float]:
    """The replay by turns of part 6's program (`TURNS`: rank 0 computes 50 us, then both ranks post an irecv and an
    isend of `size` bytes and wait, then a barrier; 300 iterations; rank r on CPU r, `beside`: an always-runnable
    nice-0 task on CPU 1, as the busy loop): rank 0's Waitall, (mean, median) us."""
    def lines(r):
        return (["compute 50000"] if r == 0 else []) + [f"irecv {1 - r} 0 {size}", f"isend {1 - r} 0 {size}",
                                                         "waitall", "barrier"]
    name = os.path.join(tmp, f"turns-{size}-{int(beside)}-{len(os.listdir(tmp))}")
    trace = simgrid.read(write_trace(name, 2, lambda r: ["barrier", *lines(r) * 300]), 1e9)
    figures = dataclasses.replace(sharing, cpus=2, cpu_map=(0, 1), foreign=(0.0, 1.0) if beside else None)
    timeline = modelled_us(trace, spec, 300, figures)[1]
    waits = [(seg[1] - seg[0]) / 1e3 for seg in timeline.segments[0] if seg[2] == "waitall"]
    return statistics.fmean(waits), statistics.median(waits)


def receiver_turns(turns: str, busy: str, rounds: int, tmp: str, sharing: CPUSharing, spec: str) -> None:
    """Part 6: rank 0's Waitall (mean and median, us; 300 iterations) for each of TURN_SIZES, rank 1 alone on CPU 1
    and beside a busy loop there, `rounds` times each (interleaved), beside the replay by turns of the same program
    with `sharing` on `spec` (`turns_model`); prints the rows."""
    got = {}
    for _ in range(rounds):
        for beside in (False, True):
            loop = subprocess.Popen([busy, "1"]) if beside else None
            try:
                for size in TURN_SIZES:
                    out = run([find_mpiexec(), "-n", "2", turns, str(size), "300", "50"])
                    mean, median = (float(re.search(k + r" (\S+)", out).group(1)) for k in ("mean0", "median0"))
                    got.setdefault((beside, size), []).append((mean, median))
            finally:
                if loop is not None:
                    loop.kill()
                    loop.wait()
    for (beside, size), rows in got.items():
        where = "beside a busy loop on its CPU" if beside else "alone on its CPU"
        model_mean, model_median = turns_model(tmp, size, beside, sharing, spec)
        print(f"  {size // 1024} KiB, rank 1 {where}: rank 0's Waitall mean {spread([r[0] for r in rows])}, median "
              f"{spread([r[1] for r in rows])} us; model mean {model_mean:.1f}, median {model_median:.1f}   load "
              f"{loadavg():.2f}", flush=True)


def yield_through_model(tmp: str, kind: str, what: str, iterations: int, measured_us: float, one_cpu: CPUSharing,
                        spec: str):
    """The yield interval (ns) with which the model of two ranks on one CPU (`one_cpu`) gives `measured_us` an
    iteration of the pinned `what` (bisection over 0.1 us-10 ms: the model's time grows with the interval), and a
    note where even 0.1 us gives more than was measured (0.1 us is used)."""
    trace, stats = pinned_trace(tmp, what, iterations)

    def model_us(h):
        figures = dataclasses.replace(one_cpu, **{f"{kind}_yield_ns": h})
        return modelled_us(trace, spec, iterations, figures, stats)[0]
    low, high = 100.0, 1e7
    if model_us(low) >= measured_us:
        return low, (f"--{kind}-yield: the model gives the pinned {what} {model_us(low):.2f} us at a 0.1 us yield, "
                     f"{measured_us:.2f} us measured; 0.1 us is used")
    for _ in range(40):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if model_us(mid) < measured_us else (low, mid)
        if high / low < 1.002:
            break
    return (low * high) ** 0.5, None


SWITCH_FIT_ITERATIONS = 1000
"""Barriers of the modelled loops the hand-over cost is fitted on (the DES replays every one)."""
QUAD_MAP = (0, 0, 1, 1)
"""Part 3's np 4 map: two CPUs that each hold two ranks (the ranks of one CPU wait for the other CPU's)."""


def increasing_root(f, target: float, low: float, high: float, steps: int) -> tuple[float, str | None]:
    """x in [low, high] where the increasing f(x) crosses `target` (bisection, `steps` halvings), and a note where
    it does not within the range (the bound nearer to it is used)."""
    if f(low) >= target:
        return low, "low"
    if f(high) < target:
        return high, "high"
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < target else (low, mid)
    return (low + high) / 2, None


def fit_switch(tmp: str, one_cpu: CPUSharing, pinned_us: float, quad_switches: float | None,
               spec: str) -> tuple[CPUSharing, list]:
    """The hand-over cost (`switch_ns`, `switch_cv`) with which the model gives the library's barrier loop with both
    ranks on CPU 0 its measured `pinned_us` a barrier and, bound to QUAD_MAP (np 4), its measured `quad_switches`
    per rank and barrier (None: not measured, CV 0): the mean by bisection with the CV held, then the CV with the
    mean held, twice (each moves the other's figure a little). Returns the figures and a note per bound hit."""
    pair, pair_stats = pinned_trace(tmp, "barrier loop", SWITCH_FIT_ITERATIONS)
    name = os.path.join(tmp, f"quad-barrier-{len(os.listdir(tmp))}")
    quad = simgrid.read(write_trace(name, len(QUAD_MAP), loop_lines(lambda r: ["barrier"],
                                                                     SWITCH_FIT_ITERATIONS - 1)), 1e9)
    quad_stats = stats_file(name + ".stats", len(QUAD_MAP), library_rows(quad))
    figures, notes = one_cpu, []

    def pair_us(mean):
        return modelled_us(pair, spec, SWITCH_FIT_ITERATIONS, dataclasses.replace(figures, switch_ns=mean),
                           pair_stats)[0]

    def quad_turns(cv):
        sharing = dataclasses.replace(figures, cpus=2, cpu_map=QUAD_MAP, switch_cv=cv)
        timeline = modelled_us(quad, spec, SWITCH_FIT_ITERATIONS, sharing, quad_stats)[1]
        return sum(timeline.switches[:len(QUAD_MAP)]) / len(QUAD_MAP) / SWITCH_FIT_ITERATIONS
    for _ in range(2 if quad_switches is not None else 1):
        mean, bound = increasing_root(pair_us, pinned_us, 0.0, 1e6, 20)
        figures = dataclasses.replace(figures, switch_ns=mean)
        if bound:
            notes.append(f"--cpu-switch: the model gives the pinned barrier loop {pair_us(mean):.2f} us at a "
                         f"hand-over of {mean / 1e3:g} us, {pinned_us:.2f} us measured; {mean / 1e3:g} us is used")
        if quad_switches is not None:
            cv, bound = increasing_root(quad_turns, quad_switches, 0.0, 4.0, 12)
            figures = dataclasses.replace(figures, switch_cv=cv)
            if bound:
                notes.append(f"--cpu-switch-cv: the model gives the barrier loop on {','.join(map(str, QUAD_MAP))} "
                             f"{quad_turns(cv):.3f} switches a rank and barrier at CV {cv:g}, {quad_switches:.3f} "
                             f"measured; {cv:g} is used")
    return figures, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="repeats of every figure (default 3)")
    parser.add_argument("--quick", action="store_true", help="skip the halo exchanges (part 5)")
    parser.add_argument("--pool-profile",
                        help="local-host profile of this machine pricing the modelled loops' pool collectives "
                             "(default: calibrate this machine now, np 2, a few minutes; the tests' profile "
                             "tests/data/local_host_profile_np2.json is another machine's and prices coll's "
                             "iteration 3-4x above this one's)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: expected at least 1")
    build()
    cpus = os.cpu_count() or 1
    print(f"# {cpus} CPUs, kernel {os.uname().release}; median [min-max] over {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as tmp:
        yielder = compile_c(tmp, "yielder", YIELDER, mpi=False)
        slicer = compile_c(tmp, "slicer", SLICER, mpi=False)
        spinner = compile_c(tmp, "spin", SPIN, mpi=False)
        poller = compile_c(tmp, "poll_yield", POLL_YIELD, mpi=False)
        flags = compile_c(tmp, "flag_pingpong", FLAG_PINGPONG, mpi=False)
        pingpong = compile_c(tmp, "pingpong", PINGPONG, mpi=True)
        barriers = compile_c(tmp, "barriers", BARRIERS, mpi=True)
        ring = compile_c(tmp, "ring", RING, mpi=True)
        colls = compile_c(tmp, "colls", COLLS, mpi=True)
        halo = os.path.join(tmp, "halo_timed")
        subprocess.run([find_mpicc(), "-O0", HALO, "-o", halo], check=True)

        def share(poll_us, who, own=False):
            out = run([yielder, "0.5", str(poll_us * 1e3), "1" if own else "0"])
            return float(re.search(who + r" (\S+)", out).group(1)) * 100

        def slice_ms():
            runs = [float(m) for m in re.findall(r"slice_ms (\S+)", run([slicer, "2", "0", "1"]))]
            return statistics.median(runs)

        def per_call_us(exe, n, iterations, pin, library):
            return float(re.search(r"us (\S+)", run([find_mpiexec(), "-n", str(n), exe, str(iterations)], pin,
                                                    library)).group(1))

        def halo_us(n, library, iterations=200):
            out = run([find_mpiexec(), "-n", str(n), halo, str(iterations), "0"], None, library)
            return float(re.search(r"wall_s (\S+)", out).group(1)) / iterations * 1e6

        print("# 0. a busy loop and a poller yielding every T us on CPU 0: each one's share of the CPU, % (EEVDF: "
              "a yield forfeits the yielder's slice to the tasks of its own scheduling group, so in the busy loop's "
              "session it gets far below 50%; in a session of its own, as MPICH's launcher starts each rank, under "
              f"autogroup ({autogroup()}) it forfeits nothing and gets about half)")
        for poll_us in (2, 20, 200):
            measure(args.rounds, f"T {poll_us} us: the poller", lambda poll_us=poll_us: share(poll_us, "yielder_share"))
            measure(args.rounds, f"T {poll_us} us: the busy loop", lambda poll_us=poll_us: share(poll_us, "busy_share"))
        own = measure(args.rounds, "T 20 us, the poller in its own session: the poller",
                      lambda: share(20, "yielder_share", own=True))
        own_busy = measure(args.rounds, "T 20 us, the poller in its own session: the busy loop",
                           lambda: share(20, "busy_share", own=True))
        forfeits = statistics.median(own) < FORFEIT_SHARE * statistics.median(own_busy)
        print(f"  a rank's yield forfeits its slice across sessions: {'yes' if forfeits else 'no'} (the poller in "
              f"its own session got {statistics.median(own) / statistics.median(own_busy):.2f}x the busy loop's "
              f"share; below {FORFEIT_SHARE:g}x is a forfeit)")
        for own_session in (False, True):
            where = "each in its own session" if own_session else "one session"
            got = []
            measure(args.rounds, f"flag ping-pong on CPU 0, {where}: us a round trip",
                    lambda own_session=own_session, got=got: flag_pingpong(flags, own_session, got))
            print(f"    per round trip and side: {statistics.median(g[0] for g in got):.1f} polls (yields), "
                  f"{statistics.median(g[1] for g in got):.2f} switches away")
        print("# 1. the slice of a CPU-bound process (two busy loops on CPU 0), ms")
        slices = measure(args.rounds, "median run between preemptions", slice_ms)
        print("# 2. MPICH's 8-byte ping-pong (no library), us per round trip")
        free = measure(args.rounds, "on two CPUs (unpinned)", lambda: per_call_us(pingpong, 2, 20000, None, False))
        pinned = measure(args.rounds, f"both ranks on CPU 0 ({PINNED_ITERATIONS} round trips)",
                         lambda: per_call_us(pingpong, 2, PINNED_ITERATIONS, "0", False))
        print("# 3. the library's pool MPI_Barrier, us per barrier")
        measure(args.rounds, "on two CPUs (unpinned)",
                lambda: per_call_us(barriers, 2, 20000, None, True))
        pool_pinned = measure(args.rounds, "both ranks on CPU 0 (the library yields after 8 polls)",
                              lambda: per_call_us(barriers, 2, PINNED_ITERATIONS, "0", True))
        quad = None
        if cpus >= 2:
            quad = measure(args.rounds, f"np 4 bound to CPUs {','.join(map(str, QUAD_MAP))}: switches a rank and "
                           "barrier", lambda: (lambda got: sum(got["switches"]) / len(QUAD_MAP) / PINNED_ITERATIONS)(
                               loop_run(barriers, len(QUAD_MAP), PINNED_ITERATIONS, True,
                                        bind=",".join(map(str, QUAD_MAP)))))
        poll = measure(args.rounds, "one poll of its oversubscribed wait (a flag load, sched_yield), alone, ns",
                       lambda: float(re.search(r"poll_ns (\S+)", run([poller], "0")).group(1)))
        slice_ns = statistics.median(slices) * 1e6
        one_way = statistics.median(free) / 2 * 1e3
        spin = measure(args.rounds, "the library's spin before its first yield (4096 polls, ranks <= CPUs)",
                       lambda: float(re.search(r"spin_ns (\S+)", subprocess.run(
                           [spinner], capture_output=True, text=True, check=True).stdout).group(1)) / 1e3)
        if args.pool_profile is None:
            print("# calibrating this machine for the pool collectives' prices (cxlsim calibrate --np 2 --no-mpi "
                  "--timing)", flush=True)
        local = args.pool_profile or pool_profile.calibrate_local_host(os.path.join(tmp, "local"))
        made = load_profile(local)["provenance"].get("timestamp_utc", "?")
        net = message_profile(tmp, one_way)
        pooled = f"{net}+{local}"
        # the pool wait's poll is measured; the hand-over cost is the one with which the model gives the pinned barrier
        # loops (part 3), and MPICH's yield interval then the one with which it gives the pinned ping-pong (part 2)
        one_cpu = CPUSharing(1, slice_ns, 100.0, statistics.median(poll), yield_forfeits=forfeits)
        one_cpu, unresolved = fit_switch(tmp, one_cpu, statistics.median(pool_pinned),
                                         statistics.median(quad) if quad else None, pooled)
        yields = {"pool": one_cpu.pool_yield_ns}
        yields["mpi"], note = yield_through_model(tmp, "mpi", "ping-pong", PINNED_ITERATIONS, statistics.median(pinned),
                                                  one_cpu, net)
        unresolved += [note] if note else []
        sharing = CPUSharing(cpus, slice_ns, yields["mpi"], yields["pool"], pool_spin_ns=statistics.median(spin) * 1e3,
                             switch_ns=one_cpu.switch_ns, switch_cv=one_cpu.switch_cv, yield_forfeits=forfeits)
        print(f"# hand-over cost with which the model gives the pinned barrier loops of 3: {sharing.switch_ns / 1e3:.2f} "
              f"us of CPU time, CV {sharing.switch_cv:.2f} (gamma; {'CV 0: no np 4 map measured, ' if quad is None else ''}"
              f"the pool wait's poll {yields['pool'] / 1e3:.2f} us measured); MPICH's yield interval with which it gives "
              f"the pinned ping-pong of 2: {yields['mpi'] / 1e3:.2f} us")
        print(pinned_turns(tmp, ring, args.rounds, dataclasses.replace(one_cpu, mpi_yield_ns=yields["mpi"]), net),
              flush=True)
        print(f"# 4. where ranks outnumber the {cpus} CPUs (unpinned), us per iteration, measured and modelled: "
              f"slice {slice_ns / 1e3:.0f} us, yields {yields['mpi'] / 1e3:.2f} us (MPI) and "
              f"{yields['pool'] / 1e3:.2f} us (pool), hand-overs {sharing.switch_ns / 1e3:.2f} us (CV "
              f"{sharing.switch_cv:.2f}), messages {one_way / 1e3:.2f} us, pool collectives on "
              f"{args.pool_profile or 'a profile calibrated now'} (made {made})")
        loops = []  # (label, what, program, np, under the library, one iteration's lines: r -> lines, fabric)
        for n in (3, 4):
            loops += [(f"np {n}, MPICH ring (8 B, blocking)", "ring", ring, n, False, ring_step(n), net),
                      (f"np {n}, the library's pool MPI_Barrier", "barrier loop", barriers, n, True,
                       lambda r: ["barrier"], pooled)]
        loops += [(f"np {n}, the library's collective loop (coll's calls, no work)", "collective loop", colls, n,
                   True, lambda r: COLL_STEP, pooled) for n in (2, 3, 4)]
        verdicts = []  # (loop, the median of its runs' errors, %)
        for label, what, exe, n, library, step, spec in loops:
            iterations = loop_iterations(exe, n, library, CAPS[what])
            runs = []
            measure(args.rounds, f"{label}, {iterations} it.",
                    lambda exe=exe, n=n, iterations=iterations, library=library, runs=runs:
                    record(runs, loop_run(exe, n, iterations, library)))
            # the program times `iterations` steps after a barrier and ends with one (the barrier loop's steps are
            # barriers: one fewer step between the two)
            lines = loop_lines(step, iterations - (what == "barrier loop"))
            name = f"{what.replace(' ', '-')}-{n}"
            trace = simgrid.read(write_trace(os.path.join(tmp, name), n, lines), 1e9)
            stats = stats_file(os.path.join(tmp, name + ".stats"), n, library_rows(trace)) if library else None
            models, timelines = {}, {}
            for on in dict.fromkeys(r["map"] for r in runs):
                shares = n > cpus or len(set(on)) < n  # by turns where ranks share a CPU
                models[on], timelines[on] = modelled_us(trace, spec, iterations,
                                                        dataclasses.replace(sharing, cpu_map=on) if shares else None,
                                                        stats)
            others = ", ".join(f"{statistics.median(r['others'][c] for r in runs) * 100:.0f}%" for c in range(cpus))
            verdicts.append((label, statistics.median(check(what, runs, models, others))))
            maps = [r["map"] for r in runs]
            most = max(set(maps), key=maps.count)
            print(f"      on {','.join(map(str, most))}, " + mechanism([r for r in runs if r["map"] == most],
                                                                       timelines[most], iterations, n), flush=True)
        met = [v for v in verdicts if abs(v[1]) <= TARGET_PCT]
        print(f"# part 4: {len(met)} of {len(verdicts)} loops within {TARGET_PCT:g}% (the median of each loop's "
              "per-run errors): " + "; ".join(f"{label} {e:+.1f}%" for label, e in verdicts), flush=True)
        if not args.quick:
            print(f"# 5. the halo exchange without work (halo_timed.c: two 32 KiB messages and an 8-byte allreduce "
                  f"per rank and iteration), us per iteration, unpinned on {cpus} CPUs")
            for n in (2, 3, 4):
                measure(args.rounds, f"np {n}, MPICH alone", lambda n=n: halo_us(n, False))
                measure(args.rounds, f"np {n}, under the library (allreduce on its pool)", lambda n=n: halo_us(n, True))
            if cpus >= 2:
                print("# 6. a large send waits for its receiver's turn: rank 0 (CPU 0) computes 50 us, then exchanges "
                      "with rank 1 (CPU 1), us per Waitall (MPICH's CMA path from 8 KiB: complete at the receiver's ACK), "
                      "measured and replayed by turns with the figures of 1-3 (the busy loop as a nice-0 task; the "
                      "CMA copy and ACK are not in the model)")
                receiver_turns(compile_c(tmp, "turns", TURNS, mpi=True), compile_c(tmp, "busy", BUSY, mpi=False),
                               args.rounds, tmp, sharing, net)
    for line in unresolved:
        print(f"# {line}")
    print(options_line(sharing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
