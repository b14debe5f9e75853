/* sendrecv_perf: grouped ncclSend/ncclRecv around a ring, timed and checked like nccl-tests'
 * program of the same name.
 *
 *   tutti-run -n 4 sendrecv_perf -b 8 -e 256M -f 2 -d all -c 1
 *
 * In one group each rank sends `count` elements to rank + 1 and receives as many from rank - 1
 * (mod n), so every rank sends and receives at once. busbw = algbw: each link carries the
 * buffer once. In place (the same buffer sent and received into) the result is undefined, as
 * in nccl-tests: it is timed and its #wrong is N/A.
 */
#include "common.h"

static void sendrecv_counts(size_t bytes, size_t type_size, int nranks, int rank,
                            perf_counts_t *out) {
  (void)nranks;
  (void)rank;
  perf_counts_flat(bytes, type_size, out);
}

static void sendrecv_fill_input(const perf_case_t *c, void *buf, size_t first, size_t n) {
  perf_fill_blocks(c, buf, first, n, c->counts.send_count, c->rank, 0);
}

static void sendrecv_expected(const perf_case_t *c, void *buf, size_t first, size_t n) {
  int from = (c->rank + c->nranks - 1) % c->nranks;
  perf_fill_blocks(c, buf, first, n, c->counts.recv_count, from, 0);
}

static ncclResult_t sendrecv_run(const perf_case_t *c, const void *sendbuf, void *recvbuf) {
  int to = (c->rank + 1) % c->nranks, from = (c->rank + c->nranks - 1) % c->nranks;
  size_t count = c->counts.param_count;
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return res;
  ncclResult_t send = ncclSend(sendbuf, count, c->type->nccl, to, c->comm, NULL);
  ncclResult_t recv = ncclRecv(recvbuf, count, c->type->nccl, from, c->comm, NULL);
  res = ncclGroupEnd(); /* always close the group, then report the first error */
  return send != ncclSuccess ? send : recv != ncclSuccess ? recv : res;
}

static const perf_coll_t sendrecv = {
    .name = "sendrecv",
    .call_name = "ncclSend/ncclRecv",
    .in_place_unchecked = 1,
    .counts = sendrecv_counts,
    .bus_factor = perf_bus_one,
    .fill_input = sendrecv_fill_input,
    .expected = sendrecv_expected,
    .run = sendrecv_run,
};

int main(int argc, char **argv) {
  return perf_main(&sendrecv, argc, argv);
}
