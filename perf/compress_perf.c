/* compress_perf: the compressed all-reduce (tuttiAllReduceCompressed) of one fp32 buffer per
 * compressor against the exact one, in the same run, interleaved: time (median over the
 * repetitions), bytes each rank sent, and the error against the exact average. Run it under
 * tutti-run (or any launcher tuttiCommInitFromEnv reads); perf/compress_bench.sh runs it on the
 * namespace test bed with 1 Gbit/s links.
 *
 *   compress_perf [-s bytes] [-r reps] [-w warmup] [-k list]
 *     -s  buffer size in bytes (64M)        -r  timed repetitions per compressor (5)
 *     -w  untimed exact all-reduces first (2: the link's token bucket is spent before timing)
 *     -k  compressors, comma separated (none,bf16,fp16,int8,topk:0.01,powersgd:2)
 *
 * Inputs are a closed form of (index, rank), so every rank computes the exact average of all
 * ranks' inputs itself (in double). The error is that of the first call of a fresh compressor
 * (no residual yet): max |y - exact| / max |exact|, and the RMS of (y - exact) over the RMS of
 * exact. PowerSGD is timed after its warm-up (warmupSteps = 0 here).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tutti.h"

#define MAX_KINDS 8

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, ncclComm_t comm) {
  fprintf(stderr, "compress_perf: %s: %s\n", what, ncclGetLastError(comm));
  exit(1);
}

/* A gradient-like value: mostly small, heavy tails, sign mixed, different on every rank. */
static float grad_value(size_t i, int rank) {
  uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull + (uint64_t)rank * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31, h *= 0x94d049bb133111ebull, h ^= h >> 29;
  double u = (double)(h >> 11) / 9007199254740992.0; /* [0, 1) */
  double v = 1e-3 * tan(3.0 * (u - 0.5));            /* tails up to ~0.014 */
  return (float)(v + 1e-4 * sin(1e-3 * (double)i));
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct {
  const char *spec;
  tuttiCompressor_t c;
  double times[64];
  double max_rel, rms_rel;
  uint64_t bytes_first;
} kind_run_t;

static void measure_error(kind_run_t *k, const float *y, size_t n, int nranks) {
  double emax = 0, xmax = 0, e2 = 0, x2 = 0;
  for (size_t i = 0; i < n; i++) {
    double exact = 0;
    for (int r = 0; r < nranks; r++) exact += grad_value(i, r);
    exact /= nranks;
    double e = fabs((double)y[i] - exact);
    emax = e > emax ? e : emax;
    xmax = fabs(exact) > xmax ? fabs(exact) : xmax;
    e2 += e * e, x2 += exact * exact;
  }
  k->max_rel = emax / xmax;
  k->rms_rel = sqrt(e2 / x2);
}

static void run_one(kind_run_t *k, float *x, float *y, size_t n, ncclComm_t comm, double *t) {
  double t0 = now_s();
  if (tuttiAllReduceCompressed(x, y, n, ncclFloat, ncclAvg, k->c, comm, NULL) != ncclSuccess)
    die(k->spec, comm);
  *t = now_s() - t0;
}

int main(int argc, char **argv) {
  size_t bytes = 64u << 20;
  int reps = 5, warmup = 2, nk = 0, rank, nranks;
  char list[256] = "none,bf16,fp16,int8,topk:0.01,powersgd:2";
  kind_run_t kinds[MAX_KINDS] = {0};
  for (int a = 1; a + 1 < argc; a += 2) {
    if (!strcmp(argv[a], "-s"))
      bytes = (size_t)strtod(argv[a + 1], NULL) * (strchr(argv[a + 1], 'M') ? 1u << 20 : 1u);
    else if (!strcmp(argv[a], "-r"))
      reps = atoi(argv[a + 1]);
    else if (!strcmp(argv[a], "-w"))
      warmup = atoi(argv[a + 1]);
    else if (!strcmp(argv[a], "-k"))
      snprintf(list, sizeof(list), "%s", argv[a + 1]);
  }
  if (reps < 1 || reps > 64) reps = 5;
  ncclComm_t comm;
  if (tuttiCommInitFromEnv(&comm) != ncclSuccess) die("tuttiCommInitFromEnv", NULL);
  ncclCommUserRank(comm, &rank), ncclCommCount(comm, &nranks);
  size_t n = bytes / sizeof(float);
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  if (!x || !y) die("out of memory", comm);
  for (size_t i = 0; i < n; i++) x[i] = grad_value(i, rank);
  for (char *s = strtok(list, ","); s && nk < MAX_KINDS; s = strtok(NULL, ",")) {
    tuttiCompressorConfig_t cfg;
    kinds[nk].spec = s;
    if (tuttiCompressorParse(s, &cfg) != ncclSuccess) die(s, comm);
    cfg.warmupSteps = 0;
    if (tuttiCompressorCreate(&kinds[nk].c, &cfg, n, ncclFloat) != ncclSuccess) die(s, comm);
    nk++;
  }
  for (int k = 0; k < nk; k++) { /* the first call of each: its error, its bytes */
    double t;
    run_one(&kinds[k], x, y, n, comm, &t);
    measure_error(&kinds[k], y, n, nranks);
    tuttiCompressorBytesSent(kinds[k].c, &kinds[k].bytes_first);
  }
  for (int w = 0; w < warmup; w++) {
    double t;
    run_one(&kinds[0], x, y, n, comm, &t);
  }
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < nk; k++) run_one(&kinds[k], x, y, n, comm, &kinds[k].times[r]);
  if (rank == 0) {
    printf(
        "# compress_perf: %d ranks, %zu bytes fp32 all-reduce (ncclAvg), %d reps interleaved, "
        "median\n",
        nranks, bytes, reps);
    printf("# %-12s %10s %8s %14s %12s %12s\n", "compressor", "time_ms", "speedup", "sent_MB/rank",
           "max_rel_err", "rms_rel_err");
  }
  double base = 0;
  for (int k = 0; k < nk; k++) {
    qsort(kinds[k].times, (size_t)reps, sizeof(double), cmp_double);
    double med = kinds[k].times[reps / 2];
    if (k == 0) base = med;
    if (rank == 0)
      printf("  %-12s %10.1f %8.2f %14.3f %12.3e %12.3e\n", kinds[k].spec, 1e3 * med, base / med,
             (double)kinds[k].bytes_first / 1e6, kinds[k].max_rel, kinds[k].rms_rel);
    tuttiCompressorDestroy(kinds[k].c);
  }
  free(x), free(y);
  ncclCommDestroy(comm);
  return 0;
}
