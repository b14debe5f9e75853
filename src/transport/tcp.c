/* TCP transport: ranks on different hosts (and on one host when TUTTI_SHM_DISABLE=1).
 *
 * Each direction of each peer pair is one connection: a FIFO of slots in this process's memory,
 * nsocks = nthreads x socks_per_thread sockets (TUTTI_SOCKET_NTHREADS, TUTTI_NSOCKS_PERTHREAD,
 * NCCL's names work too) and nthreads helper threads that move whole slots between the FIFO
 * and the sockets. Slot number s always travels on socket s % nsocks, so every socket carries
 * every nsocks-th slot in order and the receiver puts each slot back in its place without any
 * reordering; helper thread t serves the slots s = t (mod nthreads), i.e. the sockets t,
 * t + nthreads, ... (both ends agree on the geometry, so a sender's thread and the receiver's
 * thread of a socket walk the same slots in the same order, and neither can wait on the other).
 *
 *   sender    engine fills slot s % nslots; send_post publishes posted = s + 1 (release).
 *             Thread: writes [header: kind, bytes][payload] to socket s % nsocks straight from
 *             the slot (one sendmsg), then done[s % nsocks]++ frees the slot for s + nslots.
 *   receiver  thread: waits until slot s % nslots is free (s < released + nslots), reads the
 *             header, then the payload straight into the slot; done[s % nsocks]++ (release).
 *             The engine uses the slot in place; recv_done publishes released + 1.
 *
 * The only copies are the engine's into and out of the slot and the kernel's. Idle helpers
 * sleep on a condition variable; the engine signals it only when one sleeps (a counter both
 * sides touch with sequentially consistent atomics), so streaming costs no extra system call.
 * One connection is one allocation (the slots are mmap'ed lazily: untouched pages cost nothing):
 *
 *   tcp_conn_t                         settings, counters on their own cache lines, fds, reason
 *   sizes[nslots]                      uint32: bytes in each slot
 *   slots[nslots][slot_bytes]          page aligned
 *
 * Setup: setup() listens on the interface sock_pick_local_addr picks (TUTTI_SOCKET_IFNAME) and
 * starts an accept thread; the blob carries address and geometry. connect() opens the send
 * sockets to a peer, each first presenting a hello (job secret, communicator hash, both ranks,
 * socket index). The accept thread files receive sockets whose hello is right; anything else
 * is logged (WARN) and closed. post_connect() waits for every expected receive socket, then
 * starts the helpers. The port stays open for the communicator's life, answered by the same
 * thread, so a scan or a stray client during a collective is seen and dropped, never accepted.
 *
 * Failure: an error, or an EOF without a goodbye, on any socket marks that connection (and so
 * the peer: peer_failed looks at both directions) failed, with a reason naming the peer's rank
 * and host, logged (the first with WARN) and recorded as the communicator's error. That marks
 * this rank failed towards every peer: mark_failed writes an abort notice with the reason on
 * every idle send socket and shuts them all down, so each peer learns at once that we failed,
 * and why (the root cause travels: "rank 0 on host h1 aborted: ... rank 3 on host h2 ...").
 * Keepalive probes and TCP_USER_TIMEOUT at half of TUTTI_TIMEOUT turn a cut link into
 * ETIMEDOUT, naming the unreachable host before the engine's own timeout would fire. A clean
 * close drains what the engine posted and sends a goodbye header on every socket, so the peer
 * never mistakes it for a crash.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "socket.h"

TUTTI_PARAM(SocketNthreads, "SOCKET_NTHREADS", 1)
TUTTI_PARAM(NsocksPerThread, "NSOCKS_PERTHREAD", 1) /* TUTTI_NSOCKS is the short name */
TUTTI_PARAM(TcpSlotBytes, "TCP_SLOT_BYTES", 512 * 1024)
TUTTI_PARAM(TcpSlots, "TCP_NSLOTS", 8)
TUTTI_PARAM(SocketBufBytes, "SOCKET_BUFFER", 4 * 1024 * 1024) /* 0: kernel autotuning */
TUTTI_PARAM(NetDrainMs, "NET_DRAIN_MS", 5000) /* close: how long to flush posted slots */
/* An idle helper polls this often before it sleeps (the last half yield): briefly, since a
 * spinning helper steals the CPU an oversubscribed engine needs. */
TUTTI_PARAM(NetSpin, "NET_SPIN", 20)
TUTTI_PARAM_DECL(Timeout);

#define TCP_MAX_THREADS 16
#define TCP_MAX_SOCKS 64
#define TCP_MAX_SLOTS 64
#define TCP_HELLO_MS 5000 /* a connection must present its hello this fast */
#define TCP_BLOB_MAGIC 0x74757474692d7462ull
#define TCP_HELLO_MAGIC 0x74757474692d7468ull
#define HDR_DATA 0x74740d01u  /* bytes of payload follow */
#define HDR_BYE 0x74740b1eu   /* clean close: nothing follows */
#define HDR_ABORT 0x74740ab0u /* the sender failed or aborted: bytes of reason text follow */
#define TCP_REASON_MAX 1024

