/* The topk path: every rank sends the k largest-magnitude elements of (scaled input + residual)
 * as (index, value) pairs to everyone with one ncclAllGather; everyone checks all R messages,
 * then adds them up in rank order into a zeroed result, so every rank computes the same bits.
 * The elements not sent stay in the residual (error feedback); those sent leave it. Three
 * passes over the buffer: residual += scale * x, the histogram, the selection (which zeroes
 * what it sends in the residual); then the result is zeroed and the pairs added.
 *
 * Per tensor, when the compressor has a layout (tuttiCompressorSetLayout), as Deep Gradient
 * Compression and its implementations select: each matrix sends its own k_i = max(1, ceil(F
 * n_i)) largest elements, so a layer whose gradients are small next to another's still sends
 * its share; 1-D tensors (biases) are sent whole. The pairs of tensor i follow those of tensor
 * i - 1, so indices stay strictly increasing; k = sum k_i, the same on every rank (every rank
 * gives the same layout). Without a layout the whole buffer is one selection.
 *
 * Warm-up (as Deep Gradient Compression's): over the first W = warmupSteps calls the fraction
 * sent falls geometrically from all to F, halving every (W + 1) / H calls, H the halvings
 * from count to k: call s sends max(k_i, n_i >> floor((s + 1) H / (W + 1))) of each tensor,
 * integers only, so every rank computes the same k_s. A call whose k_s is at least half the
 * buffer is an exact ncclAllReduce of scale * x + residual (pairs would take more bytes), after
 * which the residual is zero. Starting sparse from the first step would send, early on, values
 * that had waited ~1/F steps in the residual, while the model moves fastest.
 */
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

/* Halvings from count down to k (H above). */
static size_t topk_halvings(size_t count, size_t k) {
  size_t h = 0;
  while ((count >> h) > k) h++;
  return h;
}

/* Tensor i of the selection: n_i elements, 1-D (sent whole) or not; the whole buffer without a
 * layout. */
static int topk_ntensors(const struct tuttiCompressor *c) {
  return c->layout_n ? c->layout_n : 1;
}

static size_t topk_tensor_count(const struct tuttiCompressor *c, int i, int *whole) {
  if (!c->layout_n) return *whole = 0, c->count;
  *whole = c->layout_row[i] >= c->layout_count[i]; /* one row: a 1-D tensor */
  return c->layout_count[i];
}

/* Pairs tensor i sends at call `step` (k_s of the tensor, see above). */
static size_t topk_tensor_k(const struct tuttiCompressor *c, int i, uint32_t step) {
  int whole;
  size_t n = topk_tensor_count(c, i, &whole), k = compress_topk_k(n, c->cfg.topkFraction);
  uint64_t w = (uint64_t)c->cfg.warmupSteps;
  if (whole) return n;
  if (step >= w) return k;
  size_t all_k = compress_topk_k(c->count, c->cfg.topkFraction);
  size_t shift = (size_t)(((uint64_t)step + 1) * topk_halvings(c->count, all_k) / (w + 1));
  size_t ks = n >> shift;
  return ks > k ? ks : k;
}

/* Pairs the whole buffer sends at call `step`. */
static size_t topk_k_at(const struct tuttiCompressor *c, uint32_t step) {
  size_t k = 0;
  for (int i = 0; i < topk_ntensors(c); i++) k += topk_tensor_k(c, i, step);
  return k;
}

ncclResult_t compress_topk_setup(struct tuttiCompressor *c, int nranks) {
  size_t k = topk_k_at(c, (uint32_t)c->cfg.warmupSteps);            /* after the warm-up */
  if (c->cfg.warmupSteps > 0 && c->count / 2 > k) k = c->count / 2; /* the largest sparse k_s */
  c->slot = COMPRESS_HEADER_BYTES + COMPRESS_TOPK_PAIR_BYTES * k;
  c->residual = calloc(c->count, sizeof(float));
  c->sendbuf = malloc(c->slot);
  c->recvbuf = malloc((size_t)nranks * c->slot);
  if (!c->residual || !c->sendbuf || !c->recvbuf)
    return TUTTI_ERR(ncclSystemError, "out of memory for a topk compressor of %zu elements",
                     c->count);
  return ncclSuccess;
}

