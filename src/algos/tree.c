/* Tree algorithms: double binary tree all-reduce, tree reduce and tree broadcast.
 *
 * One binary tree is a heap over positions 0..n-1: position p has parent (p-1)/2 and children
 * 2p+1, 2p+2 (when < n). Depth D = floor(log2 n). Two ways to put ranks on positions:
 *
 *   tree A (rooted trees too): rank = (p + root) mod n        n = 6:       A: 0           B: 5
 *   tree B (mirror of A):      rank = n-1-p                                 / \            / \
 *                                                                          1   2          4   3
 *                                                                         /\  /          /\  /
 *                                                                        3 4 5          2 1 0
 *   The interior positions of a heap are p < n/2, so a rank that is interior in A is a leaf in
 *   B and vice versa (the middle rank of an odd n is a leaf in both): every rank forwards about
 *   half of the traffic.
 *
 * All-reduce (double binary tree): tree A carries the first half of the buffer, tree B the
 * second; each half is cut into rounds of at most `chunk` elements. In round t every rank does
 *
 *   up A(t)   up B(t)   down A(t-1)   down B(t-1)
 *
 *   up:   leaf: send own chunk (PRE) to the parent. 1 child: recv, add own, send up.
 *         2 children: recv child 0 + own -> recvbuf (partial); recv child 1 + partial -> send up.
 *         The root's last reduction is final: POST, stored in recvbuf.
 *   down: root: send recvbuf to each child. Others: recv from the parent, store, forward to
 *         child 0, then send recvbuf to child 1.
 *
 * so reduction of chunk t+1 overlaps the broadcast of chunk t, and levels overlap too (a
 * chunk climbs one level per hop while the next one follows). Cost per rank: 2D + 2 hops of
 * latency (vs 2(n-1) for the ring), at most 2 * bytes sent per rank (interior in one tree:
 * half up, twice half down; leaf in the other: half up).
 *
 * Deadlock freedom with bounded FIFOs: a pair of ranks exchanges at most 2 chunks per round in
 * each direction (up in one tree, down in the other; no pair is parent and child twice in the
 * same direction), FIFOs hold at least 2 chunks, and inside a round every wait points up the
 * tree (up steps) or down it (down steps after all up steps), so the ranks at the lowest round
 * always progress. Sender and receiver list the messages of one FIFO in the same order (A up,
 * B up, A down, B down within a round), which the engine relies on.
 *
 * Reduce: tree A rooted at `root`, up steps only; a non-root with 2 children keeps its
 * partial in BUF_SCRATCH (needs `chunk` elements: sched_scratch_elems). Broadcast: tree A, down
 * steps only. Both use rounds of `chunk` so that levels overlap.
 * Every element is reduced as (own (+) subtree child 0) (+) subtree child 1, bottom-up: a fixed
 * order for a given n, and every rank receives the root's bits, so results are bitwise
 * reproducible and identical everywhere.
 */
#include <math.h>

#include "algos/registry.h"

typedef struct tnode {
  int parent; /* -1: root */
  int child[2], nchild;
} tnode_t;

/* kind 0: rank = (p + root) mod n; kind 1: rank = n-1-p. */
static int tree_rank(int kind, int pos, int n, int root) {
  return kind ? n - 1 - pos : (pos + root) % n;
}

static tnode_t tree_node(int kind, int rank, int n, int root) {
  int pos = kind ? n - 1 - rank : (rank - root + n) % n;
  tnode_t t = {.parent = pos ? tree_rank(kind, (pos - 1) / 2, n, root) : -1, .nchild = 0};
  for (int k = 1; k <= 2; k++)
    if (2 * pos + k < n) t.child[t.nchild++] = tree_rank(kind, 2 * pos + k, n, root);
  return t;
}

/* Round t of [start, end): [*off, *off + *len). */
static void round_range(size_t start, size_t end, size_t t, size_t chunk, size_t *off,
                        size_t *len) {
  size_t o = start + t * chunk;
  *off = o < end ? o : end;
  *len = o < end ? (end - o < chunk ? end - o : chunk) : 0;
}

/* Reduce-up of [off, off + len): own input from BUF_SEND (PRE). A node with two children keeps
 * its partial in acc_buf + acc_off. The root stores the final value (POST) in BUF_RECV + off. */
