/* tutti-sim: predicts collective times on a modelled cluster by running the library's own
 * schedules (sched_build, src/algos/) through a discrete-event simulation (tools/sim/des.c).
 *
 *   tutti-sim --nodes 4 --ppn 2 --intra-gbps 20 --intra-lat-us 1 --inter-gbps 0.1 \
 *             --inter-lat-us 30 --nics 1 -c all_reduce -a all -b 8 -e 64M -f 2
 *   tutti-sim --cluster bed.conf -a ring,hier -b 1M --nodes 1 --scale-to 8192 -J scale.json
 *
 * For each algorithm and size it prints nccl-tests' columns (time, algbw, busbw with
 * nccl-tests' bus factor per collective) and how the time was obtained: "full" (every rank
 * simulated) or "shift/T", "xor/T" (the fast method: one representative per class of a
 * symmetry of the schedule, checked on sampled ranks; symmetry.c). The fast method is exact
 * for the model and is what lets a 65,536-rank ring all-reduce finish in seconds. -J writes the
 * rows in the JSON of the perf programs' -J, with an "algo" per row, for perf/plot.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compress/compress.h"
#include "sim/sim.h"

static const char *HELP =
    "usage: tutti-sim [cluster] [-c COLL] [-a ALGOS] [-b MIN] [-e MAX] [-f F] [options]\n"
    "cluster (also as 'key value' lines in --cluster FILE; later options override):\n"
    "  --nodes N --ppn P         N nodes x P ranks per node (rank r on node r / P)\n"
    "  --intra-gbps G --intra-lat-us L   shared memory, per connection (default 20, 1)\n"
    "  --inter-gbps G --inter-lat-us L   network, per NIC and direction (default 10, 20)\n"
    "  --nics K                  NICs per node, shared by its ranks (default 1)\n"
    "  --inter-burst B --inter-peak-gbps G   each NIC side is a token bucket of B bytes\n"
    "                            sending at G while it has tokens (tc tbf; default 0: none)\n"
    "  --oversub R --leaf-nodes M   fabric: leaf switches of M nodes whose uplinks carry\n"
    "                            M*K*inter/R (default R 1: non-blocking; M 16)\n"
    "  --reduce-gbps G           reduction speed (default 0: free)\n"
    "  --overhead-us O           engine time per piece (default 0)\n"
    "  --cpus C --machine-nodes M --msg-cpu-us U   CPU model: machines of M nodes share C\n"
    "                            CPUs; each piece sent takes U us of one of them (default C 0:\n"
    "                            a core per rank, no CPU model; M 1)\n"
    "  --intra-msg-cpu-us U      the same for a piece through shared memory (default: as\n"
    "                            --msg-cpu-us)\n"
    "  --slot-intra B --slot-inter B --fifo-intra S --fifo-inter S   FIFO geometry\n"
    "                            (default 128K, 512K, 8, 8: TUTTI_SHM_*/TCP_* defaults)\n"
    "  --rdv-intra B             shm: whole steps (p2p blocks) of B bytes or more go by\n"
    "                            rendezvous, one piece each (default 16K: TUTTI_SHM_RDV_MIN;\n"
    "                            0: none)\n"
    "collective and sweep:\n"
    "  -c, --coll NAME           all_reduce (default), all_gather, reduce_scatter, broadcast,\n"
    "                            reduce, alltoall, gather, scatter\n"
    "  -a, --algo LIST|all       registered algorithms (tutti-sched --list), auto (the library's\n"
    "                            tuner, with the cluster's constants as its model); default all\n"
    "  -b, -e, -f                sizes from -b to -e bytes, times -f (K/M/G suffixes)\n"
    "  -d, --datatype T          float (default), double, half, bfloat16, int8, int32, int64\n"
    "  --scale-to NODES          at size -b, double --nodes up to NODES (a ranks sweep)\n"
    "  --method auto|full|fast   (default auto: fast where a symmetry holds)\n"
    "  --max-steps N             limit of steps kept for a full simulation (default 4e7)\n"
    "  --compress SPEC           the all-reduces carry a compressor (tutti-train's --compress\n"
    "                            specs, ,hier / ,auto): the compressed entries cblock, ctopk,\n"
    "                            cpsgd, chier apply and no exact one; float only\n"
    "  --codec-ns N              compression CPU time per element and pass (default 1)\n"
    "  -J FILE                   also write the rows as JSON (perf/plot FILE)\n"
    "model: every rank runs its schedule's steps in order, cut into pieces of one FIFO slot; a\n"
    "piece costs the link's latency + bytes/bandwidth (shm: a copy by the sender; network: a\n"
    "NIC of each node, shared by its ranks), reductions bytes/reduce bandwidth, FIFOs of\n"
    "limited depth give back-pressure (docs/simulator.md). Method: a discrete-event simulation\n"
    "of every rank ('full'), or, when the schedule is symmetric under shifting ranks by T (rings)\n"
    "or xor with multiples of T (butterflies), T = ranks per node, of one rank per class\n"
    "('shift/T', 'xor/T'; exact for the model, checked on sampled ranks).\n";

