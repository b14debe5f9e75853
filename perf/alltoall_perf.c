/* alltoall_perf: ncclAlltoAll timed and checked like nccl-tests' program of the same name.
 *
 *   tutti-run -n 4 alltoall_perf -b 8 -e 256M -f 2 -d all -c 1
 *
 * A size of S bytes is each rank's send (and receive) buffer: n blocks of S / n bytes (the
 * count column). Block j of rank r's send buffer lands in block r of rank j's receive buffer.
 * nccl-tests builds this from grouped ncclSend/ncclRecv; tutti has the collective itself
 * (NCCL 2.28's ncclAlltoAll), and its in-place form (sendbuff == recvbuff) is checked too.
 * algbw = S / time; busbw = algbw * (n-1)/n, the blocks that leave the rank.
 */
#include "common.h"

static void alltoall_counts(size_t bytes, size_t type_size, int nranks, int rank,
                            perf_counts_t *out) {
  (void)rank;
  size_t block = bytes / type_size / (size_t)nranks, n = (size_t)nranks;
  *out = (perf_counts_t){.send_count = block * n,
                         .recv_count = block * n,
                         .param_count = block,
                         .bw_count = block * n};
}

static void alltoall_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, c->rank, PERF_EACH);
}

static void alltoall_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, PERF_EACH, c->rank);
}

static ncclResult_t alltoall_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  return ncclAlltoAll(sendbuf, recvbuf, c->counts.param_count, c->type->nccl, c->comm, NULL);
}

static const perf_coll_t alltoall = {
    .name = "alltoall",
    .call_name = "ncclAlltoAll",
    .counts = alltoall_counts,
    .bus_factor = perf_bus_n_minus_1,
    .fill_input = alltoall_fill_input,
    .expected = alltoall_expected,
    .run = alltoall_run,
};

int main(int argc, char **argv) {
  return perf_main(&alltoall, argc, argv);
}
