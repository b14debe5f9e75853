/* TCP socket helpers for the bootstrap (and later the tcp transport): bounded waits only. */
#ifndef TUTTI_SOCKET_H_
#define TUTTI_SOCKET_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include "core.h"

typedef union {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
} sock_addr_t;

/* "1.2.3.4:5" / "[::1]:5" / "name:5" -> address; port 0 when absent. */
ncclResult_t sock_addr_parse(const char *text, sock_addr_t *addr);
const char *sock_addr_str(const sock_addr_t *addr, char *buf, size_t len);
socklen_t sock_addr_len(const sock_addr_t *addr);
/* The address to advertise: first interface matching TUTTI_SOCKET_IFNAME (prefix list, ^ to
 * exclude, = exact), else the first non-loopback, non-docker IPv4 then IPv6, else loopback. */
ncclResult_t sock_pick_local_addr(sock_addr_t *addr, char *ifname, size_t ifname_len);

ncclResult_t sock_listen(sock_addr_t *addr, int *fd); /* binds addr (port 0 = any); updates it */
ncclResult_t sock_connect(const sock_addr_t *addr, int timeout_ms, int *fd);
/* Accepts one connection within timeout_ms (<0: forever); *fd = -1 on timeout. */
ncclResult_t sock_accept(int listen_fd, int timeout_ms, int *fd);
/* Options for a long-lived data socket (tcp transport): TCP_NODELAY; SO_SNDBUF/SO_RCVBUF of
 * buf_bytes each when > 0 (0 keeps the kernel's autotuning); when timeout_ms > 0, keepalive
 * probes and TCP_USER_TIMEOUT so that a peer cut off for timeout_ms turns into ETIMEDOUT. */
void sock_set_data_options(int fd, int buf_bytes, int64_t timeout_ms);
/* Sends/receives exactly len bytes, each wait bounded by timeout_ms; a closed peer is an error. */
ncclResult_t sock_send_all(int fd, const void *buf, size_t len, int timeout_ms);
ncclResult_t sock_recv_all(int fd, void *buf, size_t len, int timeout_ms);

#endif
