/* Push all-reduce: ranks of one host whose buffers the peers map (ncclMemAlloc memory, or
 * threads of one process) reduce their own segment from every rank's send buffer in place and
 * then write it, piece by piece while it is still in cache, into every other rank's receive
 * buffer through the mapping: cma's schedule (algos/cma.c) with stores instead of
 * process_vm_writev.
 *
 *   PEER_REDUCE + STEP_PUSH  own segment r = x(r) (+) ... from all n send buffers (direct's
 *                            order, so the same bits as direct and cma), then into every rank's
 *                            receive buffer at the same place
 *   PEER_DONE                wait until every owner has pushed its segment
 *
 * Against direct, which pulls: there rank k copies segment r out of rank r's receive buffer,
 * lines rank r's core has just written, and rank r writes its segment over lines rank k read in
 * the last call; each is a cache-line transfer between cores, paid per line and slow where the
 * two cores sit far apart. Here segment r of every buffer is written by rank r alone, call
 * after call, and no line another core has just written is read. Calls from TUTTI_NT_THRESHOLD
 * (out of place) store into the peers' buffers with streaming stores (engine_peer.c).
 *
 * Cost: direct's bytes (2(n-1)/n S per rank) at its own level of the model, lat + moved / b
 * with TUTTI_TUNER_PEER_PUSH_LAT_US and _GBPS (the handshake and final wait; one rank's reads
 * and writes), from TUTTI_PUSH_MIN_BYTES. In place is safe: rank r reads and then writes only
 * segment r of each buffer, and no other rank touches it. No PreMulSum (the reduction reads
 * each input once, unscaled); host buffers only (the device path runs direct).
 */
#include "algos/registry.h"
#include "core.h"

int push_allreduce(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  size_t c = a->count, b = block_start(c, n, r);
  SCHED_PUSH(.kind = STEP_PEER_REDUCE, .recv_peer = r, .send_peer = -1, .src_buf = BUF_SEND,
             .dst_buf = BUF_RECV, .flags = STEP_STORE | STEP_POST | STEP_PUSH, .src_off = b,
             .dst_off = b, .count = block_start(c, n, r + 1) - b);
  SCHED_PUSH(.kind = STEP_PEER_DONE, .recv_peer = -1, .send_peer = -1, .src_buf = BUF_NONE,
             .dst_buf = BUF_NONE);
  return 0;
}

static double push_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  if (c != COLL_ALLREDUCE || !t->peer_mem || n < 2 || t->nhosts != 1 ||
      S < (double)t->push_min_bytes)
    return -1;
  return m->peer_push.lat_us + 2.0 * (n - 1) / n * S / (m->peer_push.gbps * 1e3);
}

ALGO_COL_BUILDER(build_allreduce, push_allreduce)

const algo_desc_t algo_push = {
    .name = "push",
    .summary =
        "one host: reduce the own segment from the peers' mapped buffers, write it into theirs",
    .build = {[COLL_ALLREDUCE] = build_allreduce},
    .cost_us = push_cost,
    .needs = ALGO_NEEDS_PEER_MEMORY | ALGO_NEEDS_PLAIN_OP,
};
