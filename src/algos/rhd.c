/* Recursive halving-doubling (Rabenseifner) and recursive doubling all-reduce; halving
 * reduce-scatter and doubling all-gather.
 *
 * Non-powers of two (all-reduce): p2 = the largest power of two <= n, e = n - p2 extra ranks.
 *
 *   fold:    ranks 0..2e-1 pair up (2i, 2i+1); 2i sends its input to 2i+1, which adds it.
 *            Survivors: the odd ranks below 2e and every rank >= 2e, with ids 0..p2-1.
 *   core:    a power-of-two algorithm between the survivors (below)
 *   unfold:  2i+1 sends the final result back to 2i.
 *
 * Rabenseifner (rhd) between p2 survivors, the buffer cut into p2 blocks (block_start):
 *
 *   reduce-scatter by halving, mask = p2/2, p2/4, .. 1: partner = id ^ mask; both own the same
 *     range of blocks; the rank whose id has the mask bit clear keeps the lower half, the other
 *     the upper half; each sends the half it gives up and adds the partner's copy of the half it
 *     keeps. Afterwards survivor id holds the sum of block id (POST there).
 *   all-gather by doubling, mask = 1, 2, .. p2/2: exchange the ranges owned with id ^ mask.
 *
 *   Cost: 2 log2(p2) steps, 2(p2-1)/p2 * bytes sent per survivor (the ring's amount with
 *   log latency), plus 2 steps and 2 * bytes for the fold when n is not a power of two.
 *
 * Recursive doubling (rd): survivors exchange the whole vector with id ^ mask for mask = 1, 2,
 *   .. p2/2 and both add: log2(p2) steps, log2(p2) * bytes sent. For the smallest messages.
 *   Across hosts (host_of_rank given, 2 or more hosts, some with several ranks) the ranks of a
 *   host first fold into its leader, its first rank (each sends its input; the leader adds them
 *   in rank order), the H leaders run rd (with the fold above when H is not a power of two) and
 *   each leader sends the result back to its host's ranks:
 *
 *     hosts {0 1} {2 3} {4 5} {6 7}:   1->0 3->2 5->4 7->6 | rd 0 2 4 6 | 0->1 2->3 4->5 6->7
 *
 *   H messages cross the network per step instead of n, each NIC carries one rank's bytes
 *   instead of every local rank's copy of the same sum, for 2 shared-memory hops more. On
 *   machines where messages cost CPU (many ranks per core) that is what small sizes pay for.
 *
 * Both partners of an exchange send at the same time, so every exchange goes in rounds of at
 * most `chunk` elements (send a round, then receive the partner's): one chunk per FIFO per
 * round, FIFOs hold two (see schedule.h), no deadlock. Each block (rhd) is reduced by one rank
 * and copied to the others; in rd both partners compute (lower id's) (+) (higher id's), the
 * higher one with STEP_SWAP, from the same bits: for a PreMulSum each survivor first stores its
 * scaled input (rounded to the datatype, as the partner receives it) in recvbuf. Max and min of
 * NaNs and such rounding depend on the operand order. The order is fixed by n: bitwise
 * reproducible, and the same on every rank.
 *
 * Reduce-scatter (halving, BUF_SCRATCH holds n/2 * count partial elements) and all-gather
 * (doubling, straight into recvbuf) need n to be a power of two: sched_build answers -2
 * otherwise and the tuner uses the ring.
 */
#include <stdlib.h>

#include "algos/registry.h"

typedef struct fold {
  int p2, extra; /* survivors (a power of two), extra ranks */
  int id;        /* my id among the survivors; -1: I fold into `partner` */
  int partner;   /* fold partner, -1: none */
} fold_t;

static fold_t fold_of(int r, int n) {
  fold_t f = {.p2 = 1};
  while (f.p2 * 2 <= n) f.p2 *= 2;
  f.extra = n - f.p2;
  if (r < 2 * f.extra) {
    f.id = (r % 2) ? r / 2 : -1;
    f.partner = (r % 2) ? r - 1 : r + 1;
  } else {
    f.id = r - f.extra;
    f.partner = -1;
  }
  return f;
}

