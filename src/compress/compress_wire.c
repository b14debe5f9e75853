/* The wire header, the block partition, the codec table, wire-byte counts and the spec parser:
 * everything about compression that needs no communicator. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the compressed wire formats are written with memcpy: little-endian hosts only"
#endif

void compress_header_write(uint8_t *out, const compress_header_t *h) {
  memcpy(out + 0, &h->magic, 4);
  out[4] = h->kind;
  out[5] = h->phase;
  memcpy(out + 6, &h->reserved, 2);
  memcpy(out + 8, &h->block, 4);
  memcpy(out + 12, &h->step, 4);
  memcpy(out + 16, &h->count, 8);
}

void compress_header_read(const uint8_t *in, compress_header_t *h) {
  memcpy(&h->magic, in + 0, 4);
  h->kind = in[4];
  h->phase = in[5];
  memcpy(&h->reserved, in + 6, 2);
  memcpy(&h->block, in + 8, 4);
  memcpy(&h->step, in + 12, 4);
  memcpy(&h->count, in + 16, 8);
}

const char *compress_header_check(const compress_header_t *got, const compress_header_t *want) {
  if (got->magic != COMPRESS_MAGIC) return "bad magic (not a tutti compressed message)";
  if (got->kind != want->kind) return "compressor kind differs from this rank's";
  if (got->phase != want->phase) return "message of another phase";
  if (got->reserved != 0) return "reserved header bits set";
  if (got->block != want->block) return "message for another block";
  if (got->step != want->step) return "compressor step differs (ranks out of step)";
  if (got->count != want->count) return "element count differs from this rank's";
  return NULL;
}

const compress_codec_t *compress_codec_of(tuttiCompressKind_t kind) {
  switch (kind) {
    case tuttiCompressBf16:
      return &compress_codec_bf16;
    case tuttiCompressFp16:
      return &compress_codec_fp16;
    case tuttiCompressInt8:
      return &compress_codec_int8;
    default:
      return NULL;
  }
}

void compress_block_range(size_t count, int nranks, int b, size_t *offset, size_t *len) {
  size_t base = count / (size_t)nranks, rem = count % (size_t)nranks, ub = (size_t)b;
  *offset = ub * base + (ub < rem ? ub : rem);
  *len = base + (ub < rem ? 1 : 0);
}

size_t compress_block_slot(const compress_codec_t *codec, size_t count, int nranks) {
  size_t largest = (count + (size_t)nranks - 1) / (size_t)nranks;
  return TUTTI_ALIGN_UP(COMPRESS_HEADER_BYTES + codec->payload_bytes(largest), 8);
}

size_t compress_block_pieces(size_t count) {
  return count ? (count + COMPRESS_PIECE_ELEMS - 1) / COMPRESS_PIECE_ELEMS : 0;
}

/* The matrix view of PowerSGD: cols = ceil(sqrt(count)), rows = ceil(count / cols). */
void compress_powersgd_shape(size_t count, size_t *rows, size_t *cols) {
  size_t c = (size_t)ceil(sqrt((double)count));
  if (c == 0) c = 1;
  *cols = c;
  *rows = (count + c - 1) / c;
}

/* A ring all-reduce of `floats` fp32 sends 2 (R - 1) blocks of ceil(floats / R). */
size_t compress_ring_allreduce_bytes(size_t floats, int nranks) {
  size_t r1 = (size_t)nranks - 1;
  return 2 * r1 * ((floats + (size_t)nranks - 1) / (size_t)nranks) * sizeof(float);
}

size_t compress_wire_bytes(const tuttiCompressorConfig_t *cfg, size_t count, int nranks) {
  size_t r1 = (size_t)nranks - 1;
  if (nranks <= 1 || count == 0) return 0;
  const compress_codec_t *codec = compress_codec_of(cfg->kind);
  if (codec) { /* every piece: 2 (R - 1) slots of its largest block */
    size_t full = count / COMPRESS_PIECE_ELEMS, last = count % COMPRESS_PIECE_ELEMS;
    size_t bytes = full * compress_block_slot(codec, COMPRESS_PIECE_ELEMS, nranks);
    if (last) bytes += compress_block_slot(codec, last, nranks);
    return 2 * r1 * bytes;
  }
  if (cfg->kind == tuttiCompressTopk) /* ring all-gather: R - 1 messages out */
    return r1 * (COMPRESS_HEADER_BYTES +
                 COMPRESS_TOPK_PAIR_BYTES * compress_topk_k(count, cfg->topkFraction));
  if (cfg->kind == tuttiCompressPowerSgd) { /* P then Q */
    size_t rows, cols, r = (size_t)cfg->powerSgdRank;
    compress_powersgd_shape(count, &rows, &cols);
    return compress_ring_allreduce_bytes(rows * r, nranks) +
           compress_ring_allreduce_bytes(cols * r, nranks);
  }
  return compress_ring_allreduce_bytes(count, nranks);
}

static const char *const kind_names[tuttiCompressNumKinds] = {"none", "bf16", "fp16",
                                                              "int8", "topk", "powersgd"};

const char *compress_kind_name(tuttiCompressKind_t kind) {
  return (unsigned)kind < tuttiCompressNumKinds ? kind_names[kind] : "?";
}

