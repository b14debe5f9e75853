/* Collective mismatch detection, TUTTI_CHECK_COLL=1 (collcheck.c). */
#ifndef TUTTI_COLLCHECK_H_
#define TUTTI_COLLCHECK_H_

#include "plan.h"

/* Whether the group's calls are to be checked (the setting is on, the group has collectives,
 * and this is not the check's own exchange). */
int collcheck_wanted(const pending_t *ops, size_t n);
/* Exchanges (through the engine, every communicator of the group at once) and compares the
 * group's collective calls on each of their communicators; an error names both calls and
 * ranks. Called by group.c with the communicators locked, before the calls are planned. */
ncclResult_t collcheck_run(const pending_t *ops, size_t n);

#endif
