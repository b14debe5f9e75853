/* libtutti-heap.so: malloc and its family, with large blocks from memory the other ranks of the
 * host can map. tutti-run preloads it into every rank (--heap shared, its default).
 *
 * An all-reduce on ordinary heap buffers must copy the peers' data through the FIFOs or read it
 * by copy (process_vm_readv); on buffers the peers can map, the push all-reduce reads and writes
 * them in place and moves half the bytes (docs/perf.md). This library makes the heap such
 * memory: every request of at least TUTTI_HEAP_MIN bytes (64 KiB by default) is carved from one
 * arena, a sparse memfd of TUTTI_HEAP_BYTES (twice the machine's memory by default) mapped
 * shared, and libtutti (memreg.c) finds buffers in it through tutti_heap_region. Smaller
 * requests, requests the arena cannot hold and every pointer from before go to glibc's malloc
 * (its __libc_* entry points), so the program sees one malloc either way.
 * tutti_heap_alloc serves ncclMemAlloc (memreg.c) from the arena too, at any size, so that a
 * process's shareable memory is one memfd that each peer maps once.
 *
 * The arena: blocks are runs of whole pages; the pointer is 64 bytes into the run (or `align`
 * bytes, for posix_memalign up to a page) and the 64 bytes before it say where the run starts
 * and how long it is. Free runs are kept sorted and coalesced, and a request takes the smallest
 * free run that fits, else the untouched pages past `hwm` (which read as zero, so calloc need
 * not clear them). A freed run of 32 MiB or more gives its pages back (a hole punched in the
 * memfd, as glibc unmaps its large chunks); smaller ones stay for reuse.
 *
 * fork: the arena is a shared mapping, so a child would share the parent's blocks instead of
 * getting a copy. The child therefore replaces every live block by a private copy of it (one
 * copy of the live large blocks per fork) and stops serving from the arena. The copy is taken
 * just after the fork, so a block another thread of the parent writes at that moment may be
 * copied partly old and partly new; vfork and posix_spawn copy nothing. TUTTI_HEAP=off turns
 * the arena off in a process that has the library preloaded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "heap_abi.h"
#include "parse_num.h"

#define API __attribute__((visibility("default")))
#define PAGE 4096u
#define HDR 64u                         /* the block header before every pointer */
#define HDR_MAGIC 0x7474686561705f31ull /* "tthheap_1" */
#define PUNCH_MIN (32u << 20)           /* freed runs this long give their pages back */
#define MAX_FREE 8192                   /* free runs remembered; more are left unused */

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

typedef struct hdr {
  uint64_t magic;
  uint64_t off; /* the run's start in the arena */
  uint64_t len; /* the run's bytes (whole pages) */
  uint64_t pad[5];
} hdr_t;
_Static_assert(sizeof(hdr_t) == HDR, "the header is HDR bytes");

typedef struct run {
  uint64_t off, len;
} run_t;

