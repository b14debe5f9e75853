/* PowerSGD (Vogels et al. 2019), rank r, one power iteration per step with warm start.
 *
 * The gradient is viewed as a matrix M of rows x cols (compress_powersgd_shape, zero padded at
 * the end). On rank k, M_k = scale * x_k + e_k (e_k its residual). With Q (cols x r) the same
 * on every rank:
 *   P = sum_k M_k Q            (rows x r)    ncclAllReduce, fp32
 *   P = orthonormalize(P)                    Gram-Schmidt, the same bits on every rank
 *   Q = sum_k M_k^T P          (cols x r)    ncclAllReduce, fp32
 *   y = P Q^T                  (rows x cols, the first count elements)
 *   e_k = M_k - y / R          so sum_k e_k = sum_k M_k - y: nothing is lost, only delayed
 * Q is kept for the next step (warm start); the first Q is pseudo-random from a fixed seed, the
 * same on every rank. The first warmupSteps calls are exact all-reduces (no residual).
 * Bytes per rank: the ring all-reduces of rows * r and cols * r floats, against count floats.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

ncclResult_t compress_powersgd_setup(struct tuttiCompressor *c, int nranks) {
  size_t r = (size_t)c->cfg.powerSgdRank;
  compress_powersgd_shape(c->count, &c->rows, &c->cols);
  c->work = calloc(c->rows * c->cols, sizeof(float)); /* the padding stays zero */
  c->residual = calloc(c->count, sizeof(float));
  c->p = malloc(c->rows * r * sizeof(float));
  c->q = malloc(c->cols * r * sizeof(float));
  if (!c->work || !c->residual || !c->p || !c->q)
    return TUTTI_ERR(ncclSystemError, "out of memory for a powersgd compressor of %zu elements",
                     c->count);
  uint64_t s = 0x9e3779b97f4a7c15ull; /* xorshift64: uniform in [-1, 1) */
  for (size_t i = 0; i < c->cols * r; i++) {
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

ncclResult_t compress_powersgd_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                         float scale, int rank, ncclComm_t comm) {
  size_t n = c->count, r = (size_t)c->cfg.powerSgdRank, R = (size_t)c->nranks;
  float *m = c->work;
  if (c->step < (uint32_t)c->cfg.warmupSteps) { /* dense warm-up */
    for (size_t i = 0; i < n; i++) m[i] = scale * x[i];
    c->sent +=
        compress_wire_bytes(&(tuttiCompressorConfig_t){.kind = tuttiCompressNone}, n, c->nranks);
    return ncclAllReduce(m, y, n, ncclFloat, ncclSum, comm, NULL);
  }
  for (size_t i = 0; i < n; i++) m[i] = scale * x[i] + c->residual[i];
  mat_times(m, c->rows, c->cols, c->q, r, c->p);
  TUTTI_CHECK(ncclAllReduce(c->p, c->p, c->rows * r, ncclFloat, ncclSum, comm, NULL));
  orthonormalize(c->p, c->rows, r);
  mat_t_times(m, c->rows, c->cols, c->p, r, c->q);
  TUTTI_CHECK(ncclAllReduce(c->q, c->q, c->cols * r, ncclFloat, ncclSum, comm, NULL));
  c->sent += compress_wire_bytes(&c->cfg, n, c->nranks);
  float inv_r = 1.0f / (float)R;
  for (size_t i = 0; i < n; i++) {
    const float *pi = c->p + (i / c->cols) * r, *qj = c->q + (i % c->cols) * r;
    float a = 0;
    for (size_t l = 0; l < r; l++) a += pi[l] * qj[l];
    c->residual[i] = m[i] - a * inv_r;
    y[i] = a;
  }
  return ncclSuccess;
}