typedef struct tcp_hdr {
  uint32_t kind; /* HDR_DATA, HDR_BYE or HDR_ABORT */
  uint32_t bytes;
} tcp_hdr_t;

typedef struct tcp_hello {
  uint64_t magic;
  unsigned char secret[16];
  uint64_t id_hash;
  int32_t from, to;     /* ranks */
  int32_t sock, nsocks; /* this socket's index */
} tcp_hello_t;

typedef struct tcp_blob {
  uint64_t magic;
  sock_addr_t addr;
  int32_t nthreads, per_thread;
  uint32_t nslots, slot_bytes;
  char ifname[32];
} tcp_blob_t;

typedef struct padded_u64 { /* a counter alone on its cache line */
  uint64_t v;
} __attribute__((aligned(TUTTI_CACHELINE))) padded_u64_t;

struct tcp_state;

typedef struct tcp_conn {
  /* set at connect, read-only afterwards */
  struct tcp_state *st;
  int peer, is_send, nthreads, nsocks;
  uint32_t nslots;
  size_t slot_bytes, arena_bytes;
  uint32_t *sizes;
  char *slots;
  int fds[TCP_MAX_SOCKS];
  pthread_t threads[TCP_MAX_THREADS];
  int nstarted;
  /* engine side only */
  padded_u64_t pos; /* next slot to fill (send) or to read (receive) */
  /* shared with the helpers */
  padded_u64_t posted;              /* send: slots posted by the engine; recv: slots released */
  padded_u64_t done[TCP_MAX_SOCKS]; /* per socket: slots sent (send) or received (recv) */
  int sleepers, stop, byes;         /* byes: receive threads that saw the goodbye */
  int claimed, failed;              /* failed is set once reason is written */
  pthread_mutex_t mu;
  pthread_mutex_t io_mu[TCP_MAX_THREADS]; /* send: held by helper t while it writes on its
                                             sockets, so an abort notice never lands mid-slot */
  pthread_cond_t cv;
  char reason[384];
} tcp_conn_t;

typedef struct tcp_state {
  struct ncclComm *comm;
  struct tcp_state *next;
  int npeers; /* peers reached over tcp */
  int listen_fd;
  sock_acceptor_t *acceptor; /* answers the data port for the communicator's life */
  sock_addr_t addr;
  char ifname[64];
  int aborted;              /* this rank failed (mark_failed) */
  int closing;              /* tcp_close runs: failures are expected, nobody is told */
  pthread_mutex_t life_mu;  /* mark_failed (any thread) vs. the start of tcp_close */
  int nremote;              /* remote failures seen (the first is a WARN, others INFO) */
  int nthreads, per_thread; /* this rank's settings */
  uint32_t nslots;
  size_t slot_bytes;
  tcp_conn_t **send, **recv; /* [nranks] */
  /* filled by the accept thread, guarded by mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int *rfds; /* [nranks][TCP_MAX_SOCKS] receive sockets, -1: none yet */
  int naccepted, init_done, nwarn;
} tcp_state_t;

/* ---- which state belongs to which communicator (comm.h has no slot for it) ---- */
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;
static tcp_state_t *states;

static tcp_state_t *state_of(struct ncclComm *comm) {
  pthread_mutex_lock(&states_mu);
  tcp_state_t *s = states;
  while (s && s->comm != comm) s = s->next;
  pthread_mutex_unlock(&states_mu);
  return s;
}

static void state_unlink(tcp_state_t *st) {
  pthread_mutex_lock(&states_mu);
  for (tcp_state_t **p = &states; *p; p = &(*p)->next)
    if (*p == st) {
      *p = st->next;
      break;
    }
  pthread_mutex_unlock(&states_mu);
}

static const char *host_of(const tcp_state_t *st, int rank) {
  return st->comm->peers[rank].hostname;
}

/* The communicator's recorded error, once there is one (comm_set_error). */
static const char *comm_error_text(struct ncclComm *comm) {
  if (__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE) == ncclSuccess || !comm->error_msg[0])
    return NULL;
  return comm->error_msg;
}

/* ---- helpers' sleeping and waking ---- */

static void conn_wake(tcp_conn_t *c) {
  if (__atomic_load_n(&c->sleepers, __ATOMIC_SEQ_CST) == 0) return;
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static int conn_stopping(tcp_conn_t *c) {
  return __atomic_load_n(&c->stop, __ATOMIC_ACQUIRE) ||
         __atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) ||
         __atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE);
}

/* Waits until *ctr > target. Returns 0 then, -1 if the connection stops or fails first (a
 * ready counter wins over a stop request, so a send helper flushes what was posted). */
