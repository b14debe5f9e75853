/* Collectives built from point-to-point transfers: all-to-all, gather, scatter.
 *
 * Each (peer, direction) is its own lane: lanes[p] holds the sends to p, lanes[n + p] the
 * receives from p. The engine advances all lanes together, so no order of sends and receives
 * can deadlock (this is also how a group of ncclSend/ncclRecv runs). The own block is a local
 * copy in lanes[rank]. Cost: one hop; the root of gather/scatter moves (n-1) * count elements.
 */
#include "algos/schedule.h"

static int push(sched_t *s, step_t st) { return sched_push(s, st); }

static int send_block(sched_t *lanes, int peer, size_t src_off, size_t count) {
  return push(&lanes[peer], (step_t){.recv_peer = -1, .send_peer = peer, .src_buf = BUF_SEND,
                                     .dst_buf = BUF_NONE, .src_off = src_off, .count = count});
}

static int recv_block(sched_t *lanes, int n, int peer, size_t dst_off, size_t count) {
  return push(&lanes[n + peer], (step_t){.recv_peer = peer, .send_peer = -1, .src_buf = BUF_NONE,
                                         .dst_buf = BUF_RECV, .flags = STEP_STORE,
                                         .dst_off = dst_off, .count = count});
}

static int copy_block(sched_t *lanes, int rank, size_t src_off, size_t dst_off, size_t count) {
  return push(&lanes[rank], (step_t){.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND,
                                     .dst_buf = BUF_RECV, .flags = STEP_STORE, .src_off = src_off,
                                     .dst_off = dst_off, .count = count});
}

int p2p_alltoall(const sched_args_t *a, sched_t *lanes) {
  int n = a->nranks, r = a->rank;
  size_t c = a->count;
  for (int k = 0; k < n; k++) {
    int p = (r + k) % n; /* staggered so that not every rank starts with rank 0 */
    if (p == r) {
      if (copy_block(lanes, r, (size_t)r * c, (size_t)r * c, c)) return -1;
      continue;
    }
    if (send_block(lanes, p, (size_t)p * c, c) || recv_block(lanes, n, p, (size_t)p * c, c))
      return -1;
  }
  return 0;
}

int p2p_gather(const sched_args_t *a, sched_t *lanes) {
  int n = a->nranks, r = a->rank, root = a->root;
  size_t c = a->count;
  if (r != root) return send_block(lanes, root, 0, c);
  for (int p = 0; p < n; p++) {
    int rc = p == r ? copy_block(lanes, r, 0, (size_t)r * c, c)
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
    int rc = p == r ? copy_block(lanes, r, (size_t)r * c, 0, c) : send_block(lanes, p, (size_t)p * c, c);
    if (rc) return -1;
  }
  return 0;
}