typedef struct opts {
  sim_cluster_t cl;
  coll_t coll;
  int algos[ALGO_NUM + 1], nalgos, esize, scale_to;
  int compressed; /* --compress: calls carry this compressor (the lossy entries apply) */
  tuttiCompressorConfig_t compress;
  const char *type, *json;
  size_t minb, maxb, factor, max_steps;
  sim_method_t method;
} opts_t;

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "tutti-sim: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (tutti-sim --help)\n");
  exit(2);
}

static size_t parse_bytes(const char *s) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (shift) end++;
  if (end == s || *end) die("bad size '%s'", s);
  return (size_t)v << shift;
}

static coll_t parse_coll(const char *s) {
  int c = coll_parse(s);
  if (c < 0)
    die("unknown collective '%s' (all_reduce, all_gather, reduce_scatter, broadcast, "
        "reduce, alltoall, gather, scatter)",
        s);
  return (coll_t)c;
}

static const char *perf_name(coll_t c) {
  static const char *n[COLL_NUM] = {"all_reduce",     "broadcast", "reduce", "all_gather",
                                    "reduce_scatter", "alltoall",  "gather", "scatter",
                                    "sendrecv",       "sendrecv"};
  return n[c];
}

static void parse_algos(opts_t *o, const char *list) {
  o->nalgos = 0;
  if (!strcmp(list, "all")) {
    for (int a = 0; a <= ALGO_NUM; a++) o->algos[o->nalgos++] = a;
    return;
  }
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int found = !strcmp(tok, "auto") ? SIM_ALGO_AUTO : -1;
    for (int a = 0; a < ALGO_NUM; a++)
      if (!strcmp(tok, algo_name((algo_t)a))) found = a;
    if (found < 0) die("unknown algorithm '%s'", tok);
    if (o->nalgos <= ALGO_NUM) o->algos[o->nalgos++] = found;
  }
}

static int type_size(const char *t) {
  static const struct {
    const char *name;
    int size;
  } m[] = {{"float", 4}, {"double", 8}, {"half", 2},   {"bfloat16", 2}, {"int8", 1},
           {"uint8", 1}, {"int32", 4},  {"uint32", 4}, {"int64", 8},    {"uint64", 8}};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
    if (!strcmp(t, m[i].name)) return m[i].size;
  die("unknown datatype '%s'", t);
  return 4;
}

static const char *CLUSTER_KEYS[] = {"nodes",         "ppn",         "intra-gbps",
                                     "intra-lat-us",  "inter-gbps",  "inter-lat-us",
                                     "nics",          "inter-burst", "inter-peak-gbps",
                                     "oversub",       "leaf-nodes",  "reduce-gbps",
                                     "overhead-us",   "slot-intra",  "slot-inter",
                                     "fifo-intra",    "fifo-inter",  "cpus",
                                     "machine-nodes", "msg-cpu-us",  "intra-msg-cpu-us",
                                     "rdv-intra",     "codec-ns"};
#define NKEYS (int)(sizeof CLUSTER_KEYS / sizeof CLUSTER_KEYS[0])
enum {
  OPT_CLUSTER = 900,
  OPT_METHOD,
  OPT_SCALE,
  OPT_MAXSTEPS,
  OPT_VERSION,
  OPT_COMPRESS,
  OPT_KEY = 1000
};

static void long_options(struct option *lo) {
  static const struct option fixed[] = {{"cluster", 1, 0, OPT_CLUSTER},
                                        {"method", 1, 0, OPT_METHOD},
                                        {"scale-to", 1, 0, OPT_SCALE},
                                        {"max-steps", 1, 0, OPT_MAXSTEPS},
                                        {"coll", 1, 0, 'c'},
                                        {"algo", 1, 0, 'a'},
                                        {"minbytes", 1, 0, 'b'},
                                        {"maxbytes", 1, 0, 'e'},
                                        {"stepfactor", 1, 0, 'f'},
                                        {"datatype", 1, 0, 'd'},
                                        {"help", 0, 0, 'h'},
                                        {"version", 0, 0, OPT_VERSION},
                                        {"compress", 1, 0, OPT_COMPRESS},
                                        {0, 0, 0, 0}};
  for (int i = 0; i < NKEYS; i++) lo[i] = (struct option){CLUSTER_KEYS[i], 1, 0, OPT_KEY + i};
  memcpy(lo + NKEYS, fixed, sizeof fixed);
}

