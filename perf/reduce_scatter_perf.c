/* reduce_scatter_perf: ncclReduceScatter timed and checked like nccl-tests' program of the
 * same name.
 *
 *   tutti-run -n 4 reduce_scatter_perf -b 8 -e 256M -f 2 -d all -o all -c 1
 *
 * A size of S bytes is the send buffer: n blocks of S / n bytes (the count column); rank r
 * receives the reduction over all ranks of their block r. In place, the input is the whole
 * receive buffer and the result lands in its block r. algbw = S / time; busbw = algbw *
 * (n-1)/n, since each rank sends the n-1 blocks it does not keep.
 */
#include "common.h"

static void reduce_scatter_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, c->rank, PERF_EACH);
}

static void reduce_scatter_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.param_count, PERF_REDUCED, c->rank);
}

static ncclResult_t reduce_scatter_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  return ncclReduceScatter(sendbuf, recvbuf, c->counts.param_count, c->type->nccl, c->op, c->comm,
                           NULL);
}

static const perf_coll_t reduce_scatter = {
    .name = "reduce_scatter",
    .call_name = "ncclReduceScatter",
    .reduces = 1,
    .counts = perf_counts_scatter,
    .bus_factor = perf_bus_n_minus_1,
    .fill_input = reduce_scatter_fill_input,
    .expected = reduce_scatter_expected,
    .run = reduce_scatter_run,
};

int main(int argc, char **argv) {
  return perf_main(&reduce_scatter, argc, argv);
}
