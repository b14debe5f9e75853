/* The planning layer (plan.h): choose -> build -> cache, once per call, in one place.
 *
 * Choose: send/recv are the p2p algorithm; a collective asks the tuner for the cheapest
 * registered algorithm that TUTTI_ALGO allows and whose preconditions hold (the tuner sees the
 * same topology on every rank, so every rank chooses alike). When TUTTI_ALGO allows nothing that
 * can run the call, the tuner chooses among all, with an INFO line. An algorithm with peer steps
 * then needs every rank's buffers mapped by every other rank (ALGO_NEEDS_PEER_MEMORY: direct)
 * or at least readable by copy (ALGO_NEEDS_PEER_READ: cma): the engine's handshake
 * (engine_peer_agree) tells every rank the same answer. When the buffers cannot all be mapped
 * but can be read, the call runs the tuner's best algorithm without mapping (cma where it is
 * cheaper than the FIFOs); when they cannot even be read, the best without peer steps. That
 * fallback is decided here and nowhere else, and it holds when ranks' memory differs (heap on
 * one rank, ncclMemAlloc on another): the handshake's answer is collective. For repeated heap
 * calls on one host, the measured choice (adapt.h) may run the FIFOs where the model said cma, or
 * cma where it said the FIFOs, by the times every rank measured (plan_adapt).
 * Build: the registry's builder for the collective, with scratch from the communicator or a
 * temporary. Cache: the last call's steps per communicator (comm->plan), reused by a call with
 * the same key (collective, count, element size, root, in place, PreMulSum), which skips the tuner
 * and the builder on the small-message path; a point-to-point algorithm's call alone caches its
 * lanes (cache_lanes), which run as lanes again. Calls with peer steps are rebuilt every time
 * (their handshake runs every time: the peers' buffers may have moved).
 */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "tls_cache.h"

TUTTI_PARAM(DumpSchedule, "DUMP_SCHEDULE", 0) /* plan.h */
TUTTI_PARAM(Direct, "DIRECT", 1)
TUTTI_PARAM(DirectMinBytes, "DIRECT_MIN_BYTES", 16 * 1024)
TUTTI_PARAM(CmaMinBytes, "CMA_MIN_BYTES", 256 * 1024)
TUTTI_PARAM(CmaCopyMinBytes, "CMA_COPY_MIN_BYTES", 128 * 1024)
TUTTI_PARAM(PushMinBytes, "PUSH_MIN_BYTES", 8 * 1024)
TUTTI_PARAM(PushGatherMinBytes, "PUSH_GATHER_MIN_BYTES", 1024 * 1024)

void plan_free(ncclComm_t comm) {
  adapt_free(comm);
  nt_measure_free(comm);
  plan_lanes_free(&comm->plan.kept);
  comm->plan.valid = 0;
  plan_p2p_free(comm);
}

/* ---- choose ---- */

/* Whether (communicator, collective, size) is new to `seen` (the last 64 remembered): so that a
 * message is printed once per distinct call, not on every call. */
typedef struct seen_calls {
  struct {
    const void *comm;
    size_t bytes;
    int coll;
  } e[64];
  unsigned next;
} seen_calls_t;

static int seen_first(seen_calls_t *seen, ncclComm_t comm, coll_t c, size_t bytes) {
  for (int i = 0; i < 64; i++)
    if (seen->e[i].comm == comm && seen->e[i].bytes == bytes && seen->e[i].coll == (int)c) return 0;
  unsigned i = seen->next++ % 64;
  seen->e[i].comm = comm, seen->e[i].bytes = bytes, seen->e[i].coll = (int)c;
  return 1;
}

/* TUNING lines once per distinct call. */
static int tuning_log_first(ncclComm_t comm, coll_t c, size_t bytes) {
  static TUTTI_TLS seen_calls_t seen;
  return tutti_log_enabled(LOG_INFO, SUB_TUNING) && seen_first(&seen, comm, c, bytes);
}

/* Every rank may read every other's memory by copy, and peer steps are allowed (TUTTI_DIRECT=0:
 * none). */
static int peer_read_allowed(ncclComm_t comm) {
  return comm->peer_mem && comm->peer_read && tutti_param_Direct();
}

/* Peer steps on mapped memory are allowed. */
static int peer_map_allowed(ncclComm_t comm) {
  return comm->peer_mem && tutti_param_Direct();
}

tuner_topo_t plan_topo(ncclComm_t comm) {
  return (tuner_topo_t){
      .nranks = comm->nranks,
      .nhosts = comm->nhosts,
      .local_size = comm->max_local_size,
      .hier_ok = comm->hier_ok,
      .machine_ranks = comm->tuner_machine_ranks,
      .ncpu = comm->tuner_ncpu,
      .host_blocks = comm->host_blocks,
      .ring_grouped = comm->ring_grouped,
      .peer_mem = peer_map_allowed(comm),
      .peer_read = peer_read_allowed(comm),
      .slot_bytes = comm->slot_bytes,
      .chunk_bytes = comm->chunk_bytes,
      .scratch_bytes = comm->scratch_max_bytes,
      .oneshot_max_bytes = TUTTI_MIN(comm->oneshot_max_bytes, comm->scratch_bytes),
      .peer_min_bytes = (size_t)tutti_param_DirectMinBytes(),
      .peer_read_min_bytes = (size_t)tutti_param_CmaMinBytes(),
      .peer_read_copy_min_bytes = (size_t)tutti_param_CmaCopyMinBytes(),
      .push_min_bytes = (size_t)tutti_param_PushMinBytes(),
      .push_gather_min_bytes = (size_t)tutti_param_PushGatherMinBytes(),
      .rdv_min_bytes = comm->rdv_min_bytes};
}