static int survivor_rank(const fold_t *f, int id) {
  return id < f->extra ? 2 * id + 1 : id + f->extra;
}

static size_t min_sz(size_t a, size_t b) {
  return a < b ? a : b;
}

/* One exchange with `peer`: send [soff, soff + slen) of src_buf (flags sflags), receive
 * rlen elements; the receive adds src_buf + roff (rflags) when REDUCE is in rflags and stores
 * at dst_buf + doff. In rounds of at most `chunk`: send round j, then receive round j. */
typedef struct xchg {
  int peer;
  uint8_t src_buf, dst_buf, sflags, rflags;
  size_t soff, slen, roff, doff, rlen;
} xchg_t;

static int exchange(const xchg_t *x, size_t chunk, sched_t *s) {
  size_t longest = x->slen > x->rlen ? x->slen : x->rlen;
  for (size_t o = 0; o < longest; o += chunk) {
    if (o < x->slen)
      SCHED_PUSH(.recv_peer = -1, .send_peer = x->peer, .src_buf = x->src_buf, .dst_buf = BUF_NONE,
                 .flags = x->sflags, .src_off = x->soff + o, .count = min_sz(chunk, x->slen - o));
    if (o < x->rlen)
      SCHED_PUSH(.recv_peer = x->peer, .send_peer = -1,
                 .src_buf = (x->rflags & STEP_REDUCE) ? x->src_buf : BUF_NONE,
                 .dst_buf = x->dst_buf, .flags = (uint8_t)(x->rflags | STEP_STORE),
                 .src_off = x->roff + o, .dst_off = x->doff + o,
                 .count = min_sz(chunk, x->rlen - o));
  }
  return 0;
}

/* Rank of index i of the participants (map NULL: ranks themselves). */
static int rank_of(const int *map, int i) {
  return map ? map[i] : i;
}

/* Fold in: *src / *pre say where this rank's input is (and whether PRE is still to apply) and
 * then where its (possibly folded) input is. */
static int fold_in(const fold_t *f, const int *map, const sched_args_t *a, uint8_t *src,
                   uint8_t *pre, sched_t *s) {
  if (f->partner < 0 || a->count == 0) return 0;
  if (f->id < 0)
    SCHED_PUSH(.recv_peer = -1, .send_peer = rank_of(map, f->partner), .src_buf = *src,
               .dst_buf = BUF_NONE, .flags = *pre, .count = a->count);
  else
    SCHED_PUSH(.recv_peer = rank_of(map, f->partner), .send_peer = -1, .src_buf = *src,
               .dst_buf = BUF_RECV, .flags = (uint8_t)(STEP_REDUCE | *pre | STEP_STORE),
               .count = a->count);
  *src = BUF_RECV, *pre = 0;
  return 0;
}

static int fold_out(const fold_t *f, const int *map, const sched_args_t *a, sched_t *s) {
  if (f->partner < 0 || a->count == 0) return 0;
  if (f->id < 0)
    SCHED_PUSH(.recv_peer = rank_of(map, f->partner), .send_peer = -1, .src_buf = BUF_NONE,
               .dst_buf = BUF_RECV, .flags = STEP_STORE, .count = a->count);
  else
    SCHED_PUSH(.recv_peer = -1, .send_peer = rank_of(map, f->partner), .src_buf = BUF_RECV,
               .dst_buf = BUF_NONE, .count = a->count);
  return 0;
}

static int single_copy(const sched_args_t *a, sched_t *s) {
  if (a->count)
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE | STEP_PRE | STEP_POST, .count = a->count);
  return 0;
}

