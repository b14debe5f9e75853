/* TCP transport, connection setup (the data path and the vtable are in tcp.c).
 *
 * setup: listen on the address net_local_addr chooses (net_addr.h) and start an
 * accept thread (sock_acceptor) that answers the port for the communicator's life; the blob
 * carries address and geometry. connect: allocate both connections with a peer and open the
 * send sockets, or where the pair shares its sockets (pair_shares) the lower rank opens them
 * for both directions; each first presents a hello (job secret, communicator hash, both ranks,
 * socket index). The accept thread files sockets whose hello is right; anything else (a scan, a
 * stray client, another job, anything after init) is logged and closed. post_connect (tcp.c)
 * waits here for every socket the peers open to this one.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "net_addr.h"
#include "tcp.h"

TUTTI_PARAM(SocketNthreads, "SOCKET_NTHREADS", 1)
TUTTI_PARAM(NsocksPerThread, "NSOCKS_PERTHREAD", 1)
TUTTI_PARAM(Nsocks, "NSOCKS", 0) /* the short name of NSOCKS_PERTHREAD; 0: not given */
TUTTI_PARAM(TcpSlotBytes, "TCP_SLOT_BYTES", 256 * 1024) /* smaller: the piece stays in cache */
TUTTI_PARAM(TcpSlots, "TCP_NSLOTS", 16)
/* A CRC32C on every piece, checked on receipt (docs/hardening.md: its cost): corruption that
 * the kernel's TCP checksum let through (a NIC, a driver, memory) becomes an error naming the
 * link instead of a wrong result. */
TUTTI_PARAM(Checksum, "CHECKSUM", 0)
TUTTI_PARAM(TestCorruptRecv, "TEST_CORRUPT_RECV", 0) /* test hook: see rx_check in tcp.c */
/* SO_SNDBUF and SO_RCVBUF. The kernel's buffers are the FIFO of a connection (the engine sends
 * from and receives into the user's memory), so they hold at least TCP_NSLOTS x TCP_SLOT_BYTES:
 * the agreed chunk is at most half of that, and a ring needs two chunks in flight. */
TUTTI_PARAM(SocketBufBytes, "SOCKET_BUFFER", 4 * 1024 * 1024)

static int socket_buffer(const tcp_state_t *st) {
  return (int)TUTTI_MIN(
      TUTTI_MAX((size_t)tutti_param_SocketBufBytes(), st->nslots * st->slot_bytes),
      (size_t)1 << 30);
}

/* ---- which state belongs to which communicator (comm.h has no slot for it) ---- */
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;
static tcp_state_t *states;

tcp_state_t *tcp_state_of(struct ncclComm *comm) {
  pthread_mutex_lock(&states_mu);
  tcp_state_t *s = states;
  while (s && s->comm != comm) s = s->next;
  pthread_mutex_unlock(&states_mu);
  return s;
}

void tcp_state_unlink(tcp_state_t *st) {
  pthread_mutex_lock(&states_mu);
  for (tcp_state_t **p = &states; *p; p = &(*p)->next)
    if (*p == st) {
      *p = st->next;
      break;
    }
  pthread_mutex_unlock(&states_mu);
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

/* ---- setup, connect ---- */

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

/* The bytes one socket surely holds in flight: the sender's and the receiver's buffers as
 * setsockopt gets them here (net.core.wmem_max / rmem_max cap them), each counted at half since
 * the kernel charges its own overhead against them. */
static size_t kernel_fifo_bytes(const tcp_state_t *st) {
  int fd = socket(st->addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int want = socket_buffer(st), snd = 0, rcv = 0;
  socklen_t len = sizeof(int);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
  getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, &len);
  len = sizeof(int);
  getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, &len);
  close(fd);
  return ((size_t)snd + (size_t)rcv) / 4; /* getsockopt reports twice what was set */
}

/* The kernel's socket buffers are each connection's FIFO (the engine only reads a socket when
 * its lane gets there), nsocks sockets of st->fifo_bytes: where they hold less than TCP_NSLOTS
 * slots, cut the slots so that the chunk, half the FIFO, still fits twice and a ring can never
 * fill its FIFOs. */
