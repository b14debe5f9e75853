/* What the shared heap (libtutti-heap.so, shared_heap.c) tells libtutti (memreg.c): the one
 * memfd its large allocations come from. libtutti looks the function up at run time
 * (dlsym), so a process without the preloaded heap simply has no such region. */
#ifndef TUTTI_HEAP_ABI_H_
#define TUTTI_HEAP_ABI_H_

#include <stddef.h>

#define TUTTI_HEAP_REGION_FN "tutti_heap_region"
/* The memfd's name: memreg's peers check /proc/<pid>/fd/<fd> links to it before they map it,
 * as they do for ncclMemAlloc's "tutti-mem-<id>" (region id 0 is never an ncclMemAlloc's). */
#define TUTTI_HEAP_MEMFD_NAME "tutti-mem-0"
#define TUTTI_HEAP_REGION_ID 0

typedef struct tutti_heap_region {
  char *base;   /* the arena's start in this process */
  size_t bytes; /* its (sparse) size: the memfd's size */
  int fd;       /* the memfd */
} tutti_heap_region_t;

/* 1 and *r while this process serves allocations from the arena; 0 otherwise (not set up,
 * turned off, or a forked child, whose copies of the blocks are private). */
typedef int (*tutti_heap_region_fn)(tutti_heap_region_t *r);

/* A block of `bytes` from the arena whatever its size (TUTTI_HEAP_MIN does not apply here),
 * page-aligned and zeroed, for ncclMemAlloc; NULL while the arena does not serve or cannot hold
 * it. free() gives it back. */
#define TUTTI_HEAP_ALLOC_FN "tutti_heap_alloc"
typedef void *(*tutti_heap_alloc_fn)(size_t bytes);

#endif
