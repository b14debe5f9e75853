/* Benchmark scaffolding shared by every program in perf/: options, sizes, timing, buffers and
 * nccl-tests' output format (same flags, same columns, so scripts written for nccl-tests read
 * our output). See bench.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static void bench_usage(const char *prog, int status) {
  FILE *f = status ? stderr : stdout;
  fprintf(f,
          "usage: %s [options]\n"
          "  -b, --minbytes <n>       smallest size in bytes, K/M/G suffixes (32M)\n"
          "  -e, --maxbytes <n>       largest size in bytes (32M)\n"
          "  -i, --stepbytes <n>      additive step when -f is not > 1 (1M)\n"
          "  -f, --stepfactor <n>     multiplicative step (1 = use -i)\n"
          "  -n, --iters <n>          timed iterations per size (20)\n"
          "  -w, --warmup_iters <n>   warm-up iterations at the smallest and largest size (5)\n"
          "  -c, --check <0|1>        check every result against the closed form (1)\n"
          "  -o, --op <op>            sum|prod|min|max|avg|all (sum)\n"
          "  -d, --datatype <type>    int8|uint8|int32|uint32|int64|uint64|half|float|double|\n"
          "                           bfloat16|f8e4m3|f8e5m2|all (float)\n"
          "  -r, --root <rank>        root of rooted collectives (0)\n"
          "  -z, --blocking <0|1>     accepted for nccl-tests compatibility; host calls block\n"
          "      --iter-bytes <n>     tutti extension: at each size run iter-bytes/size\n"
          "                           iterations, at least %d and at most -n\n"
          "  -h, --help               this text\n",
          prog, BENCH_MIN_SCALED_ITERS);
  exit(status);
}

int bench_parse_bytes(const char *s, size_t *bytes) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return -1;
  switch (*end) {
    case 'G':
    case 'g':
      v <<= 10; /* fall through */
    case 'M':
    case 'm':
      v <<= 10; /* fall through */
    case 'K':
    case 'k':
      v <<= 10;
      end++;
      break;
    case '\0':
      break;
    default:
      return -1;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return -1;
  *bytes = (size_t)v;
  return 0;
}

static size_t bench_bytes_arg(const char *prog, const char *flag, const char *s) {
  size_t v;
  if (bench_parse_bytes(s, &v) != 0) {
    fprintf(stderr, "%s: invalid size '%s' for %s\n", prog, s, flag);
    exit(2);
  }
  return v;
}

static int bench_int_arg(const char *prog, const char *flag, const char *s, int min) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < min || v > 1000000000L) {
    fprintf(stderr, "%s: invalid value '%s' for %s\n", prog, s, flag);
    exit(2);
  }
  return (int)v;
}

static void bench_defaults(bench_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->min_bytes = 32u << 20;
  o->max_bytes = 32u << 20;
  o->step_bytes = 1u << 20;
  o->step_factor = 1;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->type_arg = "float";
  o->op_arg = "sum";
}

enum { BENCH_OPT_ITER_BYTES = 1000 };

static const struct option bench_long_opts[] = {
    {"minbytes", required_argument, NULL, 'b'},
    {"maxbytes", required_argument, NULL, 'e'},
    {"stepbytes", required_argument, NULL, 'i'},
    {"stepfactor", required_argument, NULL, 'f'},
    {"iters", required_argument, NULL, 'n'},
    {"warmup_iters", required_argument, NULL, 'w'},
    {"check", required_argument, NULL, 'c'},
    {"op", required_argument, NULL, 'o'},
    {"datatype", required_argument, NULL, 'd'},
    {"root", required_argument, NULL, 'r'},
    {"blocking", required_argument, NULL, 'z'},
    {"help", no_argument, NULL, 'h'},
    {"iter-bytes", required_argument, NULL, BENCH_OPT_ITER_BYTES},
    {NULL, 0, NULL, 0}};

static void bench_apply(int c, const char *arg, const char *prog, bench_opts_t *o) {
  switch (c) {
    case 'b':
      o->min_bytes = bench_bytes_arg(prog, "-b", arg);
      break;
    case 'e':
      o->max_bytes = bench_bytes_arg(prog, "-e", arg);
      break;
    case 'i':
      o->step_bytes = bench_bytes_arg(prog, "-i", arg);
      break;
    case 'f':
      o->step_factor = bench_int_arg(prog, "-f", arg, 1);
      break;
    case 'n':
      o->iters = bench_int_arg(prog, "-n", arg, 1);
      break;
    case 'w':
      o->warmup = bench_int_arg(prog, "-w", arg, 0);
      break;
    case 'c':
      o->check = bench_int_arg(prog, "-c", arg, 0) != 0;
      break;
    case 'o':
      o->op_arg = arg;
      break;
    case 'd':
      o->type_arg = arg;
      break;
    case 'r':
      o->root = bench_int_arg(prog, "-r", arg, 0);
      break;
    case 'z':
      o->blocking = bench_int_arg(prog, "-z", arg, 0) != 0;
      break;
    case BENCH_OPT_ITER_BYTES:
      o->iter_bytes = bench_bytes_arg(prog, "--iter-bytes", arg);
      break;
    case 'h':
      bench_usage(prog, 0);
      break;
    default:
      bench_usage(prog, 2);
  }
}

