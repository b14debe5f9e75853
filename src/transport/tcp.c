/* TCP transport: ranks on different hosts (and on one host when TUTTI_SHM_DISABLE=1).
 *
 * Each direction of each peer pair is one connection over nsocks = TUTTI_SOCKET_NTHREADS x
 * TUTTI_NSOCKS_PERTHREAD sockets (NCCL's names work too; default 1): the sender's own sockets,
 * or, where a machine of the pair has more ranks than CPUs, sockets the pair shares for both
 * directions (opened by the lower rank; tcp_setup.c's pair_shares says why). Piece number s
 * always travels on socket s % nsocks as [header: kind, bytes][payload], so every socket carries
 * every nsocks-th piece of its direction in order and the receiver takes them back in order
 * without any reordering.
 *
 * All data moves on the engine's own thread, with no helper thread and no copy of ours:
 *   send     send_from writes a piece straight from the user's buffer (or from the staging
 *            slot, when the engine has to transform the bytes first), header and payload in one
 *            non-blocking sendmsg; while the socket is full the engine comes back with the rest.
 *            A piece is in the kernel before the engine moves on, so nothing is left to flush:
 *            the caller's buffer is free at once and a collective is over when the engine says.
 *   receive  recv_into reads a piece that is only stored straight into the user's buffer;
 *            recv_slot reads one to be reduced (or transformed) into the staging slot, and
 *            the engine reduces out of it. Non-blocking reads of whatever is there.
 *   waiting  tcp_wait sleeps in poll() on the socket the engine waits for, so a waiting rank
 *            costs no CPU and wakes the moment the kernel has room or bytes for it; the engine
 *            calls it at once, or, where the machine's ranks outnumber its CPUs, after yielding
 *            for TUTTI_YIELD_US (there, the wake-ups of sleepers cost more than the yields).
 *            (Helper threads moving slots would cost two copies of ours and two context
 *            switches per slot on top of the kernel's own work.)
 * The kernel's socket buffers are the connection's FIFO (TUTTI_SOCKET_BUFFER, at least
 * TCP_NSLOTS x TCP_SLOT_BYTES: twice the agreed chunk). MSG_ZEROCOPY would not help: on veth
 * and loopback the kernel copies at delivery anyway, and the buffer's reuse would have to wait
 * for a completion.
 *
 * Setup (tcp_setup.c): listen, authenticate every data socket with the job secret, open the
 * send sockets (shared ones: those to the higher ranks); post_connect waits for the peers'.
 * The port stays open for the communicator's life (a scan is dropped, never accepted).
 *
 * Failure: an error, or an EOF without a goodbye, on any socket the engine reads or writes marks
 * that connection (and so the peer: peer_failed looks at both directions) failed, with a reason
 * naming the peer's rank and host, logged (the first with WARN) and recorded as the
 * communicator's error. That marks this rank failed towards every peer: mark_failed writes an
 * abort notice with the reason on every socket whose sending side is between pieces, and on the
 * otherwise unused reverse direction of every receive socket, and shuts all sending sides down,
 * so each peer learns that we failed, and why, as soon as it reads from us (the root cause
 * travels: "rank 0 on host h1 aborted: ... rank 3 on host h2 ..."). An EOF or a reset alone does
 * not name the peer before its notice was looked for (verdict_probe): the peer may only be a
 * casualty that closed its sockets after telling us which rank died. Keepalive
 * probes and TCP_USER_TIMEOUT at half of TUTTI_TIMEOUT turn a cut link into ETIMEDOUT, naming the
 * unreachable host before the engine's own timeout would fire. A clean close sends a goodbye
 * header on every socket, so the peer never mistakes it for a crash.
 */
#include "tcp.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"

TUTTI_PARAM(NetDrainMs, "NET_DRAIN_MS", 5000) /* close: how long a goodbye may wait */

/* ---- a break without a reason: the peer's own notice first ---- */

