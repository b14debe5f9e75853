/* The topk path: every rank sends the k largest-magnitude elements of (scaled input + residual)
 * as (index, value) pairs to everyone with one ncclAllGather; everyone checks all R messages,
 * then adds them up in rank order into a zeroed result, so every rank computes the same bits.
 * The elements not sent stay in the residual (error feedback); those sent leave it. Three
 * passes over the buffer: residual += scale * x, the histogram, the selection (which zeroes
 * what it sends in the residual); then the result is zeroed and the pairs added.
 *
 * Warm-up (as Deep Gradient Compression's): over the first W = warmupSteps calls the fraction
 * sent falls geometrically from all to F, halving every (W + 1) / H calls, H the halvings
 * from count to k: call s sends k_s = max(k, count >> floor((s + 1) H / (W + 1))), integers
 * only, so every rank computes the same k_s. A call whose k_s is at least half the buffer is an
 * exact ncclAllReduce of scale * x + residual (pairs would take more bytes), after which the
 * residual is zero. Starting sparse from the first step would send, early on, values that
 * had waited ~1/F steps in the residual, while the model moves fastest.
 *
 * With a layout and cfg.minCompressCount, the tensors under that many elements are sent whole
 * every call (pairs like the others, so the message keeps its format) and k, k_s count only the
 * elements of the other tensors: a small tensor's bytes are a small part of the message, and
 * its elements would otherwise wait in the residual as long as the large tensors' do. With no
 * element left to select, every call is an exact ncclAllReduce.
 */
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

/* The layout's tensors under cfg.minCompressCount elements as spans (adjacent ones merged). */
static ncclResult_t topk_spans(struct tuttiCompressor *c) {
  size_t off = 0, min = (size_t)c->cfg.minCompressCount;
  c->exact_total = 0, c->nspans = 0;
  if (min == 0 || c->layout_n == 0) return ncclSuccess;
  free(c->spans); /* a setup that failed after this point may be tried again */
  c->spans = calloc((size_t)c->layout_n, sizeof(*c->spans));
  if (!c->spans) return TUTTI_ERR(ncclSystemError, "out of memory for a topk layout");
  for (int i = 0; i < c->layout_n; off += c->layout_count[i++]) {
    if (c->layout_count[i] >= min) continue;
    compress_span_t *last = c->nspans ? &c->spans[c->nspans - 1] : NULL;
    if (last && last->off + last->count == off)
      last->count += c->layout_count[i];
    else
      c->spans[c->nspans++] = (compress_span_t){.off = off, .count = c->layout_count[i]};
    c->exact_total += c->layout_count[i];
  }
  return ncclSuccess;
}

/* Halvings from count down to k (H above). */
static size_t topk_halvings(size_t count, size_t k) {
  size_t h = 0;
  while ((count >> h) > k) h++;
  return h;
}

/* k_s of call `step` (see above), among the elements outside the spans. */
static size_t topk_k_at(const struct tuttiCompressor *c, uint32_t step) {
  size_t n = c->count - c->exact_total, k = compress_topk_k(n, c->cfg.topkFraction);
  uint64_t w = (uint64_t)c->cfg.warmupSteps;
  if (step >= w) return k;
  size_t shift = (size_t)(((uint64_t)step + 1) * topk_halvings(n, k) / (w + 1));
  size_t ks = n >> shift;
  return ks > k ? ks : k;
}

ncclResult_t compress_topk_setup(struct tuttiCompressor *c, int nranks) {
  TUTTI_CHECK(topk_spans(c));
  size_t n = c->count - c->exact_total, k = compress_topk_k(n, c->cfg.topkFraction);
  if (c->cfg.warmupSteps > 0 && n / 2 > k) k = n / 2; /* the largest sparse k_s */
  c->slot = COMPRESS_HEADER_BYTES + COMPRESS_TOPK_PAIR_BYTES * (c->exact_total + k);
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
  size_t n = c->count, ks = topk_k_at(c, c->step), k = c->exact_total + ks; /* pairs sent */
  size_t nc = n - c->exact_total;                                           /* selected from */
  if (nc == 0 || (2 * ks >= nc && c->step < (uint32_t)c->cfg.warmupSteps))
    return topk_dense(c, x, y, scale, comm);
  size_t msg = COMPRESS_HEADER_BYTES + COMPRESS_TOPK_PAIR_BYTES * k; /* <= c->slot */
  add_scaled(c->residual, x, n, scale);                              /* the residual is now v */
  compress_header_t h = {.magic = COMPRESS_MAGIC,
                         .kind = (uint8_t)c->cfg.kind,
                         .phase = COMPRESS_PHASE_GATHER,
                         .block = (uint32_t)rank,
                         .step = c->step,
                         .count = k};
  compress_header_write(c->sendbuf, &h);
  compress_topk_take(c->residual, n, ks, c->spans, c->nspans, c->sendbuf + COMPRESS_HEADER_BYTES);
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