/* TUTTI_ALGO names algorithms that build collective c, but none of them can run this call (its
 * cost refuses: a power of two, a size limit, the topology): a WARN, once per distinct call,
 * naming them and what runs instead. A warning, not NCCL's ncclInvalidUsage: NCCL refuses a
 * forced algorithm that cannot run a function at all, whatever the size; here the reasons depend
 * on the call's size and ranks, and an error would make a program that runs at one size (a
 * trainer's gradient buckets) fail at another. Names that do not build c (a global "tree" for
 * all-gather) fall back with the INFO line only, as before. */
static void warn_forced_fallback(ncclComm_t comm, coll_t c, size_t bytes, uint32_t mask,
                                 algo_t ran) {
  static TUTTI_TLS seen_calls_t seen;
  char names[160] = "";
  for (int a = 0; a < ALGO_NUM; a++)
    if ((mask & (1u << a)) && algo_implements((algo_t)a, c))
      snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", names[0] ? "," : "",
               algo_name((algo_t)a));
  if (!names[0] || !seen_first(&seen, comm, c, bytes)) return;
  WARN(
      "TUTTI_ALGO: %s cannot run this nccl%s (%zu bytes, %d ranks, %d hosts); running %s, the "
      "tuner's choice among all algorithms",
      names, coll_name(c), bytes, comm->nranks, comm->nhosts, algo_name(ran));
}

static tuner_choice_t choose(ncclComm_t comm, const pending_t *p, uint32_t exclude) {
  coll_t c = p->args.coll;
  size_t bytes = p->args.count * p->ctx.esize;
  if (c == COLL_ALLGATHER || c == COLL_REDUCESCATTER) bytes *= (size_t)comm->nranks;
  tuner_topo_t t = plan_topo(comm);
  int log = tuning_log_first(comm, c, bytes);
  uint32_t mask = comm->algo_mask[c] & ~exclude;
  tuner_choice_t ch = tuner_choose(&comm->tuner, &t, c, bytes, mask, log);
  if (ch.algo == ALGO_NUM) {
    if (log)
      INFO(SUB_TUNING,
           "tuner: no algorithm allowed by TUTTI_ALGO can run this %s; choosing among all",
           coll_name(c));
    ch = tuner_choose(&comm->tuner, &t, c, bytes, TUNER_ALL_ALGOS & ~exclude, log);
    if (ch.algo != ALGO_NUM) warn_forced_fallback(comm, c, bytes, mask, ch.algo);
  }
  return ch;
}

static void set_chunk(ncclComm_t comm, pending_t *p, size_t chunk_bytes) {
  size_t es = p->ctx.esize;
  p->args.chunk = chunk_bytes >= es ? chunk_bytes / es : 1;
  if (comm->slot_bytes >= es) p->args.chunk -= p->args.chunk % (comm->slot_bytes / es);
  if (p->args.chunk == 0) p->args.chunk = 1;
}

/* The tuner's choice among the algorithms not in `exclude`: p->ctx.algo and p->args.chunk. */
static ncclResult_t choose_into(ncclComm_t comm, pending_t *p, uint32_t exclude) {
  tuner_choice_t ch = choose(comm, p, exclude);
  if (ch.algo == ALGO_NUM)
    return TUTTI_ERR(ncclInvalidUsage, "nccl%s: no algorithm can run this call%s",
                     coll_name(p->args.coll),
                     exclude & algos_needing(ALGO_PEER_STEPS) ? " without peer memory" : "");
  p->ctx.algo = ch.algo;
  set_chunk(comm, p, ch.chunk_bytes);
  return ncclSuccess;
}

/* The stream path left this call's device buffers in place: from here on it is host memory
 * in pinned staging (the proxy copies), planned as any host call. */
static ncclResult_t plan_stage(pending_t *p, const char *why) {
  INFO(SUB_COLL, "nccl%s (op #%llu): device buffers staged through host memory: %s",
       coll_name(p->args.coll), (unsigned long long)p->ctx.seq, why);
  return p->stage(p);
}

/* A call on device buffers: the algorithms that run on the device (ALGO_RUNS_ON_DEVICE) that
 * TUTTI_ALGO allows, at any size, where every rank's device reaches every other's
 * (comm->dev_peer); else the call is staged. *ok: an algorithm was chosen. */
static ncclResult_t choose_device(ncclComm_t comm, pending_t *p, uint32_t exclude, int *ok) {
  coll_t c = p->args.coll;
  size_t bytes = p->args.count * p->ctx.esize;
  if (c == COLL_ALLGATHER || c == COLL_REDUCESCATTER) bytes *= (size_t)comm->nranks;
  tuner_topo_t t = plan_topo(comm);
  t.peer_mem = comm->dev_peer && comm->peer_mem && tutti_param_Direct();
  t.peer_read = 0, t.peer_min_bytes = 0;
  /* the device algorithms that implement c */
  uint32_t can = algos_building(c) & algos_needing(ALGO_RUNS_ON_DEVICE) & ~exclude;
  uint32_t mask = comm->algo_mask[c] & can;
  tuner_choice_t ch = {.algo = ALGO_NUM};
  if (mask) ch = tuner_choose(&comm->tuner, &t, c, bytes, mask, 0);
  *ok = ch.algo != ALGO_NUM;
  if (!*ok)
    return plan_stage(p, !can          ? "no algorithm runs this collective on device memory"
                         : !t.peer_mem ? "the ranks' devices cannot map each other's memory "
                                         "(cuda_p2p off, or TUTTI_DIRECT=0)"
                                       : "TUTTI_ALGO allows no algorithm that runs on the device");
  p->ctx.algo = ch.algo;
  set_chunk(comm, p, ch.chunk_bytes);
  return ncclSuccess;
}

