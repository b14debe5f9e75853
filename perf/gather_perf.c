/* gather_perf: ncclGather timed and checked like nccl-tests' program of the same name.
 *
 *   tutti-run -n 4 gather_perf -b 8 -e 256M -f 2 -d all -r all -c 1
 *
 * A size of S bytes is the root's receive buffer: each rank sends a block of S / n bytes (the
 * count column), which lands in block r of the root's buffer; in place, a rank's input is its
 * own block of its receive buffer. The other ranks' receive buffers must stay as they were.
 * algbw = S / time; busbw = algbw * (n-1)/n, the blocks the root receives from others.
 */
#include "common.h"

static void gather_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, c->rank, 0);
}

static void gather_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  if (c->rank == c->root)
    perf_fill_blocks(c, buf, first, n, c->counts.param_count, PERF_EACH, 0);
  else
    perf_fill_untouched(c, buf, first, n);
}

static ncclResult_t gather_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  return ncclGather(sendbuf, recvbuf, c->counts.param_count, c->type->nccl, c->root, c->comm, NULL);
}

static const perf_coll_t gather = {
    .name = "gather",
    .call_name = "ncclGather",
    .rooted = 1,
    .counts = perf_counts_gather,
    .bus_factor = perf_bus_n_minus_1,
    .fill_input = gather_fill_input,
    .expected = gather_expected,
    .run = gather_run,
};

int main(int argc, char **argv) {
  return perf_main(&gather, argc, argv);
}
