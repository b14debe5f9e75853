/* Groups (ncclGroupStart/End): validated calls queue here and run together at GroupEnd, planned
 * by plan.c and run by the engine. */
#ifndef TUTTI_GROUP_H_
#define TUTTI_GROUP_H_

#include "plan.h"

/* Queues the call in the thread's open group (a copy), or runs it at once when no group is
 * open (*p is then planned in place: the caller's copy is the one that runs). */
ncclResult_t group_enqueue(pending_t *p);
/* The quick way for a host call outside any group that repeats its communicator's cached plan
 * (plan_quick, engine_run_quick): 1 when it ran the call (*res its result, the communicator
 * failed as group_enqueue leaves it on an error), 0 when it did not take it and changed nothing
 * (a group is open, the plan does not fit, TUTTI_CHECK_COLL): the caller goes on with
 * group_enqueue. p is planned in place, its map_checked left as it was. */
int group_quick(pending_t *p, ncclResult_t *res);
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
