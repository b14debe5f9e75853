/* TCP socket helpers for the bootstrap (and later the tcp transport): bounded waits only. */
#ifndef TUTTI_SOCKET_H_
#define TUTTI_SOCKET_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef union {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
} sock_addr_t;

/* "1.2.3.4:5" / "[::1]:5" / "name:5" -> address; port 0 when absent. */
ncclResult_t sock_addr_parse(const char *text, sock_addr_t *addr);
const char *sock_addr_str(const sock_addr_t *addr, char *buf, size_t len);
socklen_t sock_addr_len(const sock_addr_t *addr);
/* The first address of an interface that is up, IPv4 before IPv6 (never a link-local IPv6):
 * of an interface matching the name list spec (tutti_name_list_matches: "eth", "^docker",
 * "=eth0"), or for spec NULL of any interface but loopback and docker. *found = 0 when none.
 * Which address a process offers is decided in net_addr.c. */
ncclResult_t sock_find_addr(const char *spec, sock_addr_t *addr, char *ifname, size_t ifname_len,
                            int *found);
void sock_loopback_addr(sock_addr_t *addr); /* 127.0.0.1, port 0 */

ncclResult_t sock_listen(sock_addr_t *addr, int *fd); /* binds addr (port 0 = any); updates it */
/* Milliseconds from now until deadline_ns (tutti_time_ns clock); 0 once it passed. */
int sock_ms_left(uint64_t deadline_ns);
/* Connects within timeout_ms, all of it: each attempt's wait is bounded by poll(), and refused or
 * unreachable addresses are retried until then (the peer may not listen yet). */
ncclResult_t sock_connect(const sock_addr_t *addr, int timeout_ms, int *fd);
/* The same for an address known to be listening already: a refused connection is final (errno
 * stays ECONNREFUSED); other failures (an unreachable host) are retried until the timeout. */
ncclResult_t sock_connect_listening(const sock_addr_t *addr, int timeout_ms, int *fd);
/* Accepts one connection within timeout_ms (<0: forever); *fd = -1 on timeout. */
ncclResult_t sock_accept(int listen_fd, int timeout_ms, int *fd);
/* Options for a long-lived data socket (tcp transport): TCP_NODELAY; SO_SNDBUF/SO_RCVBUF of
 * buf_bytes each when > 0 (0 keeps the kernel's autotuning); when timeout_ms > 0, keepalive
 * probes and TCP_USER_TIMEOUT so that a peer cut off for timeout_ms turns into ETIMEDOUT. */
void sock_set_data_options(int fd, int buf_bytes, int64_t timeout_ms);
/* An accept thread for a port that only admits connections presenting a fixed-size hello.
 * It takes connections on listen_fd, reads `hello_bytes` from each without blocking (up to
 * SOCK_MAX_PENDING at once, each within timeout_ms) and hands every complete hello to
 * on_hello, which returns NULL to keep the (now blocking) fd, or why it refuses it; refused
 * connections and those that never present a hello go to on_drop with the reason, then are
 * closed. A slow or silent client never delays the others. log_rank tags the thread's logs. */
#define SOCK_MAX_PENDING 64
typedef const char *(*sock_hello_fn)(void *arg, int fd, const void *hello);
typedef void (*sock_drop_fn)(void *arg, const sock_addr_t *from, const char *why);
typedef struct sock_acceptor sock_acceptor_t;
ncclResult_t sock_acceptor_start(int listen_fd, size_t hello_bytes, int timeout_ms,
                                 sock_hello_fn on_hello, sock_drop_fn on_drop, void *arg,
                                 int log_rank, sock_acceptor_t **out);
/* Stops and joins the thread, closes the connections still presenting (not listen_fd). */
void sock_acceptor_stop(sock_acceptor_t *a);

/* Sends/receives exactly len bytes, each wait bounded by timeout_ms; a closed peer is an error. */
ncclResult_t sock_send_all(int fd, const void *buf, size_t len, int timeout_ms);
ncclResult_t sock_recv_all(int fd, void *buf, size_t len, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
