/* Bruck all-gather and reduce-scatter: ceil(log2 n) steps for any n, the (n-1)/n S bytes a ring
 * sends, for large rank counts (one rank per node at scale, where a ring's n-1 latencies are
 * what a call costs). The logarithmic all-gather / reduce-scatter of NCCL's PAT, in Bruck's
 * form: no power of two needed, one peer to send to and one to receive from per step.
 *
 * All-gather. Rank x keeps the blocks in its own order in BUF_SCRATCH: block i of scratch is
 * rank (x + i) mod n's. At the step of distance d = 1, 2, 4, .. (d < n) it sends its first
 * cnt = min(d, n - d) blocks to x - d and receives x + d's first cnt blocks, which are its
 * blocks d .. d + cnt - 1:
 *
 *   n = 5, rank 0:   scratch  [0]  ->  [0 1]  ->  [0 1 2 3]  ->  [0 1 2 3 4]
 *                    d = 1: from 1 | d = 2: from 2 (its [2 3]) | d = 4: from 4 (its [4])
 *
 * then copies scratch block i to recvbuf block (x + i) mod n. Reduce-scatter is the transpose:
 * scratch block i starts as x's input for block (x + i) mod n; at d = .., 4, 2, 1 rank x sends
 * its partial blocks d .. d + cnt - 1 to x + d and adds what x - d sends into its blocks
 * 0 .. cnt - 1; after d = 1 block 0 (its own) holds every rank's contribution (the last receive
 * writes it to recvbuf, POST).
 *
 * Every message is a run of whole blocks at the same scratch offsets on every rank, so every
 * rank's schedule is every other's with the peers moved (tutti-sim's shift symmetry); the
 * copies in and out go block by block for the same reason (a rank's wrap point in recvbuf
 * would otherwise give it steps of its own sizes).
 *
 * Cost: ceil(log2 n) steps, (n-1)/n S bytes sent and received per rank (S = all n blocks), and
 * S bytes copied locally in and out; scratch S. The reduce-scatter adds each block where it
 * arrives, in a fixed order for the same n: bitwise reproducible.
 * Bounded FIFOs: both halves of a step go in rounds of at most `chunk` elements (send a round
 * to x - d, then receive one from x + d): one chunk per FIFO per round, FIFOs hold two.
 */
#include "algos/registry.h"
#include "core.h"

typedef struct bruck_xchg { /* one step: send [soff, +len) of scratch, receive len elements */
  int to, from;
  size_t soff, roff, doff, len;
  uint8_t dst_buf, rflags;
} bruck_xchg_t;

static int bruck_exchange(const bruck_xchg_t *x, size_t chunk, sched_t *s) {
  for (size_t o = 0; o < x->len; o += chunk) {
    size_t k = x->len - o < chunk ? x->len - o : chunk;
    SCHED_PUSH(.recv_peer = -1, .send_peer = x->to, .src_buf = BUF_SCRATCH, .dst_buf = BUF_NONE,
               .src_off = x->soff + o, .count = k);
    SCHED_PUSH(.recv_peer = x->from, .send_peer = -1,
               .src_buf = (x->rflags & STEP_REDUCE) ? BUF_SCRATCH : BUF_NONE, .dst_buf = x->dst_buf,
               .flags = (uint8_t)(x->rflags | STEP_STORE), .src_off = x->roff + o,
               .dst_off = x->doff + o, .count = k);
  }
  return 0;
}

/* Copies block i of `from` at from_rel ? i : (x + i) mod n to the other place, block by block. */
static int bruck_rotate(const sched_args_t *a, uint8_t from, uint8_t to, int from_rel,
                        uint8_t flags, sched_t *s) {
  int n = a->nranks, x = a->rank;
  size_t c = a->count;
  for (int i = 0; i < n; i++) {
    size_t rel = (size_t)i * c, abs = (size_t)((x + i) % n) * c;
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = from, .dst_buf = to,
               .flags = (uint8_t)(STEP_STORE | flags), .src_off = from_rel ? rel : abs,
               .dst_off = from_rel ? abs : rel, .count = c);
  }
  return 0;
}

