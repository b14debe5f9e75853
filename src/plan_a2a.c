/* The in-place all-to-all's input (plan.h): its receives land in blocks still to be sent (and,
 * on the peer path, blocks the peers still read). With peer steps its ranks exchange blocks
 * (plan.c's agree_all: it says so in its handshake, and every rank then swaps each pair's
 * blocks, direct.c); through the FIFOs each block goes out before the peer's comes into its
 * place (args.swap: FIFO_SWAP steps, algos/p2p.c), where the transports and the group allow it;
 * otherwise it sends from a copy of the input. */
#include <string.h>

#include "plan.h"

int plan_a2a_needs_copy(const pending_t *p) {
  return p->args.coll == COLL_ALLTOALL && p->args.in_place && p->args.count > 0 &&
         p->ctx.buf[BUF_SEND] == p->ctx.buf[BUF_RECV];
}

/* Whether comm's FIFOs carry FIFO_SWAP steps of `bytes`: every peer's connections send through
 * slots (send_post) and receive through them (schedule.h; shm and ib, not tcp, whose pieces all
 * go out from memory). Where a transport sends from memory too (ib), only blocks below its
 * rendezvous size: from there the copy of the input is the only copy this rank makes (the NIC
 * writes into the peer's buffer), where the swap would make two. */
static int fifo_swaps(ncclComm_t comm, size_t bytes) {
  for (int q = 0; q < comm->nranks; q++) {
    const conn_t *sc = &comm->send_conn[q];
    const transport_t *s = sc->transport, *r = comm->recv_conn[q].transport;
    if (q == comm->rank) continue;
    if (!s || !r || !s->send_slot || !s->send_post || r->recv_into) return 0;
    if (s->send_from && sc->large_bytes && bytes >= sc->large_bytes) return 0;
  }
  return 1;
}

static int uses_lanes(const pending_t *p) {
  return (algo_get(p->ctx.algo)->needs & ALGO_USES_LANES) != 0;
}

/* An in-place all-to-all on host memory whose blocks the communicator's FIFOs can swap. */
static int swappable(const pending_t *p) {
  return p->args.coll == COLL_ALLTOALL && p->args.in_place && !p->ctx.dev &&
         fifo_swaps(p->ctx.comm, p->args.count * p->ctx.esize);
}

/* One that, alone on its communicator's lanes, swaps them: its algorithm the FIFOs' (lane
 * steps, no peer steps). */
static int swaps_alone(const pending_t *p) {
  return uses_lanes(p) && !(algo_get(p->ctx.algo)->needs & ALGO_PEER_STEPS) && swappable(p);
}

/* A receive in a lane of its own would take from the FIFO that a FIFO_SWAP step, in the send
 * lane, also takes from: their order would be the engine's, not the program's. So every call of
 * the group with lane steps on the communicator must swap. */
void plan_a2a_swaps(pending_t *ops, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ops[i].args.swap = swaps_alone(&ops[i]);
    for (size_t j = 0; j < n && ops[i].args.swap; j++) {
      const pending_t *o = &ops[j];
      if (j != i && o->ctx.comm == ops[i].ctx.comm && !plan_self_p2p(o) && uses_lanes(o) &&
          !swaps_alone(o))
        ops[i].args.swap = 0;
    }
  }
}

void plan_a2a_cached_swap(pending_t *p) {
  p->args.swap = swappable(p);
}

ncclResult_t plan_a2a_copy_input(ncclComm_t comm, pending_t *p) {
  size_t blk = p->args.count * p->ctx.esize, r = (size_t)comm->rank, n = (size_t)comm->nranks;
  char *copy = plan_temp_alloc(blk * n);
  if (!copy) return TUTTI_ERR(ncclSystemError, "out of memory for an in-place all-to-all copy");
  /* the other ranks' blocks: the own one is already its own result, and the schedules leave it
   * where it is in place */
  const char *in = p->ctx.buf[BUF_SEND];
  memcpy(copy, in, r * blk);
  memcpy(copy + (r + 1) * blk, in + (r + 1) * blk, (n - r - 1) * blk);
  p->ctx.buf[BUF_SEND] = copy;
  return ncclSuccess;
}
