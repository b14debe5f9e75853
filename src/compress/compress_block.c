/* The block path of the compressed all-reduce (bf16, fp16, int8): an all-to-all of encoded
 * blocks, fp32 accumulation of its own block by each rank in rank order, an all-gather of the
 * re-encoded reduced blocks (the picture is in compress.h). Error feedback (int8) happens at
 * both encodings: each rank keeps what its input lost (residual, count floats) and what its
 * reduced block lost (residual2), and adds them before the next encoding. */
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

ncclResult_t compress_block_setup(struct tuttiCompressor *c, int nranks) {
  const compress_codec_t *codec = compress_codec_of(c->cfg.kind);
  size_t own = c->count / (size_t)nranks + 1;
  c->slot = compress_block_slot(codec, c->count, nranks);
  c->work = malloc(c->count * sizeof(float));
  c->residual = calloc(c->count, sizeof(float));
  c->residual2 = calloc(own, sizeof(float));
  c->acc = malloc(own * sizeof(float));
  c->sendbuf = malloc((size_t)nranks * c->slot);
  c->recvbuf = malloc((size_t)nranks * c->slot);
  if (!c->work || !c->residual || !c->residual2 || !c->acc || !c->sendbuf || !c->recvbuf)
    return TUTTI_ERR(ncclSystemError, "out of memory for a %s compressor of %zu elements",
                     codec->name, c->count);
  return ncclSuccess;
}

/* v = scale * x + residual, encoded into out; residual = v - decode(out) (error feedback). */
static void encode_with_feedback(const compress_codec_t *codec, const float *x, size_t n,
                                 float scale, float *v, float *residual, uint8_t *out) {
  if (!codec->error_feedback) {
    if (scale == 1.0f) {
      codec->encode(x, n, out);
      return;
    }
    for (size_t i = 0; i < n; i++) v[i] = scale * x[i];
    codec->encode(v, n, out);
    return;
  }
  for (size_t i = 0; i < n; i++) v[i] = scale * x[i] + residual[i];
  codec->encode(v, n, out);
  codec->decode(out, n, residual);
  for (size_t i = 0; i < n; i++) residual[i] = v[i] - residual[i];
}

static void write_header(uint8_t *out, const struct tuttiCompressor *c, int phase, int block,
                         size_t n) {
  compress_header_t h = {.magic = COMPRESS_MAGIC,
                         .kind = (uint8_t)c->cfg.kind,
                         .phase = phase,
                         .block = (uint32_t)block,
                         .step = c->step,
                         .count = n};
  compress_header_write(out, &h);
}

/* Checks the message `from` sent; NULL if it is well formed. */
static const char *check_message(const struct tuttiCompressor *c, const uint8_t *msg, int phase,
                                 int block, size_t n) {
  const compress_codec_t *codec = compress_codec_of(c->cfg.kind);
  compress_header_t got, want = {.magic = COMPRESS_MAGIC,
                                 .kind = (uint8_t)c->cfg.kind,
                                 .phase = phase,
                                 .block = (uint32_t)block,
                                 .step = c->step,
                                 .count = n};
  compress_header_read(msg, &got);
  const char *why = compress_header_check(&got, &want);
  return why ? why : codec->check(msg + COMPRESS_HEADER_BYTES, n);
}

/* Phase 1 on receipt: this rank's block from every rank, in rank order, summed in fp32; then
 * the reduced block encoded into `out`. On a bad message, `out` is an ERROR message naming the
 * sender, *bad its rank and the reason is returned (the error is raised after the all-gather,
 * which every rank must still join). */
static const char *reduce_own_block(struct tuttiCompressor *c, int rank, uint8_t *out, int *bad) {
  const compress_codec_t *codec = compress_codec_of(c->cfg.kind);
  size_t off, n;
  compress_block_range(c->count, c->nranks, rank, &off, &n);
  for (int src = 0; src < c->nranks; src++) {
    const char *why =
        check_message(c, c->recvbuf + (size_t)src * c->slot, COMPRESS_PHASE_SCATTER, rank, n);
    if (why) {
      compress_error_message(out, (uint8_t)c->cfg.kind, src, ncclRemoteError);
      *bad = src;
      return why;
    }
  }
  memset(c->acc, 0, n * sizeof(float));
  for (int src = 0; src < c->nranks; src++)
    codec->decode_add(c->recvbuf + (size_t)src * c->slot + COMPRESS_HEADER_BYTES, n, c->acc);
  write_header(out, c, COMPRESS_PHASE_GATHER, rank, n);
  encode_with_feedback(codec, c->acc, n, 1.0f, c->acc, c->residual2, out + COMPRESS_HEADER_BYTES);
  return NULL;
}

/* Phase 2 on receipt: every reduced block checked, then decoded into y. */
static ncclResult_t decode_gathered(struct tuttiCompressor *c, float *y) {
  const compress_codec_t *codec = compress_codec_of(c->cfg.kind);
  TUTTI_CHECK(compress_gathered_errors(c->recvbuf, c->slot, c->nranks));
  for (int b = 0; b < c->nranks; b++) {
    size_t off, n;
    compress_block_range(c->count, c->nranks, b, &off, &n);
    const char *why =
        check_message(c, c->recvbuf + (size_t)b * c->slot, COMPRESS_PHASE_GATHER, b, n);
    if (why)
      return TUTTI_ERR(ncclRemoteError,
                       "compressed all-reduce (%s): malformed message from rank %d: %s",
                       codec->name, b, why);
  }
  for (int b = 0; b < c->nranks; b++) {
    size_t off, n;
    compress_block_range(c->count, c->nranks, b, &off, &n);
    codec->decode(c->recvbuf + (size_t)b * c->slot + COMPRESS_HEADER_BYTES, n, y + off);
  }
  return ncclSuccess;
}

ncclResult_t compress_block_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                      float scale, int rank, ncclComm_t comm) {
  const compress_codec_t *codec = compress_codec_of(c->cfg.kind);
  int R = c->nranks, bad = -1;
  for (int b = 0; b < R; b++) {
    size_t off, n;
    compress_block_range(c->count, R, b, &off, &n);
    uint8_t *msg = c->sendbuf + (size_t)b * c->slot;
    write_header(msg, c, COMPRESS_PHASE_SCATTER, b, n);
    encode_with_feedback(codec, x + off, n, scale, c->work + off, c->residual + off,
                         msg + COMPRESS_HEADER_BYTES);
  }
  TUTTI_CHECK(ncclAlltoAll(c->sendbuf, c->recvbuf, c->slot, ncclUint8, comm, NULL));
  uint8_t *own = c->sendbuf + (size_t)rank * c->slot; /* sent already: reused for phase 2 */
  const char *why = reduce_own_block(c, rank, own, &bad);
  TUTTI_CHECK(ncclAllGather(own, c->recvbuf, c->slot, ncclUint8, comm, NULL));
  c->sent += compress_wire_bytes(&c->cfg, c->count, R);
  if (why)
    return TUTTI_ERR(ncclRemoteError,
                     "compressed all-reduce (%s): malformed message from rank %d: %s", codec->name,
                     bad, why);
  return decode_gathered(c, y);
}
