/* Groups (ncclGroupStart/End) and the path from a validated call to the engine. */
#ifndef TUTTI_GROUP_H_
#define TUTTI_GROUP_H_

#include "engine.h"

typedef struct pending { /* one validated call waiting for its group to end */
  op_ctx_t ctx;
  sched_args_t args; /* args.root is the peer for send/recv */
} pending_t;

/* Queues the call in the thread's open group, or runs it at once when no group is open. */
ncclResult_t group_enqueue(const pending_t *p);
/* Marks the thread's open group as failed (an invalid call inside it): GroupEnd runs nothing. */
void group_fail(ncclResult_t res);
/* Memory that lives until the running group ends (freed by group_run). */
void *group_temp_alloc(size_t bytes);
/* Chooses the algorithm and appends the call's steps to its communicator's lanes. */
ncclResult_t enqueue_schedule(pending_t *p, uint16_t op_index);

#endif
