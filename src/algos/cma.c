/* CMA all-reduce, reduce-scatter and all-gather: ranks of one host read each other's buffers by
 * copy (the transport's mem_read; shm: process_vm_readv, "cross-memory attach"), for memory the
 * peers cannot map (heap). The schedules are direct's (direct.c: PEER_REDUCE of the own
 * segment from every rank's send buffer, PEER_COPY of the others' segments after their
 * progress, PEER_DONE); the engine (engine_peer.c) runs them reading instead of mapping:
 *
 *   PEER_REDUCE  per piece of TUTTI_CMA_PIECE_BYTES: read the piece of every peer's send buffer
 *                into an L2-resident buffer (kernel copy: peer's pages -> buffer), then reduce
 *                it with this rank's own piece into the receive buffer; publish progress
 *   PEER_COPY    read the owner's final segment straight into the receive buffer (one copy)
 *
 * Cost per rank, n ranks, S bytes: 2(n-1)/n S through the kernel's copy for the all-reduce
 * (half into the L2 buffer, half into the result), (n-1)/n S for the others, plus the
 * handshake (every rank's buffer addresses, one FIFO message per peer), one system call per
 * piece and peer, and the final wait: lat + moved / b_read, with TUTTI_TUNER_PEER_READ_LAT_US
 * and TUTTI_TUNER_PEER_READ_GBPS. The FIFOs (ring) copy every byte twice (into a slot, out of
 * it) and cost a hop per chunk; the tuner weighs the two. Preconditions: one host, every rank
 * able to read every other's memory (agreed by all ranks when the communicator was set up:
 * comm->peer_read), the call at least TUTTI_CMA_MIN_BYTES, no PreMulSum. The invariants are
 * direct's: one owner per segment (bitwise the same result on every rank, run to run), in place
 * safe because a rank reads another's segment k only once k's owner says it is final.
 */
#include "algos/registry.h"
#include "core.h"

static double cma_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  if (!t->peer_read || n < 2 || t->nhosts != 1 || S < (double)t->peer_read_min_bytes) return -1;
  double moved = (c == COLL_ALLREDUCE ? 2.0 : 1.0) * (n - 1) / n * S;
  return m->peer_read.lat_us + moved / (m->peer_read.gbps * 1e3);
}

ALGO_COL_BUILDER(build_allreduce, direct_allreduce)
ALGO_COL_BUILDER(build_reducescatter, direct_reducescatter)
ALGO_COL_BUILDER(build_allgather, direct_allgather)

const algo_desc_t algo_cma = {
    .name = "cma",
    .summary = "one host: read the peers' buffers by copy (process_vm_readv; heap memory)",
    .build = {[COLL_ALLREDUCE] = build_allreduce,
              [COLL_REDUCESCATTER] = build_reducescatter,
              [COLL_ALLGATHER] = build_allgather},
    .cost_us = cma_cost,
    .needs = ALGO_NEEDS_PEER_READ | ALGO_NEEDS_PLAIN_OP,
};
