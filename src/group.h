/* Groups (ncclGroupStart/End): validated calls queue here and run together at GroupEnd, planned
 * by plan.c and run by the engine. */
#ifndef TUTTI_GROUP_H_
#define TUTTI_GROUP_H_

#include "plan.h"

/* Queues the call in the thread's open group, or runs it at once when no group is open. */
ncclResult_t group_enqueue(const pending_t *p);
/* Marks the thread's open group as failed (an invalid call inside it): GroupEnd runs nothing. */
void group_fail(ncclResult_t res);

#endif
