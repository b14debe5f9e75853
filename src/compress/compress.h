/* Gradient compression: codecs, wire messages and the compressed all-reduces built on the
 * library's public collectives (docs/compression.md has the wire formats and the bounds).
 *
 * Block path (bf16, fp16, int8), the picture for R ranks and a buffer cut into R blocks:
 *
 *   1. every rank encodes its R blocks (x / R for ncclAvg, plus the residual) into R messages
 *      of S bytes each, and ncclAlltoAll sends message b to rank b    (reduce-scatter phase)
 *   2. rank b checks and decodes the R messages of its block in rank order, accumulating in
 *      fp32, then encodes the reduced block once more (plus its own residual)
 *   3. ncclAllGather gives every rank the R reduced messages; everyone checks and decodes the
 *      same bytes, so the result is the same bits on every rank        (all-gather phase)
 *
 *   bytes sent per rank: 2 (R - 1) S, S = header + payload of ceil(count / R) elements — a
 *   ring all-reduce's 2 (R - 1) count / R elements at the codec's bytes per element.
 *
 *   Pipelined by pieces of COMPRESS_PIECE_ELEMS: the caller's thread encodes and decodes, a
 *   thread of the call runs the collectives, one piece behind (compress_block.c):
 *     compute: E0 | E1 D0 | E2 D1 F0 | E3 D2 F1 | ...      E encode, D reduce own block,
 *     network:    A0 | A1 G0 | A2 G1 | A3 G2 | ...          F decode; A all-to-all, G gather
 *
 * topk: each rank sends its k largest-magnitude (index, value) pairs to everyone with one
 * ncclAllGather (pairs from different ranks land on different indices, so they cannot be
 * reduced on the way); everyone adds them up in rank order. PowerSGD: two fp32 ncclAllReduce
 * of the factors P (rows x r) and Q (cols x r).
 *
 * A check that fails on receipt does not end the call at once: the rank that found it sends
 * an error message in the all-gather phase instead of its block, so every rank returns the same
 * error naming the rank that sent the bad message, and no rank waits for one that left.
 */
#ifndef TUTTI_COMPRESS_H_
#define TUTTI_COMPRESS_H_

#include <stddef.h>
#include <stdint.h>

#include "algos/cost.h"
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the tuttiCompressor* API (include/tutti.h) for export; unlike core.h's API (the nccl*
 * names, weak as NCCL's), these are strong symbols: nothing else defines them. */
#define COMPRESS_API __attribute__((visibility("default")))

/* ---- wire header, 24 bytes, little-endian, in front of every message ---- */
#define COMPRESS_MAGIC 0x31435454u /* "TTC1" */
#define COMPRESS_HEADER_BYTES 24
enum { COMPRESS_PHASE_SCATTER = 1, COMPRESS_PHASE_GATHER = 2, COMPRESS_PHASE_ERROR = 3 };

typedef struct compress_header {
  uint32_t magic;
  uint8_t kind;      /* tuttiCompressKind_t */
  uint8_t phase;     /* COMPRESS_PHASE_* */
  uint16_t reserved; /* 0 */
  uint32_t block;    /* piece x nranks + the owning rank; ERROR: the rank that sent a bad one */
  uint32_t step;     /* the compressor's call number, modulo 2^32 */
  uint64_t count;    /* elements in the payload (topk: pairs) */
} compress_header_t;

void compress_header_write(uint8_t *out, const compress_header_t *h);
void compress_header_read(const uint8_t *in, compress_header_t *h);
/* Checks a received header against what was expected; NULL if it matches, else the reason. */
const char *compress_header_check(const compress_header_t *got, const compress_header_t *want);

