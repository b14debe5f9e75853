/* Direct collectives (all-reduce, reduce-scatter, all-gather, broadcast, reduce, gather, scatter,
 * all-to-all): ranks of one host read each other's buffers in place through the transports'
 * peer-memory capability (transport.h), instead of copying every byte into a FIFO slot and out
 * again.
 *
 *   all-reduce, n ranks, segment k = block_start(count, n, k):
 *     PEER_REDUCE  own segment r of the result = x0 (+) ... from all n send buffers, in the
 *                  order the ring accumulates it (first operand: r), published piece by piece
 *     PEER_COPY    for every other rank k: segment k from k's receive buffer, as far as k's
 *                  progress says it is final (STEP_AFTER_PROGRESS)
 *     PEER_DONE    nobody returns while another rank may still read its buffers
 *   reduce-scatter: PEER_REDUCE of the own block of all send buffers (first operand r + 1, the
 *                  ring's order) into the receive buffer, then PEER_DONE
 *   all-gather:    the own block into place, PEER_COPY of every other rank's send buffer (all
 *                  there from the start), then PEER_DONE
 *   broadcast:     the root copies its buffer into place (unless in place); every other rank
 *                  PEER_COPYs the root's send buffer; then PEER_DONE
 *   reduce:        every rank r PEER_REDUCEs segment r of every rank's send buffer into the
 *                  root's receive buffer (send_peer: the root's, mapped or written by copy) in
 *                  the chain's order (first operand root + 1, the root's own last), so the same
 *                  bits as chain; then PEER_DONE (the root returns once every segment is in)
 *   gather:        the root copies its block into place and PEER_COPYs every other rank's send
 *                  buffer into its block; scatter: every rank PEER_COPYs its block of the root's
 *                  send buffer (the root copies its own); all-to-all: every rank copies its own
 *                  block (unless in place) and PEER_COPYs block r of every other rank's send
 *                  buffer; then PEER_DONE
 *   all-to-all where some rank is in place (sched_args_t.exchange, agreed in the handshake):
 *                  every rank copies its own block (unless in place); for every other rank q,
 *                  PEER_EXCHANGE of its half of the pair's two blocks (the lower rank the first
 *                  half, the higher the second): its block q with q's block r, each side read
 *                  before it is written; then PEER_DONE
 *   The buffers a rank does not use (NCCL's: a non-root's send buffer in broadcast and
 *   scatter, receive buffer in reduce and gather) are exposed as unused and never read. In an
 *   in-place all-to-all every rank overwrites blocks its peers read: pulling them, as out of
 *   place, would need a copy of each rank's input written and read every call; exchanging them
 *   moves every byte once each way, no copy (on device buffers too).
 *
 * Cost per rank: each byte of the result read from peers once and written once; no FIFO
 * hops, but a handshake before the call (every rank exposes its buffers and maps the others',
 * planner and engine_peer.c) and a final wait: peer latency + moved/b_peer, moved the bytes the
 * busiest rank reads (direct_moved). Preconditions: every pair of ranks connected by
 * a transport with peer memory (one host), the call at least TUTTI_DIRECT_MIN_BYTES (below,
 * the handshake costs more than the copies it saves), no PreMulSum (the reduction reads each
 * input once, unscaled). Results are bitwise identical on every rank (each segment has one
 * owner; the others copy its bits) and run to run. In place is safe: in the all-reduce rank k
 * reads rank r's buffer only in segment k, which r overwrites only after k's progress says it is
 * final; in the exchanging all-to-all each element of every buffer is read and written by one
 * rank alone; in the others no rank writes what a peer reads.
 * Device buffers (ALGO_RUNS_ON_DEVICE): the same schedule runs on GPU memory mapped through
 * CUDA IPC (transport/cuda_p2p.c), the reductions as kernels and the copies on the copy
 * engine (engine_peer.c); the planner then takes it at any size (the alternative is staging
 * every byte through host memory).
 */
#include "algos/registry.h"
#include "core.h"

static int direct_done(sched_t *s) {
  SCHED_PUSH(.kind = STEP_PEER_DONE, .recv_peer = -1, .send_peer = -1, .src_buf = BUF_NONE,
             .dst_buf = BUF_NONE);
  return 0;
}

static int direct_allreduce(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  size_t c = a->count, b = block_start(c, n, r);
  SCHED_PUSH(.kind = STEP_PEER_REDUCE, .recv_peer = r, .send_peer = -1, .src_buf = BUF_SEND,
             .dst_buf = BUF_RECV, .flags = STEP_STORE | STEP_POST, .src_off = b, .dst_off = b,
             .count = block_start(c, n, r + 1) - b);
  for (int k = 1; k < n; k++) {
    int q = tutti_mod(r + k, n);
    size_t qb = block_start(c, n, q);
    SCHED_PUSH(.kind = STEP_PEER_COPY, .recv_peer = q, .send_peer = -1, .src_buf = BUF_RECV,
               .dst_buf = BUF_RECV, .flags = STEP_STORE | STEP_AFTER_PROGRESS, .src_off = qb,
               .dst_off = qb, .count = block_start(c, n, q + 1) - qb);
  }
  return direct_done(s);
}

static int direct_reducescatter(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  SCHED_PUSH(.kind = STEP_PEER_REDUCE, .recv_peer = tutti_mod(r + 1, n), .send_peer = -1,
             .src_buf = BUF_SEND, .dst_buf = BUF_RECV, .flags = STEP_STORE | STEP_POST,
             .src_off = (size_t)r * a->count, .dst_off = 0, .count = a->count);
  return direct_done(s);
}

