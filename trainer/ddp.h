/* Data parallelism as PyTorch's DistributedDataParallel does it, written plainly.
 *
 * Gradients are grouped in buckets of consecutive parameter tensors, in the order backward
 * produces them (last layer first). The first bucket is capped at 1 MiB so that communication
 * starts early, the others at --bucket-mb (PyTorch's bucket_cap_mb and first-bucket rule).
 * Because the tensors lie back to back in one arena, every bucket is one contiguous range of
 * the gradient arena and is averaged in place with a single ncclAllReduce(ncclAvg).
 *
 * Collectives on host memory with a NULL stream are synchronous, so a communication thread owns
 * the communicator: the main thread hands it work through a FIFO and goes on with backward.
 * Every collective of the trainer (broadcasts at start, bucket all-reduces, metric reductions)
 * goes through that FIFO, so the communicator is only ever used by one thread, and buckets are
 * launched strictly in bucket order: the same sequence of collectives on every rank.
 */
#ifndef TRAINER_DDP_H_
#define TRAINER_DDP_H_

#include <stddef.h>

#include "model.h"
#include "tutti.h"

#define DDP_MAX_BUCKETS MODEL_MAX_TENSORS
#define DDP_FIRST_BUCKET_BYTES (1u << 20)

typedef struct {
  size_t offset, count; /* range of the gradient arena, in floats */
  int first_tensor, ntensors;
} ddp_bucket_t;

typedef struct ddp ddp_t;

/* comm NULL: a single process, where every collective is the identity and no thread starts.
 * Installs itself as m's gradient hook. Exits the program on failure. */
ddp_t *ddp_create(ncclComm_t comm, model_t *m, double bucket_mb);
void ddp_destroy(ddp_t *d);
int ddp_rank(const ddp_t *d);
int ddp_world(const ddp_t *d);
int ddp_buckets(const ddp_t *d, const ddp_bucket_t **buckets);

/* Blocking collectives through the communication thread. */
void ddp_broadcast(ddp_t *d, void *buf, size_t count, ncclDataType_t type, int root);
void ddp_allreduce_sum(ddp_t *d, void *buf, size_t count, ncclDataType_t type);

/* Brackets one micro-step's backward. sync = 1 on the last micro-step of an optimizer step:
 * buckets are all-reduced as they fill; 0 (gradient accumulation): no communication at all.
 * ddp_end_backward returns once every bucket is averaged. */
void ddp_begin_backward(ddp_t *d, int sync);
void ddp_end_backward(ddp_t *d);

/* Seconds the communication thread spent inside collectives (wall clock, and CPU time it used),
 * and seconds the main thread spent blocked waiting for them (the part of communication not
 * hidden behind compute). */
void ddp_times(const ddp_t *d, double *comm_s, double *comm_cpu_s, double *wait_s);

#endif /* TRAINER_DDP_H_ */
