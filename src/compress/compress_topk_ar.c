/* The topk path: every rank sends the k largest-magnitude elements of (scaled input + residual)
 * as (index, value) pairs to everyone with one ncclAllGather; everyone checks all R messages,
 * then adds them up in rank order into a zeroed result, so every rank computes the same bits.
 * The elements not sent stay in the residual (error feedback); those sent leave it. Three
 * passes over the buffer: residual += scale * x, the histogram, the selection (which zeroes
 * what it sends in the residual); then the result is zeroed and the pairs added. */
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

ncclResult_t compress_topk_setup(struct tuttiCompressor *c, int nranks) {
  size_t k = compress_topk_k(c->count, c->cfg.topkFraction);
  c->slot = COMPRESS_HEADER_BYTES + COMPRESS_TOPK_PAIR_BYTES * k;
  c->residual = calloc(c->count, sizeof(float));
  c->sendbuf = malloc(c->slot);
  c->recvbuf = malloc((size_t)nranks * c->slot);
  if (!c->residual || !c->sendbuf || !c->recvbuf)
    return TUTTI_ERR(ncclSystemError, "out of memory for a topk compressor of %zu elements",
                     c->count);
  return ncclSuccess;
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

ncclResult_t compress_topk_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                     float scale, int rank, ncclComm_t comm) {
  size_t n = c->count, k = compress_topk_k(n, c->cfg.topkFraction);
  add_scaled(c->residual, x, n, scale); /* the residual is now v */
  compress_header_t h = {.magic = COMPRESS_MAGIC,
                         .kind = (uint8_t)c->cfg.kind,
                         .phase = COMPRESS_PHASE_GATHER,
                         .block = (uint32_t)rank,
                         .step = c->step,
                         .count = k};
  compress_header_write(c->sendbuf, &h);
  compress_topk_take(c->residual, n, k, c->sendbuf + COMPRESS_HEADER_BYTES);
  TUTTI_CHECK(ncclAllGather(c->sendbuf, c->recvbuf, c->slot, ncclUint8, comm, NULL));
  c->sent += compress_wire_bytes(&c->cfg, n, c->nranks);
  for (int src = 0; src < c->nranks; src++) {
    const char *why = check_message(c, c->recvbuf + (size_t)src * c->slot, src, k);
    if (why)
      return TUTTI_ERR(ncclRemoteError,
                       "compressed all-reduce (topk): malformed message from "
                       "rank %d: %s",
                       src, why);
  }
  memset(y, 0, n * sizeof(float));
  for (int src = 0; src < c->nranks; src++)
    compress_topk_decode_add(c->recvbuf + (size_t)src * c->slot + COMPRESS_HEADER_BYTES, k, y);
  return ncclSuccess;
}
