/* Closed-form data of the tutti benchmarks: what every rank sends, what every rank must receive.
 *
 * The stream of rank r. Element i of rank r's stream, for n ranks and a datatype that holds
 * every integer up to M exactly (M = 16 for fp8 e4m3, 256 for bf16, 2048 for fp16, ...), with
 * M' = M - 1 so that no value or sum is 255, the uint8 poison (see PERF_POISON_BYTE):
 *   collectives that reduce, with sum, avg, min or max:
 *     (i + r) % K + 1, K = the largest odd number <= min(31, M' / n),
 *     so any partial sum is an integer <= n * K <= M': exact in every reduction order;
 *     if M' / n < 1 (many ranks, narrow type): 1 on the rank with (i + r) % n == 0, else 0.
 *   collectives that reduce, with prod: 2 where r < 6 and (i + r) % 5 < 2, else 1, so every
 *     partial product is a power of two <= 64: exact in every type, int8 included.
 *   collectives that only move data: (i + r) % K + 1 with K = the largest odd number
 *     <= min(1023, M'): nothing is summed, so the values only need to be representable, and
 *     the longer period tells more blocks apart.
 * K and 5 are odd so that a chunk placed at a wrong power-of-two offset does not land on the
 * same values.
 *
 * Blocks. Element k of block b of rank r's buffer is element k + b * (n + 1) of rank r's
 * stream. The pairs (r, b), r and b < n, then start at n^2 distinct offsets r + b * (n + 1) of
 * one periodic sequence, so a block delivered from the wrong rank, or the wrong block of the
 * right rank (an alltoall transposed, a reduce-scatter's blocks swapped), shows up as wrong
 * values as long as n^2 + n - 2 < K (n <= 5 when reducing fp32, n <= 31 when moving it).
 *
 * Expected results are computed in double from the same closed form: sums, products, min and
 * max are exact; avg is sum / n truncated toward zero for integers and rounded to nearest even
 * for floating types. The library divides the exact sum in fp32 for the narrow float types,
 * which can round a second time, so avg on floating types is checked with a relative tolerance
 * of one unit in the last place of the datatype (2^-fraction_bits); every other element must
 * match bit for bit (bytes first, so that NaN poison compares equal to itself).
 *
 * Speed: each rank's stream (and the reduction) is tabulated once per case, a few thousand
 * elements long and a whole number of periods, and buffers are filled by memcpy from it.
 */
#include "pattern.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PATTERN_SMALL_INTS, PATTERN_ONE_HOT, PATTERN_POWERS_OF_TWO };
#define PATTERN_TABLE_MIN 4096  /* elements per table: one memcpy moves at least this many */
#define PATTERN_MOVE_MAX_K 1023 /* K for collectives that do not reduce */
#define PATTERN_REDUCE_MAX_K 31 /* K for those that do */

