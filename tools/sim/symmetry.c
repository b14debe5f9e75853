/* tutti-sim: which ranks to simulate. The full method simulates every rank; the fast method
 * simulates one representative per class of a symmetry of the schedule and lets it stand for
 * every rank of its class.
 *
 *   ring, 4 nodes x 2 ranks, shift by T = 2 (one node):   0 1 | 2 3 | 4 5 | 6 7
 *   ranks 0 and 1 are simulated; rank 5 is rank 1 moved by 4 (its peers 4 and 6 are rank 1's
 *   peers 0 and 2 moved by 4), so rank 5's timeline is rank 1's.
 *
 * A symmetry is a group of maps g of the ranks onto themselves that keep the cluster (nodes onto
 * nodes, a rank's NIC, leaf switches onto leaf switches) and the schedule (g's image of rank q's
 * steps are rank g(q)'s steps: same counts and flags, peers moved by g). Two kinds are tried,
 * with period T = ranks per node (times nodes per leaf switch when the fabric is oversubscribed,
 * times nodes per machine with the CPU model: a class must hold whole CPU pools):
 *   shift  g(x) = x - k*T mod n       rings (ring, hier), most rank-rotation-invariant schedules
 *   xor    g(x) = x ^ (k*T)           butterflies (recursive doubling / halving) on 2^k ranks
 * Under a symmetry every rank of a class starts and ends each step at the same time as its
 * representative, so simulating the T representatives is exact: a message representative c
 * sends to rank q travels on the channel (c, q); the receiver rep(q) looks for what it receives
 * from p on the image channel (rep(p), g_p(rep(q))), and a NIC of node x is the NIC of g(x)'s
 * node. The cost drops from n to T ranks (65,536 ranks of 8 per node: 8 simulated ranks).
 *
 * The symmetry is not assumed, it is checked on samples: the schedules of the ranks 1, n/2T
 * and n/T - 1 periods away from representatives 0 and T-1 must be the representative's moved
 * by g (a sample, not a proof: building every schedule would cost what the fast method saves;
 * sim_run redoes the call in full when the simulation then finds a piece of the wrong size or a
 * rank left waiting).
 * Block sizes of count/n that differ by one element (count not a multiple of n) are accepted and
 * mark the result approximate ("~"). Multi-lane schedules (point-to-point algorithms) and schedules
 * without such a symmetry (trees, one-shot, whose order of folding is rank 0 first on every rank)
 * are simulated in full.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

typedef struct builder {
  sched_t col;
  sched_t *lanes; /* 2n point-to-point lanes, only for algorithms that use them */
  int *host;      /* host_of_rank */
  int n;
} builder_t;

static int builder_init(builder_t *b, const sim_cluster_t *c, coll_t coll, algo_t algo) {
  memset(b, 0, sizeof *b);
  b->n = sim_nranks(c);
  b->host = malloc((size_t)b->n * sizeof(int));
  if (!b->host) return -1;
  for (int r = 0; r < b->n; r++) b->host[r] = r / c->ppn;
  if (algo == ALGO_P2P || coll == COLL_SEND || coll == COLL_RECV) {
    b->lanes = calloc(2 * (size_t)b->n, sizeof(sched_t));
    if (!b->lanes) return -1;
  }
  return 0;
}

static void builder_free(builder_t *b) {
  sched_free(&b->col);
  if (b->lanes)
    for (int i = 0; i < 2 * b->n; i++) sched_free(&b->lanes[i]);
  free(b->lanes);
  free(b->host);
}

static int compact(const sched_t *s, int rank, sim_lane_t *out) {
  out->steps = malloc((s->n ? s->n : 1) * sizeof(sim_step_t));
  out->n = 0;
  out->rank = rank;
  if (!out->steps) return -1;
  for (size_t i = 0; i < s->n; i++) {
    const step_t *st = &s->steps[i];
    if (st->count == 0) continue; /* the engine skips them */
    if (st->count > UINT32_MAX) return -1;
    out->steps[out->n++] =
        (sim_step_t){st->recv_peer, st->send_peer, (uint32_t)st->count, SIM_FLAGS(st->flags)};
  }
  return 0;
}

