/* Per-thread caches: buffers a thread keeps between calls (static TUTTI_TLS pointers grown on
 * demand: the engine's exchange lanes, the planner's tables, the peer steps' read buffers), freed
 * when the thread exits. Ranks that are threads, and the threads a group starts for deferred
 * inits, end while the process goes on: without this every such thread lost its caches.
 *
 * tls_cache_keep(&ptr, &cap) after a cache first got memory: at the thread's exit *ptr is freed
 * (free(): malloc, realloc or posix_memalign memory) and both are zeroed, so a cache used again
 * (by a later key destructor) starts empty. cap may be NULL. Registering a slot twice is harmless;
 * at most TLS_CACHE_SLOTS slots per thread (a bug beyond, reported once as a WARN).
 */
#ifndef TUTTI_TLS_CACHE_H_
#define TUTTI_TLS_CACHE_H_

#include <stddef.h>

#define TLS_CACHE_SLOTS 16

void tls_cache_keep(void *slot, size_t *cap);

#endif
