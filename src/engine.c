/* Engine: runs lanes of steps; see engine.h and algos/schedule.h for the step semantics. */
#include "engine.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "copy.h"
#include "tls_cache.h"

/* TUTTI_TIMEOUT is a communicator's, read at each init (comm->timeout_ms), not cached. */
int64_t tutti_param_Timeout(void) {
  return tutti_param_fresh("TIMEOUT", 60);
}
TUTTI_PARAM(SpinUs, "SPIN_US", 50)      /* busy-poll this long before yielding the CPU */
TUTTI_PARAM(YieldUs, "YIELD_US", 10000) /* then sched_yield this long before sleeping */

#define ENGINE_L1_BLOCK (16 * 1024)
#define ENGINE_WAIT_NS 1000000ull /* longest sleep in a transport's wait: other lanes wait too */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* A plain store of the call's bytes: streamed where the call streams (o->stream). */
static void store_bytes(const op_ctx_t *o, void *dst, const void *src, size_t bytes) {
  if (o->stream)
    copy_stream(dst, src, bytes);
  else
    copy_bytes(dst, src, bytes);
}

/* Moves one piece of a step whose data is local or a send (no receive). A plain store of a
 * streaming call streams, as a received piece's does (piece_recv). */
static void piece_local(const op_ctx_t *o, const step_t *st, char *src, char *dst, void *out,
                        size_t n, int rflags) {
  if (st->recv_peer < 0 && st->send_peer < 0 && (st->flags & STEP_REDUCE)) {
    int swap = (st->flags & STEP_SWAP) != 0;
    reduce_combine(&o->rop, dst, swap ? dst : src, swap ? src : dst, n, rflags);
    return;
  }
  if (out) reduce_copy(&o->rop, out, src, n, rflags);
  if (!(st->flags & STEP_STORE) || (dst == src && !reduce_transforms(&o->rop, rflags))) return;
  int store_flags = out ? 0 : rflags;
  if (o->stream && !reduce_transforms(&o->rop, store_flags))
    copy_stream(dst, out ? out : src, n * o->esize);
  else
    reduce_copy(&o->rop, dst, out ? out : src, n, store_flags);
}

/* Moves one received piece: reduce with src and/or forward and/or store. */
static void piece_recv(const op_ctx_t *o, const step_t *st, const void *in, char *src, char *dst,
                       void *out, size_t n, int rflags) {
  if (st->flags & STEP_REDUCE) {
    const char *a = src, *b = in; /* the operands in their order */
    if (st->flags & STEP_SWAP) a = in, b = src;
    if (!(out && (st->flags & STEP_STORE))) {
      reduce_combine(&o->rop, out ? out : dst, a, b, n, rflags);
      return;
    }
    /* Reduce into the outgoing slot and copy to dst block by block, while it is in L1. */
    size_t es = o->esize, block = TUTTI_MAX(ENGINE_L1_BLOCK / es, 1);
    for (size_t i = 0; i < n; i += block) {
      size_t m = TUTTI_MIN(block, n - i);
      reduce_combine(&o->rop, (char *)out + i * es, a + i * es, b + i * es, m, rflags);
      store_bytes(o, dst + i * es, (char *)out + i * es, m * es);
    }
    return;
  }
  int transform = reduce_transforms(&o->rop, rflags & REDUCE_POST);
  if (out && (st->flags & STEP_STORE) && !o->stream && !transform) {
    char *to[2] = {out, dst}; /* forwarded and stored: each line of the slot loaded once */
    copy_bytes_multi(to, 2, in, n * o->esize);
    return;
  }
  if (out) copy_bytes(out, in, n * o->esize);
  if (!(st->flags & STEP_STORE)) return;
  if (o->stream && !transform)
    copy_stream(dst, in, n * o->esize);
  else
    reduce_copy(&o->rop, dst, in, n, rflags & REDUCE_POST);
}

/* Where the bytes a piece sends already lie once it is computed, for a transport that sends
 * straight from memory (send_from): src for a plain send, dst when the received piece is stored
 * there as sent (reduced or not). NULL: they must be computed into a send slot first. */
static const char *piece_ref(const op_ctx_t *o, const step_t *st, const char *src, const char *dst,
                             int rflags) {
  if (st->recv_peer < 0) return reduce_transforms(&o->rop, rflags) ? NULL : src;
  if (!(st->flags & STEP_STORE) || !dst) return NULL;
  if (st->flags & STEP_REDUCE) return dst;
  return reduce_transforms(&o->rop, rflags & REDUCE_POST) ? NULL : dst;
}

