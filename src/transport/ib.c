/* InfiniBand / RoCE transport on libibverbs: ranks on different hosts that have an ib device
 * (and ranks of one host when TUTTI_SHM_DISABLE=1). NCCL's switches: NCCL_IB_DISABLE=1 turns
 * it off; NCCL_NET=Socket keeps every pair on tcp, NCCL_NET=IB makes a pair that cannot use ib
 * an error instead of a fall back to tcp (TUTTI_ spellings too).
 *
 * Each direction of each peer pair is one connection: nslots slots of slot_bytes on each end
 * (ib.h shows the arenas) and TUTTI_IB_QPS_PER_CONNECTION reliable-connected QPs (default 2)
 * sharing one completion queue. Piece k goes from the sender's staging slot k % nslots into the
 * receiver's FIFO slot k % nslots by RDMA write with immediate, on QP k % nqps; the immediate
 * carries slot index and length, so pieces that complete out of order across QPs still land in
 * their slots and the receiver consumes them in order. Each write with immediate consumes one
 * receive the receiver posted (nslots per QP at setup, one reposted per completion).
 * Flow control: the receiver, having consumed piece k, RDMA-writes k + 1 into the sender's
 * credit word (always on QP 0, so the credit words land in order and never go back; with an
 * immediate, so a sender asleep on its completion channel wakes); the sender posts piece k only
 * while k - credit < nslots. Nothing else moves: the engine's thread posts and polls, no helper
 * thread, and sleeps on one completion channel for all CQs when it waits (ib_wait).
 * send_from stages a piece into the next slot, or with TUTTI_IB_ZERO_COPY writes it from a
 * registered user buffer in place (ib_mr.c), taken once that write completed. Large p2p
 * messages (STEP_WHOLE steps from TUTTI_IB_RDV_MIN bytes) skip the FIFO: the sender writes
 * them straight into the receiver's buffer after a rendezvous (ib_rdv.c, send_large /
 * recv_large); only a zero-byte header piece per message goes through the FIFO.
 *
 * Failure: a completion with an error status (a peer gone: retry exceeded after TUTTI_IB_TIMEOUT
 * x TUTTI_IB_RETRY_CNT; a QP in the error state: flushed) fails the connection with a reason
 * naming this rank, the peer's rank and host, both devices and the verbs status string, and
 * fails the communicator. mark_failed writes this rank's reason into every peer's failure board
 * (one entry per rank, polled by peer_failed), so the peers learn it at once. A peer killed
 * without a word, or a link that fell silent, shows as retry-exceeded on the next write to it
 * (or, on one host, through the engine's process check); a waiting end with nothing in flight
 * writes a zero-byte probe after TUTTI_IB_PROBE_MS of quiet to find out. close destroys every QP,
 * CQ, MR and the PD, and closes the device.
 */
#include "ib.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TUTTI_PARAM(IbEvents, "IB_EVENTS", 1)       /* a waiting rank sleeps on completion events */
TUTTI_PARAM(IbSpinUs, "IB_SPIN_US", 20)     /* after polling this long */
TUTTI_PARAM(IbProbeMs, "IB_PROBE_MS", 1000) /* a waiting end probes a peer this quiet */
TUTTI_PARAM(IbZeroCopy, "IB_ZERO_COPY", 0)  /* write registered user buffers in place */
TUTTI_PARAM(IbZeroCopyMin, "IB_ZERO_COPY_MIN", 64 * 1024) /* from pieces this large */

#define WR_ID(kind, q) (((uint64_t)(kind) << 32) | (uint32_t)(q))

/* ---- failures ---- */

/* Records why a connection broke and fails the communicator. Quiet when this rank is closing
 * or already failed (flushed work requests are then our own doing). */
void ib_conn_fail(ib_conn_t *c, const char *fmt, const char *detail, int status, uint32_t vendor) {
  ib_state_t *st = c->st;
  if (__atomic_exchange_n(&c->failed, 1, __ATOMIC_ACQ_REL)) return;
  int me = st->comm->rank, p = c->peer;
  snprintf(c->reason, sizeof(c->reason),
           "rank %d (host %s, device %s): %s rank %d (host %s, device %s) failed: %s (verbs status "
           "%d, vendor error %#x)",
           me, ib_host_of(st, me), st->dev, fmt, p, ib_host_of(st, p), st->peer_blob[p].dev, detail,
           status, vendor);
  if (__atomic_load_n(&st->closing, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&st->aborted, __ATOMIC_ACQUIRE))
    return;
  if (__atomic_fetch_add(&st->nwarn, 1, __ATOMIC_ACQ_REL) == 0)
    WARN("%s", c->reason);
  else
    INFO(SUB_NET, "%s", c->reason);
  comm_set_error(st->comm, ncclRemoteError, c->reason);
}