/* An EOF or a reset tells only that the peer's socket closed, not why: a peer that failed
 * because a third rank died aborts, tells every peer why (tcp_mark_failed), and exits; its close
 * may reach this rank first, as a reset (it closed with our bytes unread) or as an EOF in the
 * middle of a piece (it stopped sending). The notice, with the name of the rank that died, is
 * then already here or on its way on another channel of the same peer:
 *   - the peer's receive stream: behind pieces the engine has not read yet (skipped here);
 *   - the reverse direction of our send sockets (not shared): the aborting peer writes its notice
 *     there too, where nothing else ever travels, so it never waits behind a piece.
 * verdict_probe reads both for at most TCP_VERDICT_MS; a peer that was killed ends them at once
 * (its kernel closed every socket) and is named as before. */
#define TCP_VERDICT_MS 1000
/* How long the receive path waits for the rest of an abort notice whose header has come. */
#define REASON_WAIT_NS (1000ull * 1000 * 1000)

typedef struct verdict_chan {
  tcp_conn_t *stream; /* the peer's receive stream, pieces in order over its sockets; or NULL: */
  int fd;             /* the reverse direction of one of our send sockets */
  int ended;
  tcp_hdr_t hdr;
  size_t hdr_got, skip; /* header bytes read; payload bytes of a data piece still to skip */
  uint64_t piece;
} verdict_chan_t;

static int chan_fd(const verdict_chan_t *v) {
  return v->stream ? v->stream->fds[v->piece % (uint64_t)v->stream->nsocks] : v->fd;
}

/* Reads without blocking; k > 0 bytes, 0 for nothing yet, -1 once the channel ended. */
static ssize_t chan_recv(verdict_chan_t *v, void *p, size_t n) {
  ssize_t k = recv(chan_fd(v), p, n, MSG_DONTWAIT);
  if (k > 0) return k;
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  return -1;
}

/* Reads up to want bytes from fd into p, waiting in poll() for the rest until the deadline; the
 * count it got (short at EOF, an error or the deadline). For an abort notice's reason, which
 * its sender writes in one go with the header: a peer that stops mid-notice cannot hang us. */
