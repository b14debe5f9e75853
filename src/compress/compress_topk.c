/* topk selection and its (index, value) pairs.
 *
 * Payload for k pairs: k x { uint32 index, float32 value }, little-endian, indices strictly
 * increasing and below the buffer's count (checked on receipt, so a pair can never write out of
 * bounds or twice). k = max(1, ceil(fraction * count)) (the float fraction taken as the decimal
 * it stands for), the same on every rank.
 *
 * Selection in two passes, O(count), no sort: a histogram of the top 16 bits of |v| (sign
 * dropped: 8 exponent and 7 mantissa bits, so a bucket spans magnitudes within a factor
 * 1 + 2^-7) finds the bucket T where the k-th largest lies; the second pass takes every element
 * above T and the first ones of T in index order until there are k. The choice depends on the
 * bits of v only: deterministic. NaN sorts above infinity and is sent (the sum shows it).
 * Elements inside the given spans (tensors sent exactly) are left out of the histogram and all
 * taken, in index order with the selected ones.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"

#define TOPK_BUCKETS 65536

size_t compress_topk_k(size_t count, float fraction) {
  if (count == 0) return 0;
  /* a float fraction is off by up to 2^-24 relative (0.01f is 0.0099999998): ceil of a product
   * a hair above an integer must not add one */
  double k = ceil((double)fraction * (double)count * (1.0 - 0x1p-23));
  if (k < 1) k = 1;
  return k > (double)count ? count : (size_t)k;
}

static inline uint32_t mag_bucket(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return (bits & 0x7fffffffu) >> 15;
}

/* Calls fn(v, from, to, arg) for each run of [0, count) outside the spans (sorted, disjoint). */
static void outside_spans(float *v, size_t count, const compress_span_t *sp, int ns,
                          void (*fn)(float *, size_t, size_t, void *), void *arg) {
  size_t from = 0;
  for (int s = 0; s <= ns; s++) {
    size_t to = s < ns ? sp[s].off : count;
    if (to > from) fn(v, from, to, arg);
    if (s < ns) from = sp[s].off + sp[s].count;
  }
}

static void histogram_range(float *v, size_t from, size_t to, void *hist) {
  for (size_t i = from; i < to; i++) ((uint32_t *)hist)[mag_bucket(v[i])]++;
}

/* The bucket holding the k-th largest magnitude outside the spans, and how many of it to take. */
static uint32_t topk_threshold(float *v, size_t count, const compress_span_t *sp, int ns, size_t k,
                               size_t *take_at_t) {
  uint32_t *hist = calloc(TOPK_BUCKETS, sizeof(*hist));
  uint32_t t = 0;
  size_t above = 0;
  if (!hist) { /* no memory for the histogram: everything counts as bucket 0 */
    *take_at_t = k;
    return 0;
  }
  outside_spans(v, count, sp, ns, histogram_range, hist);
  for (t = TOPK_BUCKETS - 1; t > 0 && above + hist[t] < k; t--) above += hist[t];
  *take_at_t = k - above;
  free(hist);
  return t;
}

static inline void put_pair(uint8_t *out, size_t j, uint32_t idx, float val) {
  memcpy(out + COMPRESS_TOPK_PAIR_BYTES * j, &idx, 4);
  memcpy(out + COMPRESS_TOPK_PAIR_BYTES * j + 4, &val, 4);
}

/* The selection's state: threshold bucket t, how many of bucket t and in all are still to be
 * taken, the pairs written so far. */
typedef struct {
  uint32_t t;
  size_t take_at_t, left, j;
  uint8_t *out;
} topk_pick_t;

static void take_range(float *v, size_t from, size_t to, topk_pick_t *p) {
  for (size_t i = from; i < to && p->left > 0; i++) {
    uint32_t b = mag_bucket(v[i]);
    if (b > p->t || (b == p->t && p->take_at_t > 0)) {
      if (b == p->t) p->take_at_t--;
      p->left--;
      put_pair(p->out, p->j++, (uint32_t)i, v[i]);
      v[i] = 0.0f;
    }
  }
}

void compress_topk_take(float *v, size_t count, size_t k, const compress_span_t *spans, int nspans,
                        uint8_t *out) {
  topk_pick_t p = {.left = k, .out = out};
  p.t = topk_threshold(v, count, spans, nspans, k, &p.take_at_t);
  size_t from = 0;
  for (int s = 0; s <= nspans; s++) { /* the run before span s, then span s whole */
    size_t to = s < nspans ? spans[s].off : count;
    take_range(v, from, to, &p);
    if (s == nspans) break;
    from = spans[s].off + spans[s].count;
    for (size_t i = spans[s].off; i < from; i++) {
      put_pair(out, p.j++, (uint32_t)i, v[i]);
      v[i] = 0.0f;
    }
  }
}

const char *compress_topk_check(const uint8_t *in, size_t k, size_t count) {
  int64_t prev = -1;
  for (size_t j = 0; j < k; j++) {
    uint32_t idx;
    memcpy(&idx, in + COMPRESS_TOPK_PAIR_BYTES * j, 4);
    if ((size_t)idx >= count) return "topk index beyond the buffer";
    if ((int64_t)idx <= prev) return "topk indices not strictly increasing";
    prev = idx;
  }
  return NULL;
}

void compress_topk_decode_add(const uint8_t *in, size_t k, float *acc) {
  for (size_t j = 0; j < k; j++) {
    uint32_t idx;
    float val;
    memcpy(&idx, in + COMPRESS_TOPK_PAIR_BYTES * j, 4);
    memcpy(&val, in + COMPRESS_TOPK_PAIR_BYTES * j + 4, 4);
    acc[idx] += val;
  }
}
