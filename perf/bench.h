/* Benchmark scaffolding shared by every program in perf/, whatever library it measures:
 * command-line options (nccl-tests' flags), the size sweep, timing, buffer allocation and
 * nccl-tests' output format. Nothing here calls tutti or MPI, so mpi_allreduce_perf and the
 * tutti benchmarks print the same columns from the same code.
 */
#ifndef TUTTI_PERF_BENCH_H_
#define TUTTI_PERF_BENCH_H_

#include <stddef.h>
#include <stdint.h>

#define BENCH_ROOT_ALL (-1) /* -r all: every rank in turn */

typedef struct bench_opts {
  size_t min_bytes;      /* -b */
  size_t max_bytes;      /* -e */
  size_t step_bytes;     /* -i, used when step_factor <= 1 */
  int step_factor;       /* -f */
  int iters;             /* -n */
  int warmup;            /* -w */
  int agg_iters;         /* -m: calls per timed iteration, aggregated in one group */
  int check;             /* -c: checked calls per size (0: no check) */
  int blocking;          /* -z: accepted, host calls are always blocking */
  int reg;               /* -R: 1 = buffers from ncclMemAlloc, registered (tutti programs) */
  int root;              /* -r, for rooted collectives; BENCH_ROOT_ALL for "all" */
  int average;           /* -a: time across ranks, 0 rank 0, 1 mean, 2 min, 3 max */
  int timeout_s;         /* -T: a call that has not returned after this long aborts the run */
  int nthreads, ngpus;   /* -t, -g: only 1 (one rank per process, host buffers) */
  const char *json_path; /* -J: results as JSON, written by rank 0 */
  const char *type_arg;  /* -d, a name or "all" */
  const char *op_arg;    /* -o, a name or "all" */
  const char *coll_arg;  /* --coll: which collective a peer program (MPI, Gloo) measures */
  size_t iter_bytes;     /* --iter-bytes (tutti extension): 0 = -n at every size */
  size_t warmup_bytes;   /* --warmup-bytes (tutti extension): untimed calls at every size */
  size_t buffer_offset;  /* --buffer-offset (tutti extension): send/recv buffers this many
                            bytes past a page boundary (0: page-aligned) */
  int alloc_mmap;        /* --alloc mmap (tutti extension): buffers from bench_alloc, not malloc */
  int parallel_init;     /* -p: accepted; one rank per process initialises alone */
  int cputime;           /* -C 1: time is the process's CPU time, not wall time */
  int cycles;            /* -N: run the whole sweep this many times (0: until stopped) */
} bench_opts_t;

/* Parses argv into *o (defaults as in nccl-tests). Prints usage and exits on -h or on an error;
 * `prog` names the program in the usage text. */
void bench_parse(int argc, char **argv, const char *prog, bench_opts_t *o);

/* "64", "4K", "16M", "1G" -> bytes (powers of 1024). Returns 0 on success, -1 if malformed. */
int bench_parse_bytes(const char *s, size_t *bytes);

/* The size sweep: min_bytes, then bench_next_size(o, s) after s, BENCH_END once past
 * max_bytes:  for (s = o->min_bytes; s != BENCH_END; s = bench_next_size(o, s)) */
#define BENCH_END ((size_t)-1)
size_t bench_next_size(const bench_opts_t *o, size_t bytes);

/* The -a modes, nccl-tests' numbering; bench_average_name(2) == "min". */
enum { BENCH_AVG_RANK0 = 0, BENCH_AVG_MEAN = 1, BENCH_AVG_MIN = 2, BENCH_AVG_MAX = 3 };
const char *bench_average_name(int average);

/* Timed iterations at a size: -n, or with --iter-bytes, iter_bytes / bytes clamped to
 * [BENCH_MIN_SCALED_ITERS, -n]. Every rank computes the same number. */
#define BENCH_MIN_SCALED_ITERS 3
int bench_iters_for(const bench_opts_t *o, size_t bytes);
/* Untimed calls before each size with --warmup-bytes: warmup_bytes / bytes, at least 1, at
 * most BENCH_MAX_WARMUP_ITERS; 0 without the option. */
#define BENCH_MAX_WARMUP_ITERS 200
int bench_warmup_iters_for(const bench_opts_t *o, size_t bytes);

/* Monotonic clock in seconds. */
double bench_now(void);
/* The options of the tools that time two libraries in alternating blocks of calls
 * (small_vs_mpi, builds_ab): sizes -b to -e times -f, -k calls per block, blocks_opt (their
 * letter for the number of blocks), -P out|in, -M (ncclMemAlloc buffers). */
