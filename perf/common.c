/* The tutti benchmark harness (see common.h): the measurement loop shared by every *_perf
 * program, the -T watchdog and the layouts shared by several collectives. The data and the
 * check live in pattern.c.
 *
 * One size, one placement (out-of-place, then in-place), as nccl-tests does it:
 *   1. poison the receive buffer, write the input where the call reads it (only with -c);
 *   2. barrier (a one-element all-reduce), then -n timed iterations of -m calls each (the -m
 *      calls of an iteration in one group); time = elapsed / (n * m) on each rank;
 *   3. -c times: poison, input, one call, compare with the closed form (#wrong on this rank);
 *   4. aggregate across ranks: time as -a says (rank 0, mean, min, max), #wrong summed.
 */
#include "common.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "pattern.h"

/* ---- layouts and bus factors shared by several collectives ---- */

void perf_counts_flat(size_t bytes, size_t type_size, perf_counts_t *out) {
  size_t count = bytes / type_size;
  *out = (perf_counts_t){
      .send_count = count, .recv_count = count, .param_count = count, .bw_count = count};
}

void perf_counts_gather(size_t bytes, size_t type_size, int nranks, int rank, perf_counts_t *out) {
  size_t block = bytes / type_size / (size_t)nranks, n = (size_t)nranks;
  *out = (perf_counts_t){.send_count = block,
                         .recv_count = block * n,
                         .param_count = block,
                         .bw_count = block * n,
                         .in_place_send = block * (size_t)rank};
}

void perf_counts_scatter(size_t bytes, size_t type_size, int nranks, int rank, perf_counts_t *out) {
  size_t block = bytes / type_size / (size_t)nranks, n = (size_t)nranks;
  *out = (perf_counts_t){.send_count = block * n,
                         .recv_count = block,
                         .param_count = block,
                         .bw_count = block * n,
                         .in_place_recv = block * (size_t)rank};
}

double perf_bus_one(int nranks) {
  (void)nranks;
  return 1.0;
}

double perf_bus_n_minus_1(int nranks) {
  return (double)(nranks - 1) / nranks;
}

/* ---- errors and the -T watchdog ---- */

static int perf_my_rank = -1;

static void perf_where(char *host, size_t len, char *rank, size_t rlen) {
  snprintf(host, len, "?");
  (void)gethostname(host, len - 1);
  snprintf(rank, rlen, "?");
  if (perf_my_rank >= 0) snprintf(rank, rlen, "%d", perf_my_rank);
}

void perf_fail(ncclComm_t comm, const char *what, ncclResult_t res) {
  char host[64], rank[16];
  perf_where(host, sizeof(host), rank, sizeof(rank));
  const char *last = ncclGetLastError(comm);
  int name_len = (int)strcspn(what, "("); /* "ncclAllReduce(args...)" -> "ncclAllReduce" */
  fprintf(stderr, "%s:%d rank %s: %.*s failed: %s (%s)\n", host, (int)getpid(), rank, name_len,
          what, ncclGetErrorString(res), last && *last ? last : "no further detail");
  fflush(stderr);
  if (comm) (void)ncclCommAbort(comm);
  exit(1);
}

/* Each library call of the harness runs between perf_watch_begin and perf_watch_end, which
 * bump a counter (odd while a call runs: one atomic store each, nothing else on the timed
 * path). With -T s, a thread polls the counter; if it stays at the same odd value for s
 * seconds, the thread prints which call on which rank hung and ends the process. It does not
 * call ncclCommAbort: that would free the communicator under the blocked call. The library
 * unlinks its shared memory at init, so exiting leaves nothing behind, and the peers see this
 * rank die and fail their own calls (the launcher then stops them). */
#define PERF_EXIT_TIMEOUT 124 /* what timeout(1) and tutti-run return on a timeout */

static struct {
  uint64_t seq;              /* odd while a call runs */
  const char *volatile what; /* the running call, for the message */
  int timeout_s;
} perf_watch;

static void perf_watch_begin(const char *what) {
  perf_watch.what = what;
  __atomic_store_n(&perf_watch.seq, perf_watch.seq + 1, __ATOMIC_RELEASE);
}

static void perf_watch_end(void) {
  __atomic_store_n(&perf_watch.seq, perf_watch.seq + 1, __ATOMIC_RELEASE);
}

