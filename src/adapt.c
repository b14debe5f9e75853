/* Measured choice between the FIFOs and cma, direct and push, or the FIFOs and direct (adapt.h). */
#include "adapt.h"

#include <stdint.h>
#include <stdlib.h>

#include "reduce_ops.h"

TUTTI_PARAM(Adapt, "ADAPT", 1)
TUTTI_PARAM(AdaptMinBytes, "ADAPT_MIN_BYTES", 64 * 1024)

#define ADAPT_WARM 8        /* calls of the model's choice before the first probe */
#define ADAPT_PERIOD_MIN 16 /* steady calls between probes after a change */
#define ADAPT_PERIOD_MAX 1024
/* An all-to-all that keeps the FIFOs probes the exchange at least every ADAPT_A2A_FIFO_PERIOD
 * calls. A bucket serves both placements (ranks may differ there), and on mapped buffers in place
 * the FIFOs (swapping blocks) ran 1.4-1.8x slower than direct's exchange at 64 KiB-4 MiB (3.4-
 * 5.2x while they sent from a copy) where out of place the exchange ran at most 1.18x slower than
 * them: a program that moves a size from out of place to in place waits for the next probe, so
 * its period stays short. The probes (3 calls of the exchange, with handshakes, in 35) cost out
 * of place: 0.92-1.05 against a period growing to 1024, every interval across 1
 * (docs/perf-issue20-3.md). */
#define ADAPT_A2A_FIFO_PERIOD 32
/* A size with no measurement of its own follows a neighbour's (within ADAPT_BORROW_SIZES powers
 * of two) decided at most ADAPT_BORROW_CALLS measured-choice calls ago. */
#define ADAPT_BORROW_SIZES 4
#define ADAPT_BORROW_CALLS 256
/* Buckets per collective: the power of two below the call's bytes. Not per placement: ranks
 * may differ there (one in place, another not), and a bucket must move alike on every rank. */
#define ADAPT_SIZES 64

enum { PH_FRESH = 0, PH_WARM, PH_STEADY, PH_PROBE, PH_PROBE2, PH_DECIDE };

/* The pairs measured: on buffers read by copy the FIFOs against cma; on buffers the peers map
 * direct against push (all-gather) or the FIFOs against direct (all-to-all). */
enum { PAIR_FIFO_CMA = 0, PAIR_DIRECT_PUSH, PAIR_FIFO_DIRECT };
/* What adapt_plan returns for candidate 0 and 1 of each pair, and their names. */
static const int8_t run_of[3][2] = {
    {ADAPT_FIFO, ADAPT_CMA}, {ADAPT_DIRECT, ADAPT_PUSH}, {ADAPT_FIFO, ADAPT_DIRECT}};
static const char *const name_of[3][2] = {
    {"the FIFOs", "cma"}, {"direct", "push"}, {"the FIFOs", "direct"}};

struct adapt_bucket { /* one collective and size; all but `mine` the same on every rank */
  uint8_t off;        /* 1: left to the model (unreadable buffers, or no pair to choose from) */
  uint8_t mapped;     /* the last handshake mapped the buffers (pair_of) */
  uint8_t pick;       /* 1 + the candidate kept (0 and 1 of run_of[pair_of]) */
  uint8_t phase;
  uint8_t pairs;         /* ADAPT_PAIR_* the call qualified for (adapt_qualifies) */
  uint16_t left, period; /* calls before the next probe; steady calls between probes */
  uint32_t decided_at;   /* comm->adapt_calls at the last decision (0: none yet) */
  float mine[2][2];      /* this rank's last two times of candidate 0 [0] and 1 [1], us */
};

#define ADAPT_COLLS 4 /* the collectives measured (coll_slot) */

static int coll_slot(coll_t c) {
  return c == COLL_ALLREDUCE       ? 0
         : c == COLL_ALLGATHER     ? 1
         : c == COLL_REDUCESCATTER ? 2
         : c == COLL_ALLTOALL      ? 3
                                   : -1;
}

/* The call's bytes as the tuner counts them (all-gather, reduce-scatter, all-to-all: the whole
 * buffer). */
static size_t call_bytes(ncclComm_t comm, const op_ctx_t *o, const sched_args_t *a) {
  size_t b = a->count * o->esize;
  return a->coll == COLL_ALLREDUCE ? b : b * (size_t)comm->nranks;
}

/* Both candidates give the same bits: no reduction (all-gather, all-to-all), two operands (x0
 * (+) x1 is commutative), integers (exact), or float max and min (order-free, reduce_ops.h). */
