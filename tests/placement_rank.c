/* A rank program for test_placement.cc (started by tutti-run). With argument "hosts" each rank
 * pretends to be its own host (TUTTI_HOSTID=host<rank>, so that the ranks talk over tcp). It
 * makes its communicator with tuttiCommInitFromEnv, checks one int32 all-reduce (closed-form
 * sum), then prints what the library applied to the process:
 *   "rank R cpus LIST"      its CPU affinity after init (sched_getaffinity), e.g. "0-1,4"
 *   "rank R listen ADDR"    each TCP socket it listens on (getsockname), except the launcher's
 *                           bootstrap socket (TUTTI_ROOT_FD)
 *   "rank R ok"
 * Exit status: 0 ok, 1 wrong result, 2 init failed (message on stderr), 3 a call failed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tutti.h"

static void print_cpus(int rank) {
  cpu_set_t set;
  char buf[1024];
  size_t o = 0;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && o < sizeof(buf) - 32; c++) {
    if (!CPU_ISSET(c, &set) || (c > 0 && CPU_ISSET(c - 1, &set))) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) e++;
    o += (size_t)snprintf(buf + o, sizeof(buf) - o, o ? ",%d" : "%d", c);
    if (e > c) o += (size_t)snprintf(buf + o, sizeof(buf) - o, "-%d", e);
  }
  printf("rank %d cpus %s\n", rank, buf);
}

static void print_listening(int rank, int root_fd) {
  for (int fd = 0; fd < 1024; fd++) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (fd == root_fd || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
        !listening)
      continue;
    struct sockaddr_storage ss;
    char host[INET6_ADDRSTRLEN] = "?";
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) continue;
    if (ss.ss_family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
    else if (ss.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
    else
      continue;
    printf("rank %d listen %s\n", rank, host);
  }
}

int main(int argc, char **argv) {
  /* read before init: the library unsets TUTTI_ROOT_FD once it has taken the socket, and the
   * root keeps that socket open until it has served every rank, which may be after this rank
   * has finished its all-reduce */
  const char *root = getenv("TUTTI_ROOT_FD");
  int root_fd = root ? atoi(root) : -1;
  const char *r = getenv("TUTTI_RANK");
  if (argc > 1 && strcmp(argv[1], "hosts") == 0 && r) {
    char host[32];
    snprintf(host, sizeof(host), "host%s", r);
    setenv("TUTTI_HOSTID", host, 1);
  }
  ncclComm_t comm;
  ncclResult_t rc = tuttiCommInitFromEnv(&comm);
  if (rc != ncclSuccess) {
    fprintf(stderr, "init failed: %s: %s\n", ncclGetErrorString(rc), ncclGetLastError(NULL));
    return 2;
  }
  int rank = -1, n = -1;
  ncclCommUserRank(comm, &rank);
  ncclCommCount(comm, &n);
  int32_t in[4], out[4];
  for (int j = 0; j < 4; j++) in[j] = rank + 10 * j;
  int status = ncclAllReduce(in, out, 4, ncclInt32, ncclSum, comm, NULL) == ncclSuccess ? 0 : 3;
  for (int j = 0; j < 4 && status == 0; j++)
    if (out[j] != n * (n - 1) / 2 + n * 10 * j) status = 1;
  print_cpus(rank);
  print_listening(rank, root_fd);
  if (ncclCommDestroy(comm) != ncclSuccess && status == 0) status = 3;
  if (status == 0) printf("rank %d ok\n", rank);
  fflush(stdout);
  return status;
}
