/* The engine: the one place that moves bytes. It runs lanes of steps (see algos/schedule.h)
 * over the communicators' connections, piece by piece through the FIFO slots, calling the
 * reduce kernels on whole pieces. All lanes of a group advance together without blocking, so
 * sends and receives in any order never deadlock; all waiting (spin, yield, sleep) and every
 * failure check (abort, dead or failed peer, TUTTI_TIMEOUT) lives here.
 */
#ifndef TUTTI_ENGINE_H_
#define TUTTI_ENGINE_H_

#include "comm.h"

typedef struct op_ctx { /* one collective or p2p call */
  ncclComm_t comm;
  coll_t coll;
  algo_t algo;
  char *buf[4]; /* BUF_SEND, BUF_RECV, BUF_NONE (NULL), BUF_SCRATCH */
  size_t esize;
  reduce_op_t rop;
  uint64_t seq; /* comm->op_count at enqueue, for messages */
  int stream;   /* large call: write results with streaming stores */
} op_ctx_t;

typedef struct lane {
  ncclComm_t comm;
  const step_t *steps;
  size_t nsteps;
  int phase; /* 0: collectives; 1: p2p (starts once phase 0 of the group is done) */
  /* progress */
  size_t cur, pos;
  int wait_peer, wait_send; /* what it is blocked on, for messages */
  conn_t *tx_conn;          /* send_from: the piece still going out, before anything else */
  const char *tx;
  size_t tx_left;
  size_t rx_got; /* recv_into: bytes of the current piece already in place */
} lane_t;

/* Runs all lanes to completion (or the first error). ops is indexed by step_t.op. */
ncclResult_t engine_run(lane_t *lanes, int nlanes, const op_ctx_t *ops);

#endif