/* The own block into place, then every other rank's send buffer into its block. */
static int pull_blocks(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  size_t c = a->count;
  SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
             .flags = STEP_STORE, .dst_off = (size_t)r * c, .count = c);
  for (int k = 1; k < n; k++) {
    int q = tutti_mod(r + k, n);
    SCHED_PUSH(.kind = STEP_PEER_COPY, .recv_peer = q, .send_peer = -1, .src_buf = BUF_SEND,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .dst_off = (size_t)q * c, .count = c);
  }
  return 0;
}

static int direct_allgather(const sched_args_t *a, sched_t *s) {
  return pull_blocks(a, s) ? -1 : direct_done(s);
}

static int direct_broadcast(const sched_args_t *a, sched_t *s) {
  int root = a->root;
  if (a->rank == root)
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .count = a->count);
  else
    SCHED_PUSH(.kind = STEP_PEER_COPY, .recv_peer = root, .send_peer = -1, .src_buf = BUF_SEND,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .count = a->count);
  return direct_done(s);
}

static int direct_reduce(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, root = a->root;
  size_t c = a->count, b = block_start(c, n, r);
  SCHED_PUSH(.kind = STEP_PEER_REDUCE, .recv_peer = tutti_mod(root + 1, n),
             .send_peer = r == root ? -1 : root, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
             .flags = STEP_STORE | STEP_POST, .src_off = b, .dst_off = b,
             .count = block_start(c, n, r + 1) - b);
  return direct_done(s);
}

static int direct_gather(const sched_args_t *a, sched_t *s) {
  return a->rank == a->root && pull_blocks(a, s) ? -1 : direct_done(s);
}

static int direct_scatter(const sched_args_t *a, sched_t *s) {
  int r = a->rank, root = a->root;
  size_t c = a->count;
  if (r == root)
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .src_off = (size_t)r * c, .count = c);
  else
    SCHED_PUSH(.kind = STEP_PEER_COPY, .recv_peer = root, .send_peer = -1, .src_buf = BUF_SEND,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .src_off = (size_t)r * c, .count = c);
  return direct_done(s);
}

/* The pair of ranks r and q: each exchanges half of the two blocks, the lower rank the first. */
static int exchange_half(const sched_args_t *a, sched_t *s, int q) {
  int r = a->rank;
  size_t c = a->count, half = c / 2, lo = r < q ? 0 : half, hi = r < q ? half : c;
  if (hi > lo)
    SCHED_PUSH(.kind = STEP_PEER_EXCHANGE, .recv_peer = q, .send_peer = -1, .src_buf = BUF_SEND,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .src_off = (size_t)r * c + lo,
               .dst_off = (size_t)q * c + lo, .count = hi - lo);
  return 0;
}

static int direct_alltoall(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  size_t c = a->count, mine = (size_t)r * c;
  if (!a->in_place) /* in place the own block is where it belongs */
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .src_off = mine, .dst_off = mine, .count = c);
  for (int k = 1; k < n; k++) {
    int q = tutti_mod(r + k, n);
    if (a->exchange) {
      if (exchange_half(a, s, q) != 0) return -1;
      continue;
    }
    SCHED_PUSH(.kind = STEP_PEER_COPY, .recv_peer = q, .send_peer = -1, .src_buf = BUF_SEND,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .src_off = mine, .dst_off = (size_t)q * c,
               .count = c);
  }
  return direct_done(s);
}

double direct_moved(coll_t c, int n, double S) {
  switch (c) {
    case COLL_ALLREDUCE:
      return 2.0 * (n - 1) / n * S;
    case COLL_REDUCESCATTER:
    case COLL_ALLGATHER:
    case COLL_REDUCE: /* a segment of every other rank's send buffer, into the root's */
      return (double)(n - 1) / n * S;
    case COLL_GATHER: /* S: one rank's block */
    case COLL_ALLTOALL:
      return (double)(n - 1) * S;
    default: /* broadcast, scatter: every other rank reads S, side by side */
      return S;
  }
}

static double direct_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  if (!t->peer_mem || n < 2 || t->nhosts != 1 || S < (double)t->peer_min_bytes) return -1;
  return cost_peer(m, &m->peer, n, direct_moved(c, n, S));
}

#define DIRECT_BUILDER(coll)                                                     \
  int direct_build_##coll(const sched_args_t *a, sched_t *col, sched_t *lanes) { \
    (void)lanes;                                                                 \
    return direct_##coll(a, col);                                                \
  }
DIRECT_BUILDER(allreduce)
DIRECT_BUILDER(reducescatter)
DIRECT_BUILDER(allgather)
DIRECT_BUILDER(broadcast)
DIRECT_BUILDER(reduce)
DIRECT_BUILDER(gather)
DIRECT_BUILDER(scatter)
DIRECT_BUILDER(alltoall)

const algo_desc_t algo_direct = {
    .name = "direct",
    .summary = "one host: read the peers' buffers in place (ncclMemAlloc memory, or threads)",
    .build = DIRECT_BUILD_TABLE(direct_build_allreduce),
    .cost_us = direct_cost,
    .needs = ALGO_NEEDS_PEER_MEMORY | ALGO_NEEDS_PLAIN_OP | ALGO_RUNS_ON_DEVICE,
};
