/* Shareable memory: ncclMemAlloc / ncclMemFree / ncclCommRegister / ncclCommDeregister, and
 * the mapping of other processes' buffers for the collectives that map them (direct.c, push.c).
 *
 * ncclMemAlloc returns host memory backed by a memfd and mapped shared, so that the other
 * ranks of the host can map the very same pages (through /proc/<pid>/fd/<fd>, which needs
 * the same rights as reading the process's memory) and read a rank's buffers in place: an
 * all-reduce on such buffers skips both FIFO copies. Memory from malloc cannot be shared that
 * way, so collectives on it go through the FIFOs or read it by copy (cma; ranks that are threads
 * of one process, from ncclCommInitAll, share every buffer anyway) -- unless the process runs
 * with the shared heap (libtutti-heap.so, which tutti-run preloads): then its large malloc
 * blocks lie in one memfd arena, which memreg_find reports as region 0 and peers map lazily.
 *
 * TUTTI_MEM_ALLOC chooses the backing: "auto" (the default) is device memory where the calling
 * thread has a current device context, as NCCL's ncclMemAlloc allocates on the current GPU
 * (cuMemAlloc through device.h: collectives on it take the device path, peers open it through
 * CUDA IPC), else "shared". "shared" is the memfd above, which the peers map and the push
 * all-reduce (push.c) reads and writes in place -- a block of the shared heap's arena while that
 * serves (tutti_heap_alloc: one memfd a peer maps once for every buffer, where a memfd per buffer
 * costs a mapping each and measured slower (docs/perf-issue20.md)), else a memfd of the region's
 * own; or "private", anonymous memory with huge pages asked for, which the peers read by copy (cma)
 * like any heap buffer. Where shared memory gets no transparent huge pages (Debian's default),
 * a pass over shared pages pays TLB misses that private ones with huge pages avoid, but reading
 * by copy pays a system call and page pinning per piece on top, and the push all-reduce on
 * shared memory measured faster than cma on private memory at every size (docs/perf.md).
 *
 * ncclCommRegister checks its arguments and records the buffer; on host memory it changes
 * nothing else: what decides the path is where the memory comes from (ncclMemAlloc or not).
 * Regions are named by a process-unique id, so a freed and reallocated region is never taken
 * for the old one; a peer's mapping lives in a small per-communicator cache (mapping is costly
 * on the machines this runs on: it happens once per region, not per call) until the cache
 * evicts it or the communicator is destroyed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "memreg.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "device.h"
#include "heap/heap_abi.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define PEER_MAP_CACHE 32
#define REGION_PRIVATE (-1)
#define REGION_IN_HEAP (-2)
#define REGION_DEVICE (-3)

typedef struct region {
  char *base;
  size_t bytes;
  int fd; /* the memfd; REGION_PRIVATE: private memory (TUTTI_MEM_ALLOC); REGION_IN_HEAP: a block
           * of the shared heap's arena, which memreg_find reports as the arena; REGION_DEVICE:
           * device memory, never reported (it is no host memory) */
  uint64_t id;
  void *ctx; /* REGION_DEVICE: the device context it was taken in, which frees it */
} region_t;

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static region_t *regions;
static int nregions, regions_cap;
static uint64_t next_region_id = 1;
/* Regions with a memfd of their own (fd >= 0), read without the lock: where there are none (the
 * shared heap serves every ncclMemAlloc, or none was made), a lookup of shared memory, asked for
 * each buffer of each peer-memory call, takes neither the lock nor the scan. A region is counted
 * before ncclMemAlloc returns its pointer, so any thread that holds the pointer sees the count. */
static int nshared_regions;

