/* Hierarchical all-reduce: for communicators spanning several hosts with m ranks each.
 *
 *   host 0: ranks a0 a1 .. a(m-1)      host 1: b0 .. b(m-1)      ...  (H hosts)
 *
 *   1. reduce-scatter inside each host (a ring over the m local ranks, shared memory): the
 *      local rank at position p ends up with its host's sum of block (p + 1) % m of the
 *      buffer (the block a ring reduce-scatter leaves there, as in ring.c)
 *   2. all-reduce of that block across hosts (a ring over the H ranks at position p, one per
 *      host, the network): every one of them ends with the global sum of its block (POST here)
 *   3. all-gather inside each host (the local ring again): everybody gets every block
 *
 * Cost per rank, for a buffer of S bytes: 2(m-1)/m * S over shared memory and 2(H-1)/H * S/m
 * over the network, versus 2(n-1)/n * S over the network for some ranks of a flat ring (whose
 * host-crossing links carry the whole stream). Every rank uses the network, each for 1/m of the
 * data, so m network connections per host work in parallel; the cross-host ring has H steps
 * of latency instead of n. Worth it once the buffer is large enough that bandwidth dominates.
 *
 * Invariants: own input is read with PRE only in phase 1 (or in phase 2 when m = 1), the final
 * value gets POST exactly once (phase 2's last reduce), every step moves at most `chunk`
 * elements per round, phases run in order on each rank and each pair of ranks carries one
 * kind of traffic (same host: phases 1 and 3; different hosts: phase 2). The reduction order
 * of every element is fixed by (n, m, H), so results are bitwise reproducible and identical
 * on every rank (phases 2 and 3 copy the owner's bits).
 * Applies when every host has the same number of ranks (hier_applicable); the caller falls
 * back to the flat ring otherwise.
 */
#include <stdlib.h>

#include "algos/registry.h"
#include "core.h"

typedef struct ring { /* participants in ring order and my position among them */
  int *ranks;
  int n, pos;
} ring_t;

static int ring_peer(const ring_t *r, int d) {
  return r->ranks[tutti_mod(r->pos + d, r->n)];
}

/* Round j of [start, end): its sub-range. */
static void round_range(size_t start, size_t end, size_t j, size_t chunk, size_t *off,
                        size_t *len) {
  size_t o = start + j * chunk;
  *off = o < end ? o : end;
  *len = o < end ? (end - o < chunk ? end - o : chunk) : 0;
}

/* Segment q of n of the range [base, base + len). */
static size_t seg_start(size_t base, size_t len, int n, int q) {
  return base + block_start(len, n, q);
}

static size_t rounds_for(size_t len, int n, size_t chunk) {
  size_t seg_max = len / (size_t)n + (len % (size_t)n != 0);
  return (seg_max + chunk - 1) / chunk;
}

#define SEG(q)                                                \
  round_range(seg_start(base, len, r->n, tutti_mod(q, r->n)), \
              seg_start(base, len, r->n, tutti_mod(q, r->n) + 1), j, chunk, &off, &cnt)

/* Round j of a ring all-gather after this rank sent segment pos + 1: receive the other n - 1
 * segments into BUF_RECV, forwarding all but the last. */
static int gather_forward(const ring_t *r, size_t base, size_t len, size_t chunk, size_t j,
                          sched_t *s) {
  int p = r->pos, prev = ring_peer(r, -1), next = ring_peer(r, 1);
  size_t off, cnt;
  for (int k = 1; k <= r->n - 2; k++) {
    SEG(p + 1 - k);
    SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
               .flags = STEP_STORE, .dst_off = off, .count = cnt);
  }
  SEG(p + 2);
  SCHED_PUSH(.recv_peer = prev, .send_peer = -1, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
             .flags = STEP_STORE, .dst_off = off, .count = cnt);
  return 0;
}

/* Ring reduce-scatter of [base, base + len) over ring r (n >= 2): own input from BUF_SEND
 * (PRE); segment pos + 1 ends in BUF_RECV (no POST: phase 2 finishes the sum). */
