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
 * Segments. Both ends cut step k into the same segments (seg_span: 1 MiB, then each twice the
 * one before, at most IB_RDV_SEGS), registered and offered one after the other, so that the
 * first writes go out once 1 MiB is registered on both ends, and registering the rest overlaps
 * writing what is registered (a heap registration pins every page: a whole 64 MiB one before
 * the first write is on the critical path of every call). An ncclMemAlloc region comes from
 * the registration cache (ib_mr.c) whole, for every segment.
 *
 * Protocol for large step k of one direction (one connection):
 *   receiver  registers its destination segment by segment, and after each writes an answer
 *             {k, segment, its address, rkey, the step's bytes} into the sender's answer slot
 *             of that segment, with an immediate naming segment and step (a sleeping sender
 *             wakes); all in one call, then waits for the step's header at its FIFO. A
 *             segment it cannot register is answered with address 0 (pieces), and no more.
 *   sender    registers its first source segment at the step's start, while the receiver
 *             registers its own, then each next one once the answer for the one before came
 *             (one ahead of the answers); it posts RDMA writes of TUTTI_IB_RDV_CHUNK bytes
 *             (within a segment) over the connection's QPs in turn, as many in flight as the
 *             send queues hold, for every segment registered on both ends; once every write
 *             is acknowledged (the bytes are in the receiver's memory) it sends the header
 *             LARGE_DONE as a FIFO piece, then deregisters its source. An answer "pieces", a
 *             source it cannot register, or a buffer it has not (buf NULL: the bytes are not
 *             in memory as they go) makes it send the header LARGE_PIECES once its writes
 *             are acknowledged, and the whole message follows in the FIFO (bytes written
 *             already are written again, alike).
 *   receiver  the header ends the step: LARGE_DONE, the bytes are there; LARGE_PIECES, they
 *             come through the FIFO as any step's. Its own registrations end here.
 * A registration for one step only is safe for malloc'ed memory without hooks on free: it ends
 * before the call returns. Answer slot j is written for step k + 1 only after the header of
 * step k, which the sender sends after taking the answers it needs; the immediate (kept per
 * slot as it arrives) tells the sender that answer j of step k is in memory, whole. A header
 * where a piece is expected, or a piece where a header is, or an answer for another length,
 * means the ranks called different counts: the connection fails naming the peer. A peer that
 * dies or a QP that fails mid-step shows as on the data path (ib.c: completion errors, the
 * failure board, the engine's process check); a step's own registrations are released when
 * the connection closes.
 */
#include <errno.h>
#include <string.h>

#include "ib.h"

TUTTI_PARAM(IbRdvMin, "IB_RDV_MIN", 1 << 20)     /* large steps from this many bytes; 0: none */
TUTTI_PARAM(IbRdvChunk, "IB_RDV_CHUNK", 1 << 20) /* bytes per RDMA write of a large step */

/* Test hook, the fallbacks a failed registration takes: 1, a receiver answers "pieces" without
 * registering; 2, a sender answers an offer with the header "pieces"; 3, a receiver's third
 * segment, 4, a sender's third segment cannot be registered (after two segments offered or
 * written). */
TUTTI_PARAM(TestIbRdvDecline, "TEST_IB_RDV_DECLINE", 0)

enum { RDV_IDLE = 0, RDV_ANSWER, RDV_WAIT, RDV_WRITE, RDV_DRAIN, RDV_HEADER };

size_t ib_rdv_min(void) {
  int64_t v = tutti_param_IbRdvMin();
  return v > 0 ? (size_t)v : 0;
}

/* Segment j of a step of `bytes`: its length (0: past the end), its offset in *off. */
static size_t seg_span(size_t bytes, int j, size_t *off) {
  size_t o = (IB_RDV_SEG0 << j) - IB_RDV_SEG0;
  *off = o;
  if (o >= bytes) return 0;
  return j == IB_RDV_SEGS - 1 ? bytes - o : TUTTI_MIN(IB_RDV_SEG0 << j, bytes - o);
}

static int seg_count(size_t bytes) {
  size_t off;
  int n = 0;
  while (n < IB_RDV_SEGS && seg_span(bytes, n, &off)) n++;
  return n;
}

void ib_rdv_release(ib_conn_t *c) {
  ib_rdv_t *r = &c->rdv;
  for (int j = 0; r->own && j < r->nreg; j++)
    if (r->mr[j]) ib_v.dereg_mr(r->mr[j]);
  memset(r->mr, 0, sizeof(r->mr));
  r->nreg = 0, r->own = 0;
}

/* Starts the step's registration: the cache's MR for all of buf (an ncclMemAlloc region), or
 * none yet: own segments are registered one by one (rdv_register_seg). */
static void rdv_begin(ib_conn_t *c, const void *buf, size_t bytes) {
  ib_rdv_t *r = &c->rdv;
  struct ibv_mr *mr = ib_mr_get(c->st, buf, bytes);
  if (mr)
    r->mr[0] = mr, r->nreg = r->nseg, r->own = 0;
  else
    r->own = 1;
}

/* Registers the step's next segment (access: what the peer does with it). 0 when it cannot. */
static int rdv_register_seg(ib_conn_t *c, int access) {
  ib_rdv_t *r = &c->rdv;
  size_t off, n = seg_span(r->bytes, r->nreg, &off);
  int64_t hook = tutti_param_TestIbRdvDecline();
  struct ibv_mr *mr = NULL;
  if (r->nreg == 2 && hook == (access ? 3 : 4))
    errno = ECANCELED;
  else
    mr = ib_v.reg_mr(c->st->pd, (void *)(r->buf + off), n, access);
  if (!mr) {
    INFO(SUB_NET,
         "ib: rank %d cannot register %zu bytes at %p for a large message with rank %d "
         "(%s): it goes through the FIFO",
         c->st->comm->rank, n, (const void *)(r->buf + off), c->peer, strerror(errno));
    return 0;
  }
  r->mr[r->nreg++] = mr;
  return 1;
}

static struct ibv_mr *seg_mr(const ib_rdv_t *r, int j) {
  return r->own ? r->mr[j] : r->mr[0];
}

/* ---- receive end ---- */

/* Registers and offers the step's segments in turn, each answer written into the sender's slot
 * of that segment. 1 once every segment is answered (or one said pieces), 0 when no room yet. */
static int rdv_offer(ib_conn_t *c) {
  ib_rdv_t *r = &c->rdv;
  while (r->nans < r->nseg && !r->declined) {
    /* the answers' sources of the step before are free once its writes completed */
    if (c->sq_out[0] >= c->sq_max - 1 || c->rdv_answers < r->ans_base) return 0;
    int j = r->nans;
    if (r->nreg == j && (!r->buf || tutti_param_TestIbRdvDecline() == 1 ||
                         !rdv_register_seg(c, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
      r->declined = 1;
    size_t off;
    seg_span(r->bytes, j, &off);
    ib_rdv_msg_t *m = &c->answers[j];
    *m = (ib_rdv_msg_t){.seq = c->rdv_seq,
                        .addr = r->declined ? 0 : (uint64_t)(uintptr_t)(r->buf + off),
                        .bytes = r->bytes,
                        .rkey = r->declined ? 0 : seg_mr(r, j)->rkey,
                        .seg = (uint32_t)j};
    uint64_t dst = c->remote.addr + sizeof(uint64_t) + (size_t)j * sizeof(ib_rdv_msg_t);
    uint32_t imm = IB_IMM_ANSWER | (uint32_t)j << 24 | (uint32_t)(c->rdv_seq & 0xffffff);
    int err =
        ib_post_write(c, 0, WR_ANSWER, m, c->mr->lkey, sizeof(*m), dst, c->remote.rkey, 1, imm);
    if (err) {
      ib_conn_fail(c, "offering its buffer for a large message to", strerror(err), err, 0);
      return 0;
    }
    c->rdv_posted++, r->nans++;
  }
  return 1;
}

/* The step's header at the head of the FIFO: its mode, consumed; 0 when not there yet. */
static int rdv_take_header(ib_conn_t *c) {
  ib_rdv_t *r = &c->rdv;
  uint32_t i = (uint32_t)(c->pos % c->nslots);
  if (!c->got[i]) return 0;
  int mode = c->hdr[i];
  if (!mode || (mode == LARGE_DONE && (r->declined || r->nans < r->nseg))) {
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
    *r = (ib_rdv_t){.state = RDV_ANSWER,
                    .buf = buf,
                    .bytes = bytes,
                    .nseg = seg_count(bytes),
                    .ans_base = c->rdv_posted};
    if (buf && tutti_param_TestIbRdvDecline() != 1) rdv_begin(c, buf, bytes);
  }
  if (r->state == RDV_ANSWER) {
    if (!rdv_offer(c)) return 0;
    r->state = RDV_WAIT;
  }
  int mode = rdv_take_header(c);
  if (!mode) return 0;
  __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the writes before the header are in buf */
  ib_rdv_release(c);
  r->state = RDV_IDLE;
  c->rdv_seq++;
  return mode;
}

/* ---- send end ---- */

/* Takes the answers that came, in segment order. 1 when one said pieces, -1 when one does not
 * match this step (the connection failed), 0 otherwise. */
static int rdv_take_answers(ib_conn_t *c) {
  ib_rdv_t *r = &c->rdv;
  while (r->nans < r->nseg) {
    int j = r->nans;
    uint32_t want = IB_IMM_ANSWER | (uint32_t)j << 24 | (uint32_t)(c->rdv_seq & 0xffffff);
    const ib_rdv_msg_t *m = &c->answers[j];
    /* an immediate of a step 2^24 earlier, never taken (that step went as pieces), has its
     * own number in memory: not this answer yet */
    if (c->ans_imm[j] != want || m->seq != c->rdv_seq) return 0;
    c->ans_imm[j] = 0;
    if (m->seg != (uint32_t)j || (m->addr && m->bytes != r->bytes)) {
      ib_conn_fail(c, "sending a large message to",
                   "its answer names another message: ranks called different counts or types", 0,
                   0);
      return -1;
    }
    if (!m->addr) return 1;
    r->raddr[j] = m->addr, r->rkey[j] = m->rkey;
    r->nans++;
  }
  return 0;
}

/* Posts writes of every segment answered and registered while the send queues have room, on
 * the QPs in turn. 1 once all of them are posted and acknowledged. */
static int rdv_write(ib_conn_t *c) {
  ib_rdv_t *r = &c->rdv;
  size_t chunk = (size_t)TUTTI_MIN(TUTTI_MAX(tutti_param_IbRdvChunk(), 4096), 1 << 30);
  while (r->off < r->bytes) {
    size_t so, end = seg_span(r->bytes, r->wseg, &so) + so;
    if (r->off == end) {
      r->wseg++;
      continue;
    }
    if (r->wseg >= r->nans || r->wseg >= r->nreg) break;
    int q = (int)((r->off / chunk) % (size_t)c->nqps);
    if (c->sq_out[q] >= c->sq_max - 2) break; /* room for a header, a probe, an abort notice */
    size_t n = TUTTI_MIN(chunk, end - r->off);
    int err = ib_post_write(c, q, WR_RDV, (void *)(r->buf + r->off), seg_mr(r, r->wseg)->lkey, n,
                            r->raddr[r->wseg] + (r->off - so), r->rkey[r->wseg], 0, 0);
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
    *r = (ib_rdv_t){.state = RDV_HEADER,
                    .mode = LARGE_PIECES,
                    .buf = buf,
                    .bytes = bytes,
                    .nseg = seg_count(bytes)};
    /* the first segment is registered while the receiver registers its own, not after */
    if (buf && tutti_param_TestIbRdvDecline() != 2) {
      rdv_begin(c, buf, bytes);
      if (r->nreg || rdv_register_seg(c, 0)) r->state = RDV_WRITE, r->mode = LARGE_DONE;
    }
  }
  if (r->state == RDV_WRITE) {
    int got = rdv_take_answers(c);
    if (got < 0) return 0;
    if (got == 1) {
      r->state = RDV_DRAIN;
    } else if (rdv_write(c)) {
      r->state = RDV_HEADER;
    } else if (r->nreg < r->nseg && r->nreg <= r->nans) {
      /* one segment ahead of the answers, registered while the writes posted are under way;
       * its writes go out at once if its answer is there already */
      if (!rdv_register_seg(c, 0))
        r->state = RDV_DRAIN;
      else if (rdv_write(c))
        r->state = RDV_HEADER;
    }
    if (r->state == RDV_DRAIN) r->mode = LARGE_PIECES;
    if (r->state == RDV_WRITE) return 0;
  }
  if (r->state == RDV_DRAIN) { /* pieces after all: the writes posted land first */
    if (r->out) return 0;
    r->state = RDV_HEADER;
  }
  if (!rdv_header(c)) return 0;
  ib_rdv_release(c); /* after the header: every write is acknowledged, and it is on its way */
  r->state = RDV_IDLE;
  c->rdv_seq++;
  return r->mode;
}
