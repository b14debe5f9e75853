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

#include "tutti.h" /* TUTTI_VERSION_STRING only: mpi_perf does not link tutti */

static void bench_usage(const char *prog, int status) {
  FILE *f = status ? stderr : stdout;
  fprintf(f,
          "usage: %s [options]\n"
          "  -b, --minbytes <n>       smallest size in bytes, K/M/G suffixes (32M)\n"
          "  -e, --maxbytes <n>       largest size in bytes (32M)\n"
          "  -i, --stepbytes <n>      additive step when -f is not > 1 (1M)\n"
          "  -f, --stepfactor <n>     multiplicative step (1 = use -i)\n"
          "  -n, --iters <n>          timed iterations per size (20)\n"
          "  -w, --warmup_iters <n>   warm-up iterations at the largest size (out of place and in\n"
          "                           place) and at the smallest (5)\n"
          "  -m, --agg_iters <n>      calls per timed iteration, aggregated in one group (1)\n"
          "  -c, --check <n>          checked calls per size, each against the closed form (1)\n"
          "  -o, --op <op>            sum|prod|max|min|avg|all (sum)\n"
          "  -d, --datatype <type>    int8|uint8|int32|uint32|int64|uint64|half|float|double|\n"
          "                           bfloat16|f8e4m3|f8e5m2|all (float)\n"
          "  -r, --root <rank|all>    root of rooted collectives; all = every rank in turn (0)\n"
          "  -a, --average <0-3>      time reported across ranks: 0 rank 0, 1 mean, 2 min,\n"
          "                           3 max (1)\n"
          "  -T, --timeout <s>        abort the run if a call has not returned after s seconds\n"
          "                           (0 = never)\n"
          "  -J, --json <file>        also write the results as JSON (rank 0)\n"
          "  -t, --nthreads <n>       threads per process: only 1 (one rank per process)\n"
          "  -g, --ngpus <n>          GPUs per thread: only 1\n"
          "  -z, --blocking <0|1>     accepted for nccl-tests compatibility; host calls block\n"
          "  -p, --parallel_init <0|1>  accepted for nccl-tests compatibility (one rank per\n"
          "                           process initialises alone)\n"
          "  -C, --report_cputime <0|1>  1: report the process's CPU time per call instead of\n"
          "                           wall time (0)\n"
          "  -N, --run_cycles <n>     run the whole sweep n times, 0 = until stopped (1)\n"
          "  -G, --cudagraph <n>      CUDA graph launches: only 0 (buffers are on host memory)\n"
          "  -R, --local_register <0|1>  1: send and receive buffers from ncclMemAlloc,\n"
          "                           registered with ncclCommRegister, which same-host ranks\n"
          "                           read in place (tutti's programs only; 0)\n"
          "      --iter-bytes <n>     tutti extension: at each size run iter-bytes/size\n"
          "                           iterations, at least %d and at most -n\n"
          "      --warmup-bytes <n>   tutti extension: before each size, warmup-bytes/size\n"
          "                           untimed calls (1 to 200): steady state at every size,\n"
          "                           e.g. behind a token-bucket rate limit\n"
          "      --buffer-offset <n>  tutti extension: send and receive buffers start n bytes\n"
          "                           past a page boundary, as malloc's do (16 with glibc);\n"
          "                           0: page-aligned (0)\n"
          "      --alloc <kind>       tutti extension: where send and receive buffers come\n"
          "                           from: malloc (the program's heap; under tutti-run its\n"
          "                           shared heap) or mmap (anonymous pages, huge pages asked\n"
          "                           for) (malloc)\n"
          "  -h, --help               this text\n"
          "      --version            tutti's version\n"
          "Run without a launcher, the program is one rank (as nccl-tests' binaries are).\n",
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
  o->agg_iters = 1;
  o->check = 1;
  o->average = BENCH_AVG_MEAN;
  o->nthreads = 1;
  o->ngpus = 1;
  o->type_arg = "float";
  o->op_arg = "sum";
  o->cycles = 1;
}

enum {
  BENCH_OPT_ITER_BYTES = 1000,
  BENCH_OPT_COLL,
  BENCH_OPT_WARMUP_BYTES,
  BENCH_OPT_VERSION,
  BENCH_OPT_BUFFER_OFFSET,
  BENCH_OPT_ALLOC
};

static const struct option bench_long_opts[] = {
    {"minbytes", required_argument, NULL, 'b'},
    {"maxbytes", required_argument, NULL, 'e'},
    {"stepbytes", required_argument, NULL, 'i'},
    {"stepfactor", required_argument, NULL, 'f'},
    {"iters", required_argument, NULL, 'n'},
    {"warmup_iters", required_argument, NULL, 'w'},
    {"agg_iters", required_argument, NULL, 'm'},
    {"check", required_argument, NULL, 'c'},
    {"op", required_argument, NULL, 'o'},
    {"datatype", required_argument, NULL, 'd'},
    {"root", required_argument, NULL, 'r'},
    {"average", required_argument, NULL, 'a'},
    {"timeout", required_argument, NULL, 'T'},
    {"json", required_argument, NULL, 'J'},
    {"nthreads", required_argument, NULL, 't'},
    {"ngpus", required_argument, NULL, 'g'},
    {"blocking", required_argument, NULL, 'z'},
    {"local_register", required_argument, NULL, 'R'},
    {"parallel_init", required_argument, NULL, 'p'},
    {"report_cputime", required_argument, NULL, 'C'},
    {"run_cycles", required_argument, NULL, 'N'},
    {"cudagraph", required_argument, NULL, 'G'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, BENCH_OPT_VERSION},
    {"iter-bytes", required_argument, NULL, BENCH_OPT_ITER_BYTES},
    {"warmup-bytes", required_argument, NULL, BENCH_OPT_WARMUP_BYTES},
    {"buffer-offset", required_argument, NULL, BENCH_OPT_BUFFER_OFFSET},
    {"alloc", required_argument, NULL, BENCH_OPT_ALLOC},
    {"coll", required_argument, NULL, BENCH_OPT_COLL},
    {NULL, 0, NULL, 0}};

static int bench_root_arg(const char *prog, const char *s) {
  return strcmp(s, "all") == 0 ? BENCH_ROOT_ALL : bench_int_arg(prog, "-r", s, 0);
}

/* Options that only measure differently (sizes, iterations, output). */
static int bench_apply_measure(int c, const char *arg, const char *prog, bench_opts_t *o) {
  switch (c) {
    case 'b':
      o->min_bytes = bench_bytes_arg(prog, "-b", arg);
      return 1;
    case 'e':
      o->max_bytes = bench_bytes_arg(prog, "-e", arg);
      return 1;
    case 'i':
      o->step_bytes = bench_bytes_arg(prog, "-i", arg);
      return 1;
    case 'f':
      o->step_factor = bench_int_arg(prog, "-f", arg, 1);
      return 1;
    case 'n':
      o->iters = bench_int_arg(prog, "-n", arg, 1);
      return 1;
    case 'w':
      o->warmup = bench_int_arg(prog, "-w", arg, 0);
      return 1;
    case 'm':
      o->agg_iters = bench_int_arg(prog, "-m", arg, 1);
      return 1;
    case 'a':
      o->average = bench_int_arg(prog, "-a", arg, 0);
      return 1;
    case 'T':
      o->timeout_s = bench_int_arg(prog, "-T", arg, 0);
      return 1;
    case 'J':
      o->json_path = arg;
      return 1;
    case BENCH_OPT_ITER_BYTES:
      o->iter_bytes = bench_bytes_arg(prog, "--iter-bytes", arg);
      return 1;
    case BENCH_OPT_WARMUP_BYTES:
      o->warmup_bytes = bench_bytes_arg(prog, "--warmup-bytes", arg);
      return 1;
    case BENCH_OPT_BUFFER_OFFSET:
      o->buffer_offset = bench_bytes_arg(prog, "--buffer-offset", arg);
      return 1;
    case BENCH_OPT_ALLOC:
      if (strcmp(arg, "malloc") != 0 && strcmp(arg, "mmap") != 0) {
        fprintf(stderr, "%s: --alloc takes malloc or mmap, not '%s'\n", prog, arg);
        exit(2);
      }
      o->alloc_mmap = strcmp(arg, "mmap") == 0;
      return 1;
    default:
      return 0;
  }
}

static void bench_apply(int c, const char *arg, const char *prog, bench_opts_t *o) {
  if (bench_apply_measure(c, arg, prog, o)) return;
  switch (c) {
    case 'c':
      o->check = bench_int_arg(prog, "-c", arg, 0);
      break;
    case 'o':
      o->op_arg = arg;
      break;
    case 'd':
      o->type_arg = arg;
      break;
    case 'r':
      o->root = bench_root_arg(prog, arg);
      break;
    case 't':
      o->nthreads = bench_int_arg(prog, "-t", arg, 0);
      break;
    case 'g':
      o->ngpus = bench_int_arg(prog, "-g", arg, 0);
      break;
    case 'z':
      o->blocking = bench_int_arg(prog, "-z", arg, 0) != 0;
      break;
    case 'R':
      o->reg = bench_int_arg(prog, "-R", arg, 0);
      if (o->reg > 1) {
        fprintf(stderr, "%s: -R %d: only 0 and 1 exist on host memory\n", prog, o->reg);
        exit(2);
      }
      break;
    case BENCH_OPT_COLL:
      o->coll_arg = arg;
      break;
    case 'p':
      o->parallel_init = bench_int_arg(prog, "-p", arg, 0);
      break;
    case 'C':
      o->cputime = bench_int_arg(prog, "-C", arg, 0) != 0;
      break;
    case 'N':
      o->cycles = bench_int_arg(prog, "-N", arg, 0);
      break;
    case 'G':
      if (bench_int_arg(prog, "-G", arg, 0) != 0) {
        fprintf(stderr,
                "%s: -G %s: CUDA graphs are not on host memory: these buffers are host "
                "memory, so there is no GPU work to capture; run without -G (or -G 0)\n",
                prog, arg);
        exit(2);
      }
      break;
    case BENCH_OPT_VERSION:
      printf("%s (tutti) %s\n", prog, TUTTI_VERSION_STRING);
      exit(0);
    case 'h':
      bench_usage(prog, 0);
      break;
    default:
      bench_usage(prog, 2);
  }
}

/* -t and -g exist for nccl-tests' command lines; a process here drives exactly one rank. */
static void bench_check_threads(const char *prog, const bench_opts_t *o) {
  if (o->nthreads != 1) {
    fprintf(stderr,
            "%s: -t %d: only 1 thread per process is supported (each process is one rank); "
            "start more ranks instead (tutti-run -n N, mpirun -np N)\n",
            prog, o->nthreads);
    exit(2);
  }
  if (o->ngpus != 1) {
    fprintf(stderr,
            "%s: -g %d: only 1 GPU per thread is supported (each process is one rank with one "
            "buffer); start more ranks instead (tutti-run -n N, mpirun -np N)\n",
            prog, o->ngpus);
    exit(2);
  }
}

void bench_parse(int argc, char **argv, const char *prog, bench_opts_t *o) {
  bench_defaults(o);
  int c;
  while ((c = getopt_long(argc, argv, "b:e:i:f:n:w:m:c:o:d:r:a:T:J:t:g:z:R:p:C:N:G:h",
                          bench_long_opts, NULL)) != -1)
    bench_apply(c, optarg, prog, o);
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
    bench_usage(prog, 2);
  }
  bench_check_threads(prog, o);
  if (o->average > BENCH_AVG_MAX) {
    fprintf(stderr, "%s: -a takes 0 (rank 0), 1 (mean), 2 (min) or 3 (max), not %d\n", prog,
            o->average);
    exit(2);
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

const char *bench_average_name(int average) {
  static const char *const names[] = {"rank0", "mean", "min", "max"};
  return average >= 0 && average <= BENCH_AVG_MAX ? names[average] : "?";
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

int bench_warmup_iters_for(const bench_opts_t *o, size_t bytes) {
  if (o->warmup_bytes == 0) return 0;
  size_t n = bytes ? o->warmup_bytes / bytes : BENCH_MAX_WARMUP_ITERS;
  return (int)(n < 1 ? 1 : n > BENCH_MAX_WARMUP_ITERS ? BENCH_MAX_WARMUP_ITERS : n);
}

double bench_clock(const bench_opts_t *o) {
  if (!o->cputime) return bench_now();
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bench_blocks_init(bench_blocks_t *o) {
  *o = (bench_blocks_t){.minb = 8, .maxb = 4096, .factor = 2, .calls = 100, .blocks = 301};
}

int bench_blocks_option(bench_blocks_t *o, int opt, const char *arg, int blocks_opt,
                        const char **why) {
  if (opt == 'b' || opt == 'e') {
    size_t v = 0;
    if (bench_parse_bytes(arg, &v) != 0 || v < 4) {
      *why = "a size must be at least 4 bytes (8, 4K)";
      return -1;
    }
    *(opt == 'b' ? &o->minb : &o->maxb) = v;
  } else if (opt == 'f') {
    o->factor = atoi(arg);
  } else if (opt == 'k') {
    o->calls = atoi(arg);
  } else if (opt == blocks_opt) {
    o->blocks = atoi(arg);
  } else if (opt == 'P') {
    if (strcmp(arg, "in") != 0 && strcmp(arg, "out") != 0) {
      *why = "-P takes out or in";
      return -1;
    }
    o->in_place = strcmp(arg, "in") == 0;
  } else if (opt == 'M') {
    o->memalloc = 1;
  } else {
    return 0;
  }
  return 1;
}

const char *bench_blocks_check(const bench_blocks_t *o) {
  if (o->factor < 2 || o->calls < 1 || o->blocks < 5)
    return "the size factor must be at least 2, the calls per block at least 1, the blocks at "
           "least 5";
  return o->minb > o->maxb ? "the smallest size is larger than the largest" : NULL;
}

float bench_blocks_input(size_t k, int r) {
  return (float)((k + (size_t)r) % 31 + 1);
}

size_t bench_blocks_wrong_sums(const float *y, size_t n, size_t first, int nranks) {
  size_t wrong = 0;
  for (size_t e = 0; e < n; e++) {
    double want = 0;
    for (int r = 0; r < nranks; r++) want += (double)bench_blocks_input(first + e, r);
    wrong += y[e] != (float)want;
  }
  return wrong;
}

void bench_blocks_fill(float *y, size_t c, int first, int nblocks) {
  for (int b = 0; b < nblocks; b++)
    for (size_t e = 0; e < c; e++) y[(size_t)b * c + e] = bench_blocks_input(e, first + b);
}

size_t bench_blocks_wrong(const float *y, size_t c, int first, int nblocks) {
  size_t wrong = 0;
  for (int b = 0; b < nblocks; b++)
    for (size_t e = 0; e < c; e++)
      wrong += y[(size_t)b * c + e] != bench_blocks_input(e, first + b);
  return wrong;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median_ci(double *v, int n, double *lo, double *hi) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  int d = 0; /* round(0.98 sqrt(n)) without libm: the largest d with (d - 0.5)^2 <= 0.9604 n */
  while ((d + 0.5) * (d + 0.5) <= 0.9604 * n) d++;
  int l = n / 2 - d, h = (n - 1) / 2 + d;
  if (lo) *lo = v[l < 0 ? 0 : l];
  if (hi) *hi = v[h >= n ? n - 1 : h];
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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

/* The collectives' buffers come from malloc, as a program's would: under tutti-run's shared
 * heap (libtutti-heap.so) they are memory the peers map, under mpirun glibc's. Huge pages are
 * asked for as bench_alloc does (the shared heap's memfd pages get none unless the machine
 * gives shared memory huge pages). */
void *bench_alloc_at(size_t bytes, size_t offset, int use_mmap) {
  if (use_mmap) return (char *)bench_alloc(bytes + offset) + offset;
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes + offset ? bytes + offset : 1) != 0) {
    fprintf(stderr, "perf: cannot allocate %zu bytes\n", bytes + offset);
    exit(1);
  }
  (void)madvise(p, bytes + offset, MADV_HUGEPAGE);
  memset(p, 0, bytes + offset);
  return (char *)p + offset;
}

void bench_free_at(void *p, size_t bytes, size_t offset, int use_mmap) {
  if (p && use_mmap)
    bench_free((char *)p - offset, bytes + offset);
  else if (p)
    free((char *)p - offset);
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
  printf(" warmup iters: %d iters: %d agg iters: %d validation: %d graph: 0\n", o->warmup, o->iters,
         o->agg_iters, o->check);
  if (o->iter_bytes)
    printf("# iterations per size: min(%d, max(%d, %zu / size))\n", o->iters,
           BENCH_MIN_SCALED_ITERS, o->iter_bytes);
  if (o->warmup_bytes)
    printf("# untimed calls before each size: min(%d, max(1, %zu / size))\n",
           BENCH_MAX_WARMUP_ITERS, o->warmup_bytes);
  printf("# time across ranks: %s (-a %d)\n", bench_average_name(o->average), o->average);
  if (o->cputime) printf("# time: the process's CPU time per call (-C 1), not wall time\n");
  printf("#\n# Using devices\n");
}

void bench_print_rank(int rank, long pid, const char *host) {
  printf("#  Rank %2d Group  0 Pid %6ld on %10s device  0 [host]\n", rank, pid, host);
}

/* nccl-tests' three header lines, character for character. */
void bench_print_table_header(void) {
  printf("#\n");
  printf(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
      "\n",
      "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
         "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static void bench_format_time(char *out, size_t len, double time_us) {
  if (time_us >= 10000.0)
    snprintf(out, len, "%7.0f", time_us);
  else if (time_us >= 100.0)
    snprintf(out, len, "%7.1f", time_us);
  else if (time_us >= 1.0)
    snprintf(out, len, "%7.2f", time_us);
  else /* a 0.01 us step is 7 % of a 0.14 us call: too coarse for an A/B of small calls */
    snprintf(out, len, "%7.3f", time_us);
}

static void bench_print_half(const bench_result_t *r) {
  char time[32];
  bench_format_time(time, sizeof(time), r->time_us);
  if (r->wrong < 0)
    printf("  %7s  %6.2f  %6.2f  %5s", time, r->algbw, r->busbw, "N/A");
  else
    printf("  %7s  %6.2f  %6.2f  %5g", time, r->algbw, r->busbw, r->wrong);
}

/* The shortest timed window of the rows printed, and its size (bench_print_footer). */
static double shortest_ms = -1;
static size_t shortest_bytes;

static void bench_note_window(size_t bytes, const bench_result_t *r) {
  if (r->window_ms > 0 && (shortest_ms < 0 || r->window_ms < shortest_ms))
    shortest_ms = r->window_ms, shortest_bytes = bytes;
}

void bench_print_row(size_t bytes, size_t count, const char *type, const char *op, int root,
                     const bench_result_t *out_of_place, const bench_result_t *in_place) {
  bench_note_window(bytes, out_of_place);
  bench_note_window(bytes, in_place);
  printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, type, op, root);
  bench_print_half(out_of_place);
  bench_print_half(in_place);
  printf("\n");
  fflush(stdout);
}

/* A size timed over a few milliseconds is a figure of its first calls: A/B runs of 8-32 B
 * gathers at 1-7 ms a size showed 1.3-1.7x that runs of 50 ms did not (docs/perf-rooted.md). */
#define BENCH_SHORT_WINDOW_MS 20.0

void bench_print_footer(int results_wrong, double avg_busbw) {
  if (shortest_ms >= 0 && shortest_ms < BENCH_SHORT_WINDOW_MS)
    printf(
        "# shortest timed window: %.1f ms at %zu B, under %.0f ms: raise -n to compare small "
        "sizes\n",
        shortest_ms, shortest_bytes, BENCH_SHORT_WINDOW_MS);
  printf("# Out of bounds values : %d %s\n", results_wrong, results_wrong > 0 ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n#\n", avg_busbw);
  fflush(stdout);
}