/* Halving then doubling between the survivors; [lo, hi) are block indices of p2 blocks. */
static int rhd_core(const fold_t *f, const sched_args_t *a, uint8_t src, uint8_t pre, sched_t *s) {
  int lo = 0, hi = f->p2, p2 = f->p2;
  size_t c = a->count, chunk = a->chunk ? a->chunk : 1;
#define B(k) block_start(c, p2, (k))
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    int mid = (lo + hi) / 2, up = (f->id & mask) != 0;
    int klo = up ? mid : lo, khi = up ? hi : mid, glo = up ? lo : mid, ghi = up ? mid : hi;
    xchg_t x = {.peer = survivor_rank(f, f->id ^ mask),
                .src_buf = src,
                .dst_buf = BUF_RECV,
                .sflags = pre,
                .rflags = (uint8_t)(STEP_REDUCE | pre | (mask == 1 ? STEP_POST : 0)),
                .soff = B(glo),
                .slen = B(ghi) - B(glo),
                .roff = B(klo),
                .doff = B(klo),
                .rlen = B(khi) - B(klo)};
    if (exchange(&x, chunk, s) != 0) return -1;
    src = BUF_RECV, pre = 0, lo = klo, hi = khi;
  }
  for (int mask = 1; mask < p2; mask *= 2) {
    int w = hi - lo, up = (f->id & mask) != 0, slo = up ? lo - w : hi;
    xchg_t x = {.peer = survivor_rank(f, f->id ^ mask),
                .src_buf = BUF_RECV,
                .dst_buf = BUF_RECV,
                .soff = B(lo),
                .slen = B(hi) - B(lo),
                .doff = B(slo),
                .rlen = B(slo + w) - B(slo)};
    if (exchange(&x, chunk, s) != 0) return -1;
    lo = up ? slo : lo, hi = up ? hi : slo + w;
  }
#undef B
  return 0;
}

int rhd_allreduce(const sched_args_t *a, sched_t *s) {
  fold_t f = fold_of(a->rank, a->nranks);
  uint8_t src = BUF_SEND, pre = STEP_PRE;
  if (a->nranks == 1) return single_copy(a, s);
  if (fold_in(&f, NULL, a, &src, &pre, s) != 0) return -1;
  if (f.id >= 0 && rhd_core(&f, a, src, pre, s) != 0) return -1;
  return fold_out(&f, NULL, a, s);
}

/* Recursive doubling between participant `id` of `np` (ranks map[0..np-1], NULL: 0..np-1),
 * whose input is in src (pre: PRE still to apply). */
static int rd_core(int id, int np, const int *map, const sched_args_t *a, uint8_t src, uint8_t pre,
                   sched_t *s) {
  fold_t f = fold_of(id, np);
  if (fold_in(&f, map, a, &src, &pre, s) != 0) return -1;
  if (f.id >= 0 && f.p2 > 1 && pre && a->premul && a->count) {
    /* the scaled input, rounded as the partner receives it: both partners add the same bits */
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = src, .dst_buf = BUF_RECV,
               .flags = STEP_STORE | STEP_PRE, .count = a->count);
    src = BUF_RECV, pre = 0;
  }
  for (int mask = 1; f.id >= 0 && mask < f.p2; mask *= 2) {
    /* both partners compute (lower id's) (+) (higher id's): the same operand order */
    uint8_t swap = (f.id & mask) ? STEP_SWAP : 0;
    xchg_t x = {.peer = rank_of(map, survivor_rank(&f, f.id ^ mask)),
                .src_buf = src,
                .dst_buf = BUF_RECV,
                .sflags = pre,
                .rflags = (uint8_t)(STEP_REDUCE | pre | swap | (2 * mask >= f.p2 ? STEP_POST : 0)),
                .slen = a->count,
                .rlen = a->count};
    if (exchange(&x, a->chunk ? a->chunk : 1, s) != 0) return -1;
    src = BUF_RECV, pre = 0;
  }
  return fold_out(&f, map, a, s);
}

/* The hosts' leaders (first rank of each host, in rank order) into leaders[]; their number H,
 * 0 when rd should stay flat (no host map, one host, or one rank per host), -1 out of memory.
 * O(n log n): (host label, rank) pairs sorted, the first of each label leads. */
