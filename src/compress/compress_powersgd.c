/* PowerSGD (Vogels et al. 2019), rank r, one power iteration per step with warm start.
 *
 * The buffer is cut into segments: one per tensor of its layout (tuttiCompressorSetLayout), or,
 * without a layout, one segment of the whole buffer viewed as rows x cols (cols =
 * ceil(sqrt(count)), the last row zero padded). A segment is compressed when it is a matrix
 * whose factors take less than half its size, r (rows + cols) < rows cols / 2 (the rule of
 * PyTorch's PowerSGD hook) and that has at least cfg.minCompressCount elements; 1-D tensors
 * (one row) and small matrices are sent exactly. The
 * whole-buffer view is always compressed. On rank k, for a compressed segment, M_k = scale x_k +
 * e_k (e_k its residual); with Q (cols x r) the same on every rank:
 *   Q = orthonormalize(Q)                    (as PyTorch's hook does before each use)
 *   P = sum_k M_k Q            (rows x r)    one ncclAllReduce for every segment's P and the
 *                                            exact segments' scale x_k, fp32
 *   P = orthonormalize(P)                    Gram-Schmidt, the same bits on every rank
 *   Q = sum_k M_k^T P          (cols x r)    one ncclAllReduce for every segment's Q, fp32
 *   y = P Q^T                  (rows x cols, the segment's first count elements)
 *   e_k = M_k - y / R          so sum_k e_k = sum_k M_k - y: nothing is lost, only delayed
 * Q is kept for the next step (warm start); the first Q is pseudo-random from a fixed seed, the
 * same on every rank. The first warmupSteps calls are exact all-reduces (no residual).
 * Bytes per rank: the ring all-reduces of sum(rows r) + exact and sum(cols r) floats, against
 * count floats.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

/* Whether a rows x cols matrix is worth rank-r factors: they must take under half its size. */
static int psgd_worth_it(size_t rows, size_t cols, size_t r) {
  return rows > 1 && cols > 1 && 2 * r * (rows + cols) < rows * cols;
}

/* The segments of the layout (or the whole buffer), with their offsets into work, p and q. */
static ncclResult_t psgd_segments(struct tuttiCompressor *c) {
  size_t r = (size_t)c->cfg.powerSgdRank, off = 0, work = 0;
  c->nseg = c->layout_n ? c->layout_n : 1;
  c->seg = calloc((size_t)c->nseg, sizeof(*c->seg));
  if (!c->seg) return TUTTI_ERR(ncclSystemError, "out of memory for a powersgd compressor");
  c->p_total = c->q_total = c->exact_count = 0;
  for (int i = 0; i < c->nseg; i++) {
    compress_psgd_seg_t *s = &c->seg[i];
    s->off = off;
    if (c->layout_n) {
      s->count = c->layout_count[i], s->cols = c->layout_row[i], s->rows = s->count / s->cols;
      s->compressed =
          psgd_worth_it(s->rows, s->cols, r) && s->count >= (size_t)c->cfg.minCompressCount;
    } else {
      s->count = c->count, s->compressed = 1;
      compress_powersgd_shape(c->count, &s->rows, &s->cols);
    }
    if (s->compressed) {
      s->work_off = work, s->p_off = c->p_total, s->q_off = c->q_total;
      work += s->rows * s->cols, c->p_total += s->rows * r, c->q_total += s->cols * r;
    } else {
      s->exact_off = c->exact_count, c->exact_count += s->count;
    }
    off += s->count;
  }
  c->work = calloc(work ? work : 1, sizeof(float)); /* the padding stays zero */
  return ncclSuccess;
}

ncclResult_t compress_powersgd_setup(struct tuttiCompressor *c, int nranks) {
  (void)nranks;
  TUTTI_CHECK(psgd_segments(c));
  c->residual = calloc(c->count ? c->count : 1, sizeof(float));
  c->p = malloc((c->p_total + c->exact_count + 1) * sizeof(float));
  c->q = malloc((c->q_total + 1) * sizeof(float));
  if (!c->work || !c->residual || !c->p || !c->q)
    return TUTTI_ERR(ncclSystemError, "out of memory for a powersgd compressor of %zu elements",
                     c->count);
  uint64_t s = 0x9e3779b97f4a7c15ull; /* xorshift64: uniform in [-1, 1) */
  for (size_t i = 0; i < c->q_total; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    c->q[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return ncclSuccess;
}

/* out (m x r) = A (m x n) B (n x r); A, B, out row-major. */
static void mat_times(const float *a, size_t m, size_t n, const float *b, size_t r, float *out) {
  memset(out, 0, m * r * sizeof(float));
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++)
      for (size_t l = 0; l < r; l++) out[i * r + l] += a[i * n + j] * b[j * r + l];
}

/* out (n x r) = A^T B, A (m x n), B (m x r); row-major. */
static void mat_t_times(const float *a, size_t m, size_t n, const float *b, size_t r, float *out) {
  memset(out, 0, n * r * sizeof(float));
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++)
      for (size_t l = 0; l < r; l++) out[j * r + l] += a[i * n + j] * b[i * r + l];
}

