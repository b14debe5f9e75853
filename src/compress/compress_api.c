/* tuttiCompressor* and tuttiAllReduceCompressed: argument checks, the compressor's life, and
 * the choice of path (see compress.h for the picture of each). */
#include <stdlib.h>
#include <string.h>

#include "algos/tuner.h"
#include "comm.h"
#include "compress/compressor.h"
#include "plan.h"

/* Counts above 2^32 - 1 do not fit the topk index; every kind keeps that limit. */
#define COMPRESS_MAX_COUNT 0xffffffffull

static ncclResult_t check_config(const tuttiCompressorConfig_t *cfg) {
  if ((unsigned)cfg->kind >= tuttiCompressNumKinds)
    return TUTTI_ERR(ncclInvalidArgument, "config->kind %d is not a compressor", (int)cfg->kind);
  if (cfg->kind == tuttiCompressTopk && !(cfg->topkFraction > 0 && cfg->topkFraction <= 1))
    return TUTTI_ERR(ncclInvalidArgument, "config->topkFraction %g is not in (0, 1]",
                     (double)cfg->topkFraction);
  if (cfg->kind == tuttiCompressPowerSgd && (cfg->powerSgdRank < 1 || cfg->powerSgdRank > 64))
    return TUTTI_ERR(ncclInvalidArgument, "config->powerSgdRank %d is not in [1, 64]",
                     cfg->powerSgdRank);
  if (cfg->warmupSteps < 0)
    return TUTTI_ERR(ncclInvalidArgument, "config->warmupSteps %d is negative", cfg->warmupSteps);
  if (cfg->minCompressCount < 0)
    return TUTTI_ERR(ncclInvalidArgument, "config->minCompressCount %d is negative",
                     cfg->minCompressCount);
  if (cfg->hierarchical < 0 || cfg->hierarchical > 2)
    return TUTTI_ERR(ncclInvalidArgument, "config->hierarchical %d is not 0, 1 or 2",
                     cfg->hierarchical);
  return ncclSuccess;
}

COMPRESS_API ncclResult_t tuttiCompressorCreate(tuttiCompressor_t *compressor,
                                                const tuttiCompressorConfig_t *config, size_t count,
                                                ncclDataType_t datatype) {
  if (!compressor) return TUTTI_ERR(ncclInvalidArgument, "compressor is NULL");
  *compressor = NULL;
  if (!config) return TUTTI_ERR(ncclInvalidArgument, "config is NULL");
  TUTTI_CHECK(check_config(config));
  if (datatype != ncclFloat)
    return TUTTI_ERR(ncclInvalidArgument, "datatype %d: compression takes ncclFloat only",
                     (int)datatype);
  if (count > COMPRESS_MAX_COUNT)
    return TUTTI_ERR(ncclInvalidArgument, "count %zu is above 2^32 - 1", count);
  struct tuttiCompressor *c = calloc(1, sizeof(*c));
  if (!c) return TUTTI_ERR(ncclSystemError, "out of memory for a compressor");
  c->magic = COMPRESSOR_MAGIC, c->cfg = *config, c->count = count, c->route = ALGO_NUM;
  *compressor = c;
  return ncclSuccess;
}

COMPRESS_API ncclResult_t tuttiCompressorDestroy(tuttiCompressor_t c) {
  if (!c) return ncclSuccess;
  if (c->magic != COMPRESSOR_MAGIC)
    return TUTTI_ERR(ncclInvalidArgument, "compressor is not a live tuttiCompressor_t");
  c->magic = 0;
  free(c->work), free(c->residual), free(c->residual2), free(c->acc);
  free(c->sendbuf), free(c->recvbuf), free(c->p), free(c->q), free(c->hier_sum);
  free(c->seg), free(c->layout_count), free(c->layout_row), free(c->spans);
  if (c->hier_leaders) ncclCommDestroy(c->hier_leaders);
  if (c->hier_host) ncclCommDestroy(c->hier_host);
  free(c);
  return ncclSuccess;
}

