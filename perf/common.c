/* The tutti benchmark harness (see common.h): closed-form input patterns, the exact check, and
 * the measurement loop shared by every *_perf program.
 *
 * Input patterns. Element i of rank r's input, for n ranks and a datatype that holds every
 * integer up to M exactly (M = 16 for fp8 e4m3, 256 for bf16, 2048 for fp16, ...):
 *   sum, avg, min, max, and collectives that do not reduce:
 *     (i + r) % K + 1, K = the largest odd number <= min(31, M / n),
 *     so any partial sum is an integer <= n * K <= M: exact in every reduction order;
 *     if M / n < 1 (many ranks, narrow type): 1 on the rank with (i + r) % n == 0, else 0.
 *   prod: 2 where r < 6 and (i + r) % 5 < 2, else 1, so every partial product is a power of
 *     two <= 64: exact in every type, int8 included.
 * K and 5 are odd so that a chunk placed at a wrong power-of-two offset does not land on the
 * same values. The expected reduction is computed in double from the same closed form:
 * sums, products, min and max are exact; avg is sum / n truncated toward zero for integers and
 * rounded to nearest even for floating types. The library divides the exact sum in fp32 for the
 * narrow float types, which can round a second time, so avg on floating types is checked with
 * a relative tolerance of one unit in the last place of the datatype (2^-fraction_bits); every
 * other case must match bit for bit (after a memcmp fast path, elements are compared as
 * doubles so that only avg needs the tolerance).
 */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* ---- closed-form patterns ---- */

enum { PATTERN_SMALL_INTS, PATTERN_ONE_HOT, PATTERN_POWERS_OF_TWO };
#define PATTERN_TABLE_MIN 4096 /* elements per table: one memcpy moves at least this many */

struct perf_pattern {
  int kind;
  size_t modulus;         /* K for small ints; n for one-hot; 5 for powers of two */
  size_t period;          /* the pattern repeats every `period` elements */
  size_t table_len;       /* a multiple of period */
  unsigned char *own;     /* this rank's input, table_len elements */
  unsigned char *reduced; /* the expected reduction, table_len elements (reducing ops only) */
  double tol;             /* relative tolerance of the check, 0 = exact */
};

static double pattern_value(const perf_pattern_t *p, int r, size_t i) {
  switch (p->kind) {
    case PATTERN_SMALL_INTS:
      return (double)((i + (size_t)r) % p->modulus + 1);
    case PATTERN_ONE_HOT:
      return (i + (size_t)r) % p->modulus == 0 ? 1.0 : 0.0;
    default:
      return (r < 6 && (i + (size_t)r) % 5 < 2) ? 2.0 : 1.0;
  }
}

static double pattern_reduce(const perf_case_t *c, size_t i) {
  double acc = pattern_value(c->pattern, 0, i);
  for (int r = 1; r < c->nranks; r++) {
    double v = pattern_value(c->pattern, r, i);
    switch (c->op) {
      case ncclProd:
        acc *= v;
        break;
      case ncclMax:
        acc = v > acc ? v : acc;
        break;
      case ncclMin:
        acc = v < acc ? v : acc;
        break;
      default:
        acc += v;
        break; /* sum, avg */
    }
  }
  if (c->op == ncclAvg) acc = c->type->is_float ? acc / c->nranks : floor(acc / c->nranks);
  return acc;
}

static void pattern_choose(perf_pattern_t *p, const perf_type_t *t, ncclRedOp_t op, int n) {
  size_t k = (size_t)(t->exact_max / n);
  if (k > 31) k = 31;
  if (k > 0 && k % 2 == 0) k--;
  if (op == ncclProd) {
    p->kind = PATTERN_POWERS_OF_TWO;
    p->modulus = 5;
  } else if (k == 0) {
    p->kind = PATTERN_ONE_HOT;
    p->modulus = (size_t)n;
  } else {
    p->kind = PATTERN_SMALL_INTS;
    p->modulus = k;
  }
  p->period = p->modulus;
  p->table_len = p->period * (PATTERN_TABLE_MIN / p->period + 1);
  p->tol = (op == ncclAvg && t->is_float) ? ldexp(1.0, -t->mant_bits) : 0.0;
}

static unsigned char *pattern_table(const perf_case_t *c, int rank) {
  const perf_pattern_t *p = c->pattern;
  unsigned char *t = malloc(p->table_len * c->type->size);
  if (!t) {
    fprintf(stderr, "perf: out of memory\n");
    exit(1);
  }
  for (size_t j = 0; j < p->table_len; j++)
    c->type->set(
        t, j, rank >= 0 ? pattern_value(p, rank, j % p->period) : pattern_reduce(c, j % p->period));
  return t;
}