/* Whether p, leaving out the algorithms `excluded`, has the key of the cached plan. */
static int plan_key_matches(ncclComm_t comm, const pending_t *p, uint32_t excluded) {
  return comm->plan.valid && comm->plan.coll == p->args.coll && comm->plan.count == p->args.count &&
         comm->plan.esize == p->ctx.esize && comm->plan.root == p->args.root &&
         comm->plan.in_place == p->args.in_place && comm->plan.premul == p->args.premul &&
         comm->plan.map_excluded == excluded;
}

static int plan_matches(ncclComm_t comm, const pending_t *p) {
  return plan_key_matches(comm, p, p->map_excluded);
}

/* ---- calls whose handshake showed what the buffers are ---- */

/* A heap all-reduce of 16 KiB would pay the handshake of push (some rank's buffers cannot be
 * mapped, so the call falls back to the FIFOs) on every call: 1.5 us of 4. And a reduce-scatter
 * of 256 KiB on ncclMemAlloc buffers would pay cma's (every buffer can be mapped, so the call
 * goes to the mapping algorithms or, by the model, the FIFOs). So once a key's handshake said
 * so, its next MAP_MISS_SKIP calls leave out the algorithms that did not fit (and the handshake,
 * unless the algorithm chosen without them has one); the call after them tries again, since
 * the program may have moved to other buffers. A key that misses again at that try skips twice
 * as many calls (up to MAP_MISS_SKIP_MAX): buffers that stay unmappable pay one handshake per
 * 1023 calls in the end (at 16 KiB, one per 63 was 5-15 % of a 1 us call); a handshake that
 * fits starts the key over at MAP_MISS_SKIP. Every rank sees the
 * same keys in the same order and the same answers, so every rank skips alike. (Not keyed by in
 * place: ranks may differ there.) */
#define MAP_MISS_SLOTS (sizeof(((struct ncclComm *)0)->map_miss) / sizeof(struct map_miss))
#define MAP_MISS_SKIP 63
#define MAP_MISS_SKIP_MAX 1023

static struct map_miss *map_miss_slot(ncclComm_t comm, const pending_t *p) {
  size_t h = ((size_t)p->args.coll * 0x9e3779b1u + p->args.count) * 31 + p->ctx.esize;
  return &comm->map_miss[h % MAP_MISS_SLOTS];
}

/* Whether slot m holds p's key. */
static int map_miss_is(const struct map_miss *m, const pending_t *p) {
  return m->coll == p->args.coll && m->count == p->args.count && m->esize == p->ctx.esize;
}

/* The slot of p's key while it still has skips for it; NULL: none. */
static struct map_miss *map_miss_live(ncclComm_t comm, const pending_t *p) {
  struct map_miss *m = map_miss_slot(comm, p);
  return m->skip && map_miss_is(m, p) ? m : NULL;
}

/* The algorithms (bits) this call leaves out (asked once per call: it counts the skip). */
static uint32_t map_excluded(ncclComm_t comm, pending_t *p) {
  if (p->map_checked) return p->map_excluded;
  struct map_miss *m = map_miss_live(comm, p);
  p->map_checked = 1;
  p->map_excluded = m ? m->exclude : 0;
  if (m) m->skip--;
  return p->map_excluded;
}

/* A handshake of p's key that let its algorithm run: the next miss skips MAP_MISS_SKIP again. */
static void map_fitted(ncclComm_t comm, const pending_t *p) {
  struct map_miss *m = map_miss_slot(comm, p);
  if (map_miss_is(m, p)) m->span = 0;
}

static void map_missed(ncclComm_t comm, const pending_t *p, uint32_t exclude) {
  struct map_miss *m = map_miss_slot(comm, p);
  int again = map_miss_is(m, p) && m->exclude == exclude && m->span;
  uint32_t span = again ? TUTTI_MIN(2 * m->span + 1, MAP_MISS_SKIP_MAX) : MAP_MISS_SKIP;
  *m = (struct map_miss){.coll = p->args.coll,
                         .count = p->args.count,
                         .esize = p->ctx.esize,
                         .skip = span,
                         .exclude = exclude,
                         .span = span};
}

/* Which pairs of the measured choice (adapt.h) cover p: ADAPT_PAIR_*, 0 none. Small calls, most
 * of them, stop at the size: the one test on their path. */
static inline __attribute__((always_inline)) int adapted(ncclComm_t comm, const pending_t *p) {
  size_t bytes = p->args.count * p->ctx.esize;
  if (p->args.coll != COLL_ALLREDUCE) bytes *= (size_t)comm->nranks;
  if (bytes < comm->adapt_min_bytes) return 0;
  if (!comm->adapt_min_bytes) {
    comm->adapt_min_bytes = adapt_min_bytes();
    if (bytes < comm->adapt_min_bytes) return 0;
  }
  return adapt_qualifies(comm, &p->ctx, &p->args, peer_read_allowed(comm), peer_map_allowed(comm));
}