static void perf_watch_fire(void) {
  char host[64], rank[16];
  perf_where(host, sizeof(host), rank, sizeof(rank));
  fprintf(stderr, "%s:%d rank %s: %s has not returned after %d s (-T %d): aborting the run\n", host,
          (int)getpid(), rank, perf_watch.what ? perf_watch.what : "a call", perf_watch.timeout_s,
          perf_watch.timeout_s);
  fflush(stderr);
  fflush(stdout);
  _exit(PERF_EXIT_TIMEOUT);
}

static void *perf_watchdog(void *arg) {
  (void)arg;
  useconds_t poll_us =
      perf_watch.timeout_s >= 20 ? 1000000 : (useconds_t)perf_watch.timeout_s * 50000;
  uint64_t last = 0;
  double since = bench_now();
  for (;;) {
    usleep(poll_us);
    uint64_t seq = __atomic_load_n(&perf_watch.seq, __ATOMIC_ACQUIRE);
    double now = bench_now();
    if (seq != last || !(seq & 1)) {
      last = seq;
      since = now;
    } else if (now - since >= perf_watch.timeout_s) {
      perf_watch_fire();
    }
  }
  return NULL;
}

static void perf_watch_start(int timeout_s) {
  if (timeout_s <= 0) return;
  perf_watch.timeout_s = timeout_s;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, perf_watchdog, NULL) != 0) {
    fprintf(stderr, "perf: cannot start the -T watchdog thread\n");
    exit(1);
  }
  pthread_attr_destroy(&attr);
}

