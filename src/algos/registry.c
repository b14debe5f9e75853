/* The registry's table (built from TUTTI_ALGOS) and the lookups over it. */
#include "algos/registry.h"

#include <pthread.h>
#include <strings.h>

const algo_desc_t *const algo_registry[ALGO_NUM] = {
#define TUTTI_ALGO_ENTRY(e, name) [ALGO_##e] = &algo_##name,
    TUTTI_ALGOS(TUTTI_ALGO_ENTRY)
#undef TUTTI_ALGO_ENTRY
};

/* The algorithms' bits per need flag and per collective built, computed once: the table is
 * constant, and the planner asks on every call. */
static uint32_t need_bits[32], coll_bits[COLL_NUM];
static pthread_once_t masks_once = PTHREAD_ONCE_INIT;

static void masks_init(void) {
  for (int a = 0; a < ALGO_NUM; a++) {
    for (int f = 0; f < 32; f++)
      if (algo_registry[a]->needs & (1u << f)) need_bits[f] |= 1u << a;
    for (int c = 0; c < COLL_NUM; c++)
      if (algo_registry[a]->build[c]) coll_bits[c] |= 1u << a;
  }
}

uint32_t algos_needing(unsigned needs) {
  pthread_once(&masks_once, masks_init);
  uint32_t bits = 0;
  for (; needs; needs &= needs - 1) bits |= need_bits[__builtin_ctz(needs)];
  return bits;
}

uint32_t algos_building(coll_t c) {
  pthread_once(&masks_once, masks_init);
  return (unsigned)c < COLL_NUM ? coll_bits[c] : 0;
}

const char *algo_name(algo_t a) {
  return (unsigned)a < ALGO_NUM ? algo_registry[a]->name : "?";
}

algo_t algo_by_name(const char *name) {
  for (int a = 0; a < ALGO_NUM; a++)
    if (strcasecmp(name, algo_registry[a]->name) == 0) return (algo_t)a;
  return ALGO_NUM;
}

int algo_implements(algo_t a, coll_t c) {
  return (unsigned)a < ALGO_NUM && (unsigned)c < COLL_NUM && algo_registry[a]->build[c] != NULL;
}

int sched_build(algo_t algo, const sched_args_t *a, const int *host_of_rank, sched_t *col,
                sched_t *lanes) {
  if (!algo_implements(algo, a->coll)) return -2;
  sched_args_t b = *a;
  if (host_of_rank) b.host_of_rank = host_of_rank;
  size_t first = col->n;
  int rc = algo_registry[algo]->build[a->coll](&b, col, lanes);
  /* The kernels scale only the first operand: a PreMulSum must not swap a scaled one. */
  const unsigned swapped_pre = STEP_REDUCE | STEP_SWAP | STEP_PRE;
  for (size_t i = first; rc == 0 && a->premul && i < col->n; i++)
    if ((col->steps[i].flags & swapped_pre) == swapped_pre) rc = -3;
  return rc;
}

size_t sched_scratch_elems(algo_t algo, const sched_args_t *a) {
  const algo_desc_t *d = algo_get(algo);
  return d && d->scratch_elems && algo_implements(algo, a->coll) ? d->scratch_elems(a) : 0;
}