static size_t recv_until(int fd, char *p, size_t want, uint64_t deadline) {
  size_t got = 0;
  while (got < want) {
    ssize_t k = recv(fd, p + got, want - got, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    if (k > 0) {
      got += (size_t)k;
      continue;
    }
    if (tutti_time_ns() > deadline) break;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    poll(&pf, 1, 10);
  }
  return got;
}

/* The abort notice's reason after its header: 1 with the text in why, -1 when it did not come
 * whole by the deadline. */
static int chan_reason(verdict_chan_t *v, char *why, size_t n, uint64_t deadline) {
  size_t want = TUTTI_MIN((size_t)v->hdr.bytes, n - 1);
  size_t got = recv_until(chan_fd(v), why, want, deadline);
  why[got] = '\0';
  return got > 0 || want == 0 ? 1 : -1;
}

/* Moves one channel on as far as its bytes go: 1 with a verdict in why, 0 to wait, -1 when it
 * ended (EOF, an error, a goodbye, anything but data and a notice). */
static int chan_step(verdict_chan_t *v, char *why, size_t n, uint64_t deadline) {
  char sink[4096];
  for (;;) {
    while (v->hdr_got < sizeof(v->hdr)) {
      ssize_t k = chan_recv(v, (char *)&v->hdr + v->hdr_got, sizeof(v->hdr) - v->hdr_got);
      if (k <= 0) return (int)k;
      if ((v->hdr_got += (size_t)k) < sizeof(v->hdr)) continue;
      if (v->hdr.kind == HDR_ABORT && v->hdr.bytes < TCP_REASON_MAX)
        return chan_reason(v, why, n, deadline);
      if (!v->stream || v->hdr.kind != HDR_DATA || v->hdr.bytes > v->stream->slot_bytes) return -1;
      v->skip = v->hdr.bytes;
    }
    while (v->skip > 0) {
      ssize_t k = chan_recv(v, sink, TUTTI_MIN(v->skip, sizeof(sink)));
      if (k <= 0) return (int)k;
      v->skip -= (size_t)k;
    }
    v->hdr_got = 0, v->piece++;
  }
}

/* Where the receive stream r stands: its piece in progress is skipped to its end. */
static verdict_chan_t chan_of_stream(tcp_conn_t *r) {
  verdict_chan_t v = {
      .stream = r, .fd = -1, .hdr = r->rx_hdr, .hdr_got = r->rx_hdr_got, .piece = r->rx_piece};
  if (v.hdr_got == sizeof(v.hdr)) {
    if (v.hdr.kind != HDR_DATA || v.hdr.bytes < r->rx_got)
      v.ended = 1;
    else
      v.skip = v.hdr.bytes - r->rx_got;
  }
  return v;
}

/* Looks for peer c->peer's abort notice (see above) for at most TCP_VERDICT_MS, or a quarter of
 * TUTTI_TIMEOUT if that is less: 1 with its reason in why. The receive stream is consumed: the
 * caller fails it. */
static int verdict_probe(tcp_conn_t *c, char *why, size_t n) {
  tcp_state_t *st = c->st;
  tcp_conn_t *r = st->recv ? st->recv[c->peer] : NULL, *s = st->send ? st->send[c->peer] : NULL;
  verdict_chan_t ch[1 + TCP_MAX_SOCKS];
  int nch = 0;
  if (r && r != c && !__atomic_load_n(&r->failed, __ATOMIC_ACQUIRE) && !r->byes)
    ch[nch++] = chan_of_stream(r); /* (the engine's own thread: nobody else reads it) */
  for (int k = 0; s && !s->shared && k < s->nsocks; k++)
    ch[nch++] = (verdict_chan_t){.fd = s->fds[k]};
  int64_t ms = TUTTI_MIN((int64_t)TCP_VERDICT_MS,
                         st->comm->timeout_ms > 0 ? st->comm->timeout_ms / 4 : TCP_VERDICT_MS);
  uint64_t deadline = tutti_time_ns() + (uint64_t)ms * 1000000ull;
  for (;;) {
    struct pollfd pf[1 + TCP_MAX_SOCKS];
    int live = 0;
    for (int i = 0; i < nch; i++) {
      if (ch[i].ended) continue;
      int res = chan_step(&ch[i], why, n, deadline);
      if (res > 0)
        INFO(SUB_NET, "rank %d: rank %d's abort notice found on %s", st->comm->rank, c->peer,
             ch[i].stream ? "its receive stream" : "the reverse direction of a send socket");
      if (res > 0) return 1;
      if (res < 0)
        ch[i].ended = 1;
      else
        pf[live++] = (struct pollfd){.fd = chan_fd(&ch[i]), .events = POLLIN};
    }
    uint64_t now = tutti_time_ns();
    if (live == 0 || now >= deadline) return 0;
    poll(pf, (nfds_t)live, (int)TUTTI_MIN((deadline - now) / 1000000ull + 1, 50));
  }
}

/* ---- failures ---- */

static tcp_conn_t *conn_twin(tcp_conn_t *c);

/* Marks t failed for the reason its twin recorded (no second message). */
static void conn_fail_as(tcp_conn_t *t, const char *reason) {
  int expected = 0;
  if (!t || !__atomic_compare_exchange_n(&t->claimed, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
    return;
  snprintf(t->reason, sizeof(t->reason), "%s", reason);
  __atomic_store_n(&t->failed, 1, __ATOMIC_RELEASE);
}

/* Records why a connection broke and fails the communicator (which tells every peer). Quiet
 * when the break is our own doing: this rank closing, or a send connection after this rank
 * failed (mark_failed shut it). A receive connection that breaks is always news from the peer. */
static void conn_fail(tcp_conn_t *c, int err, const char *detail) {
  tcp_state_t *st = c->st;
  int quiet = __atomic_load_n(&st->closing, __ATOMIC_ACQUIRE) ||
              (c->is_send && __atomic_load_n(&st->aborted, __ATOMIC_ACQUIRE));
  int expected = 0;
  if (!__atomic_compare_exchange_n(&c->claimed, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return;
  int me = st->comm->rank, p = c->peer;
  const char *h = tcp_host_of(st, p), *dir = c->is_send ? "sending to" : "receiving from";
  char *r = c->reason, verdict[TCP_REASON_MAX];
  size_t n = sizeof(c->reason);
  int probed = !quiet && (err == 0 || err == ECONNRESET || err == EPIPE) &&
               __atomic_load_n(&st->live, __ATOMIC_ACQUIRE) &&
               verdict_probe(c, verdict, sizeof(verdict));
  if (probed) err = -2, detail = verdict[0] ? verdict : "(no reason given)";
  if (err == 0)
    snprintf(r, n,
             "rank %d: rank %d on host %s closed the connection without a goodbye (it "
             "exited, was killed or lost its host)",
             me, p, h);
  else if (err == ECONNRESET || err == EPIPE)
    snprintf(r, n,
             "rank %d: connection reset by rank %d on host %s while %s it (the process "
             "is gone)",
             me, p, h, dir);
  else if (err == ETIMEDOUT)
    snprintf(r, n,
             "rank %d: connection to rank %d on host %s timed out while %s it (no answer "
             "from that host for TUTTI_TIMEOUT/2 = %llds: host down or link cut?)",
             me, p, h, dir, (long long)(st->comm->timeout_ms / 2000));
  else if (err == -2) {
    if (snprintf(r, n, "rank %d: rank %d on host %s aborted: %s", me, p, h, detail) >= (int)n)
      memcpy(r + n - 4, "...", 4); /* the peer's reason did not fit whole: say so */
  } else if (err < 0)
    snprintf(r, n, "rank %d: %s from rank %d on host %s", me, detail, p, h);
  else
    snprintf(r, n, "rank %d: socket error %s rank %d on host %s: %s", me, dir, p, h, strerror(err));
  __atomic_store_n(&c->failed, 1, __ATOMIC_RELEASE);
  if (probed) conn_fail_as(conn_twin(c), r); /* its stream was read past what the engine took */
  if (quiet) return;
  if (__atomic_fetch_add(&st->nremote, 1, __ATOMIC_ACQ_REL) == 0)
    WARN("%s", r);
  else
    INFO(SUB_NET, "%s", r);
  comm_set_error(st->comm, ncclRemoteError, r);
}

/* ---- data path (the engine's thread; nothing blocks but tcp_wait) ---- */

/* The staging slot, for a piece the engine must compute before it goes (send_from then sends
 * it from here; the engine asks for it only once the previous piece went out whole). */
static void *tcp_send_slot(conn_t *conn, size_t bytes) {
  (void)bytes; /* at most a slot */
  tcp_conn_t *c = conn->priv;
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE)) return NULL; /* let the engine see it */
  return c->slots;
}

/* A piece's last bytes must not wait. The kernel's autocorking holds back a write's last,
 * partial segment while earlier ones of the socket are still queued below TCP (a busy NIC, or a
 * rate-limited link such as the test bed's tc tbf), so the receiver would wait for those bytes
 * until the queue drains (docs/perf.md, "Figures behind the code"). Setting TCP_NODELAY again
 * sends what is queued at once. Pieces below TCP_PUSH_BYTES are one segment that leaves whole,
 * where the extra system call would only cost. */
#define TCP_PUSH_BYTES (16 * 1024)
static void push_tail(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Sends what it can of the current piece without blocking (a new piece when the last one went
 * out whole: then bytes is the piece's length); returns the payload bytes taken. */
static size_t tcp_send_from(conn_t *conn, const void *buf, size_t bytes) {
  tcp_conn_t *c = conn->priv;
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE))
    return 0;
  pthread_mutex_lock(&c->tx_mu); /* only an abort notice ever waits for it */
  if (c->tx_left == 0) {
    c->tx_hdr = (tcp_hdr_t){HDR_DATA, (uint32_t)bytes, c->checksum ? crc32c(0, buf, bytes) : 0};
    c->tx_hdr_left = sizeof(tcp_hdr_t), c->tx_left = bytes;
    c->tx_fd = c->fds[c->tx_piece++ % (uint64_t)c->nsocks];
  }
  struct iovec iov[2];
  int n = 0;
  if (c->tx_hdr_left)
    iov[n++] =
        (struct iovec){(char *)&c->tx_hdr + sizeof(tcp_hdr_t) - c->tx_hdr_left, c->tx_hdr_left};
  iov[n++] = (struct iovec){(void *)buf, c->tx_left};
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t k = sendmsg(c->tx_fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
  int err = k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR ? errno : 0;
  size_t took = 0;
  if (k > 0) {
    size_t h = TUTTI_MIN((size_t)k, c->tx_hdr_left);
    c->tx_hdr_left -= h, took = (size_t)k - h, c->tx_left -= took;
    if (c->tx_left == 0 && c->tx_hdr.bytes >= TCP_PUSH_BYTES) push_tail(c->tx_fd);
  }
  pthread_mutex_unlock(&c->tx_mu);
  if (err) conn_fail(c, err, NULL); /* outside tx_mu: it marks this rank failed */
  return took;
}

/* Reads what is there, up to n bytes, without blocking: the count, or -1 once the connection
 * failed (EOF or an error: the reason is recorded). */
static ssize_t rx_read(tcp_conn_t *c, void *p, size_t n) {
  ssize_t k = recv(c->rx_fd, p, n, MSG_DONTWAIT);
  if (k > 0) return k;
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  conn_fail(c, k == 0 ? 0 : errno, NULL);
  return -1;
}

/* What a header other than data means: the peer said goodbye (destroyed its communicator),
 * aborted (its reason follows), or sent garbage. Always ends the connection. */
static void rx_not_data(tcp_conn_t *c, const tcp_hdr_t *h) {
  if (h->kind == HDR_BYE) {
    __atomic_store_n(&c->byes, 1, __ATOMIC_RELEASE);
  } else if (h->kind == HDR_ABORT && h->bytes < TCP_REASON_MAX) {
    char why[sizeof(c->reason)] = ""; /* what the connection's reason can hold of it */
    size_t want = TUTTI_MIN((size_t)h->bytes, sizeof(why) - 1);
    size_t got = recv_until(c->rx_fd, why, want, tutti_time_ns() + REASON_WAIT_NS);
    why[got] = '\0'; /* a cut-off reason is still worth showing */
    conn_fail(c, -2, why[0] ? why : "(no reason given)");
  } else {
    char what[96];
    snprintf(what, sizeof(what), "malformed header (kind %#x, %u bytes)", h->kind, h->bytes);
    conn_fail(c, -1, what);
  }
}

/* Reads the next piece's header: 1 once it is a data header, 0 while it is not all here,
 * -1 when the connection ended. */
static int rx_header(tcp_conn_t *c) {
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) || c->byes) return -1;
  if (c->rx_hdr_got == 0) c->rx_fd = c->fds[c->rx_piece % (uint64_t)c->nsocks];
  while (c->rx_hdr_got < sizeof(tcp_hdr_t)) {
    ssize_t k = rx_read(c, (char *)&c->rx_hdr + c->rx_hdr_got, sizeof(tcp_hdr_t) - c->rx_hdr_got);
    if (k <= 0) return (int)k;
    c->rx_hdr_got += (size_t)k;
  }
  if (c->rx_hdr.kind == HDR_DATA && c->rx_hdr.bytes <= c->slot_bytes) return 1;
  rx_not_data(c, &c->rx_hdr);
  return -1;
}

/* TUTTI_CHECKSUM: folds the k bytes of the current piece just read at p into its CRC, and at
 * the piece's end compares it with the sender's; 0, or -1 after failing the connection with a
 * message naming the link. TUTTI_TEST_CORRUPT_RECV=N first flips a bit of the Nth piece this
 * rank receives, as a fault on the wire would (the test of this check). */
static int rx_check(tcp_conn_t *c, char *p, size_t k) {
  tcp_state_t *st = c->st;
  if (c->rx_got == 0 && st->corrupt_piece > 0 &&
      __atomic_add_fetch(&st->pieces_in, 1, __ATOMIC_RELAXED) == st->corrupt_piece && k > 0)
    p[0] ^= 0x10;
  if (!c->checksum) return 0;
  c->rx_crc = crc32c(c->rx_got == 0 ? 0 : c->rx_crc, p, k);
  if (c->rx_got + k < c->rx_hdr.bytes || c->rx_crc == c->rx_hdr.crc) return 0;
  char what[200];
  snprintf(what, sizeof(what),
           "data corrupted on the wire (TUTTI_CHECKSUM: piece %llu of %u bytes has CRC32C "
           "%08x, the sender's was %08x)",
           (unsigned long long)c->rx_piece, c->rx_hdr.bytes, c->rx_crc, c->rx_hdr.crc);
  conn_fail(c, -1, what);
  return -1;
}

/* The next piece, read into the staging slot (the kernel's socket buffer is the FIFO). */
static const void *tcp_recv_slot(conn_t *conn, size_t *bytes) {
  tcp_conn_t *c = conn->priv;
  if (rx_header(c) != 1) return NULL;
  if (c->rx_hdr.bytes == 0 && c->rx_got == 0 && rx_check(c, c->slots, 0) != 0) return NULL;
  while (c->rx_got < c->rx_hdr.bytes) {
    ssize_t k = rx_read(c, c->slots + c->rx_got, c->rx_hdr.bytes - c->rx_got);
    if (k <= 0 || rx_check(c, c->slots + c->rx_got, (size_t)k) != 0) return NULL;
    c->rx_got += (size_t)k;
  }
  *bytes = c->rx_hdr.bytes;
  return c->slots;
}

/* Reads what is there of the next piece straight into buf (see transport.h). A piece of
 * another length fails the connection: the ranks disagree on the collective. */
static size_t tcp_recv_into(conn_t *conn, void *buf, size_t bytes) {
  tcp_conn_t *c = conn->priv;
  if (rx_header(c) != 1) return 0;
  if (c->rx_got == 0 && c->rx_hdr.bytes != bytes) {
    char what[160];
    snprintf(what, sizeof(what),
             "a piece of %u bytes where %zu were due (ranks called "
             "different collectives, counts or types?)",
             c->rx_hdr.bytes, bytes);
    conn_fail(c, -1, what);
    return 0;
  }
  ssize_t k = rx_read(c, buf, bytes);
  if (k <= 0 || rx_check(c, buf, (size_t)k) != 0) return 0;
  if ((c->rx_got += (size_t)k) == c->rx_hdr.bytes) c->rx_hdr_got = c->rx_got = 0, c->rx_piece++;
  return (size_t)k;
}

static void tcp_recv_done(conn_t *conn) {
  tcp_conn_t *c = conn->priv;
  c->rx_hdr_got = c->rx_got = 0, c->rx_piece++;
}

/* Sleeps in poll() until the engine's connection can move: room in the socket of the piece
 * going out (or of the next one), or bytes of the next piece in. */
static void tcp_wait(conn_t *conn, int send, uint64_t timeout_ns) {
  tcp_conn_t *c = conn->priv;
  int fd = send ? (c->tx_left ? c->tx_fd : c->fds[c->tx_piece % (uint64_t)c->nsocks])
                : c->fds[c->rx_piece % (uint64_t)c->nsocks];
  struct pollfd pf = {.fd = fd, .events = send ? POLLOUT : POLLIN};
  poll(&pf, 1, (int)((timeout_ns + 999999) / 1000000));
}

/* The other direction's connection with the same peer. */
static tcp_conn_t *conn_twin(tcp_conn_t *c) {
  return c->is_send ? c->st->recv[c->peer] : c->st->send[c->peer];
}

static int tcp_peer_failed(conn_t *conn) {
  tcp_conn_t *c = conn->priv, *twin = conn_twin(c);
  /* a break in either direction means the peer is gone or aborted; once this rank has failed
   * (its peers are being told), waiting on any peer is pointless too */
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) ||
      (twin && __atomic_load_n(&twin->failed, __ATOMIC_ACQUIRE)) ||
      __atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE))
    return 1;
  /* the peer said goodbye (closed its communicator): nothing will come */
  return !c->is_send && __atomic_load_n(&c->byes, __ATOMIC_ACQUIRE);
}

