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
  /* Peer steps only (engine_peer.c): every rank's send and receive buffers as mapped here
   * ([nranks] each, this rank's own included) and the call's number among the communicator's
   * peer-memory calls, which tags the progress and done words. */
  const char **peer_buf[2]; /* [0]: BUF_SEND, [1]: BUF_RECV */
  peer_handle_t *peer_h[2]; /* the same buffers' handles, as exposed ([nranks] each) */
  int peer_read;            /* 1: peers' buffers are read by copy (transport mem_read) */
  uint64_t peer_seq;
  /* All-to-all: before the handshake, 1 where this rank is in place and sends from its live
   * buffer; after it, 1 where any rank does (every rank then exchanges blocks: direct.c). */
  int exchange;
  /* Device buffers in place (the stream path with cuda_p2p): buf[BUF_SEND] and buf[BUF_RECV]
   * are device memory, the peers' mapped ones too; every step of the call is run by
   * engine_peer.c through `dev` on the proxy's queue dev_q (kernels and copies, never a host
   * load or store). dev_scratch (dev_scratch_bytes) holds partial sums and an all-to-all
   * exchange's pieces. NULL: host memory. */
  const struct device_ops *dev;
  void *dev_q;
  void *dev_scratch;
  size_t dev_scratch_bytes;
  /* The measured choice (adapt.h): the call's bucket (-1: none); a deciding call sends this
   * rank's latest times in its handshake (adapt_t: its pair's candidates 0 and 1, us) and gets the
   * slowest rank's back in their place. */
  int adapt, adapt_decide;
  float adapt_t[2];
  /* Plain or streaming stores, measured (adapt.h): nt_timed, the call is timed alone (its
   * stores may be measured); nt_bucket, 1 + the bucket its time goes to (0: none). */
  int nt_timed, nt_bucket;
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
  size_t rx_got;    /* recv_into: bytes of the current piece already in place */
  int large;        /* a STEP_WHOLE step's rendezvous (send_large / recv_large) was settled:
                     * the step goes on by pieces (FIFO_SWAP: bit 1 its send, bit 2 its receive) */
  size_t sent;      /* FIFO_SWAP: elements of the step sent (l->pos: received) */
  ncclResult_t err; /* the code of a failed step (0: ncclInvalidUsage, its message recorded) */
} lane_t;

/* When an operation on rank p (a peer-memory access, a wait) failed: is p to blame? It failed
 * and said why (the error then names the rank that failed first), or its process is gone (same
 * host); the error is recorded and returned. ncclSuccess: p is not known to be the cause. */
ncclResult_t engine_peer_blame(ncclComm_t comm, int p, const op_ctx_t *o);

/* Runs all lanes to completion (or the first error). ops is indexed by step_t.op. */
ncclResult_t engine_run(lane_t *lanes, int nlanes, const op_ctx_t *ops);

/* The quick way for lanes of cached steps (group.c, plan.c): 1 when every step of steps[0, n)
 * is a FIFO step that moves one piece (count * esize within the slots of its
 * connections, on transports that send and receive through slots; a STEP_WHOLE step below its
 * connection's rendezvous size; esize[op] the element size of the step's op), so that
 * engine_run_quick may run it. */
int engine_quick_steps(ncclComm_t comm, const step_t *steps, size_t n, const size_t *esize);
/* Runs lanes of such steps from their l->cur (their progress fields zero) as engine_run would. */
ncclResult_t engine_run_quick(lane_t *lanes, int nlanes, const op_ctx_t *ops);

/* One small all-to-all: `bytes` bytes from mine to every other rank of comm, theirs[p * bytes]
 * from rank p (through the FIFOs; bytes must fit one slot). An error during it names `call`, the
 * user's call the exchange is part of (its collective and number), not the all-to-all. */
typedef struct exchange {
  ncclComm_t comm;
  const void *mine;
  void *theirs;
  size_t bytes;
  const op_ctx_t *call;
} exchange_t;
/* Runs nx exchanges together (one thread may drive several communicators' ranks in a group);
 * the exchanges of one communicator reach each peer in their order in x, which is how the peer
 * tells them apart. Collective: every rank calls it at the same point of its calls. */
ncclResult_t engine_exchange(const exchange_t *x, int nx);

/* engine_peer.c. Before calls with peer steps: for each of the k calls, every rank exposes its
 * buffers (bytes[i][0] and bytes[i][1] long: send, receive) through its transports'
 * peer-memory capability, keeps every rank's handles in ops[i]->peer_h and learns what every
 * rank could: ok[i], the same on every rank, is PEER_AGREE_MAP when every buffer can be mapped
 * (then mapped into ops[i]->peer_buf), PEER_AGREE_READ when every buffer can at least be read
 * by copy, else PEER_AGREE_NONE. (peer_buf and peer_h: arrays of nranks the caller provides.)
 * Collective, like engine_exchange; the k calls' handshakes run together. */
enum { PEER_AGREE_NONE = 0, PEER_AGREE_READ = 1, PEER_AGREE_MAP = 2 };
ncclResult_t engine_peer_agree(op_ctx_t *const *ops, const size_t (*bytes)[2], int *ok, int k);
/* Runs lane l's peer step st as far as it can without waiting (also any step of a call on
 * device buffers, o->dev: the local copies of its schedule run through the device): 1 when it is
 * done (l->cur moved past it), 0 when blocked (l->wait_peer says on whom), -1 on an error
 * (recorded). *moved is set when something happened. */
int engine_peer_step(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved);
/* Frees the communicator's peer-memory state (the mappings of its peers' buffers). */
void engine_peer_free(ncclComm_t comm);

#endif
