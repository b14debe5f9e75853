/* Data parallelism as PyTorch's DistributedDataParallel does it, written plainly.
 *
 * Gradients are grouped in buckets of consecutive parameter tensors, in the order backward
 * produces them (last layer first). The first bucket is capped at 1 MiB so that communication
 * starts early, the others at --bucket-mb (PyTorch's bucket_cap_mb and first-bucket rule).
 * Because the tensors lie back to back in one arena, every bucket is one contiguous range of
 * the gradient arena and is averaged in place with a single ncclAllReduce(ncclAvg).
 *
 * Collectives on host memory with a NULL stream are synchronous, so a communication thread runs
 * them while the main thread goes on: the main thread hands it work through a FIFO (bucket
 * averages during backward, parameter all-gathers during the next forward), and it sleeps on
 * a condition variable when the FIFO is empty, so it takes no CPU from the computation. The
 * communicator is used by one thread at a time: blocking collectives (broadcasts, metric
 * reductions, the last bucket) are run by the main thread itself once the FIFO is empty (the
 * mutex orders that use after the thread's). The last bucket holds the first layer, whose
 * gradient backward finishes last, so nothing is left to overlap it with, and running it here
 * saves two thread hand-offs (a futex wake-up each way, tens of microseconds on a VM). Jobs
 * are issued in one order on every rank (buckets strictly in bucket order), so all ranks run
 * the same sequence of collectives.
 *
 * Sharded optimizer (ZeRO stage 1, PyTorch's ZeroRedundancyOptimizer; on by default with more
 * than one rank). Instead of all-reducing a bucket of count floats, every rank reduce-scatters
 * it (in place, ncclAvg): rank r receives the averaged slice [r*s, (r+1)*s) of the bucket,
 * s = floor(count / ranks), and the count mod ranks floats left at its end (the tail) are
 * all-reduced whole. Each rank applies the optimizer to its slices and the tails only, then one
 * in-place all-gather per bucket gives everyone the updated parameters; these run on the
 * communication thread, the first layers' bucket first, while the next step zeroes its
 * gradients, gathers its batch and runs forward (the model calls a hook before each layer,
 * which waits for that layer's bucket):
 *
 *   bucket (count)  | rank 0 slice | rank 1 slice | ... | rank R-1 slice | tail |
 *   grads:             reduce-scatter (avg) ------------------------------  all-reduce
 *   params, state:     optimizer on own slice (each rank)                    all ranks
 *   params:            all-gather ---------------------------------------   (already equal)
 *
 * Bytes on the wire are those of the all-reduce (which is a reduce-scatter then an all-gather
 * anyway); the optimizer's work and memory traffic per rank are divided by the number of
 * ranks. The update is elementwise, so the parameters are the same bits as with a replicated
 * optimizer fed the same averaged gradients. The optimizer state is only up to date in the
 * rank's own slices; ddp_gather_state completes it (before a checkpoint is written).
 *
 * Sufficient factors (sharded, no accumulation, a model whose first layer is linear: the MLP).
 * A linear layer's weight gradient over a batch is dout^T x, two thin matrices (Xie et al.
 * 2016, "sufficient factor broadcasting"): for the MLP's fc1, B x (512 + 784) floats per rank
 * against 512 x 784. Its two tensors (weight, bias) form the last bucket on their own, which
 * is not reduce-scattered: each rank's input x is all-gathered while backward runs, its dout
 * (the model leaves it for us, model_first_linear) once backward is over, and every rank
 * computes its slice and the tail of the averaged [dW | db] from the gathered factors, one
 * sgemm over ranks x B samples with the flops of its local whole-layer sgemm. The parameters
 * are then updated and all-gathered as for any bucket.
 */
#ifndef TRAINER_DDP_H_
#define TRAINER_DDP_H_

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"
#include "tutti.h"

#define DDP_MAX_BUCKETS 64 /* at most one per tensor block */
#define DDP_FIRST_BUCKET_BYTES (1u << 20)

typedef struct {
  size_t offset, count; /* range of the gradient arena, in floats */
  int first_tensor, ntensors;
  size_t slice; /* sharded: floats each rank owns, count / ranks; the rest is the tail */
} ddp_bucket_t;

typedef struct ddp ddp_t;

/* comm NULL: a single process, where every collective is the identity and no thread starts.
 * shard: shard the optimizer (see above) when there is more than one rank. factor: the first
 * layer's gradient from its sufficient factors when sharded and the model allows it; only with
 * one micro-batch per step (factors of earlier micro-batches are not kept).
 * Installs itself as m's gradient hook. Exits the program on failure. */
/* Zeroed, 64-byte aligned memory the other ranks of the host can map (ncclMemAlloc; the heap
 * if that fails): collectives on it skip the FIFO copies. tutti-train gives it to the models
 * (tensor_alloc_use) before creating them. */
void *ddp_alloc(size_t bytes);
void ddp_free(void *p);
/* compress: a --compress spec; other than "none" (or NULL), each bucket's all-reduce goes
 * through its own compressor (tuttiAllReduceCompressed), and shard and factor are off. */
ddp_t *ddp_create(ncclComm_t comm, model_t *m, double bucket_mb, int shard, int factor,
                  const char *compress);
void ddp_destroy(ddp_t *d);
int ddp_rank(const ddp_t *d);
int ddp_world(const ddp_t *d);
int ddp_buckets(const ddp_t *d, const ddp_bucket_t **buckets);
int ddp_sharded(const ddp_t *d);
int ddp_factored(const ddp_t *d);
/* Recreates the compressors with `steps` warm-up steps (tuttiCompressorConfig_t.warmupSteps)
 * and tensors under min_count elements sent exactly (minCompressCount); before the first step
 * only. */
void ddp_compress_tune(ddp_t *d, int64_t steps, int min_count);
/* Bytes this rank's compressed gradient all-reduces have sent so far (0 without --compress). */
uint64_t ddp_compressed_bytes(const ddp_t *d);

/* Blocking collectives through the communication thread. */
void ddp_broadcast(ddp_t *d, void *buf, size_t count, ncclDataType_t type, int root);
void ddp_allreduce_sum(ddp_t *d, void *buf, size_t count, ncclDataType_t type);

/* Brackets one micro-step's backward. sync = 1 on the last micro-step of an optimizer step:
 * buckets are all-reduced as they fill; 0 (gradient accumulation): no communication at all.
 * ddp_end_backward returns once every bucket is averaged. */
void ddp_begin_backward(ddp_t *d, int sync);
void ddp_end_backward(ddp_t *d);

/* The optimizer step on the averaged gradients, at learning rate lr: the whole update
 * (replicated), or this rank's slices then the all-gather of the parameters (sharded). */
void ddp_optimizer_step(ddp_t *d, optim_t *o, float lr);
/* Returns once the parameters are the same on every rank (sharded: the all-gathers that
 * ddp_optimizer_step left running behind the next forward are done). Call before reading the
 * parameters outside model_forward, which waits for each layer's by itself. */
void ddp_wait_params(ddp_t *d);
/* Sharded: all-gathers the n optimizer state arrays (nparams floats each) so that every rank
 * holds all of it; a no-op otherwise. Collective. */
void ddp_gather_state(ddp_t *d, float **arrays, int n);

/* Seconds the communication thread spent inside collectives (wall clock, and CPU time it used),
 * and seconds the main thread spent blocked waiting for them (the part of communication not
 * hidden behind compute). */
void ddp_times(const ddp_t *d, double *comm_s, double *comm_cpu_s, double *wait_s);

#endif /* TRAINER_DDP_H_ */