static int region_lookup(const void *ptr, size_t bytes, memreg_ref_t *ref, int shared_only) {
  uintptr_t p = (uintptr_t)ptr;
  int found = 0;
  if (shared_only && __atomic_load_n(&nshared_regions, __ATOMIC_ACQUIRE) == 0) return 0;
  pthread_mutex_lock(&regions_lock);
  for (int i = 0; i < nregions && !found; i++) {
    if (regions[i].fd == REGION_DEVICE) continue;
    if (shared_only && regions[i].fd < 0) continue; /* private, or found as the arena */
    uintptr_t b = (uintptr_t)regions[i].base;
    if (p >= b && p - b <= regions[i].bytes && bytes <= regions[i].bytes - (p - b)) {
      *ref = (memreg_ref_t){
          .id = regions[i].id, .fd = regions[i].fd, .bytes = regions[i].bytes, .offset = p - b};
      found = 1;
    }
  }
  pthread_mutex_unlock(&regions_lock);
  return found;
}

/* The shared heap's arena, when libtutti-heap.so is preloaded and serving (asked per call: a
 * forked child's arena stops serving). */
static tutti_heap_region_fn heap_region;
static tutti_heap_alloc_fn heap_alloc;
static pthread_once_t heap_once = PTHREAD_ONCE_INIT;

static void heap_find(void) {
  heap_region = (tutti_heap_region_fn)dlsym(RTLD_DEFAULT, TUTTI_HEAP_REGION_FN);
  heap_alloc = (tutti_heap_alloc_fn)dlsym(RTLD_DEFAULT, TUTTI_HEAP_ALLOC_FN);
}

static int heap_lookup(const void *ptr, size_t bytes, memreg_ref_t *ref) {
  pthread_once(&heap_once, heap_find);
  tutti_heap_region_t r;
  if (!heap_region || !heap_region(&r)) return 0;
  uintptr_t p = (uintptr_t)ptr, b = (uintptr_t)r.base;
  if (p < b || p - b > r.bytes || bytes > r.bytes - (p - b)) return 0;
  *ref = (memreg_ref_t){
      .id = TUTTI_HEAP_REGION_ID, .fd = r.fd, .bytes = r.bytes, .offset = p - b, .sparse = 1};
  return 1;
}

int memreg_find(const void *ptr, size_t bytes, memreg_ref_t *ref) {
  return region_lookup(ptr, bytes, ref, 1) || heap_lookup(ptr, bytes, ref);
}

int memreg_find_region(const void *ptr, size_t bytes, memreg_ref_t *ref) {
  return region_lookup(ptr, bytes, ref, 0);
}

typedef enum { ALLOC_AUTO, ALLOC_SHARED, ALLOC_PRIVATE, ALLOC_UNKNOWN } alloc_mode_t;

static alloc_mode_t alloc_mode(void) {
  const char *v = tutti_getenv("MEM_ALLOC");
  if (!v || strcmp(v, "auto") == 0) return ALLOC_AUTO;
  if (strcmp(v, "shared") == 0) return ALLOC_SHARED;
  return strcmp(v, "private") == 0 ? ALLOC_PRIVATE : ALLOC_UNKNOWN;
}

/* Gives [p, p + bytes) its pages now, as MAP_POPULATE does for a memfd region. */
static void populate(void *p, size_t bytes) {
  if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
  for (size_t off = 0; off < bytes; off += 4096) ((volatile char *)p)[off] = 0;
}

/* Private memory: anonymous, huge pages asked for before the pages are touched. */
static void *alloc_private(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  populate(p, bytes);
  return p;
}

/* A block of the shared heap's arena (zeroed, populated), or NULL where none serves. */
static void *alloc_in_heap(size_t bytes) {
  pthread_once(&heap_once, heap_find);
  void *p = heap_alloc ? heap_alloc(bytes) : NULL;
  if (p) populate(p, bytes);
  return p;
}

static void region_release(const region_t *r) {
  if (r->fd == REGION_IN_HEAP) {
    free(r->base);
    return;
  }
  if (r->fd == REGION_DEVICE) { /* in its own context, whichever thread frees it */
    const device_ops_t *d = device_get();
    int switched = 0;
    void *was = device_switch(d, r->ctx, &switched);
    if (d) d->dev_free(r->base); /* waits for the device, as cuMemFree does */
    if (switched) d->bind(was);
    return;
  }
  munmap(r->base, r->bytes);
  if (r->fd >= 0) close(r->fd);
}

