/* Ring algorithms: all-reduce (reduce-scatter then all-gather), reduce-scatter, all-gather.
 *
 *   the rank at ring position r receives from position r-1 and sends to r+1 (mod n).
 *
 * Positions are ranks unless the communicator gives a ring order (sched_args_t.ring: hosts
 * entered once, NUMA nodes crossed as little as possible; topo_ring_global). Below, "rank r"
 * means position r; the blocks of reduce-scatter and all-gather belong to the rank at that
 * position, the segments of all-reduce are taken in position order.
 *
 * All-reduce splits the buffer into n nearly equal segments (block_start) and each segment into
 * rounds of at most `chunk` elements. In every round, rank r:
 *
 *   step 0          send seg r                                        (its own input, PRE)
 *   step k=1..n-2   recv seg r-k, add own input, send it on           (REDUCE)
 *   step n-1        recv seg r+1, add own input -> final: store + send (REDUCE|POST|STORE)
 *   all-gather      recv seg r+1-k, store, send on   (k = 1..n-2)
 *   last            recv seg r+2, store
 *
 * Cost per rank: 2(n-1) steps, 2(n-1)/n * bytes sent (the bandwidth-optimal amount) and as many
 * received; latency 2(n-1) hops, which is why small messages use oneshot.c instead.
 * Each segment is reduced in ring order starting at its owner's neighbour, always the same
 * order for the same n, so results are bitwise reproducible and identical on every rank (the
 * all-gather copies the owner's bits).
 * Rounds bound the data a step moves to `chunk`, which keeps every ring deadlock-free (see
 * schedule.h). Reduce-scatter and all-gather are the two halves on their own, with segments of
 * exactly `count` elements and NCCL's in-place layouts (the own segment inside the big buffer).
 */
#include "algos/registry.h"
#include "core.h"

/* Round j of a segment [start, end): its sub-range [*off, *off + *len). */
static void round_range(size_t start, size_t end, size_t j, size_t chunk, size_t *off,
                        size_t *len) {
  size_t o = start + j * chunk;
  *off = o < end ? o : end;
  *len = o < end ? (end - o < chunk ? end - o : chunk) : 0;
}

/* Copy (with PRE/POST) for a single rank. */
static int single_rank_copy(sched_t *s, size_t src_off, size_t count, uint8_t flags) {
  SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
             .flags = (uint8_t)(STEP_STORE | flags), .src_off = src_off, .dst_off = 0,
             .count = count);
  return 0;
}

/* Position, neighbours: the rank before and after this one in the ring. */
#define RING_PLACE(a)                                                          \
  int n = (a)->nranks, r = sched_ring_me(a), prev = sched_ring_rank(a, r - 1), \
      next = sched_ring_rank(a, r + 1)

int ring_allreduce(const sched_args_t *a, sched_t *s) {
  RING_PLACE(a);
  if (n == 1) return single_rank_copy(s, 0, a->count, STEP_PRE | STEP_POST);
  size_t seg_max = a->count / n + (a->count % n != 0);
  size_t rounds = (seg_max + a->chunk - 1) / a->chunk;
  for (size_t j = 0; j < rounds; j++) {
    size_t off, len;
#define SEG(q)                                                                                     \
  round_range(block_start(a->count, n, (q)), block_start(a->count, n, (q) + 1), j, a->chunk, &off, \
              &len)
    SEG(r);
    SCHED_PUSH(.recv_peer = -1, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_PRE, .src_off = off, .count = len);
    for (int k = 1; k <= n - 2; k++) {
      SEG(tutti_mod(r - k, n));
      SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
                 .flags = STEP_REDUCE | STEP_PRE, .src_off = off, .count = len);
    }
    SEG(tutti_mod(r + 1, n));
    SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_REDUCE | STEP_PRE | STEP_POST | STEP_STORE, .src_off = off,
               .dst_off = off, .count = len);
    for (int k = 1; k <= n - 2; k++) {
      SEG(tutti_mod(r + 1 - k, n));
      SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
                 .flags = STEP_STORE, .dst_off = off, .count = len);
    }
    SEG(tutti_mod(r + 2, n));
    SCHED_PUSH(.recv_peer = prev, .send_peer = -1, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .dst_off = off, .count = len);
