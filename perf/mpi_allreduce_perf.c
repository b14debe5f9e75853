/* mpi_allreduce_perf: the peer that all_reduce_perf is compared with. The same sizes, iteration
 * counts, warm-up, timing (average per iteration, max over ranks) and output columns, measuring
 * MPI_Allreduce on fp32 sums, out-of-place and in-place (MPI_IN_PLACE).
 *
 *   mpirun -np 2 mpi_allreduce_perf -b 8 -e 256M -f 2 -c 1
 *
 * Only -d float and -o sum are accepted: that is the comparison the issue asks for.
 * Inputs are (i + rank) % 31 + 1, so every partial sum is an exact integer in fp32 up to
 * 541,200 ranks and the check (-c 1) is exact.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MPI_PERF_MOD 31

typedef struct mpi_perf {
  bench_opts_t opts;
  int rank, nranks;
  float *send, *recv;
  size_t buf_bytes;
  float expected[MPI_PERF_MOD]; /* the sum over ranks, by i % 31 */
  double wrong_total, busbw_sum;
  int busbw_n;
} mpi_perf_t;

static float mpi_perf_value(size_t i, int rank) {
  return (float)((i + (size_t)rank) % MPI_PERF_MOD + 1);
}

static void mpi_perf_fill(const mpi_perf_t *p, float *buf, size_t count) {
  for (size_t i = 0; i < count; i++) buf[i] = mpi_perf_value(i, p->rank);
}

static void mpi_perf_init_expected(mpi_perf_t *p) {
  for (size_t j = 0; j < MPI_PERF_MOD; j++) {
    double sum = 0;
    for (int r = 0; r < p->nranks; r++) sum += mpi_perf_value(j, r);
    p->expected[j] = (float)sum;
  }
}

static double mpi_perf_check(const mpi_perf_t *p, size_t count) {
  double wrong = 0;
  for (size_t i = 0; i < count; i++)
    if (p->recv[i] != p->expected[i % MPI_PERF_MOD]) wrong++;
  return wrong;
}

static void mpi_perf_run(mpi_perf_t *p, size_t count, int in_place, int iters) {
  const void *send = in_place ? MPI_IN_PLACE : (const void *)p->send;
  for (int i = 0; i < iters; i++)
    MPI_Allreduce(send, p->recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* Input where the call reads it; the receive buffer poisoned (NaN) for out-of-place. */
static void mpi_perf_prepare(mpi_perf_t *p, size_t count, int in_place) {
  memset(p->recv, 0xff, count * sizeof(float));
  mpi_perf_fill(p, in_place ? p->recv : p->send, count);
}

static bench_result_t mpi_perf_measure(mpi_perf_t *p, size_t count, int in_place) {
  size_t bytes = count * sizeof(float);
  int iters = bench_iters_for(&p->opts, bytes);
  if (p->opts.check) mpi_perf_prepare(p, count, in_place);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  mpi_perf_run(p, count, in_place, iters);
  double v[2] = {(bench_now() - t0) / iters, -1};
  if (p->opts.check) {
    mpi_perf_prepare(p, count, in_place);
    mpi_perf_run(p, count, in_place, 1);
    v[1] = mpi_perf_check(p, count);
  }
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  bench_result_t r = {.time_us = v[0] * 1e6, .wrong = v[1]};
  r.algbw = bench_algbw(bytes, v[0]);
  r.busbw = r.algbw * 2.0 * (p->nranks - 1) / p->nranks;
  if (r.wrong > 0) p->wrong_total += r.wrong;
  p->busbw_sum += r.busbw;
  p->busbw_n++;
  return r;
}

static void mpi_perf_print_ranks(const mpi_perf_t *p) {
  bench_rank_info_t mine, *all = calloc((size_t)p->nranks, sizeof(*all));
  if (!all) MPI_Abort(MPI_COMM_WORLD, 1);
  bench_rank_info(&mine);
  MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, MPI_COMM_WORLD);
  if (p->rank == 0) {
    bench_print_header(&p->opts);
    for (int r = 0; r < p->nranks; r++) bench_print_rank(r, (long)all[r].pid, all[r].host);
    bench_print_table_header();
  }
  free(all);
}

static void mpi_perf_check_args(const mpi_perf_t *p) {
  if (strcmp(p->opts.type_arg, "float") == 0 && strcmp(p->opts.op_arg, "sum") == 0 &&
      p->opts.max_bytes / sizeof(float) <= 0x7fffffff)
    return;
  if (p->rank == 0)
    fprintf(stderr, "mpi_allreduce_perf: only -d float -o sum and at most 8G bytes\n");
  MPI_Finalize();
  exit(2);
}

/* Warm-up like all_reduce_perf: sane inputs, then -w iterations at the largest and smallest
 * size. */
static void mpi_perf_warmup(mpi_perf_t *p) {
  size_t max_count = p->opts.max_bytes / sizeof(float);
  mpi_perf_fill(p, p->send, max_count);
  mpi_perf_fill(p, p->recv, max_count);
  mpi_perf_run(p, max_count, 0, p->opts.warmup);
  mpi_perf_run(p, p->opts.min_bytes / sizeof(float), 0, p->opts.warmup);
}

int main(int argc, char **argv) {
  mpi_perf_t p = {0};
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.nranks);
  bench_parse(argc, argv, "mpi_allreduce_perf", &p.opts);
  mpi_perf_check_args(&p);
  p.buf_bytes = p.opts.max_bytes / sizeof(float) * sizeof(float);
  p.send = bench_alloc(p.buf_bytes);
  p.recv = bench_alloc(p.buf_bytes);
  mpi_perf_init_expected(&p);
  mpi_perf_print_ranks(&p);
  mpi_perf_warmup(&p);
  for (size_t bytes = p.opts.min_bytes; bytes != BENCH_END;
       bytes = bench_next_size(&p.opts, bytes)) {
    size_t count = bytes / sizeof(float);
    bench_result_t out = mpi_perf_measure(&p, count, 0);
    bench_result_t in = mpi_perf_measure(&p, count, 1);
    if (p.rank == 0) bench_print_row(count * sizeof(float), count, "float", "sum", -1, &out, &in);
  }
  if (p.rank == 0) bench_print_footer(p.wrong_total, p.busbw_n ? p.busbw_sum / p.busbw_n : 0.0);
  bench_free(p.send, p.buf_bytes);
  bench_free(p.recv, p.buf_bytes);
  MPI_Finalize();
  return p.wrong_total > 0 ? 1 : 0;
}
