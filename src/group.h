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
/* Depth of the thread's open groups (0: none). */
int group_depth(void);

/* Blocking calls made inside a group (ncclCommInitRank, ncclCommSplit) are deferred to the
 * outermost ncclGroupEnd, where they run concurrently, one thread each, so that one thread may
 * create several ranks of one communicator in a group as NCCL allows (group_jobs.c). run(arg)
 * does the call; drop(arg) releases arg when the group fails and nothing runs; both free arg. */
ncclResult_t group_defer(ncclResult_t (*run)(void *), void (*drop)(void *), void *arg);
/* Runs (run=1) or drops (run=0) the thread's deferred calls; the first error wins. */
ncclResult_t group_jobs_run(int run);

/* Chooses the algorithm and appends the call's steps to its communicator's lanes. */
ncclResult_t enqueue_schedule(pending_t *p, uint16_t op_index);

#endif