struct perf_pattern {
  int kind;
  size_t modulus;   /* K for small ints; n for one-hot; 5 for powers of two */
  size_t table_len; /* a multiple of the period (= modulus) */
  int nranks;
  unsigned char **streams; /* per rank, built on first use: table_len elements */
  unsigned char *reduced;  /* the reduction over all ranks, table_len elements, or NULL */
  double tol;              /* relative tolerance of the check, 0 = exact */
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

static size_t pattern_odd_at_most(double limit, size_t cap) {
  size_t k = limit >= (double)cap ? cap : (size_t)limit;
  return (k > 0 && k % 2 == 0) ? k - 1 : k;
}

static void pattern_choose(perf_pattern_t *p, const perf_type_t *t, ncclRedOp_t op, int n,
                           int reduces) {
  if (!reduces) {
    p->kind = PATTERN_SMALL_INTS;
    p->modulus = pattern_odd_at_most(t->exact_max - 1, PATTERN_MOVE_MAX_K);
  } else if (op == ncclProd) {
    p->kind = PATTERN_POWERS_OF_TWO;
    p->modulus = 5;
  } else if ((p->modulus = pattern_odd_at_most((t->exact_max - 1) / n, PATTERN_REDUCE_MAX_K)) > 0) {
    p->kind = PATTERN_SMALL_INTS;
  } else {
    p->kind = PATTERN_ONE_HOT;
    p->modulus = (size_t)n;
  }
  p->table_len = p->modulus * (PATTERN_TABLE_MIN / p->modulus + 1);
  p->tol = (reduces && op == ncclAvg && t->is_float) ? ldexp(1.0, -t->mant_bits) : 0.0;
}

static void *pattern_alloc(size_t bytes) {
  void *t = calloc(1, bytes ? bytes : 1);
  if (!t) {
    fprintf(stderr, "perf: out of memory\n");
    exit(1);
  }
  return t;
}

/* Rank r's stream (r >= 0) or the reduction (r == PERF_REDUCED), tabulated. */
static unsigned char *pattern_table(const perf_case_t *c, int r) {
  const perf_pattern_t *p = c->pattern;
  unsigned char *t = pattern_alloc(p->table_len * c->type->size);
  for (size_t j = 0; j < p->table_len; j++) {
    size_t i = j % p->modulus;
    c->type->set(t, j, r == PERF_REDUCED ? pattern_reduce(c, i) : pattern_value(p, r, i));
  }
  return t;
}

void pattern_init(perf_case_t *c, int reduces) {
  perf_pattern_t *p = pattern_alloc(sizeof(*p));
  pattern_choose(p, c->type, c->op, c->nranks, reduces);
  p->nranks = c->nranks;
  p->streams = pattern_alloc((size_t)c->nranks * sizeof(*p->streams));
  c->pattern = p;
  if (reduces) p->reduced = pattern_table(c, PERF_REDUCED);
}

void pattern_free(perf_case_t *c) {
  perf_pattern_t *p = c->pattern;
  if (!p) return;
  for (int r = 0; r < p->nranks; r++) free(p->streams[r]);
  free(p->streams);
  free(p->reduced);
  free(p);
  c->pattern = NULL;
}

static const unsigned char *pattern_stream(const perf_case_t *c, int r) {
  perf_pattern_t *p = c->pattern;
  if (r == PERF_REDUCED) {
    if (!p->reduced) {
      fprintf(stderr, "perf: %s asked for a reduction but does not reduce\n", c->coll->name);
      exit(1);
    }
    return p->reduced;
  }
  if (r < 0 || r >= p->nranks) {
    fprintf(stderr, "perf: %s asked for rank %d of %d\n", c->coll->name, r, p->nranks);
    exit(1);
  }
  if (!p->streams[r]) p->streams[r] = pattern_table(c, r);
  return p->streams[r];
}

/* buf[0 .. n) = stream[(first + k) mod period], k < n. */
static void pattern_tile(const perf_case_t *c, const unsigned char *table, unsigned char *out,
                         size_t first, size_t n) {
  size_t ts = c->type->size, len = c->pattern->table_len;
  size_t j = first % c->pattern->modulus; /* table_len is a multiple of the period */
  while (n > 0) {
    size_t m = len - j < n ? len - j : n;
    memcpy(out, table + j * ts, m * ts);
    out += m * ts;
    n -= m;
    j = 0;
  }
}

void perf_fill_blocks(const perf_case_t *c, void *buf, size_t first, size_t n, size_t block_count,
                      int rank, int block) {
  unsigned char *out = buf;
  size_t ts = c->type->size, shift = (size_t)c->nranks + 1;
  while (n > 0 && block_count > 0) {
    size_t j = first / block_count, k = first % block_count;
    size_t m = block_count - k < n ? block_count - k : n;
    int r = rank == PERF_EACH ? (int)j : rank;
    size_t b = block == PERF_EACH ? j : (size_t)block;
    pattern_tile(c, pattern_stream(c, r), out, k + b * shift, m);
    out += m * ts;
    first += m;
    n -= m;
  }
}

void perf_fill_untouched(const perf_case_t *c, void *buf, size_t first, size_t n) {
  size_t ts = c->type->size;
  memset(buf, PERF_POISON_BYTE, n * ts);
  if (!c->in_place) return;
  /* The input occupies [in_send, in_send + send_count) of the receive buffer; this window is
   * [in_recv + first, in_recv + first + n). */
  size_t in_send = c->counts.in_place_send, in_recv = c->counts.in_place_recv;
  size_t lo = in_send > in_recv + first ? in_send : in_recv + first;
  size_t hi = in_send + c->counts.send_count;
  if (in_recv + first + n < hi) hi = in_recv + first + n;
  if (lo < hi)
    c->coll->fill_input(c, (unsigned char *)buf + (lo - in_recv - first) * ts, lo - in_send,
                        hi - lo);
}

double pattern_count_wrong(const perf_case_t *c, const void *got, const void *want, size_t n) {
  double wrong = 0, tol = c->pattern->tol;
  size_t ts = c->type->size;
  const unsigned char *g = got, *w = want;
  for (size_t k = 0; k < n; k++) {
    if (memcmp(g + k * ts, w + k * ts, ts) == 0) continue;
    double gv = c->type->get(got, k), wv = c->type->get(want, k);
    if (!(fabs(gv - wv) <= tol * fabs(wv))) wrong++; /* NaN counts as wrong */
  }
  return wrong;
}