/* Can a received piece go straight into dst (recv_into)? When the step only stores it there
 * as it came (and maybe forwards it). */
static int recv_in_place(const op_ctx_t *o, const step_t *st, const char *dst, int rflags) {
  return !(st->flags & STEP_REDUCE) && (st->flags & STEP_STORE) && dst &&
         !reduce_transforms(&o->rop, rflags & REDUCE_POST);
}

/* Receives the lane's piece straight into dst. Returns 1 once all of it is in (and keeps
 * saying so until the piece is done: the lane may still wait to forward it). */
static int lane_recv_into(lane_t *l, conn_t *rc, char *dst, size_t bytes, int *moved) {
  while (l->rx_got < bytes) {
    size_t k = rc->transport->recv_into(rc, dst + l->rx_got, bytes - l->rx_got);
    if (k == 0) return 0;
    l->rx_got += k, *moved = 1;
  }
  return 1;
}

/* Sends what is left of the lane's last piece (send_from). Returns 1 once all of it went. */
static int lane_flush(lane_t *l, int *moved) {
  while (l->tx_left) {
    size_t k = l->tx_conn->transport->send_from(l->tx_conn, l->tx, l->tx_left);
    if (k == 0) {
      l->wait_peer = l->tx_conn->peer, l->wait_send = 1;
      return 0;
    }
    l->tx += k, l->tx_left -= k, *moved = 1;
  }
  return 1;
}

/* Whether a STEP_WHOLE step of `bytes` on c goes by pieces without a rendezvous (transport.h). */
static int whole_by_pieces(const conn_t *c, size_t bytes, int send) {
  int can = send ? c->transport->send_large != NULL : c->transport->recv_large != NULL;
  return !can || !c->large_bytes || bytes < c->large_bytes;
}

/* A STEP_WHOLE step of at least its connection's large_bytes, at its start: the two ends agree
 * through the transport whether it travels whole (transport.h). The buffer offered is where
 * the step's bytes lie (a send without transform) or go (a plain store), NULL otherwise: the
 * transport then answers for pieces, keeping both ends' count of such steps alike. Returns 1
 * when settled (l->pos at the step's end when it went whole, else l->large set), 0 while
 * blocked. */
static int lane_large(lane_t *l, const op_ctx_t *o, const step_t *st, conn_t *rc, conn_t *sc,
                      char *src, char *dst, int rflags, int *moved) {
  size_t bytes = st->count * o->esize;
  conn_t *c = sc ? sc : rc;
  int r;
  if ((rc && sc) || whole_by_pieces(c, bytes, sc != NULL)) {
    l->large = 1;
    return 1;
  }
  if (sc)
    r = c->transport->send_large(c, piece_ref(o, st, src, dst, rflags), bytes);
  else
    r = c->transport->recv_large(c, recv_in_place(o, st, dst, rflags) ? dst : NULL, bytes);
  if (r == 0) {
    l->wait_peer = c->peer, l->wait_send = sc != NULL;
    return 0;
  }
  *moved = 1;
  if (r == LARGE_DONE)
    l->pos = st->count;
  else
    l->large = 1;
  return 1;
}

/* A received piece of another length: the ranks called different collectives (recorded). */
static int piece_mismatch(const lane_t *l, const op_ctx_t *o, int peer, size_t got, size_t want) {
  TUTTI_ERR(ncclInvalidUsage,
            "rank %d received %zu bytes from rank %d where it expected %zu in nccl%s (op #%llu): "
            "ranks called different collectives, counts or types",
            l->comm->rank, got, peer, want, coll_name(o->coll), (unsigned long long)o->seq);
  return -1;
}

/* Settles one direction of a FIFO_SWAP step as lane_large would a STEP_WHOLE one, asking for
 * pieces (bit: 1 send, 2 receive). 1 once settled, 0 while the peer's header is not in. */
static int swap_settle(lane_t *l, conn_t *c, size_t bytes, int bit, int *moved) {
  if (l->large & bit) return 1;
  int send = bit == 1;
  if (!whole_by_pieces(c, bytes, send)) {
    if (!(send ? c->transport->send_large(c, NULL, bytes)
               : c->transport->recv_large(c, NULL, bytes)))
      return 0;
    *moved = 1;
  }
  l->large |= bit;
  return 1;
}

