/* The block path of the compressed all-reduce (bf16, fp16, int8), pipelined by pieces (the
 * picture is in compress.h). Per piece: an all-to-all of encoded blocks, fp32 accumulation of
 * its own block by each rank in rank order, an all-gather of the re-encoded reduced blocks.
 * Error feedback (int8) happens at both encodings: each rank keeps what its input lost
 * (residual) and what its reduced blocks lost (residual2), both indexed like the buffer.
 *
 * Threads: the caller encodes and decodes; with more than one piece, a thread started for the
 * call runs the collectives (the communicator is used by that thread only until it is joined).
 * The two hand pieces over through counters under one mutex; a failed collective stops the
 * network thread and wakes the caller, which then stops too.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

typedef struct block_call {
  struct tuttiCompressor *c;
  const compress_codec_t *codec;
  const float *x;
  float *y;
  float scale;
  int rank, R;
  ncclComm_t comm;
  size_t pieces, piece_len; /* piece_len: elements of every piece but the last */
  pthread_mutex_t lock;
  pthread_cond_t changed;
  size_t encoded, reduced, scattered, gathered; /* pieces done by each stage */
  ncclResult_t net_error;
  char net_msg[256];
  const char *why; /* the first malformed message this rank found */
  int bad_rank, reporter;
} block_call_t;

ncclResult_t compress_block_setup(struct tuttiCompressor *c, int nranks) {
  const compress_codec_t *codec = compress_codec_of(c->cfg.kind);
  size_t pieces = compress_block_pieces(c->count);
  size_t piece = c->count < COMPRESS_PIECE_ELEMS ? c->count : COMPRESS_PIECE_ELEMS;
  c->slot = compress_block_slot(codec, piece, nranks);
  c->work = malloc(c->count * sizeof(float));
  c->residual = calloc(c->count, sizeof(float));
  c->residual2 = calloc(c->count, sizeof(float));
  c->acc = malloc((piece / (size_t)nranks + 1) * sizeof(float));
  c->sendbuf = malloc(pieces * (size_t)nranks * c->slot);
  c->recvbuf = malloc(pieces * (size_t)nranks * c->slot);
  if (!c->work || !c->residual || !c->residual2 || !c->acc || !c->sendbuf || !c->recvbuf)
    return TUTTI_ERR(ncclSystemError, "out of memory for a %s compressor of %zu elements",
                     codec->name, c->count);
  return ncclSuccess;
}

/* ---- pieces and messages ---- */

static size_t piece_count(const block_call_t *k, size_t p) {
  return p + 1 < k->pieces ? k->piece_len : k->c->count - p * k->piece_len;
}

/* Element range of block b of piece p, in the whole buffer. */
static void block_of(const block_call_t *k, size_t p, int b, size_t *off, size_t *n) {
  compress_block_range(piece_count(k, p), k->R, b, off, n);
  *off += p * k->piece_len;
}

/* Piece p's messages lie back to back, slot_of(p) bytes each (the last piece's are shorter),
 * from p x R x c->slot on. */
static size_t slot_of(const block_call_t *k, size_t p) {
  return compress_block_slot(k->codec, piece_count(k, p), k->R);
}

static uint8_t *send_slot(const block_call_t *k, size_t p, int b) {
  return k->c->sendbuf + p * (size_t)k->R * k->c->slot + (size_t)b * slot_of(k, p);
}

static uint8_t *recv_slot(const block_call_t *k, size_t p, int b) {
  return k->c->recvbuf + p * (size_t)k->R * k->c->slot + (size_t)b * slot_of(k, p);
}

static compress_header_t header_for(const block_call_t *k, int phase, size_t p, int b, size_t n) {
  return (compress_header_t){.magic = COMPRESS_MAGIC,
                             .kind = (uint8_t)k->c->cfg.kind,
                             .phase = (uint8_t)phase,
                             .block = (uint32_t)(p * k->R + b),
                             .step = k->c->step,
                             .count = n};
}

/* NULL if the message is well formed, else the reason. */
static const char *check_message(const block_call_t *k, const uint8_t *msg, int phase, size_t p,
                                 int b, size_t n) {
  compress_header_t got, want = header_for(k, phase, p, b, n);
  compress_header_read(msg, &got);
  const char *why = compress_header_check(&got, &want);
  return why ? why : k->codec->check(msg + COMPRESS_HEADER_BYTES, n);
}