typedef struct bench_blocks {
  size_t minb, maxb;
  int factor, calls, blocks, in_place, memalloc;
} bench_blocks_t;
void bench_blocks_init(bench_blocks_t *o); /* 8 B to 4 KiB x 2, 100 calls, 301 blocks */
/* 1: opt was one of them and is set, 0: not one of them, -1: a bad value (*why says which). */
int bench_blocks_option(bench_blocks_t *o, int opt, const char *arg, int blocks_opt,
                        const char **why);
/* NULL when the options fit together, else what is wrong. */
const char *bench_blocks_check(const bench_blocks_t *o);
/* Their inputs: rank r's element k (of its whole input) is (k + r) % 31 + 1, so every fp32 sum
 * of up to 2^19 ranks is exact; and the elements of a reduced output y (n elements from
 * element `first` of the inputs, summed over nranks ranks) that are not the exact sum. */
float bench_blocks_input(size_t k, int r);
size_t bench_blocks_wrong_sums(const float *y, size_t n, size_t first, int nranks);
/* Blocks of c elements holding ranks first .. first + nblocks - 1's inputs one after another (a
 * scatter's input, a gather's output): written, or their elements that differ counted. */
void bench_blocks_fill(float *y, size_t c, int first, int nblocks);
size_t bench_blocks_wrong(const float *y, size_t c, int first, int nblocks);
/* The median of v[0..n) (sorts v) and the order statistics that bound a distribution-free 95 %
 * interval of it: ranks n/2 -+ 1.96 sqrt(n)/2 (normal approximation of the binomial); lo and hi
 * may be NULL. For per-block ratios of two libraries timed in alternating blocks. */
double bench_median_ci(double *v, int n, double *lo, double *hi);
/* The clock of the timed loops: bench_now(), or the process's CPU time with -C 1. */
double bench_clock(const bench_opts_t *o);

/* Page-aligned anonymous memory, every page touched once so that timing never sees a fault.
 * Exits on failure. bench_free takes the same length. */
void *bench_alloc(size_t bytes);
void bench_free(void *p, size_t bytes);
/* A collective's buffer: from malloc (the program's heap: tutti-run's shared heap or glibc's),
 * or with use_mmap (--alloc mmap) from bench_alloc, starting `offset` bytes past a page
 * boundary (--buffer-offset), zeroed; free with the same bytes, offset and use_mmap. */
void *bench_alloc_at(size_t bytes, size_t offset, int use_mmap);
void bench_free_at(void *p, size_t bytes, size_t offset, int use_mmap);

/* algbw and busbw in GB/s (1e9 B/s) for `bytes` moved in `seconds`. */
double bench_algbw(size_t bytes, double seconds);

/* ---- nccl-tests' output ---- */
void bench_print_header(const bench_opts_t *o);
/* One "#  Rank  r Group  0 Pid p on host device  0 [host]" line. */
void bench_print_rank(int rank, long pid, const char *host);
void bench_print_table_header(void);

/* One half of a row: timing of the out-of-place or in-place run. wrong < 0 prints N/A. */
typedef struct bench_result {
  double time_us;
  double algbw;
  double busbw;
  double wrong;
  double window_ms; /* the timed calls' whole wall time (0: not timed so) */
} bench_result_t;

void bench_print_row(size_t bytes, size_t count, const char *type, const char *op, int root,
                     const bench_result_t *out_of_place, const bench_result_t *in_place);
/* "# Out of bounds values : N OK|FAILED" (N: results with a wrong element, as nccl-tests
 * counts them) and "# Avg bus bandwidth    : X". */
void bench_print_footer(int results_wrong, double avg_busbw);

/* ---- JSON results (-J), written by rank 0 as the rows are printed ----
 * {"tool", "collective", "library", "nranks", "hosts", "loadavg", "started", "options",
 *  "results": [{"size", "count", "type", "redop", "root",
 *               "out_of_place": {"time_us", "algbw", "busbw", "wrong"}, "in_place": {...}}],
 *  "results_wrong", "avg_busbw"}
 * "wrong" is null where the row prints N/A. perf/compare and perf/plot read this format. */
typedef struct bench_json bench_json_t;
/* Opens path and writes the header; hosts[r] is rank r's host name. Exits 2 if path cannot be
 * created. */
bench_json_t *bench_json_open(const bench_opts_t *o, const char *tool, const char *collective,
                              const char *library, int nranks, const char *const *hosts);
void bench_json_row(bench_json_t *j, size_t bytes, size_t count, const char *type, const char *op,
                    int root, const bench_result_t *out_of_place, const bench_result_t *in_place);
void bench_json_close(bench_json_t *j, int results_wrong, double avg_busbw);

/* Fixed-size record each rank contributes so that rank 0 can print every rank's line. */
#define BENCH_HOST_LEN 56
typedef struct bench_rank_info {
  char host[BENCH_HOST_LEN];
  int64_t pid;
} bench_rank_info_t;
void bench_rank_info(bench_rank_info_t *info);

#endif /* TUTTI_PERF_BENCH_H_ */
