/* Groups (ncclGroupStart/End): validated calls queue here and run together at GroupEnd, planned
 * by plan.c and run by the engine. */
#ifndef TUTTI_GROUP_H_
#define TUTTI_GROUP_H_

#include "plan.h"

/* Queues the call in the thread's open group (a copy), or runs it at once when no group is
 * open: on the quick way when it fits (group_quick), else planned in place (*p is the one that
 * runs), or, with keep, in a copy (*p's map_checked stays unset: enqueue.c's cached call). */
ncclResult_t group_enqueue(pending_t *p, int keep);
/* Marks the thread's open group as failed (an invalid call inside it): GroupEnd runs nothing. */
void group_fail(ncclResult_t res);
/* Depth of the thread's open groups (0: none). */
int group_depth(void);

/* Blocking calls made inside a group (ncclCommInitRank, ncclCommSplit) are deferred to the
 * outermost ncclGroupEnd, where they run concurrently, one thread each, so that one thread may
 * create several ranks of one communicator in a group as NCCL allows (group_jobs.c). run(arg)
 * does the call; drop(arg) releases arg when the group fails and nothing runs; both free arg. */
ncclResult_t group_defer(ncclResult_t (*run)(void *), void (*drop)(void *), void *arg);
/* Runs (run=1) or drops (run=0) the thread's deferred calls; the first error wins. */
ncclResult_t group_jobs_run(int run);

#endif