/* A FIFO_SWAP step (schedule.h): pieces go out as far as the FIFO takes them, and each comes in
 * once the piece at its place went out (l->sent elements sent, l->pos received); sent pieces are
 * copies in the FIFO's slots, so the peer can always take them and no order of the two ranks'
 * steps waits on itself. Returns 1 when the step is over, 0 while blocked, -1 on an error. */
static int lane_swap(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved) {
  /* nothing on the wire (as lane_advance's empty steps); the buffers may be NULL */
  if (st->count == 0) {
    l->cur++;
    return 1;
  }
  ncclComm_t comm = l->comm;
  conn_t *rc = &comm->recv_conn[st->recv_peer], *sc = &comm->send_conn[st->send_peer];
  size_t es = o->esize, total = st->count;
  size_t slot = TUTTI_MAX(TUTTI_MIN(sc->slot_bytes, rc->slot_bytes) / es, 1);
  const char *src = o->buf[st->src_buf] + st->src_off * es;
  char *dst = o->buf[st->dst_buf] + st->dst_off * es;
  /* each direction settles on its own: neither end waits for the other's header to send its */
  int sending = swap_settle(l, sc, total * es, 1, moved);
  while (sending && l->sent < total) {
    size_t n = TUTTI_MIN(total - l->sent, slot);
    void *out = sc->transport->send_slot(sc, n * es);
    if (!out) break;
    copy_bytes(out, src + l->sent * es, n * es);
    sc->transport->send_post(sc, n * es);
    l->sent += n, *moved = 1;
  }
  int settled = swap_settle(l, rc, total * es, 2, moved);
  while (settled && l->pos < l->sent) {
    size_t n = TUTTI_MIN(total - l->pos, slot), got = n * es;
    const void *in = rc->transport->recv_slot(rc, &got);
    if (!in) break;
    if (got != n * es) return piece_mismatch(l, o, st->recv_peer, got, n * es);
    store_bytes(o, dst + l->pos * es, in, got);
    rc->transport->recv_done(rc);
    l->pos += n, *moved = 1;
  }
  if (l->pos == total) {
    l->cur++, l->pos = 0, l->sent = 0, l->large = 0;
    return 1;
  }
  int recv = sending && (!settled || l->pos < l->sent); /* else the FIFO to the peer is full */
  l->wait_peer = recv ? st->recv_peer : st->send_peer, l->wait_send = !recv;
  return 0;
}

/* Advances one lane as far as it can without waiting. Returns 1 if it moved, 0 if blocked,
 * -1 on a protocol error (message recorded). */
static int lane_advance(lane_t *l, const op_ctx_t *ops) {
  int moved = 0;
  ncclComm_t comm = l->comm;
  while (lane_flush(l, &moved) && l->cur < l->nsteps) {
    const step_t *st = &l->steps[l->cur];
    const op_ctx_t *o = &ops[st->op];
    if (st->kind == STEP_FIFO_SWAP && !o->dev) {
      int r = lane_swap(l, o, st, &moved);
      if (r <= 0) return r < 0 ? -1 : moved;
      continue;
    }
    if (st->kind != STEP_FIFO || o->dev) {
      int r = engine_peer_step(l, o, st, &moved);
      if (r <= 0) return r < 0 ? -1 : moved;
      continue;
    }
    size_t left = st->count - l->pos, es = o->esize, n = left;
    if (left == 0) {
      l->cur++, l->pos = 0, l->large = 0;
      continue;
    }
    conn_t *rc = st->recv_peer >= 0 ? &comm->recv_conn[st->recv_peer] : NULL;
    conn_t *sc = st->send_peer >= 0 ? &comm->send_conn[st->send_peer] : NULL;
    /* at most a slot: divides only when the rest does not fit (a division costs tens of cycles) */
    if (sc && n * es > sc->slot_bytes) n = sc->slot_bytes / es;
    if (rc && n * es > rc->slot_bytes) n = rc->slot_bytes / es;
    if (st->recv_peer < 0 && st->send_peer < 0) n = left;
    const void *in = NULL;
    void *out = NULL;
    size_t got = n * es;
    char *src = o->buf[st->src_buf] ? o->buf[st->src_buf] + (st->src_off + l->pos) * es : NULL;
    char *dst = o->buf[st->dst_buf] ? o->buf[st->dst_buf] + (st->dst_off + l->pos) * es : NULL;
    int rflags =
        ((st->flags & STEP_PRE) ? REDUCE_PRE : 0) | ((st->flags & STEP_POST) ? REDUCE_POST : 0);
    if ((st->flags & STEP_WHOLE) && !l->large && l->pos == 0) {
      if (!lane_large(l, o, st, rc, sc, src, dst, rflags, &moved)) return moved;
      continue; /* done whole (left is 0 now), or settled for pieces */
    }
    const char *ref = sc && sc->transport->send_from ? piece_ref(o, st, src, dst, rflags) : NULL;
    int into = rc && rc->transport->recv_into && recv_in_place(o, st, dst, rflags);
    if (rc && !(into ? lane_recv_into(l, rc, dst, n * es, &moved)
                     : (in = rc->transport->recv_slot(rc, &got)) != NULL)) {
      l->wait_peer = st->recv_peer, l->wait_send = 0;
      return moved;
    }
    if (sc && !ref && !(out = sc->transport->send_slot(sc, n * es))) {
      l->wait_peer = st->send_peer, l->wait_send = 1;
      return moved;
    }
    if (got != n * es) return piece_mismatch(l, o, st->recv_peer, got, n * es);
    if (into && out)
      copy_bytes(out, dst, n * es); /* forwarded through a slot transport */
    else if (rc && !into)
      piece_recv(o, st, in, src, dst, out, n, rflags);
    else if (!rc)
      piece_local(o, st, src, dst, out, n, rflags);
    if (sc && sc->transport->send_from)
      l->tx_conn = sc, l->tx = ref ? ref : out, l->tx_left = n * es;
    else if (sc)
      sc->transport->send_post(sc, n * es);
    if (rc && !into) rc->transport->recv_done(rc);
    l->pos += n, l->rx_got = 0;
    moved = 1;
    if (l->pos == st->count) l->cur++, l->pos = 0, l->large = 0; /* its last piece */
  }
  return moved;
}

