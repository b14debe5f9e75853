/* small_vs_mpi: a tutti collective and Open MPI's call for the same job in the same processes,
 * timed in alternating blocks of calls, so that both see the same machine state:
 *
 *   mpirun -np 2 --bind-to core small_vs_mpi [-b 8] [-e 4K] [-f 2] [-k 100] [-B 301] [-P out|in]
 *                                            [-M] [-c allreduce|allgather|reducescatter|gather|
 *                                                      scatter]
 *
 * Small all-reduces cost little more than a cache-line transfer each way, and on a virtual
 * machine that transfer's time moves with where the hypervisor puts the vCPUs, within a
 * fraction of a second (perf/linert; docs/perf-baseline.md). Two programs run one after the
 * other then compare states as much as libraries. Here every rank is one process of both
 * libraries (tutti's communicator is made from an id that MPI broadcasts), and per size it
 * times -B blocks of -k calls of each, alternating which goes first; a block's time is the
 * slowest rank's. It prints per size the median per-call time of each library over the blocks
 * and the median of the per-block ratios tutti / MPI with a distribution-free 95 % interval,
 * and "PASS" where the interval's upper end is at most 1 (tutti no slower, the target of
 * issue #20 for 8 B-4 KiB), "FAIL" where its lower end is above 1, "?" otherwise.
 * -c: ncclAllReduce / MPI_Allreduce (default), ncclAllGather / MPI_Allgather, ncclReduceScatter /
 * MPI_Reduce_scatter_block, a size meaning what it means for the perf programs (all-gather: the
 * whole output; reduce-scatter: the whole input); ncclGather / MPI_Gather and ncclScatter /
 * MPI_Scatter with root 0, a size being the root's whole buffer (nranks blocks), in place as
 * nccl-tests has it (the own block of the root's buffer; MPI_IN_PLACE at the root). fp32 sums on
 * heap buffers (-M: tutti's from ncclMemAlloc, which the peers map; MPI's stay on the heap); every
 * result is checked once per size (exact sums). Exit status 0 when no size fails (FAIL), 1
 * otherwise, 2 on an error.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "nccl.h"

enum { COLL_AR, COLL_AG, COLL_RS, COLL_GATHER, COLL_SCATTER };
static const char *const coll_names[] = {"all_reduce", "all_gather", "reduce_scatter", "gather",
                                         "scatter"};

typedef struct opts {
  bench_blocks_t r;
  int coll;
} opts_t;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void die(const char *what) {
  fprintf(stderr, "small_vs_mpi: %s\n", what);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

static void parse(int argc, char **argv, opts_t *o) {
  bench_blocks_init(&o->r);
  o->coll = COLL_AR;
  const char *why = NULL;
  for (int opt; (opt = getopt(argc, argv, "b:e:f:k:B:P:Mc:h")) != -1;) {
    int k = bench_blocks_option(&o->r, opt, optarg, 'B', &why);
    if (k < 0) die(why);
    if (k > 0) continue;
    if (opt != 'c')
      die("usage: small_vs_mpi [-b 8] [-e 4K] [-f 2] [-k calls] [-B blocks] [-P out|in] [-M] [-c "
          "coll]");
    o->coll = !strcmp(optarg, "allreduce")       ? COLL_AR
              : !strcmp(optarg, "allgather")     ? COLL_AG
              : !strcmp(optarg, "reducescatter") ? COLL_RS
              : !strcmp(optarg, "gather")        ? COLL_GATHER
              : !strcmp(optarg, "scatter")       ? COLL_SCATTER
                                                 : -1;
    if (o->coll < 0) die("-c takes allreduce, allgather, reducescatter, gather or scatter");
  }
  if ((why = bench_blocks_check(&o->r)) != NULL) die(why);
}

/* One call's buffers: the whole send and receive buffers are s and r (the same in place), c
 * elements per rank (all-gather, reduce-scatter, gather, scatter) or in all (all-reduce). */
typedef struct call {
  int coll, in_place, rank, nranks;
  float *s, *r;
  size_t c;
} call_t;

/* Where a rank's own block lies in a whole buffer (the in-place input of all-gather and gather,
 * the in-place output of reduce-scatter and scatter). */
