/* Direct collectives: every rank reads the other ranks' buffers in place (same host only).
 *
 * Through the FIFOs, a 2-rank all-reduce moves each byte through shared memory twice (into a
 * slot, out of it) and ring steps add a third pass; when every rank's send and receive
 * buffers can be mapped by the others (ncclMemAlloc memory, or ranks that are threads of one
 * process) a rank instead:
 *
 *   1. tells every peer where its buffers are (one FIFO message each) and learns theirs; maps
 *      them (memreg.c, cached) and tells every peer whether it could (a second message): only
 *      if all could does anybody go on, otherwise all run the FIFO steps that follow this one;
 *   2. reduces its own segment (block_start(count, n, rank)) from all n send buffers, in the
 *      order the ring would (so the bits are the FIFO path's), into its receive buffer,
 *      publishing its progress every piece;
 *   3. copies every other rank's segment from that rank's receive buffer as far as the
 *      owner's progress allows (so the copy follows the reduction, piece by piece);
 *   4. says it is done and waits until every peer is: nobody returns while another rank may
 *      still read its buffers.
 * Each byte is read from a peer once and written once. Results are bitwise identical on every
 * rank (each segment has one owner; the others copy its bits) and from run to run.
 * In place is safe: rank k reads rank r's buffer only in segment k, which r overwrites only
 * after k's progress says that piece is final.
 * Reduce-scatter is steps 1, 2 (its own block of the send buffers, into the receive buffer)
 * and 4; all-gather is 1, 3 (straight from each peer's send buffer, all there from the start)
 * and 4.
 *
 * Progress and done words live in each rank's shm segment header (shm_direct_words). They
 * only grow: progress = call << 40 | elements done, done = calls finished; every rank counts
 * the direct calls of the communicator alike, so no word is ever reset.
 * The engine runs this as one step (STEP_DIRECT) of the lane; waiting, failure checks and
 * timeouts are the engine's, through l->wait_peer as for any step.
 */
#include "direct.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "copy.h"
#include "memreg.h"

TUTTI_PARAM(Direct, "DIRECT", 1)
TUTTI_PARAM(DirectMinBytes, "DIRECT_MIN_BYTES", 256 * 1024)

#define DIRECT_PIECE_BYTES (64 * 1024) /* progress is published every piece */
#define DIRECT_BLOCK_BYTES (16 * 1024) /* multi-input reductions run block by block, in L1 */
#define DIRECT_SEQ_SHIFT 40
#define DESC_MAGIC 0x64697231u /* "dir1" */

enum { D_SEND_DESC, D_RECV_DESC, D_SEND_ACK, D_RECV_ACK, D_REDUCE, D_GATHER, D_DONE, D_WAIT_DONE };

typedef struct desc { /* where a rank's buffers are, for one call */
  uint32_t magic;
  int32_t pid;
  struct {
    uint64_t addr;  /* usable by peers of the same process */
    int32_t shared; /* 1: in an ncclMemAlloc region (ref) */
    int32_t pad;
    memreg_ref_t ref;
  } buf[2]; /* send, receive */
} desc_t;

struct direct_state {
  uint64_t calls; /* direct calls completed on this communicator, alike on every rank */
  int phase, next, ok, described;
  size_t pos;
  const char **in, **out; /* [nranks]: each rank's send and receive buffers, as seen here */
  desc_t mine;            /* this call's own descriptor, sent to every peer */
};

/* The call's geometry: element ranges in the n-segment vector of `total` elements. For the
 * all-reduce the segments split the buffer (block_start); for reduce-scatter and all-gather
 * they are the count-element blocks of the big buffer (the send buffer of a reduce-scatter,
 * the receive buffer of an all-gather). */
static size_t seg_start(coll_t c, size_t count, int n, int k) {
  return c == COLL_ALLREDUCE ? block_start(count, n, k) : (size_t)k * count;
}