static int same_bits(ncclComm_t comm, const op_ctx_t *o, const sched_args_t *a) {
  ncclDataType_t t = o->rop.type;
  int is_float = t == ncclFloat64 || ro_type_is_f32(t);
  return a->coll == COLL_ALLGATHER || a->coll == COLL_ALLTOALL || comm->nranks == 2 || !is_float ||
         o->rop.base == ncclMax || o->rop.base == ncclMin;
}

size_t adapt_min_bytes(void) {
  int64_t min = tutti_param_AdaptMinBytes();
  return tutti_param_Adapt() ? (size_t)(min > 1 ? min : 1) : SIZE_MAX;
}

int adapt_qualifies(ncclComm_t comm, const op_ctx_t *o, const sched_args_t *a, int peer_read,
                    int peer_map) {
  if (coll_slot(a->coll) < 0 || call_bytes(comm, o, a) < adapt_min_bytes()) return 0;
  if (comm->nhosts != 1 || comm->nranks < 2 || o->dev || o->rop.premul) return 0;
  if (!same_bits(comm, o, a)) return 0;
  uint32_t mask = comm->algo_mask[a->coll];
  uint32_t fifo = algos_building(a->coll) & ~algos_needing(ALGO_PEER_STEPS);
  int pairs = 0;
  /* TUTTI_ALGO allows cma and some algorithm without peer steps */
  if (peer_read && (mask & (1u << ALGO_CMA)) && (mask & fifo)) pairs |= ADAPT_PAIR_HEAP;
  /* on mapped buffers the all-gather's direct and push, both allowed (push's all-reduce is the
   * faster by 1.2-6x, docs/perf-issue20-2.md: nothing to measure), and the all-to-all's FIFOs and
   * direct (in place both swap blocks, through the FIFOs or in the peers' memory) */
  uint32_t both = (1u << ALGO_DIRECT) | (1u << ALGO_PUSH);
  if (a->coll == COLL_ALLGATHER && peer_map && (mask & both) == both) pairs |= ADAPT_PAIR_MAP;
  if (a->coll == COLL_ALLTOALL && peer_map && (mask & (1u << ALGO_DIRECT)) && (mask & fifo))
    pairs |= ADAPT_PAIR_MAP;
  return pairs;
}

static int bucket_index(const sched_args_t *a, size_t bytes) {
  int lg = 63 - __builtin_clzll((unsigned long long)bytes);
  return coll_slot(a->coll) * ADAPT_SIZES + lg;
}

static struct adapt_bucket *bucket(ncclComm_t comm, const sched_args_t *a, size_t bytes, int *idx) {
  if (!comm->adapt) comm->adapt = calloc(ADAPT_COLLS * ADAPT_SIZES, sizeof(struct adapt_bucket));
  if (!comm->adapt) return NULL;
  *idx = bucket_index(a, bytes);
  return &comm->adapt[*idx];
}

/* The pick of the nearest size of the same collective decided recently (counted
 * in calls, the same on every rank), or 0. Which of the two is faster moves with the machine
 * (adapt.h) alike at neighbouring sizes, and a large call is seldom repeated often enough to
 * be measured before it is timed. */
static uint8_t neighbour_pick(ncclComm_t comm, int idx) {
  int lg = idx % ADAPT_SIZES, row = idx - lg, mapped = comm->adapt[idx].mapped;
  for (int d = 1; d <= ADAPT_BORROW_SIZES; d++)
    for (int s = -1; s <= 1; s += 2) {
      int k = lg + s * d;
      if (k < 0 || k >= ADAPT_SIZES) continue;
      const struct adapt_bucket *n = &comm->adapt[row + k];
      if (!n->off && n->mapped == mapped && n->decided_at &&
          comm->adapt_calls - n->decided_at <= ADAPT_BORROW_CALLS)
        return n->pick;
    }
  return 0;
}

static int pair_of(const struct adapt_bucket *b, coll_t c) {
  return !b->mapped ? PAIR_FIFO_CMA : c == COLL_ALLTOALL ? PAIR_FIFO_DIRECT : PAIR_DIRECT_PUSH;
}

/* Which candidate of the bucket's pair algorithm a is (0 or 1), or -1: neither. Against the
 * FIFOs any algorithm with peer steps counts as the other candidate: on buffers read by copy,
 * direct (the model's guess before a handshake said otherwise) counts as cma, whose place the
 * planner gives it after the handshake (plan.c, peer_outcome). */