static int conn_wait(tcp_conn_t *c, uint64_t *ctr, uint64_t target) {
  int spins = (int)tutti_param_NetSpin();
  for (int spin = 0; spin < spins; spin++) {
    if (__atomic_load_n(ctr, __ATOMIC_ACQUIRE) > target) return 0;
    if (spin >= spins / 2) sched_yield();
  }
  int ready = 0;
  pthread_mutex_lock(&c->mu);
  __atomic_add_fetch(&c->sleepers, 1, __ATOMIC_SEQ_CST);
  while (!(ready = __atomic_load_n(ctr, __ATOMIC_SEQ_CST) > target) && !conn_stopping(c)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1; /* a backstop only: wakeups are not lost */
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  }
  __atomic_sub_fetch(&c->sleepers, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&c->mu);
  return ready ? 0 : -1;
}

/* ---- failures ---- */

/* Records why a connection broke and fails the communicator (which tells every peer). Quiet
 * when the break is our own doing: this rank closing, or a send socket after this rank failed
 * (mark_failed shut it). A receive socket that breaks is always news from the peer. */
static void conn_fail(tcp_conn_t *c, int err, const char *detail) {
  tcp_state_t *st = c->st;
  int quiet = __atomic_load_n(&c->stop, __ATOMIC_ACQUIRE) ||
              __atomic_load_n(&st->closing, __ATOMIC_ACQUIRE) ||
              (c->is_send && __atomic_load_n(&st->aborted, __ATOMIC_ACQUIRE));
  int expected = 0;
  if (!__atomic_compare_exchange_n(&c->claimed, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return;
  int me = st->comm->rank, p = c->peer;
  const char *h = host_of(st, p), *dir = c->is_send ? "sending to" : "receiving from";
  char *r = c->reason;
  size_t n = sizeof(c->reason);
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
             me, p, h, dir, (long long)tutti_param_Timeout() / 2);
  else if (err == -2)
    snprintf(r, n, "rank %d: rank %d on host %s aborted: %s", me, p, h, detail);
  else if (err < 0)
    snprintf(r, n, "rank %d: %s from rank %d on host %s", me, detail, p, h);
  else
    snprintf(r, n, "rank %d: socket error %s rank %d on host %s: %s", me, dir, p, h, strerror(err));
  __atomic_store_n(&c->failed, 1, __ATOMIC_RELEASE);
  conn_wake(c);
  if (quiet) return;
  if (__atomic_fetch_add(&st->nremote, 1, __ATOMIC_ACQ_REL) == 0)
    WARN("%s", r);
  else
    INFO(SUB_NET, "%s", r);
  comm_set_error(st->comm, ncclRemoteError, r);
}

/* ---- socket I/O (blocking; helpers only) ---- */

/* 0 on success, else errno (0 never: EOF on send does not exist). */
static int io_send(int fd, const tcp_hdr_t *h, const void *data, size_t n) {
  struct iovec iov[2] = {{(void *)h, sizeof(*h)}, {(void *)data, n}};
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = n ? 2 : 1};
  size_t left = sizeof(*h) + n;
  while (left > 0) {
    ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    left -= (size_t)k;
    while (k > 0 && m.msg_iovlen > 0) { /* advance past what went out */
      size_t take = TUTTI_MIN((size_t)k, m.msg_iov[0].iov_len);
      m.msg_iov[0].iov_base = (char *)m.msg_iov[0].iov_base + take;
      m.msg_iov[0].iov_len -= take;
      k -= (ssize_t)take;
      if (m.msg_iov[0].iov_len == 0) m.msg_iov++, m.msg_iovlen--;
    }
  }
  return 0;
}

/* 0 on success, -1 on EOF, else errno. */
static int io_recv(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, MSG_WAITALL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    if (k == 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* ---- helper threads ---- */

typedef struct helper_arg {
  tcp_conn_t *c;
  int t;
} helper_arg_t;

static int slot_done(tcp_conn_t *c, uint64_t s) { /* has slot s gone out / come in? */
  return __atomic_load_n(&c->done[s % c->nsocks].v, __ATOMIC_ACQUIRE) > s / c->nsocks;
}

static void send_loop(tcp_conn_t *c, int t) {
  uint64_t s = (uint64_t)t;
  for (;; s += c->nthreads) {
    if (conn_wait(c, &c->posted.v, s) != 0) break;
    tcp_hdr_t h = {HDR_DATA, c->sizes[s % c->nslots]};
    pthread_mutex_lock(&c->io_mu[t]);
    int err =
        io_send(c->fds[s % c->nsocks], &h, c->slots + (s % c->nslots) * c->slot_bytes, h.bytes);
    pthread_mutex_unlock(&c->io_mu[t]);
    if (err) {
      conn_fail(c, err, NULL);
      return;
    }
    __atomic_store_n(&c->done[s % c->nsocks].v, s / c->nsocks + 1, __ATOMIC_RELEASE);
  }
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE))
    return;
  tcp_hdr_t bye = {HDR_BYE, 0}; /* everything posted went out: say goodbye on my sockets */
  pthread_mutex_lock(&c->io_mu[t]);
  for (int k = t; k < c->nsocks; k += c->nthreads) {
    io_send(c->fds[k], &bye, NULL, 0);
    shutdown(c->fds[k], SHUT_WR);
  }
  pthread_mutex_unlock(&c->io_mu[t]);
}