static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static int host_leaders(const int *host_of_rank, int n, int *leaders) {
  int64_t *key = malloc((size_t)n * sizeof(int64_t));
  if (!key) return -1;
  for (int q = 0; q < n; q++) key[q] = (int64_t)host_of_rank[q] * ((int64_t)1 << 32) + q;
  qsort(key, (size_t)n, sizeof(int64_t), cmp_i64);
  int H = 0;
  for (int i = 0; i < n; i++) {
    int q = (int)(key[i] & 0xffffffff);
    if (i == 0 || host_of_rank[q] != host_of_rank[leaders[H - 1]]) leaders[H++] = q;
  }
  for (int i = 0; i < H; i++) key[i] = leaders[i];
  qsort(key, (size_t)H, sizeof(int64_t), cmp_i64);
  for (int i = 0; i < H; i++) leaders[i] = (int)key[i];
  free(key);
  return H >= 2 && H < n ? H : 0;
}

/* rd across hosts: fold each host into its leader, rd between leaders, send back. */
static int rd_hosts(const sched_args_t *a, const int *host_of_rank, const int *leaders, int H,
                    sched_t *s) {
  int r = a->rank, n = a->nranks, id = 0, host = host_of_rank[r];
  while (host_of_rank[leaders[id]] != host) id++;
  int lead = leaders[id];
  uint8_t src = BUF_SEND, pre = STEP_PRE;
  if (a->count == 0) return 0;
  if (r != lead) {
    SCHED_PUSH(.recv_peer = -1, .send_peer = lead, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_PRE, .count = a->count);
    SCHED_PUSH(.recv_peer = lead, .send_peer = -1, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .count = a->count);
    return 0;
  }
  for (int q = r + 1; q < n; q++) {
    if (host_of_rank[q] != host) continue;
    SCHED_PUSH(.recv_peer = q, .send_peer = -1, .src_buf = src, .dst_buf = BUF_RECV,
               .flags = (uint8_t)(STEP_REDUCE | pre | STEP_STORE), .count = a->count);
    src = BUF_RECV, pre = 0;
  }
  if (rd_core(id, H, leaders, a, src, pre, s) != 0) return -1;
  for (int q = r + 1; q < n; q++)
    if (host_of_rank[q] == host)
      SCHED_PUSH(.recv_peer = -1, .send_peer = q, .src_buf = BUF_RECV, .dst_buf = BUF_NONE,
                 .count = a->count);
  return 0;
}

int rd_allreduce(const sched_args_t *a, const int *host_of_rank, sched_t *s) {
  if (a->nranks == 1) return single_copy(a, s);
  int *leaders = host_of_rank ? malloc((size_t)a->nranks * sizeof(int)) : NULL;
  if (host_of_rank && !leaders) return -1;
  int H = leaders ? host_leaders(host_of_rank, a->nranks, leaders) : 0;
  int rc = H < 0 ? -1
           : H   ? rd_hosts(a, host_of_rank, leaders, H, s)
                 : rd_core(a->rank, a->nranks, NULL, a, BUF_SEND, STEP_PRE, s);
  free(leaders);
  return rc;
}

/* All-gather by doubling: rank r's block is r; after the step with mask m it owns the m*2
 * blocks of its aligned group. */
int rhd_allgather(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, lo = r, hi = r + 1;
  size_t c = a->count;
  if (!cost_is_pow2(n)) return -2;
  if (c) /* own block into place (nothing to do in place: same address) */
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .dst_off = (size_t)r * c, .count = c);
  for (int mask = 1; mask < n; mask *= 2) {
    int w = hi - lo, up = (r & mask) != 0, slo = up ? lo - w : hi;
    xchg_t x = {.peer = r ^ mask,
                .src_buf = BUF_RECV,
                .dst_buf = BUF_RECV,
                .soff = (size_t)lo * c,
                .slen = (size_t)w * c,
                .doff = (size_t)slo * c,
                .rlen = (size_t)w * c};
    if (exchange(&x, a->chunk ? a->chunk : 1, s) != 0) return -1;
    lo = up ? slo : lo, hi = up ? hi : slo + w;
  }
  return 0;
}

