/* TCP socket helpers: every wait is bounded by poll(). */
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

socklen_t sock_addr_len(const sock_addr_t *addr) {
  return addr->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

const char *sock_addr_str(const sock_addr_t *addr, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, sizeof(host));
    snprintf(buf, len, "[%s]:%d", host, ntohs(addr->sin6.sin6_port));
  } else {
    inet_ntop(AF_INET, &addr->sin.sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%d", host, ntohs(addr->sin.sin_port));
  }
  return buf;
}

ncclResult_t sock_addr_parse(const char *text, sock_addr_t *addr) {
  char host[256];
  const char *port = NULL;
  memset(addr, 0, sizeof(*addr));
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (!close || (size_t)(close - text - 1) >= sizeof(host))
      return TUTTI_ERR(ncclInvalidArgument, "bad address \"%s\": unmatched '['", text);
    memcpy(host, text + 1, close - text - 1);
    host[close - text - 1] = '\0';
    if (close[1] == ':') port = close + 2;
  } else {
    const char *colon = strrchr(text, ':');
    size_t n = colon && strchr(text, ':') == colon ? (size_t)(colon - text) : strlen(text);
    if (n >= sizeof(host)) return TUTTI_ERR(ncclInvalidArgument, "address \"%s\" too long", text);
    memcpy(host, text, n);
    host[n] = '\0';
    if (colon && strchr(text, ':') == colon) port = colon + 1;
  }
  int64_t portnum = 0;
  if (port && (tutti_parse_int(port, &portnum) || portnum < 0 || portnum > 65535))
    return TUTTI_ERR(ncclInvalidArgument, "bad port in address \"%s\": not a number 0-65535", text);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || !res)
    return TUTTI_ERR(ncclInvalidArgument, "cannot resolve host \"%s\": %s", host, gai_strerror(rc));
  memcpy(addr, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (addr->sa.sa_family == AF_INET6)
    addr->sin6.sin6_port = htons((uint16_t)portnum);
  else
    addr->sin.sin_port = htons((uint16_t)portnum);
  return ncclSuccess;
}

static int ifaddr_usable(const struct ifaddrs *ifa, const char *spec, int family) {
  if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != family) return 0;
  if (!(ifa->ifa_flags & IFF_UP)) return 0;
  if (family == AF_INET6 &&
      IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
    return 0;
  if (spec) return tutti_name_list_matches(spec, ifa->ifa_name);
  return strncmp(ifa->ifa_name, "lo", 2) != 0 && strncmp(ifa->ifa_name, "docker", 6) != 0;
}