/* Builds the tables of case c (c->pattern must point at p). */
static void pattern_init(perf_pattern_t *p, perf_case_t *c, int reduces) {
  pattern_choose(p, c->type, c->op, c->nranks);
  p->own = pattern_table(c, c->rank);
  p->reduced = reduces ? pattern_table(c, -1) : NULL;
}

static void pattern_free(perf_pattern_t *p) {
  free(p->own);
  free(p->reduced);
}

/* buf[0 .. count) = table[(first + k) mod period] for a table of table_len elements. */
static void pattern_tile(const perf_case_t *c, const unsigned char *table, void *buf, size_t first,
                         size_t count) {
  size_t ts = c->type->size, len = c->pattern->table_len;
  size_t j = first % c->pattern->period; /* table_len is a multiple of period */
  unsigned char *out = buf;
  while (count > 0) {
    size_t n = len - j < count ? len - j : count;
    memcpy(out, table + j * ts, n * ts);
    out += n * ts;
    count -= n;
    j = 0;
  }
}

void perf_fill_input(const perf_case_t *c, int rank, void *buf, size_t first, size_t count) {
  if (rank == c->rank) {
    pattern_tile(c, c->pattern->own, buf, first, count);
    return;
  }
  unsigned char *t = pattern_table(c, rank);
  pattern_tile(c, t, buf, first, count);
  free(t);
}

void perf_fill_reduced(const perf_case_t *c, void *buf, size_t first, size_t count) {
  if (!c->pattern->reduced) {
    fprintf(stderr, "perf: perf_fill_reduced called by a collective that does not reduce\n");
    exit(1);
  }
  pattern_tile(c, c->pattern->reduced, buf, first, count);
}

/* ---- errors ---- */

static int perf_my_rank = -1;

void perf_fail(ncclComm_t comm, const char *what, ncclResult_t res) {
  char host[64] = "?";
  (void)gethostname(host, sizeof(host) - 1);
  const char *last = ncclGetLastError(comm);
  char rank[16] = "?";
  if (perf_my_rank >= 0) snprintf(rank, sizeof(rank), "%d", perf_my_rank);
  int name_len = (int)strcspn(what, "("); /* "ncclAllReduce(args...)" -> "ncclAllReduce" */
  fprintf(stderr, "%s:%d rank %s: %.*s failed: %s (%s)\n", host, (int)getpid(), rank, name_len,
          what, ncclGetErrorString(res), last && *last ? last : "no further detail");
  fflush(stderr);
  if (comm) (void)ncclCommAbort(comm);
  exit(1);
}

/* ---- the run ---- */

typedef struct perf_op_name {
  const char *name;
  ncclRedOp_t op;
} perf_op_name_t;

/* nccl-tests' names and order for -o all. */
static const perf_op_name_t perf_ops[] = {
    {"sum", ncclSum}, {"prod", ncclProd}, {"max", ncclMax}, {"min", ncclMin}, {"avg", ncclAvg}};
static const perf_op_name_t perf_no_op = {"none", ncclSum};
#define PERF_NUM_OPS ((int)(sizeof(perf_ops) / sizeof(perf_ops[0])))
#define PERF_CHECK_CHUNK ((size_t)1 << 16) /* elements compared per expected() call */

typedef struct perf_state {
  const perf_coll_t *coll;
  bench_opts_t opts;
  ncclComm_t comm;
  int rank, nranks;
  void *send, *recv, *scratch;
  size_t send_bytes, recv_bytes;
  double *sync; /* 2 doubles: barrier word, then {time, wrong} reductions */
  double wrong_total, busbw_sum;
  int busbw_n;
} perf_state_t;

static void perf_select(const char *arg, int *first, int *count, int n, const char *(*name_of)(int),
                        const char *what) {
  if (strcmp(arg, "all") == 0) {
    *first = 0;
    *count = n;
    return;
  }
  for (int i = 0; i < n; i++)
    if (strcmp(arg, name_of(i)) == 0) {
      *first = i;
      *count = 1;
      return;
    }
  fprintf(stderr, "perf: unknown %s '%s' (see -h)\n", what, arg);
  exit(2);
}

static const char *perf_type_name(int i) {
  return perf_types[i].name;
}
static const char *perf_op_name(int i) {
  return perf_ops[i].name;
}

/* A barrier through the library: a one-element all-reduce. */
static void perf_barrier(perf_state_t *st) {
  PERF_NCCL(st->comm, ncclAllReduce(st->sync, st->sync, 1, ncclFloat64, ncclSum, st->comm, NULL));
}