static void fit_kernel_fifo(tcp_state_t *st) {
  st->fifo_bytes = kernel_fifo_bytes(st);
  size_t fifo = st->fifo_bytes * (size_t)(st->nthreads * st->per_thread);
  if (st->fifo_bytes == 0 || fifo >= st->nslots * st->slot_bytes) return;
  size_t slot = TUTTI_MAX(fifo / 4 / 4096 * 4096, 4096);
  if (slot < st->slot_bytes) st->slot_bytes = slot;
  st->nslots = (uint32_t)TUTTI_MIN(TUTTI_MAX(fifo / st->slot_bytes, 2), TCP_MAX_SLOTS);
  INFO(SUB_NET | SUB_INIT,
       "tcp: socket buffers hold only %zu bytes per socket here (net.core.wmem_max / rmem_max): "
       "%u slots of %zu bytes (raise them for speed)",
       st->fifo_bytes, st->nslots, st->slot_bytes);
}

/* A connection's FIFO depth in slots: what its sockets hold, at most TCP_NSLOTS. */
static int conn_depth(const tcp_state_t *st, int nsocks, size_t slot) {
  size_t fifo = st->fifo_bytes ? st->fifo_bytes * (size_t)nsocks : st->nslots * slot;
  return (int)TUTTI_MIN(TUTTI_MAX(fifo / slot, 2), st->nslots);
}

