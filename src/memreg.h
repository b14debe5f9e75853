/* Shareable host memory (memreg.c): ncclMemAlloc regions and other processes' mappings. */
#ifndef TUTTI_MEMREG_H_
#define TUTTI_MEMREG_H_

#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

typedef struct memreg_ref { /* where a buffer lies: enough for a same-host peer to map it */
  uint64_t id;              /* region id, unique in its process */
  uint64_t bytes;           /* region size */
  uint64_t offset;          /* of the buffer in the region */
  int32_t fd;               /* the region's memfd in its process */
  int32_t sparse;           /* 1: the shared heap's arena (libtutti-heap.so): map it lazily */
} memreg_ref_t;

/* 1 and *ref when [ptr, ptr + bytes) lies inside one shared (memfd) ncclMemAlloc region of this
 * process or in the shared heap's arena (libtutti-heap.so, when preloaded); private regions
 * are not found: other processes read them by copy. */
int memreg_find(const void *ptr, size_t bytes, memreg_ref_t *ref);

/* The same for any ncclMemAlloc region, private ones included (ref->fd is then -1): memory
 * that stays allocated until ncclMemFree, named by an id never reused (ib's registrations). */
int memreg_find_region(const void *ptr, size_t bytes, memreg_ref_t *ref);
/* Maps (read-write, cached) region ref of process pid, rank `peer`; *base = its start. The
 * buffer at ref->offset, `bytes` long, is about to be used: where the region is mapped lazily
 * its pages are mapped now, in one go. */
ncclResult_t memreg_map_peer(ncclComm_t comm, int peer, int pid, const memreg_ref_t *ref,
                             size_t bytes, const char **base);
/* The same for this process's own buffer buf (found in ref by memreg_find): in the lazily
 * mapped arena, the pages a peer wrote first have no entries in this process yet. */
ncclResult_t memreg_populate_own(ncclComm_t comm, const void *buf, size_t bytes,
                                 const memreg_ref_t *ref);
/* Reads one byte of every 4 KiB page of [p, p + bytes): the first access to a page through a
 * mapping, which some virtual machines charge microseconds for even when its page-table entry is
 * filled, paid now (docs/perf-issue20-2.md). */
void memreg_touch(const void *p, size_t bytes);
/* Unmaps every cached peer region of comm. */
void memreg_comm_free(ncclComm_t comm);

#endif