int direct_eligible(ncclComm_t comm, coll_t coll, algo_t algo, size_t count, size_t esize,
                    const reduce_op_t *rop) {
  int n = comm->nranks;
  if (!tutti_param_Direct() || algo != ALGO_RING || rop->premul) return 0;
  if (coll != COLL_ALLREDUCE && coll != COLL_REDUCESCATTER && coll != COLL_ALLGATHER) return 0;
  size_t total = coll == COLL_ALLREDUCE ? count : count * (size_t)n;
  if (n < 2 || comm->nhosts != 1 || total >= (1ull << DIRECT_SEQ_SHIFT) ||
      total * esize < (size_t)tutti_param_DirectMinBytes())
    return 0;
  for (int p = 0; p < n; p++)
    if (p != comm->rank && comm->send_conn[p].transport != &shm_transport) return 0;
  return 1;
}

static void describe(const op_ctx_t *o, size_t count, int n, desc_t *d) {
  memset(d, 0, sizeof(*d));
  d->magic = DESC_MAGIC;
  d->pid = (int32_t)getpid();
  size_t big = count * (size_t)n * o->esize, small = count * o->esize;
  for (int b = 0; b < 2; b++) {
    const char *p = o->buf[b == 0 ? BUF_SEND : BUF_RECV];
    size_t bytes = o->coll == COLL_ALLREDUCE                     ? small
                   : (o->coll == COLL_REDUCESCATTER) == (b == 0) ? big
                                                                 : small;
    d->buf[b].addr = (uint64_t)(uintptr_t)p;
    d->buf[b].shared = memreg_find(p, bytes, &d->buf[b].ref);
  }
}

/* Where peer p's buffers are seen from here; 0 if they cannot be (then nobody goes direct). */
static int resolve(ncclComm_t comm, struct direct_state *s, int p, const desc_t *d) {
  for (int b = 0; b < 2; b++) {
    const char **slot = b == 0 ? &s->in[p] : &s->out[p];
    if (d->pid == (int32_t)getpid()) {
      *slot = (const char *)(uintptr_t)d->buf[b].addr;
      continue;
    }
    const char *base;
    if (!d->buf[b].shared) return 0;
    if (memreg_map_peer(comm, p, d->pid, &d->buf[b].ref, &base) != ncclSuccess) {
      tutti_clear_error(); /* logged; this call falls back to the FIFOs */
      return 0;
    }
    *slot = base + d->buf[b].ref.offset;
  }
  return 1;
}

static int block(lane_t *l, int peer, int send) {
  l->wait_peer = peer, l->wait_send = send;
  return 0;
}

/* Sends one small message to peer p; 0 when its FIFO is full. */
static int send_msg(ncclComm_t comm, int p, const void *msg, size_t bytes) {
  conn_t *c = &comm->send_conn[p];
  void *slot = c->transport->send_slot(c);
  if (!slot) return 0;
  memcpy(slot, msg, bytes);
  c->transport->send_post(c, bytes);
  return 1;
}

/* Receives one small message of exactly `bytes` from peer p into msg: 1, 0 none yet, -1 wrong size.
 */
static int recv_msg(ncclComm_t comm, int p, void *msg, size_t bytes, const op_ctx_t *o) {
  conn_t *c = &comm->recv_conn[p];
  size_t got = 0;
  const void *in = c->transport->recv_slot(c, &got);
  if (!in) return 0;
  if (got != bytes) {
    TUTTI_ERR(ncclInvalidUsage,
              "rank %d received %zu bytes from rank %d where it expected a "
              "%zu-byte direct handshake in nccl%s (op #%llu): ranks called different collectives "
              "or counts, or set TUTTI_DIRECT differently",
              comm->rank, got, p, bytes, coll_name(o->coll), (unsigned long long)o->seq);
    return -1;
  }
  memcpy(msg, in, bytes);
  c->transport->recv_done(c);
  return 1;
}

/* dst = in[f] (+) in[f+1] (+) ... (+) in[f-1] over [from, from + len): the order in which the
 * ring accumulates the same segment (all-reduce: f = its owner r; reduce-scatter: f = r + 1),
 * so results are bitwise those of the FIFO path. Partial sums stay in an L1 block until the
 * last operand, so dst may be any of the inputs (in place). */
