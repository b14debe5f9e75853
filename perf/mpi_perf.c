/* mpi_perf: the Open MPI peer of the tutti benchmarks. The same sizes, iteration counts,
 * warm-up, timing, -a aggregation, output columns and JSON as <coll>_perf, measuring the MPI
 * call that does the same job on fp32 data:
 *
 *   --coll all_reduce      MPI_Allreduce               (in place: MPI_IN_PLACE)
 *          all_gather      MPI_Allgather               (MPI_IN_PLACE, own block in place)
 *          reduce_scatter  MPI_Reduce_scatter_block    (MPI_IN_PLACE: input in recvbuf, result
 *                                                        in its first block, MPI's layout)
 *          broadcast       MPI_Bcast                   (one buffer: both columns time it)
 *          reduce          MPI_Reduce                  (MPI_IN_PLACE at the root)
 *          alltoall        MPI_Alltoall                (MPI_IN_PLACE)
 *          gather          MPI_Gather                  (MPI_IN_PLACE at the root)
 *          scatter         MPI_Scatter                 (MPI_IN_PLACE at the root)
 *          sendrecv        MPI_Sendrecv around a ring  (MPI_Sendrecv_replace)
 *
 *   mpirun -np 2 mpi_perf --coll all_gather -b 8 -e 256M -f 2 -c 1
 *
 * A size means what it means for the tutti program of the same collective (nccl-tests'
 * meaning), and algbw / busbw use the same factors, so the columns compare one to one.
 * Only -d float is accepted, and -o sum for the reducing collectives: that is the comparison
 * perf/compare makes. Element k of block b of rank r's input is (k + b(n+1) + r) % 31 + 1, the
 * tutti programs' pattern for fp32 (see pattern.c), so every sum is exact and a block in the
 * wrong place is caught; -c checks every element.
 *
 * Built twice: as mpi_perf, and as mpi_allreduce_perf, whose default --coll is all_reduce
 * (the name compare_allreduce.sh runs).
 */
#include <ctype.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifndef MPI_PERF_DEFAULT_COLL
#define MPI_PERF_DEFAULT_COLL NULL
#endif
#define MPI_PERF_MOD 31

typedef struct mpi_perf mpi_perf_t;

/* One collective: its layout (tutti's perf_counts_t in spirit), data and call. */
typedef struct mpi_coll {
  const char *name, *call;
  int reduces, rooted;
  int layout;           /* MPI_LAYOUT_* */
  double bus_factor_n1; /* 1: busbw = algbw (n-1)/n; 2: 2(n-1)/n; 0: busbw = algbw */
  void (*run)(mpi_perf_t *p, int in_place);
  /* Element e of this rank's input (send layout) and of its expected output; the expected
   * output returns 0 where nothing is checked (non-root ranks). */
  float (*input)(const mpi_perf_t *p, size_t e);
  int (*expected)(const mpi_perf_t *p, size_t e, float *want);
} mpi_coll_t;

enum { MPI_LAYOUT_FLAT, MPI_LAYOUT_GATHER, MPI_LAYOUT_SCATTER, MPI_LAYOUT_ALLTOALL };

struct mpi_perf {
  bench_opts_t opts;
  const mpi_coll_t *coll;
  int rank, nranks, root;
  float *send, *recv;
  size_t send_bytes, recv_bytes;
  size_t block, send_count, recv_count; /* of the current size */
  bench_json_t *json;
  int results_wrong;
  double busbw_sum;
  int busbw_n;
};

static float mpi_value(const mpi_perf_t *p, int r, size_t b, size_t k) {
  return (float)((k + b * (size_t)(p->nranks + 1) + (size_t)r) % MPI_PERF_MOD + 1);
}

static float mpi_sum(const mpi_perf_t *p, size_t b, size_t k) {
  double s = 0;
  for (int r = 0; r < p->nranks; r++) s += mpi_value(p, r, b, k);
  return (float)s;
}

/* ---- data of each collective ---- */

