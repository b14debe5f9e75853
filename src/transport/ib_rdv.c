/* ib transport: large steps by rendezvous, straight from the sender's buffer into the
 * receiver's, with no copy on either end (the FIFO path copies every byte into a staging slot
 * and out of the peer's FIFO slot).
 *
 * Which steps. The engine announces every STEP_WHOLE step (ncclSend / ncclRecv, all-to-all,
 * gather, scatter: a plain send from the user's buffer matched by a plain store into the
 * peer's) of at least large_bytes on both ends (TUTTI_IB_RDV_MIN, the larger of the two ranks'
 * values; 0 on either: none). Both ends count these steps alike, so step k of a connection is
 * the same message on both ends.
 *
 * Protocol for large step k of one direction (one connection):
 *   receiver  registers its destination (an ncclMemAlloc region through the cache, ib_mr.c;
 *             other memory for this step only) and writes an answer {k, address, rkey, bytes}
 *             into the sender's answer ring (address 0: it cannot, pieces), with an immediate
 *             so that a sleeping sender wakes; then waits for the step's header at its FIFO
 *   sender    registers its source likewise (at the step's start, while the receiver
 *             registers its end) and waits for answer k (an end whose bytes are not in memory
 *             as they go, buf NULL, does not wait: pieces); with an address it posts RDMA writes of
 * TUTTI_IB_RDV_CHUNK bytes spread over the connection's QPs, as many in flight as the send queues
 * hold; once every write is acknowledged (the bytes are in the receiver's memory) it sends the
 * header LARGE_DONE as a FIFO piece; otherwise the header LARGE_PIECES, and the pieces follow in
 * the FIFO receiver  the header ends the step: LARGE_DONE, the bytes are there; LARGE_PIECES, they
 *             come through the FIFO as any step's. Its own registration ends here.
 * A registration for one step only is safe for malloc'ed memory without hooks on free: it ends
 * before the call returns. A failed registration is no error: that end answers (or heads) for
 * pieces, and the step goes through the FIFO. Answers travel on QP 0 of the receive end, in
 * order; a ring of IB_RDV_RING entries suffices because answer k + IB_RDV_RING is written only
 * after step k + IB_RDV_RING - 1 ended, which needed the sender past step k. A header where a
 * piece is expected, or a piece where a header is, means the ranks called different counts:
 * the connection fails naming the peer. A peer that dies or a QP that fails mid-step shows as
 * on the data path (ib.c: completion errors, the failure board, the engine's process check);
 * a step's own registration is released when the connection closes.
 */
#include <errno.h>
#include <string.h>

#include "ib.h"

TUTTI_PARAM(IbRdvMin, "IB_RDV_MIN", 1 << 20)     /* large steps from this many bytes; 0: none */
TUTTI_PARAM(IbRdvChunk, "IB_RDV_CHUNK", 1 << 20) /* bytes per RDMA write of a large step */

/* Test hook: 1, a receiver answers "pieces" without registering; 2, a sender answers an offer
 * with the header "pieces" (the fallbacks a failed registration takes). */
TUTTI_PARAM(TestIbRdvDecline, "TEST_IB_RDV_DECLINE", 0)

enum { RDV_IDLE = 0, RDV_ANSWER, RDV_WAIT, RDV_WRITE, RDV_HEADER };

size_t ib_rdv_min(void) {
  int64_t v = tutti_param_IbRdvMin();
  return v > 0 ? (size_t)v : 0;
}

void ib_rdv_release(ib_conn_t *c) {
  if (c->rdv.own_mr && c->rdv.mr) ib_v.dereg_mr(c->rdv.mr);
  c->rdv.mr = NULL, c->rdv.own_mr = 0;
}

/* The MR covering [buf, buf + bytes): the cache's for an ncclMemAlloc region, else registered
 * for this step (access: what the peer does with it). NULL when it cannot be registered. */