static int candidate(const struct adapt_bucket *b, coll_t c, algo_t a) {
  if (pair_of(b, c) == PAIR_DIRECT_PUSH) return a == ALGO_DIRECT ? 0 : a == ALGO_PUSH ? 1 : -1;
  return (algo_get(a)->needs & ALGO_PEER_STEPS) ? 1 : 0;
}

/* An all-to-all the model already gives an algorithm with peer steps keeps it (the same choice
 * on every rank: the model's). Out of place the FIFOs won nothing measured there; in place, where
 * they swap blocks (FIFO_SWAP), they beat cma's exchange on the private heap at 256 KiB-1 MiB
 * (1.38x, 1.62x; 4-16 MiB within the spread) but not direct's on mapped buffers, and a bucket
 * serves both placements: measured from the model's cma (2 ranks, out of place first as the perf
 * programs run) the in-place calls gained nothing in the same run (docs/perf-issue20-3.md). */
static int model_stands(const sched_args_t *a, algo_t model) {
  return a->coll == COLL_ALLTOALL && (algo_get(model)->needs & ALGO_PEER_STEPS);
}

/* What a bucket past its first call runs for the next one, nothing moved (adapt_plan moves it;
 * adapt_keeps_model only looks). */
static int next_run(const struct adapt_bucket *b, int pair) {
  const int8_t *run = run_of[pair];
  switch (b->phase) {
    case PH_WARM:
      return ADAPT_MODEL;
    case PH_STEADY:
      return run[b->pick - 1];
    case PH_PROBE: /* the other candidate twice: the first call after a switch runs slower
                      (caches, pages), the faster of the two counts */
    case PH_PROBE2:
      return run[2 - b->pick];
    default: /* PH_DECIDE: a call with a peer-memory handshake, which carries every rank's
                times: the candidate with peer steps (cma, direct), or direct against push the
                kept one (both have one) */
      return pair == PAIR_DIRECT_PUSH ? run[b->pick - 1] : run[1];
  }
}

int adapt_plan(ncclComm_t comm, op_ctx_t *o, const sched_args_t *a, int pairs, algo_t model) {
  if (model_stands(a, model)) return ADAPT_MODEL;
  int idx;
  struct adapt_bucket *b = bucket(comm, a, call_bytes(comm, o, a), &idx);
  if (!b) return ADAPT_NOMEM; /* an error: a rank whose state stood still would choose apart */
  comm->adapt_calls++;
  b->pairs = (uint8_t)pairs;
  if (b->off) return ADAPT_MODEL;
  o->adapt = idx; /* the handshake's answer may still switch the pair (adapt_agreed) */
  /* a size not measured yet whose model expects mapped buffers starts on the mapped pair (and
   * may borrow a neighbour's pick there); a handshake that cannot map switches it back */
  if (b->phase == PH_FRESH && !b->mapped && (pairs & ADAPT_PAIR_MAP) &&
      (algo_get(model)->needs & ALGO_NEEDS_PEER_MEMORY))
    b->mapped = 1;
  int m = candidate(b, a->coll, model), pair = pair_of(b, a->coll);
  if (m < 0 || !(pairs & (b->mapped ? ADAPT_PAIR_MAP : ADAPT_PAIR_HEAP))) return ADAPT_MODEL;
  if (b->phase == PH_FRESH) {
    if ((b->pick = neighbour_pick(comm, idx)) != 0) { /* the neighbour's, as if decided here */
      b->period = b->left = ADAPT_PERIOD_MIN, b->phase = PH_STEADY;
      return run_of[pair][b->pick - 1];
    }
    b->phase = PH_WARM, b->left = ADAPT_WARM;
  }
  int run = next_run(b, pair);
  switch (b->phase) { /* the bucket moves on */
    case PH_WARM:
      if (--b->left == 0)
        b->pick = (uint8_t)(1 + m), b->period = ADAPT_PERIOD_MIN / 2, b->phase = PH_PROBE;
      break;
    case PH_STEADY:
      if (--b->left == 0) b->phase = PH_PROBE;
      break;
    case PH_PROBE:
    case PH_PROBE2:
      b->phase = b->phase == PH_PROBE ? PH_PROBE2 : PH_DECIDE;
      break;
    default: /* PH_DECIDE */
      o->adapt_decide = 1;
      o->adapt_t[0] = adapt_best_of_two(b->mine[0]), o->adapt_t[1] = adapt_best_of_two(b->mine[1]);
  }
  return run;
}

