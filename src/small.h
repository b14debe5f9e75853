/* The small-call path: small all-reduces on device buffers between the ranks of one host, run
 * on the caller's stream alone (no proxy thread, no host engine). See small.c. */
#ifndef TUTTI_SMALL_H_
#define TUTTI_SMALL_H_

#include "plan.h"

/* Collective, at setup (after cuda_p2p_agree): every rank of one host (2 to 8 ranks) with a
 * device shares a small region of host memory with every other; comm->small is set on every
 * rank, or on none (INFO says which rank turned it off and why). */
ncclResult_t small_agree(ncclComm_t comm);
/* 1 when p runs on the small path: an all-reduce on device buffers of at most the agreed
 * bytes, no PreMulSum, TUTTI_ALGO allows oneshot, the stream not capturing. The same answer
 * on every rank for the same call. */
int small_eligible(const pending_t *p);
/* A group's small calls, in two phases so that ranks of one process sharing a stream never
 * wait for each other: small_start enqueues each call's copy-in and arrival writes, then
 * small_finish enqueues each call's waits, reduction and done word (call: small_start's
 * number for it). At most one call per
 * communicator per group (small_eligible's caller sends the others to the proxy). */
ncclResult_t small_start(const pending_t *p, uint32_t *call);
ncclResult_t small_finish(const pending_t *p, uint32_t call);
/* ncclCommGetAsyncError: when a small call still waits and a peer's process has ended, the
 * communicator fails naming that rank, and the stream is released as on abort. */
void small_check(ncclComm_t comm);
/* At destroy or abort (after the proxy stopped): aborted, releases the stream's waits and
 * makes its pending reductions write nothing; frees the regions once the stream finished. */
void small_close(ncclComm_t comm, int aborted);

#endif