int bruck_allgather(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, x = a->rank;
  size_t c = a->count, chunk = a->chunk ? a->chunk : 1;
  SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND,
             .dst_buf = n == 1 ? BUF_RECV : BUF_SCRATCH, .flags = STEP_STORE, .count = c);
  if (n == 1) return 0;
  for (int d = 1; d < n; d *= 2) {
    int cnt = d < n - d ? d : n - d;
    bruck_xchg_t e = {.to = tutti_mod(x - d, n),
                      .from = (x + d) % n,
                      .soff = 0,
                      .doff = (size_t)d * c,
                      .len = (size_t)cnt * c,
                      .dst_buf = BUF_SCRATCH};
    if (bruck_exchange(&e, chunk, s) != 0) return -1;
  }
  return bruck_rotate(a, BUF_SCRATCH, BUF_RECV, 1, 0, s);
}

int bruck_reducescatter(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, x = a->rank, top = 1;
  size_t c = a->count, chunk = a->chunk ? a->chunk : 1;
  if (n == 1) {
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE | STEP_PRE | STEP_POST, .count = c);
    return 0;
  }
  if (bruck_rotate(a, BUF_SEND, BUF_SCRATCH, 0, STEP_PRE, s) != 0) return -1;
  while (top * 2 < n) top *= 2;
  for (int d = top; d >= 1; d /= 2) {
    int cnt = d < n - d ? d : n - d;
    bruck_xchg_t e = {.to = (x + d) % n,
                      .from = tutti_mod(x - d, n),
                      .soff = (size_t)d * c,
                      .roff = 0,
                      .doff = 0,
                      .len = (size_t)cnt * c,
                      .dst_buf = d == 1 ? BUF_RECV : BUF_SCRATCH,
                      .rflags = (uint8_t)(STEP_REDUCE | (d == 1 ? STEP_POST : 0))};
    if (bruck_exchange(&e, chunk, s) != 0) return -1;
  }
  return 0;
}

static int bruck_steps(int n) {
  int k = 0;
  while ((1 << k) < n) k++;
  return k;
}

/* Cost: ceil(log2 n) a + (n-1)/n S / b (x COST_XCHG for the reduce-scatter: each received
 * piece is reduced in a pass of its own) at the level the call runs on, the ranks of a host
 * sharing its NICs, plus the block copies in and out (S, and S/n for the all-gather's own block)
 * at shared-memory speed; scratch S, so only while that fits the scratch a call may use (the
 * communicator's grows up to TUTTI_SCRATCH_MAX_BYTES) unless TUTTI_ALGO asks for it. */
static double bruck_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  if (n > 1 && !t->may_alloc && S > (double)t->scratch_bytes) return -1; /* n = 1: one copy */
  double x = c == COLL_REDUCESCATTER ? COST_XCHG : 1;
  double copy = (c == COLL_ALLGATHER ? S + S / n : S) / (m->shm.gbps * 1e3);
  return cost(m, t, cost_level(m, t), bruck_steps(n), cost_nic_share(t) * x * (n - 1) / n * S) +
         copy;
}

static size_t bruck_scratch(const sched_args_t *a) {
  return a->nranks > 1 ? (size_t)a->nranks * a->count : 0;
}

ALGO_COL_BUILDER(build_allgather, bruck_allgather)
ALGO_COL_BUILDER(build_reducescatter, bruck_reducescatter)

const algo_desc_t algo_bruck = {
    .name = "bruck",
    .summary = "Bruck all-gather / reduce-scatter: ceil(log2 n) steps for any n, many ranks",
    .build = {[COLL_ALLGATHER] = build_allgather, [COLL_REDUCESCATTER] = build_reducescatter},
    .cost_us = bruck_cost,
    .scratch_elems = bruck_scratch,
};
