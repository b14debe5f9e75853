/* Compressed all-reduces (tuttiAllReduceCompressed, src/compress/) as registry entries: the
 * tuner chooses among them for a call that carries a compressor, tutti-sched lists them and
 * tutti-sim simulates their wire traffic. For R ranks and a compressor whose messages take
 * S, M, P, Q bytes (tuner_compress_t, filled by src/compress from the compressor):
 *
 *   cblock  bf16, fp16, int8: all-to-all of the encoded blocks (block b to rank b), every rank
 *           reduces its block, then a ring all-gather of the re-encoded reduced blocks; S = one
 *           block's message over all pieces: 2 (R - 1) S bytes and messages out of each rank;
 *           across hosts the all-to-all's share that leaves a host goes through its NICs
 *           from all of its ranks at once
 *   ctopk   topk: ring all-gather of every rank's (index, value) pairs, M bytes:
 *           (R - 1) M out of each rank, R - 1 hops
 *   cpsgd   PowerSGD: ring all-reduces of P (with the exact tensors), then of Q, fp32:
 *           2 (R - 1) (P + Q) / R bytes, 4 (R - 1) hops
 *   chier   any kind, hierarchical: each host's ranks send their buffers (fp32, exact) to the
 *           host's lowest rank, those leaders run the kind's exchange above among themselves
 *           (H ranks, sizes for H), and send the result back: 2 (L - 1) buffers through each
 *           leader's shared memory, the kind's bytes for H ranks across hosts; on one host the
 *           leader's exchange is empty and the call is exact
 *
 *     rank:      0        1        2        3          (2 hosts: {0, 1}, {2, 3})
 *     chier:     0 <----- 1        2 <----- 3          host reduce (fp32)
 *                0 <=cblock/ctopk/cpsgd=> 2            leaders, compressed
 *                0 -----> 1        2 -----> 3          host broadcast
 *
 * A schedule here is the traffic in fp32 units (4 bytes; a message's bytes rounded up), cut in
 * rounds of at most `chunk` units per message and at most one message per FIFO per round, so
 * the bounded FIFOs never close a cycle. The engine never runs these schedules (ALGO_LOSSY):
 * src/compress moves the bytes through the library's collectives (ncclAlltoAll,
 * ncclAllGather, ncclAllReduce, ncclReduce, ncclBroadcast), each planned on its own; the
 * host phases are drawn here as a star (what a chain does with one hop).
 *
 * Cost: cost.h's formula for those hops and bytes (flat: the level the ranks span; chier: shared
 * memory inside hosts, the network between leaders), plus the CPU work of the codec, passes x
 * count x codec_ns (TUTTI_TUNER_CODEC_NS). An entry applies only to a call with a compressor of
 * its kind (tuner_topo_t.compress), flat ones unless the compressor asks for the hierarchical
 * path, chier unless it asks for the flat one: never to an exact call.
 */
#include <stdlib.h>

#include "algos/registry.h"

static size_t units(size_t bytes) {
  return (bytes + 3) / 4;
}

static int is_block(int kind) {
  return kind == tuttiCompressBf16 || kind == tuttiCompressFp16 || kind == tuttiCompressInt8;
}

/* 1 when the compressor's kind is the one an entry handles (want: -1 any, 0 a block kind). */
static int kind_matches(const tuner_compress_t *cc, int want) {
  if (!cc || cc->kind <= tuttiCompressNone || cc->kind >= tuttiCompressNumKinds) return 0;
  return want < 0 || (want == 0 ? is_block(cc->kind) : cc->kind == want);
}

/* ---- schedules: participants parts[0..np), this rank at index me ---- */

