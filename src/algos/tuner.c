/* The tuner: a cost model per algorithm, and the TUTTI_ALGO / NCCL_ALGO filter.
 *
 * Each algorithm's time is   hops x latency + bytes on the busiest link / bandwidth   at the
 * transport level it runs on (shared memory inside a host; the network as soon as a flat
 * algorithm spans hosts, because its slowest hop then crosses one), or, when the machine's
 * CPUs are the bottleneck, the CPU time of the messages its ranks send: hops x q x R x c / C
 * if that is longer, with R ranks on the machine (all its hosts: containers and network
 * namespaces share the kernel's C CPUs), q the messages per rank and hop below (1 unless said)
 * and c the CPU time of one message: c_net (TUTTI_TUNER_MSG_CPU_US) for one that crosses the
 * network, c_shm (TUTTI_TUNER_SHM_MSG_CPU_US) for one through shared memory, mixed by the share
 * g of a flat algorithm's messages that leave the host (ring, chain with hosts in blocks: H/n
 * of its links; oneshot, p2p: (n-m)/(n-1) of its peers; tree, rhd, rd: 1). With R <= C the
 * latency term wins (c < a). With n ranks, S bytes, D = k = floor(log2 n), p2 = 2^k,
 * f = 1 when n is not a power of two:
 *
 *   all-reduce  ring     2(n-1) a + 2(n-1)/n S/b
 *               oneshot  a + (n-1) S/b               (S fits one slot and ONESHOT_MAX_BYTES;
 *                                                    across hosts (n-1) a: one message per peer;
 *                                                    q = n-1 in one hop, 1 per hop across hosts)
 *               tree     2(D+1) a + 2 S/b            (interior rank: half up, two halves down;
 *                                                    q = 1: the leaves' hop sends from every
 *                                                    rank, and a rank's waits on the two trees
 *                                                    follow one another: measured 25-36 us per
 *                                                    hop where rd's steps took 36-42)
 *               rhd      (2k+2f) a + x (2(p2-1)/p2 + 2f) S/b      x = 1.5 (XCHG below)
 *               rd       (k+2f) a + x (k+2f) S/b
 *               (tree, rhd and rd across hosts with m ranks each: S/b times m, the NIC is shared;
 *               rd across H hosts folds each host into one rank (rhd.c):
 *               rd   2 a_shm + x 2(m-1) S/b_shm + (kH+2fH) a + (kH+2fH) S/b
 *               (kH = floor(log2 H)); rhd when host h holds ranks hm..hm+m-1, m = 2^km and
 *               n = p2: the km steps with partners inside the host go over shm (the last ones
 *               of its halving: 2(m-1)/p2 S), the other k-km over the network, without x there:
 *               rhd  2 km a_shm + 2(k-km) a + x 2(m-1)/p2 S/b_shm + m 2(1 - m/p2) S/b)
 *               hier     2(m-1) a_shm + 2(m-1)/m S/b_shm + 2(H-1) a_net + 2(H-1)/H (S/m)/b_net
 *   broadcast / reduce   chain (n-1) a + S/b (q = 1/R: one message in flight);
 *                        tree (D+1) a + 2 S/b (q = (n-1)/(n(D+1)))
 *   all-gather / reduce-scatter (S = all n blocks)   ring (n-1) a + (n-1)/n S/b;
 *               rhd k a + (n-1)/n S/b (x that)   (n a power of two; reduce-scatter only while
 *                                                 its n/2 partial blocks fit the comm scratch,
 *                                                 unless TUTTI_ALGO asks for it)
 *   all-to-all, gather, scatter: p2p (q = n-1)
 *
 * Ties go to the lower algo_t (the ring first). Defaults (docs/adding-an-algorithm.md,
 * "Measurements"): shm from the idle 2-rank runs of docs/perf.md (8-byte one-shot all-reduce
 * 0.6 us; ring busbw about 6 GB/s); net bandwidth from TCP over loopback against shm in the
 * same loaded runs (0.45x-0.69x), net latency an estimate (not measurable under that load);
 * message CPU times from 8-rank exchanges on the 2-CPU namespace test bed (perf/sim_validate.sh:
 * every rank sends one message to the next, 4 hosts x 2; 40 us with the ranks placed round
 * robin, all 8 messages across hosts: c_net = 40 x 2 / 8 = 10 us; 24 us with hosts in blocks,
 * 4 of them across: c_shm = (24 x 2 - 4 x 10) / 4 = 2 us).
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

/* A positive number setting (param.c; a bad one warns and keeps the default). */
static double env_double(const char *name, double dflt) {
  return tutti_setting_double(name, dflt, 1e-9, 1e12);
}

