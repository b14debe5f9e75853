/* Collectives built from point-to-point transfers: all-to-all, gather, scatter, and broadcast
 * where its blocks go by rendezvous.
 *
 * Each (peer, direction) is its own lane: lanes[p] holds the sends to p, lanes[n + p] the
 * receives from p. The engine advances all lanes together, so no order of sends and receives
 * can deadlock (this is also how a group of ncclSend/ncclRecv runs). The own block is a local
 * copy in lanes[n + rank] (the receive lane from itself, otherwise empty), which the engine
 * advances after every send lane: a large block's rendezvous is announced first (transport.h),
 * so that the peer copies it while this rank copies its own. Cost: one hop; the root of
 * gather/scatter moves (n-1) * count elements; blocks by rendezvous are one copy (p2p_cost).
 */
#include "algos/registry.h"

static int push(sched_t *s, step_t st) {
  return sched_push(s, st);
}

static int send_block(sched_t *lanes, int peer, size_t src_off, size_t count) {
  return push(&lanes[peer], (step_t){.recv_peer = -1,
                                     .send_peer = peer,
                                     .src_buf = BUF_SEND,
                                     .dst_buf = BUF_NONE,
                                     .flags = STEP_WHOLE,
                                     .src_off = src_off,
                                     .count = count});
}

static int recv_block(sched_t *lanes, int n, int peer, size_t dst_off, size_t count) {
  return push(&lanes[n + peer], (step_t){.recv_peer = peer,
                                         .send_peer = -1,
                                         .src_buf = BUF_NONE,
                                         .dst_buf = BUF_RECV,
                                         .flags = STEP_STORE | STEP_WHOLE,
                                         .dst_off = dst_off,
                                         .count = count});
}

static int copy_block(sched_t *lanes, int n, int rank, size_t src_off, size_t dst_off,
                      size_t count) {
  return push(&lanes[n + rank], (step_t){.recv_peer = -1,
                                         .send_peer = -1,
                                         .src_buf = BUF_SEND,
                                         .dst_buf = BUF_RECV,
                                         .flags = STEP_STORE,
                                         .src_off = src_off,
                                         .dst_off = dst_off,
                                         .count = count});
}

/* In place with a->swap, block p goes to p and comes from p in one FIFO_SWAP step (schedule.h),
 * in p's send lane; without it the planner sends from a copy of the input (plan.c). */
static int swap_block(sched_t *lanes, int peer, size_t off, size_t count) {
  return push(&lanes[peer], (step_t){.kind = STEP_FIFO_SWAP,
                                     .recv_peer = peer,
                                     .send_peer = peer,
                                     .src_buf = BUF_RECV,
                                     .dst_buf = BUF_RECV,
                                     .src_off = off,
                                     .dst_off = off,
                                     .count = count});
}

int p2p_alltoall(const sched_args_t *a, sched_t *lanes) {
  int n = a->nranks, r = a->rank;
  size_t c = a->count;
  for (int k = 0; k < n; k++) {
    int p = (r + k) % n; /* staggered so that not every rank starts with rank 0 */
    if (p == r) {        /* in place it is where it belongs */
      if (!a->in_place && copy_block(lanes, n, r, (size_t)r * c, (size_t)r * c, c)) return -1;
      continue;
    }
    size_t off = (size_t)p * c;
    if (a->in_place && a->swap ? swap_block(lanes, p, off, c)
                               : send_block(lanes, p, off, c) || recv_block(lanes, n, p, off, c))
      return -1;
  }
  return 0;
}

int p2p_gather(const sched_args_t *a, sched_t *lanes) {
  int n = a->nranks, r = a->rank, root = a->root;
  size_t c = a->count;
  if (r != root) return send_block(lanes, root, 0, c);
  for (int p = 0; p < n; p++) {
    int rc = p == r ? copy_block(lanes, n, r, 0, (size_t)r * c, c)
                    : recv_block(lanes, n, p, (size_t)p * c, c);
    if (rc) return -1;
  }
  return 0;
}