static void reduce_segment(const op_ctx_t *o, const struct direct_state *s, int n, int f,
                           size_t from, size_t len, char *dst) {
  static TUTTI_TLS uint64_t acc[DIRECT_BLOCK_BYTES / 8];
  size_t es = o->esize, blk = TUTTI_MAX(DIRECT_BLOCK_BYTES / es, 1);
  int post = o->rop.postdiv ? REDUCE_POST : 0;
  for (size_t i = 0; i < len; i += blk) {
    size_t m = TUTTI_MIN(blk, len - i), at = (from + i) * es;
    const char *a = s->in[tutti_mod(f, n)] + at;
    for (int k = 1; k < n - 1; k++) {
      reduce_combine(&o->rop, acc, a, s->in[tutti_mod(f + k, n)] + at, m, 0);
      a = (const char *)acc;
    }
    reduce_combine(&o->rop, dst + i * es, a, s->in[tutti_mod(f + n - 1, n)] + at, m, post);
  }
}

static int handshake(lane_t *l, const op_ctx_t *o, const step_t *st, struct direct_state *s) {
  ncclComm_t comm = l->comm;
  int n = comm->nranks, r = comm->rank;
  while (s->phase <= D_RECV_ACK) {
    int p = tutti_mod(r + 1 + s->next, n), rc;
    if (s->next == n - 1) { /* every peer done in this phase */
      s->phase++, s->next = 0;
      continue;
    }
    if (s->phase == D_SEND_DESC) {
      if (!s->described) describe(o, st->count, n, &s->mine), s->described = 1;
      if (!send_msg(comm, p, &s->mine, sizeof(s->mine))) return block(l, p, 1);
    } else if (s->phase == D_RECV_DESC) {
      desc_t d;
      if ((rc = recv_msg(comm, p, &d, sizeof(d), o)) <= 0) return rc < 0 ? -1 : block(l, p, 0);
      if (d.magic != DESC_MAGIC) {
        TUTTI_ERR(ncclInvalidUsage,
                  "rank %d: rank %d sent no direct handshake in nccl%s (op #%llu): "
                  "set TUTTI_DIRECT alike everywhere",
                  r, p, coll_name(o->coll), (unsigned long long)o->seq);
        return -1;
      }
      s->ok &= resolve(comm, s, p, &d);
    } else if (s->phase == D_SEND_ACK) {
      uint64_t ack = (uint64_t)s->ok;
      if (!send_msg(comm, p, &ack, sizeof(ack))) return block(l, p, 1);
    } else {
      uint64_t ack;
      if ((rc = recv_msg(comm, p, &ack, sizeof(ack), o)) <= 0) return rc < 0 ? -1 : block(l, p, 0);
      s->ok &= ack != 0;
    }
    s->next++;
  }
  return 1;
}

/* Starts a call: resets the phase state (the buffers of every rank are filled in below). */
static int state_ready(ncclComm_t comm) {
  struct direct_state *s = comm->direct;
  if (s) return 1;
  s = calloc(1, sizeof(*s));
  if (s) s->in = calloc((size_t)comm->nranks, sizeof(char *));
  if (s && s->in) s->out = calloc((size_t)comm->nranks, sizeof(char *));
  if (!s || !s->in || !s->out) {
    if (s) free(s->in);
    free(s);
    TUTTI_ERR(ncclSystemError, "out of memory for the direct all-reduce state");
    return 0;
  }
  s->ok = 1;
  comm->direct = s;
  return 1;
}

static void finish(lane_t *l, const step_t *st, struct direct_state *s, int went_direct) {
  if (went_direct) s->calls++;
  l->cur += 1 + (went_direct ? st->dst_off : 0);
  l->pos = 0;
  s->phase = D_SEND_DESC, s->next = 0, s->ok = 1, s->pos = 0, s->described = 0;
}

