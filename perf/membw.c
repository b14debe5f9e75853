/* membw: the memory-bound reference of perf/compare. P processes (the ranks of a collective
 * run: -p, default 2) each copy their own buffer with memcpy, all at the same time, at the
 * sizes of the collective sweep:
 *
 *   membw -p 2 -b 8 -e 256M -f 2 [--fraction F] [-n, -w, -a, --iter-bytes, -J as the perf
 *         programs]
 *
 * Per size: a barrier, then each process copies `size` bytes (F x size with --fraction, at
 * least 1) from its source buffer to its destination buffer, iterations as the perf programs
 * run them (--iter-bytes counts the copied bytes); time = elapsed / iterations, aggregated
 * across processes as -a says. The copy rate is copied bytes / time per process (GB/s, 1e9
 * B/s): every process reads and writes that many bytes, so the DRAM traffic is twice that per
 * process, P times that in all. A shared-memory collective moves every byte through at least
 * one such copy (tutti's shm transport: two, in and out of the FIFO), so a busbw reads as a
 * fraction of this rate. Whether the copy stays in the caches depends on the bytes it touches
 * (2 F x size per process): --fraction makes that the footprint of a collective's buffers at
 * the same size (perf/compare: F = 1/2 for an in-place call, whose one buffer is size bytes),
 * so that the reference and the collective meet the same caches. The rows keep `size`, and
 * print the bytes copied beside it.
 *
 * No library and no launcher: the processes are forked here and meet at a barrier in shared
 * memory (spinning with sched_yield, a timeout if one dies). The JSON rows have the perf
 * programs' shape: both halves hold the copy (time_us, algbw = busbw = copy rate per process,
 * wrong null).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define MEMBW_MAX_PROCS 256
#define MEMBW_BARRIER_TIMEOUT_S 120.0

/* Shared by all processes (one anonymous shared mapping made before fork). */
typedef struct membw_shared {
  uint32_t arrived, generation; /* the barrier */
  int failed;
  double seconds[MEMBW_MAX_PROCS];
} membw_shared_t;

typedef struct membw {
  bench_opts_t opts;
  int nprocs, rank;
  double fraction; /* bytes copied per byte of the sweep's size (--fraction) */
  membw_shared_t *sh;
  char *src, *dst;
  bench_json_t *json;
} membw_t;

static void membw_barrier(membw_t *m) {
  membw_shared_t *sh = m->sh;
  uint32_t gen = __atomic_load_n(&sh->generation, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&sh->arrived, 1, __ATOMIC_ACQ_REL) == (uint32_t)m->nprocs) {
    __atomic_store_n(&sh->arrived, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&sh->generation, 1, __ATOMIC_RELEASE);
    return;
  }
  double t0 = bench_now();
  while (__atomic_load_n(&sh->generation, __ATOMIC_ACQUIRE) == gen) {
    if (__atomic_load_n(&sh->failed, __ATOMIC_RELAXED) ||
        bench_now() - t0 > MEMBW_BARRIER_TIMEOUT_S) {
      fprintf(stderr, "membw: process %d: a peer process failed or hung; giving up\n", m->rank);
      _exit(1);
    }
    sched_yield();
  }
}

/* The bytes each process copies at the sweep's `size`. */
static size_t membw_copied(const membw_t *m, size_t size) {
  double c = m->fraction * (double)size;
  return c < 1 ? 1 : (size_t)c;
}

/* Time of a copy of `bytes` on this process, aggregated across processes (-a). */
static double membw_measure(membw_t *m, size_t bytes) {
  int iters = bench_iters_for(&m->opts, bytes);
  membw_barrier(m);
  double t0 = bench_now();
  for (int i = 0; i < iters; i++) {
    memcpy(m->dst, m->src, bytes);
    __asm__ __volatile__("" ::: "memory"); /* each copy happens */
  }
  m->sh->seconds[m->rank] = (bench_now() - t0) / iters;
  membw_barrier(m);
  double sum = 0, min = m->sh->seconds[0], max = min;
  for (int r = 0; r < m->nprocs; r++) {
    double s = m->sh->seconds[r];
    sum += s;
    min = s < min ? s : min;
    max = s > max ? s : max;
  }
  membw_barrier(m); /* nobody overwrites seconds[] before everyone has read it */
  switch (m->opts.average) {
    case BENCH_AVG_RANK0:
      return m->sh->seconds[0];
    case BENCH_AVG_MIN:
      return min;
    case BENCH_AVG_MAX:
      return max;
    default:
      return sum / m->nprocs;
  }
}