static void apply_option(opts_t *o, int ch, const char *arg) {
  char err[256];
  if (ch >= OPT_KEY) {
    if (sim_cluster_set(&o->cl, CLUSTER_KEYS[ch - OPT_KEY], arg) != 0) die("bad value '%s'", arg);
    return;
  }
  switch (ch) {
    case OPT_CLUSTER:
      if (sim_cluster_load(&o->cl, arg, err, sizeof err) != 0) die("%s", err);
      break;
    case OPT_METHOD:
      o->method = !strcmp(arg, "full")   ? SIM_FULL
                  : !strcmp(arg, "fast") ? SIM_FAST
                  : !strcmp(arg, "auto") ? SIM_AUTO
                                         : (die("bad --method '%s'", arg), 0);
      break;
    case OPT_SCALE:
      o->scale_to = atoi(arg);
      break;
    case OPT_MAXSTEPS:
      o->max_steps = (size_t)strtod(arg, NULL);
      break;
    case OPT_COMPRESS:
      if (tuttiCompressorParse(arg, &o->compress) != ncclSuccess || o->compress.kind == 0)
        die("bad --compress '%s' (bf16, fp16, int8, topk:F, powersgd:R; ,hier or ,auto)", arg);
      o->compressed = 1;
      break;
    case 'c':
      o->coll = parse_coll(arg);
      break;
    case 'a':
      parse_algos(o, arg);
      break;
    case 'b':
      o->minb = parse_bytes(arg);
      break;
    case 'e':
      o->maxb = parse_bytes(arg);
      break;
    case 'f':
      o->factor = parse_bytes(arg);
      break;
    case 'd':
      o->type = arg, o->esize = type_size(arg);
      break;
    case 'J':
      o->json = arg;
      break;
    case 'h':
      fputs(HELP, stdout), exit(0);
    case OPT_VERSION:
      printf("tutti-sim (tutti) %s\n", TUTTI_VERSION_STRING), exit(0);
    default:
      die("%s", "bad option");
  }
}

static void parse_args(int argc, char **argv, opts_t *o) {
  struct option lo[NKEYS + 14];
  long_options(lo);
  int ch;
  char err[256];
  while ((ch = getopt_long(argc, argv, "c:a:b:e:f:d:J:h", lo, NULL)) != -1)
    apply_option(o, ch, optarg);
  if (optind < argc) die("unexpected argument '%s'", argv[optind]);
  if (o->factor < 2) die("%s", "-f must be at least 2");
  if (o->minb < 1) die("%s", "-b must be at least 1 byte");
  if (o->maxb < o->minb) o->maxb = o->minb;
  if (sim_cluster_check(&o->cl, err, sizeof err) != 0) die("%s", err);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* JSON results (-J), in the perf programs' schema plus nranks/algo/chosen/method per row; built
 * with cJSON and written at the end. */
typedef struct out {
  cJSON *doc, *results;
} out_t;

static const char *algo_label(int a) {
  return a == SIM_ALGO_AUTO ? "auto" : algo_name((algo_t)a);
}

static void print_header(const opts_t *o) {
  sim_cluster_print(&o->cl, stdout);
  printf("# collective %s, %s, bus factor as nccl-tests\n#\n", perf_name(o->coll), o->type);
  printf("# %10s  %12s  %8s  %8s  %8s  %9s  %8s  %8s  %-12s  %7s\n", "size", "count", "type",
         "ranks", "algo", "time", "algbw", "busbw", "method", "sim");
  printf("# %10s  %12s  %8s  %8s  %8s  %9s  %8s  %8s  %-12s  %7s\n", "(B)", "(elements)", "", "",
         "", "(us)", "(GB/s)", "(GB/s)", "", "(s)");
}

static cJSON *json_half(const sim_result_t *r, double algbw, double busbw) {
  cJSON *h = cJSON_CreateObject();
  cJSON_AddNumberToObject(h, "time_us", r->time * 1e6);
  cJSON_AddNumberToObject(h, "algbw", algbw);
  cJSON_AddNumberToObject(h, "busbw", busbw);
  cJSON_AddNumberToObject(h, "wrong", 0);
  return h;
}

static void json_row(out_t *out, const opts_t *o, size_t bytes, size_t count, int n, int algo,
                     const sim_result_t *r, double algbw, double busbw) {
  if (!out->doc) return;
  cJSON *row = cJSON_CreateObject();
  cJSON_AddNumberToObject(row, "size", (double)bytes);
  cJSON_AddNumberToObject(row, "count", (double)count);
  cJSON_AddStringToObject(row, "type", o->type);
  cJSON_AddStringToObject(row, "redop", "sum");
  cJSON_AddNumberToObject(row, "root", -1);
  cJSON_AddNumberToObject(row, "nranks", n);
  cJSON_AddStringToObject(row, "algo", algo_label(algo));
  cJSON_AddStringToObject(row, "chosen", algo_name(r->algo));
  cJSON_AddStringToObject(row, "method", r->method);
  cJSON_AddItemToObject(row, "out_of_place", json_half(r, algbw, busbw));
  cJSON_AddItemToObject(row, "in_place", json_half(r, algbw, busbw));
  cJSON_AddItemToArray(out->results, row);
}

static void json_open(out_t *out, const opts_t *o) {
  out->doc = cJSON_CreateObject();
  if (!out->doc) die("%s", "out of memory");
  cJSON_AddStringToObject(out->doc, "tool", "tutti-sim");
  cJSON_AddStringToObject(out->doc, "collective", perf_name(o->coll));
  cJSON_AddStringToObject(out->doc, "library", "tutti-sim");
  cJSON_AddNumberToObject(out->doc, "nranks", sim_nranks(&o->cl));
  cJSON_AddStringToObject(out->doc, "xaxis", o->scale_to ? "nranks" : "size");
  out->results = cJSON_AddArrayToObject(out->doc, "results");
}

static void json_write(out_t *out, const char *path) {
  char *text = cJSON_Print(out->doc);
  FILE *f = text ? fopen(path, "w") : NULL;
  if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF || fclose(f) != 0)
    die("cannot write '%s'", path);
  cJSON_free(text);
  cJSON_Delete(out->doc);
}

