/* tutti-sim: algorithms with peer steps (algos/schedule.h: PEER_REDUCE, PEER_COPY, PEER_DONE)
 * as messages the event simulation knows.
 *
 * A peer step reads another rank's memory; the simulation has no shared memory, only FIFOs, so
 * every rank's schedule is built and each read becomes a message from the rank read to the
 * reader, at the point where the data is ready there:
 *
 *   PEER_REDUCE (count c, n ranks)  a local reduce of c (n-1) elements (reduce_bw), then one
 *                                   message of the result to every rank that copies it after
 *                                   its progress (STEP_AFTER_PROGRESS)
 *   PEER_COPY from q               a receive from q (its own lane per peer, so the copies of
 *                                   several peers overlap as the engine's do); without
 *                                   STEP_AFTER_PROGRESS q sends at the start of its schedule
 *   PEER_REDUCE + STEP_PUSH        the same reduce, then one message of the result to every
 *                                   other rank (received before its PEER_DONE)
 *   PEER_REDUCE into rank t's dst  the same reduce, then one message of the result to t
 *     (send_peer t)                 (received before its PEER_DONE)
 *   PEER_COPY of the own buffer     a local copy, then one message of it to every other rank
 *     + STEP_PUSH                   (received before its PEER_DONE)
 *   PEER_EXCHANGE with q           a receive from q (q sends at the start of its schedule) and
 *                                   a message to q (received before its PEER_DONE)
 *   PEER_DONE                      one element to every other rank and one from each
 *
 * A message through shared memory costs its sender a copy (b / intra_bw), where the real copy
 * is the reader's: the same bytes on the same machine, once per byte, where the FIFOs copy
 * twice. The handshake before the call is not modelled (two small exchanges).
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

typedef struct lane_buf {
  sim_lane_t lane;
  size_t cap;
} lane_buf_t;

static int lane_push(lane_buf_t *l, sim_step_t st) {
  if (st.count == 0) return 0;
  if (l->lane.n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    sim_step_t *p = realloc(l->lane.steps, cap * sizeof(*p));
    if (!p) return -1;
    l->lane.steps = p, l->cap = cap;
  }
  l->lane.steps[l->lane.n++] = st;
  return 0;
}

/* Sends of rank q's data to the ranks that copy it: `after` selects the copies that wait for
 * q's progress (sent after its PEER_REDUCE) or those that do not (sent at the start). */
static int serve(lane_buf_t *main, const sched_t *all, int n, int q, int after) {
  for (int r = 0; r < n; r++)
    for (size_t i = 0; r != q && i < all[r].n; i++) {
      const step_t *st = &all[r].steps[i];
      int reads = st->kind == STEP_PEER_COPY || (st->kind == STEP_PEER_EXCHANGE && !after);
      if (reads && st->recv_peer == q && !!(st->flags & STEP_AFTER_PROGRESS) == after &&
          lane_push(main, (sim_step_t){-1, r, (uint32_t)st->count, 0}))
        return -1;
    }
  return 0;
}

/* Whether rank q's step st writes into the other ranks' buffers: PEER_REDUCE with STEP_PUSH,
 * or PEER_COPY of q's own buffer with STEP_PUSH. */
static int pushes(const step_t *st, int q) {
  return (st->flags & STEP_PUSH) &&
         (st->kind == STEP_PEER_REDUCE || (st->kind == STEP_PEER_COPY && st->recv_peer == q));
}

/* Whether rank q's step st writes into rank r's buffer alone (PEER_REDUCE with send_peer r,
 * PEER_EXCHANGE with r). */
static int writes_into(const step_t *st, int q, int r) {
  return q != r && ((st->kind == STEP_PEER_REDUCE && st->send_peer == r) ||
                    (st->kind == STEP_PEER_EXCHANGE && st->recv_peer == r));
}

/* Rank r's receives of what the other ranks push or reduce into its buffer. */
static int receive_pushes(const sched_t *all, int n, int r, lane_buf_t *lanes) {
  for (int q = 0; q < n; q++)
    for (size_t i = 0; q != r && i < all[q].n; i++) {
      const step_t *st = &all[q].steps[i];
      if ((pushes(st, q) || writes_into(st, q, r)) &&
          lane_push(&lanes[1 + q], (sim_step_t){q, -1, (uint32_t)st->count, STEP_STORE}))
        return -1;
    }
  return 0;
}