/* Every participant sends u units to every other one (all-to-all), in rounds. */
static int wire_alltoall(const sched_args_t *a, sched_t *s, const int *parts, int np, int me,
                         size_t u) {
  for (size_t off = 0; off < u; off += a->chunk) {
    size_t len = u - off < a->chunk ? u - off : a->chunk;
    for (int d = 1; d < np; d++) {
      SCHED_PUSH(.recv_peer = -1, .send_peer = parts[(me + d) % np], .src_buf = BUF_SEND,
                 .dst_buf = BUF_NONE, .src_off = off, .count = len);
      SCHED_PUSH(.recv_peer = parts[(me + np - d) % np], .send_peer = -1, .src_buf = BUF_NONE,
                 .dst_buf = BUF_RECV, .dst_off = off, .flags = STEP_STORE, .count = len);
    }
  }
  return 0;
}

/* Ring pass of u units per participant (an all-gather; with STEP_REDUCE a reduce-scatter). */
static int wire_ring(const sched_args_t *a, sched_t *s, const int *parts, int np, int me, size_t u,
                     uint8_t flags) {
  if (np < 2) return 0;
  int next = parts[(me + 1) % np], prev = parts[(me + np - 1) % np];
  for (size_t off = 0; off < u; off += a->chunk) {
    size_t len = u - off < a->chunk ? u - off : a->chunk;
    SCHED_PUSH(.recv_peer = -1, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .src_off = off, .count = len);
    for (int j = 1; j < np - 1; j++)
      SCHED_PUSH(.recv_peer = prev, .send_peer = next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
                 .src_off = off, .flags = flags, .count = len);
    SCHED_PUSH(.recv_peer = prev, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .src_off = off, .dst_off = off, .flags = flags | STEP_STORE, .count = len);
  }
  return 0;
}

/* The kind's exchange among the participants, with message sizes sz (flat or lead). */
static int kind_exchange(const sched_args_t *a, sched_t *s, const int *parts, int np, int me,
                         const size_t sz[2]) {
  int kind = a->compress->kind;
  if (np < 2) return 0;
  if (is_block(kind)) {
    if (wire_alltoall(a, s, parts, np, me, units(sz[0])) != 0) return -1;
    return wire_ring(a, s, parts, np, me, units(sz[0]), 0);
  }
  if (kind == tuttiCompressTopk) return wire_ring(a, s, parts, np, me, units(sz[0]), 0);
  for (int f = 0; f < 2; f++) { /* PowerSGD: ring all-reduces of P, then Q */
    size_t block = (units(sz[f]) + (size_t)np - 1) / (size_t)np;
    if (wire_ring(a, s, parts, np, me, block, STEP_REDUCE) != 0) return -1;
    if (wire_ring(a, s, parts, np, me, block, 0) != 0) return -1;
  }
  return 0;
}

static int flat_build(const sched_args_t *a, sched_t *s, int want) {
  if (!kind_matches(a->compress, want)) return -2;
  int *parts = malloc((size_t)a->nranks * sizeof(int));
  if (!parts) return -1;
  for (int r = 0; r < a->nranks; r++) parts[r] = r;
  int rc = kind_exchange(a, s, parts, a->nranks, a->rank, a->compress->flat);
  free(parts);
  return rc;
}

int cblock_allreduce(const sched_args_t *a, sched_t *s) {
  return flat_build(a, s, 0);
}
int ctopk_allreduce(const sched_args_t *a, sched_t *s) {
  return flat_build(a, s, tuttiCompressTopk);
}
int cpsgd_allreduce(const sched_args_t *a, sched_t *s) {
  return flat_build(a, s, tuttiCompressPowerSgd);
}

/* Rank r's host leader: the lowest rank with r's host label (no labels: r itself). Fills
 * leaders[] (ascending), *nl, and lead_of[r] for every rank; O(n log n). */