void plan_timed(const pending_t *p, uint64_t ns) {
  adapt_record(p->ctx.comm, &p->ctx, ns);
  nt_measure_record(p->ctx.comm, &p->ctx, ns);
}

/* A call the measured choice covers (pairs: ADAPT_PAIR_*): the FIFOs' best or cma, direct or
 * push, instead of the model's choice when the measurements say so. */
static ncclResult_t plan_adapt(ncclComm_t comm, pending_t *p, uint32_t exclude, int pairs,
                               int *cached) {
  int model_cma = (algo_get(p->ctx.algo)->needs & ALGO_PEER_STEPS) != 0;
  int run = adapt_plan(comm, &p->ctx, &p->args, pairs, p->ctx.algo);
  if (run == ADAPT_NOMEM)
    return TUTTI_ERR(ncclSystemError, "nccl%s: out of memory for the measured choice's table",
                     coll_name(p->args.coll));
  if (run == ADAPT_FIFO && model_cma) {
    *cached = 0;
    return choose_into(comm, p, exclude | algos_needing(ALGO_PEER_STEPS));
  }
  algo_t to = run == ADAPT_CMA      ? ALGO_CMA
              : run == ADAPT_DIRECT ? ALGO_DIRECT
              : run == ADAPT_PUSH   ? ALGO_PUSH
                                    : p->ctx.algo;
  if (to != p->ctx.algo) {
    *cached = 0;
    p->ctx.algo = to;
    set_chunk(comm, p, comm->chunk_bytes);
  }
  return ncclSuccess;
}

/* Sets p->ctx.algo and p->args.chunk. *cached: the steps of comm->plan apply as they are. */
static ncclResult_t plan_choose(ncclComm_t comm, pending_t *p, int *cached) {
  *cached = 0;
  p->ctx.adapt = -1, p->ctx.adapt_decide = 0;
  p->ctx.exchange = 0, p->args.exchange = 0;
  if (p->args.coll == COLL_SEND || p->args.coll == COLL_RECV) {
    p->ctx.algo = ALGO_P2P;
    set_chunk(comm, p, comm->chunk_bytes);
    return ncclSuccess;
  }
  uint32_t exclude = p->ctx.rop.premul ? algos_needing(ALGO_NEEDS_PLAIN_OP) : 0;
  int on_device = 0;
  if (p->ctx.dev) TUTTI_CHECK(choose_device(comm, p, exclude, &on_device));
  if (on_device) return ncclSuccess; /* not cached: its handshake runs every time */
  if (!p->ctx.dev) exclude |= map_excluded(comm, p);
  if (plan_matches(comm, p)) {
    p->ctx.algo = comm->plan.algo, p->args.chunk = comm->plan.chunk;
    *cached = comm->plan.steps_valid && !comm->plan.kept.nlanes; /* lanes: plan_cached_lanes */
  } else {
    TUTTI_CHECK(choose_into(comm, p, exclude));
    comm->plan = (typeof(comm->plan)){.valid = 1,
                                      .coll = p->args.coll,
                                      .count = p->args.count,
                                      .esize = p->ctx.esize,
                                      .root = p->args.root,
                                      .in_place = p->args.in_place,
                                      .premul = p->args.premul,
                                      .map_excluded = p->map_excluded,
                                      .algo = p->ctx.algo,
                                      .chunk = p->args.chunk,
                                      .kept = comm->plan.kept};
  }
  int pairs = adapted(comm, p);
  if (pairs) TUTTI_CHECK(plan_adapt(comm, p, exclude, pairs, cached));
  return ncclSuccess;
}

static int needs_peer_memory(const pending_t *p) {
  return (algo_get(p->ctx.algo)->needs & ALGO_PEER_STEPS) != 0;
}

/* Whether the handshake's answer (PEER_AGREE_*) lets algorithm a run. */
static int peer_fits(algo_t a, int agreed) {
  unsigned needs = algo_get(a)->needs;
  if (needs & ALGO_NEEDS_PEER_MEMORY) return agreed == PEER_AGREE_MAP;
  return !(needs & ALGO_NEEDS_PEER_READ) || agreed >= PEER_AGREE_READ;
}

/* After the handshake: a call whose ranks could not all map each other's buffers runs the best
 * algorithm that the answer allows (reading by copy, or no peer steps at all). Buffers every
 * rank can map go to the algorithms that map them (direct, or the FIFOs below its size) rather
 * than to reading by copy, unless TUTTI_ALGO allows no mapping algorithm. */
