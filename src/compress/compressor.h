/* The compressor object (tuttiCompressor_t) and the all-reduce paths that use it; one file per
 * path: compress_block.c (bf16, fp16, int8), compress_topk_ar.c, compress_powersgd.c. */
#ifndef TUTTI_COMPRESSOR_H_
#define TUTTI_COMPRESSOR_H_

#include "compress/compress.h"

/* A PowerSGD segment: count elements of the buffer from off, a rows x cols matrix (the last row
 * zero padded when count < rows x cols); compressed: its matrix at work + work_off, its factors
 * at p + p_off and q + q_off; else sent exactly, at p + p_total + exact_off. */
typedef struct {
  size_t off, count, rows, cols;
  int compressed;
  size_t work_off, p_off, q_off, exact_off;
} compress_psgd_seg_t;

struct tuttiCompressor {
  uint64_t magic;
  tuttiCompressorConfig_t cfg;
  size_t count;
  uint32_t step; /* all-reduces done, the wire header's step */
  int route;     /* hierarchical == 2: the tuner's entry (ALGO_CHIER or a flat one; ALGO_NUM
                    until the first call) */
  uint64_t sent; /* bytes sent by this rank so far */
  int nranks;    /* of the communicator the buffers were sized for; 0 before the first call */
  /* Buffers, sized at the first call (they depend on the communicator's size):
   *   work      (count)          fp32: the scaled input plus the residual, the value encoded
   *   residual  (count)          fp32: what encoding lost, added next time (error feedback)
   *   residual2 (count / R + 1)  fp32: same for this rank's reduced block (block path)
   *   acc       (count / R + 1)  fp32: this rank's block, accumulated (block path)
   *   sendbuf, recvbuf (R x slot) the messages */
  float *work, *residual, *residual2, *acc;
  uint8_t *sendbuf, *recvbuf;
  size_t slot;
  /* The buffer's tensors (tuttiCompressorSetLayout): tensor i is the next layout_count[i]
   * elements, rows of layout_row[i]; layout_n == 0: not given (PowerSGD: one matrix) */
  int layout_n;
  size_t *layout_count, *layout_row;
  /* PowerSGD (compress_powersgd.c): one segment per tensor (or the whole buffer); the
   * compressed ones' factors P (rows x r) back to back in p, followed by the exact elements
   * (exact_count); their Q (cols x r) back to back in q */
  int nseg;
  compress_psgd_seg_t *seg;
  size_t p_total, q_total, exact_count;
  float *p, *q;
  /* topk (compress_topk_ar.c): the layout's tensors under cfg.minCompressCount elements,
   * adjacent ones merged, sent whole every call; exact_total elements in all */
  int nspans;
  compress_span_t *spans;
  size_t exact_total;
  /* hierarchical: the host's ranks, the hosts' leaders (NULL on other ranks), the host's sum */
  ncclComm_t hier_parent, hier_host, hier_leaders;
  float *hier_sum;
};

#define COMPRESSOR_MAGIC 0x636f6d7072657373ull /* "compress" */

/* One compressed all-reduce of c->count fp32 (validated arguments, nranks > 1); `scale` is
 * 1 / nranks for ncclAvg, 1 for ncclSum. On a malformed message every rank returns
 * ncclRemoteError (or ncclInvalidUsage) with a message naming the sender. */
ncclResult_t compress_block_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                      float scale, int rank, ncclComm_t comm);
ncclResult_t compress_topk_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                     float scale, int rank, ncclComm_t comm);
ncclResult_t compress_powersgd_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                         float scale, int rank, ncclComm_t comm);
/* The compressed all-reduce over every rank of comm (sizes the buffers at the first call). */
ncclResult_t compress_flat_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                     float scale, ncclComm_t comm);
/* Exact inside each host, compress_flat_allreduce between the hosts' leaders (compress_hier.c). */
ncclResult_t compress_hier_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                     float scale, ncclComm_t comm, int rank);

/* Allocates the buffers of a path for nranks ranks (once). */
ncclResult_t compress_block_setup(struct tuttiCompressor *c, int nranks);
ncclResult_t compress_topk_setup(struct tuttiCompressor *c, int nranks);
ncclResult_t compress_powersgd_setup(struct tuttiCompressor *c, int nranks);

/* A message that failed its check: the ERROR message this rank sends instead. */
void compress_error_message(uint8_t *out, uint8_t kind, int bad_sender, int code);

#endif /* TUTTI_COMPRESSOR_H_ */
