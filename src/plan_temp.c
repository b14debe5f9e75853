/* Temporaries of the running group (plan.h): memory a call's plan needs until plan_release,
 * kept by the thread between groups so that a call does not pay a malloc, a free and the first
 * touch of fresh pages every time. */
#include <stdlib.h>

#include "plan.h"
#include "tls_cache.h"

static TUTTI_TLS void **temps;
static TUTTI_TLS size_t ntemps, temps_cap;

int plan_temp_keep(void *p) {
  if (ntemps == temps_cap) {
    size_t cap = temps_cap ? 2 * temps_cap : 8;
    void **grown = realloc(temps, cap * sizeof(*grown));
    if (!grown) return -1;
    temps = grown, temps_cap = cap;
    tls_cache_keep(&temps, &temps_cap);
  }
  temps[ntemps++] = p;
  return 0;
}

/* Small temporaries (a peer-memory call's tables: two per call) are carved from a block the
 * thread keeps, emptied by plan_release, instead of a malloc and a free each. A group that
 * outgrows the block takes the rest from malloc, and plan_release then doubles the block. */
#define PLAN_SMALL_BYTES 1024
static TUTTI_TLS char *small_block;
static TUTTI_TLS size_t small_cap, small_used, small_wanted;

/* The first large temporary of a group (an in-place all-to-all's copy of its input, scratch
 * beyond the communicator's) is a block the thread keeps and grows, not a fresh allocation whose
 * pages the kernel faults in on every call (a 32 MiB copy: 8192 faults, some 20 ms on a VM). */
static TUTTI_TLS char *large_block;
static TUTTI_TLS size_t large_cap;
static TUTTI_TLS int large_used;

static void *large_temp(size_t need) {
  if (large_used) return NULL;
  if (need > large_cap) {
    free(large_block);
    large_block = malloc(need);
    large_cap = large_block ? need : 0;
    if (!large_block) return NULL;
    tls_cache_keep(&large_block, &large_cap);
  }
  large_used = 1;
  return large_block;
}

void *plan_temp_alloc(size_t bytes) {
  size_t need = (TUTTI_MAX(bytes, 1) + 15) & ~(size_t)15;
  if (need <= PLAN_SMALL_BYTES) {
    small_wanted += need;
    if (small_used + need <= small_cap) {
      void *p = small_block + small_used;
      small_used += need;
      return p;
    }
  } else {
    void *p = large_temp(need);
    if (p) return p;
  }
  void *p = malloc(need);
  if (p && plan_temp_keep(p) != 0) free(p), p = NULL;
  return p;
}

void plan_release(void) {
  for (size_t i = 0; i < ntemps; i++) free(temps[i]);
  ntemps = 0;
  large_used = 0;
  if (small_wanted > small_cap) { /* no pointer into the block is left: it may move */
    size_t cap = TUTTI_MAX(2 * small_cap, TUTTI_MAX(small_wanted, 4096));
    char *grown = malloc(cap);
    if (grown) {
      free(small_block);
      small_block = grown, small_cap = cap;
      tls_cache_keep(&small_block, &small_cap);
    }
  }
  small_used = small_wanted = 0;
}