/* Appends rank's non-empty lanes to *lanes (grown as needed). Returns 0, -2, -1. */
static int build_rank(builder_t *b, const sched_args_t *a0, algo_t algo, int rank,
                      sim_lane_t **lanes, int *nlanes, int *cap) {
  sched_args_t a = *a0;
  a.rank = rank;
  sched_reset(&b->col);
  if (b->lanes)
    for (int i = 0; i < 2 * b->n; i++) sched_reset(&b->lanes[i]);
  int rc = sched_build(algo, &a, b->host, &b->col, b->lanes);
  if (rc != 0) return rc;
  int nl = b->lanes ? 2 * b->n : 0;
  for (int i = -1; i < nl; i++) {
    const sched_t *s = i < 0 ? &b->col : &b->lanes[i];
    if (s->n == 0) continue;
    if (*nlanes == *cap) {
      int ncap = *cap ? *cap * 2 : 16;
      sim_lane_t *p = realloc(*lanes, (size_t)ncap * sizeof *p);
      if (!p) return -1;
      *lanes = p, *cap = ncap;
    }
    if (compact(s, rank, &(*lanes)[*nlanes]) != 0) return -1;
    ++*nlanes;
  }
  return 0;
}

void sim_lanes_free(sim_lane_t *lanes, int nlanes) {
  for (int i = 0; i < nlanes; i++) free(lanes[i].steps);
  free(lanes);
}

/* Is lane q (of rank q) lane c (of its representative) moved by the symmetry? 1 yes, 0 no;
 * *approx set when counts differ by one element. */
static int same_moved(const sim_sym_t *s, const sim_lane_t *q, const sim_lane_t *c, int *approx) {
  if (q->n != c->n) return 0;
  for (size_t i = 0; i < q->n; i++) {
    const sim_step_t *x = &q->steps[i], *y = &c->steps[i];
    int rx = x->recv < 0 ? -1 : sym_map(s, q->rank, x->recv);
    int sx = x->send < 0 ? -1 : sym_map(s, q->rank, x->send);
    if (rx != y->recv || sx != y->send || x->flags != y->flags) return 0;
    if (x->count != y->count) {
      if (x->count + 1 != y->count && y->count + 1 != x->count) return 0;
      *approx = 1;
    }
  }
  return 1;
}

/* Checks sampled ranks of sampled classes against the representatives. 1 holds, 0 not, -1 oom. */
static int verify(builder_t *b, const sched_args_t *a, algo_t algo, const sim_sym_t *s,
                  const sim_lane_t *reps, int *approx) {
  int T = s->period, m = s->n / T;
  int classes[2] = {0, T - 1}, mult[3] = {1, m / 2, m - 1};
  for (int ci = 0; ci < 2; ci++) {
    for (int mi = 0; mi < 3; mi++) {
      int c = classes[ci], j = mult[mi];
      if (c >= T || j < 1 || j >= m) continue;
      sim_lane_t *lq = NULL;
      int nq = 0, cap = 0, ok;
      if (build_rank(b, a, algo, c + j * T, &lq, &nq, &cap) != 0) {
        sim_lanes_free(lq, nq);
        return -1;
      }
      ok = nq == 1 && same_moved(s, &lq[0], &reps[c], approx);
      sim_lanes_free(lq, nq);
      if (!ok) return 0;
    }
  }
  return 1;
}

static int is_pow2(int x) {
  return x > 0 && (x & (x - 1)) == 0;
}

/* Tries the fast method: 1 found (lanes, sym set), 0 none, -2 not implemented, -1 error. */
static int try_fast(builder_t *b, const sim_cluster_t *cl, const sched_args_t *a, algo_t algo,
                    sim_lane_t **lanes, int *nlanes, sim_sym_t *sym, int *approx) {
  int n = b->n, T = cl->ppn;
  if (cl->oversub > 1 && cl->nodes > cl->leaf_nodes) T *= cl->leaf_nodes;
  if (cl->cpus > 0 && cl->machine_nodes > 1) { /* a class must cover whole CPU pools */
    if (cl->oversub > 1 && cl->nodes > cl->leaf_nodes && cl->machine_nodes % cl->leaf_nodes &&
        cl->leaf_nodes % cl->machine_nodes)
      return 0; /* machines and leaves not nested: no common period */
    int mn = cl->machine_nodes * cl->ppn;
    if (mn > T) T = mn;
  }
  if (T >= n || n % T != 0 || b->lanes) return 0;
  int cap = 0, rc = 0;
  for (int r = 0; r < T && rc == 0; r++) rc = build_rank(b, a, algo, r, lanes, nlanes, &cap);
  if (rc != 0 || *nlanes != T) return rc != 0 ? rc : 0; /* multi-lane: no fast method */
  sim_sym_t cands[2] = {{SYM_SHIFT, T, n}, {SYM_XOR, T, n}};
  for (int k = 0; k < 2; k++) {
    if (cands[k].kind == SYM_XOR && !(is_pow2(n) && is_pow2(T))) continue;
    *approx = 0;
    int v = verify(b, a, algo, &cands[k], *lanes, approx);
    if (v < 0) return -1;
    if (v == 1) return *sym = cands[k], sym->approx = *approx, 1;
  }
  return 0;
}

