/* Each rank's CPU over a timed loop, recorded by the rank itself (read by cxlsim.replay.rank_cpus.read_recorded),
 * so that nothing outside the run samples it: a sampling process's wakeups take turns on the ranks' CPUs and slow
 * the run it watches where ranks outnumber the CPUs.
 * Where CXLSIM_RANK_CPUS names a directory: cpu_record_start(n) (before the first barrier) reads the rank's CPU
 * time, switches and run delay; cpu_record_at() (once an iteration) stores sched_getcpu() (glibc reads it from
 * rseq or the vDSO: no system call); cpu_record_end(rank) (after the last barrier) writes DIR/rank<R>.cpus.txt:
 *     cpu_ns N waited_ns N switches N sleeps N
 *     cpus C0 C1 ...
 * the first line over start..end (CPU time ns, time runnable off the CPU ns (-1 without /proc/self/schedstat),
 * switches while runnable (ru_nivcsw), sleeps (ru_nvcsw)), the second the CPU at each cpu_record_at().
 * Without the variable nothing is recorded. No MPI call: what the library traces is unchanged.
 * Define _GNU_SOURCE before any include (sched_getcpu). */
#ifndef CPU_RECORD_H
#define CPU_RECORD_H
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static int *cpu_seen, cpu_count, cpu_capacity;
static double cpu_ns0, cpu_waited0;
static struct rusage cpu_ru0;

static double cpu_record_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static double cpu_record_waited_ns(void) {
  unsigned long long ran, waited;
  FILE *f = fopen("/proc/self/schedstat", "r");
  int got = f ? fscanf(f, "%llu %llu", &ran, &waited) : 0;
  if (f) fclose(f);
  return got == 2 ? (double)waited : -1.0;
}

static void cpu_record_start(int capacity) {
  if (getenv("CXLSIM_RANK_CPUS") == NULL || capacity < 1) return;
  cpu_seen = malloc(capacity * sizeof *cpu_seen);
  cpu_capacity = cpu_seen ? capacity : 0;
  getrusage(RUSAGE_SELF, &cpu_ru0);
  cpu_waited0 = cpu_record_waited_ns();
  cpu_ns0 = cpu_record_ns();
}

static inline void cpu_record_at(void) {
  if (cpu_count < cpu_capacity) cpu_seen[cpu_count++] = sched_getcpu();
}

static void cpu_record_end(int rank) {
  if (cpu_seen == NULL) return;
  double ns = cpu_record_ns() - cpu_ns0, waited = cpu_record_waited_ns();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  char path[4096];
  snprintf(path, sizeof path, "%s/rank%d.cpus.txt", getenv("CXLSIM_RANK_CPUS"), rank);
  FILE *f = fopen(path, "w");
  if (f == NULL) { perror(path); exit(2); }
  fprintf(f, "cpu_ns %.0f waited_ns %.0f switches %ld sleeps %ld\ncpus", ns,
          waited < 0 || cpu_waited0 < 0 ? -1.0 : waited - cpu_waited0, ru.ru_nivcsw - cpu_ru0.ru_nivcsw,
          ru.ru_nvcsw - cpu_ru0.ru_nvcsw);
  for (int i = 0; i < cpu_count; i++) fprintf(f, " %d", cpu_seen[i]);
  fprintf(f, "\n");
  fclose(f);
  free(cpu_seen);
  cpu_seen = NULL;
}
#endif