/* ---- posting and polling ---- */

int ib_post_recv(ib_conn_t *c, int q) {
  struct ibv_recv_wr wr = {.wr_id = WR_ID(WR_RECV, q), .sg_list = NULL, .num_sge = 0}, *bad;
  return ibv_post_recv(c->qp[q], &wr, &bad);
}

int ib_post_write(ib_conn_t *c, int q, uint64_t kind, void *src, uint32_t lkey, size_t bytes,
                  uint64_t raddr, uint32_t rkey, int imm, uint32_t imm_data) {
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)src, .length = (uint32_t)bytes, .lkey = lkey};
  struct ibv_send_wr wr = {.wr_id = WR_ID(kind, q),
                           .sg_list = &sge,
                           .num_sge = bytes ? 1 : 0,
                           .opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED,
                           .imm_data = htonl(imm_data),
                           .wr = {.rdma = {.remote_addr = raddr, .rkey = rkey}}},
                     *bad;
  int err = ibv_post_send(c->qp[q], &wr, &bad);
  if (!err) c->sq_out[q]++;
  return err;
}

/* A piece arrived: the immediate names its slot and length. 0, or -1 if malformed. */
static int fill_slot(ib_conn_t *c, uint32_t imm) {
  uint32_t slot = IB_IMM_SLOT(imm), hdr = imm & IB_IMM_HEADER ? imm & 0xffffff : 0;
  if (slot >= c->nslots || (imm & IB_IMM_ANSWER) || (imm & 0xffffff) > c->slot_bytes ||
      (hdr && hdr != LARGE_DONE && hdr != LARGE_PIECES)) {
    ib_conn_fail(c, "receiving from", "a write with a malformed immediate", 0, imm);
    return -1;
  }
  c->hdr[slot] = (uint8_t)hdr;
  c->got[slot] = hdr ? 1 : (imm & 0xffffff) + 1;
  return 0;
}

/* Reaps the connection's completions: sends free their queue entry, a write with immediate
 * fills its slot (receive end) or brings credit (send end), and gets its receive reposted.
 * Returns the completions reaped, or -1 once the connection failed. */
int ib_poll_cq(ib_conn_t *c) {
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE)) return -1;
  struct ibv_wc wc[16];
  int n, total = 0;
  while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
    total += n;
    for (int i = 0; i < n; i++) {
      uint32_t kind = (uint32_t)(wc[i].wr_id >> 32), q = (uint32_t)wc[i].wr_id;
      if (wc[i].status != IBV_WC_SUCCESS) {
        const char *what = kind == WR_DATA || kind == WR_ZC || kind == WR_HEADER ? "writing data to"
                           : kind == WR_RDV    ? "writing a large message into the buffer of"
                           : kind == WR_ANSWER ? "offering its buffer for a large message to"
                           : kind == WR_CREDIT ? "returning credit to"
                           : kind == WR_BOARD  ? "telling of its failure"
                           : kind == WR_PROBE  ? "probing the link to"
                                               : "receiving from";
        ib_conn_fail(c, what, ib_v.wc_status_str(wc[i].status), wc[i].status, wc[i].vendor_err);
        return -1;
      }
      if (kind != WR_RECV) {
        c->sq_out[q]--;
        c->probe_out &= kind != WR_PROBE;
        c->zc_inflight &= kind != WR_ZC;
        c->rdv.out -= kind == WR_RDV;
        c->rdv_answers += kind == WR_ANSWER;
        continue;
      }
      uint32_t imm = ntohl(wc[i].imm_data);
      if (c->is_send) {
        if ((imm & IB_IMM_ANSWER) && IB_IMM_SLOT(imm) >= IB_RDV_SEGS) {
          ib_conn_fail(c, "sending to", "an answer with a malformed immediate", 0, imm);
          return -1;
        }
        if (imm & IB_IMM_ANSWER) c->ans_imm[IB_IMM_SLOT(imm)] = imm;
      } else if (fill_slot(c, imm)) {
        return -1;
      }
      if (ib_post_recv(c, (int)q)) {
        ib_conn_fail(c, "receiving from", "ibv_post_recv failed", 0, 0);
        return -1;
      }
    }
  }
  if (n < 0) {
    ib_conn_fail(c, "polling the completions of", "ibv_poll_cq failed", n, 0);
    return -1;
  }
  if (total) c->quiet_since = 0;
  return total;
}