/* Steps of the full simulation, estimated from 5 ranks spread over the communicator before
 * building any other: *kept the non-empty steps (what the simulation holds), *built every step
 * the builders make (a ring of 65,536 ranks on 2 elements builds 131,070 steps per rank to keep
 * 2). Returns 0, or build_rank's code. */
static int estimate_full(builder_t *b, const sched_args_t *a, algo_t algo, double *kept,
                         double *built) {
  int n = b->n, sample[5] = {0, n / 4, n / 2, 3 * n / 4, n - 1}, ns = 0;
  double k = 0, all = 0;
  for (int i = 0; i < 5; i++) {
    if (i > 0 && sample[i] == sample[i - 1]) continue;
    sim_lane_t *l = NULL;
    int nl = 0, cap = 0, rc = build_rank(b, a, algo, sample[i], &l, &nl, &cap);
    all += (double)b->col.n;
    for (int j = 0; j < 2 * n && b->lanes; j++) all += (double)b->lanes[j].n;
    for (int j = 0; j < nl; j++) k += (double)l[j].n;
    sim_lanes_free(l, nl);
    if (rc != 0) return rc;
    ns++;
  }
  *kept = k / ns * n, *built = all / ns * n;
  return 0;
}

static int build_full(builder_t *b, const sched_args_t *a, algo_t algo, size_t max_steps,
                      sim_lane_t **lanes, int *nlanes, char *msg, size_t msglen) {
  int cap = 0;
  size_t total = 0;
  double kept, built;
  int rc = estimate_full(b, a, algo, &kept, &built);
  if (rc != 0) return rc;
  /* refuse from the estimate, before building (a one-shot of 8,192 ranks: 6.7e7 steps); the
   * count while building stays the limit where the sample was too low */
  if (kept > (double)max_steps || built > 16.0 * (double)max_steps) {
    snprintf(msg, msglen,
             "the full simulation needs ~%.0f steps (limit %zu: --max-steps); no symmetry to "
             "simulate fewer ranks",
             kept, max_steps);
    return -1;
  }
  for (int r = 0; r < b->n; r++) {
    int first = *nlanes;
    rc = build_rank(b, a, algo, r, lanes, nlanes, &cap);
    if (rc != 0) return rc;
    for (int i = first; i < *nlanes; i++) total += (*lanes)[i].n;
    if (total > max_steps) {
      snprintf(msg, msglen,
               "the full simulation needs more than %zu steps (limit: --max-steps); no symmetry "
               "to simulate fewer ranks",
               max_steps);
      return -1;
    }
  }
  return 0;
}

int sim_build(const sim_cluster_t *c, const sched_args_t *a, algo_t algo, sim_method_t method,
              size_t max_steps, sim_lane_t **lanes, int *nlanes, sim_sym_t *sym, int *approx,
              char *msg, size_t msglen) {
  builder_t b;
  *lanes = NULL, *nlanes = 0, *approx = 0;
  *sym = (sim_sym_t){SYM_NONE, sim_nranks(c), sim_nranks(c)};
  if (algo_get(algo)->needs & ALGO_PEER_STEPS) {
    int rc = sim_build_peer(c, a, algo, lanes, nlanes);
    if (rc == -1) snprintf(msg, msglen, "out of memory building the schedules");
    return rc;
  }
  int rc = builder_init(&b, c, a->coll, algo);
  if (rc == 0 && method != SIM_FULL) {
    rc = try_fast(&b, c, a, algo, lanes, nlanes, sym, approx);
    if (rc == 1) goto out;
    sim_lanes_free(*lanes, *nlanes);
    *lanes = NULL, *nlanes = 0;
    if (rc == 0 && method == SIM_FAST) {
      snprintf(msg, msglen, "no symmetry found for the fast method");
      rc = -1;
    }
  }
  if (rc == 0) rc = build_full(&b, a, algo, max_steps, lanes, nlanes, msg, msglen);
out:
  if (rc == 1) rc = 0;
  if (rc == -1 && !msg[0]) snprintf(msg, msglen, "out of memory building the schedules");
  if (rc != 0) {
    sim_lanes_free(*lanes, *nlanes);
    *lanes = NULL, *nlanes = 0;
  }
  builder_free(&b);
  return rc;
}