static ncclResult_t peer_outcome(pending_t *p, int agreed, int *cached) {
  ncclComm_t comm = p->ctx.comm;
  adapt_agreed(comm, &p->ctx, &p->args, agreed);
  uint32_t readers = algos_needing(ALGO_NEEDS_PEER_READ);
  unsigned needs = algo_get(p->ctx.algo)->needs;
  int mapper = (needs & ALGO_NEEDS_PEER_MEMORY) != 0, reader = (needs & ALGO_NEEDS_PEER_READ) != 0;
  if (!p->ctx.dev &&
      ((mapper && agreed == PEER_AGREE_MAP) || (reader && agreed == PEER_AGREE_READ)))
    map_fitted(comm, p);
  if (agreed != PEER_AGREE_MAP && !p->ctx.dev && mapper)
    map_missed(comm, p, algos_needing(ALGO_NEEDS_PEER_MEMORY));
  if (p->ctx.dev && agreed != PEER_AGREE_MAP)
    TUTTI_CHECK(plan_stage(p, "some rank's device buffers cannot be mapped by the others"));
  if (agreed == PEER_AGREE_MAP && ((1u << p->ctx.algo) & readers) &&
      (comm->algo_mask[p->args.coll] & algos_needing(ALGO_NEEDS_PEER_MEMORY))) {
    *cached = 0;
    if (!p->ctx.dev) map_missed(comm, p, readers);
    TUTTI_CHECK(choose_into(
        comm, p, readers | (p->ctx.rop.premul ? algos_needing(ALGO_NEEDS_PLAIN_OP) : 0)));
  }
  if (!peer_fits(p->ctx.algo, agreed)) {
    *cached = 0;
    uint32_t exclude = algos_needing(ALGO_NEEDS_PEER_MEMORY) |
                       (agreed < PEER_AGREE_READ ? algos_needing(ALGO_NEEDS_PEER_READ) : 0) |
                       (p->ctx.rop.premul ? algos_needing(ALGO_NEEDS_PLAIN_OP) : 0);
    TUTTI_CHECK(choose_into(comm, p, exclude));
  }
  int peer = needs_peer_memory(p);
  p->ctx.peer_read = peer && (algo_get(p->ctx.algo)->needs & ALGO_NEEDS_PEER_READ) != 0;
  p->args.exchange = peer && p->ctx.exchange;
  INFO(SUB_COLL, "nccl%s (op #%llu): %s%s%s", coll_name(p->args.coll),
       (unsigned long long)p->ctx.seq, peer ? algo_name(p->ctx.algo) : "",
       !peer              ? "some rank's buffers cannot be mapped by the others: another algorithm"
       : p->ctx.peer_read ? ", the peers' buffers read by copy"
       : p->ctx.dev       ? " on device buffers, the peers' mapped (cuda_p2p)"
                          : ", the peers' buffers mapped",
       p->args.exchange ? "; blocks exchanged pairwise (a rank is in place)" : "");
  if (peer) p->ctx.peer_seq = comm->peer_calls++;
  return ncclSuccess;
}

/* The handshakes of all the group's peer-memory calls, run together. */
static ncclResult_t agree_all(pending_t *ops, size_t n, int *cached) {
  static TUTTI_TLS op_ctx_t **ctx;
  static TUTTI_TLS size_t(*bytes)[2];
  static TUTTI_TLS int *ok, *idx;
  static TUTTI_TLS size_t cap;
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    if (plan_self_p2p(&ops[i]) || !needs_peer_memory(&ops[i])) continue;
    if ((size_t)k == cap) {
      size_t c = cap ? 2 * cap : 8;
      void *a = realloc(ctx, c * sizeof(*ctx)), *b = a ? realloc(bytes, c * sizeof(*bytes)) : NULL;
      void *d = b ? realloc(ok, c * sizeof(int)) : NULL,
           *e = d ? realloc(idx, c * sizeof(int)) : NULL;
      if (a) ctx = a;
      if (b) bytes = b;
      if (d) ok = d;
      if (e) idx = e;
      if (!e) return TUTTI_ERR(ncclSystemError, "out of memory planning peer-memory calls");
      cap = c;
      tls_cache_keep(&ctx, &cap), tls_cache_keep(&bytes, &cap);
      tls_cache_keep(&ok, &cap), tls_cache_keep(&idx, &cap);
    }
    int nr = ops[i].args.nranks;
    const char **tables = plan_temp_alloc(2 * (size_t)nr * sizeof(char *));
    peer_handle_t *handles = plan_temp_alloc(2 * (size_t)nr * sizeof(peer_handle_t));
    if (!tables || !handles) return TUTTI_ERR(ncclSystemError, "out of memory for peer tables");
    ops[i].ctx.peer_buf[0] = tables, ops[i].ctx.peer_buf[1] = tables + nr;
    ops[i].ctx.peer_h[0] = handles, ops[i].ctx.peer_h[1] = handles + nr;
    ctx[k] = &ops[i].ctx, idx[k] = (int)i;
    ops[i].ctx.exchange = plan_a2a_needs_copy(&ops[i]);
    /* the extents this rank uses (0: a buffer NCCL ignores here, a non-root's) */
    bytes[k][0] = ops[i].bytes[0], bytes[k][1] = ops[i].bytes[1], k++;
  }
  if (k == 0) return ncclSuccess;
  TUTTI_CHECK(engine_peer_agree(ctx, (const size_t(*)[2])bytes, ok, k));
  for (int j = 0; j < k; j++) TUTTI_CHECK(peer_outcome(&ops[idx[j]], ok[j], &cached[idx[j]]));
  return ncclSuccess;
}

/* ---- build ---- */

/* The communicator's scratch grown to at least `need` bytes (doubling, up to scratch_max_bytes).
 * The old block is freed with the group's temporaries, after the engine run: calls of the group
 * planned before this one point to it. */