static float in_flat(const mpi_perf_t *p, size_t e) {
  return mpi_value(p, p->rank, 0, e);
}
static float in_blocks(const mpi_perf_t *p, size_t e) {
  return mpi_value(p, p->rank, e / p->block, e % p->block);
}
static float in_root_blocks(const mpi_perf_t *p, size_t e) {
  return mpi_value(p, p->root, e / p->block, e % p->block);
}
static int want_sum(const mpi_perf_t *p, size_t e, float *w) {
  *w = mpi_sum(p, 0, e);
  return 1;
}
static int want_root_sum(const mpi_perf_t *p, size_t e, float *w) {
  *w = mpi_sum(p, 0, e);
  return p->rank == p->root;
}
static int want_each_block(const mpi_perf_t *p, size_t e, float *w) {
  *w = mpi_value(p, (int)(e / p->block), 0, e % p->block);
  return 1;
}
static int want_root_each_block(const mpi_perf_t *p, size_t e, float *w) {
  return want_each_block(p, e, w) && p->rank == p->root;
}
static int want_own_block_sum(const mpi_perf_t *p, size_t e, float *w) {
  *w = mpi_sum(p, (size_t)p->rank, e);
  return 1;
}
static int want_root_data(const mpi_perf_t *p, size_t e, float *w) {
  *w = mpi_value(p, p->root, 0, e);
  return 1;
}
static int want_transposed(const mpi_perf_t *p, size_t e, float *w) {
  *w = mpi_value(p, (int)(e / p->block), (size_t)p->rank, e % p->block);
  return 1;
}
static int want_root_own_block(const mpi_perf_t *p, size_t e, float *w) {
  *w = mpi_value(p, p->root, (size_t)p->rank, e);
  return 1;
}
static int want_left(const mpi_perf_t *p, size_t e, float *w) {
  *w = mpi_value(p, (p->rank + p->nranks - 1) % p->nranks, 0, e);
  return 1;
}

/* ---- the calls ---- */

#define SEND_OR_IN_PLACE(p, in_place) ((in_place) ? MPI_IN_PLACE : (const void *)(p)->send)
#define COUNT(x) ((int)(x))

