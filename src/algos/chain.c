/* Chain (pipelined) broadcast and reduce.
 *
 *   broadcast: root -> root+1 -> ... -> root+n-1     each rank stores and forwards piece by piece
 *   reduce:    root+1 -> root+2 -> ... -> root       each rank adds its input and forwards
 *
 * A chain has no cycle, so each rank's work is a single step of `count` elements, cut into
 * FIFO slots by the engine; pieces stream down the chain. Cost: bytes sent once per link
 * (bandwidth-optimal for one root), latency n-1 hops plus one slot per hop.
 * Reduce folds in chain order ((x[root+1] (+) x[root+2]) (+) ...) (+) x[root], always the same.
 */
#include "algos/registry.h"

int chain_broadcast(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, pos = (r - a->root + n) % n;
  int prev = (r - 1 + n) % n, next = (r + 1) % n;
  if (pos == 0) /* root: send its buffer on, and copy it to recvbuf unless in place */
    SCHED_PUSH(.recv_peer = -1, .send_peer = n > 1 ? next : -1, .src_buf = BUF_SEND,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .count = a->count);
  else
    SCHED_PUSH(.recv_peer = prev, .send_peer = pos < n - 1 ? next : -1, .src_buf = BUF_NONE,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .count = a->count);
  return 0;
}

int chain_reduce(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, pos = (r - a->root - 1 + 2 * n) % n;
  int prev = (r - 1 + n) % n, next = (r + 1) % n;
  if (n == 1)
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE | STEP_PRE | STEP_POST, .count = a->count);
  else if (pos == 0)
    SCHED_PUSH(.recv_peer = -1, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_PRE, .count = a->count);
  else if (pos < n - 1)
    SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_REDUCE | STEP_PRE, .count = a->count);
  else
    SCHED_PUSH(.recv_peer = prev, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_REDUCE | STEP_PRE | STEP_POST | STEP_STORE, .count = a->count);
  return 0;
}

/* Cost: (n-1) a + S/b, with one message in flight on the whole chain (q = 1/R). */
static double chain_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  (void)c;
  return cost_q(m, t, cost_level(m, t), t->nranks - 1,
                t->machine_ranks > 0 ? 1.0 / t->machine_ranks : 0, cost_ring_net_share(t), S);
}

ALGO_COL_BUILDER(build_broadcast, chain_broadcast)
ALGO_COL_BUILDER(build_reduce, chain_reduce)

const algo_desc_t algo_chain = {
    .name = "chain",
    .summary = "pipelined chain broadcast and reduce: bandwidth-optimal for one root",
    .build = {[COLL_BROADCAST] = build_broadcast, [COLL_REDUCE] = build_reduce},
    .cost_us = chain_cost,
};