/* Is the process of a same-host peer gone (or a zombie)? */
static int peer_process_dead(int pid) {
  return pid > 0 && pid != tutti_self_pid() && tutti_pid_gone(pid);
}

/* A peer that failed reports the reason it recorded (naming the rank that failed first); a
 * peer whose process is gone without a word is reported as dead (check_pids). */
static ncclResult_t peer_blame(ncclComm_t comm, int p, conn_t *c, const op_ctx_t *o,
                               int check_pids) {
  const peer_info_t *pi = &comm->peers[p];
  if (c->transport->peer_failed(c)) { /* its reason names the rank that failed first */
    const char *why = c->transport->peer_reason ? c->transport->peer_reason(c) : NULL;
    return TUTTI_ERR(ncclRemoteError,
                     "rank %d: peer rank %d (pid %d on host %s) failed during "
                     "nccl%s (op #%llu): %s",
                     comm->rank, p, pi->pid, pi->hostname, coll_name(o->coll),
                     (unsigned long long)o->seq, why ? why : "no reason given");
  }
  /* Only the peer this lane waits on matters: a peer that finished its part may have exited. */
  if (check_pids && pi->host_hash == comm->peers[comm->rank].host_hash &&
      peer_process_dead(pi->pid))
    return TUTTI_ERR(ncclRemoteError,
                     "rank %d: peer rank %d (pid %d on host %s) died during nccl%s "
                     "(op #%llu)",
                     comm->rank, p, pi->pid, pi->hostname, coll_name(o->coll),
                     (unsigned long long)o->seq);
  return ncclSuccess;
}

ncclResult_t engine_peer_blame(ncclComm_t comm, int p, const op_ctx_t *o) {
  return peer_blame(comm, p, &comm->recv_conn[p], o, 1);
}

/* A rank of this host whose process is stopped, -1 if none. At a timeout it is the rank to name:
 * the peer waited on may itself wait on it (a ring neighbour of a frozen rank), and the first
 * rank to time out tells the others its reason. Ranks on other hosts cannot be seen this way. */
static int stopped_peer(ncclComm_t comm) {
  const peer_info_t *me = &comm->peers[comm->rank];
  for (int q = 0; q < comm->nranks; q++) {
    const peer_info_t *pi = &comm->peers[q];
    if (q != comm->rank && pi->host_hash == me->host_hash && pi->pid > 0 && pi->pid != me->pid &&
        tutti_pid_stopped(pi->pid))
      return q;
  }
  return -1;
}