static float *own(const call_t *k, float *whole) {
  return whole + (size_t)k->rank * k->c;
}

static void fill(const call_t *k) {
  if (k->coll == COLL_SCATTER) { /* the root's blocks, block b for rank b */
    if (k->rank == 0) bench_blocks_fill(k->s, k->c, 0, k->nranks);
    return;
  }
  int gathers = k->coll == COLL_AG || k->coll == COLL_GATHER;
  float *in = gathers && k->in_place ? own(k, k->r) : k->s;
  bench_blocks_fill(in, k->coll == COLL_RS ? k->c * (size_t)k->nranks : k->c, k->rank, 1);
}

static int call_tutti(const call_t *k, ncclComm_t comm) {
  float *rs_out = k->in_place ? k->s + (size_t)k->rank * k->c : k->r;
  switch (k->coll) {
    case COLL_AR:
      return ncclAllReduce(k->s, k->in_place ? k->s : k->r, k->c, ncclFloat32, ncclSum, comm,
                           NULL) != ncclSuccess;
    case COLL_AG:
      return ncclAllGather(k->in_place ? own(k, k->r) : k->s, k->r, k->c, ncclFloat32, comm,
                           NULL) != ncclSuccess;
    case COLL_GATHER:
      return ncclGather(k->in_place ? own(k, k->r) : k->s, k->r, k->c, ncclFloat32, 0, comm,
                        NULL) != ncclSuccess;
    case COLL_SCATTER:
      return ncclScatter(k->s, k->in_place ? own(k, k->s) : k->r, k->c, ncclFloat32, 0, comm,
                         NULL) != ncclSuccess;
    default:
      return ncclReduceScatter(k->s, rs_out, k->c, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess;
  }
}

/* MPI's in-place reduce-scatter leaves the result in the first block of the input (MPI's
 * layout, unlike NCCL's own block). */
static void call_mpi(const call_t *k) {
  switch (k->coll) {
    case COLL_AR:
      MPI_Allreduce(k->in_place ? MPI_IN_PLACE : k->s, k->in_place ? k->s : k->r, (int)k->c,
                    MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case COLL_AG:
      MPI_Allgather(k->in_place ? MPI_IN_PLACE : k->s, (int)k->c, MPI_FLOAT, k->r, (int)k->c,
                    MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case COLL_GATHER: /* in place: only the root's input is MPI_IN_PLACE */
      MPI_Gather(!k->in_place   ? k->s
                 : k->rank == 0 ? MPI_IN_PLACE
                                : own(k, k->r),
                 (int)k->c, MPI_FLOAT, k->r, (int)k->c, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case COLL_SCATTER:
      MPI_Scatter(k->s, (int)k->c, MPI_FLOAT,
                  !k->in_place   ? k->r
                  : k->rank == 0 ? MPI_IN_PLACE
                                 : own(k, k->s),
                  (int)k->c, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    default:
      MPI_Reduce_scatter_block(k->in_place ? MPI_IN_PLACE : k->s, k->in_place ? k->s : k->r,
                               (int)k->c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
}

/* The wrong elements of a call's output (lib 0: tutti, 1: MPI). */
static size_t check(const call_t *k, int lib) {
  if (k->coll == COLL_SCATTER) /* every rank its block */
    return bench_blocks_wrong(k->in_place ? own(k, k->s) : k->r, k->c, k->rank, 1);
  if (k->coll == COLL_GATHER && k->rank != 0) return 0; /* only the root receives */
  if (k->coll == COLL_AG || k->coll == COLL_GATHER)
    return bench_blocks_wrong(k->r, k->c, 0, k->nranks);
  const float *y = !k->in_place                ? k->r
                   : k->coll == COLL_AR || lib ? k->s
                                               : k->s + (size_t)k->rank * k->c;
  size_t first = k->coll == COLL_RS ? (size_t)k->rank * k->c : 0; /* of the whole input */
  return bench_blocks_wrong_sums(y, k->c, first, k->nranks);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  opts_t o;
  parse(argc, argv, &o);
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) die("ncclGetUniqueId failed");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) die("ncclCommInitRank failed");
  size_t max_n = o.r.maxb / sizeof(float);
  float *sb = malloc(max_n * sizeof(float)), *rb = malloc(max_n * sizeof(float));
  float *tsb = sb, *trb = rb; /* tutti's buffers */
  if (o.r.memalloc && (ncclMemAlloc((void **)&tsb, max_n * sizeof(float)) != ncclSuccess ||
                       ncclMemAlloc((void **)&trb, max_n * sizeof(float)) != ncclSuccess))
    die("ncclMemAlloc failed");
  double *bt = malloc((size_t)o.r.blocks * sizeof(double)),
         *bm = malloc(o.r.blocks * sizeof(double));
  double *ratio = malloc((size_t)o.r.blocks * sizeof(double));
  if (!sb || !rb || !tsb || !trb || !bt || !bm || !ratio) die("out of memory");
  if (rank == 0) {
    printf(
        "# small_vs_mpi: %s, %d ranks, fp32 (sum), %s, tutti's buffers from %s, %d blocks of "
        "%d calls each per size\n",
        coll_names[o.coll], nranks, o.r.in_place ? "in place" : "out of place",
        o.r.memalloc ? "ncclMemAlloc" : "the heap", o.r.blocks, o.r.calls);
    printf(
        "# time = median over blocks of the slowest rank's time per call; ratio = tutti / MPI "
        "per block (median, 95 %% interval)\n");
    printf("#%9s %10s %10s %8s %15s %8s\n", "size (B)", "tutti us", "MPI us", "ratio",
           "95% interval", "t<=MPI");
  }
  int fails = 0;
  for (size_t bytes = o.r.minb; bytes <= o.r.maxb; bytes *= (size_t)o.r.factor) {
    size_t n = bytes / sizeof(float), c = o.coll == COLL_AR ? n : n / (size_t)nranks;
    if (c == 0) continue; /* smaller than a float per rank */
    call_t k[2] = {{o.coll, o.r.in_place, rank, nranks, tsb, o.r.in_place ? tsb : trb, c},
                   {o.coll, o.r.in_place, rank, nranks, sb, o.r.in_place ? sb : rb, c}};
    size_t wrong = 0;
    for (int lib = 0; lib < 2; lib++) { /* warm-up, then one checked call of each */
      for (int i = 0; i < 20; i++) {
        fill(&k[lib]);
        if (lib == 0 && call_tutti(&k[0], comm)) die("the tutti call failed");
        if (lib == 1) call_mpi(&k[1]);
      }
      wrong += check(&k[lib], lib);
    }
    for (int b = 0; b < o.r.blocks; b++) {
      double t[2];
      for (int j = 0; j < 2; j++) {
        int lib = (b + j) % 2; /* alternate which library goes first */
        double t0 = now_us();
        for (int i = 0; i < o.r.calls; i++) {
          if (lib == 0)
            call_tutti(&k[0], comm);
          else
            call_mpi(&k[1]);
        }
        t[lib] = (now_us() - t0) / o.r.calls;
      }
      bt[b] = t[0], bm[b] = t[1];
    }
    MPI_Allreduce(MPI_IN_PLACE, bt, o.r.blocks, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, bm, o.r.blocks, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    unsigned long long bad = wrong;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int b = 0; b < o.r.blocks; b++) ratio[b] = bt[b] / bm[b];
    double lo, hi, r = bench_median_ci(ratio, o.r.blocks, &lo, &hi);
    double tt = bench_median_ci(bt, o.r.blocks, NULL, NULL),
           tm = bench_median_ci(bm, o.r.blocks, NULL, NULL);
    const char *verdict = hi <= 1.0 ? "PASS" : lo > 1.0 ? "FAIL" : "?";
    fails += lo > 1.0 || bad;
    if (rank == 0) {
      printf("%10zu %10.3f %10.3f %8.3f %7.3f-%-7.3f %8s\n", bytes, tt, tm, r, lo, hi, verdict);
      if (bad) printf("# %zu bytes: %llu wrong elements\n", bytes, bad);
    }
  }
  ncclCommDestroy(comm);
  if (o.r.memalloc) ncclMemFree(tsb), ncclMemFree(trb);
  free(sb), free(rb), free(bt), free(bm), free(ratio);
  MPI_Finalize();
  return fails ? 1 : 0;
}