/* A library call of the harness, watched; exits through perf_fail on an error. */
#define PERF_WATCHED(comm, what, call)                                 \
  do {                                                                 \
    perf_watch_begin(what);                                            \
    ncclResult_t perf_wres_ = (call);                                  \
    perf_watch_end();                                                  \
    if (perf_wres_ != ncclSuccess) perf_fail(comm, #call, perf_wres_); \
  } while (0)

/* ---- the run ---- */

typedef struct perf_op_name {
  const char *name;
  ncclRedOp_t op;
} perf_op_name_t;

/* nccl-tests' names and order for -o all. */
static const perf_op_name_t perf_ops[] = {
    {"sum", ncclSum}, {"prod", ncclProd}, {"max", ncclMax}, {"min", ncclMin}, {"avg", ncclAvg}};
static const perf_op_name_t perf_no_op = {"none", ncclSum};
#define PERF_NUM_OPS ((int)(sizeof(perf_ops) / sizeof(perf_ops[0])))
#define PERF_CHECK_CHUNK ((size_t)1 << 16) /* elements compared per expected() call */
#define PERF_SYNC_DOUBLES 4

typedef struct perf_state {
  const perf_coll_t *coll;
  bench_opts_t opts;
  ncclComm_t comm;
  int rank, nranks;
  void *send, *recv, *scratch;
  size_t send_bytes, recv_bytes;
  void *send_handle, *recv_handle; /* -R 1: ncclCommRegister handles */
  double *sync;                    /* PERF_SYNC_DOUBLES: barrier word and the aggregations */
  char activity[192];              /* the call being timed, for the watchdog's message */
  char **hosts;                    /* per rank, for the JSON */
  bench_json_t *json;              /* rank 0 with -J */
  int results_wrong;
  double busbw_sum;
  int busbw_n;
} perf_state_t;

static const char *const perf_barrier_what = "ncclAllReduce (the harness's barrier)";
static const char *const perf_reduce_what = "ncclAllReduce (the harness's time and #wrong sums)";

static void perf_select(const char *arg, int *first, int *count, int n, const char *(*name_of)(int),
                        const char *what) {
  if (strcmp(arg, "all") == 0) {
    *first = 0;
    *count = n;
    return;
  }
  for (int i = 0; i < n; i++)
    if (strcmp(arg, name_of(i)) == 0) {
      *first = i;
      *count = 1;
      return;
    }
  fprintf(stderr, "perf: unknown %s '%s' (see -h)\n", what, arg);
  exit(2);
}

static const char *perf_type_name(int i) {
  return perf_types[i].name;
}
static const char *perf_op_name(int i) {
  return perf_ops[i].name;
}

static void perf_barrier(perf_state_t *st) {
  PERF_WATCHED(st->comm, perf_barrier_what,
               ncclAllReduce(st->sync, st->sync, 1, ncclFloat64, ncclSum, st->comm, NULL));
}

/* Elements the receive buffer needs for counts k: the output, and in place the input too. */
static size_t perf_recv_elems(const perf_counts_t *k) {
  size_t n = k->recv_count;
  if (k->in_place_send + k->send_count > n) n = k->in_place_send + k->send_count;
  if (k->in_place_recv + k->recv_count > n) n = k->in_place_recv + k->recv_count;
  return n;
}

static void *perf_send_ptr(const perf_state_t *st, const perf_case_t *c) {
  return c->in_place ? (char *)st->recv + c->counts.in_place_send * c->type->size : st->send;
}

static void *perf_recv_ptr(const perf_state_t *st, const perf_case_t *c) {
  return c->in_place ? (char *)st->recv + c->counts.in_place_recv * c->type->size : st->recv;
}

/* Poisons the receive buffer and writes this rank's input where the call reads it. */
static void perf_prepare(perf_state_t *st, const perf_case_t *c) {
  memset(st->recv, PERF_POISON_BYTE, perf_recv_elems(&c->counts) * c->type->size);
  st->coll->fill_input(c, perf_send_ptr(st, c), 0, c->counts.send_count);
}

static double perf_check(perf_state_t *st, const perf_case_t *c) {
  size_t ts = c->type->size, total = c->counts.recv_count;
  const char *out = perf_recv_ptr(st, c);
  double wrong = 0;
  for (size_t first = 0; first < total; first += PERF_CHECK_CHUNK) {
    size_t n = total - first < PERF_CHECK_CHUNK ? total - first : PERF_CHECK_CHUNK;
    st->coll->expected(c, st->scratch, first, n);
    const char *got = out + first * ts;
    if (memcmp(got, st->scratch, n * ts) != 0) wrong += pattern_count_wrong(c, got, st->scratch, n);
  }
  return wrong;
}

static void perf_call(perf_state_t *st, const perf_case_t *c) {
  perf_watch_begin(st->activity);
  ncclResult_t res = st->coll->run(c, perf_send_ptr(st, c), perf_recv_ptr(st, c));
  perf_watch_end();
  if (res != ncclSuccess) perf_fail(st->comm, st->coll->call_name, res);
}

/* iters iterations of -m calls each; the -m calls of an iteration form one group. */
static void perf_run_iters(perf_state_t *st, const perf_case_t *c, int iters) {
  int agg = st->opts.agg_iters;
  for (int i = 0; i < iters; i++) {
    if (agg > 1) PERF_NCCL(st->comm, ncclGroupStart());
    for (int a = 0; a < agg; a++) perf_call(st, c);
    if (agg > 1) PERF_WATCHED(st->comm, st->activity, ncclGroupEnd());
  }
}

/* The -a aggregation of this rank's time across ranks, and #wrong summed (-1: not checked). */
static void perf_aggregate(perf_state_t *st, double *seconds, double *wrong) {
  double *s = st->sync;
  s[0] = *seconds;
  s[1] = *wrong > 0 ? *wrong : 0;
  s[2] = st->rank == 0 ? *seconds : 0;
  PERF_WATCHED(st->comm, perf_reduce_what,
               ncclAllReduce(s, s, 3, ncclFloat64, ncclSum, st->comm, NULL));
  double mean = s[0] / st->nranks, rank0 = s[2];
  if (*wrong >= 0) *wrong = s[1];
  if (st->opts.average == BENCH_AVG_MIN || st->opts.average == BENCH_AVG_MAX) {
    s[3] = *seconds;
    ncclRedOp_t op = st->opts.average == BENCH_AVG_MIN ? ncclMin : ncclMax;
    PERF_WATCHED(st->comm, perf_reduce_what,
                 ncclAllReduce(s + 3, s + 3, 1, ncclFloat64, op, st->comm, NULL));
    *seconds = s[3];
  } else {
    *seconds = st->opts.average == BENCH_AVG_RANK0 ? rank0 : mean;
  }
}

static size_t perf_size_bytes(const perf_case_t *c) {
  size_t n =
      c->counts.send_count > c->counts.recv_count ? c->counts.send_count : c->counts.recv_count;
  return n * c->type->size;
}

static void perf_describe(perf_state_t *st, const perf_case_t *c) {
  snprintf(st->activity, sizeof(st->activity), "%s (%zu B, %s, %s, root %d, %s)",
           st->coll->call_name, perf_size_bytes(c), c->type->name, c->op_name, c->root,
           c->in_place ? "in-place" : "out-of-place");
}

/* Times and checks one size in one placement. */
static bench_result_t perf_measure(perf_state_t *st, perf_case_t *c, int in_place) {
  c->in_place = in_place;
  perf_describe(st, c);
  int iters = bench_iters_for(&st->opts, perf_size_bytes(c));
  if (st->opts.check) perf_prepare(st, c);
  perf_barrier(st);
  double t0 = bench_clock(&st->opts);
  perf_run_iters(st, c, iters);
  double seconds = (bench_clock(&st->opts) - t0) / ((double)iters * st->opts.agg_iters);
  double wrong = -1;
  if (st->opts.check && !(in_place && st->coll->in_place_unchecked)) {
    wrong = 0;
    for (int k = 0; k < st->opts.check && wrong == 0; k++) {
      perf_prepare(st, c);
      perf_call(st, c);
      wrong += perf_check(st, c);
    }
  }
  perf_aggregate(st, &seconds, &wrong);
  bench_result_t r = {.time_us = seconds * 1e6,
                      .wrong = wrong,
                      .window_ms = seconds * 1e3 * iters * st->opts.agg_iters};
  r.algbw = bench_algbw(c->counts.bw_count * c->type->size, seconds);
  r.busbw = r.algbw * st->coll->bus_factor(st->nranks);
  return r;
}

static void perf_set_size(const perf_state_t *st, perf_case_t *c, size_t bytes) {
  st->coll->counts(bytes, c->type->size, st->nranks, st->rank, &c->counts);
}

/* Fills both buffers once (sane values even without -c), then runs -w iterations at the
 * largest size, out of place and in place (which reaches the buffers differently), and at the
 * smallest, so that lazily built resources and first touches of the buffers are not timed. */
static void perf_warmup(perf_state_t *st, perf_case_t *c) {
  c->in_place = 0;
  perf_set_size(st, c, st->opts.max_bytes);
  perf_describe(st, c);
  st->coll->fill_input(c, st->send, 0, c->counts.send_count);
  st->coll->fill_input(c, st->recv, 0, c->counts.send_count);
  perf_run_iters(st, c, st->opts.warmup);
  c->in_place = 1;
  perf_describe(st, c);
  perf_run_iters(st, c, st->opts.warmup);
  c->in_place = 0;
  perf_set_size(st, c, st->opts.min_bytes);
  perf_describe(st, c);
  perf_run_iters(st, c, st->opts.warmup);
}

static void perf_record(perf_state_t *st, const bench_result_t *r) {
  if (r->wrong > 0) st->results_wrong++;
  st->busbw_sum += r->busbw;
  st->busbw_n++;
}

static void perf_sweep(perf_state_t *st, const perf_type_t *type, const perf_op_name_t *op,
                       int root) {
  perf_case_t c = {.coll = st->coll,
                   .type = type,
                   .op = op->op,
                   .op_name = op->name,
                   .rank = st->rank,
                   .nranks = st->nranks,
                   .comm = st->comm,
                   .root = root};
  pattern_init(&c, st->coll->reduces);
  perf_warmup(st, &c);
  for (size_t bytes = st->opts.min_bytes; bytes != BENCH_END;
       bytes = bench_next_size(&st->opts, bytes)) {
    perf_set_size(st, &c, bytes);
    int warm = bench_warmup_iters_for(&st->opts, perf_size_bytes(&c));
    if (warm > 0) {
      c.in_place = 0;
      perf_describe(st, &c);
      perf_run_iters(st, &c, warm);
    }
    bench_result_t out = perf_measure(st, &c, 0);
    bench_result_t in = perf_measure(st, &c, 1);
    perf_record(st, &out);
    perf_record(st, &in);
    if (st->rank != 0) continue;
    bench_print_row(perf_size_bytes(&c), c.counts.param_count, type->name, op->name, c.root, &out,
                    &in);
    bench_json_row(st->json, perf_size_bytes(&c), c.counts.param_count, type->name, op->name,
                   c.root, &out, &in);
  }
  pattern_free(&c);
}

/* Buffers sized for the largest size of any selected type, allocated and touched once. */
static void perf_alloc_buffers(perf_state_t *st, int t0, int nt) {
  for (int t = t0; t < t0 + nt; t++) {
    perf_counts_t k;
    size_t ts = perf_types[t].size;
    st->coll->counts(st->opts.max_bytes, ts, st->nranks, st->rank, &k);
    if (k.send_count * ts > st->send_bytes) st->send_bytes = k.send_count * ts;
    if (perf_recv_elems(&k) * ts > st->recv_bytes) st->recv_bytes = perf_recv_elems(&k) * ts;
  }
  if (st->opts.reg) { /* -R 1: memory the other ranks of the host can read in place */
    PERF_WATCHED(st->comm, "ncclMemAlloc", ncclMemAlloc(&st->send, st->send_bytes));
    PERF_WATCHED(st->comm, "ncclMemAlloc", ncclMemAlloc(&st->recv, st->recv_bytes));
    memset(st->send, 0, st->send_bytes);
    memset(st->recv, 0, st->recv_bytes);
    PERF_WATCHED(st->comm, "ncclCommRegister",
                 ncclCommRegister(st->comm, st->send, st->send_bytes, &st->send_handle));
    PERF_WATCHED(st->comm, "ncclCommRegister",
                 ncclCommRegister(st->comm, st->recv, st->recv_bytes, &st->recv_handle));
  } else {
    st->send = bench_alloc_at(st->send_bytes, st->opts.buffer_offset, st->opts.alloc_mmap);
    st->recv = bench_alloc_at(st->recv_bytes, st->opts.buffer_offset, st->opts.alloc_mmap);
  }
  st->scratch = bench_alloc(PERF_CHECK_CHUNK * sizeof(double));
  st->sync = bench_alloc(PERF_SYNC_DOUBLES * sizeof(double));
}

static void perf_free_buffers(perf_state_t *st) {
  if (st->opts.reg) {
    PERF_WATCHED(st->comm, "ncclCommDeregister", ncclCommDeregister(st->comm, st->send_handle));
    PERF_WATCHED(st->comm, "ncclCommDeregister", ncclCommDeregister(st->comm, st->recv_handle));
    PERF_WATCHED(st->comm, "ncclMemFree", ncclMemFree(st->send));
    PERF_WATCHED(st->comm, "ncclMemFree", ncclMemFree(st->recv));
  } else {
    bench_free_at(st->send, st->send_bytes, st->opts.buffer_offset, st->opts.alloc_mmap);
    bench_free_at(st->recv, st->recv_bytes, st->opts.buffer_offset, st->opts.alloc_mmap);
  }
  bench_free(st->scratch, PERF_CHECK_CHUNK * sizeof(double));
  bench_free(st->sync, PERF_SYNC_DOUBLES * sizeof(double));
}

/* Every rank's host and pid, gathered through the library; rank 0 prints the header and opens
 * the JSON file. */
static void perf_print_ranks(perf_state_t *st) {
  bench_rank_info_t mine, *all = calloc((size_t)st->nranks, sizeof(*all));
  st->hosts = calloc((size_t)st->nranks, sizeof(*st->hosts));
  if (!all || !st->hosts) {
    fprintf(stderr, "perf: out of memory\n");
    exit(1);
  }
  bench_rank_info(&mine);
  PERF_WATCHED(st->comm, "ncclAllGather (the harness's rank list)",
               ncclAllGather(&mine, all, sizeof(mine), ncclInt8, st->comm, NULL));
  for (int r = 0; r < st->nranks; r++) st->hosts[r] = strdup(all[r].host);
  if (st->rank == 0) {
    char tool[64], library[128];
    snprintf(tool, sizeof(tool), "%s_perf", st->coll->name);
    snprintf(library, sizeof(library), "tutti %s", tuttiVersionString());
    if (st->opts.json_path)
      st->json = bench_json_open(&st->opts, tool, st->coll->name, library, st->nranks,
                                 (const char *const *)st->hosts);
    bench_print_header(&st->opts);
    for (int r = 0; r < st->nranks; r++) bench_print_rank(r, (long)all[r].pid, all[r].host);
    bench_print_table_header();
  }
  free(all);
}

/* Started by hand, without a launcher (as nccl-tests' binaries are): one rank. */
static int perf_under_launcher(void) {
  static const char *const vars[] = {"TUTTI_RANK",   "RANK",      "OMPI_COMM_WORLD_RANK",
                                     "SLURM_PROCID", "PMIX_RANK", "PMI_RANK"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    if (getenv(vars[i]) && *getenv(vars[i])) return 1;
  return 0;
}

static void perf_init_comm(perf_state_t *st) {
  if (perf_under_launcher()) {
    PERF_WATCHED(NULL, "tuttiCommInitFromEnv", tuttiCommInitFromEnv(&st->comm));
  } else {
    PERF_WATCHED(NULL, "ncclCommInitAll (one rank, no launcher)",
                 ncclCommInitAll(&st->comm, 1, NULL));
  }
  PERF_NCCL(st->comm, ncclCommUserRank(st->comm, &st->rank));
  PERF_NCCL(st->comm, ncclCommCount(st->comm, &st->nranks));
  perf_my_rank = st->rank;
  if (st->coll->rooted && st->opts.root >= st->nranks) {
    if (st->rank == 0)
      fprintf(stderr, "%s_perf: root %d out of range for %d ranks\n", st->coll->name, st->opts.root,
              st->nranks);
    (void)ncclCommDestroy(st->comm);
    exit(2);
  }
}

/* Roots of the sweep: -1 without a root, -r, or every rank for -r all. */
static void perf_roots(const perf_state_t *st, int *first, int *last) {
  if (!st->coll->rooted) {
    *first = *last = -1;
  } else if (st->opts.root == BENCH_ROOT_ALL) {
    *first = 0;
    *last = st->nranks - 1;
  } else {
    *first = *last = st->opts.root;
  }
}

static void perf_finish(perf_state_t *st) {
  double avg = st->busbw_n ? st->busbw_sum / st->busbw_n : 0.0;
  if (st->rank == 0) {
    bench_print_footer(st->results_wrong, avg);
    bench_json_close(st->json, st->results_wrong, avg);
  }
  /* No rank exits before rank 0 has printed: a launcher that stops the job when one rank exits
   * non-zero (tutti-run, mpirun after a failed check) would cut the footer off. */
  perf_barrier(st);
  for (int r = 0; r < st->nranks; r++) free(st->hosts[r]);
  free(st->hosts);
  perf_free_buffers(st);
  PERF_WATCHED(st->comm, "ncclCommDestroy", ncclCommDestroy(st->comm));
}

int perf_main(const perf_coll_t *coll, int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* a run stopped by a time limit keeps the sizes it printed */
  perf_state_t st = {.coll = coll};
  char prog[64], why[128] = "";
  snprintf(prog, sizeof(prog), "%s_perf", coll->name);
  bench_parse(argc, argv, prog, &st.opts);
  if (st.opts.coll_arg) {
    fprintf(stderr, "%s: --coll is for the peer programs; this one measures %s\n", prog,
            coll->call_name);
    return 2;
  }
  int t0, nt, o0 = 0, no = 1, r0, r1;
  perf_select(st.opts.type_arg, &t0, &nt, perf_num_types, perf_type_name, "datatype");
  if (coll->reduces) perf_select(st.opts.op_arg, &o0, &no, PERF_NUM_OPS, perf_op_name, "op");

  perf_watch_start(st.opts.timeout_s);
  perf_init_comm(&st);
  perf_alloc_buffers(&st, t0, nt);
  perf_print_ranks(&st);
  perf_roots(&st, &r0, &r1);
  if (coll->supported && !coll->supported(st.nranks, why, sizeof(why))) {
    if (st.rank == 0) printf("# %s, skipping\n", why);
  } else {
    for (int cycle = 0; st.opts.cycles == 0 || cycle < st.opts.cycles; cycle++)
      for (int t = t0; t < t0 + nt; t++)
        for (int o = o0; o < o0 + no; o++)
          for (int root = r0; root <= r1; root++)
            perf_sweep(&st, &perf_types[t], coll->reduces ? &perf_ops[o] : &perf_no_op, root);
  }
  int failed = st.results_wrong > 0;
  perf_finish(&st);
  return failed ? 1 : 0;
}
