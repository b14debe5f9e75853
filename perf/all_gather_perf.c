/* all_gather_perf: ncclAllGather timed and checked like nccl-tests' program of the same name.
 *
 *   tutti-run -n 4 all_gather_perf -b 8 -e 256M -f 2 -d all -c 1
 *
 * A size of S bytes is the receive buffer: each rank contributes a block of S / n bytes (the
 * count column) and receives all n blocks, rank j's at offset j; in place, a rank's input is
 * its own block of the receive buffer. algbw = S / time; busbw = algbw * (n-1)/n, since each
 * rank receives the n-1 blocks it does not have.
 */
#include "common.h"

static void all_gather_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, c->rank, 0);
}

static void all_gather_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, PERF_EACH, 0);
}

static ncclResult_t all_gather_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  return ncclAllGather(sendbuf, recvbuf, c->counts.param_count, c->type->nccl, c->comm, NULL);
}

static const perf_coll_t all_gather = {
    .name = "all_gather",
    .call_name = "ncclAllGather",
    .counts = perf_counts_gather,
    .bus_factor = perf_bus_n_minus_1,
    .fill_input = all_gather_fill_input,
    .expected = all_gather_expected,
    .run = all_gather_run,
};

int main(int argc, char **argv) {
  return perf_main(&all_gather, argc, argv);
}