static ncclResult_t region_add(void *p, size_t bytes, int fd, uint64_t id, void *ctx) {
  pthread_mutex_lock(&regions_lock);
  if (nregions == regions_cap) {
    int cap = regions_cap ? 2 * regions_cap : 16;
    region_t *r = realloc(regions, (size_t)cap * sizeof(*r));
    if (r) regions = r, regions_cap = cap;
  }
  int ok = nregions < regions_cap;
  region_t r = {.base = p, .bytes = bytes, .fd = fd, .id = id, .ctx = ctx};
  if (ok) regions[nregions++] = r;
  if (ok && fd >= 0) __atomic_add_fetch(&nshared_regions, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&regions_lock);
  if (ok) return ncclSuccess;
  region_release(&r);
  return TUTTI_ERR(ncclSystemError, "ncclMemAlloc: out of memory for the region table");
}

API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  tutti_clear_error();
  if (!ptr) return TUTTI_ERR(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  if (size == 0) return TUTTI_ERR(ncclInvalidArgument, "ncclMemAlloc: size is 0");
  size_t bytes = TUTTI_ALIGN_UP(size, 4096);
  alloc_mode_t mode = alloc_mode();
  if (mode == ALLOC_UNKNOWN)
    return TUTTI_ERR(ncclInvalidArgument,
                     "ncclMemAlloc: TUTTI_MEM_ALLOC=%s is not auto, shared or private",
                     tutti_getenv("MEM_ALLOC"));
  pthread_mutex_lock(&regions_lock);
  uint64_t id = next_region_id++;
  pthread_mutex_unlock(&regions_lock);
  const device_ops_t *dev = mode == ALLOC_AUTO ? device_current() : NULL;
  if (dev) {
    void *p = NULL;
    int rc = dev->dev_alloc(&p, bytes);
    if (rc != 0)
      return TUTTI_ERR(ncclUnhandledCudaError,
                       "ncclMemAlloc: %zu bytes of device memory on the calling thread's device: "
                       "%s (TUTTI_MEM_ALLOC=shared gives host memory)",
                       bytes, dev->error_string(rc));
    TUTTI_CHECK(region_add(p, bytes, REGION_DEVICE, id, dev->current_ctx()));
    INFO(SUB_SHM,
         "ncclMemAlloc: %zu bytes at %p (region %llu, device memory: the calling "
         "thread has a current %s context)",
         bytes, p, (unsigned long long)id, dev->name);
    *ptr = p;
    return ncclSuccess;
  }
  if (mode == ALLOC_PRIVATE) {
    void *p = alloc_private(bytes);
    if (!p)
      return TUTTI_ERR(ncclSystemError, "ncclMemAlloc: mmap of %zu bytes failed: %s", bytes,
                       strerror(errno));
    TUTTI_CHECK(region_add(p, bytes, REGION_PRIVATE, id, NULL));
    INFO(SUB_SHM, "ncclMemAlloc: %zu bytes at %p (region %llu, private: peers read it by copy)",
         bytes, p, (unsigned long long)id);
    *ptr = p;
    return ncclSuccess;
  }
  void *hp = alloc_in_heap(bytes);
  if (hp) {
    TUTTI_CHECK(region_add(hp, bytes, REGION_IN_HEAP, id, NULL));
    INFO(SUB_SHM, "ncclMemAlloc: %zu bytes at %p (region %llu, in the shared heap's arena)", bytes,
         hp, (unsigned long long)id);
    *ptr = hp;
    return ncclSuccess;
  }
  char name[48];
  snprintf(name, sizeof(name), "tutti-mem-%llu", (unsigned long long)id);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0)
    return TUTTI_ERR(ncclSystemError, "ncclMemAlloc: memfd_create failed: %s", strerror(errno));
  if (ftruncate(fd, (off_t)bytes) != 0) {
    int err = errno;
    close(fd);
    return TUTTI_ERR(ncclSystemError, "ncclMemAlloc: cannot size %zu bytes: %s", bytes,
                     strerror(err));
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return TUTTI_ERR(ncclSystemError, "ncclMemAlloc: mmap of %zu bytes failed: %s", bytes,
                     strerror(err));
  }
  TUTTI_CHECK(region_add(p, bytes, fd, id, NULL));
  INFO(SUB_SHM, "ncclMemAlloc: %zu bytes at %p (region %llu, memfd %d)", bytes, p,
       (unsigned long long)id, fd);
  *ptr = p;
  return ncclSuccess;
}

