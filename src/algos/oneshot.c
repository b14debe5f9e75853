/* One-shot all-reduce: the latency algorithm for small messages.
 *
 *   every rank sends its whole input to every other rank (n-1 sends), then folds the n inputs
 *   in rank order: acc = y0; acc = acc (+) y1; ... ; acc = acc (+) y(n-1),
 *
 * y(q) being rank q's input as it sent it (for a PreMulSum scaled and rounded to the datatype).
 * Cost per rank: 1 hop of latency, (n-1) * bytes sent and received, n-1 reductions. Worth it
 * while latency dominates (a few KiB on shared memory); the tuner's threshold is
 * TUTTI_ONESHOT_MAX_BYTES. Every rank computes each step alike, operands in the same order
 * (max and min of NaNs, and the rounding of a scaled fp16 input, depend on it), so all ranks
 * get bitwise the same result: rank r > 0 folds its own input in at its turn with the
 * accumulator as the first operand (STEP_SWAP), rank 1 as y0 arrives, in one step. Its own
 * input is first copied to the communicator's scratch buffer when the fold could not read it
 * as sent: for a PreMulSum (y(r) = the scaled input, rounded as the copy sent), or in place
 * when the accumulator overwrites it before its turn (r > 1). The sends go first, so copies
 * overlap the wait; each fits one FIFO slot (the tuner guarantees count * size <= slot bytes),
 * so they never block on a peer that is itself still sending.
 */
#include "algos/registry.h"

/* Whether rank r keeps y(r) in scratch (see above). */
static int own_in_scratch(const sched_args_t *a) {
  return a->nranks > 1 && a->rank > 0 && (a->premul || (a->in_place && a->rank > 1));
}

int oneshot_allreduce(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  size_t c = a->count;
  uint8_t own = BUF_SEND, own_pre = STEP_PRE; /* where y(r) is read, and how */
  for (int k = 1; k < n; k++)
    SCHED_PUSH(.recv_peer = -1, .send_peer = (r + k) % n, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_PRE, .count = c);
  if (own_in_scratch(a)) {
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_SCRATCH,
               .flags = STEP_STORE | STEP_PRE, .count = c);
    own = BUF_SCRATCH, own_pre = 0;
  }
  for (int q = 0; q < n; q++) {
    uint8_t post = (q == n - 1) ? STEP_POST : 0;
    if (q == 0 && r == 0)
      SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
                 .flags = (uint8_t)(STEP_STORE | STEP_PRE | post), .count = c);
    else if (q == 0 && r == 1) /* y0 (+) y1 as y0 arrives */
      SCHED_PUSH(.recv_peer = 0, .send_peer = -1, .src_buf = own, .dst_buf = BUF_RECV,
                 .flags = (uint8_t)(STEP_REDUCE | STEP_STORE | STEP_SWAP | own_pre |
                                    (n == 2 ? STEP_POST : 0)),
                 .count = c);
    else if (q == 0)
      SCHED_PUSH(.recv_peer = 0, .send_peer = -1, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
                 .flags = (uint8_t)(STEP_STORE | post), .count = c);
    else if (q == r && r == 1)
      continue; /* folded in with y0 */
    else if (q == r)
      SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = own, .dst_buf = BUF_RECV,
                 .flags = (uint8_t)(STEP_REDUCE | STEP_STORE | STEP_SWAP | own_pre | post),
                 .count = c);
    else
      SCHED_PUSH(.recv_peer = q, .send_peer = -1, .src_buf = BUF_RECV, .dst_buf = BUF_RECV,
                 .flags = (uint8_t)(STEP_REDUCE | STEP_STORE | post), .count = c);
  }
  return 0;
}

/* Cost: a + (n-1) S/b, one hop of n-1 messages per rank (q = n-1: the CPU and piece terms of
 * cost_q charge them); across hosts the ranks of a host share its NICs. Where the model knows
 * no price for a message (no CPU counts, no piece time) the n-1 sends across hosts are charged
 * a latency each, (n-1) a, as they would otherwise look free. Only while S fits one slot and
 * TUTTI_ONESHOT_MAX_BYTES (so that no send blocks on a peer that is itself sending). */
static double oneshot_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  const tuner_level_t *l = cost_level(m, t);
  (void)c;
  if (n < 2 || S > (double)t->slot_bytes || S > (double)t->oneshot_max_bytes) return -1;
  if (t->nhosts > 1 && !(t->machine_ranks > 0 && t->ncpu > 0) && m->piece_us <= 0)
    return cost_q(m, t, l, n - 1, 1, cost_peers_net_share(t), (n - 1) * S);
  if (t->nhosts > 1)
    return cost_q(m, t, l, 1, n - 1, cost_peers_net_share(t), cost_nic_share(t) * (n - 1) * S);
  return cost_q(m, t, l, 1, n - 1, 0, (n - 1) * S);
}

static size_t oneshot_scratch(const sched_args_t *a) {
  return own_in_scratch(a) ? a->count : 0;
}

ALGO_COL_BUILDER(build_allreduce, oneshot_allreduce)

const algo_desc_t algo_oneshot = {
    .name = "oneshot",
    .summary = "every rank sends its input to every other: one hop, for small all-reduces",
    .build = {[COLL_ALLREDUCE] = build_allreduce},
    .cost_us = oneshot_cost,
    .scratch_elems = oneshot_scratch,
};