ncclResult_t sock_find_addr(const char *spec, sock_addr_t *addr, char *ifname, size_t ifname_len,
                            int *found) {
  struct ifaddrs *list = NULL;
  *found = 0;
  if (getifaddrs(&list) != 0)
    return TUTTI_ERR(ncclSystemError, "getifaddrs failed: %s", strerror(errno));
  int families[2] = {AF_INET, AF_INET6};
  for (int f = 0; f < 2 && !*found; f++) {
    for (struct ifaddrs *ifa = list; ifa && !*found; ifa = ifa->ifa_next) {
      if (!ifaddr_usable(ifa, spec, families[f])) continue;
      memset(addr, 0, sizeof(*addr));
      memcpy(addr, ifa->ifa_addr,
             families[f] == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
      snprintf(ifname, ifname_len, "%s", ifa->ifa_name);
      *found = 1;
    }
  }
  freeifaddrs(list);
  return ncclSuccess;
}

void sock_loopback_addr(sock_addr_t *addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sin.sin_family = AF_INET;
  addr->sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

ncclResult_t sock_listen(sock_addr_t *addr, int *fd) {
  int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return TUTTI_ERR(ncclSystemError, "socket failed: %s", strerror(errno));
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  char buf[80];
  if (bind(s, &addr->sa, sock_addr_len(addr)) != 0 || listen(s, 1024) != 0) {
    int err = errno;
    close(s);
    return TUTTI_ERR(ncclSystemError, "cannot listen on %s: %s",
                     sock_addr_str(addr, buf, sizeof(buf)), strerror(err));
  }
  socklen_t len = sizeof(*addr);
  getsockname(s, &addr->sa, &len);
  *fd = s;
  return ncclSuccess;
}

static void sock_tune(int s) {
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void sock_set_data_options(int fd, int buf_bytes, int64_t timeout_ms) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (buf_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf_bytes, sizeof(buf_bytes));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf_bytes, sizeof(buf_bytes));
  }
  if (timeout_ms <= 0) return;
  /* Idle sockets: a first probe after a third of the timeout, then every sixth; unacked data:
   * TCP_USER_TIMEOUT. Together they bound how long a dead link stays unnoticed. */
  int idle = (int)TUTTI_MAX(timeout_ms / 3000, 1), intvl = (int)TUTTI_MAX(timeout_ms / 6000, 1);
  int cnt = 3;
  unsigned int user_timeout = (unsigned int)TUTTI_MIN(timeout_ms, (int64_t)UINT32_MAX);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

int sock_ms_left(uint64_t deadline_ns) {
  uint64_t now = tutti_time_ns();
  return now >= deadline_ns ? 0
                            : (int)TUTTI_MIN((deadline_ns - now) / 1000000ull, (uint64_t)INT32_MAX);
}

/* One attempt on a non-blocking socket: 0 once connected, else the errno (ETIMEDOUT when the
 * deadline came first). A blocking connect() would wait for the kernel's SYN retries instead
 * (about two minutes with tcp_syn_retries = 6) where a peer's link was cut or its accept queue
 * is full: packets dropped, no answer. */
static int connect_once(int s, const sock_addr_t *addr, uint64_t deadline) {
  if (connect(s, &addr->sa, sock_addr_len(addr)) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  for (;;) { /* at least 1 ms: a connection on this host completes within it, even at the end */
    struct pollfd p = {.fd = s, .events = POLLOUT};
    int rc = poll(&p, 1, TUTTI_MAX(sock_ms_left(deadline), 1));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return errno;
    if (rc == 0) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
  }
}

static ncclResult_t connect_until(const sock_addr_t *addr, int timeout_ms, int *fd,
                                  int refused_final) {
  char buf[80];
  uint64_t deadline = tutti_time_ns() + (uint64_t)timeout_ms * 1000000ull;
  int last_err = 0;
  for (int attempt = 0;; attempt++) {
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return TUTTI_ERR(ncclSystemError, "socket failed: %s", strerror(errno));
    last_err = connect_once(s, addr, deadline);
    if (last_err == 0) {
      fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK); /* callers expect a blocking fd */
      sock_tune(s);
      *fd = s;
      return ncclSuccess;
    }
    close(s);
    /* The root may not be listening yet: retry refused/unreachable until the deadline. */
    if (tutti_time_ns() >= deadline || (refused_final && last_err == ECONNREFUSED)) break;
    usleep((useconds_t)TUTTI_MIN(attempt < 20 ? 10000 : 100000,
                                 (int64_t)sock_ms_left(deadline) * 1000 + 1000));
  }
  ncclResult_t res =
      TUTTI_ERR(ncclSystemError,
                "cannot connect to %s within %d ms: %s (is the root rank running, "
                "and is the address/port right?)",
                sock_addr_str(addr, buf, sizeof(buf)), timeout_ms, strerror(last_err));
  errno = last_err;
  return res;
}

ncclResult_t sock_connect(const sock_addr_t *addr, int timeout_ms, int *fd) {
  return connect_until(addr, timeout_ms, fd, 0);
}

ncclResult_t sock_connect_listening(const sock_addr_t *addr, int timeout_ms, int *fd) {
  return connect_until(addr, timeout_ms, fd, 1);
}

ncclResult_t sock_accept(int listen_fd, int timeout_ms, int *fd) {
  struct pollfd p = {.fd = listen_fd, .events = POLLIN};
  *fd = -1;
  int rc = poll(&p, 1, timeout_ms);
  if (rc < 0 && errno != EINTR) return TUTTI_ERR(ncclSystemError, "poll: %s", strerror(errno));
  if (rc <= 0) return ncclSuccess;
  int s = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (s < 0) return TUTTI_ERR(ncclSystemError, "accept failed: %s", strerror(errno));
  sock_tune(s);
  *fd = s;
  return ncclSuccess;
}

static ncclResult_t sock_wait(int fd, short events, int timeout_ms, const char *what) {
  struct pollfd p = {.fd = fd, .events = events};
  for (;;) {
    int rc = poll(&p, 1, timeout_ms);
    if (rc > 0) return ncclSuccess;
    if (rc == 0)
      return TUTTI_ERR(ncclSystemError, "socket %s timed out after %d ms", what, timeout_ms);
    if (errno != EINTR) return TUTTI_ERR(ncclSystemError, "poll: %s", strerror(errno));
  }
}

ncclResult_t sock_send_all(int fd, const void *buf, size_t len, int timeout_ms) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n, len -= (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      TUTTI_CHECK(sock_wait(fd, POLLOUT, timeout_ms, "send"));
    } else {
      return TUTTI_ERR(ncclRemoteError, "socket send failed: %s", strerror(errno));
    }
  }
  return ncclSuccess;
}

ncclResult_t sock_recv_all(int fd, void *buf, size_t len, int timeout_ms) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n, len -= (size_t)n;
    } else if (n == 0) {
      return TUTTI_ERR(ncclRemoteError, "connection closed by peer");
    } else if (errno == EAGAIN || errno == EINTR) {
      TUTTI_CHECK(sock_wait(fd, POLLIN, timeout_ms, "receive"));
    } else {
      return TUTTI_ERR(ncclRemoteError, "socket receive failed: %s", strerror(errno));
    }
  }
  return ncclSuccess;
}

/* ---- acceptor: see socket.h ---- */

#define SOCK_HELLO_MAX 1024 /* the bootstrap hello: a peer_info_t and a header */

typedef struct pending {
  int fd;
  size_t got;
  uint64_t deadline;
  sock_addr_t from;
  char hello[SOCK_HELLO_MAX];
} pending_t;

