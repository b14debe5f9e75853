/* builds_ab: two builds of tutti in the same processes, timed in alternating blocks of calls:
 *
 *   mpirun -np 2 --bind-to core builds_ab [-b 8] [-e 4K] [-f 2] [-k 100] [-n 301] [-P out|in]
 *                                         [-M] [-c allreduce|allgather|reducescatter|gather|
 *                                               scatter] LIB_A LIB_B
 *
 * LIB_A and LIB_B are two libtutti.so files (e.g. a baseline's build and this one's). Each is
 * loaded privately (dlopen, RTLD_LOCAL | RTLD_DEEPBIND: its own globals, its own symbols), and
 * each rank makes one communicator of each from ids that MPI broadcasts. Per size it times -n
 * blocks of -k all-reduces (fp32 sum) of each build, alternating which goes first, a block's
 * time being the slowest rank's, and prints the median per-call time of each and the median of
 * the per-block ratios B / A with a distribution-free 95 % interval (bench_median_ci).
 *
 * Separate runs of two builds compare the virtual machine's states as much as the builds:
 * a small all-reduce costs a cache-line transfer or two, whose time moves with where the
 * hypervisor puts the vCPUs, within a fraction of a second (perf/linert). Here both builds see
 * the same states. -c allgather / reducescatter: ncclAllGather / ncclReduceScatter instead, a
 * size being the whole output / input (nranks blocks); -c gather / scatter: ncclGather /
 * ncclScatter with root 0, a size being the root's whole buffer; in place as nccl-tests has
 * them. Verdict per size
 * (issue #18's "within 5 %"): "LOSS" where the interval's lower end is above 1.05 (B slower by more
 * than 5 %), "ok" where its upper end is at most 1.05, "?" otherwise. Every result is checked once
 * per size (exact sums). Exit status 0 when no size is a LOSS and every result is right, 1
 * otherwise, 2 on an error. -M: each build's buffers from its own ncclMemAlloc (memory the other
 * ranks of the host map); otherwise both use the same heap buffers. The same file as A and B (an
 * A/A run) loads a copy of it as B. A build whose thread-locals are initial-exec (STATIC_TLS in
 * `readelf -d`, e.g. f6aa53c's) needs room for them: `mpirun -x
 * GLIBC_TUNABLES=glibc.rtld.optional_static_tls=262144`.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "nccl.h"

typedef struct build {
  const char *path;
  void *lib;
  ncclResult_t (*get_id)(ncclUniqueId *);
  ncclResult_t (*init)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                 ncclComm_t, cudaStream_t);
  ncclResult_t (*rooted[2])(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t); /* ncclGather, ncclScatter */
  ncclResult_t (*destroy)(ncclComm_t);
  ncclResult_t (*mem_alloc)(void **, size_t);
  ncclResult_t (*mem_free)(void *);
  ncclComm_t comm;
  float *s, *r; /* this build's buffers */
} build_t;

enum { COLL_AR, COLL_AG, COLL_RS, COLL_GATHER, COLL_SCATTER };
static const char *const coll_names[] = {"all_reduce", "all_gather", "reduce_scatter", "gather",
                                         "scatter"};
static int coll = COLL_AR; /* -c */

typedef bench_blocks_t opts_t;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "builds_ab: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

static void parse(int argc, char **argv, opts_t *o, build_t b[2]) {
  bench_blocks_init(o);
  const char *why = NULL;
  for (int opt; (opt = getopt(argc, argv, "b:e:f:k:n:P:Mc:h")) != -1;) {
    int k = bench_blocks_option(o, opt, optarg, 'n', &why);
    if (k < 0) die(why, optarg);
    if (k > 0) continue;
    if (opt != 'c')
      die("usage: builds_ab [-b 8] [-e 4K] [-f 2] [-k 100] [-n 301] [-P out|in] [-M] [-c "
          "allreduce|allgather|reducescatter|gather|scatter] LIB_A LIB_B",
          NULL);
    coll = !strcmp(optarg, "allreduce")       ? COLL_AR
           : !strcmp(optarg, "allgather")     ? COLL_AG
           : !strcmp(optarg, "reducescatter") ? COLL_RS
           : !strcmp(optarg, "gather")        ? COLL_GATHER
           : !strcmp(optarg, "scatter")       ? COLL_SCATTER
                                              : -1;
    if (coll < 0) die("-c takes allreduce, allgather, reducescatter, gather or scatter", optarg);
  }
  if ((why = bench_blocks_check(o)) != NULL) die(why, NULL);
  if (argc - optind != 2) die("two libraries to compare: LIB_A LIB_B", NULL);
  b[0].path = argv[optind], b[1].path = argv[optind + 1];
}