int adapt_keeps_model(ncclComm_t comm, const op_ctx_t *o, const sched_args_t *a, int pairs,
                      algo_t model) {
  if (model_stands(a, model)) return 1;
  if (!comm->adapt) return 0;
  const struct adapt_bucket *b = &comm->adapt[bucket_index(a, call_bytes(comm, o, a))];
  if (b->off) return 1;
  if (b->phase == PH_FRESH) return 0; /* it may take a neighbour's pick, or the mapped pair */
  int m = candidate(b, a->coll, model), pair = pair_of(b, a->coll);
  if (m < 0 || !(pairs & (b->mapped ? ADAPT_PAIR_MAP : ADAPT_PAIR_HEAP))) return 1;
  int run = next_run(b, pair);
  return b->phase != PH_DECIDE && (run == ADAPT_MODEL || run == run_of[pair][m]);
}

/* The bucket starts over on the pair of the buffers the handshake found (adapt.h). */
static void switch_pair(struct adapt_bucket *b, const sched_args_t *a, size_t bytes, int mapped) {
  if (!(b->pairs & (mapped ? ADAPT_PAIR_MAP : ADAPT_PAIR_HEAP))) {
    INFO(SUB_COLL | SUB_TUNING,
         "nccl%s of %zu bytes: the peers' buffers can %s: the model chooses for this size "
         "from now on",
         coll_name(a->coll), bytes, mapped ? "be mapped" : "be read by copy only");
    b->off = 1;
    return;
  }
  *b = (struct adapt_bucket){.mapped = (uint8_t)mapped, .pairs = b->pairs};
  const char *const *name = name_of[pair_of(b, a->coll)];
  INFO(SUB_COLL | SUB_TUNING,
       "nccl%s of %zu bytes: the peers' buffers can %s: measuring %s against %s",
       coll_name(a->coll), bytes, mapped ? "be mapped" : "be read by copy only", name[0], name[1]);
}

void adapt_agreed(ncclComm_t comm, op_ctx_t *o, const sched_args_t *a, int agreed) {
  if (o->adapt < 0) return;
  struct adapt_bucket *b = &comm->adapt[o->adapt];
  size_t bytes = call_bytes(comm, o, a);
  if (agreed == PEER_AGREE_NONE) {
    if (!b->off)
      INFO(SUB_COLL | SUB_TUNING,
           "nccl%s of %zu bytes: the peers' buffers can not be read: the model chooses for this "
           "size from now on",
           coll_name(a->coll), bytes);
    b->off = 1, o->adapt = -1;
    return;
  }
  int mapped = agreed == PEER_AGREE_MAP;
  if (mapped != b->mapped) {
    switch_pair(b, a, bytes, mapped);
    if (b->off) o->adapt = -1;
    o->adapt_decide = 0; /* the times were of the other pair */
    return;
  }
  if (!o->adapt_decide) return;
  float t0 = o->adapt_t[0], t1 = o->adapt_t[1]; /* the slowest rank's */
  int pick = t0 > 0 && t1 > 0 ? (t1 < t0 ? 2 : 1) : b->pick;
  int pair = pair_of(b, a->coll);
  unsigned period = pick == b->pick ? 4u * b->period : ADAPT_PERIOD_MIN;
  unsigned most = a->coll == COLL_ALLTOALL && run_of[pair][pick - 1] == ADAPT_FIFO
                      ? ADAPT_A2A_FIFO_PERIOD
                      : ADAPT_PERIOD_MAX;
  b->period = (uint16_t)(period > most ? most : period);
  b->pick = (uint8_t)pick, b->left = b->period, b->phase = PH_STEADY;
  b->decided_at = comm->adapt_calls;
  const char *const *name = name_of[pair];
  INFO(SUB_COLL | SUB_TUNING,
       "nccl%s of %zu bytes, measured (slowest rank): %s %.1f us, %s %.1f us: %s for the "
       "next %u calls",
       coll_name(a->coll), bytes, name[0], t0, name[1], t1, name[pick - 1], b->period);
}

void adapt_record(ncclComm_t comm, const op_ctx_t *o, uint64_t ns) {
  if (o->adapt < 0 || !comm->adapt) return;
  struct adapt_bucket *b = &comm->adapt[o->adapt];
  if (b->off || (!b->mapped && (algo_get(o->algo)->needs & ALGO_NEEDS_PEER_MEMORY))) return;
  int k = candidate(b, o->coll, o->algo); /* what ran: a candidate of the bucket's pair, or not */
  if (k < 0) return;
  float *t = b->mine[k];
  t[1] = t[0], t[0] = (float)ns / 1000.0f;
}

void adapt_free(ncclComm_t comm) {
  free(comm->adapt);
  comm->adapt = NULL;
}
