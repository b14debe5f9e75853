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

/* The bucket holding the k-th largest magnitude, and how many of it to take. */
static uint32_t topk_threshold(const float *v, size_t count, size_t k, size_t *take_at_t) {
  uint32_t *hist = calloc(TOPK_BUCKETS, sizeof(*hist));
  uint32_t t = 0;
  size_t above = 0;
  if (!hist) { /* no memory for the histogram: everything counts as bucket 0 */
    *take_at_t = k;
    return 0;
  }
  for (size_t i = 0; i < count; i++) hist[mag_bucket(v[i])]++;
  for (t = TOPK_BUCKETS - 1; t > 0 && above + hist[t] < k; t--) above += hist[t];
  *take_at_t = k - above;
  free(hist);
  return t;
}

static inline void put_pair(uint8_t *out, size_t j, uint32_t idx, float val) {
  memcpy(out + COMPRESS_TOPK_PAIR_BYTES * j, &idx, 4);
  memcpy(out + COMPRESS_TOPK_PAIR_BYTES * j + 4, &val, 4);
}

void compress_topk_take(float *v, size_t count, size_t k, uint8_t *out) {
  size_t take = 0, j = 0;
  uint32_t t = topk_threshold(v, count, k, &take);
  for (size_t i = 0; i < count && j < k; i++) {
    uint32_t b = mag_bucket(v[i]);
    if (b > t || (b == t && take > 0)) {
      if (b == t) take--;
      put_pair(out, j++, (uint32_t)i, v[i]);
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
