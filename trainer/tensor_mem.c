/* The trainer's big arrays come from one allocator, the heap unless the program says otherwise:
 * tutti-train hands it ddp_alloc (ncclMemAlloc memory, which same-host ranks read in place, so
 * the collectives on parameters, gradients and gathered activations skip the FIFO copies).
 * The models and their tests need no communicator, hence the hook rather than a call to tutti.
 */
#include "tensor_mem.h"

#include <stdlib.h>
#include <string.h>

static void *(*alloc_fn)(size_t);
static void (*release_fn)(void *);

void tensor_alloc_use(void *(*alloc)(size_t bytes), void (*release)(void *p)) {
  alloc_fn = alloc, release_fn = release;
}

void *tensor_alloc(size_t bytes) {
  if (alloc_fn) return alloc_fn(bytes);
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (p) memset(p, 0, rounded);
  return p;
}

void tensor_free(void *p) {
  if (!p) return;
  if (release_fn)
    release_fn(p);
  else
    free(p);
}