static int local_reduce_scatter(const ring_t *r, size_t base, size_t len, size_t chunk,
                                sched_t *s) {
  int p = r->pos, prev = ring_peer(r, -1), next = ring_peer(r, 1);
  size_t rounds = rounds_for(len, r->n, chunk), off, cnt;
  for (size_t j = 0; j < rounds; j++) {
    SEG(p);
    SCHED_PUSH(.recv_peer = -1, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_PRE, .src_off = off, .count = cnt);
    for (int k = 1; k <= r->n - 2; k++) {
      SEG(p - k);
      SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
                 .flags = STEP_REDUCE | STEP_PRE, .src_off = off, .count = cnt);
    }
    SEG(p + 1);
    SCHED_PUSH(.recv_peer = prev, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_REDUCE | STEP_PRE | STEP_STORE, .src_off = off, .dst_off = off,
               .count = cnt);
  }
  return 0;
}

/* Ring all-reduce of [base, base + len) over ring r (n >= 2), partial sums read from `src`
 * (PRE when that is the user's input), result in BUF_RECV; as ring_allreduce in ring.c. */
static int cross_allreduce(const ring_t *r, size_t base, size_t len, size_t chunk, uint8_t src,
                           sched_t *s) {
  int p = r->pos, prev = ring_peer(r, -1), next = ring_peer(r, 1);
  uint8_t pre = src == BUF_SEND ? STEP_PRE : 0;
  size_t rounds = rounds_for(len, r->n, chunk), off, cnt;
  for (size_t j = 0; j < rounds; j++) {
    SEG(p);
    SCHED_PUSH(.recv_peer = -1, .send_peer = next, .src_buf = src, .dst_buf = BUF_NONE,
               .flags = pre, .src_off = off, .count = cnt);
    for (int k = 1; k <= r->n - 2; k++) {
      SEG(p - k);
      SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = src, .dst_buf = BUF_NONE,
                 .flags = (uint8_t)(STEP_REDUCE | pre), .src_off = off, .count = cnt);
    }
    SEG(p + 1);
    SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = src, .dst_buf = BUF_RECV,
               .flags = (uint8_t)(STEP_REDUCE | STEP_POST | STEP_STORE | pre), .src_off = off,
               .dst_off = off, .count = cnt);
    if (gather_forward(r, base, len, chunk, j, s) != 0) return -1;
  }
  return 0;
}

/* Ring all-gather of [base, base + len) over ring r (n >= 2): segment pos + 1 is final in
 * BUF_RECV; the others arrive there. */
static int local_all_gather(const ring_t *r, size_t base, size_t len, size_t chunk, sched_t *s) {
  int p = r->pos, next = ring_peer(r, 1);
  size_t rounds = rounds_for(len, r->n, chunk), off, cnt;
  for (size_t j = 0; j < rounds; j++) {
    SEG(p + 1);
    SCHED_PUSH(.recv_peer = -1, .send_peer = next, .src_buf = BUF_RECV, .dst_buf = BUF_NONE,
               .src_off = off, .count = cnt);
    if (gather_forward(r, base, len, chunk, j, s) != 0) return -1;
  }
  return 0;
}
#undef SEG

typedef struct keyed {
  int key, rank;
} keyed_t;

static int keyed_cmp(const void *x, const void *y) {
  const keyed_t *a = x, *b = y;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return (a->rank > b->rank) - (a->rank < b->rank);
}

/* Ranks grouped by host, hosts ordered by their first rank, each host's ranks in rank order
 * (O(n log n): two sorts, by host label, then by the host's first rank). Returns the array
 * (n entries, .key = the host's first rank) or NULL when out of memory. */
static keyed_t *hosts_in_order(const int *host_of_rank, int n) {
  keyed_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  if (!v) return NULL;
  for (int r = 0; r < n; r++) v[r] = (keyed_t){host_of_rank[r], r};
  qsort(v, (size_t)n, sizeof *v, keyed_cmp);
  for (int i = 0, first = 0; i < n; i++) {
    if (i > 0 && host_of_rank[v[i].rank] != host_of_rank[v[i - 1].rank]) first = i;
    v[i].key = v[first].rank;
  }
  qsort(v, (size_t)n, sizeof *v, keyed_cmp);
  return v;
}