static int up_steps(const tnode_t *t, size_t off, size_t len, uint8_t acc_buf, size_t acc_off,
                    sched_t *s) {
  int root = t->parent < 0;
  uint8_t fin = root ? (uint8_t)(STEP_POST | STEP_STORE) : 0, fin_dst = root ? BUF_RECV : BUF_NONE;
  if (len == 0) return 0;
  if (t->nchild == 0 && root) /* a single rank */
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE | STEP_PRE | STEP_POST, .src_off = off, .dst_off = off,
               .count = len);
  else if (t->nchild == 0)
    SCHED_PUSH(.recv_peer = -1, .send_peer = t->parent, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_PRE, .src_off = off, .count = len);
  else if (t->nchild == 1)
    SCHED_PUSH(.recv_peer = t->child[0], .send_peer = t->parent, .src_buf = BUF_SEND,
               .dst_buf = fin_dst, .flags = (uint8_t)(STEP_REDUCE | STEP_PRE | fin), .src_off = off,
               .dst_off = off, .count = len);
  else {
    SCHED_PUSH(.recv_peer = t->child[0], .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = acc_buf,
               .flags = STEP_REDUCE | STEP_PRE | STEP_STORE, .src_off = off, .dst_off = acc_off,
               .count = len);
    SCHED_PUSH(.recv_peer = t->child[1], .send_peer = t->parent, .src_buf = acc_buf,
               .dst_buf = fin_dst, .flags = (uint8_t)(STEP_REDUCE | fin), .src_off = acc_off,
               .dst_off = off, .count = len);
  }
  return 0;
}

/* Broadcast-down of [off, off + len) into BUF_RECV. The root reads root_buf (BUF_SEND for a
 * broadcast, BUF_RECV for an all-reduce) and also stores it in BUF_RECV. */
static int down_steps(const tnode_t *t, size_t off, size_t len, uint8_t root_buf, sched_t *s) {
  if (len == 0) return 0;
  if (t->parent < 0) {
    if (t->nchild == 0) /* a single rank */
      SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = root_buf, .dst_buf = BUF_RECV,
                 .flags = STEP_STORE, .src_off = off, .dst_off = off, .count = len);
    for (int k = 0; k < t->nchild; k++)
      SCHED_PUSH(.recv_peer = -1, .send_peer = t->child[k], .src_buf = root_buf,
                 .dst_buf = k == 0 ? BUF_RECV : BUF_NONE, .flags = k == 0 ? STEP_STORE : 0,
                 .src_off = off, .dst_off = off, .count = len);
    return 0;
  }
  SCHED_PUSH(.recv_peer = t->parent, .send_peer = t->nchild > 0 ? t->child[0] : -1,
             .src_buf = BUF_NONE, .dst_buf = BUF_RECV, .flags = STEP_STORE, .dst_off = off,
             .count = len);
  if (t->nchild == 2)
    SCHED_PUSH(.recv_peer = -1, .send_peer = t->child[1], .src_buf = BUF_RECV, .dst_buf = BUF_NONE,
               .src_off = off, .count = len);
  return 0;
}

static size_t div_up(size_t a, size_t b) {
  return (a + b - 1) / b;
}

int tree_allreduce(const sched_args_t *a, sched_t *s) {
  int n = a->nranks;
  size_t chunk = a->chunk ? a->chunk : 1, half = block_start(a->count, 2, 1);
  size_t start[2] = {0, half}, end[2] = {half, a->count};
  tnode_t t[2] = {tree_node(0, a->rank, n, 0), tree_node(1, a->rank, n, 0)};
  if (n == 1) return up_steps(&t[0], 0, a->count, BUF_RECV, 0, s);
  size_t rounds = div_up(half, chunk), off, len; /* the first half is the longer one */
  for (size_t r = 0; r <= rounds; r++) {
    for (int k = 0; k < 2 && r < rounds; k++) {
      round_range(start[k], end[k], r, chunk, &off, &len);
      if (up_steps(&t[k], off, len, BUF_RECV, off, s) != 0) return -1;
    }
    for (int k = 0; k < 2 && r > 0; k++) {
      round_range(start[k], end[k], r - 1, chunk, &off, &len);
      if (down_steps(&t[k], off, len, BUF_RECV, s) != 0) return -1;
    }
  }
  return 0;
}

int tree_reduce(const sched_args_t *a, sched_t *s) {
  size_t chunk = a->chunk ? a->chunk : 1, rounds = div_up(a->count, chunk), off, len;
  tnode_t t = tree_node(0, a->rank, a->nranks, a->root);
  int root = t.parent < 0;
  for (size_t r = 0; r < rounds; r++) {
    round_range(0, a->count, r, chunk, &off, &len);
    if (up_steps(&t, off, len, root ? BUF_RECV : BUF_SCRATCH, root ? off : 0, s) != 0) return -1;
  }
  return 0;
}