static void recv_loop(tcp_conn_t *c, int t) {
  for (uint64_t s = (uint64_t)t;; s += c->nthreads) {
    if (s >= c->nslots && conn_wait(c, &c->posted.v, s - c->nslots) != 0) return;
    int fd = c->fds[s % c->nsocks];
    tcp_hdr_t h;
    int err = io_recv(fd, &h, sizeof(h));
    if (err == 0 && h.kind == HDR_BYE) {
      for (int k = (int)(s % c->nsocks) + c->nthreads; k < c->nsocks; k += c->nthreads)
        io_recv(c->fds[k], &h, sizeof(h)); /* the goodbyes of my other sockets */
      __atomic_add_fetch(&c->byes, 1, __ATOMIC_ACQ_REL);
      return;
    }
    if (err == 0 && h.kind == HDR_ABORT && h.bytes < TCP_REASON_MAX) {
      char why[TCP_REASON_MAX] = "";
      io_recv(fd, why, h.bytes); /* a cut-off reason is still worth showing */
      why[h.bytes] = '\0';
      conn_fail(c, -2, why[0] ? why : "(no reason given)");
      return;
    }
    if (err == 0 && (h.kind != HDR_DATA || h.bytes > c->slot_bytes)) {
      char what[96];
      snprintf(what, sizeof(what), "malformed header (kind %#x, %u bytes)", h.kind, h.bytes);
      conn_fail(c, -1, what);
      return;
    }
    if (err == 0) err = io_recv(fd, c->slots + (s % c->nslots) * c->slot_bytes, h.bytes);
    if (err != 0) {
      conn_fail(c, err < 0 ? 0 : err, NULL);
      return;
    }
    c->sizes[s % c->nslots] = h.bytes;
    __atomic_store_n(&c->done[s % c->nsocks].v, s / c->nsocks + 1, __ATOMIC_RELEASE);
  }
}

static void *helper_main(void *arg) {
  helper_arg_t a = *(helper_arg_t *)arg;
  free(arg);
  tutti_log_set_rank(a.c->st->comm->rank);
  if (a.c->is_send)
    send_loop(a.c, a.t);
  else
    recv_loop(a.c, a.t);
  return NULL;
}

/* ---- data path (engine side: never blocks) ---- */

static void *tcp_send_slot(conn_t *conn) {
  tcp_conn_t *c = conn->priv;
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE)) return NULL; /* let the engine see it */
  if (c->pos.v >= c->nslots && !slot_done(c, c->pos.v - c->nslots)) return NULL;
  return c->slots + (c->pos.v % c->nslots) * c->slot_bytes;
}

static void tcp_send_post(conn_t *conn, size_t bytes) {
  tcp_conn_t *c = conn->priv;
  c->sizes[c->pos.v % c->nslots] = (uint32_t)bytes;
  c->pos.v++;
  __atomic_store_n(&c->posted.v, c->pos.v, __ATOMIC_SEQ_CST);
  conn_wake(c);
}

static const void *tcp_recv_slot(conn_t *conn, size_t *bytes) {
  tcp_conn_t *c = conn->priv;
  if (!slot_done(c, c->pos.v)) return NULL;
  *bytes = c->sizes[c->pos.v % c->nslots];
  return c->slots + (c->pos.v % c->nslots) * c->slot_bytes;
}

static void tcp_recv_done(conn_t *conn) {
  tcp_conn_t *c = conn->priv;
  c->pos.v++;
  __atomic_store_n(&c->posted.v, c->pos.v, __ATOMIC_SEQ_CST);
  conn_wake(c);
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
  /* every receive thread saw the goodbye: the peer closed its communicator, nothing will come */
  return !c->is_send && __atomic_load_n(&c->byes, __ATOMIC_ACQUIRE) == c->nthreads;
}

static const char *tcp_peer_reason(conn_t *conn) {
  tcp_conn_t *c = conn->priv, *twin = conn_twin(c);
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) && c->reason[0]) return c->reason;
  if (twin && __atomic_load_n(&twin->failed, __ATOMIC_ACQUIRE) && twin->reason[0])
    return twin->reason;
  if (!c->is_send && __atomic_load_n(&c->byes, __ATOMIC_ACQUIRE) == c->nthreads)
    return "the peer destroyed its communicator";
  if (__atomic_load_n(&c->st->aborted, __ATOMIC_ACQUIRE) && comm_error_text(c->st->comm))
    return comm_error_text(c->st->comm); /* this rank failed first, for this reason */
  return NULL;
}

/* ---- connections ---- */