/* v = scale * x + residual, encoded into out; residual = v - decode(out) (error feedback). */
static void encode_with_feedback(const compress_codec_t *codec, const float *x, size_t n,
                                 float scale, float *v, float *residual, uint8_t *out) {
  if (!codec->error_feedback) {
    codec->encode(x, n, scale, out);
    return;
  }
  for (size_t i = 0; i < n; i++) v[i] = scale * x[i] + residual[i];
  codec->encode(v, n, 1.0f, out);
  codec->decode(out, n, residual);
  for (size_t i = 0; i < n; i++) residual[i] = v[i] - residual[i];
}

/* ---- the three compute stages ---- */

/* E: piece p's R blocks, encoded into its send slots. */
static void stage_encode(block_call_t *k, size_t p) {
  struct tuttiCompressor *c = k->c;
  for (int b = 0; b < k->R; b++) {
    size_t off, n;
    block_of(k, p, b, &off, &n);
    compress_header_t h = header_for(k, COMPRESS_PHASE_SCATTER, p, b, n);
    compress_header_write(send_slot(k, p, b), &h);
    encode_with_feedback(k->codec, k->x + off, n, k->scale, c->work + off, c->residual + off,
                         send_slot(k, p, b) + COMPRESS_HEADER_BYTES);
  }
}

/* D: this rank's block of piece p from every rank, checked, summed in fp32 in rank order, and
 * encoded into this rank's send slot (sent already, reused) for the all-gather. A bad message
 * turns that slot into an ERROR message naming its sender. */
static void stage_reduce(block_call_t *k, size_t p) {
  struct tuttiCompressor *c = k->c;
  size_t off, n;
  uint8_t *out = send_slot(k, p, k->rank);
  block_of(k, p, k->rank, &off, &n);
  for (int src = 0; src < k->R; src++) {
    const char *why = check_message(k, recv_slot(k, p, src), COMPRESS_PHASE_SCATTER, p, k->rank, n);
    if (why) {
      compress_error_message(out, (uint8_t)c->cfg.kind, src, ncclRemoteError);
      if (!k->why) k->why = why, k->bad_rank = src, k->reporter = k->rank;
      return;
    }
  }
  memset(c->acc, 0, n * sizeof(float));
  for (int src = 0; src < k->R; src++)
    k->codec->decode_add(recv_slot(k, p, src) + COMPRESS_HEADER_BYTES, n, c->acc);
  compress_header_t h = header_for(k, COMPRESS_PHASE_GATHER, p, k->rank, n);
  compress_header_write(out, &h);
  encode_with_feedback(k->codec, c->acc, n, 1.0f, c->acc, c->residual2 + off,
                       out + COMPRESS_HEADER_BYTES);
}

/* F: the R reduced blocks of piece p, checked, then decoded into y; nothing more is written
 * once any message was bad. */
static void stage_finish(block_call_t *k, size_t p) {
  for (int b = 0; b < k->R && !k->why; b++) {
    compress_header_t h;
    compress_header_read(recv_slot(k, p, b), &h);
    if (h.magic == COMPRESS_MAGIC && h.phase == COMPRESS_PHASE_ERROR) {
      k->why = "", k->bad_rank = (int)h.block, k->reporter = b;
      return;
    }
    size_t off, n;
    block_of(k, p, b, &off, &n);
    const char *why = check_message(k, recv_slot(k, p, b), COMPRESS_PHASE_GATHER, p, b, n);
    if (why) k->why = why, k->bad_rank = b, k->reporter = k->rank;
  }
  for (int b = 0; b < k->R && !k->why; b++) {
    size_t off, n;
    block_of(k, p, b, &off, &n);
    k->codec->decode(recv_slot(k, p, b) + COMPRESS_HEADER_BYTES, n, k->y + off);
  }
}

/* ---- the network stages and the hand-over ---- */

static ncclResult_t net_scatter(block_call_t *k, size_t p) {
  return ncclAlltoAll(send_slot(k, p, 0), recv_slot(k, p, 0), slot_of(k, p), ncclUint8, k->comm,
                      NULL);
}

static ncclResult_t net_gather(block_call_t *k, size_t p) {
  return ncclAllGather(send_slot(k, p, k->rank), recv_slot(k, p, 0), slot_of(k, p), ncclUint8,
                       k->comm, NULL);
}

/* Waits until *counter >= want or the network failed; returns 0 on failure. */
static int wait_for(block_call_t *k, const size_t *counter, size_t want) {
  pthread_mutex_lock(&k->lock);
  while (*counter < want && k->net_error == ncclSuccess) pthread_cond_wait(&k->changed, &k->lock);
  int ok = k->net_error == ncclSuccess;
  pthread_mutex_unlock(&k->lock);
  return ok;
}