int tree_broadcast(const sched_args_t *a, sched_t *s) {
  size_t chunk = a->chunk ? a->chunk : 1, rounds = div_up(a->count, chunk), off, len;
  tnode_t t = tree_node(0, a->rank, a->nranks, a->root);
  for (size_t r = 0; r < rounds; r++) {
    round_range(0, a->count, r, chunk, &off, &len);
    if (down_steps(&t, off, len, BUF_SEND, s) != 0) return -1;
  }
  return 0;
}

int tree_depth(int nranks) {
  int d = 0;
  while (nranks > 1) nranks /= 2, d++;
  return d;
}

static size_t tree_chunk(const tuner_topo_t *t, coll_t c, size_t bytes);

/* Cost, D = floor(log2 n). All-reduce: R = ceil((S/2) / c) rounds of c = min(chunk, S/2) bytes
 * per tree. A rank runs both trees in one lane, each round's reduction before the previous
 * round's broadcast, so a round cannot start before the last one climbed to the root and came
 * back down: R traversals of 2(D+1) hops, each hop a + s c/b (s: ranks sharing a NIC; across
 * hosts a node's ranks sit all over the heap, so their edges leave the node), and tree B's
 * steps wait for tree A's: 1.5 traversals per round (tutti-sim: 1.5-1.7 at R = 1, 1.4-1.7 at
 * R = 4-32, 8 to 512 ranks; docs/simulator.md). q = 1: the leaves' hop sends from every rank.
 * Broadcast and reduce (D+1) a + 2 S/b, q = (n-1)/(n(D+1)): one tree, pipelined. */
static double tree_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks, D = tree_depth(n);
  const tuner_level_t *l = cost_level(m, t);
  if (c == COLL_ALLREDUCE) {
    double half = S / 2, chunk = (double)tree_chunk(t, c, (size_t)S);
    if (chunk < 1) chunk = 1;
    double rounds = half > chunk ? ceil(half / chunk) : 1, cc = half < chunk ? half : chunk;
    double hops = 1.5 * 2 * (D + 1) * rounds;
    return cost(m, t, l, hops, hops * cost_nic_share(t) * cc);
  }
  return cost_q(m, t, l, D + 1, (n - 1.0) / ((double)n * (D + 1)), 1, 2 * S);
}

/* Chunks small enough for at least 2(D+1) rounds per tree, so that levels and the two phases
 * overlap, but never below one slot. */
static size_t tree_chunk(const tuner_topo_t *t, coll_t c, size_t bytes) {
  size_t chunk = t->chunk_bytes;
  if (!t->slot_bytes) return chunk;
  size_t per_tree = c == COLL_ALLREDUCE ? bytes / 2 : bytes;
  size_t want = per_tree / (2 * (size_t)(tree_depth(t->nranks) + 1));
  want -= want % t->slot_bytes;
  if (want < t->slot_bytes) want = t->slot_bytes;
  return want < chunk ? want : chunk;
}

/* Reduce: a non-root rank keeps a round's partial sum in scratch. */
static size_t tree_scratch(const sched_args_t *a) {
  return a->coll == COLL_REDUCE ? (a->chunk ? a->chunk : 1) : 0;
}

/* An all-reduce round: `chunk` elements of each tree's half (the shorter half's last round keeps
 * its length). Broadcast and reduce declare none: their leaves run ahead of the root by a FIFO's
 * depth and tutti-sim found no period of a few rounds in them. */
static size_t tree_round_elems(const sched_args_t *a) {
  return a->coll == COLL_ALLREDUCE ? 2 * (a->chunk ? a->chunk : 1) : 0;
}

ALGO_COL_BUILDER(build_allreduce, tree_allreduce)
ALGO_COL_BUILDER(build_reduce, tree_reduce)
ALGO_COL_BUILDER(build_broadcast, tree_broadcast)

const algo_desc_t algo_tree = {
    .name = "tree",
    .summary = "double binary tree: 2(log2 n + 1) hops, for mid sizes and many ranks",
    .build = {[COLL_ALLREDUCE] = build_allreduce,
              [COLL_REDUCE] = build_reduce,
              [COLL_BROADCAST] = build_broadcast},
    .cost_us = tree_cost,
    .scratch_elems = tree_scratch,
    .chunk_bytes = tree_chunk,
    .round_elems = tree_round_elems,
};
