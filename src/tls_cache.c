/* Per-thread caches freed at thread exit (tls_cache.h): one pthread key per process whose value
 * is non-NULL in every thread that registered a cache; its destructor runs when such a thread
 * exits (pthread_exit or the return of its start function), while the thread's own thread-locals
 * are still there, and frees what the thread registered. The main thread's caches stay (key
 * destructors do not run at exit(); the memory is still reachable then).
 *
 * The destructor only calls free(): no lock, no logging, nothing that may run into the library
 * again, so it is safe in any thread at any point of its exit, and in a child forked from a
 * thread that had caches (the child's copy of that thread registered the same slots).
 */
#include "tls_cache.h"

#include <pthread.h>
#include <stdlib.h>

#include "core.h"

typedef struct tls_slot {
  void **ptr;
  size_t *cap;
} tls_slot_t;

static pthread_key_t cache_key;
static int cache_key_ok; /* written once under pthread_once */
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static TUTTI_TLS tls_slot_t slots[TLS_CACHE_SLOTS];
static TUTTI_TLS int nslots;

static void cache_free_all(void *unused) {
  (void)unused;
  for (int i = 0; i < nslots; i++) {
    free(*slots[i].ptr);
    *slots[i].ptr = NULL;
    if (slots[i].cap) *slots[i].cap = 0;
  }
  nslots = 0;
}

static void cache_key_make(void) {
  cache_key_ok = pthread_key_create(&cache_key, cache_free_all) == 0;
}

void tls_cache_keep(void *slot, size_t *cap) {
  void **ptr = slot;
  for (int i = 0; i < nslots; i++)
    if (slots[i].ptr == ptr) return;
  if (nslots == TLS_CACHE_SLOTS) {
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      WARN("more than %d thread-local caches in one thread: the rest is not freed at its exit",
           TLS_CACHE_SLOTS);
    return;
  }
  pthread_once(&cache_once, cache_key_make);
  if (!cache_key_ok) return;
  slots[nslots++] = (tls_slot_t){ptr, cap};
  pthread_setspecific(cache_key, (void *)1); /* any non-NULL value: the destructor then runs */
}
