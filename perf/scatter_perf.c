/* scatter_perf: ncclScatter timed and checked like nccl-tests' program of the same name.
 *
 *   tutti-run -n 4 scatter_perf -b 8 -e 256M -f 2 -d all -r all -c 1
 *
 * A size of S bytes is the root's send buffer: n blocks of S / n bytes (the count column);
 * rank r receives block r. Only the root's input is read; in place, rank r's output is block r
 * of its receive buffer. algbw = S / time; busbw = algbw * (n-1)/n, the blocks that leave the
 * root.
 */
#include "common.h"

static void scatter_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  if (c->rank == c->root)
    perf_fill_blocks(c, buf, first, n, c->counts.param_count, c->root, PERF_EACH);
}

static void scatter_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, c->root, c->rank);
}

static ncclResult_t scatter_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  return ncclScatter(sendbuf, recvbuf, c->counts.param_count, c->type->nccl, c->root, c->comm,
                     NULL);
}

static const perf_coll_t scatter = {
    .name = "scatter",
    .call_name = "ncclScatter",
    .rooted = 1,
    .counts = perf_counts_scatter,
    .bus_factor = perf_bus_n_minus_1,
    .fill_input = scatter_fill_input,
    .expected = scatter_expected,
    .run = scatter_run,
};

int main(int argc, char **argv) {
  return perf_main(&scatter, argc, argv);
}