/* One size on one cluster: a row per algorithm that implements the collective. */
static int run_size(const opts_t *o, const sim_cluster_t *cl_in, size_t bytes, out_t *out) {
  int n = sim_nranks(cl_in), failed = 0;
  size_t count = sim_count_for(o->coll, bytes, o->esize, n);
  sim_cluster_t with = *cl_in, *cl = &with;
  tuner_compress_t view;
  if (o->compressed) {
    compress_tuner_view(&o->compress, count, n, cl->nodes, &view);
    cl->compress = &view;
  }
  for (int i = 0; i < o->nalgos; i++) {
    sim_result_t r;
    double t0 = now_s();
    int rc =
        sim_run(cl, o->coll, (algo_t)o->algos[i], bytes, o->esize, o->method, o->max_steps, &r);
    double wall = now_s() - t0;
    if (rc == -2) continue; /* not implemented / not applicable: no row */
    if (rc != 0) {
      printf("%12zu  %12zu  %8s  %8d  %8s  %9s  (%s)\n", bytes, count, o->type, n,
             algo_label(o->algos[i]), "-", r.msg);
      failed = 1;
      continue;
    }
    double algbw = r.time > 0 ? (double)bytes / r.time / 1e9 : 0;
    double busbw = algbw * sim_bus_factor(o->coll, n);
    char how[48];
    snprintf(how, sizeof how, "%s%s%s", o->algos[i] == SIM_ALGO_AUTO ? algo_name(r.algo) : "",
             o->algos[i] == SIM_ALGO_AUTO ? " " : "", r.method);
    printf("%12zu  %12zu  %8s  %8d  %8s  %9.2f  %8.3f  %8.3f  %-12s  %7.2f\n", bytes, count,
           o->type, n, algo_label(o->algos[i]), r.time * 1e6, algbw, busbw, how, wall);
    json_row(out, o, bytes, count, n, o->algos[i], &r, algbw, busbw);
  }
  fflush(stdout);
  return failed;
}

int main(int argc, char **argv) {
  opts_t o = {.coll = COLL_ALLREDUCE,
              .esize = 4,
              .type = "float",
              .minb = 8,
              .maxb = 64 << 20,
              .factor = 2,
              .max_steps = 40000000};
  sim_cluster_defaults(&o.cl);
  parse_algos(&o, "all");
  parse_args(argc, argv, &o);
  out_t out = {0};
  if (o.json) json_open(&out, &o);
  print_header(&o);
  int failed = 0, first_nodes = o.cl.nodes;
  if (o.scale_to) {
    sim_cluster_t cl = o.cl;
    for (cl.nodes = first_nodes; cl.nodes <= o.scale_to; cl.nodes *= 2)
      failed |= run_size(&o, &cl, o.minb, &out);
  } else {
    for (size_t b = o.minb; b <= o.maxb; b *= o.factor) failed |= run_size(&o, &o.cl, b, &out);
  }
  if (o.json) json_write(&out, o.json);
  return failed;
}