/* Reduce-scatter by halving: the kept range of the first step (n/2 blocks) lives in
 * BUF_SCRATCH, at its offset minus `base`; the last step writes block r to recvbuf. */
int rhd_reducescatter(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, lo = 0, hi = n;
  size_t c = a->count, base = 0;
  uint8_t src = BUF_SEND, pre = STEP_PRE;
  if (!cost_is_pow2(n)) return -2;
  if (n == 1) return single_copy(a, s);
  for (int mask = n / 2; mask >= 1; mask /= 2) {
    int mid = (lo + hi) / 2, up = (r & mask) != 0, last = mask == 1;
    int klo = up ? mid : lo, khi = up ? hi : mid, glo = up ? lo : mid;
    if (mask == n / 2) base = (size_t)klo * c;
    size_t sbase = src == BUF_SCRATCH ? base : 0;
    xchg_t x = {.peer = r ^ mask,
                .src_buf = src,
                .dst_buf = last ? BUF_RECV : BUF_SCRATCH,
                .sflags = pre,
                .rflags = (uint8_t)(STEP_REDUCE | pre | (last ? STEP_POST : 0)),
                .soff = (size_t)glo * c - sbase,
                .slen = (size_t)(khi - klo) * c,
                .roff = (size_t)klo * c - sbase,
                .doff = last ? 0 : (size_t)klo * c - base,
                .rlen = (size_t)(khi - klo) * c};
    if (exchange(&x, a->chunk ? a->chunk : 1, s) != 0) return -1;
    src = BUF_SCRATCH, pre = 0, lo = klo, hi = khi;
  }
  return 0;
}

int rhd_log2(int nranks) {
  int k = 0;
  while ((2 << k) <= nranks) k++;
  return nranks >= 1 ? k : 0;
}

/* ---- costs: k = floor(log2 n), p2 = 2^k, f = 1 when n is not a power of two; x = COST_XCHG:
 * an exchange copies what it sends into a slot and reduces what it receives in another pass ----
 *
 *   rhd all-reduce  (2k+2f) a + x (2(p2-1)/p2 + 2f) S/b
 *   rd all-reduce   (k+2f) a + x (k+2f) S/b
 *   all-gather / reduce-scatter (S = all n blocks, n a power of two)  k a + (n-1)/n S/b (x that
 *   for the reduce-scatter, which needs n/2 blocks of scratch: only while they fit the scratch
 *   a call may use, TUTTI_SCRATCH_MAX_BYTES, unless TUTTI_ALGO asks for it)
 *
 * Across hosts with m ranks each the steps of a host's ranks share its NIC (x m). rd across H
 * hosts folds each host into its leader over shm ((m-1) messages in and out, q = (m-1)/m) around
 * rd of the leaders over the network (q = 1/m, kH = floor(log2 H)):
 *   rd   2 a_shm + x 2(m-1) S/b_shm + (kH+2fH) a + (kH+2fH) S/b
 * rhd with hosts in blocks of m = 2^km ranks (n = p2): its last km halving steps (first km
 * doubling steps) stay inside the host:
 *   rhd  2 km a_shm + 2(k-km) a + x 2(m-1)/p2 S/b_shm + m 2(1 - m/p2) S/b
 *
 * Across hosts a step's latency is paid once per chunk: an exchange sends a chunk and then waits
 * for the partner's (exchange()), so the next chunk leaves only when the last one has arrived.
 * The network's a above is counted ceil(b_j / chunk) times for a step of b_j bytes (xchg_lats). */
static double xchg_lats(const tuner_topo_t *t, double S, int steps, int halve) {
  double lats = 0, b = S;
  for (int j = 0; j < steps; j++) {
    if (halve) b /= 2;
    lats += cost_pieces(b, (double)t->chunk_bytes);
  }
  return lats;
}