static struct {
  char *base;
  size_t bytes, min, hwm;
  int fd;
  int on;     /* serving new blocks from the arena */
  int shared; /* the arena's live blocks are this process's shared mapping (not yet copied) */
  pthread_mutex_t lock;
  run_t free[MAX_FREE];
  int nfree;
  size_t (*glibc_usable)(void *);
} H = {.fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static size_t page_up(size_t n) {
  return (n + PAGE - 1) & ~(size_t)(PAGE - 1);
}

static int in_arena(const void *p) {
  return H.base && (const char *)p >= H.base && (const char *)p < H.base + H.bytes;
}

/* ---- free runs: sorted by offset, never two adjacent ---- */

static int run_index(uint64_t off) { /* the first run at or after off */
  int lo = 0, hi = H.nfree;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (H.free[mid].off < off)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void run_insert(uint64_t off, uint64_t len) {
  int i = run_index(off);
  int join_prev = i > 0 && H.free[i - 1].off + H.free[i - 1].len == off;
  int join_next = i < H.nfree && off + len == H.free[i].off;
  if (join_prev && join_next) {
    H.free[i - 1].len += len + H.free[i].len;
    memmove(&H.free[i], &H.free[i + 1], (size_t)(H.nfree - i - 1) * sizeof(run_t));
    H.nfree--;
  } else if (join_prev) {
    H.free[i - 1].len += len;
  } else if (join_next) {
    H.free[i].off = off, H.free[i].len += len;
  } else if (H.nfree < MAX_FREE) {
    memmove(&H.free[i + 1], &H.free[i], (size_t)(H.nfree - i) * sizeof(run_t));
    H.free[i] = (run_t){off, len};
    H.nfree++;
  } /* else: the run stays unused (address space only; its pages were not punched) */
}

/* The offset of a run of len bytes, or -1; *fresh = 1 when its pages were never handed out. */
static int64_t run_take(uint64_t len, int *fresh) {
  int best = -1;
  for (int i = 0; i < H.nfree; i++)
    if (H.free[i].len >= len && (best < 0 || H.free[i].len < H.free[best].len)) best = i;
  *fresh = 0;
  if (best >= 0) {
    uint64_t off = H.free[best].off;
    if (H.free[best].len == len) {
      memmove(&H.free[best], &H.free[best + 1], (size_t)(H.nfree - best - 1) * sizeof(run_t));
      H.nfree--;
    } else {
      H.free[best].off += len, H.free[best].len -= len;
    }
    return (int64_t)off;
  }
  if (len > H.bytes - H.hwm) return -1;
  uint64_t off = H.hwm;
  H.hwm += len;
  *fresh = 1;
  return (int64_t)off;
}

/* ---- blocks ---- */

/* A block for size bytes at `align` (a power of two, at most a page), or NULL when the arena
 * does not serve it; any size when `any`, else TUTTI_HEAP_MIN or more. */
static void *arena_alloc(size_t size, size_t align, int *fresh, int any) {
  if (!H.on || (size < H.min && !any) || size > H.bytes || align > PAGE) return NULL;
  size_t lead = align > HDR ? align : HDR;
  size_t len = page_up(lead + size);
  pthread_mutex_lock(&H.lock);
  int64_t off = H.on ? run_take(len, fresh) : -1;
  pthread_mutex_unlock(&H.lock);
  if (off < 0) return NULL;
  char *p = H.base + off + lead;
  hdr_t *h = (hdr_t *)(p - HDR);
  *h = (hdr_t){.magic = HDR_MAGIC, .off = (uint64_t)off, .len = len};
  return p;
}

static hdr_t *block_hdr(void *p) {
  hdr_t *h = (hdr_t *)((char *)p - HDR);
  if (h->magic != HDR_MAGIC || h->off >= H.bytes || (char *)p <= H.base + h->off ||
      (char *)p >= H.base + h->off + h->len) {
    static const char msg[] = "libtutti-heap: free/realloc of a pointer it did not return\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    abort();
  }
  return h;
}

static size_t block_usable(void *p, const hdr_t *h) {
  return (size_t)(H.base + h->off + h->len - (char *)p);
}

static void arena_free(void *p) {
  hdr_t *h = block_hdr(p);
  uint64_t off = h->off, len = h->len;
  h->magic = 0;
  if (!H.shared) { /* a forked child: the block is its private copy; drop all but the header */
    char *run = H.base + off;
    if (len > PAGE) (void)madvise(run + PAGE, len - PAGE, MADV_DONTNEED);
    return;
  }
  if (len >= PUNCH_MIN) /* before the run is free: nobody else may have it yet */
    (void)fallocate(H.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
  pthread_mutex_lock(&H.lock);
  run_insert(off, len);
  pthread_mutex_unlock(&H.lock);
}

/* ---- fork ---- */

static void private_copy(uint64_t off, uint64_t len) {
  char *at = H.base + off;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || (memcpy(p, at, len), 0) ||
      mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
    static const char msg[] =
        "libtutti-heap: a forked child cannot copy its shared-heap blocks (out of memory?)\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    abort();
  }
}

static void before_fork(void) {
  pthread_mutex_lock(&H.lock);
}

static void after_fork_parent(void) {
  pthread_mutex_unlock(&H.lock);
}

static void after_fork_child(void) {
  H.on = 0;
  if (H.shared) {
    uint64_t at = 0;
    for (int i = 0; i <= H.nfree; i++) { /* the live runs lie between the free ones */
      uint64_t end = i < H.nfree ? H.free[i].off : H.hwm;
      if (end > at) private_copy(at, end - at);
      if (i < H.nfree) at = H.free[i].off + H.free[i].len;
    }
    H.shared = 0;
  }
  pthread_mutex_init(&H.lock, NULL);
}

/* ---- set-up ---- */

/* A byte count setting (the library's syntax: 65536, 64K, 16G), dflt when unset or not a
 * positive count (said on stderr). */
static size_t setting(const char *name, size_t dflt) {
  const char *v = getenv(name);
  int64_t n = 0;
  if (!v || !*v) return dflt;
  if (tutti_parse_int(v, &n) == NULL && n > 0) return (size_t)n;
  static const char msg[] =
      "libtutti-heap: TUTTI_HEAP_MIN / TUTTI_HEAP_BYTES take a positive byte count (e.g. 64K, "
      "16G); using the default\n";
  (void)!write(2, msg, sizeof(msg) - 1);
  return dflt;
}

__attribute__((constructor)) static void heap_init(void) {
  H.glibc_usable = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
  const char *mode = getenv("TUTTI_HEAP");
  if (mode && (strcmp(mode, "off") == 0 || strcmp(mode, "0") == 0)) return;
  long pages = sysconf(_SC_PHYS_PAGES);
  size_t mem = pages > 0 ? (size_t)pages * PAGE : (size_t)16 << 30;
  size_t bytes = page_up(setting("TUTTI_HEAP_BYTES", 2 * mem));
  H.min = setting("TUTTI_HEAP_MIN", 64u << 10);
  int fd = memfd_create(TUTTI_HEAP_MEMFD_NAME, MFD_CLOEXEC);
  if (fd < 0) return;
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)bytes) == 0)
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return;
  }
  H.base = p, H.bytes = bytes, H.fd = fd, H.shared = 1;
  if (pthread_atfork(before_fork, after_fork_parent, after_fork_child) != 0) return;
  H.on = 1;
}