static int cmp_pair(const void *x, const void *y) {
  const int *p = x, *q = y;
  return p[0] != q[0] ? (p[0] < q[0] ? -1 : 1) : (p[1] < q[1] ? -1 : p[1] > q[1]);
}
static int cmp_int(const void *x, const void *y) {
  int p = *(const int *)x, q = *(const int *)y;
  return p < q ? -1 : p > q;
}
static int host_leaders(const sched_args_t *a, int *lead_of, int *leaders, int *nl) {
  int n = a->nranks;
  int *pairs = malloc(2 * (size_t)n * sizeof(int));
  if (!pairs) return -1;
  for (int r = 0; r < n; r++) pairs[2 * r] = a->host_of_rank ? a->host_of_rank[r] : r;
  for (int r = 0; r < n; r++) pairs[2 * r + 1] = r;
  qsort(pairs, (size_t)n, 2 * sizeof(int), cmp_pair);
  *nl = 0;
  for (int i = 0, lead = 0; i < n; i++) {
    if (i == 0 || pairs[2 * i] != pairs[2 * i - 2])
      lead = pairs[2 * i + 1], leaders[(*nl)++] = lead;
    lead_of[pairs[2 * i + 1]] = lead;
  }
  free(pairs);
  qsort(leaders, (size_t)*nl, sizeof(int), cmp_int);
  return 0;
}

/* The host phases: non-leaders send their buffer to the leader (down = 0) or receive the result
 * from it (down = 1); the leader receives (reducing) from / sends to each, round by round. */
static int host_phase(const sched_args_t *a, sched_t *s, const int *lead_of, int down) {
  int me = a->rank, lead = lead_of[me];
  for (size_t off = 0; off < a->compress->count; off += a->chunk) {
    size_t len = a->compress->count - off < a->chunk ? a->compress->count - off : a->chunk;
    if (me != lead && !down)
      SCHED_PUSH(.recv_peer = -1, .send_peer = lead, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
                 .src_off = off, .flags = STEP_PRE, .count = len);
    if (me != lead && down)
      SCHED_PUSH(.recv_peer = lead, .send_peer = -1, .src_buf = BUF_NONE, .dst_buf = BUF_RECV,
                 .dst_off = off, .flags = STEP_STORE, .count = len);
    for (int r = 0; me == lead && r < a->nranks; r++) {
      if (r == me || lead_of[r] != me) continue;
      if (down)
        SCHED_PUSH(.recv_peer = -1, .send_peer = r, .src_buf = BUF_RECV, .dst_buf = BUF_NONE,
                   .src_off = off, .count = len);
      else
        SCHED_PUSH(.recv_peer = r, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
                   .src_off = off, .dst_off = off, .flags = STEP_REDUCE | STEP_STORE, .count = len);
    }
  }
  return 0;
}

int chier_allreduce(const sched_args_t *a, sched_t *s) {
  if (!kind_matches(a->compress, -1)) return -2;
  int n = a->nranks, nl = 0, rc = -1;
  int *lead_of = calloc((size_t)n, sizeof(int)), *leaders = calloc((size_t)n, sizeof(int));
  if (!lead_of || !leaders || host_leaders(a, lead_of, leaders, &nl) != 0) goto out;
  if ((rc = host_phase(a, s, lead_of, 0)) != 0) goto out;
  for (int i = 0; i < nl; i++)
    if (leaders[i] == a->rank && (rc = kind_exchange(a, s, leaders, nl, i, a->compress->lead)))
      goto out;
  rc = host_phase(a, s, lead_of, 1);
out:
  free(lead_of), free(leaders);
  return rc;
}

/* ---- costs ---- */

static double codec_us(const tuner_model_t *m, const tuner_compress_t *cc) {
  return cc->passes * (double)cc->count * m->codec_ns / 1e3;
}

/* The kind's exchange among np ranks at level l. Ring phases: a share g of their messages leaves
 * the host, the busiest link carries one rank's bytes. The all-to-all (block kinds): a share ga
 * of every rank's messages leaves the host, and the busiest link (a NIC) carries nic x ga of
 * one rank's bytes (nic: the ranks sharing it; 1 inside a host, where links are per pair). */
