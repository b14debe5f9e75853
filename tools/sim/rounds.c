/* tutti-sim: the rounds method, for schedules that repeat one pipeline round after another
 * (the double binary tree: every rank's steps for round t are its steps for round t-1 with the
 * offsets moved on). The tree has no symmetry that maps the cluster onto itself (symmetry.c),
 * but it has one in time: once the pipeline is full, round t+1 runs as round t did, one period
 * later.
 *
 *   count = R rounds of round_elems (the registry entry says how many elements a round takes)
 *   simulate K << R rounds (count - (R - K) round_elems) with every rank, recording when every
 *   step of every lane ends:
 *
 *     lane i, steps   | round 0 | round 1 | ... | round K-W-3 ... K-4 | last 3 periods |
 *     ends            |       transient         |  checked window     |      tail      |
 *
 *   check, for every lane i and every step j of the window: step j + P_i is step j (same peers,
 *   count and flags) and ends exactly D later, one D for all lanes (P_i: steps per round of
 *   lane i, the difference between its schedules of K+1 and K rounds; "exactly": des.c keeps
 *   every time an exact multiple of a quantum, so equal paths give equal times, bit for bit);
 *   then the call of R rounds ends at T(K) + (R - K) D.
 *
 * Why this is exact: the simulation is deterministic and invariant under adding a constant to
 * every time; what a step does depends on the state the rank's channels and NICs were left in
 * by earlier pieces, which reaches back at most a FIFO's depth of pieces on a channel (credits)
 * and the last piece on a NIC. When W consecutive rounds, W covering that reach, repeat the
 * round before them shifted by D, the next round does too, and so on: the rounds taken out would
 * each have added D, and the tail is the simulated one moved by (R - K) D. What is checked is
 * every step's end (pieces inside a step are not compared); the tests compare the method with
 * the full simulation. Where no period shows within K rounds, K doubles, up to R/2; then the
 * caller simulates in full.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* Longest cycle looked for: some schedules repeat every 2 rounds (the tree on 16 x 2 ranks and
 * one NIC alternates two orders of its NIC's pieces). */
#define ROUNDS_MAX_CYCLE 4

typedef struct trunc {
  sim_lane_t *lanes;
  int nlanes, approx;
  sim_sym_t sym;
} trunc_t;

static void trunc_free(trunc_t *t) {
  sim_lanes_free(t->lanes, t->nlanes);
  memset(t, 0, sizeof *t);
}

/* The lanes of the call with `rounds_out` rounds taken out. Returns 0, or sim_build's code. */
static int build_trunc(const sim_cluster_t *c, const sched_args_t *a, algo_t algo,
                       size_t rounds_out, size_t round_elems, size_t max_steps, trunc_t *t,
                       char *msg, size_t msglen) {
  sched_args_t b = *a;
  b.count = a->count - rounds_out * round_elems;
  return sim_build(c, &b, algo, SIM_AUTO, max_steps, &t->lanes, &t->nlanes, &t->sym, &t->approx,
                   msg, msglen);
}

static int same_step(const sim_step_t *x, const sim_step_t *y) {
  return x->recv == y->recv && x->send == y->send && x->count == y->count && x->flags == y->flags;
}

/* The period D of `cyc` rounds of lane l's window (D: the other lanes', NAN for the first), or
 * NAN where its steps do not repeat every round or their times every `cyc` rounds exactly
 * (des.c's times are exact multiples of a quantum, so a shift by a period is exact too). */
static double lane_period(const sim_lane_t *l, size_t P, const double *done, int window, int cyc,
                          double D) {
  if (P == 0 || l->n < (size_t)(window + cyc + 4) * P) return NAN;
  size_t hi = l->n - (size_t)(3 + cyc) * P, lo = hi - (size_t)window * P, cp = (size_t)cyc * P;
  for (size_t j = lo; j < hi; j++) {
    double dj = done[j + cp] - done[j];
    if (!same_step(&l->steps[j], &l->steps[j + P])) return NAN;
    if (isnan(D)) D = dj;
    if (dj != D) return NAN;
  }
  return D;
}

/* Rounds a step's effect can reach back: a channel carries at most two chunks a round, and a
 * piece waits for the credit of the piece a FIFO's depth earlier; a NIC remembers its last
 * piece. Generous: every chunk counted as one piece of each channel per round. */