/* Poisons the receive buffer (0xff: NaN for every float type, -1 / max for integers, never an
 * expected value) and writes this rank's input where the call reads it. */
static void perf_prepare(perf_state_t *st, const perf_case_t *c, int in_place) {
  size_t ts = c->type->size;
  memset(st->recv, 0xff, c->counts.recv_count * ts);
  void *in = in_place ? (char *)st->recv + c->counts.in_place_offset * ts : st->send;
  st->coll->fill_input(c, in);
}

static double perf_count_wrong(const perf_case_t *c, const void *got, const void *want, size_t n) {
  double wrong = 0, tol = c->pattern->tol;
  for (size_t k = 0; k < n; k++) {
    double g = c->type->get(got, k), w = c->type->get(want, k);
    if (!(fabs(g - w) <= tol * fabs(w))) wrong++; /* NaN counts as wrong */
  }
  return wrong;
}

static double perf_check(perf_state_t *st, const perf_case_t *c) {
  size_t ts = c->type->size, total = c->counts.recv_count;
  double wrong = 0;
  for (size_t first = 0; first < total; first += PERF_CHECK_CHUNK) {
    size_t n = total - first < PERF_CHECK_CHUNK ? total - first : PERF_CHECK_CHUNK;
    if (!st->coll->expected(c, st->scratch, first, n)) return 0;
    const char *got = (const char *)st->recv + first * ts;
    if (memcmp(got, st->scratch, n * ts) != 0) wrong += perf_count_wrong(c, got, st->scratch, n);
  }
  return wrong;
}

static void perf_run_iters(perf_state_t *st, const perf_case_t *c, int in_place, int iters) {
  const void *send =
      in_place ? (char *)st->recv + c->counts.in_place_offset * c->type->size : st->send;
  for (int i = 0; i < iters; i++) {
    ncclResult_t res = st->coll->run(c, send, st->recv);
    if (res != ncclSuccess) perf_fail(st->comm, st->coll->call_name, res);
  }
}

/* Times one size out-of-place or in-place: average per iteration, max over ranks. */
static bench_result_t perf_measure(perf_state_t *st, const perf_case_t *c, int in_place) {
  size_t bytes = c->counts.count * c->type->size;
  int iters = bench_iters_for(&st->opts, bytes);
  if (st->opts.check) perf_prepare(st, c, in_place);
  perf_barrier(st);
  double t0 = bench_now();
  perf_run_iters(st, c, in_place, iters);
  double seconds = (bench_now() - t0) / iters;
  double wrong = -1;
  if (st->opts.check) {
    perf_prepare(st, c, in_place);
    perf_run_iters(st, c, in_place, 1);
    wrong = perf_check(st, c);
  }
  st->sync[0] = seconds;
  st->sync[1] = wrong;
  PERF_NCCL(st->comm, ncclAllReduce(st->sync, st->sync, 2, ncclFloat64, ncclMax, st->comm, NULL));
  bench_result_t r = {.time_us = st->sync[0] * 1e6, .wrong = st->sync[1]};
  r.algbw = bench_algbw(bytes, st->sync[0]);
  r.busbw = r.algbw * st->coll->bus_factor(st->nranks);
  return r;
}

static void perf_set_size(const perf_state_t *st, perf_case_t *c, size_t bytes) {
  st->coll->counts(bytes, c->type->size, st->nranks, st->rank, &c->counts);
}

/* Fills both buffers once (sane values even without -c), then runs -w iterations at the
 * largest and at the smallest size so that lazily built resources are not timed. */
static void perf_warmup(perf_state_t *st, perf_case_t *c) {
  perf_set_size(st, c, st->opts.max_bytes);
  st->coll->fill_input(c, st->send);
  st->coll->fill_input(c, st->recv);
  perf_run_iters(st, c, 0, st->opts.warmup);
  perf_set_size(st, c, st->opts.min_bytes);
  perf_run_iters(st, c, 0, st->opts.warmup);
}

static void perf_record(perf_state_t *st, const bench_result_t *r) {
  if (r->wrong > 0) st->wrong_total += r->wrong;
  st->busbw_sum += r->busbw;
  st->busbw_n++;
}

