/* The reference meaning of a step (schedule.h), as code: runs every rank's lanes of one call
 * in memory, on int64 values, so that tests check schedules and the engine against one
 * definition. The engine (engine.c, engine_peer.c) is the fast implementation of the same rules;
 * tutti-sim times them (its data movement follows the same pieces and FIFOs).
 *
 *   FIFO step, per piece of at most `slot` elements (0: the whole step is one piece):
 *     input  = recv_peer >= 0 ? (REDUCE ? pre(src) + received : received) : pre(src)
 *     no peer at all and REDUCE: output = pre(src) + dst
 *     sent   = input (+ post when it was reduced or produced here), stored = input + post
 *   where pre(x) = PRE ? x * pre_mul : x and post = POST ? post_add : 0 (PreMulSum and Avg in
 *   integer form: "exactly once" is visible in the values);
 *   a send blocks while the peer's FIFO holds `depth` pieces (0: unbounded); a piece of the
 *   wrong size is an error.
 *   Peer steps: PEER_REDUCE writes the sum over ranks k (from recv_peer on) of pre(k's src) plus
 *   post and publishes it as final; PEER_COPY reads rank recv_peer's buffer, with
 *   STEP_AFTER_PROGRESS only once that rank's PEER_REDUCE is final; PEER_EXCHANGE swaps its
 *   elements with rank recv_peer's (both read, then both written); PEER_DONE waits for every
 *   rank's PEER_DONE.
 * Every access is checked against the buffers' lengths.
 */
#ifndef TUTTI_INTERP_H_
#define TUTTI_INTERP_H_

#include <stddef.h>
#include <stdint.h>

#include "algos/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct interp_rank {
  int64_t *buf[4];      /* BUF_SEND, BUF_RECV, BUF_NONE (NULL), BUF_SCRATCH; may alias (in place) */
  size_t len[4];        /* elements of each */
  const sched_t *lanes; /* the rank's lanes, run side by side (p2p) or one (collectives) */
  int nlanes;
} interp_rank_t;

typedef struct interp_opts {
  size_t slot;      /* elements per piece (0: whole steps) */
  size_t depth;     /* pieces per FIFO (0: unbounded) */
  int64_t pre_mul;  /* PRE multiplies by this (1: none) */
  int64_t post_add; /* POST adds this (0: none) */
} interp_opts_t;

/* Runs the n ranks to completion. Returns 0, or -1 with err saying what went wrong (deadlock,
 * a piece of the wrong size, an access outside a buffer, an unconsumed message). */
int interp_run(interp_rank_t *ranks, int n, const interp_opts_t *o, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