void bench_parse(int argc, char **argv, const char *prog, bench_opts_t *o) {
  bench_defaults(o);
  int c;
  while ((c = getopt_long(argc, argv, "b:e:i:f:n:w:c:o:d:r:z:h", bench_long_opts, NULL)) != -1)
    bench_apply(c, optarg, prog, o);
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
    bench_usage(prog, 2);
  }
  if (o->min_bytes > o->max_bytes) {
    fprintf(stderr, "%s: minbytes (%zu) is larger than maxbytes (%zu)\n", prog, o->min_bytes,
            o->max_bytes);
    exit(2);
  }
  if (o->step_factor <= 1 && o->step_bytes == 0) {
    fprintf(stderr, "%s: stepbytes must be > 0 when the step factor is 1\n", prog);
    exit(2);
  }
}

size_t bench_next_size(const bench_opts_t *o, size_t bytes) {
  size_t next = o->step_factor > 1 ? bytes * (size_t)o->step_factor : bytes + o->step_bytes;
  if (next <= bytes) return BENCH_END; /* 0 with -f, or overflow */
  return next > o->max_bytes ? BENCH_END : next;
}

int bench_iters_for(const bench_opts_t *o, size_t bytes) {
  if (o->iter_bytes == 0 || bytes == 0) return o->iters;
  size_t n = o->iter_bytes / bytes;
  if (n < BENCH_MIN_SCALED_ITERS) n = BENCH_MIN_SCALED_ITERS;
  if (n > (size_t)o->iters) n = (size_t)o->iters;
  return (int)n;
}

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *bench_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("perf: mmap");
    exit(1);
  }
  /* Transparent huge pages (when enabled in madvise mode) cut both the faults and the TLB
   * misses; the touch below takes every fault now rather than inside a timed loop. */
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 0, bytes);
  return p;
}

void bench_free(void *p, size_t bytes) {
  if (p) munmap(p, bytes ? bytes : 1);
}

double bench_algbw(size_t bytes, double seconds) {
  return seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
}

void bench_rank_info(bench_rank_info_t *info) {
  memset(info, 0, sizeof(*info));
  if (gethostname(info->host, sizeof(info->host) - 1) != 0) strcpy(info->host, "?");
  info->pid = (int64_t)getpid();
}

/* ---- output, in nccl-tests' layout ---- */

void bench_print_header(const bench_opts_t *o) {
  printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu ", o->min_bytes, o->max_bytes);
  if (o->step_factor > 1)
    printf("step: %d(factor)", o->step_factor);
  else
    printf("step: %zu(bytes)", o->step_bytes);
  printf(" warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n", o->warmup, o->iters,
         o->check);
  if (o->iter_bytes)
    printf("# iterations per size: min(%d, max(%d, %zu / size))\n", o->iters,
           BENCH_MIN_SCALED_ITERS, o->iter_bytes);
  printf("#\n# Using devices\n");
}

void bench_print_rank(int rank, long pid, const char *host) {
  printf("#  Rank %2d Group  0 Pid %6ld on %10s device  0 [host]\n", rank, pid, host);
}

void bench_print_table_header(void) {
  printf("#\n");
  /* centred over their 32-column halves, which start at columns 52 and 84 */
  printf("#%61s%s%22s%s\n", "", "out-of-place", "", "in-place");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
         "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "(B)", "(elements)",
         "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static void bench_print_half(const bench_result_t *r) {
  char time[32], wrong[32];
  if (r->time_us >= 10000.0)
    snprintf(time, sizeof(time), "%7.0f", r->time_us);
  else if (r->time_us >= 100.0)
    snprintf(time, sizeof(time), "%7.1f", r->time_us);
  else
    snprintf(time, sizeof(time), "%7.2f", r->time_us);
  if (r->wrong < 0)
    snprintf(wrong, sizeof(wrong), "%5s", "N/A");
  else
    snprintf(wrong, sizeof(wrong), "%5.0f", r->wrong);
  printf("  %7s  %6.2f  %6.2f  %5s", time, r->algbw, r->busbw, wrong);
}

void bench_print_row(size_t bytes, size_t count, const char *type, const char *op, int root,
                     const bench_result_t *out_of_place, const bench_result_t *in_place) {
  printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, type, op, root);
  bench_print_half(out_of_place);
  bench_print_half(in_place);
  printf("\n");
  fflush(stdout);
}

void bench_print_footer(double wrong_total, double avg_busbw) {
  printf("# Out of bounds values : %.0f %s\n", wrong_total, wrong_total > 0 ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n#\n", avg_busbw);
  fflush(stdout);
}
