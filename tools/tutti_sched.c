/* tutti-sched: prints a collective's schedule for every rank (or one) without running anything.
 *
 *   tutti-sched --coll all_reduce --algo tree --nranks 5 --count 1000 [--rank r] [--hosts 2]
 *               [--root r] [--chunk elements] [--in-place]
 *
 * --algo auto (the default) asks the tuner, with its default model (TUTTI_TUNER_* apply), for
 * 4-byte elements and 128 KiB slots. --hosts h puts the ranks on h hosts in blocks (needed by
 * hier). Each step is printed as in TUTTI_DUMP_SCHEDULE (see src/algos/schedule.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "algos/schedule.h"
#include "algos/tuner.h"
#include "compress/compress.h"

typedef struct opts {
  const char *coll, *algo;
  int nranks, rank, hosts, root, in_place;
  size_t count, chunk;
  int compressed;               /* --compress: the call carries this compressor */
  tuttiCompressorConfig_t ccfg; /* (the compressed entries apply, no exact one) */
  tuner_compress_t view;        /* what the entries see of it (compress_tuner_view) */
} opts_t;

static void usage(const char *why) {
  if (why) fprintf(stderr, "tutti-sched: %s\n", why);
  fprintf(
      stderr,
      "usage: tutti-sched --coll C --nranks N --count K [--algo A|auto] [--rank R] [--hosts H]\n"
      "                   [--root R] [--chunk ELEMS] [--in-place] [--compress SPEC]\n"
      "  --compress SPEC: an all-reduce of --count floats with a compressor (int8, topk:0.01,\n"
      "     powersgd:2, ,hier / ,auto): the compressed entries' wire traffic in fp32 units\n"
      "  C: all_reduce broadcast reduce all_gather reduce_scatter alltoall gather scatter\n"
      "     (nccl-tests' names; allreduce, AllReduce, ncclAllReduce work too)\n"
      "  A: a registered algorithm's name (--list), or auto\n"
      "       tutti-sched --list   (the registered algorithms)\n");
  exit(2);
}

/* --list: the registry, one algorithm per line with the collectives it builds. */
static void list_algos(void) {
  for (int a = 0; a < ALGO_NUM; a++) {
    const algo_desc_t *d = algo_get((algo_t)a);
    printf("%-8s %s\n         collectives:", d->name, d->summary);
    for (int c = 0; c < COLL_NUM; c++)
      if (d->build[c]) printf(" %s", coll_name((coll_t)c));
    printf("%s%s\n", d->needs & ALGO_PEER_STEPS ? " (needs peer memory)" : "",
           d->needs & ALGO_LOSSY ? " (compressed: tuttiAllReduceCompressed only)" : "");
  }
  exit(0);
}

static long num(const char *flag, const char *v) {
  char *end = NULL;
  long x = v ? strtol(v, &end, 10) : -1;
  if (!v || *end || x < 0) {
    fprintf(stderr, "tutti-sched: %s needs a non-negative integer\n", flag);
    exit(2);
  }
  return x;
}

static opts_t parse(int argc, char **argv) {
  enum {
    OPT_COLL = 256,
    OPT_ALGO,
    OPT_NRANKS,
    OPT_RANK,
    OPT_HOSTS,
    OPT_ROOT,
    OPT_COUNT,
    OPT_CHUNK,
    OPT_INPLACE,
    OPT_VERSION,
    OPT_LIST,
    OPT_COMPRESS
  };
  static const struct option lo[] = {{"coll", required_argument, NULL, OPT_COLL},
                                     {"algo", required_argument, NULL, OPT_ALGO},
                                     {"nranks", required_argument, NULL, OPT_NRANKS},
                                     {"rank", required_argument, NULL, OPT_RANK},
                                     {"hosts", required_argument, NULL, OPT_HOSTS},
                                     {"root", required_argument, NULL, OPT_ROOT},
                                     {"count", required_argument, NULL, OPT_COUNT},
                                     {"chunk", required_argument, NULL, OPT_CHUNK},
                                     {"in-place", no_argument, NULL, OPT_INPLACE},
                                     {"help", no_argument, NULL, 'h'},
                                     {"version", no_argument, NULL, OPT_VERSION},
                                     {"list", no_argument, NULL, OPT_LIST},
                                     {"compress", required_argument, NULL, OPT_COMPRESS},
                                     {NULL, 0, NULL, 0}};
  opts_t o = {.coll = NULL, .algo = "auto", .rank = -1, .hosts = 1, .chunk = 32768};
  int c;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    const char *v = optarg;
    switch (c) {
      case OPT_COLL:
        o.coll = v;
        break;
      case OPT_ALGO:
        o.algo = v;
        break;
      case OPT_NRANKS:
        o.nranks = (int)num("--nranks", v);
        break;
      case OPT_RANK:
        o.rank = (int)num("--rank", v);
        break;
      case OPT_HOSTS:
        o.hosts = (int)num("--hosts", v);
        break;
      case OPT_ROOT:
        o.root = (int)num("--root", v);
        break;
      case OPT_COUNT:
        o.count = (size_t)num("--count", v);
        break;
      case OPT_CHUNK:
        o.chunk = (size_t)num("--chunk", v);
        break;
      case OPT_INPLACE:
        o.in_place = 1;
        break;
      case OPT_VERSION:
        printf("tutti-sched (tutti) %s\n", TUTTI_VERSION_STRING);
        exit(0);
      case OPT_LIST:
        list_algos();
        break;
      case OPT_COMPRESS:
        if (tuttiCompressorParse(v, &o.ccfg) != ncclSuccess || o.ccfg.kind == tuttiCompressNone)
          usage("--compress takes bf16, fp16, int8, topk:F or powersgd:R (,hier or ,auto)");
        o.compressed = 1;
        break;
      case 'h':
        usage(NULL);
        break;
      default:
        usage("unknown option or missing value");
    }
  }
  if (optind < argc) usage("unexpected argument");
  if (!o.coll || o.nranks < 1) usage("--coll and --nranks are required");
  if (o.rank >= o.nranks || o.root >= o.nranks) usage("--rank and --root must be < --nranks");
  if (o.hosts < 1 || o.hosts > o.nranks) usage("--hosts must be in [1, nranks]");
  if (o.chunk == 0) usage("--chunk must be >= 1");
  return o;
}

