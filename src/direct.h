/* Direct all-reduce, reduce-scatter and all-gather (direct.c): ranks of one host read each
 * other's buffers in place. */
#ifndef TUTTI_DIRECT_H_
#define TUTTI_DIRECT_H_

#include "engine.h"

/* 1 when a collective with these arguments gets a STEP_DIRECT step in front of its FIFO steps
 * (the same answer on every rank: it depends only on the call and the communicator). */
int direct_eligible(ncclComm_t comm, coll_t coll, algo_t algo, size_t count, size_t esize,
                    const reduce_op_t *rop);
/* Runs lane l's STEP_DIRECT step st as far as it can without waiting: 1 when it is done (l->cur
 * moved past it, or onto the FIFO steps), 0 when blocked (l->wait_peer says on whom), -1 on an
 * error (recorded). *moved is set when something happened. */
int direct_advance(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved);
/* Frees the communicator's direct state and its peer mappings. */
void direct_free(ncclComm_t comm);

#endif
