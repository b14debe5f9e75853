/* reduce_perf: ncclReduce timed and checked like nccl-tests' program of the same name.
 *
 *   tutti-run -n 4 reduce_perf -b 8 -e 256M -f 2 -d all -o all -r all -c 1
 *
 * Every rank sends `count` elements; the root receives their reduction. The other ranks'
 * receive buffers must stay as they were (poison, or the input in place). busbw = algbw: in a
 * pipelined chain every link carries the whole buffer once.
 */
#include "common.h"

static void reduce_counts(size_t bytes, size_t type_size, int nranks, int rank,
                          perf_counts_t *out) {
  (void)nranks;
  (void)rank;
  perf_counts_flat(bytes, type_size, out);
}

static void reduce_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.send_count, c->rank, 0);
}

static void reduce_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  if (c->rank == c->root)
    perf_fill_blocks(c, buf, first, n, c->counts.recv_count, PERF_REDUCED, 0);
  else
    perf_fill_untouched(c, buf, first, n);
}

static ncclResult_t reduce_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  return ncclReduce(sendbuf, recvbuf, c->counts.param_count, c->type->nccl, c->op, c->root, c->comm,
                    NULL);
}

static const perf_coll_t reduce = {
    .name = "reduce",
    .call_name = "ncclReduce",
    .reduces = 1,
    .rooted = 1,
    .counts = reduce_counts,
    .bus_factor = perf_bus_one,
    .fill_input = reduce_fill_input,
    .expected = reduce_expected,
    .run = reduce_run,
};

int main(int argc, char **argv) {
  return perf_main(&reduce, argc, argv);
}
