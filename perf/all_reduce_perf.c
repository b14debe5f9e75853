/* all_reduce_perf: ncclAllReduce timed and checked like nccl-tests' program of the same name.
 *
 *   tutti-run -n 4 all_reduce_perf -b 8 -e 256M -f 2 -d all -o all -c 1
 *
 * Every rank sends and receives `count` elements; busbw = algbw * 2(n-1)/n, the bandwidth each
 * link needs in a ring (each byte crosses n-1 links in the reduce-scatter and n-1 in the
 * all-gather, while algbw counts it once).
 */
#include "common.h"

static void all_reduce_counts(size_t bytes, size_t type_size, int nranks, int rank,
                              perf_counts_t *out) {
  (void)nranks;
  (void)rank;
  perf_counts_flat(bytes, type_size, out);
}

static double all_reduce_bus_factor(int nranks) {
  return 2.0 * (nranks - 1) / nranks;
}

static void all_reduce_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.send_count, c->rank, 0);
}

static void all_reduce_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.recv_count, PERF_REDUCED, 0);
}

static ncclResult_t all_reduce_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  return ncclAllReduce(sendbuf, recvbuf, c->counts.param_count, c->type->nccl, c->op, c->comm,
                       NULL);
}

static const perf_coll_t all_reduce = {
    .name = "all_reduce",
    .call_name = "ncclAllReduce",
    .reduces = 1,
    .counts = all_reduce_counts,
    .bus_factor = all_reduce_bus_factor,
    .fill_input = all_reduce_fill_input,
    .expected = all_reduce_expected,
    .run = all_reduce_run,
};

int main(int argc, char **argv) {
  return perf_main(&all_reduce, argc, argv);
}
