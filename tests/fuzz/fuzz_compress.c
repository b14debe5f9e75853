/* Fuzz target: the compressed all-reduce's messages as a receiver checks and decodes them
 * (src/compress/compress_block.c for bf16, fp16 and int8; compress_topk_ar.c for topk).
 *
 * Input: [u8 kind][u16 count][u8 ranks][u8 rank][u32 step], then the received bytes. Block
 * kinds: the R scatter-phase messages of this rank's block go through stage_reduce (check,
 * decode_add, re-encode), then the R gather-phase messages through stage_finish (check,
 * decode), exactly as a call runs them between its collectives. topk: the R messages of the
 * all-gather through its check and decode_add. A malformed message must be refused with a
 * reason, never read or written out of bounds. (PowerSGD's messages are plain fp32 all-reduce
 * operands: there is nothing to parse.) The library's sources are compiled into this file so
 * that the stages run as the library runs them. */
#include "../../src/compress/compress_block.c"
#define check_message topk_check_message
#include "../../src/compress/compress_topk_ar.c"
#undef check_message

#include "fuzz.h"

typedef struct fuzz_call {
  tuttiCompressKind_t kind;
  size_t count;
  int R, rank;
  uint32_t step;
} fuzz_call_t;

static fuzz_call_t call_of_input(fuzz_in_t *in) {
  static const tuttiCompressKind_t kinds[4] = {tuttiCompressBf16, tuttiCompressFp16,
                                               tuttiCompressInt8, tuttiCompressTopk};
  fuzz_call_t f;
  f.kind = kinds[fuzz_take(in, 1) % 4];
  f.count = 1 + fuzz_take(in, 2) % 2048;
  f.R = 1 + (int)(fuzz_take(in, 1) % 4);
  f.rank = (int)(fuzz_take(in, 1) % (uint32_t)f.R);
  f.step = fuzz_take(in, 4);
  return f;
}

static void fill(uint8_t *dst, size_t len, fuzz_in_t *in) {
  size_t n = TUTTI_MIN(len, in->left);
  memcpy(dst, in->p, n);
  memset(dst + n, 0, len - n);
  in->p += n, in->left -= n;
}

static void fuzz_block(const fuzz_call_t *f, fuzz_in_t *in) {
  struct tuttiCompressor c = {.cfg = {.kind = f->kind}, .count = f->count, .step = f->step};
  if (compress_block_setup(&c, f->R) == ncclSuccess) {
    float *y = calloc(f->count, sizeof(float));
    block_call_t k = {.c = &c,
                      .codec = compress_codec_of(f->kind),
                      .y = y,
                      .scale = 1.0f,
                      .rank = f->rank,
                      .R = f->R,
                      .pieces = 1,
                      .piece_len = f->count};
    size_t bytes = (size_t)f->R * c.slot;
    fill(c.recvbuf, bytes, in); /* scatter phase: every rank's message for this rank's block */
    stage_reduce(&k, 0);
    if (!k.why) {
      fill(c.recvbuf, bytes, in); /* gather phase: every block, reduced */
      stage_finish(&k, 0);
    }
    free(y);
  }
  free(c.work), free(c.residual), free(c.residual2), free(c.acc);
  free(c.sendbuf), free(c.recvbuf);
}