static tcp_conn_t *conn_new(tcp_state_t *st, int peer, int is_send, int nthreads, int nsocks,
                            size_t slot_bytes) {
  size_t head = TUTTI_ALIGN_UP(sizeof(tcp_conn_t) + st->nslots * sizeof(uint32_t), 4096);
  size_t bytes = head + (size_t)st->nslots * slot_bytes;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  tcp_conn_t *c = p; /* mmap gives zeroed memory */
  c->st = st, c->peer = peer, c->is_send = is_send;
  c->nthreads = nthreads, c->nsocks = nsocks, c->nslots = st->nslots;
  c->slot_bytes = slot_bytes, c->arena_bytes = bytes;
  c->sizes = (uint32_t *)((char *)p + sizeof(tcp_conn_t));
  c->slots = (char *)p + head;
  for (int k = 0; k < TCP_MAX_SOCKS; k++) c->fds[k] = -1;
  pthread_mutex_init(&c->mu, NULL);
  for (int t = 0; t < TCP_MAX_THREADS; t++) pthread_mutex_init(&c->io_mu[t], NULL);
  pthread_cond_init(&c->cv, NULL);
  return c;
}

static ncclResult_t conn_start(tcp_conn_t *c) {
  for (int t = 0; t < c->nthreads; t++) {
    helper_arg_t *a = malloc(sizeof(*a));
    if (!a) return TUTTI_ERR(ncclSystemError, "out of memory");
    *a = (helper_arg_t){c, t};
    int rc = pthread_create(&c->threads[t], NULL, helper_main, a);
    if (rc != 0) {
      free(a);
      return TUTTI_ERR(ncclSystemError, "cannot start a tcp helper thread: %s", strerror(rc));
    }
    c->nstarted++;
  }
  return ncclSuccess;
}

static void conn_shutdown(tcp_conn_t *c) {
  for (int k = 0; k < c->nsocks; k++)
    if (c->fds[k] >= 0) shutdown(c->fds[k], SHUT_RDWR);
}

static void conn_shutdown_wr(tcp_conn_t *c) {
  for (int k = 0; k < c->nsocks; k++)
    if (c->fds[k] >= 0) shutdown(c->fds[k], SHUT_WR);
}

/* Asks the helpers to stop: send helpers flush what was posted, then say goodbye; receive
 * helpers are woken out of recv() by the shutdown. */
static void conn_stop(tcp_conn_t *c) {
  if (!c) return;
  __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (!c->is_send || c->failed || c->st->aborted) conn_shutdown(c);
}

/* Joins the helpers (a send helper stuck on a dead peer past `deadline` is cut loose by a
 * shutdown) and frees the connection. */
static void conn_free(tcp_conn_t *c, uint64_t deadline) {
  if (!c) return;
  for (int t = 0; t < c->nstarted; t++) {
    while (c->is_send && pthread_tryjoin_np(c->threads[t], NULL) != 0) {
      if (tutti_time_ns() > deadline) {
        conn_shutdown(c);
        pthread_join(c->threads[t], NULL);
        break;
      }
      usleep(200);
    }
    if (!c->is_send) pthread_join(c->threads[t], NULL);
  }
  for (int k = 0; k < TCP_MAX_SOCKS; k++)
    if (c->fds[k] >= 0) close(c->fds[k]);
  pthread_mutex_destroy(&c->mu);
  for (int t = 0; t < TCP_MAX_THREADS; t++) pthread_mutex_destroy(&c->io_mu[t]);
  pthread_cond_destroy(&c->cv);
  munmap(c, c->arena_bytes);
}

/* ---- the data port: files authenticated receive sockets, drops everything else ---- */

static void port_drop(void *arg, const sock_addr_t *from, const char *why) {
  tcp_state_t *st = arg;
  char a[80];
  int n = __atomic_add_fetch(&st->nwarn, 1, __ATOMIC_RELAXED);
  if (n <= 10 || n % 100 == 0) /* a port scan must not flood the log */
    WARN(
        "rank %d: dropped a connection to the data port from %s: %s (%d dropped so far; the "
        "job is not affected)",
        st->comm->rank, sock_addr_str(from, a, sizeof(a)), why, n);
}

static const char *port_hello(void *arg, int fd, const void *hello) {
  tcp_state_t *st = arg;
  tcp_hello_t h;
  memcpy(&h, hello, sizeof(h));
  unsigned char diff = 0;
  for (int i = 0; i < 16; i++) diff |= h.secret[i] ^ st->comm->secret[i];
  if (h.magic != TCP_HELLO_MAGIC || diff) return "it did not present the job secret";
  if (h.id_hash != st->comm->id_hash) return "it belongs to another communicator";
  if (h.to != st->comm->rank || h.from < 0 || h.from >= st->comm->nranks || h.sock < 0 ||
      h.sock >= TCP_MAX_SOCKS)
    return "its hello names ranks or sockets that do not exist here";
  pthread_mutex_lock(&st->mu);
  int *slot = &st->rfds[(size_t)h.from * TCP_MAX_SOCKS + h.sock];
  const char *why = st->init_done ? "it arrived after init (data connections open only then)"
                    : *slot >= 0  ? "a second connection for the same socket"
                                  : NULL;
  if (!why) {
    *slot = fd;
    st->naccepted++;
    pthread_cond_broadcast(&st->cv);
  }
  pthread_mutex_unlock(&st->mu);
  return why;
}