static void *sym(build_t *b, const char *name) {
  void *f = dlsym(b->lib, name);
  if (!f) die(b->path, dlerror());
  return f;
}

/* A copy of the file at path in a temporary file, whose name goes to tmp (the loader hands out
 * one instance per file: comparing a build with itself needs a second file). */
static void copy_to_temp(const char *path, char *tmp, size_t cap) {
  snprintf(tmp, cap, "/tmp/builds_ab-%d-XXXXXX", (int)getpid());
  int out = mkstemp(tmp), in = open(path, O_RDONLY);
  if (out < 0 || in < 0) die("cannot copy the library", path);
  char buf[1 << 16];
  for (ssize_t k; (k = read(in, buf, sizeof(buf))) != 0;)
    if (k < 0 || write(out, buf, (size_t)k) != k) die("cannot copy the library", path);
  close(in), close(out);
}

static int same_file(const char *a, const char *b) {
  struct stat x, y;
  return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

static void load(build_t *b, const build_t *other) {
  char tmp[64] = "";
  if (other && same_file(b->path, other->path)) copy_to_temp(b->path, tmp, sizeof(tmp));
  b->lib = dlopen(tmp[0] ? tmp : b->path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (tmp[0]) unlink(tmp);
  if (!b->lib) {
    const char *why = dlerror();
    if (strstr(why, "static TLS"))
      fprintf(stderr,
              "builds_ab: a library with initial-exec thread-locals (builds before "
              "1818eca) loads with mpirun -x "
              "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=262144\n");
    die("dlopen failed", why);
  }
  *(void **)&b->get_id = sym(b, "ncclGetUniqueId");
  *(void **)&b->init = sym(b, "ncclCommInitRank");
  *(void **)&b->all_reduce = sym(b, "ncclAllReduce");
  *(void **)&b->all_gather = sym(b, "ncclAllGather");
  *(void **)&b->reduce_scatter = sym(b, "ncclReduceScatter");
  *(void **)&b->rooted[0] = sym(b, "ncclGather");
  *(void **)&b->rooted[1] = sym(b, "ncclScatter");
  *(void **)&b->destroy = sym(b, "ncclCommDestroy");
  *(void **)&b->mem_alloc = sym(b, "ncclMemAlloc");
  *(void **)&b->mem_free = sym(b, "ncclMemFree");
}

static void connect(build_t *b, int rank, int nranks) {
  ncclUniqueId id;
  if (rank == 0 && b->get_id(&id) != ncclSuccess) die(b->path, "ncclGetUniqueId failed");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (b->init(&b->comm, nranks, id, rank) != ncclSuccess) die(b->path, "ncclCommInitRank failed");
}

/* n: the elements of the whole buffer; a block is n / nranks of them, at rank * that in the
 * whole buffer (the in-place input of a gather, output of a scatter). */
static int call(const build_t *b, size_t n, int in_place, int rank, int nranks) {
  if (coll == COLL_AR)
    return b->all_reduce(b->s, in_place ? b->s : b->r, n, ncclFloat32, ncclSum, b->comm, NULL) !=
           ncclSuccess;
  size_t c = n / (size_t)nranks;
  if (coll == COLL_AG)
    return b->all_gather(in_place ? b->r + (size_t)rank * c : b->s, b->r, c, ncclFloat32, b->comm,
                         NULL) != ncclSuccess;
  if (coll == COLL_RS)
    return b->reduce_scatter(b->s, in_place ? b->s + (size_t)rank * c : b->r, c, ncclFloat32,
                             ncclSum, b->comm, NULL) != ncclSuccess;
  if (coll == COLL_GATHER)
    return b->rooted[0](in_place ? b->r + (size_t)rank * c : b->s, b->r, c, ncclFloat32, 0, b->comm,
                        NULL) != ncclSuccess;
  return b->rooted[1](b->s, in_place ? b->s + (size_t)rank * c : b->r, c, ncclFloat32, 0, b->comm,
                      NULL) != ncclSuccess;
}

static size_t wrong_elements(const build_t *b, size_t n, int in_place, int rank, int nranks) {
  size_t c = n / (size_t)nranks;
  if (coll == COLL_AR || coll == COLL_RS)
    bench_blocks_fill(b->s, coll == COLL_AR ? n : c * (size_t)nranks, rank, 1);
  else if (coll == COLL_GATHER || coll == COLL_AG)
    bench_blocks_fill(in_place ? b->r + (size_t)rank * c : b->s, c, rank, 1);
  else if (rank == 0)
    bench_blocks_fill(b->s, c, 0, nranks);
  if (call(b, n, in_place, rank, nranks)) die(b->path, "the checked call failed");
  if (coll == COLL_AR) return bench_blocks_wrong_sums(in_place ? b->s : b->r, n, 0, nranks);
  if (coll == COLL_AG) return bench_blocks_wrong(b->r, c, 0, nranks);
  if (coll == COLL_RS)
    return bench_blocks_wrong_sums(in_place ? b->s + (size_t)rank * c : b->r, c, (size_t)rank * c,
                                   nranks);
  if (coll == COLL_GATHER) return rank == 0 ? bench_blocks_wrong(b->r, c, 0, nranks) : 0;
  return bench_blocks_wrong(in_place ? b->s + (size_t)rank * c : b->r, c, rank, 1);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  opts_t o;
  build_t b[2] = {{0}};
  parse(argc, argv, &o, b);
  size_t max_n = o.maxb / sizeof(float);
  float *hs = malloc(max_n * sizeof(float)), *hr = malloc(max_n * sizeof(float));
  double *t[2] = {malloc((size_t)o.blocks * sizeof(double)),
                  malloc((size_t)o.blocks * sizeof(double))};
  double *ratio = malloc((size_t)o.blocks * sizeof(double));
  if (!hs || !hr || !t[0] || !t[1] || !ratio) die("out of memory", NULL);
  for (int i = 0; i < 2; i++) {
    load(&b[i], i ? &b[0] : NULL);
    connect(&b[i], rank, nranks);
    b[i].s = hs, b[i].r = hr;
    if (o.memalloc && (b[i].mem_alloc((void **)&b[i].s, max_n * sizeof(float)) != ncclSuccess ||
                       b[i].mem_alloc((void **)&b[i].r, max_n * sizeof(float)) != ncclSuccess))
      die(b[i].path, "ncclMemAlloc failed");
  }
  if (rank == 0) {
    printf(
        "# builds_ab: %s, %d ranks, fp32 (sum), %s, buffers from %s, %d blocks of %d "
        "calls each per size\n",
        coll_names[coll], nranks, o.in_place ? "in place" : "out of place",
        o.memalloc ? "each build's ncclMemAlloc" : "the heap", o.blocks, o.calls);
    printf("# A: %s\n# B: %s\n", b[0].path, b[1].path);
    printf(
        "# time = median over blocks of the slowest rank's time per call; ratio = B / A per "
        "block (median, 95 %% interval)\n");
    printf("#%9s %10s %10s %8s %15s %8s\n", "size (B)", "A us", "B us", "B/A", "95% interval",
           "verdict");
  }
  int fails = 0;
  for (size_t bytes = o.minb; bytes <= o.maxb; bytes *= (size_t)o.factor) {
    size_t n = bytes / sizeof(float);
    if (coll != COLL_AR && n < (size_t)nranks) continue; /* under a float per rank */
    unsigned long long bad = 0;
    for (int i = 0; i < 2; i++) { /* warm-up, then one checked call of each */
      for (int w = 0; w < 20; w++)
        if (call(&b[i], n, o.in_place, rank, nranks)) die(b[i].path, "a call failed");
      bad += wrong_elements(&b[i], n, o.in_place, rank, nranks);
    }
    for (int k = 0; k < o.blocks; k++)
      for (int j = 0; j < 2; j++) {
        int i = (k + j) % 2; /* alternate which build goes first */
        double t0 = bench_now();
        for (int c = 0; c < o.calls; c++) call(&b[i], n, o.in_place, rank, nranks);
        t[i][k] = (bench_now() - t0) * 1e6 / o.calls;
      }
    for (int i = 0; i < 2; i++)
      MPI_Allreduce(MPI_IN_PLACE, t[i], o.blocks, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int k = 0; k < o.blocks; k++) ratio[k] = t[1][k] / t[0][k];
    double lo, hi, r = bench_median_ci(ratio, o.blocks, &lo, &hi);
    double ta = bench_median_ci(t[0], o.blocks, NULL, NULL);
    double tb = bench_median_ci(t[1], o.blocks, NULL, NULL);
    const char *verdict = lo > 1.05 ? "LOSS" : hi <= 1.05 ? "ok" : "?";
    fails += lo > 1.05 || bad;
    if (rank == 0) {
      printf("%10zu %10.3f %10.3f %8.3f %7.3f-%-7.3f %8s\n", bytes, ta, tb, r, lo, hi, verdict);
      if (bad) printf("# %zu bytes: %llu wrong elements\n", bytes, bad);
      fflush(stdout);
    }
  }
  for (int i = 0; i < 2; i++) {
    b[i].destroy(b[i].comm);
    if (o.memalloc) b[i].mem_free(b[i].s), b[i].mem_free(b[i].r);
  }
  free(hs), free(hr), free(t[0]), free(t[1]), free(ratio);
  MPI_Finalize();
  return fails ? 1 : 0;
}
