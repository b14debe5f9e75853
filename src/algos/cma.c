/* CMA collectives (those of direct.c): ranks of one host read (and write) each
 * other's buffers by copy (the transport's mem_read / mem_write; shm: process_vm_readv and
 * process_vm_writev, "cross-memory attach"), for memory the peers cannot map (heap). The
 * engine (engine_peer.c) runs the peer steps reading instead of mapping:
 *
 *   all-reduce, n ranks, segment r = block_start(count, n, r) owned by rank r:
 *   PEER_REDUCE + STEP_PUSH  per piece of TUTTI_CMA_PIECE_BYTES: read the piece of every peer's
 *                send buffer into an L2-resident buffer (kernel copy: peer's pages -> buffer),
 *                reduce it with this rank's own piece into the receive buffer, then write the
 *                piece, still in cache, into every peer's receive buffer (kernel copy again)
 *   PEER_DONE    wait until every owner has pushed its segment (and read all it needs)
 *   reduce-scatter: direct's schedule (PEER_REDUCE of the own block, PEER_DONE)
 *   all-gather:     direct's schedule (PEER_COPY of every peer's send buffer, PEER_DONE)
 *   broadcast, reduce, gather, scatter, all-to-all: direct's schedules (direct.c), each peer's
 *                   buffer read by copy
 *
 * Pushing rather than pulling the result: segment r of every rank's buffers is touched by its
 * owner r alone (read, then written), so no rank waits for another's progress, and the writes
 * come from the owner's cache instead of lines another core has just read (in place, pulling
 * would write lines the peer holds).
 *
 * Cost per rank, n ranks, S bytes: 2(n-1)/n S through the kernel's copy for the all-reduce
 * (half read into the L2 buffer, half written into the peers' results), direct_moved's bytes for
 * the others,
 * plus the handshake (every rank's buffer addresses, one FIFO message per peer), one system call
 * per piece and peer, and the final wait: lat + moved / b_read, with TUTTI_TUNER_PEER_READ_LAT_US
 * and TUTTI_TUNER_PEER_READ_GBPS. The FIFOs (ring) copy every byte twice (into a slot, out of
 * it) and cost a hop per chunk; the tuner weighs the two. Preconditions: one host, every rank
 * able to read every other's memory (agreed by all ranks when the communicator was set up:
 * comm->peer_read), the call at least TUTTI_CMA_MIN_BYTES (TUTTI_CMA_COPY_MIN_BYTES for broadcast,
 * gather, scatter and all-to-all, which the FIFOs copy twice where cma copies once: 2 ranks,
 * 128 KiB per block, cma 1.45-1.86x the FIFOs on an Intel Xeon guest), no PreMulSum. The invariants
 * are direct's: one owner per segment (bitwise the same result on every rank, run to run), in place
 * safe because a rank reads another's segment k only once k's owner says it is final.
 */
#include "algos/registry.h"
#include "core.h"

/* The all-to-all reads each peer's block in one system call, as the p2p lanes' rendezvous does
 * (or, in place, exchanges it in pieces of TUTTI_CMA_PIECE_BYTES): the handshake's latency
 * (direct's) and the rendezvous's bandwidth. 2 ranks, heap buffers, out of place: cma and p2p
 * alike from 256 KiB to 4 MiB (1.02-1.06x p2p's time), where the reductions' peer-read level
 * would say 1.3-1.7x. */
static double cma_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks;
  int copies = c == COLL_BROADCAST || c == COLL_GATHER || c == COLL_SCATTER || c == COLL_ALLTOALL;
  size_t min = copies ? t->peer_read_copy_min_bytes : t->peer_read_min_bytes;
  if (!t->peer_read || n < 2 || t->nhosts != 1 || S < (double)min) return -1;
  if (c == COLL_ALLTOALL) {
    tuner_level_t one_call = {m->peer.lat_us, m->rdv.gbps};
    return cost_peer(m, &one_call, n, direct_moved(c, n, S));
  }
  return cost_peer(m, &m->peer_read, n, direct_moved(c, n, S));
}

ALGO_COL_BUILDER(build_allreduce, push_allreduce) /* algos/push.c */

const algo_desc_t algo_cma = {
    .name = "cma",
    .summary = "one host: read the peers' buffers by copy (process_vm_readv; heap memory)",
    .build = DIRECT_BUILD_TABLE(build_allreduce),
    .cost_us = cma_cost,
    .needs = ALGO_NEEDS_PEER_READ | ALGO_NEEDS_PLAIN_OP,
};
