/* Collective mismatch detection, TUTTI_CHECK_COLL=1 (collcheck.c). */
#ifndef TUTTI_COLLCHECK_H_
#define TUTTI_COLLCHECK_H_

#include "group.h"

/* Whether the group's calls are to be checked (the setting is on, the group has collectives,
 * and this is not the check's own exchange). */
int collcheck_wanted(const pending_t *ops, size_t n);
/* All-gathers and compares the group's collective calls on each of their communicators; an
 * error names both calls and ranks. Runs a group of its own: the caller's group state must be
 * set aside (group.c). */
ncclResult_t collcheck_run(const pending_t *ops, size_t n);

#endif