static ncclResult_t grow_scratch(ncclComm_t comm, size_t need) {
  size_t bytes = TUTTI_MAX(need, TUTTI_MIN(2 * comm->scratch_bytes, comm->scratch_max_bytes));
  void *grown = malloc(bytes);
  if (!grown || plan_temp_keep(comm->scratch) != 0) {
    free(grown);
    return TUTTI_ERR(ncclSystemError, "out of memory growing the scratch to %zu bytes", bytes);
  }
  INFO(SUB_COLL, "scratch grown from %zu to %zu bytes (TUTTI_SCRATCH_MAX_BYTES %zu)",
       comm->scratch_bytes, bytes, comm->scratch_max_bytes);
  comm->scratch = grown, comm->scratch_bytes = bytes;
  return ncclSuccess;
}

/* BUF_SCRATCH for this call: the communicator's (grown where the schedule needs more, up to
 * scratch_max_bytes, the limit the tuner saw), or a temporary beyond that (a forced algorithm).
 * Always the communicator's current block: the pointer the call was enqueued with may be one
 * an earlier group grew away from. */
static ncclResult_t provide_scratch(pending_t *p) {
  ncclComm_t comm = p->ctx.comm;
  size_t need = sched_scratch_elems(p->ctx.algo, &p->args) * p->ctx.esize;
  if (need > comm->scratch_bytes && need <= comm->scratch_max_bytes)
    TUTTI_CHECK(grow_scratch(comm, need));
  p->ctx.buf[BUF_SCRATCH] = comm->scratch;
  if (need <= comm->scratch_bytes) return ncclSuccess;
  void *tmp = plan_temp_alloc(need);
  if (!tmp)
    return TUTTI_ERR(ncclSystemError, "out of memory for %zu bytes of %s scratch", need,
                     algo_name(p->ctx.algo));
  p->ctx.buf[BUF_SCRATCH] = tmp;
  return ncclSuccess;
}

/* TUTTI_DUMP_SCHEDULE: this call's steps, with the algorithm and arguments in the title. */
static void dump_call(const pending_t *p, const sched_t *col, size_t first) {
  char title[160];
  snprintf(title, sizeof(title), "nccl%s algo %s nranks %d count %zu root %d chunk %zu%s",
           coll_name(p->args.coll), algo_name(p->ctx.algo), p->args.nranks, p->args.count,
           p->args.root, p->args.chunk, p->args.in_place ? " in place" : "");
  sched_dump_range(col, first, col->n, p->args.rank, title, NULL);
}

/* TUTTI_DUMP_SCHEDULE: the point-to-point lanes of every communicator of the group, once. */
static void dump_lanes(const pending_t *ops, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ncclComm_t comm = ops[i].ctx.comm;
    int first = 1;
    for (size_t j = 0; j < i && first; j++) first = ops[j].ctx.comm != comm;
    for (int p = 0; first && p < 2 * comm->nranks; p++)
      if (comm->p2p_lanes[p].n)
        sched_dump(&comm->p2p_lanes[p], comm->rank, p < comm->nranks ? "send lane" : "recv lane",
                   NULL);
  }
}

static void tag_steps(sched_t *s, uint16_t op) {
  for (size_t i = s->tagged; i < s->n; i++) s->steps[i].op = op;
  s->tagged = s->n;
}

/* Whether a call of p's kind may run its key's cached steps as they are: not a send or receive
 * (the p2p lanes), not on the device, not an in-place all-to-all unless it swaps its blocks
 * through the FIFOs (else its input is copied first, or its ranks exchange blocks as its
 * handshake says). */
static int runs_cached_steps(const pending_t *p) {
  return p->args.coll != COLL_SEND && p->args.coll != COLL_RECV && !p->ctx.dev &&
         !(p->args.coll == COLL_ALLTOALL && p->args.in_place && !p->args.swap);
}

/* The cached plan's steps are now steps[0, n), as one lane or (nlanes > 0) lanes ending at
 * lane_end: whether the quick way may run them, and the scratch they need. */
static void cache_done(ncclComm_t comm, const pending_t *p) {
  comm->plan.quick =
      comm->plan.steps_valid && !p->ctx.dev && !tutti_param_DumpSchedule() &&
      engine_quick_steps(comm, comm->plan.kept.steps.steps, comm->plan.kept.steps.n, &p->ctx.esize);
  comm->plan.scratch_bytes = sched_scratch_elems(p->ctx.algo, &p->args) * p->ctx.esize;
}

/* A point-to-point algorithm's call, the only one in the communicator's lanes: its lanes become
 * the cached plan (lanes that stay lanes: plan_cached_lanes). */
static void cache_lanes(ncclComm_t comm, const pending_t *p) {
  comm->plan.steps_valid =
      plan_lanes_keep(comm, &comm->plan.kept) == 0 && comm->plan.kept.nlanes > 0;
  cache_done(comm, p);
}