static const char *tcp_peer_reason(conn_t *conn) {
  tcp_conn_t *c = conn->priv, *twin = conn_twin(c);
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) && c->reason[0]) return c->reason;
  if (twin && __atomic_load_n(&twin->failed, __ATOMIC_ACQUIRE) && twin->reason[0])
    return twin->reason;
  if (!c->is_send && __atomic_load_n(&c->byes, __ATOMIC_ACQUIRE))
    return "the peer destroyed its communicator";
  if (__atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE) && comm_error_text(c->st->comm))
    return comm_error_text(c->st->comm); /* this rank failed first, for this reason */
  return NULL;
}

/* ---- connections' end ---- */

static void conn_shutdown(tcp_conn_t *c, int how) {
  for (int k = 0; k < c->nsocks; k++)
    if (c->fds[k] >= 0) shutdown(c->fds[k], how);
}

/* Says goodbye on every socket of a send connection whose last piece went out whole, waiting
 * for room at most until deadline (a stuck peer then sees EOF without it), then shuts down. */
static void send_bye(tcp_conn_t *c, uint64_t deadline) {
  tcp_hdr_t bye = {HDR_BYE, 0};
  int whole = !c->failed && !c->st->aborted && c->tx_left == 0 && c->tx_hdr_left == 0;
  for (int k = 0; whole && k < c->nsocks; k++) {
    size_t off = 0;
    while (off < sizeof(bye)) {
      ssize_t n =
          send(c->fds[k], (char *)&bye + off, sizeof(bye) - off, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        off += (size_t)n;
        continue;
      }
      if ((n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
          tutti_time_ns() > deadline)
        break;
      usleep(200);
    }
  }
  conn_shutdown(c, SHUT_WR);
}

static void conn_free(tcp_conn_t *c) {
  for (int k = 0; (!c->shared || !c->is_send) && k < TCP_MAX_SOCKS; k++) /* shared: recv owns */
    if (c->fds[k] >= 0) close(c->fds[k]);
  pthread_mutex_destroy(&c->tx_mu);
  munmap(c, c->arena_bytes);
}

/* ---- vtable: setup, connect, post_connect (the work is in tcp_setup.c) ---- */

static int tcp_can_connect(struct ncclComm *comm, int peer) {
  return peer != comm->rank;
}

static ncclResult_t tcp_post_connect(struct ncclComm *comm) {
  tcp_state_t *st = tcp_state_of(comm);
  if (!st || st->npeers == 0) return ncclSuccess;
  TUTTI_CHECK(tcp_wait_receive_sockets(st));
  __atomic_store_n(&st->live, 1, __ATOMIC_RELEASE);
  return ncclSuccess;
}

/* ---- failure and close ---- */

/* The abort notice: [header HDR_ABORT, bytes][reason]; its length. */
static size_t notice_of(char msg[sizeof(tcp_hdr_t) + TCP_REASON_MAX], const char *why) {
  tcp_hdr_t h = {HDR_ABORT, (uint32_t)TUTTI_MIN(strlen(why), TCP_REASON_MAX - 1)};
  memcpy(msg, &h, sizeof(h));
  memcpy(msg + sizeof(h), why, h.bytes);
  return sizeof(h) + h.bytes;
}

/* Tells a peer that this rank failed, and why, on every send socket, unless a piece is half
 * out (then the shutdown alone says it: EOF without a goodbye). */
static void send_abort_notice(tcp_conn_t *c, const char *msg, size_t len) {
  pthread_mutex_lock(&c->tx_mu);
  for (int k = 0; c->tx_left == 0 && c->tx_hdr_left == 0 && k < c->nsocks; k++) {
    /* never blocks: a full socket gets no notice */
    ssize_t ignored = send(c->fds[k], msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)ignored;
  }
  conn_shutdown(c, SHUT_WR);
  pthread_mutex_unlock(&c->tx_mu);
}

/* The same notice on the reverse direction of a receive connection's sockets (not shared: that
 * direction carries nothing else, so the notice always fits and never waits behind a piece).
 * A peer whose sending to us breaks finds it there (verdict_probe). */
static void send_reverse_notice(tcp_conn_t *r, const char *msg, size_t len) {
  for (int k = 0; !r->shared && k < r->nsocks; k++) {
    ssize_t ignored = send(r->fds[k], msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)ignored;
  }
}

/* This rank failed or aborted: every peer hears it on our sockets at once (the reason,
 * then EOF). Their receiving sides stay open: what breaks there from now on is the peers' news. */
static void tcp_mark_failed(struct ncclComm *comm) {
  tcp_state_t *st = tcp_state_of(comm);
  if (!st) return;
  pthread_mutex_lock(&st->life_mu);
  if (st->closing || __atomic_exchange_n(&st->aborted, 1, __ATOMIC_ACQ_REL)) {
    pthread_mutex_unlock(&st->life_mu);
    return;
  }
  const char *why = comm_failure_reason(comm);
  char msg[sizeof(tcp_hdr_t) + TCP_REASON_MAX];
  size_t len = notice_of(msg, why);
  int live = __atomic_load_n(&st->live, __ATOMIC_ACQUIRE);
  for (int p = 0; live && st->recv && p < comm->nranks; p++) /* first: before any EOF */
    if (st->recv[p]) send_reverse_notice(st->recv[p], msg, len);
  for (int p = 0; st->send && st->recv && p < comm->nranks; p++) {
    if (st->send[p] && live)
      send_abort_notice(st->send[p], msg, len);
    else if (st->send[p])
      conn_shutdown(st->send[p], SHUT_WR);
  }
  pthread_mutex_unlock(&st->life_mu);
}

static void tcp_close(struct ncclComm *comm) {
  tcp_state_t *st = tcp_state_of(comm);
  if (!st) return;
  pthread_mutex_lock(&st->life_mu);                    /* a mark_failed under way finishes first */
  __atomic_store_n(&st->closing, 1, __ATOMIC_RELEASE); /* failures from now on are ours */
  pthread_mutex_unlock(&st->life_mu);
  sock_acceptor_stop(st->acceptor);
  /* goodbye on every send connection, then close everything */
  int n = st->send && st->recv ? comm->nranks : 0;
  uint64_t deadline = tutti_time_ns() + (uint64_t)tutti_param_NetDrainMs() * 1000000ull;
  for (int p = 0; p < n; p++)
    if (st->send[p]) send_bye(st->send[p], deadline);
  for (int p = 0; p < n; p++) {
    if (st->send[p]) conn_free(st->send[p]), st->send[p] = NULL;
    if (st->recv[p]) conn_free(st->recv[p]), st->recv[p] = NULL;
  }
  for (size_t i = 0; st->rfds && i < (size_t)comm->nranks * TCP_MAX_SOCKS; i++)
    if (st->rfds[i] >= 0) close(st->rfds[i]);
  if (st->listen_fd >= 0) close(st->listen_fd);
  tcp_state_unlink(st);
  pthread_mutex_destroy(&st->mu);
  pthread_mutex_destroy(&st->life_mu);
  pthread_cond_destroy(&st->cv);
  free(st->send);
  free(st->recv);
  free(st->rfds);
  free(st);
}

const transport_t tcp_transport = {
    .name = "tcp",
    .can_connect = tcp_can_connect,
    .setup = tcp_setup_listen,
    .connect = tcp_setup_connect,
    .post_connect = tcp_post_connect,
    .send_slot = tcp_send_slot,
    .send_post = NULL, /* every piece goes out through send_from */
    .send_from = tcp_send_from,
    .wait = tcp_wait,
    .recv_slot = tcp_recv_slot,
    .recv_into = tcp_recv_into,
    .recv_done = tcp_recv_done,
    .peer_failed = tcp_peer_failed,
    .peer_reason = tcp_peer_reason,
    .mark_failed = tcp_mark_failed,
    .close = tcp_close,
};