#undef SEG
  }
  return 0;
}

/* Element offset of the block of the rank at ring position p (blocks of c elements). */
static size_t block_at(const sched_args_t *a, int p, size_t c) {
  return (size_t)sched_ring_rank(a, p) * c;
}

int ring_reducescatter(const sched_args_t *a, sched_t *s) {
  RING_PLACE(a);
  size_t c = a->count;
  if (n == 1) return single_rank_copy(s, 0, c, STEP_PRE | STEP_POST);
  size_t rounds = (c + a->chunk - 1) / a->chunk;
  for (size_t j = 0; j < rounds; j++) {
    size_t off, len;
    round_range(0, c, j, a->chunk, &off, &len);
    SCHED_PUSH(.recv_peer = -1, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_PRE, .src_off = block_at(a, r - 1, c) + off, .count = len);
    for (int k = 1; k <= n - 2; k++)
      SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
                 .flags = STEP_REDUCE | STEP_PRE, .src_off = block_at(a, r - 1 - k, c) + off,
                 .count = len);
    SCHED_PUSH(.recv_peer = prev, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_REDUCE | STEP_PRE | STEP_POST | STEP_STORE,
               .src_off = (size_t)a->rank * c + off, .dst_off = off, .count = len);
  }
  return 0;
}

int ring_allgather(const sched_args_t *a, sched_t *s) {
  RING_PLACE(a);
  size_t c = a->count;
  if (n == 1) {
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .count = c);
    return 0;
  }
  size_t rounds = (c + a->chunk - 1) / a->chunk;
  for (size_t j = 0; j < rounds; j++) {
    size_t off, len;
    round_range(0, c, j, a->chunk, &off, &len);
    SCHED_PUSH(.recv_peer = -1, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .src_off = off, .dst_off = (size_t)a->rank * c + off,
               .count = len);
    for (int k = 1; k <= n - 2; k++)
      SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
                 .flags = STEP_STORE, .dst_off = block_at(a, r - k, c) + off, .count = len);
    SCHED_PUSH(.recv_peer = prev, .send_peer = -1, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .dst_off = block_at(a, r + 1, c) + off, .count = len);
  }
  return 0;
}
/* Cost: all-reduce 2(n-1) steps, all-gather and reduce-scatter (S = all n blocks) n-1, each
 * rank sending S/n per step to its neighbour. On one host a + (S/n)/b per step. Across hosts a
 * piece's way round the ring crosses a share g of network links and 1 - g of shared-memory
 * ones (g = H/n with hosts in blocks, cost_ring_net_share), and the ring is a pipeline: each
 * step takes the longest of its slowest link's transfer (the one flow out of a host through its
 * NIC; with ranks placed anyhow every local rank's flow crosses, cost_nic_share of them on the
 * busiest NIC) and a piece's average hop (cost_ring_steps). */
static double ring_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  double share = cost_ring_net_share(t);
  double hops = c == COLL_ALLREDUCE ? 2.0 * (n - 1) : n - 1.0;
  if (t->nhosts > 1)
    return cost_ring_steps(m, t, hops, S / n, share, share < 1 ? 1 : cost_nic_share(t));
  return cost(m, t, &m->shm, hops, hops / n * S);
}

ALGO_COL_BUILDER(build_allreduce, ring_allreduce)
ALGO_COL_BUILDER(build_reducescatter, ring_reducescatter)
ALGO_COL_BUILDER(build_allgather, ring_allgather)

const algo_desc_t algo_ring = {
    .name = "ring",
    .summary = "bandwidth-optimal ring: reduce-scatter then all-gather, 2(n-1) hops",
    .build = {[COLL_ALLREDUCE] = build_allreduce,
              [COLL_REDUCESCATTER] = build_reducescatter,
              [COLL_ALLGATHER] = build_allgather},
    .cost_us = ring_cost,
};