static void perf_sweep(perf_state_t *st, const perf_type_t *type, const perf_op_name_t *op) {
  perf_pattern_t pattern;
  perf_case_t c = {.type = type,
                   .op = op->op,
                   .op_name = op->name,
                   .rank = st->rank,
                   .nranks = st->nranks,
                   .comm = st->comm,
                   .pattern = &pattern,
                   .root = st->coll->rooted ? st->opts.root : -1};
  pattern_init(&pattern, &c, st->coll->reduces);
  perf_warmup(st, &c);
  for (size_t bytes = st->opts.min_bytes; bytes != BENCH_END;
       bytes = bench_next_size(&st->opts, bytes)) {
    perf_set_size(st, &c, bytes);
    bench_result_t out = perf_measure(st, &c, 0);
    bench_result_t in = perf_measure(st, &c, 1);
    perf_record(st, &out);
    perf_record(st, &in);
    if (st->rank == 0)
      bench_print_row(c.counts.count * type->size, c.counts.count, type->name, op->name, c.root,
                      &out, &in);
  }
  pattern_free(&pattern);
}

/* Buffers sized for the largest size of any selected type, allocated and touched once. */
static void perf_alloc_buffers(perf_state_t *st, int t0, int nt) {
  for (int t = t0; t < t0 + nt; t++) {
    perf_counts_t k;
    st->coll->counts(st->opts.max_bytes, perf_types[t].size, st->nranks, st->rank, &k);
    if (k.send_count * perf_types[t].size > st->send_bytes)
      st->send_bytes = k.send_count * perf_types[t].size;
    if (k.recv_count * perf_types[t].size > st->recv_bytes)
      st->recv_bytes = k.recv_count * perf_types[t].size;
  }
  st->send = bench_alloc(st->send_bytes);
  st->recv = bench_alloc(st->recv_bytes);
  st->scratch = bench_alloc(PERF_CHECK_CHUNK * sizeof(double));
  st->sync = bench_alloc(2 * sizeof(double));
}

static void perf_free_buffers(perf_state_t *st) {
  bench_free(st->send, st->send_bytes);
  bench_free(st->recv, st->recv_bytes);
  bench_free(st->scratch, PERF_CHECK_CHUNK * sizeof(double));
  bench_free(st->sync, 2 * sizeof(double));
}

/* Rank 0 prints the header and one line per rank, gathered through the library. */
static void perf_print_ranks(perf_state_t *st) {
  bench_rank_info_t mine, *all = calloc((size_t)st->nranks, sizeof(*all));
  if (!all) {
    fprintf(stderr, "perf: out of memory\n");
    exit(1);
  }
  bench_rank_info(&mine);
  PERF_NCCL(st->comm, ncclAllGather(&mine, all, sizeof(mine), ncclInt8, st->comm, NULL));
  if (st->rank == 0) {
    bench_print_header(&st->opts);
    for (int r = 0; r < st->nranks; r++) bench_print_rank(r, (long)all[r].pid, all[r].host);
    bench_print_table_header();
  }
  free(all);
}

static void perf_init_comm(perf_state_t *st) {
  PERF_NCCL(NULL, tuttiCommInitFromEnv(&st->comm));
  PERF_NCCL(st->comm, ncclCommUserRank(st->comm, &st->rank));
  PERF_NCCL(st->comm, ncclCommCount(st->comm, &st->nranks));
  perf_my_rank = st->rank;
  if (st->coll->rooted && st->opts.root >= st->nranks) {
    if (st->rank == 0)
      fprintf(stderr, "%s_perf: root %d out of range for %d ranks\n", st->coll->name, st->opts.root,
              st->nranks);
    (void)ncclCommDestroy(st->comm);
    exit(2);
  }
}

int perf_main(const perf_coll_t *coll, int argc, char **argv) {
  perf_state_t st = {.coll = coll};
  char prog[64];
  snprintf(prog, sizeof(prog), "%s_perf", coll->name);
  bench_parse(argc, argv, prog, &st.opts);
  int t0, nt, o0 = 0, no = 1;
  perf_select(st.opts.type_arg, &t0, &nt, perf_num_types, perf_type_name, "datatype");
  if (coll->reduces) perf_select(st.opts.op_arg, &o0, &no, PERF_NUM_OPS, perf_op_name, "op");

  perf_init_comm(&st);
  perf_alloc_buffers(&st, t0, nt);
  perf_print_ranks(&st);
  for (int t = t0; t < t0 + nt; t++)
    for (int o = o0; o < o0 + no; o++)
      perf_sweep(&st, &perf_types[t], coll->reduces ? &perf_ops[o] : &perf_no_op);
  if (st.rank == 0)
    bench_print_footer(st.wrong_total, st.busbw_n ? st.busbw_sum / st.busbw_n : 0.0);
  perf_free_buffers(&st);
  PERF_NCCL(st.comm, ncclCommDestroy(st.comm));
  return st.wrong_total > 0 ? 1 : 0;
}