static void membw_print_header(const membw_t *m) {
  const bench_opts_t *o = &m->opts;
  printf(
      "# membw: %d processes copying at once (memcpy), minBytes %zu maxBytes %zu, %g of each "
      "size copied, warmup iters: %d iters: %d, time across processes: %s (-a %d)\n",
      m->nprocs, o->min_bytes, o->max_bytes, m->fraction, o->warmup, o->iters,
      bench_average_name(o->average), o->average);
  if (o->iter_bytes)
    printf("# iterations per size: min(%d, max(%d, %zu / copied))\n", o->iters,
           BENCH_MIN_SCALED_ITERS, o->iter_bytes);
  printf("#\n");
  printf("# %10s  %12s  %9s  %12s  %12s\n", "size", "copied", "time", "copy", "all procs");
  printf("# %10s  %12s  %9s  %12s  %12s\n", "(B)", "(B)", "(us)", "(GB/s/proc)", "(GB/s)");
}

static void membw_sweep(membw_t *m) {
  size_t max = membw_copied(m, m->opts.max_bytes);
  for (int i = 0; i < m->opts.warmup; i++) memcpy(m->dst, m->src, max);
  double rate_sum = 0;
  int n = 0;
  for (size_t size = m->opts.min_bytes; size != BENCH_END; size = bench_next_size(&m->opts, size)) {
    size_t copied = membw_copied(m, size);
    double seconds = membw_measure(m, copied);
    if (m->rank != 0) continue;
    bench_result_t r = {.time_us = seconds * 1e6, .wrong = -1};
    r.algbw = r.busbw = bench_algbw(copied, seconds);
    printf("%12zu  %12zu  %9.2f  %12.2f  %12.2f\n", size, copied, r.time_us, r.algbw,
           r.algbw * m->nprocs);
    fflush(stdout);
    bench_json_row(m->json, size, copied, "uint8", "none", -1, &r, &r);
    rate_sum += r.busbw;
    n++;
  }
  if (m->rank == 0) {
    printf("# Avg copy bandwidth per process : %g\n#\n", n ? rate_sum / n : 0.0);
    bench_json_close(m->json, 0, n ? rate_sum / n : 0.0);
  }
}

/* Takes -p N and --fraction F out of argv (the rest are the perf programs' options). */
static void membw_take_args(int *argc, char **argv, membw_t *m) {
  int out = 1;
  const char *frac = NULL;
  m->nprocs = 2, m->fraction = 1.0;
  for (int i = 1; i < *argc; i++) {
    if (strcmp(argv[i], "-p") == 0 && i + 1 < *argc) {
      m->nprocs = atoi(argv[++i]);
      continue;
    }
    if (strcmp(argv[i], "--fraction") == 0 && i + 1 < *argc) {
      frac = argv[++i];
      continue;
    }
    argv[out++] = argv[i];
  }
  *argc = out;
  argv[out] = NULL;
  if (m->nprocs < 1 || m->nprocs > MEMBW_MAX_PROCS) {
    fprintf(stderr, "membw: -p takes 1 to %d processes\n", MEMBW_MAX_PROCS);
    exit(2);
  }
  if (frac) {
    char *end = NULL;
    m->fraction = strtod(frac, &end);
    if (end == frac || *end || !(m->fraction > 0 && m->fraction <= 1)) {
      fprintf(stderr, "membw: --fraction takes a number above 0 and at most 1 (got '%s')\n", frac);
      exit(2);
    }
  }
}

static void membw_open_json(membw_t *m) {
  if (!m->opts.json_path) return;
  const char **hosts = calloc((size_t)m->nprocs, sizeof(*hosts));
  bench_rank_info_t me;
  bench_rank_info(&me);
  for (int r = 0; r < m->nprocs && hosts; r++) hosts[r] = me.host;
  m->json = bench_json_open(&m->opts, "membw", "memcpy", "glibc memcpy", m->nprocs, hosts);
  free(hosts);
}

int main(int argc, char **argv) {
  membw_t m = {0};
  membw_take_args(&argc, argv, &m);
  bench_parse(argc, argv, "membw", &m.opts);
  m.sh = mmap(NULL, sizeof(*m.sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m.sh == MAP_FAILED) {
    perror("membw: mmap");
    return 1;
  }
  memset(m.sh, 0, sizeof(*m.sh));
  pid_t kids[MEMBW_MAX_PROCS];
  for (int r = 1; r < m.nprocs; r++) {
    kids[r] = fork();
    if (kids[r] < 0) {
      perror("membw: fork");
      return 1;
    }
    if (kids[r] == 0) {
      m.rank = r;
      break;
    }
  }
  /* Each process allocates (and touches) its own buffers: first-touch places them on its node. */
  size_t most = membw_copied(&m, m.opts.max_bytes);
  m.src = bench_alloc(most);
  m.dst = bench_alloc(most);
  memset(m.src, 0x5a, most);
  if (m.rank == 0) {
    membw_open_json(&m);
    membw_print_header(&m);
  }
  membw_sweep(&m);
  if (m.rank != 0) _exit(0);
  int status = 0, failed = 0;
  for (int r = 1; r < m.nprocs; r++)
    if (waitpid(kids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed = 1;
  return failed;
}