/* The tuner's pick for this call with the default model (4-byte elements, one host per block). */
static algo_t auto_algo(const opts_t *o, coll_t c, const int *host) {
  tuner_model_t m;
  tuner_model_from_env(&m);
  size_t bytes =
      o->count * 4 * (c == COLL_ALLGATHER || c == COLL_REDUCESCATTER ? (size_t)o->nranks : 1);
  int per = 0;
  for (int r = 0; r < o->nranks; r++) per += host[r] == host[0];
  tuner_topo_t t = {.nranks = o->nranks,
                    .nhosts = o->hosts,
                    .local_size = per,
                    .hier_ok = hier_applicable(host, o->nranks),
                    .host_blocks = o->hosts > 1,
                    .slot_bytes = 131072,
                    .chunk_bytes = o->chunk * 4,
                    .scratch_bytes = TUNER_SCRATCH_MAX_BYTES,
                    .oneshot_max_bytes = 16384,
                    .compress = o->compressed ? &o->view : NULL};
  return tuner_choose(&m, &t, c, bytes, TUNER_ALL_ALGOS, 0).algo;
}

static int algo_from(const char *s) {
  algo_t a = algo_by_name(s);
  return a == ALGO_NUM ? -1 : (int)a;
}

/* Builds and prints rank r's schedule; returns 0, or 1 after a message. */
static int print_rank(const opts_t *o, int c, int algo, int r, const int *host, sched_t *col,
                      sched_t *lanes) {
  int n = o->nranks;
  sched_args_t a = {(coll_t)c, r, n, o->root, o->count, o->chunk, o->in_place};
  a.exchange = sched_exchanges((coll_t)c, o->in_place); /* as the planner runs it */
  a.compress = o->compressed ? &o->view : NULL;
  int rc = sched_build((algo_t)algo, &a, host, col, lanes);
  if (rc == -2)
    fprintf(stderr, "tutti-sched: algorithm %s does not implement %s for %d ranks%s\n",
            algo_name((algo_t)algo), coll_name((coll_t)c), n,
            algo_get((algo_t)algo)->needs & ALGO_LOSSY ? " without a --compress of its kind" : "");
  if (rc != 0) return 1;
  char title[128], lane_title[192];
  snprintf(title, sizeof(title), "%s algo %s nranks %d count %zu root %d chunk %zu%s",
           coll_name((coll_t)c), algo_name((algo_t)algo), n, o->count, o->root, o->chunk,
           o->in_place ? " in place" : "");
  if (col->n || algo != ALGO_P2P) sched_dump(col, r, title, stdout);
  for (int p = 0; p < 2 * n; p++) {
    if (!lanes[p].n) continue;
    snprintf(lane_title, sizeof(lane_title), "%s, %s lane %d", title, p < n ? "send" : "recv",
             p % n);
    sched_dump(&lanes[p], r, lane_title, stdout);
  }
  sched_reset(col);
  for (int p = 0; p < 2 * n; p++) sched_reset(&lanes[p]);
  return 0;
}

int main(int argc, char **argv) {
  opts_t o = parse(argc, argv);
  int c = coll_parse(o.coll), n = o.nranks, rc = 0;
  if (c < 0) usage("unknown collective");
  if (o.compressed && c != COLL_ALLREDUCE) usage("--compress takes --coll all_reduce");
  if (o.compressed) compress_tuner_view(&o.ccfg, o.count, n, o.hosts, &o.view);
  int *host = calloc((size_t)n, sizeof(int)), per = (n + o.hosts - 1) / o.hosts;
  sched_t col = {0}, *lanes = calloc(2 * (size_t)n, sizeof(sched_t));
  if (!host || !lanes) return 1;
  for (int r = 0; r < n; r++)
    host[r] = r / per * per; /* blocks of ranks; a host is its first rank */
  int algo = strcasecmp(o.algo, "auto") ? algo_from(o.algo) : (int)auto_algo(&o, (coll_t)c, host);
  if (algo < 0) usage("unknown algorithm");
  for (int r = 0; r < n && rc == 0; r++)
    if (o.rank < 0 || r == o.rank) rc = print_rank(&o, c, algo, r, host, &col, lanes);
  sched_free(&col);
  for (int p = 0; p < 2 * n; p++) sched_free(&lanes[p]);
  free(lanes);
  free(host);
  return rc;
}