static double rd_hosts_us(const tuner_model_t *m, const tuner_topo_t *t, double S) {
  int H = t->nhosts, ls = t->local_size, kH = rhd_log2(H), fH = !cost_is_pow2(H);
  if (H < 2 || ls < 2) return -1;
  return cost_q(m, t, &m->shm, 2, (ls - 1.0) / ls, 0, COST_XCHG * 2 * (ls - 1) * S) +
         cost_q(m, t, &m->net, xchg_lats(t, S, kH, 0) + 2.0 * fH, 1.0 / ls, 1, (kH + 2.0 * fH) * S);
}

static double rhd_hosts_us(const tuner_model_t *m, const tuner_topo_t *t, double S) {
  int n = t->nranks, k = rhd_log2(n), ls = t->local_size, km = rhd_log2(ls);
  if (t->nhosts < 2 || !t->host_blocks || !cost_is_pow2(n) || !cost_is_pow2(ls) || ls < 2)
    return -1;
  double p2 = n;
  return cost(m, t, &m->shm, 2.0 * km, COST_XCHG * 2 * (ls - 1) / p2 * S) +
         cost(m, t, &m->net, 2 * xchg_lats(t, S, k - km, 1),
              cost_nic_share(t) * 2 * (1 - ls / p2) * S);
}

static double rhd_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks, k = rhd_log2(n), p2 = 1 << k, f = p2 != n;
  const tuner_level_t *l = cost_level(m, t);
  if (c == COLL_ALLREDUCE) {
    double hosts = rhd_hosts_us(m, t, S);
    if (hosts >= 0) return hosts;
    return cost(m, t, l, (t->nhosts > 1 ? 2 * xchg_lats(t, S, k, 1) : 2.0 * k) + 2 * f,
                cost_nic_share(t) * COST_XCHG * (2.0 * (p2 - 1) / p2 + 2 * f) * S);
  }
  if (!cost_is_pow2(n)) return -1;
  if (c == COLL_REDUCESCATTER && !t->may_alloc && S / 2 > (double)t->scratch_bytes) return -1;
  return cost(m, t, l, k, (c == COLL_REDUCESCATTER ? COST_XCHG : 1) * (double)(n - 1) / n * S);
}

static double rd_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks, k = rhd_log2(n), f = (1 << k) != n;
  double hosts = rd_hosts_us(m, t, S);
  (void)c;
  if (hosts >= 0) return hosts;
  return cost(m, t, cost_level(m, t), (t->nhosts > 1 ? xchg_lats(t, S, k, 0) : k) + 2.0 * f,
              cost_nic_share(t) * COST_XCHG * ((double)k + 2 * f) * S);
}

/* The halving reduce-scatter keeps n/2 partial blocks in scratch. */
static size_t rhd_scratch(const sched_args_t *a) {
  return a->coll == COLL_REDUCESCATTER ? (size_t)(a->nranks / 2) * a->count : 0;
}

ALGO_COL_BUILDER(build_rhd_allreduce, rhd_allreduce)
ALGO_COL_BUILDER(build_rhd_reducescatter, rhd_reducescatter)
ALGO_COL_BUILDER(build_rhd_allgather, rhd_allgather)

static int build_rd_allreduce(const sched_args_t *a, sched_t *col, sched_t *lanes) {
  (void)lanes;
  return rd_allreduce(a, a->host_of_rank, col);
}

const algo_desc_t algo_rhd = {
    .name = "rhd",
    .summary = "recursive halving-doubling: 2 log2 n exchanges, for mid sizes",
    .build = {[COLL_ALLREDUCE] = build_rhd_allreduce,
              [COLL_REDUCESCATTER] = build_rhd_reducescatter,
              [COLL_ALLGATHER] = build_rhd_allgather},
    .cost_us = rhd_cost,
    .scratch_elems = rhd_scratch,
};

const algo_desc_t algo_rd = {
    .name = "rd",
    .summary = "recursive doubling: log2 n exchanges of the whole buffer, for small sizes",
    .build = {[COLL_ALLREDUCE] = build_rd_allreduce},
    .cost_us = rd_cost,
};
