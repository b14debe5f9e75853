/* The tuner: the registry's cost functions (each algorithm's formula is in its file, the shared
 * vocabulary in cost.h), the TUTTI_ALGO / NCCL_ALGO filter, and the choice.
 *
 * Ties go to the earlier registry entry (the ring first). Defaults of the model
 * (docs/adding-an-algorithm.md, "Measurements", says how each was measured): shared memory from the
 * idle 2-rank runs (8-byte one-shot all-reduce 0.6 us; ring busbw about 6 GB/s); network bandwidth
 * from TCP over loopback against shm in the same runs; network latency an estimate; message CPU
 * times from 8-rank exchanges on the 2-CPU namespace test bed (perf/sim_validate.sh); peer memory
 * from 2-rank all-reduces on ncclMemAlloc buffers (direct vs ring, the same run).
 */
#include "algos/tuner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core.h"

/* Defaults (string settings parsed as doubles, read at communicator init). */
#define TUNER_SHM_LAT_US 0.6
#define TUNER_SHM_GBPS 6.0
#define TUNER_NET_LAT_US 20.0
#define TUNER_NET_GBPS 3.0
#define TUNER_MSG_CPU_US 10.0
#define TUNER_SHM_MSG_CPU_US 2.0
#define TUNER_PEER_LAT_US 1.5
#define TUNER_PEER_GBPS 20.0
#define TUNER_PEER_READ_LAT_US 10.0
#define TUNER_PEER_READ_GBPS 14.0
#define TUNER_PEER_PUSH_LAT_US 0.5
#define TUNER_PEER_PUSH_GBPS 20.0
#define TUNER_RDV_LAT_US 1.0
#define TUNER_RDV_GBPS 19.85
#define TUNER_CODEC_NS 1.0 /* an estimate: a few fp32 loads and stores per element and pass */

/* A positive number setting (param.c; a bad one warns and keeps the default). */
static double env_double(const char *name, double dflt) {
  return tutti_setting_double(name, dflt, 1e-9, 1e12);
}

void tuner_model_from_env(tuner_model_t *m) {
  m->shm = (tuner_level_t){env_double("TUNER_SHM_LAT_US", TUNER_SHM_LAT_US),
                           env_double("TUNER_SHM_GBPS", TUNER_SHM_GBPS)};
  m->net = (tuner_level_t){env_double("TUNER_NET_LAT_US", TUNER_NET_LAT_US),
                           env_double("TUNER_NET_GBPS", TUNER_NET_GBPS)};
  m->peer = (tuner_level_t){env_double("TUNER_PEER_LAT_US", TUNER_PEER_LAT_US),
                            env_double("TUNER_PEER_GBPS", TUNER_PEER_GBPS)};
  m->peer_read = (tuner_level_t){env_double("TUNER_PEER_READ_LAT_US", TUNER_PEER_READ_LAT_US),
                                 env_double("TUNER_PEER_READ_GBPS", TUNER_PEER_READ_GBPS)};
  m->peer_push = (tuner_level_t){env_double("TUNER_PEER_PUSH_LAT_US", TUNER_PEER_PUSH_LAT_US),
                                 env_double("TUNER_PEER_PUSH_GBPS", TUNER_PEER_PUSH_GBPS)};
  m->rdv = (tuner_level_t){env_double("TUNER_RDV_LAT_US", TUNER_RDV_LAT_US),
                           env_double("TUNER_RDV_GBPS", TUNER_RDV_GBPS)};
  m->msg_cpu_us = env_double("TUNER_MSG_CPU_US", TUNER_MSG_CPU_US);
  m->shm_msg_cpu_us = env_double("TUNER_SHM_MSG_CPU_US", TUNER_SHM_MSG_CPU_US);
  /* engine time per piece: not charged unless set (the message CPU times stand for it) */
  m->piece_us = tutti_getenv("TUNER_PIECE_US") ? env_double("TUNER_PIECE_US", 1.0) : 0;
  m->codec_ns = env_double("TUNER_CODEC_NS", TUNER_CODEC_NS);
}

/* ---- NCCL_ALGO ---- */

static const char *nccl_only[] = {"collnetdirect", "collnetchain", "collnet",
                                  "nvls",          "nvlstree",     "pat"};
static const char *coll_keys[] = {"allreduce",     "broadcast", "reduce", "allgather",
                                  "reducescatter", "alltoall",  "gather", "scatter"};

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t')) *--e = '\0';
  return s;
}

/* Bits of a comma list of algorithm names; *bad set on an unknown token. */
static uint32_t parse_list(char *list, int *bad) {
  uint32_t bits = 0;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    tok = trim(tok);
    algo_t a = algo_by_name(tok);
    int found = a != ALGO_NUM;
    if (found) bits |= 1u << a;
    for (size_t i = 0; i < sizeof(nccl_only) / sizeof(*nccl_only) && !found; i++)
      if (strcasecmp(tok, nccl_only[i]) == 0) {
        INFO(SUB_TUNING, "ALGO: NCCL's %s has no tutti equivalent; ignored", tok);
        found = 1;
      }
    if (!found && *tok) {
      char valid[160] = "";
      for (int k = 0; k < ALGO_NUM; k++)
        snprintf(valid + strlen(valid), sizeof(valid) - strlen(valid), "%s%s", k ? ", " : "",
                 algo_name((algo_t)k));
      WARN("ALGO: unknown algorithm '%s' (valid: %s; NCCL's Ring and Tree too); ignored", tok,
           valid);
      *bad = 1;
    }
  }
  return bits;
}