int p2p_scatter(const sched_args_t *a, sched_t *lanes) {
  int n = a->nranks, r = a->rank, root = a->root;
  size_t c = a->count;
  if (r != root) return recv_block(lanes, n, root, 0, c);
  for (int p = 0; p < n; p++) {
    int rc = p == r ? copy_block(lanes, n, r, (size_t)r * c, 0, c)
                    : send_block(lanes, p, (size_t)p * c, c);
    if (rc) return -1;
  }
  return 0;
}

/* The root sends its buffer to every other rank (each reads it by rendezvous, side by side)
 * and copies it into place (unless in place). Only where the blocks go by rendezvous
 * (p2p_cost): through the FIFOs the root would copy every byte n-1 times, where chain and tree
 * copy it once per rank. */
int p2p_broadcast(const sched_args_t *a, sched_t *lanes) {
  int n = a->nranks, r = a->rank, root = a->root;
  size_t c = a->count;
  if (r != root) return recv_block(lanes, n, root, 0, c);
  for (int k = 1; k < n; k++)
    if (send_block(lanes, (root + k) % n, 0, c)) return -1;
  return a->in_place ? 0 : copy_block(lanes, n, r, 0, 0, c);
}

/* ncclSend / ncclRecv: one step in the lane of the peer. */
static int p2p_send(const sched_args_t *a, sched_t *col, sched_t *lanes) {
  (void)col;
  return sched_push(&lanes[a->root], (step_t){.recv_peer = -1,
                                              .send_peer = a->root,
                                              .src_buf = BUF_SEND,
                                              .dst_buf = BUF_NONE,
                                              .flags = STEP_WHOLE,
                                              .count = a->count});
}

static int p2p_recv(const sched_args_t *a, sched_t *col, sched_t *lanes) {
  (void)col;
  return sched_push(&lanes[a->nranks + a->root], (step_t){.recv_peer = a->root,
                                                          .send_peer = -1,
                                                          .src_buf = BUF_NONE,
                                                          .dst_buf = BUF_RECV,
                                                          .flags = STEP_STORE | STEP_WHOLE,
                                                          .count = a->count});
}

#define LANES_BUILDER(wrapper, fn)                                          \
  static int wrapper(const sched_args_t *a, sched_t *col, sched_t *lanes) { \
    (void)col;                                                              \
    return fn(a, lanes);                                                    \
  }
LANES_BUILDER(build_alltoall, p2p_alltoall)
LANES_BUILDER(build_gather, p2p_gather)
LANES_BUILDER(build_scatter, p2p_scatter)
LANES_BUILDER(build_broadcast, p2p_broadcast)

/* Cost: one hop, n-1 messages per rank (q = n-1); the root of gather/scatter moves S. Blocks
 * (S: one rank's) that every connection of one host takes by rendezvous (t->rdv_min_bytes) are
 * one copy each, the receiver's, from the sender's buffer: an algorithm on peer memory
 * (cost_peer) at the rendezvous level, its latency the announcements and answers (the lanes side
 * by side), and the bytes the busiest rank copies, those of direct (direct_moved), which reads
 * the same bytes after a handshake (a send or a receive: one block between two ranks). Like
 * direct's handshake, the blocks' notes are no messages of the CPU model. */
static double p2p_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks, rdv = t->nhosts == 1 && t->rdv_min_bytes && S >= (double)t->rdv_min_bytes;
  int p2p = c == COLL_SEND || c == COLL_RECV;
  if (rdv) return cost_peer(m, &m->rdv, p2p ? 2 : n, p2p ? S : direct_moved(c, n, S));
  if (p2p) return cost(m, t, cost_level(m, t), 1, S);
  if (c == COLL_BROADCAST) return -1; /* by rendezvous only (p2p_broadcast) */
  return cost_q(m, t, cost_level(m, t), 1, n - 1, cost_peers_net_share(t), S);
}

const algo_desc_t algo_p2p = {
    .name = "p2p",
    .summary =
        "point-to-point lanes, one per peer and direction: all-to-all, gather, scatter "
        "(broadcast by rendezvous)",
    .build = {[COLL_BROADCAST] = build_broadcast,
              [COLL_ALLTOALL] = build_alltoall,
              [COLL_GATHER] = build_gather,
              [COLL_SCATTER] = build_scatter,
              [COLL_SEND] = p2p_send,
              [COLL_RECV] = p2p_recv},
    .cost_us = p2p_cost,
    .needs = ALGO_USES_LANES,
};
