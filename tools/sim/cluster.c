/* tutti-sim: the cluster description (command-line keys and --cluster files share the names)
 * and nccl-tests' size conventions. Bandwidths are given in Gbit/s (the unit of tc and of NIC
 * data sheets), latencies in microseconds; the model stores bytes/s and seconds. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

void sim_cluster_defaults(sim_cluster_t *c) {
  *c = (sim_cluster_t){.nodes = 1,
                       .ppn = 2,
                       .intra_bw = 20e9 / 8,
                       .intra_lat = 1e-6,
                       .inter_bw = 10e9 / 8,
                       .inter_lat = 20e-6,
                       .nics = 1,
                       .oversub = 1,
                       .leaf_nodes = 16,
                       .reduce_bw = 0,
                       .overhead = 0,
                       .cpus = 0,
                       .machine_nodes = 1,
                       .msg_cpu = 0,
                       .intra_msg_cpu = -1,
                       .slot_intra = 128 * 1024,
                       .slot_inter = 512 * 1024,
                       .fifo_intra = 8,
                       .fifo_inter = 8,
                       .rdv_intra = 16 * 1024, /* TUTTI_SHM_RDV_MIN */
                       .codec_ns = 1.0};       /* TUTTI_TUNER_CODEC_NS */
}

static int parse_double(const char *s, double lo, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo) return -1; /* nan is not < lo */
  *out = v;
  return 0;
}

static int parse_int(const char *s, int lo, int *out) {
  double v;
  if (parse_double(s, lo, &v) || v != (double)(int)v) return -1;
  *out = (int)v;
  return 0;
}

/* Sizes accept K/M/G suffixes (powers of 1024). */
static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (shift) end++;
  if (*end) return -1;
  *out = (size_t)v << shift;
  return 0;
}

int sim_cluster_set(sim_cluster_t *c, const char *key, const char *v) {
  double d;
  int rc;
  if (!strcmp(key, "nodes")) return parse_int(v, 1, &c->nodes);
  if (!strcmp(key, "ppn")) return parse_int(v, 1, &c->ppn);
  if (!strcmp(key, "nics")) return parse_int(v, 1, &c->nics);
  if (!strcmp(key, "cpus")) return parse_int(v, 0, &c->cpus);
  if (!strcmp(key, "machine-nodes")) return parse_int(v, 1, &c->machine_nodes);
  if (!strcmp(key, "leaf-nodes")) return parse_int(v, 1, &c->leaf_nodes);
  if (!strcmp(key, "fifo-intra")) return parse_int(v, 1, &c->fifo_intra);
  if (!strcmp(key, "fifo-inter")) return parse_int(v, 1, &c->fifo_inter);
  if (!strcmp(key, "slot-intra")) return parse_size(v, &c->slot_intra);
  if (!strcmp(key, "slot-inter")) return parse_size(v, &c->slot_inter);
  if (!strcmp(key, "rdv-intra")) return parse_size(v, &c->rdv_intra);
  if (!strcmp(key, "inter-burst")) return parse_size(v, &c->inter_burst);
  if (!strcmp(key, "oversub")) return parse_double(v, 1, &c->oversub);
  if ((rc = parse_double(v, 0, &d)) != 0) return -1;
  if (!strcmp(key, "intra-gbps") && d > 0) return c->intra_bw = d * 1e9 / 8, 0;
  if (!strcmp(key, "inter-gbps") && d > 0) return c->inter_bw = d * 1e9 / 8, 0;
  if (!strcmp(key, "inter-peak-gbps")) return c->inter_peak_bw = d * 1e9 / 8, 0;
  if (!strcmp(key, "reduce-gbps")) return c->reduce_bw = d * 1e9 / 8, 0;
  if (!strcmp(key, "intra-lat-us")) return c->intra_lat = d * 1e-6, 0;
  if (!strcmp(key, "inter-lat-us")) return c->inter_lat = d * 1e-6, 0;
  if (!strcmp(key, "overhead-us")) return c->overhead = d * 1e-6, 0;
  if (!strcmp(key, "codec-ns")) return c->codec_ns = d, 0;
  if (!strcmp(key, "msg-cpu-us")) return c->msg_cpu = d * 1e-6, 0;
  if (!strcmp(key, "intra-msg-cpu-us")) return c->intra_msg_cpu = d * 1e-6, 0;
  return -1;
}