static int coll_of(const char *key) {
  for (int c = 0; c < (int)(sizeof(coll_keys) / sizeof(*coll_keys)); c++)
    if (strcasecmp(key, coll_keys[c]) == 0) return c;
  return -1;
}

/* One ';'-separated entry: "[coll:][^]list". */
static void parse_entry(char *e, uint32_t masks[COLL_NUM], int *bad) {
  char *colon = strchr(e, ':');
  int c = -1;
  if (colon) {
    *colon = '\0';
    c = coll_of(trim(e));
    if (c < 0) {
      WARN(
          "ALGO: unknown collective '%s' (valid: allreduce, broadcast, reduce, allgather, "
          "reducescatter, alltoall, gather, scatter); entry ignored",
          trim(e));
      *bad = 1;
      return;
    }
    e = colon + 1;
  }
  e = trim(e);
  int exclude = *e == '^';
  uint32_t bits = parse_list(exclude ? e + 1 : e, bad);
  uint32_t m = exclude ? TUNER_ALL_ALGOS & ~bits : bits;
  for (int k = 0; k < COLL_NUM; k++)
    if (c < 0 || k == c) masks[k] = m;
}

int tuner_parse_algo(const char *spec, uint32_t masks[COLL_NUM]) {
  for (int c = 0; c < COLL_NUM; c++) masks[c] = TUNER_ALL_ALGOS;
  if (!spec || !*spec) return 0;
  char *copy = strdup(spec);
  if (!copy) return -1;
  int bad = 0;
  for (char *save = NULL, *e = strtok_r(copy, ";", &save); e; e = strtok_r(NULL, ";", &save))
    parse_entry(e, masks, &bad);
  free(copy);
  return bad ? -1 : 0;
}

/* ---- the choice ---- */

double tuner_estimate_us(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, algo_t a,
                         size_t bytes) {
  if (!algo_implements(a, c)) return -1;
  return algo_get(a)->cost_us(m, t, c, (double)bytes);
}

/* In place, an all-to-all without peer steps first copies the other ranks' blocks of its input
 * (plan.c), while the peer algorithms exchange blocks in place (direct.c): on 2 ranks 2-9x
 * faster from 64 KiB to 4 MiB. The model cannot charge that copy (every rank must choose alike,
 * whether or not its own call is in place), so between the two kinds it takes the peer algorithm
 * unless it is estimated TUNER_A2A_PEER_MARGIN times as long: out of place (2 ranks) direct and
 * p2p ran alike from 512 KiB calls (0.98-1.06), which the defaults estimate 1.03x and less, and
 * direct 0.81-0.91x at 128-256 KiB, estimated 1.11x and 1.06x. docs/perf-issue20-3.md. */
#define TUNER_A2A_PEER_MARGIN 1.04

static double compared_us(coll_t c, algo_t a, double us) {
  int peer = (algo_get(a)->needs & ALGO_PEER_STEPS) != 0;
  return c == COLL_ALLTOALL && peer ? us / TUNER_A2A_PEER_MARGIN : us;
}

static tuner_choice_t pick(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, size_t bytes,
                           uint32_t mask, int log) {
  tuner_choice_t best = {.algo = ALGO_NUM, .us = -1};
  double best_cmp = -1;
  for (int a = 0; a < ALGO_NUM; a++) {
    if (!(mask & (1u << a))) continue;
    /* a call with a compressor runs a compressed entry; an exact call never does */
    if (((algo_get((algo_t)a)->needs & ALGO_LOSSY) != 0) != (t->compress != NULL)) continue;
    double us = tuner_estimate_us(m, t, c, (algo_t)a, bytes);
    if (us < 0) continue;
    if (log)
      INFO(SUB_TUNING, "tuner: %s %zu bytes nranks %d hosts %d: %s %.2f us", coll_name(c), bytes,
           t->nranks, t->nhosts, algo_name((algo_t)a), us);
    double cmp = compared_us(c, (algo_t)a, us);
    if (best.us < 0 || cmp < best_cmp) best = (tuner_choice_t){(algo_t)a, 0, us}, best_cmp = cmp;
  }
  return best;
}

tuner_choice_t tuner_choose(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, size_t bytes,
                            uint32_t mask, int log) {
  tuner_topo_t forced = *t;
  forced.may_alloc |= mask != TUNER_ALL_ALGOS;
  tuner_choice_t best = pick(m, &forced, c, bytes, mask, log);
  if (best.algo == ALGO_NUM) return best;
  const algo_desc_t *d = algo_get(best.algo);
  best.chunk_bytes = d->chunk_bytes ? d->chunk_bytes(t, c, bytes) : t->chunk_bytes;
  if (log)
    INFO(SUB_TUNING, "tuner: %s %zu bytes nranks %d: chose %s (%.2f us, chunk %zu bytes)",
         coll_name(c), bytes, t->nranks, algo_name(best.algo), best.us, best.chunk_bytes);
  return best;
}