/* Appends the steps: from the cache, or from the builder (and caches them). */
static ncclResult_t build(ncclComm_t comm, pending_t *p, int cached, sched_t *col) {
  size_t first = col->n;
  int lanes_empty = !comm->lanes_used; /* before this call */
  int rc = cached ? sched_append(col, comm->plan.kept.steps.steps, comm->plan.kept.steps.n)
                  : sched_build(p->ctx.algo, &p->args, comm->host_of_rank, col, comm->p2p_lanes);
  if (rc == -2)
    return TUTTI_ERR(ncclInvalidUsage, "nccl%s: algorithm %s does not implement this collective",
                     coll_name(p->args.coll), algo_name(p->ctx.algo));
  if (rc == -3)
    return TUTTI_ERR(ncclInternalError,
                     "nccl%s: algorithm %s built a step that would scale the second operand of "
                     "a PreMulSum (STEP_SWAP with STEP_PRE)",
                     coll_name(p->args.coll), algo_name(p->ctx.algo));
  if (rc != 0) return TUTTI_ERR(ncclSystemError, "out of memory building a schedule");
  unsigned needs = algo_get(p->ctx.algo)->needs;
  if (!cached && !(needs & ALGO_PEER_STEPS) && plan_matches(comm, p) &&
      comm->plan.algo == p->ctx.algo) {
    if (!(needs & ALGO_USES_LANES)) {
      sched_reset(&comm->plan.kept.steps);
      comm->plan.kept.nlanes = 0;
      comm->plan.steps_valid =
          sched_append(&comm->plan.kept.steps, col->steps + first, col->n - first) == 0;
      cache_done(comm, p);
    } else if (lanes_empty && !comm->plan.steps_valid && runs_cached_steps(p)) {
      cache_lanes(comm, p);
    }
  }
  if (tutti_param_DumpSchedule() && col->n > first) dump_call(p, col, first);
  return ncclSuccess;
}

/* After the choice, before the steps: streaming stores, scratch, the log line. Streaming stores
 * pay where the lines written were not just read and will not be read soon from the caches:
 * calls from TUTTI_NT_THRESHOLD whose bytes, over the machine's ranks, do not stay in the
 * last-level cache between calls. Out of place that is the send and the receive buffers, from
 * where they fill the cache (2 ranks, 32 MiB L3: an all-gather of 8 MiB, 24 MiB of buffers, 1.65x
 * faster with plain stores; an all-reduce of 8 MiB, 32 MiB, 1.18-1.25x faster streamed on a Zen 3
 * guest, alike on a Zen 5 one). In place a reduction writes over its own input, just read, and
 * never streams; the others write only what comes from the peers, read from there and written
 * here, and stream where twice those bytes exceed the cache (2 ranks, 32 MiB L3: the all-gather
 * plain 1.2-1.6x faster at 16 MiB, streamed 1.1x at 32 MiB; the broadcast plain 1.2x faster at 8
 * MiB, streamed 1.28x at 16 MiB; gather and scatter plain 1.1x faster at 16 MiB, streamed
 * 1.13-1.41x at 32-64 MiB). docs/perf-issue20.md, docs/perf-issue20-3.md. */
static int stream_rule(const pending_t *p) {
  const ncclComm_t comm = p->ctx.comm;
  coll_t coll = p->args.coll;
  int n = comm->nranks;
  size_t share = comm->cache_bytes / (size_t)TUTTI_MAX(comm->machine_size, 1);
  if (!p->args.in_place) return p->bytes[0] + p->bytes[1] >= share;
  size_t from_peers = coll == COLL_ALLTOALL       ? p->bytes[1] / (size_t)n * (size_t)(n - 1)
                      : p->bytes[1] > p->bytes[0] ? p->bytes[1] - p->bytes[0]
                                                  : 0;
  return from_peers > share / 2;
}

static size_t stream_bytes(const pending_t *p) {
  return p->args.count * p->ctx.esize *
         (size_t)(p->args.coll == COLL_ALLGATHER ? p->ctx.comm->nranks : 1);
}

/* Whether streaming stores are a choice for the call: from the threshold, and in place not a
 * reduction (it writes over its own input, just read). */
static int may_stream(const pending_t *p) {
  coll_t coll = p->args.coll;
  if (stream_bytes(p) < p->ctx.comm->nt_threshold) return 0;
  return !p->args.in_place ||
         !(coll == COLL_ALLREDUCE || coll == COLL_REDUCESCATTER || coll == COLL_REDUCE);
}

/* Whether the call's stores are measured (adapt.h, nt_measure_plan): host memory, a collective,
 * alone in its group, that the rule would stream (where it would not, its buffers fit the cache
 * and plain stores were never measured slower). */
static int stream_measured(ncclComm_t comm, const pending_t *p) {
  return may_stream(p) && comm->nt_measure && !p->ctx.dev && p->args.coll != COLL_SEND &&
         p->args.coll != COLL_RECV && stream_rule(p);
}

/* The call's choice: the rule's, or the measured one's where the call is timed (p->ctx.nt_timed);
 * sets p->ctx.nt_bucket. */
static int stream_results(pending_t *p) {
  p->ctx.nt_bucket = 0;
  if (!may_stream(p)) return 0;
  int rule = stream_rule(p);
  if (!p->ctx.nt_timed) return rule;
  return nt_measure_plan(p->ctx.comm, &p->ctx, &p->args, stream_bytes(p), rule);
}

/* plan_prepare's log lines (INFO), once the call's scratch and streaming are set. */
static void plan_log(const pending_t *p) {
  ncclComm_t comm = p->ctx.comm;
  if (p->ctx.stream)
    INFO(SUB_COLL, "nccl%s (op #%llu): results written with streaming stores (TUTTI_NT_THRESHOLD)",
         coll_name(p->args.coll), (unsigned long long)p->ctx.seq);
  INFO(SUB_COLL,
       "nccl%s: opCount %llx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d "
       "comm %p [nranks=%d] algo %s",
       coll_name(p->args.coll), (unsigned long long)p->ctx.seq, (void *)p->ctx.buf[BUF_SEND],
       (void *)p->ctx.buf[BUF_RECV], p->args.count, (int)p->ctx.rop.type, (int)p->ctx.rop.base,
       p->args.root, (void *)comm, comm->nranks, algo_name(p->ctx.algo));
}