void tuner_model_from_env(tuner_model_t *m) {
  m->shm = (tuner_level_t){env_double("TUNER_SHM_LAT_US", TUNER_SHM_LAT_US),
                           env_double("TUNER_SHM_GBPS", TUNER_SHM_GBPS)};
  m->net = (tuner_level_t){env_double("TUNER_NET_LAT_US", TUNER_NET_LAT_US),
                           env_double("TUNER_NET_GBPS", TUNER_NET_GBPS)};
  m->msg_cpu_us = env_double("TUNER_MSG_CPU_US", TUNER_MSG_CPU_US);
  m->shm_msg_cpu_us = env_double("TUNER_SHM_MSG_CPU_US", TUNER_SHM_MSG_CPU_US);
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
    int found = 0;
    for (int a = 0; a < ALGO_NUM && !found; a++)
      if (strcasecmp(tok, algo_name((algo_t)a)) == 0) bits |= 1u << a, found = 1;
    for (size_t i = 0; i < sizeof(nccl_only) / sizeof(*nccl_only) && !found; i++)
      if (strcasecmp(tok, nccl_only[i]) == 0) {
        INFO(SUB_TUNING, "ALGO: NCCL's %s has no tutti equivalent; ignored", tok);
        found = 1;
      }
    if (!found && *tok) {
      WARN(
          "ALGO: unknown algorithm '%s' (valid: ring, tree, oneshot, chain, p2p, hier, rhd, rd; "
          "NCCL's Ring and Tree too); ignored",
          tok);
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

/* ---- cost model ---- */

/* Reducing exchanges (rhd, rd) copy what they send into the FIFO in one step and reduce what
 * they receive in another, where a ring step reduces straight into the outgoing slot: 1.5x the
 * memory traffic per byte. Measured: 16 MiB all-reduce on 4 ranks, rhd / ring time = 1.38
 * (medians of 3 interleaved runs, load 8-10; docs/adding-an-algorithm.md). */
#define XCHG 1.5

static int is_pow2(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}

/* time = hops * latency + bytes / bandwidth at level l (GB/s = 1e3 bytes per microsecond), or
 * the CPU time of the q messages per rank that every rank of the machine sends per hop, when
 * that is longer (the header's R x q x c / C per hop: the CPUs work while bytes travel); a share
 * g of those messages crosses the network (0 at the shm level). */
static double cost_q(const tuner_model_t *m, const tuner_topo_t *t, const tuner_level_t *l,
                     double hops, double q, double g, double bytes) {
  double us = hops * l->lat_us + bytes / (l->gbps * 1e3);
  if (t->machine_ranks > 0 && t->ncpu > 0) {
    double c = l == &m->shm ? m->shm_msg_cpu_us : g * m->msg_cpu_us + (1 - g) * m->shm_msg_cpu_us;
    double cpu = hops * q * t->machine_ranks * c / t->ncpu;
    if (cpu > us) us = cpu;
  }
  return us;
}

/* One message per rank and hop, all of them at level l's CPU cost. */
static double cost(const tuner_model_t *m, const tuner_topo_t *t, const tuner_level_t *l,
                   double hops, double bytes) {
  return cost_q(m, t, l, hops, 1, 1, bytes);
}

/* The share of a flat algorithm's messages that leave the host: ring-like (each rank sends to
 * its neighbour: H of the n links cross hosts when hosts hold blocks of ranks) or to every peer
 * ((n-m)/(n-1) of them); 1 when the placement is unknown. */
static double ring_net_share(const tuner_topo_t *t) {
  if (t->nhosts < 2) return 0;
  return t->host_blocks ? (double)t->nhosts / t->nranks : 1;
}
static double peers_net_share(const tuner_topo_t *t) {
  if (t->nhosts < 2) return 0;
  return t->nranks > 1 ? (double)(t->nranks - t->local_size) / (t->nranks - 1) : 0;
}

/* Ranks of one host whose exchange steps cross the network at the same time share its NIC
 * (tutti-sim finds rhd 1.7-7x slower than ring or hier from 64 ranks on without this). */
static double nic_share(const tuner_topo_t *t) {
  return t->nhosts > 1 && t->local_size > 1 ? (double)t->local_size : 1.0;
}

/* rd across hosts (several ranks on some): each host folds into its leader over shm (m-1
 * messages in, m-1 out, q = (m-1)/m per rank), the H leaders run rd over the network (one
 * message per host and step, q = 1/m; kH = floor(log2 H), plus 2 steps when H is not a power of
 * two), and the NIC carries one rank's bytes. rhd with hosts of 2^km ranks in blocks: its last
 * km halving steps (first km doubling steps) stay inside the host. -1: the flat formula applies. */
static double rd_hosts_us(const tuner_model_t *m, const tuner_topo_t *t, double S) {
  int H = t->nhosts, ls = t->local_size, kH = rhd_log2(H), fH = !is_pow2(H);
  if (H < 2 || ls < 2) return -1;
  return cost_q(m, t, &m->shm, 2, (ls - 1.0) / ls, 0, XCHG * 2 * (ls - 1) * S) +
         cost_q(m, t, &m->net, kH + 2.0 * fH, 1.0 / ls, 1, (kH + 2.0 * fH) * S);
}

static double rhd_hosts_us(const tuner_model_t *m, const tuner_topo_t *t, double S) {
  int n = t->nranks, k = rhd_log2(n), ls = t->local_size, km = rhd_log2(ls);
  if (t->nhosts < 2 || !t->host_blocks || !is_pow2(n) || !is_pow2(ls) || ls < 2) return -1;
  double share = nic_share(t), p2 = n;
  return cost(m, t, &m->shm, 2.0 * km, XCHG * 2 * (ls - 1) / p2 * S) +
         cost(m, t, &m->net, 2.0 * (k - km), share * 2 * (1 - ls / p2) * S);
}

static double allreduce_us(const tuner_model_t *m, const tuner_topo_t *t, algo_t a, double S,
                           const tuner_level_t *l) {
  int n = t->nranks, k = rhd_log2(n), p2 = 1 << k, f = p2 != n, D = tree_depth(n);
  switch (a) {
    case ALGO_RING:
      return cost_q(m, t, l, 2.0 * (n - 1), 1, ring_net_share(t), 2.0 * (n - 1) / n * S);
    case ALGO_ONESHOT: /* across hosts its n-1 messages leave one after the other */
      if (n < 2 || S > (double)t->slot_bytes || S > (double)t->oneshot_max_bytes) return -1;
      if (t->nhosts > 1) return cost_q(m, t, l, n - 1, 1, peers_net_share(t), (n - 1) * S);
      return cost_q(m, t, l, 1, n - 1, 0, (n - 1) * S);
    case ALGO_TREE: /* a node's ranks sit all over the heap: their edges leave the node */
      return cost(m, t, l, 2.0 * (D + 1), nic_share(t) * 2 * S);
    case ALGO_RHD: /* its long-distance steps send from every rank of a host through one NIC */
      if (rhd_hosts_us(m, t, S) >= 0) return rhd_hosts_us(m, t, S);
      return cost(m, t, l, 2.0 * k + 2 * f,
                  nic_share(t) * XCHG * (2.0 * (p2 - 1) / p2 + 2 * f) * S);
    case ALGO_RD:
      if (rd_hosts_us(m, t, S) >= 0) return rd_hosts_us(m, t, S);
      return cost(m, t, l, (double)k + 2 * f, nic_share(t) * XCHG * ((double)k + 2 * f) * S);
    case ALGO_HIER: {
      if (!t->hier_ok || t->nhosts < 2) return -1;
      int mm = t->local_size, H = t->nhosts;
      return cost(m, t, &m->shm, 2.0 * (mm - 1), 2.0 * (mm - 1) / mm * S) +
             cost(m, t, &m->net, 2.0 * (H - 1), 2.0 * (H - 1) / H * S / mm);
    }
    default:
      return -1;
  }
}

double tuner_estimate_us(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, algo_t a,
                         size_t bytes) {
  int n = t->nranks, D = tree_depth(n);
  double S = (double)bytes;
  const tuner_level_t *l = t->nhosts > 1 ? &m->net : &m->shm;
  switch (c) {
    case COLL_ALLREDUCE:
      return allreduce_us(m, t, a, S, l);
    case COLL_BROADCAST:
    case COLL_REDUCE:
      if (a == ALGO_CHAIN)
        return cost_q(m, t, l, n - 1, t->machine_ranks > 0 ? 1.0 / t->machine_ranks : 0,
                      ring_net_share(t), S);
      return a == ALGO_TREE ? cost_q(m, t, l, D + 1, (n - 1.0) / ((double)n * (D + 1)), 1, 2 * S)
                            : -1;
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
      if (a == ALGO_RING)
        return cost_q(m, t, l, n - 1, 1, ring_net_share(t), (double)(n - 1) / n * S);
      if (a != ALGO_RHD || !is_pow2(n)) return -1;
      if (c == COLL_REDUCESCATTER && !t->may_alloc && S / 2 > (double)t->scratch_bytes) return -1;
      return cost(m, t, l, rhd_log2(n),
                  (c == COLL_REDUCESCATTER ? XCHG : 1) * (double)(n - 1) / n * S);
    case COLL_ALLTOALL:
    case COLL_GATHER:
    case COLL_SCATTER:
      return a == ALGO_P2P ? cost_q(m, t, l, 1, n - 1, peers_net_share(t), S) : -1;
    default:
      return -1;
  }
}

/* Chunk: the communicator's (FIFO) chunk; trees use smaller ones so that a call has at least
 * 2(D+1) rounds to overlap levels and the two phases, but never below one slot. */
static size_t choose_chunk(const tuner_topo_t *t, coll_t c, algo_t a, size_t bytes) {
  size_t chunk = t->chunk_bytes;
  if (a == ALGO_TREE && t->slot_bytes) {
    size_t per_tree = c == COLL_ALLREDUCE ? bytes / 2 : bytes;
    size_t want = per_tree / (2 * (size_t)(tree_depth(t->nranks) + 1));
    want -= want % t->slot_bytes;
    if (want < t->slot_bytes) want = t->slot_bytes;
    if (want < chunk) chunk = want;
  }
  return chunk;
}

static tuner_choice_t pick(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, size_t bytes,
                           uint32_t mask, int log) {
  tuner_choice_t best = {.algo = ALGO_NUM, .us = -1};
  for (int a = 0; a < ALGO_NUM; a++) {
    if (!(mask & (1u << a))) continue;
    double us = tuner_estimate_us(m, t, c, (algo_t)a, bytes);
    if (us < 0) continue;
    if (log)
      INFO(SUB_TUNING, "tuner: %s %zu bytes nranks %d hosts %d: %s %.2f us", coll_name(c), bytes,
           t->nranks, t->nhosts, algo_name((algo_t)a), us);
    if (best.us < 0 || us < best.us) best = (tuner_choice_t){(algo_t)a, 0, us};
  }
  return best;
}

tuner_choice_t tuner_choose(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, size_t bytes,
                            uint32_t mask, int log) {
  tuner_topo_t forced = *t;
  forced.may_alloc |= mask != TUNER_ALL_ALGOS;
  tuner_choice_t best = pick(m, &forced, c, bytes, mask, log);
  if (best.algo == ALGO_NUM) {
    if (log && mask != TUNER_ALL_ALGOS)
      INFO(SUB_TUNING,
           "tuner: no algorithm allowed by TUTTI_ALGO implements %s here; choosing "
           "among all",
           coll_name(c));
    best = pick(m, t, c, bytes, TUNER_ALL_ALGOS, log && mask != TUNER_ALL_ALGOS);
  }
  if (best.algo == ALGO_NUM) best.algo = ALGO_P2P; /* send/recv: no collective algorithm */
  best.chunk_bytes = choose_chunk(t, c, best.algo, bytes);
  if (log)
    INFO(SUB_TUNING, "tuner: %s %zu bytes nranks %d: chose %s (%.2f us, chunk %zu bytes)",
         coll_name(c), bytes, t->nranks, algo_name(best.algo), best.us, best.chunk_bytes);
  return best;
}
