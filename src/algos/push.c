/* Push all-reduce and all-gather: ranks of one host whose buffers the peers map (ncclMemAlloc
 * memory, or threads of one process) write their results into every other rank's receive
 * buffer through the mapping, instead of reading the peers' buffers (direct). The all-reduce
 * reduces its own segment from every rank's send buffer in place and then writes it, piece by
 * piece while it is still in cache: cma's schedule (algos/cma.c) with stores instead of
 * process_vm_writev.
 *
 *   all-reduce  PEER_REDUCE + STEP_PUSH  own segment r = x(r) (+) ... from all n send buffers
 *                                        (direct's order, so the same bits as direct and cma),
 *                                        then into every rank's receive buffer at the same place
 *               PEER_DONE                wait until every owner has pushed its segment
 *   all-gather  PEER_COPY + STEP_PUSH    the own block, piece by piece, into place in the own
 *               of the own send buffer   receive buffer and into every other rank's
 *               PEER_DONE                wait until every rank has pushed its block
 *
 * Against direct, which pulls: there rank k copies segment r out of rank r's receive buffer,
 * lines rank r's core has just written, and rank r writes its segment over lines rank k read in
 * the last call; each is a cache-line transfer between cores, paid per line and slow where the
 * two cores sit far apart. Here segment r of every buffer is written by rank r alone, call
 * after call, and no line another core has just written is read. Calls that stream (plan.c,
 * stream_results: from TUTTI_NT_THRESHOLD where the buffers outgrow the cache) store into the
 * peers' buffers and their own with streaming stores (engine_peer.c).
 *
 * Cost: direct's bytes (2(n-1)/n S per rank for the all-reduce, (n-1)/n S for the all-gather)
 * at its own level of the model, lat + moved / b with TUTTI_TUNER_PEER_PUSH_LAT_US and _GBPS
 * (the handshake and final wait; one rank's reads and writes), the all-reduce from
 * TUTTI_PUSH_MIN_BYTES, the all-gather from TUTTI_PUSH_GATHER_MIN_BYTES (1 MiB: 2 ranks on
 * mapped memory, push against direct 1.3-1.45x at 1-4 MiB out of place on a Zen 5 guest, 0.92-
 * 0.96x on an earlier AMD guest, docs/adding-an-algorithm.md; repeated all-gathers from 64 KiB
 * are measured against direct instead, adapt.h). In place is safe: rank r writes only segment
 * (block) r of each buffer, and no other rank touches it; the all-reduce reads it before. No
 * PreMulSum (the reduction reads each input once, unscaled); host buffers only (the device path
 * runs direct).
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

/* all-gather: the own block into place and into every other rank's receive buffer (PEER_COPY
 * of the own send buffer with STEP_PUSH), then PEER_DONE. */
static int push_allgather(const sched_args_t *a, sched_t *s) {
  int r = a->rank;
  size_t c = a->count;
  SCHED_PUSH(.kind = STEP_PEER_COPY, .recv_peer = r, .send_peer = -1, .src_buf = BUF_SEND,
             .dst_buf = BUF_RECV, .flags = STEP_STORE | STEP_PUSH, .dst_off = (size_t)r * c,
             .count = c);
  SCHED_PUSH(.kind = STEP_PEER_DONE, .recv_peer = -1, .send_peer = -1, .src_buf = BUF_NONE,
             .dst_buf = BUF_NONE);
  return 0;
}

static double push_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  size_t min = c == COLL_ALLGATHER ? t->push_gather_min_bytes : t->push_min_bytes;
  if ((c != COLL_ALLREDUCE && c != COLL_ALLGATHER) || !t->peer_mem || n < 2 || t->nhosts != 1 ||
      S < (double)min)
    return -1;
  double moved = (c == COLL_ALLREDUCE ? 2.0 : 1.0) * (n - 1) / n * S;
  return cost_peer(m, &m->peer_push, n, moved);
}

ALGO_COL_BUILDER(build_allreduce, push_allreduce)
ALGO_COL_BUILDER(build_allgather, push_allgather)

const algo_desc_t algo_push = {
    .name = "push",
    .summary =
        "one host: write the own result (reduced segment, gathered block) into the peers' mapped "
        "buffers",
    .build = {[COLL_ALLREDUCE] = build_allreduce, [COLL_ALLGATHER] = build_allgather},
    .cost_us = push_cost,
    .needs = ALGO_NEEDS_PEER_MEMORY | ALGO_NEEDS_PLAIN_OP,
};