API ncclResult_t ncclMemFree(void *ptr) {
  tutti_clear_error();
  if (!ptr) return TUTTI_ERR(ncclInvalidArgument, "ncclMemFree: ptr is NULL");
  region_t r = {0};
  pthread_mutex_lock(&regions_lock);
  for (int i = 0; i < nregions; i++)
    if (regions[i].base == (char *)ptr) {
      r = regions[i];
      regions[i] = regions[--nregions];
      if (r.fd >= 0) __atomic_sub_fetch(&nshared_regions, 1, __ATOMIC_RELEASE);
      break;
    }
  pthread_mutex_unlock(&regions_lock);
  if (!r.base)
    return TUTTI_ERR(ncclInvalidArgument,
                     "ncclMemFree: ptr %p was not returned by ncclMemAlloc "
                     "(or was freed already)",
                     ptr);
  region_release(&r);
  return ncclSuccess;
}

/* ---- ncclCommRegister: argument checks and a handle ---- */

typedef struct reg_handle {
  uint64_t magic;
  ncclComm_t comm;
  void *buff;
  size_t size;
  struct reg_handle *next; /* reg_live */
} reg_handle_t;
#define REG_MAGIC 0x7475747469726567ull /* "tuttireg" */

/* Every live handle: ncclCommDeregister looks a handle up here before it reads it, so that a
 * bogus pointer or a second deregister is an error, never a read of freed memory. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static reg_handle_t *reg_live;

/* Unlinks h if it is live and belongs to comm; 1 if it did. */
static int reg_take(reg_handle_t *h, ncclComm_t comm) {
  int found = 0;
  pthread_mutex_lock(&reg_lock);
  for (reg_handle_t **p = &reg_live; *p && !found; p = &(*p)->next) {
    if (*p != h || h->comm != comm) continue;
    *p = h->next;
    found = 1;
    break;
  }
  pthread_mutex_unlock(&reg_lock);
  return found;
}

API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
  tutti_clear_error();
  TUTTI_CHECK(comm_check(comm, "ncclCommRegister"));
  if (!buff) return TUTTI_ERR(ncclInvalidArgument, "ncclCommRegister: buff is NULL");
  if (size == 0) return TUTTI_ERR(ncclInvalidArgument, "ncclCommRegister: size is 0");
  if (!handle) return TUTTI_ERR(ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  reg_handle_t *h = malloc(sizeof(*h));
  if (!h) return TUTTI_ERR(ncclSystemError, "ncclCommRegister: out of memory");
  *h = (reg_handle_t){.magic = REG_MAGIC, .comm = comm, .buff = buff, .size = size};
  memreg_ref_t ref;
  if (memreg_find(buff, size, &ref))
    INFO(SUB_SHM,
         "ncclCommRegister: %p (%zu bytes) lies in %s %llu: collectives on it read it in place",
         buff, size, ref.sparse ? "the shared heap's arena, region" : "ncclMemAlloc region",
         (unsigned long long)ref.id);
  else
    INFO(SUB_SHM,
         "ncclCommRegister: %p (%zu bytes) is not from ncclMemAlloc: other processes "
         "cannot map it, collectives on it copy through the FIFOs",
         buff, size);
  pthread_mutex_lock(&reg_lock);
  h->next = reg_live, reg_live = h;
  pthread_mutex_unlock(&reg_lock);
  *handle = h;
  return ncclSuccess;
}

API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  tutti_clear_error();
  TUTTI_CHECK(comm_check_handle(comm, "ncclCommDeregister"));
  reg_handle_t *h = handle;
  if (!h || !reg_take(h, comm))
    return TUTTI_ERR(ncclInvalidArgument,
                     "ncclCommDeregister: handle %p was not returned by "
                     "ncclCommRegister on this communicator (or was deregistered already)",
                     handle);
  h->magic = 0;
  free(h);
  return ncclSuccess;
}