/* Rank r's pushes of its finished segment to every other rank. */
static int push_all(lane_buf_t *main, int n, int r, uint32_t count) {
  for (int q = 0; q < n; q++)
    if (q != r && lane_push(main, (sim_step_t){-1, q, count, 0})) return -1;
  return 0;
}

/* Rank r's lanes: lanes[0] its main lane, lanes[1 + q] what it receives from q. */
static int translate(const sched_t *all, int n, int r, lane_buf_t *lanes) {
  lane_buf_t *main = &lanes[0];
  if (serve(main, all, n, r, 0)) return -1;
  for (size_t i = 0; i < all[r].n; i++) {
    const step_t *st = &all[r].steps[i];
    uint32_t c = (uint32_t)st->count;
    int rc = 0;
    if (st->kind == STEP_FIFO)
      rc = lane_push(main, (sim_step_t){st->recv_peer, st->send_peer, c, SIM_FLAGS(st->flags)});
    else if (st->kind == STEP_PEER_REDUCE)
      rc = lane_push(main, (sim_step_t){-1, -1, c * (uint32_t)(n - 1), STEP_REDUCE}) ||
           serve(main, all, n, r, 1) || ((st->flags & STEP_PUSH) && push_all(main, n, r, c)) ||
           (st->send_peer >= 0 && writes_into(st, r, st->send_peer) &&
            lane_push(main, (sim_step_t){-1, st->send_peer, c, 0}));
    else if (st->kind == STEP_PEER_COPY && pushes(st, r)) /* a local copy, then to every rank */
      rc = lane_push(main, (sim_step_t){-1, -1, c, STEP_STORE}) || push_all(main, n, r, c);
    else if (st->kind == STEP_PEER_COPY)
      rc = lane_push(&lanes[1 + st->recv_peer], (sim_step_t){st->recv_peer, -1, c, STEP_STORE});
    else if (st->kind == STEP_PEER_EXCHANGE)
      rc = lane_push(&lanes[1 + st->recv_peer], (sim_step_t){st->recv_peer, -1, c, STEP_STORE}) ||
           lane_push(main, (sim_step_t){-1, st->recv_peer, c, 0});
    else if ((rc = receive_pushes(all, n, r, lanes)) == 0)
      for (int q = 0; q < n && rc == 0; q++)
        if (q != r)
          rc = lane_push(main, (sim_step_t){-1, q, 1, 0}) ||
               lane_push(&lanes[1 + q], (sim_step_t){q, -1, 1, STEP_STORE});
    if (rc) return -1;
  }
  return 0;
}

int sim_build_peer(const sim_cluster_t *c, const sched_args_t *a, algo_t algo, sim_lane_t **lanes,
                   int *nlanes) {
  int n = sim_nranks(c), rc = 0, k = 0;
  sched_t *all = calloc((size_t)n, sizeof(sched_t));
  lane_buf_t *tmp = calloc((size_t)n + 1, sizeof(lane_buf_t));
  *lanes = calloc((size_t)n * (n + 1), sizeof(sim_lane_t));
  *nlanes = 0;
  if (!all || !tmp || !*lanes) rc = -1;
  for (int r = 0; r < n && rc == 0; r++) {
    sched_args_t b = *a;
    b.rank = r;
    rc = sched_build(algo, &b, NULL, &all[r], NULL);
  }
  for (int r = 0; r < n && rc == 0; r++) {
    memset(tmp, 0, ((size_t)n + 1) * sizeof(*tmp));
    rc = translate(all, n, r, tmp);
    for (int l = 0; l <= n; l++) {
      if (rc == 0 && tmp[l].lane.n) {
        tmp[l].lane.rank = r;
        (*lanes)[k++] = tmp[l].lane;
      } else {
        free(tmp[l].lane.steps);
      }
    }
  }
  for (int r = 0; all && r < n; r++) sched_free(&all[r]);
  free(all);
  free(tmp);
  *nlanes = k;
  return rc;
}