struct sock_acceptor {
  int listen_fd, wake[2], timeout_ms, log_rank;
  size_t hello_bytes;
  sock_hello_fn on_hello;
  sock_drop_fn on_drop;
  void *arg;
  pthread_t thread;
  pending_t pend[SOCK_MAX_PENDING];
  int np;
};

static void pending_drop(sock_acceptor_t *a, pending_t *pc, const char *why) {
  a->on_drop(a->arg, &pc->from, why);
  close(pc->fd);
  pc->fd = -1;
}

static void pending_read(sock_acceptor_t *a, pending_t *pc) {
  ssize_t k = recv(pc->fd, pc->hello + pc->got, a->hello_bytes - pc->got, MSG_DONTWAIT);
  if (k < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (k <= 0)
    return pending_drop(a, pc,
                        k == 0 ? "it closed before presenting the job secret" : strerror(errno));
  pc->got += (size_t)k;
  if (pc->got < a->hello_bytes) return;
  fcntl(pc->fd, F_SETFL, fcntl(pc->fd, F_GETFL) & ~O_NONBLOCK);
  const char *why = a->on_hello(a->arg, pc->fd, pc->hello);
  if (why) return pending_drop(a, pc, why);
  pc->fd = -1; /* kept by on_hello */
}

static void accept_one(sock_acceptor_t *a) {
  pending_t pc = {.fd = -1};
  socklen_t len = sizeof(pc.from);
  pc.fd = accept4(a->listen_fd, &pc.from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (pc.fd < 0) {
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) usleep(10000); /* EMFILE.. */
    return;
  }
  sock_tune(pc.fd); /* the root answers in several writes: Nagle would hold each next one for
                       the rank's delayed ACK (40 ms a round trip) */
  pc.deadline = tutti_time_ns() + (uint64_t)a->timeout_ms * 1000000ull;
  if (a->np == SOCK_MAX_PENDING)
    return pending_drop(a, &pc, "too many connections are presenting at once");
  a->pend[a->np++] = pc;
}

static void *acceptor_main(void *arg) {
  sock_acceptor_t *a = arg;
  tutti_log_set_rank(a->log_rank);
  struct pollfd pfd[2 + SOCK_MAX_PENDING];
  for (;;) {
    uint64_t now = tutti_time_ns(), next = UINT64_MAX;
    pfd[0] = (struct pollfd){.fd = a->wake[0], .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = a->listen_fd, .events = POLLIN};
    for (int i = 0; i < a->np; i++) {
      pfd[2 + i] = (struct pollfd){.fd = a->pend[i].fd, .events = POLLIN};
      next = TUTTI_MIN(next, a->pend[i].deadline);
    }
    int tmo = next == UINT64_MAX ? -1 : next <= now ? 0 : (int)((next - now) / 1000000ull) + 1;
    if (poll(pfd, (nfds_t)(2 + a->np), tmo) < 0 && errno != EINTR) break;
    if (pfd[0].revents) break;
    for (int i = 0; i < a->np; i++)
      if (pfd[2 + i].revents) pending_read(a, &a->pend[i]);
    now = tutti_time_ns();
    int kept = 0;
    for (int i = 0; i < a->np; i++) {
      if (a->pend[i].fd >= 0 && now > a->pend[i].deadline)
        pending_drop(a, &a->pend[i], "it did not present a hello in time");
      if (a->pend[i].fd >= 0) a->pend[kept++] = a->pend[i];
    }
    a->np = kept;
    if (pfd[1].revents) accept_one(a);
  }
  return NULL;
}

ncclResult_t sock_acceptor_start(int listen_fd, size_t hello_bytes, int timeout_ms,
                                 sock_hello_fn on_hello, sock_drop_fn on_drop, void *arg,
                                 int log_rank, sock_acceptor_t **out) {
  if (hello_bytes > SOCK_HELLO_MAX) return TUTTI_ERR(ncclInternalError, "hello too large");
  sock_acceptor_t *a = calloc(1, sizeof(*a));
  if (!a) return TUTTI_ERR(ncclSystemError, "out of memory");
  *a = (sock_acceptor_t){.listen_fd = listen_fd,
                         .timeout_ms = timeout_ms,
                         .log_rank = log_rank,
                         .hello_bytes = hello_bytes,
                         .on_hello = on_hello,
                         .on_drop = on_drop,
                         .arg = arg};
  if (pipe2(a->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    free(a);
    return TUTTI_ERR(ncclSystemError, "pipe: %s", strerror(errno));
  }
  int rc = pthread_create(&a->thread, NULL, acceptor_main, a);
  if (rc != 0) {
    close(a->wake[0]), close(a->wake[1]), free(a);
    return TUTTI_ERR(ncclSystemError, "cannot start an accept thread: %s", strerror(rc));
  }
  *out = a;
  return ncclSuccess;
}

void sock_acceptor_stop(sock_acceptor_t *a) {
  if (!a) return;
  ssize_t ignored = write(a->wake[1], "x", 1);
  (void)ignored;
  pthread_join(a->thread, NULL);
  for (int i = 0; i < a->np; i++) close(a->pend[i].fd);
  close(a->wake[0]), close(a->wake[1]);
  free(a);
}