/* ---- data path (the engine's thread) ---- */

static void *ib_send_slot(conn_t *conn, size_t bytes) {
  (void)bytes; /* at most a slot */
  ib_conn_t *c = conn->priv;
  if (ib_poll_cq(c) < 0 || __atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE)) return NULL;
  int q = (int)(c->pos % (uint64_t)c->nqps);
  if (c->pos - __atomic_load_n(c->credit, __ATOMIC_ACQUIRE) >= c->nslots ||
      c->sq_out[q] >= c->sq_max - 1)
    return NULL;
  return c->slots + (c->pos % c->nslots) * c->slot_bytes;
}

static void ib_send_post(conn_t *conn, size_t bytes) {
  ib_conn_t *c = conn->priv;
  uint32_t slot = (uint32_t)(c->pos % c->nslots);
  int q = (int)(c->pos % (uint64_t)c->nqps);
  int err = ib_post_write(c, q, WR_DATA, c->slots + slot * c->slot_bytes, c->mr->lkey, bytes,
                          c->remote.addr + slot * c->slot_bytes, c->remote.rkey, 1,
                          (slot << 24) | (uint32_t)bytes);
  if (err) ib_conn_fail(c, "posting a write to", strerror(err), err, 0);
  c->pos++;
}

/* send_from: a piece the engine holds in memory. The engine's rule is that taken bytes are gone
 * (the buffer may change at once), so a piece written straight from the user's memory counts as
 * taken only once its write has completed: one such piece in flight per connection. That pays
 * where the copy costs more than waiting for the acknowledgement, so it is an option:
 * TUTTI_IB_ZERO_COPY=1, pieces of TUTTI_IB_ZERO_COPY_MIN bytes or more, from a buffer the
 * registration cache takes (ib_mr.c). Every other piece is copied into the next staging slot
 * (or lies there already: the engine computed it into send_slot) and taken at once. */
static size_t ib_send_from(conn_t *conn, const void *buf, size_t bytes) {
  ib_conn_t *c = conn->priv;
  if (c->zc_buf) { /* posted; the engine calls again with the same piece until it is taken */
    if (c->zc_inflight && (ib_poll_cq(c) < 0 || c->zc_inflight)) return 0;
    c->zc_buf = NULL;
    return bytes;
  }
  char *slot = ib_send_slot(conn, bytes);
  if (!slot) return 0;
  struct ibv_mr *mr = NULL;
  if (buf != slot && tutti_param_IbZeroCopy() && bytes >= (size_t)tutti_param_IbZeroCopyMin())
    mr = ib_mr_get(c->st, buf, bytes);
  if (!mr) {
    if (buf != slot) memcpy(slot, buf, bytes);
    ib_send_post(conn, bytes);
    return bytes;
  }
  uint32_t i = (uint32_t)(c->pos % c->nslots);
  int q = (int)(c->pos % (uint64_t)c->nqps);
  int err =
      ib_post_write(c, q, WR_ZC, (void *)buf, mr->lkey, bytes, c->remote.addr + i * c->slot_bytes,
                    c->remote.rkey, 1, (i << 24) | (uint32_t)bytes);
  if (err) ib_conn_fail(c, "posting a write to", strerror(err), err, 0);
  c->pos++, c->zc_inflight = 1, c->zc_buf = buf;
  return 0;
}

/* Returns the freed slots to the sender: one write of the consumed count, on QP 0, with an
 * immediate so that a sender asleep on its completion channel wakes. */
void ib_flush_credit(ib_conn_t *c) {
  if (!c->credit_pending || c->sq_out[0] >= c->sq_max - 1) return;
  uint32_t i = (uint32_t)(c->pos % c->nslots);
  c->credit_src[i] = c->pos;
  int err = ib_post_write(c, 0, WR_CREDIT, &c->credit_src[i], c->mr->lkey, sizeof(uint64_t),
                          c->remote.addr, c->remote.rkey, 1, 0);
  if (err) ib_conn_fail(c, "returning credit to", strerror(err), err, 0);
  c->credit_pending = 0;
}

