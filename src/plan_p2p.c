/* Cached point-to-point plans (plan.h): the lanes of a point-to-point algorithm's call, kept and
 * run again as lanes.
 *
 * The p2p algorithm (algos/p2p.c) builds one lane per peer and direction, and the engine advances
 * them together so that no order of sends and receives deadlocks. A cached plan keeps those
 * lanes one after another with where each ends, so that a repeat runs the same lanes without
 * the builder. Two caches keep them: the communicator's plan for a gather, scatter or all-to-all
 * alone (plan.c, keyed as any collective), and the last two groups of sends and receives here,
 * each keyed by its calls in order (kind, peer, count, element size): the exchanges of a halo
 * repeat the same group at every step, a pipeline's stages two in turn (activations forward,
 * gradients back). A group kept by neither replaces the one used less recently.
 */
#include <stdlib.h>

#include "plan.h"

int plan_lanes_keep(ncclComm_t comm, kept_lanes_t *k) {
  int n2 = 2 * comm->nranks, at = 0;
  k->nlanes = 0;
  if (!k->lane_end && !(k->lane_end = malloc((size_t)n2 * sizeof(uint32_t)))) return -1;
  sched_reset(&k->steps);
  for (int i = 0; i < n2; i++) {
    const sched_t *lane = &comm->p2p_lanes[i];
    if (!lane->n) continue;
    if (sched_append(&k->steps, lane->steps, lane->n) != 0) return -1;
    k->lane_end[at++] = (uint32_t)k->steps.n;
  }
  k->nlanes = at;
  return 0;
}

int plan_lanes_of(ncclComm_t comm, const kept_lanes_t *k, lane_t *lanes) {
  if (!k->nlanes) {
    lanes[0] = (lane_t){.comm = comm, .steps = k->steps.steps, .nsteps = k->steps.n};
    return 1;
  }
  for (int i = 0; i < k->nlanes; i++) {
    uint32_t from = i ? k->lane_end[i - 1] : 0;
    lanes[i] = (lane_t){
        .comm = comm, .steps = k->steps.steps + from, .nsteps = k->lane_end[i] - from, .phase = 1};
  }
  return k->nlanes;
}

void plan_lanes_free(kept_lanes_t *k) {
  sched_free(&k->steps);
  free(k->lane_end);
  k->lane_end = NULL;
  k->nlanes = 0;
}

/* ---- groups of sends and receives ---- */

int plan_p2p_group(const pending_t *ops, size_t n) {
  if (n == 0 || n > PLAN_P2P_MAX || tutti_param_DumpSchedule()) return 0;
  ncclComm_t comm = ops[0].ctx.comm;
  for (size_t i = 0; i < n; i++) {
    const pending_t *p = &ops[i];
    if ((p->args.coll != COLL_SEND && p->args.coll != COLL_RECV) || p->ctx.comm != comm ||
        p->args.root == p->args.rank || p->ctx.dev || p->on_stream)
      return 0;
  }
  return 1;
}

static int same_call(const struct plan_p2p_call *c, const pending_t *p) {
  return c->coll == p->args.coll && c->peer == p->args.root && c->count == p->args.count &&
         c->esize == p->ctx.esize;
}

/* The kept group ops repeats, or NULL. */
static struct plan_p2p *p2p_kept(ncclComm_t comm, const pending_t *ops, size_t n) {
  for (int k = 0; k < 2; k++) {
    struct plan_p2p *c = &comm->p2p_plan[k];
    size_t i = 0;
    if ((size_t)c->n != n) continue;
    while (i < n && same_call(&c->call[i], &ops[i])) i++;
    if (i == n) return c;
  }
  return NULL;
}

void plan_p2p_cache(const pending_t *ops, size_t n) {
  if (!plan_p2p_group(ops, n)) return;
  ncclComm_t comm = ops[0].ctx.comm;
  if (p2p_kept(comm, ops, n)) return;
  struct plan_p2p *c = &comm->p2p_plan[comm->p2p_older];
  size_t esize[PLAN_P2P_MAX];
  c->n = 0;
  if (plan_lanes_keep(comm, &c->kept) != 0 || c->kept.nlanes == 0) return;
  for (size_t i = 0; i < n; i++) {
    const pending_t *p = &ops[i];
    c->call[i] = (struct plan_p2p_call){.coll = p->args.coll,
                                        .peer = p->args.root,
                                        .count = p->args.count,
                                        .esize = p->ctx.esize,
                                        .chunk = p->args.chunk};
    esize[i] = p->ctx.esize;
  }
  c->quick = engine_quick_steps(comm, c->kept.steps.steps, c->kept.steps.n, esize);
  c->n = (int)n;
  comm->p2p_older ^= 1;
}

ncclResult_t plan_p2p_quick(pending_t *ops, size_t n, lane_t *lanes, int *nlanes, int *quick) {
  *nlanes = 0;
  ncclComm_t comm = ops[0].ctx.comm;
  const struct plan_p2p *c = p2p_kept(comm, ops, n);
  if (!c) return ncclSuccess;
  comm->p2p_older = c == &comm->p2p_plan[0]; /* the other one is now the older */
  for (size_t i = 0; i < n; i++) {           /* what plan_group does for each */
    pending_t *p = &ops[i];
    p->ctx.seq = comm->op_count++;
    p->ctx.adapt = -1, p->ctx.adapt_decide = 0;
    p->ctx.algo = ALGO_P2P, p->args.chunk = c->call[i].chunk;
    TUTTI_CHECK(plan_prepare(p));
  }
  *quick = c->quick;
  *nlanes = plan_lanes_of(comm, &c->kept, lanes);
  return ncclSuccess;
}

void plan_p2p_free(ncclComm_t comm) {
  for (int k = 0; k < 2; k++) {
    plan_lanes_free(&comm->p2p_plan[k].kept);
    comm->p2p_plan[k].n = 0;
  }
}
