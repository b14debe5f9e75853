/* net_p2p_perf: one-way bandwidth between rank 0 and rank 1 (ncclSend / ncclRecv), the number
 * to hold against iperf3's single stream on the same link (perf/net_compare.sh).
 *
 *   tutti-run --hosts h1,h2 net_p2p_perf [-M] [bytes (64M)] [iterations (20)] [warm-up (3)]
 *
 * -M: the buffers come from ncclMemAlloc (registered once by transports that register memory,
 * as perftest registers its buffer before timing) instead of malloc.
 * Rank 0 sends `bytes` to rank 1 `iterations` times; rank 1 answers each with one byte, so a
 * send is timed until its last byte has arrived. Prints "p2p <bytes> <GB/s>" on rank 0 (GB =
 * 1e9 bytes). The warm-up messages are checked (i-th float of message k is k + i % 1024).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tutti.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

#define CHECK(call)                                                                    \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                           \
      fprintf(stderr, "net_p2p_perf: %s failed: %s\n", #call, ncclGetLastError(comm)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

int main(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "--help"))) {
    printf(strcmp(argv[1], "--help")
               ? "net_p2p_perf (tutti) %s\n"
               : "usage: net_p2p_perf [-M] [bytes [iters [warmup]]] (tutti %s)\n",
           TUTTI_VERSION_STRING);
    return 0;
  }
  int memalloc = argc > 1 && !strcmp(argv[1], "-M");
  argc -= memalloc, argv += memalloc;
  size_t bytes = argc > 1 ? parse_bytes(argv[1]) : 64u << 20;
  int iters = argc > 2 ? atoi(argv[2]) : 20, warmup = argc > 3 ? atoi(argv[3]) : 3;
  size_t count = bytes / sizeof(float);
  ncclComm_t comm = NULL;
  int rank, n;
  CHECK(tuttiCommInitFromEnv(&comm));
  CHECK(ncclCommUserRank(comm, &rank));
  CHECK(ncclCommCount(comm, &n));
  if (n < 2) {
    fprintf(stderr, "net_p2p_perf: needs 2 ranks\n");
    return 1;
  }
  float *buf = NULL;
  if (memalloc)
    CHECK(ncclMemAlloc((void **)&buf, count * sizeof(float)));
  else
    buf = malloc(count * sizeof(float));
  char ack = 0;
  if (!buf) return 1;
  long bad = 0;
  for (int k = 0; k < warmup; k++) { /* warm-up, checked */
    if (rank == 0) {
      for (size_t i = 0; i < count; i++) buf[i] = (float)(k + (int)(i % 1024));
      CHECK(ncclSend(buf, count, ncclFloat32, 1, comm, NULL));
      CHECK(ncclRecv(&ack, 1, ncclInt8, 1, comm, NULL));
    } else if (rank == 1) {
      CHECK(ncclRecv(buf, count, ncclFloat32, 0, comm, NULL));
      for (size_t i = 0; i < count; i++) bad += buf[i] != (float)(k + (int)(i % 1024));
      CHECK(ncclSend(&ack, 1, ncclInt8, 0, comm, NULL));
    }
  }
  /* timed: the same buffer goes out `iters` times */
  double start = now_s();
  for (int k = 0; k < iters; k++) {
    if (rank == 0) {
      CHECK(ncclSend(buf, count, ncclFloat32, 1, comm, NULL));
      CHECK(ncclRecv(&ack, 1, ncclInt8, 1, comm, NULL));
    } else if (rank == 1) {
      CHECK(ncclRecv(buf, count, ncclFloat32, 0, comm, NULL));
      CHECK(ncclSend(&ack, 1, ncclInt8, 0, comm, NULL));
    }
  }
  double secs = now_s() - start;
  if (rank == 0) printf("p2p %zu %.6f\n", bytes, (double)bytes * iters / secs / 1e9);
  if (rank == 1 && bad) fprintf(stderr, "net_p2p_perf: %ld wrong values\n", bad);
  if (memalloc)
    ncclMemFree(buf);
  else
    free(buf);
  ncclCommDestroy(comm);
  return bad ? 1 : 0;
}
