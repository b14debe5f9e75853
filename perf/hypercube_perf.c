/* hypercube_perf: an all-gather built from grouped ncclSend/ncclRecv along the edges of a
 * hypercube, timed and checked like nccl-tests' program of the same name.
 *
 *   tutti-run -n 4 hypercube_perf -b 8 -e 256M -f 2 -d all -c 1
 *
 * n must be a power of two (otherwise the program says so and skips, as nccl-tests does).
 * A size of S bytes is the receive buffer of n blocks of S / n bytes (rounded down to 16
 * bytes, the count column); rank r starts with its block r. In step k = 0 .. log2(n) - 1 rank r
 * exchanges with rank r ^ 2^k everything it has so far: the 2^k blocks starting at
 * r & ~(2^k - 1) go out, the 2^k blocks of the partner's group come in, so the data held
 * doubles every step:
 *
 *   n = 4, blocks held:   r0 [0]     -> [0 1]   -> [0 1 2 3]
 *                         r1 [1]     -> [0 1]   -> [0 1 2 3]     (step 0: 0<->1, 2<->3;
 *                         r2 [2]     -> [2 3]   -> [0 1 2 3]      step 1: 0<->2, 1<->3)
 *                         r3 [3]     -> [2 3]   -> [0 1 2 3]
 *
 * Each rank receives (n-1) blocks in total; nccl-tests counts exactly those: algbw =
 * (n-1) * S / n / time, busbw = algbw.
 */
#include <stdio.h>
#include <string.h>

#include "common.h"

#define HYPERCUBE_ALIGN 16 /* bytes per block are a multiple of this (nccl-tests' rounding) */

static void hypercube_counts(size_t bytes, size_t type_size, int nranks, int rank,
                             perf_counts_t *out) {
  size_t n = (size_t)nranks;
  size_t block = (bytes / type_size / n) & ~(HYPERCUBE_ALIGN / type_size - 1);
  *out = (perf_counts_t){.send_count = block,
                         .recv_count = block * n,
                         .param_count = block,
                         .bw_count = block * (n - 1),
                         .in_place_send = block * (size_t)rank};
}

static int hypercube_supported(int nranks, char *why, size_t len) {
  if (nranks > 0 && (nranks & (nranks - 1)) == 0) return 1;
  snprintf(why, len, "nRanks %d is not a power of 2", nranks);
  return 0;
}

static void hypercube_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, c->rank, 0);
}

static void hypercube_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, PERF_EACH, 0);
}

static ncclResult_t hypercube_step(const perf_case_t *c, char *recv, size_t block_bytes, int mask) {
  int have = c->rank & ~(mask - 1), get = have ^ mask, peer = c->rank ^ mask;
  size_t count = c->counts.param_count * (size_t)mask;
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return res;
  ncclResult_t send =
      ncclSend(recv + (size_t)have * block_bytes, count, c->type->nccl, peer, c->comm, NULL);
  ncclResult_t rcv =
      ncclRecv(recv + (size_t)get * block_bytes, count, c->type->nccl, peer, c->comm, NULL);
  res = ncclGroupEnd();
  return send != ncclSuccess ? send : rcv != ncclSuccess ? rcv : res;
}

static ncclResult_t hypercube_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  size_t block_bytes = c->counts.param_count * c->type->size;
  char *own = (char *)recvbuf + (size_t)c->rank * block_bytes;
  if (own != (const char *)sendbuf) memcpy(own, sendbuf, block_bytes);
  for (int mask = 1; mask < c->nranks; mask <<= 1) {
    ncclResult_t res = hypercube_step(c, recvbuf, block_bytes, mask);
    if (res != ncclSuccess) return res;
  }
  return ncclSuccess;
}

static const perf_coll_t hypercube = {
    .name = "hypercube",
    .call_name = "ncclSend/ncclRecv (hypercube)",
    .counts = hypercube_counts,
    .bus_factor = perf_bus_one,
    .fill_input = hypercube_fill_input,
    .expected = hypercube_expected,
    .run = hypercube_run,
    .supported = hypercube_supported,
};

int main(int argc, char **argv) {
  return perf_main(&hypercube, argc, argv);
}