/* Checks why a blocked lane may never move again. Returns ncclSuccess to keep waiting. */
static ncclResult_t lane_check(lane_t *l, const op_ctx_t *ops, uint64_t waited_ns, int check_pids) {
  ncclComm_t comm = l->comm;
  /* the lane may be past its last step, its last piece still going out */
  const op_ctx_t *o = &ops[l->steps[TUTTI_MIN(l->cur, l->nsteps - 1)].op];
  int p = l->wait_peer;
  const peer_info_t *pi = &comm->peers[p];
  conn_t *c = l->wait_send ? &comm->send_conn[p] : &comm->recv_conn[p];
  if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE))
    return TUTTI_ERR(ncclInvalidUsage,
                     "rank %d: communicator aborted (ncclCommAbort) during nccl%s", comm->rank,
                     coll_name(o->coll));
  TUTTI_CHECK(peer_blame(comm, p, c, o, check_pids));
  if (comm->timeout_ms <= 0 || waited_ns / 1000000ull <= (uint64_t)comm->timeout_ms)
    return ncclSuccess;
  int s = stopped_peer(comm);
  if (s >= 0)
    return TUTTI_ERR(ncclSystemError,
                     "rank %d: timed out after %llds in nccl%s (op #%llu, step %zu of %zu): rank "
                     "%d (pid %d on host %s) is stopped (SIGSTOP or a debugger); this rank waited "
                     "to %s rank %d; TUTTI_TIMEOUT sets the limit",
                     comm->rank, (long long)(comm->timeout_ms / 1000), coll_name(o->coll),
                     (unsigned long long)o->seq, l->cur + 1, l->nsteps, s, comm->peers[s].pid,
                     comm->peers[s].hostname, l->wait_send ? "send to" : "receive from", p);
  return TUTTI_ERR(ncclSystemError,
                   "rank %d: timed out after %llds waiting to %s rank %d (pid %d on host %s) in "
                   "nccl%s (op #%llu, step %zu of %zu); TUTTI_TIMEOUT sets the limit",
                   comm->rank, (long long)(comm->timeout_ms / 1000),
                   l->wait_send ? "send to" : "receive from", p, pi->pid, pi->hostname,
                   coll_name(o->coll), (unsigned long long)o->seq, l->cur + 1, l->nsteps);
}

/* Adaptive spin: a wait that ends just after this rank yielded the CPU means the peer could
 * only run once we stopped spinning (both on one core, e.g. on a loaded machine): spin less.
 * Waits that end while spinning let the limit grow back to TUTTI_SPIN_US. */
static TUTTI_TLS uint64_t spin_limit_ns = UINT64_MAX;

static uint64_t spin_adapt(uint64_t waited_ns, uint64_t max_ns) {
  uint64_t limit = TUTTI_MIN(spin_limit_ns, max_ns);
  if (waited_ns > limit && waited_ns < limit + 20000)
    limit = TUTTI_MAX(limit / 2, 1000);
  else if (waited_ns <= limit)
    limit = TUTTI_MIN(limit + limit / 8 + 100, max_ns);
  return spin_limit_ns = limit;
}

/* Waits politely: spin (not when there are more local ranks than CPUs), then yield, then
 * sleep, growing to 1 ms, so that an idle rank costs no CPU; where the connection waited for
 * can wake us (tcp always, shm on oversubscribed machines) the sleep is its wait. Without
 * oversubscription such a rank sleeps at once (the kernel wakes it); with it, it yields first:
 * a rank that sleeps must be woken, and with more ranks than CPUs the wake-ups cost more than
 * the yields (docs/perf.md, "Waiting where ranks outnumber CPUs"). */