static int reach_rounds(const sim_cluster_t *c, const sched_args_t *a, int esize) {
  size_t slot = sim_comm_slot(c), chunk_bytes = (a->chunk ? a->chunk : 1) * (size_t)esize;
  size_t pieces = (chunk_bytes + slot - 1) / slot;
  int depth = c->fifo_intra > 2 * c->fifo_inter ? c->fifo_intra : 2 * c->fifo_inter;
  return 2 + (int)((depth + pieces - 1) / pieces);
}

/* Simulates K rounds (rounds_out taken out) and checks the period; 0 found (r filled), 1 none,
 * -1 error. */
static int try_rounds(const sim_cluster_t *c, const sched_args_t *a, algo_t algo, int esize,
                      size_t rounds_out, size_t re, int window, size_t max_steps, sim_result_t *r) {
  trunc_t k = {0}, k1 = {0};
  double **done = NULL;
  int rc = build_trunc(c, a, algo, rounds_out, re, max_steps, &k, r->msg, sizeof r->msg);
  if (rc == 0)
    rc = build_trunc(c, a, algo, rounds_out - 1, re, max_steps, &k1, r->msg, sizeof r->msg);
  if (rc != 0) goto out;
  rc = 1;
  if (k.nlanes != k1.nlanes || k.sym.kind != k1.sym.kind) goto out;
  done = calloc((size_t)k.nlanes, sizeof *done);
  for (int i = 0; done && i < k.nlanes; i++)
    if (!(done[i] = malloc((k.lanes[i].n ? k.lanes[i].n : 1) * sizeof(double)))) break;
  if (!done || (k.nlanes && !done[k.nlanes - 1])) {
    snprintf(r->msg, sizeof r->msg, "out of memory recording the rounds");
    rc = -1;
    goto out;
  }
  if (sim_des_trace(c, k.lanes, k.nlanes, &k.sym, esize, done, r) != 0) {
    rc = -1;
    goto out;
  }
  double D = NAN;
  int cyc;
  for (cyc = 1; cyc <= ROUNDS_MAX_CYCLE && isnan(D); cyc++)
    for (int i = 0; i < k.nlanes && (i == 0 || !isnan(D)); i++) {
      if (k.lanes[i].rank != k1.lanes[i].rank || k1.lanes[i].n < k.lanes[i].n)
        D = NAN;
      else
        D = lane_period(&k.lanes[i], k1.lanes[i].n - k.lanes[i].n, done[i], window, cyc, D);
    }
  if (isnan(D) || rounds_out % (size_t)--cyc) goto out;
  r->time += (double)(rounds_out / (size_t)cyc) * D;
  snprintf(r->method, sizeof r->method, "rounds/%zu%s", a->count / re - rounds_out,
           k.sym.kind == SYM_NONE ? "" : "+sym");
  r->simulated = k.sym.kind == SYM_NONE ? sim_nranks(c) : k.sym.period;
  rc = 0;
out:
  for (int i = 0; done && i < k.nlanes; i++) free(done[i]);
  free(done);
  trunc_free(&k);
  trunc_free(&k1);
  return rc;
}

int sim_run_rounds(const sim_cluster_t *c, const sched_args_t *a, algo_t algo, int esize,
                   size_t max_steps, sim_result_t *r) {
  const algo_desc_t *d = algo_get(algo);
  size_t re = d && d->round_elems && algo_implements(algo, a->coll) ? d->round_elems(a) : 0;
  if (re == 0 || sim_nranks(c) < 2) return 1;
  size_t rounds = a->count / re;
  int window = reach_rounds(c, a, esize);
  /* first the fewest rounds that can show a period of one round (the usual case), then enough
   * for every cycle up to ROUNDS_MAX_CYCLE, doubling */
  size_t first = (size_t)window + 1 + 4;
  if (first < rounds) {
    memset(r, 0, sizeof *r);
    int rc = try_rounds(c, a, algo, esize, rounds - first, re, window, max_steps, r);
    if (rc != 1) return rc;
  }
  for (size_t keep = (size_t)window + ROUNDS_MAX_CYCLE + 4; keep < rounds; keep *= 2) {
    keep += (rounds - keep) % 12; /* the rounds taken out: a multiple of every cycle tried */
    if (keep >= rounds) break;
    memset(r, 0, sizeof *r);
    int rc = try_rounds(c, a, algo, esize, rounds - keep, re, window, max_steps, r);
    if (rc != 1) return rc;
  }
  memset(r, 0, sizeof *r);
  return 1;
}