/* Takes every tensor's pairs out of the residual into out, in buffer order. */
static void topk_select(struct tuttiCompressor *c, uint8_t *out) {
  size_t off = 0, pos = 0;
  for (int i = 0; i < topk_ntensors(c); i++) {
    int whole;
    size_t n = topk_tensor_count(c, i, &whole), k = topk_tensor_k(c, i, c->step);
    compress_topk_take_at(c->residual + off, n, k, off, out + COMPRESS_TOPK_PAIR_BYTES * pos);
    off += n, pos += k;
  }
}

COMPRESS_SIMD static void add_scaled(float *v, const float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) v[i] = scale * x[i] + v[i];
}

static const char *check_message(const struct tuttiCompressor *c, const uint8_t *msg, int src,
                                 size_t k) {
  compress_header_t got, want = {.magic = COMPRESS_MAGIC,
                                 .kind = (uint8_t)c->cfg.kind,
                                 .phase = COMPRESS_PHASE_GATHER,
                                 .block = (uint32_t)src,
                                 .step = c->step,
                                 .count = k};
  compress_header_read(msg, &got);
  const char *why = compress_header_check(&got, &want);
  return why ? why : compress_topk_check(msg + COMPRESS_HEADER_BYTES, k, c->count);
}

/* A warm-up call with k_s >= count / 2: the exact sum of scale * x + residual. */
static ncclResult_t topk_dense(struct tuttiCompressor *c, const float *x, float *y, float scale,
                               ncclComm_t comm) {
  size_t n = c->count;
  add_scaled(c->residual, x, n, scale);
  c->sent += compress_ring_allreduce_bytes(n, c->nranks);
  TUTTI_CHECK(ncclAllReduce(c->residual, y, n, ncclFloat, ncclSum, comm, NULL));
  memset(c->residual, 0, n * sizeof(float));
  return ncclSuccess;
}

ncclResult_t compress_topk_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                     float scale, int rank, ncclComm_t comm) {
  size_t n = c->count, k = topk_k_at(c, c->step);
  if (2 * k >= n && c->step < (uint32_t)c->cfg.warmupSteps) return topk_dense(c, x, y, scale, comm);
  size_t msg = COMPRESS_HEADER_BYTES + COMPRESS_TOPK_PAIR_BYTES * k; /* <= c->slot */
  add_scaled(c->residual, x, n, scale);                              /* the residual is now v */
  compress_header_t h = {.magic = COMPRESS_MAGIC,
                         .kind = (uint8_t)c->cfg.kind,
                         .phase = COMPRESS_PHASE_GATHER,
                         .block = (uint32_t)rank,
                         .step = c->step,
                         .count = k};
  compress_header_write(c->sendbuf, &h);
  topk_select(c, c->sendbuf + COMPRESS_HEADER_BYTES);
  TUTTI_CHECK(ncclAllGather(c->sendbuf, c->recvbuf, msg, ncclUint8, comm, NULL));
  c->sent += (size_t)(c->nranks - 1) * msg; /* a ring all-gather: R - 1 messages out */
  for (int src = 0; src < c->nranks; src++) {
    const char *why = check_message(c, c->recvbuf + (size_t)src * msg, src, k);
    if (why)
      return TUTTI_ERR(ncclRemoteError,
                       "compressed all-reduce (topk): malformed message from "
                       "rank %d: %s",
                       src, why);
  }
  memset(y, 0, n * sizeof(float));
  for (int src = 0; src < c->nranks; src++)
    compress_topk_decode_add(c->recvbuf + (size_t)src * msg + COMPRESS_HEADER_BYTES, k, y);
  return ncclSuccess;
}