/* ---- vtable: setup, connect, post_connect ---- */

static int tcp_can_connect(struct ncclComm *comm, int peer) {
  return peer != comm->rank;
}

static ncclResult_t state_new(struct ncclComm *comm, tcp_state_t **out) {
  tcp_state_t *st = calloc(1, sizeof(*st));
  if (!st) return TUTTI_ERR(ncclSystemError, "out of memory");
  st->comm = comm;
  st->listen_fd = -1;
  pthread_mutex_init(&st->mu, NULL);
  pthread_mutex_init(&st->life_mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  pthread_mutex_lock(&states_mu);
  st->next = states;
  states = st;
  pthread_mutex_unlock(&states_mu);
  *out = st;
  int n = comm->nranks;
  st->send = calloc(n, sizeof(tcp_conn_t *));
  st->recv = calloc(n, sizeof(tcp_conn_t *));
  st->rfds = malloc(sizeof(int) * (size_t)n * TCP_MAX_SOCKS);
  if (!st->send || !st->recv || !st->rfds) return TUTTI_ERR(ncclSystemError, "out of memory");
  for (size_t i = 0; i < (size_t)n * TCP_MAX_SOCKS; i++) st->rfds[i] = -1;
  return ncclSuccess;
}

static ncclResult_t tcp_setup(struct ncclComm *comm, char blob[TRANSPORT_BLOB_BYTES]) {
  tcp_state_t *st = NULL;
  TUTTI_CHECK(state_new(comm, &st));
  for (int p = 0; p < comm->nranks; p++)
    st->npeers += p != comm->rank && comm->send_conn[p].transport == &tcp_transport;
  if (st->npeers == 0) return ncclSuccess; /* empty blob: nobody connects to us */
  st->nthreads = (int)TUTTI_MIN(TUTTI_MAX(tutti_param_SocketNthreads(), 1), TCP_MAX_THREADS);
  const char *nsocks = getenv("TUTTI_NSOCKS");
  int64_t per = nsocks && *nsocks ? atoll(nsocks) : tutti_param_NsocksPerThread();
  st->per_thread = (int)TUTTI_MIN(TUTTI_MAX(per, 1), TCP_MAX_SOCKS / st->nthreads);
  st->nslots = (uint32_t)TUTTI_MIN(TUTTI_MAX(tutti_param_TcpSlots(), 2), TCP_MAX_SLOTS);
  st->slot_bytes =
      TUTTI_ALIGN_UP((size_t)TUTTI_MIN(TUTTI_MAX(tutti_param_TcpSlotBytes(), 4096), 1 << 30), 4096);
  TUTTI_CHECK(sock_pick_local_addr(&st->addr, st->ifname, sizeof(st->ifname)));
  int loopback = st->addr.sa.sa_family == AF_INET6
                     ? IN6_IS_ADDR_LOOPBACK(&st->addr.sin6.sin6_addr)
                     : (ntohl(st->addr.sin.sin_addr.s_addr) >> 24) == 127;
  for (int p = 0; loopback && p < comm->nranks; p++)
    if (comm->send_conn[p].transport == &tcp_transport &&
        comm->peers[p].host_hash != comm->peers[comm->rank].host_hash) {
      WARN(
          "rank %d (host %s) has only a loopback interface (%s) to offer rank %d on host %s: set "
          "TUTTI_SOCKET_IFNAME to an interface the other hosts can reach",
          comm->rank, host_of(st, comm->rank), st->ifname, p, host_of(st, p));
      break;
    }
  if (st->addr.sa.sa_family == AF_INET6)
    st->addr.sin6.sin6_port = 0;
  else
    st->addr.sin.sin_port = 0;
  TUTTI_CHECK(sock_listen(&st->addr, &st->listen_fd));
  TUTTI_CHECK(sock_acceptor_start(st->listen_fd, sizeof(tcp_hello_t), TCP_HELLO_MS, port_hello,
                                  port_drop, st, comm->rank, &st->acceptor));
  tcp_blob_t b = {.magic = TCP_BLOB_MAGIC,
                  .addr = st->addr,
                  .nthreads = st->nthreads,
                  .per_thread = st->per_thread,
                  .nslots = st->nslots,
                  .slot_bytes = (uint32_t)st->slot_bytes};
  snprintf(b.ifname, sizeof(b.ifname), "%.31s", st->ifname);
  memcpy(blob, &b, sizeof(b));
  if (!comm->slot_bytes || st->slot_bytes < comm->slot_bytes) comm->slot_bytes = st->slot_bytes;
  if (!comm->chunk_bytes || comm->slot_bytes * (st->nslots / 2) < comm->chunk_bytes)
    comm->chunk_bytes = comm->slot_bytes * (st->nslots / 2);
  char a[80];
  INFO(SUB_NET | SUB_INIT,
       "tcp: listening on %s (%s); %d thread(s) x %d socket(s) per peer and "
       "direction, %u slots x %zu bytes",
       sock_addr_str(&st->addr, a, sizeof(a)), st->ifname, st->nthreads, st->per_thread, st->nslots,
       st->slot_bytes);
  return ncclSuccess;
}

static ncclResult_t open_send_sockets(tcp_state_t *st, tcp_conn_t *c, const tcp_blob_t *b) {
  struct ncclComm *comm = st->comm;
  char a[80];
  for (int k = 0; k < c->nsocks; k++) {
    ncclResult_t res = sock_connect(&b->addr, (int)bootstrap_init_timeout_ms(), &c->fds[k]);
    if (res != ncclSuccess)
      return TUTTI_ERR(ncclSystemError,
                       "rank %d (host %s) cannot open a data connection to rank %d "
                       "(host %s) at %s (its interface %s): is that address reachable from here? "
                       "TUTTI_SOCKET_IFNAME / NCCL_SOCKET_IFNAME choose the interface each rank "
                       "listens on",
                       comm->rank, host_of(st, comm->rank), c->peer, host_of(st, c->peer),
                       sock_addr_str(&b->addr, a, sizeof(a)), b->ifname);
    sock_set_data_options(c->fds[k], (int)tutti_param_SocketBufBytes(), comm->timeout_ms / 2);
    tcp_hello_t h = {.magic = TCP_HELLO_MAGIC,
                     .id_hash = comm->id_hash,
                     .from = comm->rank,
                     .to = c->peer,
                     .sock = k,
                     .nsocks = c->nsocks};
    memcpy(h.secret, comm->secret, 16);
    TUTTI_CHECK(sock_send_all(c->fds[k], &h, sizeof(h), (int)bootstrap_init_timeout_ms()));
  }
  return ncclSuccess;
}

static ncclResult_t tcp_connect(struct ncclComm *comm, int peer, const char *peer_blob,
                                conn_t *send, conn_t *recv) {
  tcp_state_t *st = state_of(comm);
  tcp_blob_t b;
  memcpy(&b, peer_blob, sizeof(b));
  if (!st || b.magic != TCP_BLOB_MAGIC)
    return TUTTI_ERR(ncclInternalError, "rank %d: rank %d published no tcp address", comm->rank,
                     peer);
  /* both ends take the smaller of the two settings, so they agree on the geometry */
  int nthreads = TUTTI_MIN(st->nthreads, b.nthreads), per = TUTTI_MIN(st->per_thread, b.per_thread);
  size_t slot = TUTTI_MIN(st->slot_bytes, (size_t)b.slot_bytes);
  st->send[peer] = conn_new(st, peer, 1, nthreads, nthreads * per, slot);
  st->recv[peer] = conn_new(st, peer, 0, nthreads, nthreads * per, slot);
  if (!st->send[peer] || !st->recv[peer])
    return TUTTI_ERR(ncclSystemError, "cannot map %zu bytes of tcp FIFOs", 2 * st->nslots * slot);
  TUTTI_CHECK(open_send_sockets(st, st->send[peer], &b));
  send->priv = st->send[peer];
  recv->priv = st->recv[peer];
  send->slot_bytes = recv->slot_bytes = slot;
  send->nslots = recv->nslots = (int)st->nslots;
  return ncclSuccess;
}

/* Waits until every peer's receive sockets arrived; names the missing peers otherwise. */
static ncclResult_t wait_receive_sockets(tcp_state_t *st) {
  struct ncclComm *comm = st->comm;
  int expect = 0;
  for (int p = 0; p < comm->nranks; p++)
    if (st->recv[p]) expect += st->recv[p]->nsocks;
  uint64_t deadline = tutti_time_ns() + (uint64_t)bootstrap_init_timeout_ms() * 1000000ull;
  pthread_mutex_lock(&st->mu);
  while (st->naccepted < expect && tutti_time_ns() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&st->cv, &st->mu, &ts);
  }
  st->init_done = 1; /* from now on the accept thread drops every connection */
  pthread_mutex_unlock(&st->mu);
  for (int p = 0; p < comm->nranks; p++) {
    tcp_conn_t *c = st->recv[p];
    for (int k = 0; c && k < c->nsocks; k++) {
      c->fds[k] = st->rfds[(size_t)p * TCP_MAX_SOCKS + k];
      st->rfds[(size_t)p * TCP_MAX_SOCKS + k] = -1;
      if (c->fds[k] < 0) {
        char a[80];
        return TUTTI_ERR(ncclSystemError,
                         "rank %d (host %s): rank %d (host %s) did not open its "
                         "data connection %d of %d to %s (%s) within TUTTI_INIT_TIMEOUT: check "
                         "that this address is reachable from there (TUTTI_SOCKET_IFNAME)",
                         comm->rank, host_of(st, comm->rank), p, host_of(st, p), k, c->nsocks,
                         sock_addr_str(&st->addr, a, sizeof(a)), st->ifname);
      }
      sock_set_data_options(c->fds[k], (int)tutti_param_SocketBufBytes(), comm->timeout_ms / 2);
    }
  }
  return ncclSuccess;
}