static struct ibv_mr *rdv_register(ib_conn_t *c, const void *buf, size_t bytes, int access) {
  ib_state_t *st = c->st;
  struct ibv_mr *mr = ib_mr_get(st, buf, bytes);
  if (mr) return mr;
  mr = ib_v.reg_mr(st->pd, (void *)buf, bytes, access);
  if (!mr) {
    INFO(SUB_NET,
         "ib: rank %d cannot register %zu bytes at %p for a large message with rank %d "
         "(%s): it goes through the FIFO",
         st->comm->rank, bytes, buf, c->peer, strerror(errno));
    return NULL;
  }
  c->rdv.own_mr = 1;
  return mr;
}

/* ---- receive end ---- */

/* Writes answer k (this step's buffer, or none) into the sender's ring. 0 when no room yet. */
static int rdv_answer(ib_conn_t *c) {
  if (c->sq_out[0] >= c->sq_max - 1 || c->rdv_seq - c->rdv_answers >= IB_RDV_RING) return 0;
  uint32_t i = (uint32_t)(c->rdv_seq % IB_RDV_RING);
  ib_rdv_msg_t *m = &c->answers[i];
  *m = (ib_rdv_msg_t){.seq = c->rdv_seq,
                      .addr = c->rdv.mr ? (uint64_t)(uintptr_t)c->rdv.buf : 0,
                      .bytes = c->rdv.bytes,
                      .rkey = c->rdv.mr ? c->rdv.mr->rkey : 0};
  uint64_t dst = c->remote.addr + sizeof(uint64_t) + i * sizeof(ib_rdv_msg_t);
  int err = ib_post_write(c, 0, WR_ANSWER, m, c->mr->lkey, sizeof(*m), dst, c->remote.rkey, 1,
                          IB_IMM_ANSWER);
  if (err) ib_conn_fail(c, "offering its buffer for a large message to", strerror(err), err, 0);
  return 1;
}

/* The step's header at the head of the FIFO: its mode, consumed; 0 when not there yet. */
static int rdv_take_header(ib_conn_t *c) {
  uint32_t i = (uint32_t)(c->pos % c->nslots);
  if (!c->got[i]) return 0;
  int mode = c->hdr[i];
  if (!mode || (mode == LARGE_DONE && !c->rdv.mr)) {
    ib_conn_fail(c, "receiving from",
                 mode ? "a large message written without an offered buffer"
                      : "a piece where the header of a large message was expected: ranks called "
                        "different counts or types",
                 0, 0);
    return 0;
  }
  c->got[i] = 0, c->hdr[i] = 0;
  c->pos++;
  c->credit_pending = 1;
  ib_flush_credit(c);
  return mode;
}

int ib_recv_large(conn_t *conn, void *buf, size_t bytes) {
  ib_conn_t *c = conn->priv;
  ib_rdv_t *r = &c->rdv;
  if (ib_poll_cq(c) < 0 || __atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE)) return 0;
  ib_flush_credit(c);
  if (r->state == RDV_IDLE) {
    *r = (ib_rdv_t){.state = RDV_ANSWER, .buf = buf, .bytes = bytes};
    if (buf && tutti_param_TestIbRdvDecline() != 1)
      r->mr = rdv_register(c, buf, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  }
  if (r->state == RDV_ANSWER) {
    if (!rdv_answer(c)) return 0;
    r->state = RDV_WAIT;
  }
  int mode = rdv_take_header(c);
  if (!mode) return 0;
  __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the writes before the header are in buf */
  ib_rdv_release(c);
  r->state = RDV_IDLE, r->mr = NULL;
  c->rdv_seq++;
  return mode;
}

/* ---- send end ---- */

/* Answer k, when it came: the receiver's buffer (RDV_WRITE) or pieces (RDV_HEADER). 0 when it
 * has not come, -1 when it does not match this step. */