/* Modified Gram-Schmidt on the r columns of P (m x r, row-major); a column whose norm is 0
 * (e.g. a zero gradient) stays zero. */
static void orthonormalize(float *p, size_t m, size_t r) {
  for (size_t l = 0; l < r; l++) {
    for (size_t k = 0; k < l; k++) {
      double dot = 0;
      for (size_t i = 0; i < m; i++) dot += (double)p[i * r + l] * p[i * r + k];
      for (size_t i = 0; i < m; i++) p[i * r + l] -= (float)dot * p[i * r + k];
    }
    double norm = 0;
    for (size_t i = 0; i < m; i++) norm += (double)p[i * r + l] * p[i * r + l];
    float inv = norm > 0 ? (float)(1.0 / sqrt(norm)) : 0.0f;
    for (size_t i = 0; i < m; i++) p[i * r + l] *= inv;
  }
}

/* Before the first all-reduce: M = scale x + e and P = M Q of the compressed segments, the
 * scaled input of the exact ones (after the factors in p). */
static void psgd_first_half(struct tuttiCompressor *c, const float *x, float scale) {
  size_t r = (size_t)c->cfg.powerSgdRank;
  for (int i = 0; i < c->nseg; i++) {
    const compress_psgd_seg_t *s = &c->seg[i];
    const float *xs = x + s->off;
    if (!s->compressed) {
      float *out = c->p + c->p_total + s->exact_off;
      for (size_t j = 0; j < s->count; j++) out[j] = scale * xs[j];
      continue;
    }
    float *m = c->work + s->work_off;
    const float *e = c->residual + s->off;
    for (size_t j = 0; j < s->count; j++) m[j] = scale * xs[j] + e[j];
    orthonormalize(c->q + s->q_off, s->cols, r); /* the same span; keeps M Q's size that of M */
    mat_times(m, s->rows, s->cols, c->q + s->q_off, r, c->p + s->p_off);
  }
}

/* After the second: y = P Q^T and e = M - y / R (compressed), y = the exact sum (the others). */
static void psgd_second_half(struct tuttiCompressor *c, float *y) {
  size_t r = (size_t)c->cfg.powerSgdRank;
  float inv_r = 1.0f / (float)c->nranks;
  for (int i = 0; i < c->nseg; i++) {
    const compress_psgd_seg_t *s = &c->seg[i];
    float *ys = y + s->off;
    if (!s->compressed) {
      memcpy(ys, c->p + c->p_total + s->exact_off, s->count * sizeof(float));
      continue;
    }
    const float *m = c->work + s->work_off, *p = c->p + s->p_off, *q = c->q + s->q_off;
    float *e = c->residual + s->off;
    for (size_t j = 0; j < s->count; j++) {
      const float *pi = p + (j / s->cols) * r, *qj = q + (j % s->cols) * r;
      float a = 0;
      for (size_t l = 0; l < r; l++) a += pi[l] * qj[l];
      e[j] = m[j] - a * inv_r;
      ys[j] = a;
    }
  }
}

ncclResult_t compress_powersgd_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                         float scale, int rank, ncclComm_t comm) {
  (void)rank;
  size_t n = c->count, r = (size_t)c->cfg.powerSgdRank;
  if (c->step < (uint32_t)c->cfg.warmupSteps) { /* dense warm-up */
    float *m = c->residual;                     /* zero before and after the warm-up */
    for (size_t i = 0; i < n; i++) m[i] = scale * x[i];
    c->sent += compress_ring_allreduce_bytes(n, c->nranks);
    ncclResult_t res = ncclAllReduce(m, y, n, ncclFloat, ncclSum, comm, NULL);
    memset(m, 0, n * sizeof(float));
    return res;
  }
  size_t first = c->p_total + c->exact_count;
  psgd_first_half(c, x, scale);
  if (first) TUTTI_CHECK(ncclAllReduce(c->p, c->p, first, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < c->nseg; i++) {
    const compress_psgd_seg_t *s = &c->seg[i];
    if (!s->compressed) continue;
    orthonormalize(c->p + s->p_off, s->rows, r);
    mat_t_times(c->work + s->work_off, s->rows, s->cols, c->p + s->p_off, r, c->q + s->q_off);
  }
  if (c->q_total)
    TUTTI_CHECK(ncclAllReduce(c->q, c->q, c->q_total, ncclFloat, ncclSum, comm, NULL));
  c->sent += compress_ring_allreduce_bytes(first, c->nranks) +
             compress_ring_allreduce_bytes(c->q_total, c->nranks);
  psgd_second_half(c, y);
  return ncclSuccess;
}