/* ---- mapping the other processes' regions ---- */

/* Page ranges of a lazily mapped region (the heap's arena) made ready in this process. The first
 * access to a page of another process's memory through our mapping costs 5-13 us on the virtual
 * machines this runs on (a fault, and the hypervisor's own bookkeeping on top:
 * docs/perf-issue20-2.md), so a buffer of the arena is made ready whole the first time a call uses
 * it: its page-table entries filled in one madvise(MADV_POPULATE_WRITE) (0.3-0.7 us per page
 * instead of a write fault's 11-13), then each page read once (the hypervisor's share, about 6
 * us, paid now for every page, where the call would touch only the part its algorithm gives this
 * rank: the next call on a part of the same buffer, another size of a sweep, pays nothing). */
#define PEER_MAP_SPANS 16
typedef struct span {
  size_t lo, hi;
  uint64_t last_use;
} span_t;

typedef struct peer_map {
  int pid;
  uint64_t id;
  char *base;
  size_t bytes;
  uint64_t last_use;
  span_t spans[PEER_MAP_SPANS]; /* sparse regions: pages filled (hi == 0: unused) */
} peer_map_t;

struct memreg_cache {
  peer_map_t own; /* this process's own arena: its pages the peers wrote lack our entries */
  peer_map_t maps[PEER_MAP_CACHE];
  uint64_t clock;
  int last; /* the slot of the last hit or mapping: a collective's buffers mostly share one */
};

static int map_is(const peer_map_t *m, int pid, const memreg_ref_t *ref) {
  return m->base && m->pid == pid && m->id == ref->id && m->bytes == ref->bytes;
}

/* Makes [off, off + len) of a lazily mapped region ready once (above; touch: also read each
 * page): a range the spans cover costs a few comparisons; a new one is recorded as a span
 * (merged with those it overlaps or touches; the least recently used one gives way when all are
 * taken). Where the kernel has no MADV_POPULATE_WRITE the pages fault in as they are touched. */