static ncclResult_t check_layout(tuttiCompressor_t c, int ntensors, const size_t *counts,
                                 const size_t *rowLengths) {
  if (!c || c->magic != COMPRESSOR_MAGIC)
    return TUTTI_ERR(ncclInvalidArgument, "compressor is not a live tuttiCompressor_t");
  if (c->nranks != 0)
    return TUTTI_ERR(ncclInvalidUsage, "compressor: the layout is set before its first call");
  if (ntensors < 1) return TUTTI_ERR(ncclInvalidArgument, "ntensors %d is below 1", ntensors);
  if (!counts || !rowLengths)
    return TUTTI_ERR(ncclInvalidArgument, "%s is NULL", counts ? "rowLengths" : "counts");
  size_t sum = 0;
  for (int i = 0; i < ntensors; i++) {
    if (counts[i] == 0) return TUTTI_ERR(ncclInvalidArgument, "counts[%d] is 0", i);
    if (rowLengths[i] == 0 || counts[i] % rowLengths[i])
      return TUTTI_ERR(ncclInvalidArgument, "rowLengths[%d] %zu does not divide counts[%d] %zu", i,
                       rowLengths[i], i, counts[i]);
    if (counts[i] > c->count - sum)
      return TUTTI_ERR(ncclInvalidArgument, "counts: the tensors exceed the compressor's %zu",
                       c->count);
    sum += counts[i];
  }
  if (sum != c->count)
    return TUTTI_ERR(ncclInvalidArgument, "counts add up to %zu, not the compressor's %zu", sum,
                     c->count);
  return ncclSuccess;
}

COMPRESS_API ncclResult_t tuttiCompressorSetLayout(tuttiCompressor_t c, int ntensors,
                                                   const size_t *counts, const size_t *rowLengths) {
  TUTTI_CHECK(check_layout(c, ntensors, counts, rowLengths));
  size_t *cnt = malloc((size_t)ntensors * sizeof(size_t));
  size_t *row = malloc((size_t)ntensors * sizeof(size_t));
  if (!cnt || !row) {
    free(cnt), free(row);
    return TUTTI_ERR(ncclSystemError, "out of memory for a layout of %d tensors", ntensors);
  }
  memcpy(cnt, counts, (size_t)ntensors * sizeof(size_t));
  memcpy(row, rowLengths, (size_t)ntensors * sizeof(size_t));
  free(c->layout_count), free(c->layout_row);
  c->layout_count = cnt, c->layout_row = row, c->layout_n = ntensors;
  return ncclSuccess;
}

COMPRESS_API ncclResult_t tuttiCompressorBytesSent(tuttiCompressor_t c, uint64_t *bytes) {
  if (!c || c->magic != COMPRESSOR_MAGIC)
    return TUTTI_ERR(ncclInvalidArgument, "compressor is not a live tuttiCompressor_t");
  if (!bytes) return TUTTI_ERR(ncclInvalidArgument, "bytes is NULL");
  *bytes = c->sent;
  return ncclSuccess;
}

static ncclResult_t check_call(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, tuttiCompressor_t c,
                               cudaStream_t stream) {
  if (!c || c->magic != COMPRESSOR_MAGIC)
    return TUTTI_ERR(ncclInvalidArgument, "compressor is not a live tuttiCompressor_t");
  if (datatype != ncclFloat)
    return TUTTI_ERR(ncclInvalidArgument, "datatype %d: compression takes ncclFloat only",
                     (int)datatype);
  if (count != c->count)
    return TUTTI_ERR(ncclInvalidArgument, "count %zu differs from the compressor's %zu", count,
                     c->count);
  if (op != ncclSum && op != ncclAvg)
    return TUTTI_ERR(ncclInvalidArgument, "op %d: compression takes ncclSum or ncclAvg", (int)op);
  if (count && (!sendbuff || !recvbuff))
    return TUTTI_ERR(ncclInvalidArgument, "%s is NULL", sendbuff ? "recvbuff" : "sendbuff");
  if (stream != NULL)
    return TUTTI_ERR(ncclInvalidUsage,
                     "stream: compressed all-reduces take host buffers and a "
                     "NULL stream");
  return ncclSuccess;
}

/* hierarchical == 2: the registry's compressed entries priced by the tuner for this
 * communicator (the same inputs on every rank, so the same choice): chier or the kind's flat
 * entry. Decided once, at the first call (the hierarchical path keeps sub-communicators). */