static const void *ib_recv_slot(conn_t *conn, size_t *bytes) {
  ib_conn_t *c = conn->priv;
  if (ib_poll_cq(c) < 0) return NULL;
  ib_flush_credit(c);
  uint32_t i = (uint32_t)(c->pos % c->nslots);
  if (!c->got[i]) return NULL;
  if (c->hdr[i]) {
    ib_conn_fail(c, "receiving from",
                 "the header of a large message where a piece was expected: ranks called "
                 "different counts or types",
                 0, 0);
    return NULL;
  }
  *bytes = c->got[i] - 1;
  return c->slots + i * c->slot_bytes;
}

static void ib_recv_done(conn_t *conn) {
  ib_conn_t *c = conn->priv;
  c->got[c->pos % c->nslots] = 0;
  c->pos++;
  c->credit_pending = 1;
  if (ib_poll_cq(c) >= 0) ib_flush_credit(c);
}

/* Arms every CQ of the communicator's connections for one event on the shared channel, then
 * reaps once more (a completion that came before the arming raises no event). Returns the
 * completions reaped (nonzero: do not sleep) or -1. */
static int arm_all(ib_state_t *st) {
  int total = 0;
  for (int p = 0; p < st->comm->nranks; p++)
    for (int d = 0; d < 2; d++) {
      ib_conn_t *c = d ? st->recv[p] : st->send[p];
      if (!c || !c->cq) continue;
      if (ibv_req_notify_cq(c->cq, 0)) return -1;
      int n = ib_poll_cq(c);
      if (n < 0) return -1;
      total += n;
    }
  return total;
}

/* Takes (and acknowledges) every event the channel holds, without blocking. */
static void drain_events(ib_state_t *st) {
  struct ibv_cq *cq;
  void *ctx;
  while (ib_v.get_cq_event(st->chan, &cq, &ctx) == 0) ib_v.ack_cq_events(cq, 1);
}

/* A waiting rank polls for TUTTI_IB_SPIN_US, then sleeps on the completion channel until any of
 * its connections completes something (a piece or a credit arrives, a write is acknowledged),
 * at most timeout_ns: a rank that spins takes the CPU from the kernel's protocol work, which on
 * Soft-RoCE is the whole data path. TUTTI_IB_EVENTS=0: yield instead of sleeping. */
static void ib_wait(conn_t *conn, int send, uint64_t timeout_ns) {
  ib_conn_t *c = conn->priv;
  ib_state_t *st = c->st;
  if (!send) ib_flush_credit(c);
  if (!tutti_param_IbEvents()) {
    sched_yield();
    return;
  }
  uint64_t spin_end = tutti_time_ns() + (uint64_t)tutti_param_IbSpinUs() * 1000;
  do {
    int n = ib_poll_cq(c);
    if (n != 0) return;
  } while (tutti_time_ns() < spin_end);
  if (arm_all(st) != 0) return;
  struct pollfd pfd = {.fd = st->chan->fd, .events = POLLIN};
  int ms = (int)TUTTI_MAX(timeout_ns / 1000000ull, 1);
  if (poll(&pfd, 1, ms) > 0) drain_events(st);
}

static ib_conn_t *conn_twin(ib_conn_t *c) {
  return c->is_send ? c->st->recv[c->peer] : c->st->send[c->peer];
}

/* A waiting end whose connection has completed nothing for TUTTI_IB_PROBE_MS writes zero bytes
 * to the peer: a peer that fell silent (link down, host gone) then fails the write with retry
 * exceeded, naming the verbs status, also where this end had nothing else in flight. */
static void probe_quiet_peer(ib_conn_t *c) {
  uint64_t now = tutti_time_ns(), ms = (uint64_t)tutti_param_IbProbeMs();
  if (!c->quiet_since) c->quiet_since = now;
  if (c->probe_out || now - c->quiet_since < ms * 1000000ull || c->sq_out[0] >= c->sq_max - 1)
    return;
  int err =
      ib_post_write(c, 0, WR_PROBE, NULL, c->mr->lkey, 0, c->remote.addr, c->remote.rkey, 0, 0);
  if (err) ib_conn_fail(c, "probing the link to", strerror(err), err, 0);
  c->probe_out = 1, c->quiet_since = now;
}

static int ib_peer_failed(conn_t *conn) {
  ib_conn_t *c = conn->priv, *twin = conn_twin(c);
  ib_state_t *st = c->st;
  if (!c->is_send) ib_flush_credit(c); /* a sender waiting on us must not wait for credit */
  if (ib_poll_cq(c) == 0 && !__atomic_load_n(&st->aborted, __ATOMIC_ACQUIRE)) probe_quiet_peer(c);
  return __atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) ||
         (twin && __atomic_load_n(&twin->failed, __ATOMIC_ACQUIRE)) ||
         __atomic_load_n(&st->board[c->peer].failed, __ATOMIC_ACQUIRE) ||
         __atomic_load_n(&st->aborted, __ATOMIC_ACQUIRE);
}