static void map_populate(struct memreg_cache *c, peer_map_t *m, size_t off, size_t len, int touch) {
  static int unsupported;
  size_t lo = off & ~(size_t)4095, hi = TUTTI_MIN(TUTTI_ALIGN_UP(off + len, 4096), m->bytes);
  if (len == 0 || lo >= hi || __atomic_load_n(&unsupported, __ATOMIC_RELAXED)) return;
  span_t *victim = &m->spans[0];
  for (int i = 0; i < PEER_MAP_SPANS; i++) {
    span_t *sp = &m->spans[i];
    if (sp->lo <= lo && hi <= sp->hi) {
      sp->last_use = c->clock;
      return;
    }
    if (sp->last_use < victim->last_use) victim = sp;
  }
  if (madvise(m->base + lo, hi - lo, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
    __atomic_store_n(&unsupported, 1, __ATOMIC_RELAXED);
    return;
  }
  if (touch) memreg_touch(m->base + lo, hi - lo);
  for (int i = 0; i < PEER_MAP_SPANS; i++) { /* the spans it meets join it */
    span_t *sp = &m->spans[i];
    if (sp->hi == 0 || sp->hi < lo || hi < sp->lo) continue;
    lo = TUTTI_MIN(lo, sp->lo), hi = TUTTI_MAX(hi, sp->hi);
    *sp = (span_t){0};
    victim = sp;
  }
  *victim = (span_t){.lo = lo, .hi = hi, .last_use = c->clock};
}

void memreg_touch(const void *p, size_t bytes) {
  for (size_t at = 0; at < bytes; at += 4096) (void)((volatile const char *)p)[at];
}

ncclResult_t memreg_populate_own(ncclComm_t comm, const void *buf, size_t bytes,
                                 const memreg_ref_t *ref) {
  if (!ref->sparse) return ncclSuccess; /* an ncclMemAlloc region: touched whole at its start */
  if (!comm->memreg && !(comm->memreg = calloc(1, sizeof(struct memreg_cache))))
    return TUTTI_ERR(ncclSystemError, "out of memory");
  struct memreg_cache *c = comm->memreg;
  char *base = (char *)buf - ref->offset;
  if (c->own.base != base || c->own.bytes != ref->bytes)
    c->own = (peer_map_t){.base = base, .bytes = ref->bytes};
  c->clock++;
  map_populate(c, &c->own, ref->offset, bytes, 0);
  return ncclSuccess;
}

ncclResult_t memreg_map_peer(ncclComm_t comm, int peer, int pid, const memreg_ref_t *ref,
                             size_t bytes, const char **base) {
  if (!comm->memreg && !(comm->memreg = calloc(1, sizeof(struct memreg_cache))))
    return TUTTI_ERR(ncclSystemError, "out of memory");
  struct memreg_cache *c = comm->memreg;
  peer_map_t *slot = &c->maps[0];
  for (int i = -1; i < PEER_MAP_CACHE; i++) {
    peer_map_t *m = &c->maps[i < 0 ? c->last : i];
    if (map_is(m, pid, ref)) {
      m->last_use = ++c->clock;
      c->last = (int)(m - c->maps);
      if (ref->sparse) map_populate(c, m, ref->offset, bytes, 1);
      *base = m->base;
      return ncclSuccess;
    }
    if (i >= 0 && (!m->base || (slot->base && m->last_use < slot->last_use))) slot = m;
  }
  /* Check that the descriptor still names that region, then map it. */
  char path[64], link[128], want[48];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, ref->fd);
  snprintf(want, sizeof(want), "/memfd:tutti-mem-%llu ", (unsigned long long)ref->id);
  ssize_t len = readlink(path, link, sizeof(link) - 1);
  if (len < 0 || (link[len] = '\0', strncmp(link, want, strlen(want)) != 0))
    return TUTTI_ERR(ncclSystemError, "rank %d cannot see rank %d's %s %llu at %s (%s)", comm->rank,
                     peer, ref->sparse ? "shared-heap arena" : "ncclMemAlloc region",
                     (unsigned long long)ref->id, path, len < 0 ? strerror(errno) : "another file");
  int fd = open(path, O_RDWR | O_CLOEXEC); /* push (algos/push.c) writes into it */
  if (fd < 0)
    return TUTTI_ERR(ncclSystemError, "rank %d cannot open rank %d's region %s: %s", comm->rank,
                     peer, path, strerror(errno));
  /* An ncclMemAlloc region is mapped whole at once; the heap's arena is mostly holes, and its
   * pages are mapped range by range as the collectives use them (map_populate). */
  int flags = ref->sparse ? MAP_SHARED | MAP_NORESERVE : MAP_SHARED | MAP_POPULATE;
  void *p = mmap(NULL, ref->bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED)
    return TUTTI_ERR(ncclSystemError, "rank %d cannot map rank %d's region %llu (%zu bytes): %s",
                     comm->rank, peer, (unsigned long long)ref->id, (size_t)ref->bytes,
                     strerror(err));
  if (slot->base) munmap(slot->base, slot->bytes);
  *slot = (peer_map_t){
      .pid = pid, .id = ref->id, .base = p, .bytes = ref->bytes, .last_use = ++c->clock};
  c->last = (int)(slot - c->maps);
  INFO(SUB_SHM, "mapped rank %d's region %llu (%zu bytes)", peer, (unsigned long long)ref->id,
       (size_t)ref->bytes);
  if (ref->sparse) map_populate(c, slot, ref->offset, bytes, 1);
  *base = p;
  return ncclSuccess;
}

void memreg_comm_free(ncclComm_t comm) {
  struct memreg_cache *c = comm->memreg;
  if (!c) return;
  for (int i = 0; i < PEER_MAP_CACHE; i++)
    if (c->maps[i].base) munmap(c->maps[i].base, c->maps[i].bytes);
  free(c);
  comm->memreg = NULL;
}
