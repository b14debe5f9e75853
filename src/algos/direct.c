/* Direct all-reduce, reduce-scatter and all-gather: ranks of one host read each other's
 * buffers in place through the transports' peer-memory capability (transport.h), instead of
 * copying every byte into a FIFO slot and out again.
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
 *
 * Cost per rank: each byte of the result read from peers once and written once; no FIFO
 * hops, but a handshake before the call (every rank exposes its buffers and maps the others',
 * planner and engine_peer.c) and a final wait: peer latency + 2(n-1)/n S/b_peer for the
 * all-reduce, (n-1)/n S/b_peer for the others. Preconditions: every pair of ranks connected by
 * a transport with peer memory (one host), the call at least TUTTI_DIRECT_MIN_BYTES (below,
 * the handshake costs more than the copies it saves), no PreMulSum (the reduction reads each
 * input once, unscaled). Results are bitwise identical on every rank (each segment has one
 * owner; the others copy its bits) and run to run. In place is safe: rank k reads rank r's
 * buffer only in segment k, which r overwrites only after k's progress says it is final.
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

int direct_allreduce(const sched_args_t *a, sched_t *s) {
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

int direct_reducescatter(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  SCHED_PUSH(.kind = STEP_PEER_REDUCE, .recv_peer = tutti_mod(r + 1, n), .send_peer = -1,
             .src_buf = BUF_SEND, .dst_buf = BUF_RECV, .flags = STEP_STORE | STEP_POST,
             .src_off = (size_t)r * a->count, .dst_off = 0, .count = a->count);
  return direct_done(s);
}

int direct_allgather(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  size_t c = a->count;
  SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
             .flags = STEP_STORE, .dst_off = (size_t)r * c, .count = c);
  for (int k = 1; k < n; k++) {
    int q = tutti_mod(r + k, n);
    SCHED_PUSH(.kind = STEP_PEER_COPY, .recv_peer = q, .send_peer = -1, .src_buf = BUF_SEND,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .dst_off = (size_t)q * c, .count = c);
  }
  return direct_done(s);
}

static double direct_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  if (!t->peer_mem || n < 2 || t->nhosts != 1 || S < (double)t->peer_min_bytes) return -1;
  double moved = (c == COLL_ALLREDUCE ? 2.0 : 1.0) * (n - 1) / n * S;
  return cost_peer(m, &m->peer, n, moved);
}

ALGO_COL_BUILDER(build_allreduce, direct_allreduce)
ALGO_COL_BUILDER(build_reducescatter, direct_reducescatter)
ALGO_COL_BUILDER(build_allgather, direct_allgather)

const algo_desc_t algo_direct = {
    .name = "direct",
    .summary = "one host: read the peers' buffers in place (ncclMemAlloc memory, or threads)",
    .build = {[COLL_ALLREDUCE] = build_allreduce,
              [COLL_REDUCESCATTER] = build_reducescatter,
              [COLL_ALLGATHER] = build_allgather},
    .cost_us = direct_cost,
    .needs = ALGO_NEEDS_PEER_MEMORY | ALGO_NEEDS_PLAIN_OP | ALGO_RUNS_ON_DEVICE,
};