static void fuzz_topk(const fuzz_call_t *f, fuzz_in_t *in) {
  struct tuttiCompressor c = {.cfg = {.kind = f->kind, .topkFraction = 0.05f},
                              .count = f->count,
                              .step = f->step,
                              .nranks = f->R};
  size_t k = compress_topk_k(f->count, c.cfg.topkFraction);
  c.slot = COMPRESS_HEADER_BYTES + COMPRESS_TOPK_PAIR_BYTES * k;
  c.recvbuf = malloc((size_t)f->R * c.slot);
  float *y = calloc(f->count, sizeof(float));
  fill(c.recvbuf, (size_t)f->R * c.slot, in);
  int ok = 1;
  for (int src = 0; src < f->R && ok; src++)
    ok = topk_check_message(&c, c.recvbuf + (size_t)src * c.slot, src, k) == NULL;
  for (int src = 0; src < f->R && ok; src++)
    compress_topk_decode_add(c.recvbuf + (size_t)src * c.slot + COMPRESS_HEADER_BYTES, k, y);
  free(y);
  free(c.recvbuf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  fuzz_in_t in = {data, size};
  fuzz_call_t f = call_of_input(&in);
  if (f.kind == tuttiCompressTopk)
    fuzz_topk(&f, &in);
  else
    fuzz_block(&f, &in);
  return 0;
}

/* ---- seeds: messages made by the library's encoders, as the sending ranks make them ---- */

static size_t seed_header(uint8_t *p, tuttiCompressKind_t kind, size_t count, int R, int rank,
                          uint32_t step) {
  static const uint8_t code[] = {[tuttiCompressBf16] = 0,
                                 [tuttiCompressFp16] = 1,
                                 [tuttiCompressInt8] = 2,
                                 [tuttiCompressTopk] = 3};
  uint16_t c16 = (uint16_t)(count - 1);
  p[0] = code[kind];
  memcpy(p + 1, &c16, 2);
  p[3] = (uint8_t)(R - 1), p[4] = (uint8_t)rank;
  memcpy(p + 5, &step, 4);
  return 9;
}

static void seed_block(fuzz_put_fn put, void *arg, tuttiCompressKind_t kind, const char *name) {
  const size_t count = 300;
  const int R = 3, rank = 1;
  const uint32_t step = 7;
  const compress_codec_t *codec = compress_codec_of(kind);
  size_t slot = compress_block_slot(codec, count, R);
  uint8_t *buf = calloc(1, 9 + 2 * R * slot);
  size_t len = seed_header(buf, kind, count, R, rank, step);
  float x[300];
  for (int phase = COMPRESS_PHASE_SCATTER; phase <= COMPRESS_PHASE_GATHER; phase++) {
    for (int b = 0; b < R; b++) { /* scatter: every rank's block `rank`; gather: block b */
      int blk = phase == COMPRESS_PHASE_SCATTER ? rank : b;
      size_t off, n;
      compress_block_range(count, R, blk, &off, &n);
      for (size_t i = 0; i < n; i++) x[i] = (float)((int)(i * 7 + b) % 19 - 9) * 0.25f;
      compress_header_t h = {.magic = COMPRESS_MAGIC,
                             .kind = (uint8_t)kind,
                             .phase = (uint8_t)phase,
                             .block = (uint32_t)blk,
                             .step = step,
                             .count = n};
      uint8_t *msg = buf + len + (size_t)b * slot, payload[1024] __attribute__((aligned(8)));
      compress_header_write(msg, &h);
      codec->encode(x, n, 1.0f, payload); /* the library's slots are 8-byte aligned; msg is not */
      memcpy(msg + COMPRESS_HEADER_BYTES, payload, codec->payload_bytes(n));
    }
    len += (size_t)R * slot;
  }
  put(arg, name, buf, len);
  free(buf);
}

static void seed_topk(fuzz_put_fn put, void *arg) {
  const size_t count = 400;
  const int R = 2;
  size_t k = compress_topk_k(count, 0.05f), slot = COMPRESS_HEADER_BYTES + 8 * k;
  uint8_t *buf = calloc(1, 9 + R * slot);
  size_t len = seed_header(buf, tuttiCompressTopk, count, R, 0, 3);
  for (int src = 0; src < R; src++) {
    float v[400];
    for (size_t i = 0; i < count; i++) v[i] = (float)((int)(i * 13 + src) % 31 - 15);
    compress_header_t h = {.magic = COMPRESS_MAGIC,
                           .kind = tuttiCompressTopk,
                           .phase = COMPRESS_PHASE_GATHER,
                           .block = (uint32_t)src,
                           .step = 3,
                           .count = k};
    compress_header_write(buf + len, &h);
    compress_topk_take(v, count, k, NULL, 0, buf + len + COMPRESS_HEADER_BYTES);
    len += slot;
  }
  put(arg, "topk", buf, len);
  free(buf);
}

void fuzz_seeds(fuzz_put_fn put, void *arg) {
  seed_block(put, arg, tuttiCompressBf16, "bf16");
  seed_block(put, arg, tuttiCompressFp16, "fp16");
  seed_block(put, arg, tuttiCompressInt8, "int8");
  seed_topk(put, arg);
}