static double exchange_us(const tuner_model_t *m, const tuner_topo_t *t, const tuner_level_t *l,
                          int kind, int np, const size_t sz[2], double g, double ga, double nic) {
  double r1 = np - 1;
  if (np < 2) return 0;
  if (is_block(kind))
    return cost_q(m, t, l, r1, 1, ga, r1 * (double)sz[0] * nic) +
           cost_q(m, t, l, r1, 1, g, r1 * (double)sz[0]);
  if (kind == tuttiCompressTopk) return cost_q(m, t, l, r1, 1, g, r1 * (double)sz[0]);
  return cost_q(m, t, l, 4 * r1, 1, g, 2 * r1 * (double)(sz[0] + sz[1]) / np);
}

static double flat_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, int want) {
  const tuner_compress_t *cc = t->compress;
  if (c != COLL_ALLREDUCE || !kind_matches(cc, want) || cc->hier == 1 || t->nranks < 2) return -1;
  double ga = cost_peers_net_share(t), nic = t->nhosts > 1 ? cost_nic_share(t) * ga : 1;
  return exchange_us(m, t, cost_level(m, t), cc->kind, t->nranks, cc->flat, cost_ring_net_share(t),
                     ga, nic) +
         codec_us(m, cc);
}

static double cblock_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  (void)S;
  return flat_cost(m, t, c, 0);
}
static double ctopk_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  (void)S;
  return flat_cost(m, t, c, tuttiCompressTopk);
}
static double cpsgd_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  (void)S;
  return flat_cost(m, t, c, tuttiCompressPowerSgd);
}

/* Host phases through the leader's shared memory (L - 1 buffers each way), the leaders'
 * exchange over the network (none on one host: the call is then exact, no codec work). */
static double chier_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  const tuner_compress_t *cc = t->compress;
  if (c != COLL_ALLREDUCE || !kind_matches(cc, -1) || cc->hier == 0 || t->nranks < 2) return -1;
  double l1 = t->local_size > 1 ? t->local_size - 1 : 0, us = 0;
  if (l1 > 0) us += 2 * cost(m, t, &m->shm, l1, l1 * S);
  if (t->nhosts > 1)
    us += exchange_us(m, t, &m->net, cc->kind, t->nhosts, cc->lead, 1, 1, 1) + codec_us(m, cc);
  return us;
}

ALGO_COL_BUILDER(cblock_build, cblock_allreduce)
ALGO_COL_BUILDER(ctopk_build, ctopk_allreduce)
ALGO_COL_BUILDER(cpsgd_build, cpsgd_allreduce)
ALGO_COL_BUILDER(chier_build, chier_allreduce)

const algo_desc_t algo_cblock = {
    .name = "cblock",
    .summary = "compressed all-reduce, bf16/fp16/int8 blocks: all-to-all + all-gather",
    .build = {[COLL_ALLREDUCE] = cblock_build},
    .cost_us = cblock_cost,
    .needs = ALGO_LOSSY};
const algo_desc_t algo_ctopk = {
    .name = "ctopk",
    .summary = "compressed all-reduce, topk: all-gather of (index, value) pairs",
    .build = {[COLL_ALLREDUCE] = ctopk_build},
    .cost_us = ctopk_cost,
    .needs = ALGO_LOSSY};
const algo_desc_t algo_cpsgd = {
    .name = "cpsgd",
    .summary = "compressed all-reduce, PowerSGD: all-reduces of the factors P and Q",
    .build = {[COLL_ALLREDUCE] = cpsgd_build},
    .cost_us = cpsgd_cost,
    .needs = ALGO_LOSSY};
const algo_desc_t algo_chier = {
    .name = "chier",
    .summary = "compressed all-reduce, hierarchical: exact in hosts, compressed between them",
    .build = {[COLL_ALLREDUCE] = chier_build},
    .cost_us = chier_cost,
    .needs = ALGO_LOSSY};