API int tutti_heap_region(tutti_heap_region_t *r) {
  if (!H.on || !r) return 0;
  *r = (tutti_heap_region_t){.base = H.base, .bytes = H.bytes, .fd = H.fd};
  return 1;
}

API void *tutti_heap_alloc(size_t bytes) {
  int fresh;
  void *p = arena_alloc(bytes ? bytes : 1, PAGE, &fresh, 1);
  if (p && !fresh) memset(p, 0, bytes);
  return p;
}

/* ---- the malloc family ---- */

API void *malloc(size_t size) {
  int fresh;
  void *p = arena_alloc(size, HDR, &fresh, 0);
  return p ? p : __libc_malloc(size);
}

API void free(void *p) {
  if (!p) return;
  if (in_arena(p))
    arena_free(p);
  else
    __libc_free(p);
}

API void *calloc(size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  int fresh;
  void *p = arena_alloc(bytes, HDR, &fresh, 0);
  if (!p) return __libc_calloc(n, size);
  if (!fresh) memset(p, 0, bytes);
  return p;
}

API void *realloc(void *p, size_t size) {
  if (!p) return malloc(size);
  if (!in_arena(p)) return __libc_realloc(p, size);
  if (size == 0) {
    free(p);
    return NULL;
  }
  size_t have = block_usable(p, block_hdr(p));
  if (size <= have && size >= have / 2) return p; /* fits, and wastes little */
  void *q = malloc(size);
  if (!q) return NULL;
  memcpy(q, p, size < have ? size : have);
  free(p);
  return q;
}

static void *aligned(size_t align, size_t size) {
  int fresh;
  void *p = align & (align - 1) ? NULL : arena_alloc(size, align, &fresh, 0);
  return p ? p : __libc_memalign(align, size);
}

API int posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
  void *p = aligned(align, size);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

API void *aligned_alloc(size_t align, size_t size) {
  return aligned(align, size);
}

API void *memalign(size_t align, size_t size) {
  return aligned(align, size);
}

API void *valloc(size_t size) {
  return aligned(PAGE, size);
}

API void *pvalloc(size_t size) {
  return aligned(PAGE, page_up(size ? size : 1));
}

API size_t malloc_usable_size(void *p) {
  if (!p) return 0;
  if (in_arena(p)) return block_usable(p, block_hdr(p));
  return H.glibc_usable ? H.glibc_usable(p) : 0;
}