static void run_all_reduce(mpi_perf_t *p, int in_place) {
  MPI_Allreduce(SEND_OR_IN_PLACE(p, in_place), p->recv, COUNT(p->block), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
}
static void run_all_gather(mpi_perf_t *p, int in_place) {
  MPI_Allgather(SEND_OR_IN_PLACE(p, in_place), COUNT(p->block), MPI_FLOAT, p->recv, COUNT(p->block),
                MPI_FLOAT, MPI_COMM_WORLD);
}
static void run_reduce_scatter(mpi_perf_t *p, int in_place) {
  MPI_Reduce_scatter_block(SEND_OR_IN_PLACE(p, in_place), p->recv, COUNT(p->block), MPI_FLOAT,
                           MPI_SUM, MPI_COMM_WORLD);
}
static void run_broadcast(mpi_perf_t *p, int in_place) {
  (void)in_place;
  MPI_Bcast(p->recv, COUNT(p->block), MPI_FLOAT, p->root, MPI_COMM_WORLD);
}
static void run_reduce(mpi_perf_t *p, int in_place) {
  const void *s = in_place ? (p->rank == p->root ? MPI_IN_PLACE : (const void *)p->recv) : p->send;
  MPI_Reduce(s, p->recv, COUNT(p->block), MPI_FLOAT, MPI_SUM, p->root, MPI_COMM_WORLD);
}
static void run_alltoall(mpi_perf_t *p, int in_place) {
  MPI_Alltoall(SEND_OR_IN_PLACE(p, in_place), COUNT(p->block), MPI_FLOAT, p->recv, COUNT(p->block),
               MPI_FLOAT, MPI_COMM_WORLD);
}
static void run_gather(mpi_perf_t *p, int in_place) {
  const void *s = p->send;
  if (in_place)
    s = p->rank == p->root ? MPI_IN_PLACE : (const void *)(p->recv + p->rank * p->block);
  MPI_Gather(s, COUNT(p->block), MPI_FLOAT, p->recv, COUNT(p->block), MPI_FLOAT, p->root,
             MPI_COMM_WORLD);
}
static void run_scatter(mpi_perf_t *p, int in_place) {
  if (in_place && p->rank == p->root)
    MPI_Scatter(p->recv, COUNT(p->block), MPI_FLOAT, MPI_IN_PLACE, COUNT(p->block), MPI_FLOAT,
                p->root, MPI_COMM_WORLD);
  else
    MPI_Scatter(p->send, COUNT(p->block), MPI_FLOAT, p->recv, COUNT(p->block), MPI_FLOAT, p->root,
                MPI_COMM_WORLD);
}
static void run_sendrecv(mpi_perf_t *p, int in_place) {
  int to = (p->rank + 1) % p->nranks, from = (p->rank + p->nranks - 1) % p->nranks;
  if (in_place)
    MPI_Sendrecv_replace(p->recv, COUNT(p->block), MPI_FLOAT, to, 0, from, 0, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
  else
    MPI_Sendrecv(p->send, COUNT(p->block), MPI_FLOAT, to, 0, p->recv, COUNT(p->block), MPI_FLOAT,
                 from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static const mpi_coll_t mpi_colls[] = {
    {"all_reduce", "MPI_Allreduce", 1, 0, MPI_LAYOUT_FLAT, 2, run_all_reduce, in_flat, want_sum},
    {"all_gather", "MPI_Allgather", 0, 0, MPI_LAYOUT_GATHER, 1, run_all_gather, in_flat,
     want_each_block},
    {"reduce_scatter", "MPI_Reduce_scatter_block", 1, 0, MPI_LAYOUT_SCATTER, 1, run_reduce_scatter,
     in_blocks, want_own_block_sum},
    {"broadcast", "MPI_Bcast", 0, 1, MPI_LAYOUT_FLAT, 0, run_broadcast, in_flat, want_root_data},
    {"reduce", "MPI_Reduce", 1, 1, MPI_LAYOUT_FLAT, 0, run_reduce, in_flat, want_root_sum},
    {"alltoall", "MPI_Alltoall", 0, 0, MPI_LAYOUT_ALLTOALL, 1, run_alltoall, in_blocks,
     want_transposed},
    {"gather", "MPI_Gather", 0, 1, MPI_LAYOUT_GATHER, 1, run_gather, in_flat, want_root_each_block},
    {"scatter", "MPI_Scatter", 0, 1, MPI_LAYOUT_SCATTER, 1, run_scatter, in_root_blocks,
     want_root_own_block},
    {"sendrecv", "MPI_Sendrecv", 0, 0, MPI_LAYOUT_FLAT, 0, run_sendrecv, in_flat, want_left},
};
#define MPI_NUM_COLLS ((int)(sizeof(mpi_colls) / sizeof(mpi_colls[0])))

/* ---- sizes and buffers ---- */

/* Sets block, send_count and recv_count for a size of `bytes` (nccl-tests' meaning). */
static void mpi_set_size(mpi_perf_t *p, size_t bytes) {
  size_t count = bytes / sizeof(float), n = (size_t)p->nranks;
  switch (p->coll->layout) {
    case MPI_LAYOUT_FLAT:
      p->block = p->send_count = p->recv_count = count;
      break;
    case MPI_LAYOUT_GATHER:
      p->block = count / n;
      p->send_count = p->block;
      p->recv_count = p->block * n;
      break;
    case MPI_LAYOUT_SCATTER:
      p->block = count / n;
      p->send_count = p->block * n;
      p->recv_count = p->block;
      break;
    default: /* alltoall */
      p->block = count / n;
      p->send_count = p->recv_count = p->block * n;
  }
}

static size_t mpi_size_bytes(const mpi_perf_t *p) {
  return (p->send_count > p->recv_count ? p->send_count : p->recv_count) * sizeof(float);
}

/* algbw counts the bytes nccl-tests counts: the block for flat layouts, n blocks otherwise. */
static size_t mpi_bw_bytes(const mpi_perf_t *p) {
  size_t n = p->coll->layout == MPI_LAYOUT_FLAT ? 1 : (size_t)p->nranks;
  return p->block * n * sizeof(float);
}

static double mpi_bus_factor(const mpi_perf_t *p) {
  double n = p->nranks;
  return p->coll->bus_factor_n1 == 0 ? 1.0 : p->coll->bus_factor_n1 * (n - 1) / n;
}

/* Where this rank's input goes: the send buffer, or in place where MPI_IN_PLACE reads it. */
static float *mpi_input_ptr(const mpi_perf_t *p, int in_place) {
  if (!in_place) return p->send;
  if (p->coll->layout == MPI_LAYOUT_GATHER) return p->recv + p->rank * p->block;
  if (p->coll->run == run_scatter && p->rank != p->root) return p->send;
  return p->recv;
}

/* Poison (NaN) in the receive buffer, then the input where the call reads it. The root of a
 * broadcast (one buffer) gets its data in recv. */
static void mpi_prepare(mpi_perf_t *p, int in_place) {
  memset(p->recv, 0xff, p->recv_bytes);
  float *in = mpi_input_ptr(p, in_place);
  if (p->coll->run == run_broadcast) {
    if (p->rank == p->root)
      for (size_t e = 0; e < p->send_count; e++) p->recv[e] = p->coll->input(p, e);
    return;
  }
  for (size_t e = 0; e < p->send_count; e++) in[e] = p->coll->input(p, e);
}

/* The output: recvbuf, except at the root of an in-place scatter, whose block stays where it
 * is in the send layout (MPI_IN_PLACE semantics). */
static const float *mpi_output_ptr(const mpi_perf_t *p, int in_place) {
  if (in_place && p->coll->run == run_scatter && p->rank == p->root)
    return p->recv + p->root * p->block;
  return p->recv;
}

static double mpi_check(const mpi_perf_t *p, int in_place) {
  const float *out = mpi_output_ptr(p, in_place);
  double wrong = 0;
  float want;
  for (size_t e = 0; e < p->recv_count; e++)
    if (p->coll->expected(p, e, &want) && out[e] != want) wrong++;
  return wrong;
}

static void mpi_run_iters(mpi_perf_t *p, int in_place, int iters) {
  for (int i = 0; i < iters; i++)
    for (int a = 0; a < p->opts.agg_iters; a++) p->coll->run(p, in_place);
}

/* -a across ranks; #wrong summed. */
static void mpi_aggregate(const mpi_perf_t *p, double *seconds, double *wrong) {
  double s[3] = {*seconds, *wrong > 0 ? *wrong : 0, p->rank == 0 ? *seconds : 0}, m = *seconds;
  MPI_Allreduce(MPI_IN_PLACE, s, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (*wrong >= 0) *wrong = s[1];
  if (p->opts.average == BENCH_AVG_MIN || p->opts.average == BENCH_AVG_MAX) {
    MPI_Op op = p->opts.average == BENCH_AVG_MIN ? MPI_MIN : MPI_MAX;
    MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    *seconds = m;
  } else {
    *seconds = p->opts.average == BENCH_AVG_RANK0 ? s[2] : s[0] / p->nranks;
  }
}

static bench_result_t mpi_measure(mpi_perf_t *p, int in_place) {
  int iters = bench_iters_for(&p->opts, mpi_size_bytes(p));
  if (p->opts.check) mpi_prepare(p, in_place);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  mpi_run_iters(p, in_place, iters);
  double seconds = (bench_now() - t0) / ((double)iters * p->opts.agg_iters), wrong = -1;
  if (p->opts.check) {
    wrong = 0;
    for (int k = 0; k < p->opts.check && wrong == 0; k++) {
      mpi_prepare(p, in_place);
      p->coll->run(p, in_place);
      wrong += mpi_check(p, in_place);
    }
  }
  mpi_aggregate(p, &seconds, &wrong);
  bench_result_t r = {.time_us = seconds * 1e6,
                      .wrong = wrong,
                      .window_ms = seconds * 1e3 * iters * p->opts.agg_iters};
  r.algbw = bench_algbw(mpi_bw_bytes(p), seconds);
  r.busbw = r.algbw * mpi_bus_factor(p);
  if (r.wrong > 0) p->results_wrong++;
  p->busbw_sum += r.busbw;
  p->busbw_n++;
  return r;
}

/* ---- setup ---- */

static void mpi_print_ranks(mpi_perf_t *p) {
  bench_rank_info_t mine, *all = calloc((size_t)p->nranks, sizeof(*all));
  const char **hosts = calloc((size_t)p->nranks, sizeof(*hosts));
  if (!all || !hosts) MPI_Abort(MPI_COMM_WORLD, 1);
  bench_rank_info(&mine);
  MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, MPI_COMM_WORLD);
  if (p->rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "", tool[64];
    int len = 0;
    MPI_Get_library_version(version, &len);
    version[strcspn(version, ",\n")] = '\0'; /* "Open MPI v4.1.4" */
    snprintf(tool, sizeof(tool), "mpi_perf --coll %s", p->coll->name);
    for (int r = 0; r < p->nranks; r++) hosts[r] = all[r].host;
    if (p->opts.json_path)
      p->json = bench_json_open(&p->opts, tool, p->coll->name, version, p->nranks, hosts);
    printf("# %s: %s\n", version, p->coll->call);
    bench_print_header(&p->opts);
    for (int r = 0; r < p->nranks; r++) bench_print_rank(r, (long)all[r].pid, all[r].host);
    bench_print_table_header();
  }
  free(hosts);
  free(all);
}

static void mpi_usage_exit(const mpi_perf_t *p, const char *msg) {
  if (p->rank == 0) fprintf(stderr, "mpi_perf: %s\n", msg);
  MPI_Finalize();
  exit(2);
}

/* Collective names as the other tools take them: "all_reduce", "allreduce", "AllReduce" (case
 * and '_' ignored, as coll_parse in src/algos/schedule.c). */
static int mpi_same_coll(const char *a, const char *b) {
  for (;; a++, b++) {
    while (*a == '_' || *a == '-') a++;
    while (*b == '_' || *b == '-') b++;
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    if (!*a) return 1;
  }
}

static void mpi_check_args(mpi_perf_t *p) {
  const char *name = p->opts.coll_arg ? p->opts.coll_arg : MPI_PERF_DEFAULT_COLL;
  for (int i = 0; name && i < MPI_NUM_COLLS; i++)
    if (mpi_same_coll(name, mpi_colls[i].name)) p->coll = &mpi_colls[i];
  if (!p->coll)
    mpi_usage_exit(p,
                   "--coll all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|"
                   "gather|scatter|sendrecv is required");
  if (strcmp(p->opts.type_arg, "float") != 0) mpi_usage_exit(p, "only -d float is measured");
  if (p->coll->reduces && strcmp(p->opts.op_arg, "sum") != 0)
    mpi_usage_exit(p, "only -o sum is measured");
  if (p->opts.max_bytes / sizeof(float) > 0x7fffffff) mpi_usage_exit(p, "at most 8G bytes");
  if (p->coll->rooted && p->opts.root >= p->nranks) mpi_usage_exit(p, "-r is out of range");
}

static void mpi_alloc(mpi_perf_t *p) {
  mpi_set_size(p, p->opts.max_bytes);
  p->send_bytes = p->send_count * sizeof(float);
  p->recv_bytes = (p->recv_count > p->send_count ? p->recv_count : p->send_count) * sizeof(float);
  p->send = bench_alloc_at(p->send_bytes, p->opts.buffer_offset, p->opts.alloc_mmap);
  p->recv = bench_alloc_at(p->recv_bytes, p->opts.buffer_offset, p->opts.alloc_mmap);
}

/* Warm-up like the tutti programs: sane inputs, then -w iterations at the largest size (out of
 * place and in place) and at the smallest. */
static void mpi_warmup(mpi_perf_t *p) {
  mpi_set_size(p, p->opts.max_bytes);
  for (size_t e = 0; e < p->send_count; e++) p->send[e] = p->recv[e] = p->coll->input(p, e);
  mpi_run_iters(p, 0, p->opts.warmup);
  mpi_run_iters(p, 1, p->opts.warmup); /* in place too, as the tutti programs warm up */
  mpi_set_size(p, p->opts.min_bytes);
  mpi_run_iters(p, 0, p->opts.warmup);
}

static void mpi_sweep(mpi_perf_t *p) {
  mpi_warmup(p);
  for (size_t bytes = p->opts.min_bytes; bytes != BENCH_END;
       bytes = bench_next_size(&p->opts, bytes)) {
    mpi_set_size(p, bytes);
    int warm = bench_warmup_iters_for(&p->opts, mpi_size_bytes(p));
    if (warm > 0) mpi_run_iters(p, 0, warm);
    bench_result_t out = mpi_measure(p, 0);
    bench_result_t in = mpi_measure(p, 1);
    if (p->rank != 0) continue;
    const char *op = p->coll->reduces ? "sum" : "none";
    int root = p->coll->rooted ? p->root : -1;
    bench_print_row(mpi_size_bytes(p), p->block, "float", op, root, &out, &in);
    bench_json_row(p->json, mpi_size_bytes(p), p->block, "float", op, root, &out, &in);
  }
}

int main(int argc, char **argv) {
  mpi_perf_t p = {0};
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.nranks);
  bench_parse(argc, argv, "mpi_perf", &p.opts);
  if (p.opts.reg) {
    fprintf(stderr, "mpi_perf: -R (ncclMemAlloc buffers) is for tutti's programs\n");
    return 2;
  }
  mpi_check_args(&p);
  mpi_alloc(&p);
  mpi_print_ranks(&p);
  int r0 = 0, r1 = 0;
  if (p.coll->rooted && p.opts.root != BENCH_ROOT_ALL) r0 = r1 = p.opts.root;
  if (p.coll->rooted && p.opts.root == BENCH_ROOT_ALL) r1 = p.nranks - 1;
  for (p.root = r0; p.root <= r1; p.root++) mpi_sweep(&p);
  double avg = p.busbw_n ? p.busbw_sum / p.busbw_n : 0.0;
  if (p.rank == 0) {
    bench_print_footer(p.results_wrong, avg);
    bench_json_close(p.json, p.results_wrong, avg);
  }
  bench_free_at(p.send, p.send_bytes, p.opts.buffer_offset, p.opts.alloc_mmap);
  bench_free_at(p.recv, p.recv_bytes, p.opts.buffer_offset, p.opts.alloc_mmap);
  MPI_Finalize();
  return p.results_wrong > 0 ? 1 : 0;
}
