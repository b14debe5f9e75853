/* Measured choice between plain and streaming stores for large calls (adapt.h). */
#include <stdint.h>
#include <stdlib.h>

#include "adapt.h"
#include "algos/registry.h"

TUTTI_PARAM(NtMeasure, "NT_MEASURE", 1)
/* Test hooks: microseconds added to this rank's measured time of a call that ran with streaming
 * stores (STREAMED) or plain ones (PLAIN), so that a test decides which is faster. */
TUTTI_PARAM(TestStreamedPenaltyUs, "TEST_STREAMED_PENALTY_US", 0)
TUTTI_PARAM(TestPlainPenaltyUs, "TEST_PLAIN_PENALTY_US", 0)

#define NT_WARM 3        /* calls of the rule's choice before the first probe */
#define NT_PERIOD_MIN 16 /* steady calls between probes after a change */
#define NT_PERIOD_MAX 1024
#define NT_PROBE_CALLS 3    /* calls of the other way per probe */
#define NT_CLEAR_LOSS 1.25f /* a first probe this much slower decides alone */
#define NT_BUCKETS 32       /* sizes remembered per communicator (least recently used replaced) */

enum { NT_WARMING = 0, NT_STEADY, NT_PROBING };

struct nt_bucket {
  uint32_t key;          /* 1 + collective, placement, algorithm and power of two; 0: free */
  uint32_t used;         /* comm's count of measured calls at its last use */
  uint8_t phase, pick;   /* pick: 0 plain, 1 streamed (the rule's at first) */
  uint8_t probed;        /* calls of the other way in this probe so far */
  uint16_t left, period; /* calls before the next probe; steady calls between probes */
  float mine[2][2];      /* this rank's last two times with plain [0] and streaming [1] stores */
};

int nt_measure_enabled(void) {
  return tutti_param_NtMeasure() != 0 && adapt_min_bytes() != SIZE_MAX;
}

static uint32_t key_of(const op_ctx_t *o, const sched_args_t *a, size_t bytes) {
  uint32_t lg = (uint32_t)(63 - __builtin_clzll((unsigned long long)bytes));
  return 1 + ((((uint32_t)a->coll * 2 + (a->in_place != 0)) * 64 + (uint32_t)o->algo) * 64 + lg);
}

/* The bucket of the key, taking the least recently used one for a new key; NULL: no memory. */
static struct nt_bucket *find(ncclComm_t comm, uint32_t key, int model) {
  if (!comm->nt_adapt) comm->nt_adapt = calloc(NT_BUCKETS, sizeof(struct nt_bucket));
  if (!comm->nt_adapt) return NULL;
  struct nt_bucket *b = comm->nt_adapt, *old = b;
  comm->nt_calls++;
  for (int i = 0; i < NT_BUCKETS; i++) {
    if (b[i].key == key) {
      b[i].used = comm->nt_calls;
      return &b[i];
    }
    if (b[i].used < old->used) old = &b[i];
  }
  *old = (struct nt_bucket){.key = key, .used = comm->nt_calls, .pick = (uint8_t)(model != 0)};
  old->left = NT_WARM, old->period = NT_PERIOD_MIN; /* a first decision for the rule: 4x that */
  return old;
}

static void decide(const op_ctx_t *o, const sched_args_t *a, size_t bytes, struct nt_bucket *b) {
  float plain = adapt_best_of_two(b->mine[0]), streamed = adapt_best_of_two(b->mine[1]);
  int pick = plain > 0 && streamed > 0 ? streamed < plain : b->pick;
  unsigned period = pick == b->pick ? 4u * b->period : NT_PERIOD_MIN;
  b->period = (uint16_t)(period > NT_PERIOD_MAX ? NT_PERIOD_MAX : period);
  b->pick = (uint8_t)pick, b->left = b->period, b->phase = NT_STEADY;
  INFO(SUB_COLL | SUB_TUNING,
       "nccl%s of %zu bytes%s (%s), measured on this rank: plain stores %.1f us, streaming "
       "stores %.1f us: %s stores for the next %u calls",
       coll_name(a->coll), bytes, a->in_place ? " in place" : "", algo_name(o->algo), plain,
       streamed, pick ? "streaming" : "plain", b->period);
}

int nt_measure_plan(ncclComm_t comm, op_ctx_t *o, const sched_args_t *a, size_t bytes, int model) {
  struct nt_bucket *b = find(comm, key_of(o, a, bytes), model);
  if (!b) return model; /* no memory for the table: the rule alone (a choice of this rank's) */
  o->nt_bucket = 1 + (int)(b - comm->nt_adapt);
  switch (b->phase) {
    case NT_WARMING:
    case NT_STEADY:
      if (--b->left == 0) b->phase = NT_PROBING, b->probed = 0;
      return b->pick;
    default: { /* NT_PROBING: the other way NT_PROBE_CALLS times (its first calls after a switch
                  run slower: they find what the other way left in the caches); once where the
                  first already lost by far */
      float kept = adapt_best_of_two(b->mine[b->pick]), first = b->mine[!b->pick][0];
      int lost = b->probed == 1 && kept > 0 && first > NT_CLEAR_LOSS * kept;
      if (b->probed++ < NT_PROBE_CALLS && !lost) return !b->pick;
      decide(o, a, bytes, b);
      if (--b->left == 0) b->phase = NT_PROBING, b->probed = 0;
      return b->pick;
    }
  }
}

void nt_measure_record(ncclComm_t comm, const op_ctx_t *o, uint64_t ns) {
  if (!o->nt_bucket || !comm->nt_adapt) return;
  int64_t penalty =
      o->stream ? tutti_param_TestStreamedPenaltyUs() : tutti_param_TestPlainPenaltyUs();
  float *t = comm->nt_adapt[o->nt_bucket - 1].mine[o->stream != 0];
  t[1] = t[0], t[0] = (float)ns / 1000.0f + (float)(penalty > 0 ? penalty : 0);
}

void nt_measure_free(ncclComm_t comm) {
  free(comm->nt_adapt);
  comm->nt_adapt = NULL;
}