static const char *ib_peer_reason(conn_t *conn) {
  ib_conn_t *c = conn->priv, *twin = conn_twin(c);
  ib_state_t *st = c->st;
  if (__atomic_load_n(&st->board[c->peer].failed, __ATOMIC_ACQUIRE)) {
    st->board[c->peer].reason[IB_REASON_MAX - 1] = '\0';
    return st->board[c->peer].reason;
  }
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE)) return c->reason;
  if (twin && __atomic_load_n(&twin->failed, __ATOMIC_ACQUIRE)) return twin->reason;
  if (__atomic_load_n(&st->aborted, __ATOMIC_ACQUIRE)) return comm_error_text(st->comm);
  return NULL;
}

/* ---- vtable: setup in ib_setup.c ---- */

static int ib_can_connect(struct ncclComm *comm, int peer) {
  const char *net = tutti_getenv("NET");
  if (peer == comm->rank || (net && strcasecmp(net, "Socket") == 0)) return 0;
  return ib_available();
}

/* ---- failure and close ---- */

/* This rank failed or aborted: its reason goes into every peer's board entry for it. */
static void ib_mark_failed(struct ncclComm *comm) {
  ib_state_t *st = ib_state_of(comm);
  if (!st || !st->board) return;
  pthread_mutex_lock(&st->life_mu);
  if (st->closing || __atomic_exchange_n(&st->aborted, 1, __ATOMIC_ACQ_REL)) {
    pthread_mutex_unlock(&st->life_mu);
    return;
  }
  const char *why = comm_failure_reason(comm);
  ib_board_t *src = &st->board_src[comm->rank];
  int len = snprintf(src->reason, sizeof(src->reason), "rank %d on host %s aborted: %s", comm->rank,
                     ib_host_of(st, comm->rank), why);
  if (len >= (int)sizeof(src->reason)) /* the board entry is fixed: say the reason was cut */
    memcpy(src->reason + sizeof(src->reason) - 4, "...", 4);
  src->failed = 1;
  for (int p = 0; p < comm->nranks; p++) {
    ib_conn_t *c = st->send[p];
    if (!c || !c->qp[0] || c->failed || c->sq_out[0] >= c->sq_max) continue;
    const ib_blob_t *pb = &st->peer_blob[p];
    ib_post_write(c, 0, WR_BOARD, src, st->board_mr->lkey, sizeof(*src),
                  pb->board_addr + (uint64_t)comm->rank * sizeof(ib_board_t), pb->board_rkey, 0, 0);
  }
  pthread_mutex_unlock(&st->life_mu);
}

static void ib_close(struct ncclComm *comm) {
  ib_state_t *st = ib_state_of(comm);
  if (!st) return;
  pthread_mutex_lock(&st->life_mu); /* a mark_failed under way finishes first */
  __atomic_store_n(&st->closing, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&st->life_mu);
  /* let posted writes (credits, an abort notice) finish before their QPs go, briefly */
  uint64_t deadline = tutti_time_ns() + 200000000ull;
  for (int p = 0; p < comm->nranks; p++)
    for (int d = 0; d < 2; d++) {
      ib_conn_t *c = d ? st->recv[p] : st->send[p];
      int busy = 1;
      while (c && busy && !c->failed && tutti_time_ns() < deadline) {
        ib_poll_cq(c);
        busy = 0;
        for (int q = 0; q < c->nqps; q++) busy |= c->sq_out[q] > 0;
      }
    }
  ib_state_free(st);
}

static ncclResult_t ib_post_connect(struct ncclComm *comm) {
  return ib_setup_post_connect(comm);
}

const transport_t ib_transport = {
    .name = "ib",
    .can_connect = ib_can_connect,
    .setup = ib_setup,
    .connect = ib_setup_connect,
    .post_connect = ib_post_connect,
    .send_slot = ib_send_slot,
    .send_post = ib_send_post,
    .send_from = ib_send_from,
    .recv_into = NULL,
    .send_large = ib_send_large,
    .recv_large = ib_recv_large,
    .wait = ib_wait,
    .recv_slot = ib_recv_slot,
    .recv_done = ib_recv_done,
    .peer_failed = ib_peer_failed,
    .peer_reason = ib_peer_reason,
    .mark_failed = ib_mark_failed,
    .close = ib_close,
};