static int rdv_read_answer(ib_conn_t *c) {
  ib_rdv_t *r = &c->rdv;
  if (c->rdv_answers <= c->rdv_seq) return 0;
  const ib_rdv_msg_t *m = &c->answers[c->rdv_seq % IB_RDV_RING];
  if (m->seq != c->rdv_seq || (m->addr && m->bytes != r->bytes)) {
    ib_conn_fail(c, "sending a large message to",
                 "its answer names another message: ranks called different counts or types", 0, 0);
    return -1;
  }
  r->state = RDV_HEADER;
  if (!m->addr || !r->mr) { /* pieces: the source's registration is not needed */
    ib_rdv_release(c);
    return 1;
  }
  r->raddr = m->addr, r->rkey = m->rkey, r->mode = LARGE_DONE, r->state = RDV_WRITE;
  return 1;
}

/* Posts the step's writes while the send queues have room, on the QPs in turn. 1 once all of
 * them are acknowledged. */
static int rdv_write(ib_conn_t *c) {
  ib_rdv_t *r = &c->rdv;
  size_t chunk = (size_t)TUTTI_MIN(TUTTI_MAX(tutti_param_IbRdvChunk(), 4096), 1 << 30);
  while (r->off < r->bytes) {
    int q = (int)((r->off / chunk) % (size_t)c->nqps);
    if (c->sq_out[q] >= c->sq_max - 2) break; /* room for a header, a probe, an abort notice */
    size_t n = TUTTI_MIN(chunk, r->bytes - r->off);
    int err = ib_post_write(c, q, WR_RDV, (void *)(r->buf + r->off), r->mr->lkey, n,
                            r->raddr + r->off, r->rkey, 0, 0);
    if (err) {
      ib_conn_fail(c, "writing a large message into the buffer of", strerror(err), err, 0);
      return 0;
    }
    r->off += n, r->out++;
  }
  return r->off == r->bytes && r->out == 0;
}

/* The step's header, a FIFO piece of zero bytes. 0 while the FIFO is full. */
static int rdv_header(ib_conn_t *c) {
  int q = (int)(c->pos % (uint64_t)c->nqps);
  if (c->pos - __atomic_load_n(c->credit, __ATOMIC_ACQUIRE) >= c->nslots ||
      c->sq_out[q] >= c->sq_max - 1)
    return 0;
  uint32_t slot = (uint32_t)(c->pos % c->nslots);
  int err =
      ib_post_write(c, q, WR_HEADER, NULL, c->mr->lkey, 0, c->remote.addr + slot * c->slot_bytes,
                    c->remote.rkey, 1, IB_IMM_HEADER | (slot << 24) | (uint32_t)c->rdv.mode);
  if (err) ib_conn_fail(c, "writing data to", strerror(err), err, 0);
  c->pos++;
  return 1;
}

int ib_send_large(conn_t *conn, const void *buf, size_t bytes) {
  ib_conn_t *c = conn->priv;
  ib_rdv_t *r = &c->rdv;
  if (ib_poll_cq(c) < 0 || __atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE)) return 0;
  if (r->state == RDV_IDLE) {
    *r = (ib_rdv_t){
        .state = buf ? RDV_WAIT : RDV_HEADER, .mode = LARGE_PIECES, .buf = buf, .bytes = bytes};
    /* the source is registered while the receiver registers its destination, not after */
    if (buf && tutti_param_TestIbRdvDecline() != 2) r->mr = rdv_register(c, buf, bytes, 0);
  }
  if (r->state == RDV_WAIT && rdv_read_answer(c) <= 0) return 0;
  if (r->state == RDV_WRITE) {
    if (!rdv_write(c)) return 0;
    ib_rdv_release(c);
    r->state = RDV_HEADER;
  }
  if (!rdv_header(c)) return 0;
  r->state = RDV_IDLE, r->mr = NULL;
  c->rdv_seq++;
  return r->mode;
}