static void advance(block_call_t *k, size_t *counter) {
  pthread_mutex_lock(&k->lock);
  (*counter)++;
  pthread_cond_broadcast(&k->changed);
  pthread_mutex_unlock(&k->lock);
}

static void net_failed(block_call_t *k, ncclResult_t res) {
  pthread_mutex_lock(&k->lock);
  k->net_error = res;
  snprintf(k->net_msg, sizeof(k->net_msg), "%s", ncclGetLastError(k->comm));
  pthread_cond_broadcast(&k->changed);
  pthread_mutex_unlock(&k->lock);
}

/* The network thread: step t runs A(t) once E(t) is done, then G(t-1) once D(t-1) is. */
static void *net_main(void *arg) {
  block_call_t *k = arg;
  for (size_t t = 0; t <= k->pieces; t++) {
    ncclResult_t res = ncclSuccess;
    if (t < k->pieces) {
      if (!wait_for(k, &k->encoded, t + 1) || (res = net_scatter(k, t)) != ncclSuccess) break;
      advance(k, &k->scattered);
    }
    if (t >= 1) {
      if (!wait_for(k, &k->reduced, t) || (res = net_gather(k, t - 1)) != ncclSuccess) break;
      advance(k, &k->gathered);
    }
    if (res != ncclSuccess) break;
  }
  if (k->scattered < k->pieces || k->gathered < k->pieces)
    if (k->net_error == ncclSuccess) net_failed(k, ncclRemoteError);
  return NULL;
}

/* The caller's side: step t runs E(t), D(t-1) once A(t-1) is done, F(t-2) once G(t-2) is. */
static void compute_main(block_call_t *k) {
  for (size_t t = 0; t <= k->pieces + 1; t++) {
    if (t < k->pieces) {
      stage_encode(k, t);
      advance(k, &k->encoded);
    }
    if (t >= 1 && t <= k->pieces) {
      if (!wait_for(k, &k->scattered, t)) return;
      stage_reduce(k, t - 1);
      advance(k, &k->reduced);
    }
    if (t >= 2) {
      if (!wait_for(k, &k->gathered, t - 1)) return;
      stage_finish(k, t - 2);
    }
  }
}

/* One piece: the same stages in order on the caller's thread. */
static ncclResult_t run_inline(block_call_t *k) {
  stage_encode(k, 0);
  TUTTI_CHECK(net_scatter(k, 0));
  stage_reduce(k, 0);
  TUTTI_CHECK(net_gather(k, 0));
  stage_finish(k, 0);
  return ncclSuccess;
}

static ncclResult_t run_pipelined(block_call_t *k) {
  pthread_t net;
  pthread_mutex_init(&k->lock, NULL);
  pthread_cond_init(&k->changed, NULL);
  if (pthread_create(&net, NULL, net_main, k) != 0) {
    pthread_mutex_destroy(&k->lock), pthread_cond_destroy(&k->changed);
    return TUTTI_ERR(ncclSystemError, "cannot start the compressed all-reduce's thread");
  }
  compute_main(k);
  pthread_join(net, NULL);
  pthread_mutex_destroy(&k->lock), pthread_cond_destroy(&k->changed);
  if (k->net_error != ncclSuccess)
    return TUTTI_ERR(k->net_error, "compressed all-reduce: %s", k->net_msg);
  return ncclSuccess;
}

ncclResult_t compress_block_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                      float scale, int rank, ncclComm_t comm) {
  block_call_t k = {.c = c,
                    .codec = compress_codec_of(c->cfg.kind),
                    .x = x,
                    .y = y,
                    .scale = scale,
                    .rank = rank,
                    .R = c->nranks,
                    .comm = comm,
                    .pieces = compress_block_pieces(c->count),
                    .piece_len = COMPRESS_PIECE_ELEMS};
  TUTTI_CHECK(k.pieces == 1 ? run_inline(&k) : run_pipelined(&k));
  c->sent += compress_wire_bytes(&c->cfg, c->count, c->nranks);
  if (!k.why) return ncclSuccess;
  if (k.reporter == rank)
    return TUTTI_ERR(ncclRemoteError,
                     "compressed all-reduce (%s): malformed message from rank %d: %s",
                     k.codec->name, k.bad_rank, k.why);
  return TUTTI_ERR(ncclRemoteError,
                   "compressed all-reduce (%s): rank %d rejected the message rank %d sent it "
                   "(its log says why)",
                   k.codec->name, k.reporter, k.bad_rank);
}