static int backoff(uint64_t idle_ns, int oversubscribed, conn_t *wc, int wsend,
                   uint64_t spin_limit) {
  if (wc && (!wc->transport->wait || (wc->transport->wait_oversubscribed_only && !oversubscribed)))
    wc = NULL;
  uint64_t spin_ns = oversubscribed || wc ? 0 : spin_limit;
  uint64_t yield_ns = wc && !oversubscribed ? 0 : spin_ns + (uint64_t)tutti_param_YieldUs() * 1000;
  if (idle_ns < spin_ns) {
    cpu_relax(); /* one pause: ~140 cycles on recent cores, eight would delay the wakeup */
    return 1;
  }
  if (idle_ns < yield_ns) {
    sched_yield();
  } else if (wc) { /* sleeps in the kernel until wc can move */
    wc->transport->wait(wc, wsend, ENGINE_WAIT_NS);
  } else {
    uint64_t us = TUTTI_MIN((idle_ns - yield_ns) / 16000 + 20, 1000);
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

static int lane_done(const lane_t *l) {
  return l->cur >= l->nsteps && l->tx_left == 0;
}

/* The connection the first blocked lane of the phase waits for (*send: to send on it); NULL when
 * it waits for a peer step's words (no connection to sleep on), or when a lane after it also
 * waits on a transport that sleeps only on oversubscribed machines (shm: a wake for the other
 * lane would not end the sleep). */
static conn_t *wait_conn(lane_t *lanes, int nlanes, int phase, int *send) {
  conn_t *wc = NULL;
  for (int i = 0; i < nlanes; i++) {
    lane_t *l = &lanes[i];
    if (l->phase != phase || lane_done(l)) continue;
    if (wc) return wc->transport->wait_oversubscribed_only ? NULL : wc;
    step_kind_t k = l->cur < l->nsteps ? (step_kind_t)l->steps[l->cur].kind : STEP_FIFO;
    if (k != STEP_FIFO && k != STEP_FIFO_SWAP) return NULL;
    *send = l->wait_send;
    wc = l->wait_send ? &l->comm->send_conn[l->wait_peer] : &l->comm->recv_conn[l->wait_peer];
  }
  return wc;
}

static ncclResult_t run_phase(lane_t *lanes, int nlanes, const op_ctx_t *ops, int phase) {
  uint64_t idle = 0, idle_since = 0, last_check = 0, now = 0;
  unsigned polls = 0, spinning = 0;      /* spinning: the last backoff spun */
  uint64_t max_spin = 0, spin_limit = 0; /* read at the first wait: a call may never wait */
  int oversub = 0;
  for (int i = 0; i < nlanes; i++) oversub |= lanes[i].comm->oversubscribed;
  for (;;) {
    int active = 0, moved = 0;
    for (int i = 0; i < nlanes; i++) {
      lane_t *l = &lanes[i];
      if (l->phase != phase || lane_done(l)) continue;
      int r = lane_advance(l, ops);
      if (r < 0) return l->err != ncclSuccess ? l->err : ncclInvalidUsage;
      moved |= r;
      active += !lane_done(l);
    }
    if (!active) return ncclSuccess;
    if (moved) {
      if (idle) spin_limit = spin_adapt(tutti_time_ns() - idle_since, max_spin);
      idle = 0, spinning = 0;
      continue;
    }
    /* While spinning, only every 8th poll reads the clock (a read costs as much as a poll on
     * a virtual machine's clock): the wait's length is known to within 8 polls. */
    if (spinning && (++polls & 7)) {
      cpu_relax();
      continue;
    }
    now = tutti_time_ns();
    if (idle++ == 0) {
      idle_since = last_check = now;
      for (int i = 0; i < nlanes; i++)
        if (i == 0 || lanes[i].comm != lanes[i - 1].comm) transport_idle(lanes[i].comm);
      if (!max_spin) {
        max_spin = (uint64_t)tutti_param_SpinUs() * 1000;
        spin_limit = TUTTI_MIN(spin_limit_ns, max_spin); /* read once: the loop polls */
      }
    }
    if ((idle & 63) == 0) {
      int check_pids = now - last_check > 50000000ull;
      if (check_pids) last_check = now;
      for (int i = 0; i < nlanes; i++)
        if (lanes[i].phase == phase && !lane_done(&lanes[i]))
          TUTTI_CHECK(lane_check(&lanes[i], ops, now - idle_since, check_pids));
    }
    int wsend = 0;
    conn_t *wc = wait_conn(lanes, nlanes, phase, &wsend);
    spinning = backoff(now - idle_since, oversub, wc, wsend, spin_limit);
  }
}

ncclResult_t engine_run(lane_t *lanes, int nlanes, const op_ctx_t *ops) {
  unsigned phases = 0;
  for (int i = 0; i < nlanes; i++) phases |= 1u << lanes[i].phase;
  for (int phase = 0; phase < 2; phase++)
    if (phases & (1u << phase)) TUTTI_CHECK(run_phase(lanes, nlanes, ops, phase));
  return ncclSuccess;
}

/* Passes over the lanes with nothing moved (a poll of each lane's receive and a pause) before
 * engine_run_quick hands the lanes to the engine's loop (about 3 us here: 38 ns a pass on the Zen
 * 2 guest). */
#define QUICK_POLLS 64

int engine_quick_steps(ncclComm_t comm, const step_t *steps, size_t n, const size_t *esize) {
  for (size_t i = 0; i < n; i++) {
    const step_t *st = &steps[i];
    size_t bytes = st->count * esize[st->op];
    if (st->kind != STEP_FIFO && st->kind != STEP_FIFO_SWAP) return 0;
    const conn_t *rc = st->recv_peer >= 0 ? &comm->recv_conn[st->recv_peer] : NULL;
    const conn_t *sc = st->send_peer >= 0 ? &comm->send_conn[st->send_peer] : NULL;
    if (rc && (!rc->transport || rc->transport->recv_into || bytes > rc->slot_bytes)) return 0;
    if (sc && (!sc->transport || sc->transport->send_from || bytes > sc->slot_bytes)) return 0;
    if ((st->flags & STEP_WHOLE) && !(rc && sc) && (rc || sc) &&
        !whole_by_pieces(sc ? sc : rc, bytes, sc != NULL))
      return 0; /* a rendezvous (lane_large) */
    if (st->kind == STEP_FIFO_SWAP &&
        !(whole_by_pieces(sc, bytes, 1) && whole_by_pieces(rc, bytes, 0)))
      return 0; /* a header to settle (swap_settle) */
  }
  return 1;
}

/* quick_advance's FIFO_SWAP step of one piece: sent once (l->sent), then received into its
 * place; 1 when over, 0 while its piece is not in, -1 for the engine's loop (as quick_advance). */
static int quick_swap(lane_t *l, const op_ctx_t *o, const step_t *st) {
  conn_t *rc = &l->comm->recv_conn[st->recv_peer], *sc = &l->comm->send_conn[st->send_peer];
  size_t es = o->esize, bytes = st->count * es, got = bytes;
  if (!l->sent) {
    void *out = sc->transport->send_slot(sc, bytes);
    if (!out) return -1;
    copy_bytes(out, o->buf[st->src_buf] + st->src_off * es, bytes);
    sc->transport->send_post(sc, bytes);
    l->sent = st->count;
  }
  const void *in = rc->transport->recv_slot(rc, &got);
  if (!in) return 0;
  if (got != bytes) return -1;
  store_bytes(o, o->buf[st->dst_buf] + st->dst_off * es, in, bytes);
  rc->transport->recv_done(rc);
  l->sent = 0;
  return 1;
}

/* Runs lane l's steps as far as they go without waiting, each as lane_advance does a step of one
 * piece on slot transports (the same messages in the same order, the same arithmetic) without its
 * generality: 1 when a step ran, 0 when its receive is not in yet, -1 when the engine's loop must
 * take over (a send with no room waits there; a size that differs is reported there). */
static int quick_advance(lane_t *l, const op_ctx_t *ops) {
  ncclComm_t comm = l->comm;
  int moved = 0;
  for (; l->cur < l->nsteps; l->cur++) {
    const step_t *st = &l->steps[l->cur];
    const op_ctx_t *o = &ops[st->op];
    size_t es = o->esize, n = st->count, bytes = n * es, got = bytes;
    if (n == 0) continue;
    if (st->kind == STEP_FIFO_SWAP) {
      size_t was = l->sent;
      int r = quick_swap(l, o, st);
      if (r <= 0) return r < 0 ? -1 : moved | (l->sent != was);
      moved = 1;
      continue;
    }
    conn_t *rc = st->recv_peer >= 0 ? &comm->recv_conn[st->recv_peer] : NULL;
    conn_t *sc = st->send_peer >= 0 ? &comm->send_conn[st->send_peer] : NULL;
    char *src = o->buf[st->src_buf] ? o->buf[st->src_buf] + st->src_off * es : NULL;
    char *dst = o->buf[st->dst_buf] ? o->buf[st->dst_buf] + st->dst_off * es : NULL;
    int rflags =
        ((st->flags & STEP_PRE) ? REDUCE_PRE : 0) | ((st->flags & STEP_POST) ? REDUCE_POST : 0);
    const void *in = NULL;
    void *out = NULL;
    if (rc && !(in = rc->transport->recv_slot(rc, &got))) return moved;
    if ((sc && !(out = sc->transport->send_slot(sc, bytes))) || got != bytes) return -1;
    if (rc)
      piece_recv(o, st, in, src, dst, out, n, rflags);
    else
      piece_local(o, st, src, dst, out, n, rflags);
    if (sc) sc->transport->send_post(sc, bytes);
    if (rc) rc->transport->recv_done(rc);
    moved = 1;
  }
  return moved;
}

/* Lanes of such steps, from their l->cur (the other progress fields zero), as engine_run would
 * run them: passes over the lanes until every one is done; QUICK_POLLS passes
 * without a step (none where ranks outnumber CPUs), or a step quick_advance leaves, hand the
 * lanes as they stand to engine_run, whose waiting and failure checks then apply. */
ncclResult_t engine_run_quick(lane_t *lanes, int nlanes, const op_ctx_t *ops) {
  int polls = lanes[0].comm->oversubscribed ? 0 : QUICK_POLLS;
  for (;;) {
    int active = 0, moved = 0;
    for (int i = 0; i < nlanes; i++) {
      lane_t *l = &lanes[i];
      if (l->cur == l->nsteps) continue;
      int r = quick_advance(l, ops);
      if (r < 0) return engine_run(lanes, nlanes, ops);
      moved |= r;
      active += l->cur < l->nsteps;
    }
    if (!active) return ncclSuccess;
    if (!moved) {
      if (polls-- <= 0) return engine_run(lanes, nlanes, ops);
      cpu_relax();
    }
  }
}

ncclResult_t engine_exchange(const exchange_t *x, int nx) {
  static TUTTI_TLS step_t *steps;
  static TUTTI_TLS lane_t *lanes;
  static TUTTI_TLS op_ctx_t *ops;
  static TUTTI_TLS size_t cap, ocap;
  size_t need = 0, nl = 0;
  for (int i = 0; i < nx; i++) need += 2 * (size_t)x[i].comm->nranks;
  if (need > cap || (size_t)nx > ocap) {
    step_t *s = realloc(steps, need * sizeof(*s));
    if (s) steps = s;
    lane_t *l = realloc(lanes, need * sizeof(*l));
    if (l) lanes = l;
    op_ctx_t *o = realloc(ops, (size_t)nx * sizeof(*o));
    if (o) ops = o;
    if (!s || !l || !o) return TUTTI_ERR(ncclSystemError, "out of memory for an exchange");
    cap = need, ocap = (size_t)nx;
    tls_cache_keep(&steps, &cap), tls_cache_keep(&lanes, &cap), tls_cache_keep(&ops, &ocap);
  }
  for (int i = 0; i < nx; i++) {
    ops[i] = (op_ctx_t){.comm = x[i].comm,
                        .coll = x[i].call->coll, /* for messages: the user's call */
                        .algo = ALGO_P2P,
                        .esize = 1,
                        .seq = x[i].call->seq,
                        .rop = {.type = ncclUint8, .base = ncclSum, .divisor = 1}};
    ops[i].buf[BUF_SEND] = (char *)x[i].mine, ops[i].buf[BUF_RECV] = x[i].theirs;
  }
  /* One lane per communicator, peer and direction, its steps the exchanges of that communicator
   * in their order: messages to one peer are told apart only by their order in its FIFO, and
   * lanes have no order between them (a receive lane of a later exchange could take an earlier
   * one's message). */
  size_t ns = 0;
  for (int i = 0; i < nx; i++) {
    ncclComm_t comm = x[i].comm;
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = x[j].comm == comm;
    if (seen) continue; /* its lanes were made with the first exchange of its communicator */
    int n = comm->nranks;
    for (int k = 1; k < n; k++) {
      int p = (comm->rank + k) % n;
      for (int recv = 0; recv < 2; recv++) {
        size_t first = ns;
        for (int j = i; j < nx; j++) {
          if (x[j].comm != comm) continue;
          steps[ns++] = recv ? (step_t){.recv_peer = p,
                                        .send_peer = -1,
                                        .src_buf = BUF_NONE,
                                        .dst_buf = BUF_RECV,
                                        .flags = STEP_STORE,
                                        .op = (uint16_t)j,
                                        .dst_off = (size_t)p * x[j].bytes,
                                        .count = x[j].bytes}
                             : (step_t){.recv_peer = -1,
                                        .send_peer = p,
                                        .src_buf = BUF_SEND,
                                        .dst_buf = BUF_NONE,
                                        .op = (uint16_t)j,
                                        .count = x[j].bytes};
        }
        lanes[nl++] = (lane_t){.comm = comm, .steps = &steps[first], .nsteps = ns - first};
      }
    }
  }
  return nl ? engine_run(lanes, (int)nl, ops) : ncclSuccess;
}