int direct_advance(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved) {
  ncclComm_t comm = l->comm;
  if (!state_ready(comm)) return -1;
  struct direct_state *s = comm->direct;
  int n = comm->nranks, r = comm->rank, rc;
  if (s->phase <= D_RECV_ACK) {
    int before = s->phase * n + s->next;
    rc = handshake(l, o, st, s);
    if (s->phase * n + s->next != before) *moved = 1;
    if (rc <= 0) return rc;
    if (!s->ok) {
      INFO(SUB_COLL, "nccl%s (op #%llu): some rank's buffers cannot be shared: through the FIFOs",
           coll_name(o->coll), (unsigned long long)o->seq);
      finish(l, st, s, 0);
      return 1;
    }
    s->in[r] = o->buf[BUF_SEND], s->out[r] = o->buf[BUF_RECV];
    if (s->phase == D_REDUCE) s->pos = 0, s->next = 0;
    INFO(SUB_COLL, "nccl%s (op #%llu): direct, the peers' buffers read in place",
         coll_name(o->coll), (unsigned long long)o->seq);
  }
  volatile uint64_t *prog, *done;
  uint64_t seq = s->calls << DIRECT_SEQ_SHIFT;
  size_t es = o->esize, piece = TUTTI_MAX(DIRECT_PIECE_BYTES / es, 1);
  coll_t c = o->coll;
  size_t b = seg_start(c, st->count, n, r), e = seg_start(c, st->count, n, r + 1);
  if (s->phase == D_REDUCE) {
    if (shm_direct_words(comm, r, &prog, &done) != 0) {
      TUTTI_ERR(ncclInternalError, "rank %d: no shared-memory segment for a direct nccl%s", r,
                coll_name(c));
      return -1;
    }
    /* all-reduce: the own segment of the result; reduce-scatter: the own block, into recvbuff;
     * all-gather: the own block copied into place (nothing to do in place) */
    char *dst = o->buf[BUF_RECV] + (c == COLL_REDUCESCATTER ? 0 : b * es);
    if (c == COLL_ALLGATHER && dst != s->in[r]) memcpy(dst, s->in[r], (e - b) * es);
    for (size_t at = b; c != COLL_ALLGATHER && at < e; at += piece) {
      size_t len = TUTTI_MIN(piece, e - at);
      reduce_segment(o, s, n, c == COLL_ALLREDUCE ? r : r + 1, at, len, dst + (at - b) * es);
      if (c == COLL_ALLREDUCE) __atomic_store_n(prog, seq | (at + len - b), __ATOMIC_RELEASE);
    }
    *moved = 1;
    s->phase = c == COLL_REDUCESCATTER ? D_DONE : D_GATHER, s->next = 0, s->pos = 0;
  }
  while (s->phase == D_GATHER && s->next < n - 1) {
    /* all-reduce: segment k of rank k's result, as far as its progress says; all-gather:
     * rank k's send buffer, all there from the start */
    int k = tutti_mod(r + 1 + s->next, n);
    if (shm_direct_words(comm, k, &prog, &done) != 0) return -1;
    size_t kb = seg_start(c, st->count, n, k), ke = seg_start(c, st->count, n, k + 1),
           ready = ke - kb;
    const char *src = c == COLL_ALLGATHER ? s->in[k] : s->out[k] + kb * es;
    if (c == COLL_ALLREDUCE) {
      uint64_t avail = __atomic_load_n(prog, __ATOMIC_ACQUIRE);
      ready = avail < seq                                 ? 0
              : avail >= seq + (1ull << DIRECT_SEQ_SHIFT) ? ready
                                                          : (size_t)(avail - seq);
    }
    if (ready > s->pos) {
      char *to = o->buf[BUF_RECV] + (kb + s->pos) * es;
      size_t len = (ready - s->pos) * es;
      if (o->stream)
        copy_stream(to, src + s->pos * es, len);
      else
        memcpy(to, src + s->pos * es, len);
      s->pos = ready, *moved = 1;
    }
    if (s->pos < ke - kb) return block(l, k, 0);
    s->next++, s->pos = 0;
  }
  if (s->phase == D_GATHER) s->phase = D_DONE;
  if (s->phase == D_DONE) {
    if (shm_direct_words(comm, r, &prog, &done) != 0) return -1;
    __atomic_store_n(done, s->calls + 1, __ATOMIC_RELEASE);
    s->phase = D_WAIT_DONE, s->next = 0, *moved = 1;
  }
  while (s->next < n - 1) {
    int k = tutti_mod(r + 1 + s->next, n);
    if (shm_direct_words(comm, k, &prog, &done) != 0) return -1;
    if (__atomic_load_n(done, __ATOMIC_ACQUIRE) < s->calls + 1) return block(l, k, 0);
    s->next++;
  }
  finish(l, st, s, 1);
  *moved = 1;
  return 1;
}

void direct_free(ncclComm_t comm) {
  struct direct_state *s = comm->direct;
  if (!s) return;
  free(s->in);
  free(s->out);
  free(s);
  comm->direct = NULL;
  memreg_comm_free(comm);
}