/* Element-wise loops are compiled for AVX-512, AVX2 and baseline x86-64, the best picked at load
 * time (GCC function multi-versioning); these files are built with -ffp-contract=off, so every
 * clone rounds the same way and ranks on different CPUs still agree bit for bit. Not under TSan:
 * the clones' resolvers run while the loader relocates libtutti.so, before TSan's runtime is
 * ready, and its instrumentation in them crashed every program at load. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define COMPRESS_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define COMPRESS_SIMD
#endif

/* ---- block codecs: per-kind function tables ---- */
typedef struct compress_codec {
  const char *name;
  tuttiCompressKind_t kind;
  int error_feedback; /* the sender keeps what encoding lost and adds it next time */
  size_t (*payload_bytes)(size_t count);
  /* out: payload_bytes(count) bytes encoding scale * x[0..count) (the product rounded to fp32
   * first, so encode(x, s) == encode(s * x, 1)) */
  void (*encode)(const float *x, size_t count, float scale, uint8_t *out);
  /* NULL if the payload is well formed, else the reason (static text) */
  const char *(*check)(const uint8_t *in, size_t count);
  /* out[i] = decoded value i; acc[i] += decoded value i (a checked payload only) */
  void (*decode)(const uint8_t *in, size_t count, float *out);
  void (*decode_add)(const uint8_t *in, size_t count, float *acc);
} compress_codec_t;

extern const compress_codec_t compress_codec_bf16;
extern const compress_codec_t compress_codec_fp16;
extern const compress_codec_t compress_codec_int8;
/* The codec of a block kind, NULL for the others. */
const compress_codec_t *compress_codec_of(tuttiCompressKind_t kind);

#define COMPRESS_INT8_BLOCK 256 /* elements per int8 scale */

/* ---- block partition ----
 * The buffer is cut into pieces of COMPRESS_PIECE_ELEMS elements (the last one shorter), each
 * all-reduced on its own so that encoding and decoding one piece overlap the transfers of
 * others; a piece is cut into nranks blocks, block b owned by rank b. */
#define COMPRESS_PIECE_ELEMS ((size_t)1 << 20) /* 4 MiB of fp32 */
size_t compress_block_pieces(size_t count);
void compress_block_range(size_t count, int nranks, int b, size_t *offset, size_t *len);
/* Bytes of one message slot of a piece of `count` elements: header + payload of the largest
 * block, rounded up to 8 bytes (so every payload starts aligned). */
size_t compress_block_slot(const compress_codec_t *codec, size_t count, int nranks);

/* ---- topk ---- */
#define COMPRESS_TOPK_PAIR_BYTES 8 /* u32 index, f32 value */
size_t compress_topk_k(size_t count, float fraction);
/* A run of elements [off, off + count) of a buffer. */
typedef struct {
  size_t off, count;
} compress_span_t;
/* Picks every element inside the nspans spans (sorted, disjoint) and the k elements outside
 * them with the largest |v| (ties and magnitudes within 2^-7 of the threshold broken by index),
 * writes the pairs in increasing index order to out, and zeroes them in v (what is left in v is
 * the error-feedback residual). */
void compress_topk_take(float *v, size_t count, size_t k, const compress_span_t *spans, int nspans,
                        uint8_t *out);
/* NULL if the k pairs are well formed for a buffer of count elements, else the reason. */
const char *compress_topk_check(const uint8_t *in, size_t k, size_t count);
void compress_topk_decode_add(const uint8_t *in, size_t k, float *acc);

/* ---- PowerSGD shape: the gradient viewed as rows x cols, zero padded ---- */
void compress_powersgd_shape(size_t count, size_t *rows, size_t *cols);

/* "bf16", "topk", ... (tuttiCompressorParse's names). */
const char *compress_kind_name(tuttiCompressKind_t kind);
/* The compressor as the tuner's compressed entries see it (src/algos/compressed.c): message
 * bytes among nranks ranks and among nhosts leaders (PowerSGD: the whole buffer as one
 * matrix), CPU passes over the buffer. */
void compress_tuner_view(const tuttiCompressorConfig_t *cfg, size_t count, int nranks, int nhosts,
                         tuner_compress_t *v);
/* Wire bytes of one all-reduce per rank (see tuttiCompressedWireBytes). */
size_t compress_wire_bytes(const tuttiCompressorConfig_t *cfg, size_t count, int nranks);
/* Bytes one rank sends in a ring all-reduce of `floats` fp32: 2 (R - 1) blocks of floats / R. */
size_t compress_ring_allreduce_bytes(size_t floats, int nranks);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_COMPRESS_H_ */