ncclResult_t tcp_setup_listen(struct ncclComm *comm, char blob[TRANSPORT_BLOB_BYTES]) {
  tcp_state_t *st = NULL;
  TUTTI_CHECK(state_new(comm, &st));
  for (int p = 0; p < comm->nranks; p++)
    st->npeers += p != comm->rank && comm->send_conn[p].transport == &tcp_transport;
  if (st->npeers == 0) return ncclSuccess; /* empty blob: nobody connects to us */
  st->nthreads = (int)TUTTI_MIN(TUTTI_MAX(tutti_param_SocketNthreads(), 1), TCP_MAX_THREADS);
  int64_t per = tutti_param_Nsocks() > 0 ? tutti_param_Nsocks() : tutti_param_NsocksPerThread();
  st->per_thread = (int)TUTTI_MIN(TUTTI_MAX(per, 1), TCP_MAX_SOCKS / st->nthreads);
  st->nslots = (uint32_t)TUTTI_MIN(TUTTI_MAX(tutti_param_TcpSlots(), 2), TCP_MAX_SLOTS);
  st->checksum = tutti_param_Checksum() != 0;
  st->corrupt_piece = tutti_param_TestCorruptRecv();
  st->slot_bytes =
      TUTTI_ALIGN_UP((size_t)TUTTI_MIN(TUTTI_MAX(tutti_param_TcpSlotBytes(), 4096), 1 << 30), 4096);
  TUTTI_CHECK(net_local_addr(&st->addr, st->ifname, sizeof(st->ifname)));
  fit_kernel_fifo(st);
  int loopback = st->addr.sa.sa_family == AF_INET6
                     ? IN6_IS_ADDR_LOOPBACK(&st->addr.sin6.sin6_addr)
                     : (ntohl(st->addr.sin.sin_addr.s_addr) >> 24) == 127;
  for (int p = 0; loopback && p < comm->nranks; p++)
    if (comm->send_conn[p].transport == &tcp_transport &&
        comm->peers[p].host_hash != comm->peers[comm->rank].host_hash) {
      WARN(
          "rank %d (host %s) has only a loopback interface (%s) to offer rank %d on host %s: set "
          "TUTTI_SOCKET_IFNAME to an interface the other hosts can reach",
          comm->rank, tcp_host_of(st, comm->rank), st->ifname, p, tcp_host_of(st, p));
      break;
    }
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

/* Whether a pair's sockets carry both directions (both ends agree). Where the CPUs are the
 * bottleneck, yes: a reply then carries the acknowledgement of what it answers, where a socket
 * per direction makes the kernel send a pure ACK packet for every small piece (a receiver that
 * drains a small segment on a one-way socket acknowledges it at once): half of all packets of
 * an exchange. Elsewhere, no: the two ends' sends and receives then contend for one socket's
 * lock. Both effects are measured in docs/perf.md, "Figures behind the code". */
static int pair_shares(struct ncclComm *comm, int peer) {
  return comm_machine_oversubscribed(comm, comm->rank) || comm_machine_oversubscribed(comm, peer);
}

/* Opens a connection's sockets (the sender's, or for a shared pair the lower rank's). */
static ncclResult_t open_sockets(tcp_state_t *st, tcp_conn_t *c, const tcp_blob_t *b) {
  struct ncclComm *comm = st->comm;
  char a[80];
  uint64_t end = bootstrap_init_deadline_ns(comm);
  for (int k = 0; k < c->nsocks; k++) {
    ncclResult_t res = sock_connect(&b->addr, sock_ms_left(end), &c->fds[k]);
    if (res != ncclSuccess)
      return TUTTI_ERR(ncclSystemError,
                       "rank %d (host %s) cannot open a data connection to rank %d "
                       "(host %s) at %s (its interface %s): is that address reachable from here? "
                       "TUTTI_SOCKET_IFNAME / NCCL_SOCKET_IFNAME choose the interface each rank "
                       "listens on",
                       comm->rank, tcp_host_of(st, comm->rank), c->peer, tcp_host_of(st, c->peer),
                       sock_addr_str(&b->addr, a, sizeof(a)), b->ifname);
    sock_set_data_options(c->fds[k], socket_buffer(st), comm->timeout_ms / 2);
    tcp_hello_t h = {.magic = TCP_HELLO_MAGIC,
                     .id_hash = comm->id_hash,
                     .from = comm->rank,
                     .to = c->peer,
                     .sock = k,
                     .nsocks = c->nsocks};
    memcpy(h.secret, comm->secret, 16);
    TUTTI_CHECK(sock_send_all(c->fds[k], &h, sizeof(h), TUTTI_MAX(sock_ms_left(end), 1)));
  }
  return ncclSuccess;
}

/* One allocation per connection (the slot is mapped lazily: untouched pages cost nothing):
 *   tcp_conn_t                         settings, state of the piece in flight, fds, reason
 *   slot[slot_bytes]                   page aligned: staging for a piece that is not sent from,
 *                                      or received into, the user's buffers
 */
static tcp_conn_t *conn_new(tcp_state_t *st, int peer, int is_send, int nsocks, size_t slot_bytes) {
  size_t head = TUTTI_ALIGN_UP(sizeof(tcp_conn_t), 4096);
  size_t bytes = head + slot_bytes;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  tcp_conn_t *c = p; /* mmap gives zeroed memory */
  c->st = st, c->peer = peer, c->is_send = is_send, c->nsocks = nsocks;
  c->slot_bytes = slot_bytes, c->arena_bytes = bytes;
  c->checksum = st->checksum;
  c->slots = (char *)p + head;
  for (int k = 0; k < TCP_MAX_SOCKS; k++) c->fds[k] = -1;
  pthread_mutex_init(&c->tx_mu, NULL);
  return c;
}

/* NULL when a peer's published geometry is one this rank could have published itself (the
 * socket counts, the slot size, a terminated interface name), else what is wrong: every number
 * that sizes this rank's connection is checked before it is used. */
const char *tcp_blob_check(const tcp_blob_t *b) {
  if (b->nthreads < 1 || b->nthreads > TCP_MAX_THREADS || b->per_thread < 1 ||
      b->per_thread > TCP_MAX_SOCKS / b->nthreads)
    return "has socket counts out of range";
  if (b->slot_bytes < 4096 || b->slot_bytes > (1u << 30) || b->nslots < 2 ||
      b->nslots > TCP_MAX_SLOTS)
    return "has a slot geometry out of range";
  if (!memchr(b->ifname, '\0', sizeof(b->ifname))) return "has an unterminated interface name";
  if (b->addr.sa.sa_family != AF_INET && b->addr.sa.sa_family != AF_INET6)
    return "has an address that is neither IPv4 nor IPv6";
  return NULL;
}

ncclResult_t tcp_setup_connect(struct ncclComm *comm, int peer, const char *peer_blob, conn_t *send,
                               conn_t *recv) {
  tcp_state_t *st = tcp_state_of(comm);
  tcp_blob_t b;
  memcpy(&b, peer_blob, sizeof(b));
  if (!st || b.magic != TCP_BLOB_MAGIC)
    return TUTTI_ERR(ncclInternalError, "rank %d: rank %d published no tcp address", comm->rank,
                     peer);
  const char *bad = tcp_blob_check(&b);
  if (bad)
    return TUTTI_ERR(ncclRemoteError, "rank %d: the tcp address rank %d (host %s) published %s",
                     comm->rank, peer, tcp_host_of(st, peer), bad);
  /* both ends take the smaller of the two settings, so they agree on the geometry */
  int nthreads = TUTTI_MIN(st->nthreads, b.nthreads), per = TUTTI_MIN(st->per_thread, b.per_thread);
  size_t slot = TUTTI_MIN(st->slot_bytes, (size_t)b.slot_bytes);
  st->send[peer] = conn_new(st, peer, 1, nthreads * per, slot);
  st->recv[peer] = conn_new(st, peer, 0, nthreads * per, slot);
  if (!st->send[peer] || !st->recv[peer])
    return TUTTI_ERR(ncclSystemError, "cannot map %zu bytes of tcp FIFOs", 2 * slot);
  int shared = pair_shares(comm, peer);
  st->send[peer]->shared = st->recv[peer]->shared = shared;
  if (!shared) {
    TUTTI_CHECK(open_sockets(st, st->send[peer], &b));
  } else if (comm->rank < peer) { /* the recv end owns the pair's sockets */
    TUTTI_CHECK(open_sockets(st, st->recv[peer], &b));
    memcpy(st->send[peer]->fds, st->recv[peer]->fds, sizeof(st->recv[peer]->fds));
  }
  send->priv = st->send[peer];
  recv->priv = st->recv[peer];
  send->slot_bytes = recv->slot_bytes = slot;
  send->nslots = recv->nslots = conn_depth(st, nthreads * per, slot);
  return ncclSuccess;
}

/* Waits until the sockets every peer opens to this rank arrived (all its send sockets; of a
 * shared pair, the lower rank's); names the missing peers otherwise. */
ncclResult_t tcp_wait_receive_sockets(tcp_state_t *st) {
  struct ncclComm *comm = st->comm;
  int expect = 0;
  for (int p = 0; p < comm->nranks; p++)
    if (st->recv[p] && (!st->recv[p]->shared || p < comm->rank)) expect += st->recv[p]->nsocks;
  uint64_t deadline = bootstrap_init_deadline_ns(comm);
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
    if (c && c->shared && p > comm->rank) continue; /* this rank opened them */
    for (int k = 0; c && k < c->nsocks; k++) {
      c->fds[k] = st->rfds[(size_t)p * TCP_MAX_SOCKS + k];
      st->rfds[(size_t)p * TCP_MAX_SOCKS + k] = -1;
      if (c->fds[k] < 0) {
        char a[80];
        return TUTTI_ERR(ncclSystemError,
                         "rank %d (host %s): rank %d (host %s) did not open its "
                         "data connection %d of %d to %s (%s) within TUTTI_INIT_TIMEOUT: check "
                         "that this address is reachable from there (TUTTI_SOCKET_IFNAME)",
                         comm->rank, tcp_host_of(st, comm->rank), p, tcp_host_of(st, p), k,
                         c->nsocks, sock_addr_str(&st->addr, a, sizeof(a)), st->ifname);
      }
      sock_set_data_options(c->fds[k], socket_buffer(st), comm->timeout_ms / 2);
    }
    if (c && c->shared) memcpy(st->send[p]->fds, c->fds, sizeof(c->fds));
  }
  return ncclSuccess;
}