ncclResult_t plan_prepare(pending_t *p) {
  p->ctx.stream = stream_results(p);
  TUTTI_CHECK(provide_scratch(p));
  plan_log(p);
  return ncclSuccess;
}

/* Everything after the choice: plan_prepare, then the steps. */
static ncclResult_t plan_finish(pending_t *p, int cached, uint16_t op_index) {
  ncclComm_t comm = p->ctx.comm;
  TUTTI_CHECK(plan_prepare(p));
  if (plan_a2a_needs_copy(p) && !p->args.exchange && !p->args.swap)
    TUTTI_CHECK(plan_a2a_copy_input(comm, p));
  TUTTI_CHECK(build(comm, p, cached, &comm->sched_scratch));
  tag_steps(&comm->sched_scratch, op_index);
  if (algo_get(p->ctx.algo)->needs & ALGO_USES_LANES) {
    comm->lanes_used = 1;
    for (int i = 0; i < 2 * comm->nranks; i++) tag_steps(&comm->p2p_lanes[i], op_index);
  }
  return ncclSuccess;
}

ncclResult_t plan_group(pending_t *ops, size_t n) {
  static TUTTI_TLS int *cached;
  static TUTTI_TLS size_t cap;
  if (n > cap) {
    int *grown = realloc(cached, n * sizeof(int));
    if (!grown) return TUTTI_ERR(ncclSystemError, "out of memory planning a group");
    cached = grown, cap = n;
    tls_cache_keep(&cached, &cap);
  }
  int *c = cached, any_peer = 0; /* one thread-local access */
  for (size_t i = 0; i < n; i++) {
    c[i] = 0;
    if (plan_self_p2p(&ops[i])) continue;
    ops[i].ctx.seq = ops[i].ctx.comm->op_count++;
    TUTTI_CHECK(plan_choose(ops[i].ctx.comm, &ops[i], &c[i]));
    any_peer |= needs_peer_memory(&ops[i]);
  }
  if (any_peer) TUTTI_CHECK(agree_all(ops, n, c));
  plan_a2a_swaps(ops, n);
  for (size_t i = 0; i < n; i++)
    if (!plan_self_p2p(&ops[i])) TUTTI_CHECK(plan_finish(&ops[i], c[i], (uint16_t)i));
  if (tutti_param_DumpSchedule()) dump_lanes(ops, n);
  plan_p2p_cache(ops, n);
  return ncclSuccess;
}

ncclResult_t plan_one_cached(pending_t *p, const sched_t **steps, int *timed) {
  ncclComm_t comm = p->ctx.comm;
  *steps = NULL;
  p->ctx.adapt = -1;
  int pairs = adapted(comm, p);
  p->ctx.nt_timed = stream_measured(comm, p);
  *timed = pairs || p->ctx.nt_timed;
  if (p->args.coll != COLL_SEND && p->args.coll != COLL_RECV && !p->ctx.dev)
    (void)map_excluded(comm, p);
  plan_a2a_cached_swap(p);
  if (!runs_cached_steps(p) || !plan_matches(comm, p) || !comm->plan.steps_valid ||
      tutti_param_DumpSchedule())
    return ncclSuccess;
  /* a measured call takes the cached steps where it keeps their algorithm, the model's, and that
   * has no handshake (peer steps); its bucket moves here as plan_choose would move it */
  if (pairs) {
    algo_t model = comm->plan.algo;
    if ((algo_get(model)->needs & ALGO_PEER_STEPS) ||
        !adapt_keeps_model(comm, &p->ctx, &p->args, pairs, model))
      return ncclSuccess;
    p->ctx.adapt_decide = 0;
    (void)adapt_plan(comm, &p->ctx, &p->args, pairs, model); /* the model's, its table there */
  }
  p->ctx.seq = comm->op_count++;
  p->ctx.algo = comm->plan.algo, p->args.chunk = comm->plan.chunk;
  TUTTI_CHECK(plan_prepare(p));
  *steps = &comm->plan.kept.steps;
  return ncclSuccess;
}

void plan_quick(pending_t *p, const sched_t **steps) {
  ncclComm_t comm = p->ctx.comm;
  *steps = NULL;
  plan_a2a_cached_swap(p);
  if (!comm->plan.quick || !runs_cached_steps(p) || adapted(comm, p) || stream_measured(comm, p))
    return;
  /* map_excluded's answer, counted only once the call is known to take this way */
  struct map_miss *m = map_miss_live(comm, p);
  /* scratch the communicator has already (plan_prepare's without a temporary to release) */
  if (!plan_key_matches(comm, p, m ? m->exclude : 0) ||
      comm->plan.scratch_bytes > comm->scratch_bytes)
    return;
  if (m) m->skip--;
  p->ctx.seq = comm->op_count++;
  p->ctx.algo = comm->plan.algo, p->args.chunk = comm->plan.chunk;
  p->ctx.stream = stream_results(p);
  p->ctx.buf[BUF_SCRATCH] = comm->scratch;
  plan_log(p);
  *steps = &comm->plan.kept.steps;
}

int plan_cached_lanes(ncclComm_t comm, lane_t *lanes) {
  return plan_lanes_of(comm, &comm->plan.kept, lanes);
}