int hier_applicable(const int *host_of_rank, int nranks) {
  keyed_t *v = hosts_in_order(host_of_rank, nranks);
  int hosts = 0, per_host = -1, ok = v != NULL;
  for (int i = 0, start = 0; ok && i <= nranks; i++) {
    if (i < nranks && (i == 0 || v[i].key == v[start].key)) continue;
    if (per_host >= 0 && i - start != per_host) ok = 0;
    per_host = i - start, start = i, hosts++;
  }
  free(v);
  return ok && hosts >= 2 && per_host >= 1;
}

/* Fills the local ring (ranks of my host, by rank) and the cross ring (the rank at my local
 * position on every host, hosts ordered by their first rank). Returns 0 or -1 (out of memory). */
static int make_rings(const int *host_of_rank, int n, int me, ring_t *local, ring_t *cross) {
  keyed_t *v = hosts_in_order(host_of_rank, n);
  if (!v) return -1;
  local->n = cross->n = 0;
  for (int i = 0; i < n; i++)
    if (host_of_rank[v[i].rank] == host_of_rank[me]) {
      if (v[i].rank == me) local->pos = local->n;
      local->ranks[local->n++] = v[i].rank;
    }
  for (int i = 0, start = 0; i < n; i++) {
    if (v[i].key != v[start].key) start = i;
    if (i - start != local->pos) continue;
    if (v[i].rank == me) cross->pos = cross->n;
    cross->ranks[cross->n++] = v[i].rank;
  }
  free(v);
  return 0;
}

int hier_allreduce(const sched_args_t *a, const int *host_of_rank, sched_t *s) {
  int n = a->nranks;
  ring_t local = {calloc((size_t)n, sizeof(int)), 0, 0},
         cross = {calloc((size_t)n, sizeof(int)), 0, 0};
  int rc = -1;
  if (!local.ranks || !cross.ranks) goto out;
  if (make_rings(host_of_rank, n, a->rank, &local, &cross) != 0) goto out;
  if (cross.n < 2) { /* one host: the hierarchy is the flat ring */
    rc = ring_allreduce(a, s);
    goto out;
  }
  int m = local.n;
  size_t chunk = a->chunk ? a->chunk : 1;
  /* my block after phase 1: the one a ring reduce-scatter leaves at position pos */
  size_t bo = m > 1 ? block_start(a->count, m, tutti_mod(local.pos + 1, m)) : 0;
  size_t blen = (m > 1 ? block_start(a->count, m, tutti_mod(local.pos + 1, m) + 1) : a->count) - bo;
  if (m > 1 && local_reduce_scatter(&local, 0, a->count, chunk, s) != 0) goto out;
  if (cross_allreduce(&cross, bo, blen, chunk, m > 1 ? BUF_RECV : BUF_SEND, s) != 0) goto out;
  if (m > 1 && local_all_gather(&local, 0, a->count, chunk, s) != 0) goto out;
  rc = 0;
out:
  free(local.ranks);
  free(cross.ranks);
  return rc;
}

/* Cost: three rings pipelined as cost_ring_steps costs them, with H hosts of m ranks each
 * (hier_ok: the same number on every host): 2(m-1) steps of S/m inside the host, then 2(H-1)
 * steps of S/(mH) across hosts, where all m lanes cross the network at once, s = ceil(m / NICs)
 * of them through the busiest NIC (cost_nic_share): each step's latency passes while the other
 * lanes' transfers keep the NIC busy. */
static double hier_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  (void)c;
  if (!t->hier_ok || t->nhosts < 2) return -1;
  int mm = t->local_size, H = t->nhosts;
  return cost_ring_steps(m, t, 2.0 * (mm - 1), S / mm, 0, 1) +
         cost_ring_steps(m, t, 2.0 * (H - 1), S / mm / H, 1, cost_nic_share(t));
}

static int build_allreduce(const sched_args_t *a, sched_t *col, sched_t *lanes) {
  (void)lanes;
  return a->host_of_rank ? hier_allreduce(a, a->host_of_rank, col) : -2;
}

const algo_desc_t algo_hier = {
    .name = "hier",
    .summary = "ring inside each host, ring across hosts on 1/m of the data, ring inside again",
    .build = {[COLL_ALLREDUCE] = build_allreduce},
    .cost_us = hier_cost,
};