int sim_cluster_load(sim_cluster_t *c, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) return snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno)), -1;
  char line[512];
  int lineno = 0, rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    for (char *p = line; *p; p++)
      if (*p == '=' || *p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
    char key[64], value[256];
    int got = sscanf(line, " %63s %255s", key, value);
    if (got <= 0) continue;
    const char *k = strncmp(key, "--", 2) ? key : key + 2;
    if (got != 2 || sim_cluster_set(c, k, value) != 0) {
      snprintf(err, errlen, "%s:%d: bad setting '%s'", path, lineno, key);
      rc = -1;
    }
  }
  fclose(f);
  return rc;
}

int sim_cluster_check(const sim_cluster_t *c, char *err, size_t errlen) {
  long long n = (long long)c->nodes * c->ppn;
  if (n > (1 << 24)) return snprintf(err, errlen, "%lld ranks: at most %d", n, 1 << 24), -1;
  if (c->slot_intra < 64 || c->slot_inter < 64)
    return snprintf(err, errlen, "slots must hold at least 64 bytes"), -1;
  if (c->fifo_intra < 2 || c->fifo_inter < 2)
    return snprintf(err, errlen, "FIFOs need at least 2 slots (the engine's minimum)"), -1;
  return 0;
}

void sim_cluster_print(const sim_cluster_t *c, void *file) {
  FILE *f = file ? (FILE *)file : stdout;
  fprintf(f,
          "# cluster: %d nodes x %d ranks = %d ranks; shm %.4g Gbit/s %.3g us; net %.4g Gbit/s "
          "%.3g us x %d NIC(s)/node (burst %zu B at %.4g Gbit/s); oversub %.3g (leaf %d nodes); "
          "reduce %s%.4g Gbit/s; "
          "overhead %.3g us/piece; cpus %d per %d node(s), %.3g us/message (shm %.3g); "
          "slots %zu/%zu B x %d/%d; shm rendezvous from %zu B\n",
          c->nodes, c->ppn, sim_nranks(c), c->intra_bw * 8 / 1e9, c->intra_lat * 1e6,
          c->inter_bw * 8 / 1e9, c->inter_lat * 1e6, c->nics, c->inter_burst,
          c->inter_peak_bw * 8 / 1e9, c->oversub, c->leaf_nodes, c->reduce_bw > 0 ? "" : "free ",
          c->reduce_bw * 8 / 1e9, c->overhead * 1e6, c->cpus, c->machine_nodes, c->msg_cpu * 1e6,
          sim_intra_msg_cpu(c) * 1e6, c->slot_intra, c->slot_inter, c->fifo_intra, c->fifo_inter,
          c->rdv_intra);
}

size_t sim_count_for(coll_t coll, size_t bytes, int esize, int nranks) {
  size_t elems = bytes / (size_t)esize;
  switch (coll) {
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
    case COLL_ALLTOALL:
    case COLL_GATHER:
    case COLL_SCATTER:
      return elems / (size_t)nranks; /* per rank / per peer */
    default:
      return elems;
  }
}

double sim_bus_factor(coll_t coll, int n) {
  switch (coll) {
    case COLL_ALLREDUCE:
      return 2.0 * (n - 1) / n;
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
    case COLL_ALLTOALL:
    case COLL_GATHER:
    case COLL_SCATTER:
      return (double)(n - 1) / n;
    default:
      return 1.0;
  }
}
