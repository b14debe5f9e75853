/* broadcast_perf: ncclBroadcast timed and checked like nccl-tests' program of the same name.
 *
 *   tutti-run -n 4 broadcast_perf -b 8 -e 256M -f 2 -d all -r all -c 1
 *
 * The root sends `count` elements and every rank receives them; only the root's input is read.
 * busbw = algbw: in a pipelined chain every link carries the whole buffer once.
 */
#include "common.h"

static void broadcast_counts(size_t bytes, size_t type_size, int nranks, int rank,
                             perf_counts_t *out) {
  (void)nranks;
  (void)rank;
  perf_counts_flat(bytes, type_size, out);
}

static void broadcast_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  if (c->rank == c->root) perf_fill_blocks(c, buf, first, n, c->counts.send_count, c->root, 0);
}

static void broadcast_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.recv_count, c->root, 0);
}

static ncclResult_t broadcast_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  return ncclBroadcast(sendbuf, recvbuf, c->counts.param_count, c->type->nccl, c->root, c->comm,
                       NULL);
}

static const perf_coll_t broadcast = {
    .name = "broadcast",
    .call_name = "ncclBroadcast",
    .rooted = 1,
    .counts = broadcast_counts,
    .bus_factor = perf_bus_one,
    .fill_input = broadcast_fill_input,
    .expected = broadcast_expected,
    .run = broadcast_run,
};

int main(int argc, char **argv) {
  return perf_main(&broadcast, argc, argv);
}