static algo_t compress_choose(tuttiCompressor_t c, ncclComm_t comm) {
  tuner_compress_t view;
  tuner_topo_t t = plan_topo(comm);
  compress_tuner_view(&c->cfg, c->count, comm->nranks, comm->nhosts, &view);
  t.compress = &view;
  tuner_choice_t ch =
      tuner_choose(&comm->tuner, &t, COLL_ALLREDUCE, c->count * sizeof(float), TUNER_ALL_ALGOS, 1);
  INFO(SUB_TUNING, "compressed all-reduce (%s, %zu elements, %d ranks, %d hosts): chose %s",
       compress_kind_name(c->cfg.kind), c->count, comm->nranks, comm->nhosts, algo_name(ch.algo));
  return ch.algo;
}

static ncclResult_t setup(tuttiCompressor_t c, int nranks) {
  if (c->nranks == nranks) return ncclSuccess;
  if (c->nranks != 0)
    return TUTTI_ERR(ncclInvalidUsage, "comm: the compressor was used with %d ranks, not %d",
                     c->nranks, nranks);
  if (compress_codec_of(c->cfg.kind)) TUTTI_CHECK(compress_block_setup(c, nranks));
  if (c->cfg.kind == tuttiCompressTopk) TUTTI_CHECK(compress_topk_setup(c, nranks));
  if (c->cfg.kind == tuttiCompressPowerSgd) TUTTI_CHECK(compress_powersgd_setup(c, nranks));
  c->nranks = nranks;
  return ncclSuccess;
}

ncclResult_t compress_flat_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                     float scale, ncclComm_t comm) {
  int rank, nranks;
  TUTTI_CHECK(ncclCommUserRank(comm, &rank));
  TUTTI_CHECK(ncclCommCount(comm, &nranks));
  if (nranks == 1) { /* one host: nothing crosses hosts */
    for (size_t i = 0; i < c->count; i++) y[i] = scale * x[i];
    return ncclSuccess;
  }
  TUTTI_CHECK(setup(c, nranks));
  ncclResult_t res;
  if (c->cfg.kind == tuttiCompressTopk)
    res = compress_topk_allreduce(c, x, y, scale, rank, comm);
  else if (c->cfg.kind == tuttiCompressPowerSgd)
    res = compress_powersgd_allreduce(c, x, y, scale, rank, comm);
  else
    res = compress_block_allreduce(c, x, y, scale, rank, comm);
  c->step++;
  return res;
}

COMPRESS_API ncclResult_t tuttiAllReduceCompressed(const void *sendbuff, void *recvbuff,
                                                   size_t count, ncclDataType_t datatype,
                                                   ncclRedOp_t op, tuttiCompressor_t c,
                                                   ncclComm_t comm, cudaStream_t stream) {
  int rank, nranks;
  TUTTI_CHECK(check_call(sendbuff, recvbuff, count, datatype, op, c, stream));
  TUTTI_CHECK(ncclCommUserRank(comm, &rank));
  TUTTI_CHECK(ncclCommCount(comm, &nranks));
  if (c->cfg.kind == tuttiCompressNone || nranks == 1 || count == 0) {
    c->sent +=
        compress_wire_bytes(&(tuttiCompressorConfig_t){.kind = tuttiCompressNone}, count, nranks);
    return ncclAllReduce(sendbuff, recvbuff, count, ncclFloat, op, comm, NULL);
  }
  float scale = op == ncclAvg ? 1.0f / (float)nranks : 1.0f;
  if (c->cfg.hierarchical == 2 && c->route == ALGO_NUM) c->route = compress_choose(c, comm);
  if (c->cfg.hierarchical == 1 || c->route == ALGO_CHIER)
    return compress_hier_allreduce(c, sendbuff, recvbuff, scale, comm, rank);
  return compress_flat_allreduce(c, sendbuff, recvbuff, scale, comm);
}

/* ---- the ERROR message of the all-gather phase ---- */

void compress_error_message(uint8_t *out, uint8_t kind, int bad_sender, int code) {
  compress_header_t h = {.magic = COMPRESS_MAGIC,
                         .kind = kind,
                         .phase = COMPRESS_PHASE_ERROR,
                         .block = (uint32_t)bad_sender,
                         .count = (uint64_t)code};
  compress_header_write(out, &h);
}