static ncclResult_t parse_arg(const char *kind, const char *arg, tuttiCompressorConfig_t *c) {
  char *end = NULL;
  if (c->kind == tuttiCompressTopk) {
    double f = strtod(arg, &end);
    if (end == arg || *end || !(f > 0 && f <= 1))
      return TUTTI_ERR(ncclInvalidArgument, "spec: topk fraction '%s' is not in (0, 1]", arg);
    c->topkFraction = (float)f;
  } else if (c->kind == tuttiCompressPowerSgd) {
    long r = strtol(arg, &end, 10);
    if (end == arg || *end || r < 1 || r > 64)
      return TUTTI_ERR(ncclInvalidArgument, "spec: powersgd rank '%s' is not in [1, 64]", arg);
    c->powerSgdRank = (int)r;
  } else {
    return TUTTI_ERR(ncclInvalidArgument, "spec: %s takes no argument (got ':%s')", kind, arg);
  }
  return ncclSuccess;
}

COMPRESS_API ncclResult_t tuttiCompressorParse(const char *spec, tuttiCompressorConfig_t *config) {
  if (!spec) return TUTTI_ERR(ncclInvalidArgument, "spec is NULL");
  if (!config) return TUTTI_ERR(ncclInvalidArgument, "config is NULL");
  char buf[64];
  if (strlen(spec) >= sizeof(buf)) return TUTTI_ERR(ncclInvalidArgument, "spec is too long");
  strcpy(buf, spec);
  tuttiCompressorConfig_t c = {.kind = tuttiCompressNone,
                               .topkFraction = 0.01f,
                               .powerSgdRank = 2,
                               .warmupSteps = 10,
                               .hierarchical = 0};
  char *hier = strstr(buf, ",hier");
  if (hier && hier[5] == '\0') *hier = '\0', c.hierarchical = 1;
  char *autos = strstr(buf, ",auto");
  if (autos && autos[5] == '\0') *autos = '\0', c.hierarchical = 2;
  char *arg = strchr(buf, ':');
  if (arg) *arg++ = '\0';
  int k = 0;
  while (k < tuttiCompressNumKinds && strcmp(buf, kind_names[k]) != 0) k++;
  if (k == tuttiCompressNumKinds)
    return TUTTI_ERR(ncclInvalidArgument,
                     "spec: unknown compressor '%s' (none, bf16, fp16, int8, topk:F, powersgd:R)",
                     buf);
  c.kind = (tuttiCompressKind_t)k;
  if (c.kind == tuttiCompressTopk) c.warmupSteps = 0; /* sparse from the first call */
  if (arg) TUTTI_CHECK(parse_arg(buf, arg, &c));
  *config = c;
  return ncclSuccess;
}

COMPRESS_API ncclResult_t tuttiCompressedWireBytes(const tuttiCompressorConfig_t *config,
                                                   size_t count, int nranks, size_t *bytes) {
  if (!config) return TUTTI_ERR(ncclInvalidArgument, "config is NULL");
  if (!bytes) return TUTTI_ERR(ncclInvalidArgument, "bytes is NULL");
  if (nranks < 1) return TUTTI_ERR(ncclInvalidArgument, "nranks %d is below 1", nranks);
  if ((unsigned)config->kind >= tuttiCompressNumKinds)
    return TUTTI_ERR(ncclInvalidArgument, "config->kind %d is not a compressor", config->kind);
  *bytes = compress_wire_bytes(config, count, nranks);
  return ncclSuccess;
}

/* Message bytes of the kind's exchange among n ranks (compressed.c's S, M, P and Q). */
static void view_sizes(const tuttiCompressorConfig_t *cfg, size_t count, int n, size_t sz[2]) {
  sz[0] = sz[1] = 0;
  if (n < 2) return;
  size_t wire = compress_wire_bytes(cfg, count, n), r1 = (size_t)n - 1;
  if (compress_codec_of(cfg->kind)) sz[0] = wire / (2 * r1);
  if (cfg->kind == tuttiCompressTopk) sz[0] = wire / r1;
  if (cfg->kind == tuttiCompressPowerSgd) {
    size_t rows, cols, r = (size_t)cfg->powerSgdRank;
    compress_powersgd_shape(count, &rows, &cols);
    sz[0] = 4 * rows * r, sz[1] = 4 * cols * r;
  }
}

/* CPU passes: casts encode all, decode-add R blocks, re-encode one, decode all; int8 adds its
 * scale and residual passes; topk adds the input, histograms, selects, decodes; PowerSGD two
 * products of r columns, the result (r) and the residual. */
void compress_tuner_view(const tuttiCompressorConfig_t *cfg, size_t count, int nranks, int nhosts,
                         tuner_compress_t *v) {
  *v = (tuner_compress_t){.kind = (int)cfg->kind, .hier = cfg->hierarchical, .count = count};
  view_sizes(cfg, count, nranks, v->flat);
  view_sizes(cfg, count, nhosts, v->lead);
  v->passes = cfg->kind == tuttiCompressInt8       ? 5
              : cfg->kind == tuttiCompressTopk     ? 4
              : cfg->kind == tuttiCompressPowerSgd ? 5.0 * cfg->powerSgdRank + 1
                                                   : 3;
}