static ncclResult_t tcp_post_connect(struct ncclComm *comm) {
  tcp_state_t *st = state_of(comm);
  if (!st || st->npeers == 0) return ncclSuccess;
  TUTTI_CHECK(wait_receive_sockets(st));
  for (int p = 0; p < comm->nranks; p++) {
    if (st->send[p]) TUTTI_CHECK(conn_start(st->send[p]));
    if (st->recv[p]) TUTTI_CHECK(conn_start(st->recv[p]));
  }
  return ncclSuccess;
}

/* ---- failure and close ---- */

/* Tells a peer that this rank failed, and why, on one send socket, unless a helper is in the
 * middle of a slot there (then the shutdown alone says it: EOF without a goodbye). */
static void send_abort_notice(tcp_conn_t *c, const char *why) {
  char msg[sizeof(tcp_hdr_t) + TCP_REASON_MAX];
  tcp_hdr_t h = {HDR_ABORT, (uint32_t)TUTTI_MIN(strlen(why), TCP_REASON_MAX - 1)};
  memcpy(msg, &h, sizeof(h));
  memcpy(msg + sizeof(h), why, h.bytes);
  for (int t = 0; t < c->nthreads; t++) {
    if (pthread_mutex_trylock(&c->io_mu[t]) != 0) continue; /* helper t is mid-slot */
    for (int k = t; k < c->nsocks; k += c->nthreads) { /* never blocks: full socket, no notice */
      ssize_t ignored = send(c->fds[k], msg, sizeof(h) + h.bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
      (void)ignored;
    }
    pthread_mutex_unlock(&c->io_mu[t]);
  }
  conn_shutdown_wr(c);
  conn_wake(c);
}

/* This rank failed or aborted: every peer hears it on our send sockets at once (the reason,
 * then EOF). Receive sockets stay open: what breaks there from now on is the peers' news. */
static void tcp_mark_failed(struct ncclComm *comm) {
  tcp_state_t *st = state_of(comm);
  if (!st) return;
  pthread_mutex_lock(&st->life_mu);
  if (st->closing || __atomic_exchange_n(&st->aborted, 1, __ATOMIC_ACQ_REL)) {
    pthread_mutex_unlock(&st->life_mu);
    return;
  }
  const char *why = comm_error_text(comm) ? comm_error_text(comm)
                    : comm->abort_flag    ? "ncclCommAbort was called"
                                          : "its communicator failed during init";
  for (int p = 0; st->send && st->recv && p < comm->nranks; p++) {
    if (st->send[p] && st->send[p]->nstarted)
      send_abort_notice(st->send[p], why);
    else if (st->send[p])
      conn_shutdown_wr(st->send[p]);
    if (st->recv[p]) conn_wake(st->recv[p]);
  }
  pthread_mutex_unlock(&st->life_mu);
}

static void tcp_close(struct ncclComm *comm) {
  tcp_state_t *st = state_of(comm);
  if (!st) return;
  pthread_mutex_lock(&st->life_mu);                    /* a mark_failed under way finishes first */
  __atomic_store_n(&st->closing, 1, __ATOMIC_RELEASE); /* helpers still running stay quiet */
  pthread_mutex_unlock(&st->life_mu);
  sock_acceptor_stop(st->acceptor);
  /* flush and say goodbye on every send connection first, then stop the receivers */
  int n = st->send && st->recv ? comm->nranks : 0;
  uint64_t deadline = tutti_time_ns() + (uint64_t)tutti_param_NetDrainMs() * 1000000ull;
  for (int p = 0; p < n; p++) conn_stop(st->send[p]);
  for (int p = 0; p < n; p++) conn_free(st->send[p], deadline), st->send[p] = NULL;
  for (int p = 0; p < n; p++) conn_stop(st->recv[p]);
  for (int p = 0; p < n; p++) conn_free(st->recv[p], 0), st->recv[p] = NULL;
  for (size_t i = 0; st->rfds && i < (size_t)comm->nranks * TCP_MAX_SOCKS; i++)
    if (st->rfds[i] >= 0) close(st->rfds[i]);
  if (st->listen_fd >= 0) close(st->listen_fd);
  state_unlink(st);
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
    .setup = tcp_setup,
    .connect = tcp_connect,
    .post_connect = tcp_post_connect,
    .send_slot = tcp_send_slot,
    .send_post = tcp_send_post,
    .recv_slot = tcp_recv_slot,
    .recv_done = tcp_recv_done,
    .peer_failed = tcp_peer_failed,
    .peer_reason = tcp_peer_reason,
    .mark_failed = tcp_mark_failed,
    .close = tcp_close,
};
