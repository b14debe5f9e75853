/* ib transport: the registration cache for user buffers, so that ib.c's send_from can write a
 * piece straight from the user's memory instead of copying it into the FIFO arena first.
 *
 * Which buffers. Host memory inside an ncclMemAlloc region (memreg_find_region; private ones too):
 * the region is registered whole on its first use and the entry is keyed by the region's
 * process-unique id, never by address. A buffer from malloc is staged: it may be freed and its
 * address handed out again for other pages, and an MR found by address would then send the old,
 * still pinned pages (nothing here hooks free or munmap; NCCL, too, registers only the buffers a
 * user registers). Device memory (GPUDirect RDMA): the CUDA driver exports the allocation as a
 * dma-buf (cuMemGetHandleForAddressRange) and ibv_reg_dmabuf_mr registers it; both are looked up at
 * run time, so the path is compiled in everywhere and taken where the driver, the NIC's provider
 * and the kernel all support it. The entry is keyed by the allocation's
 * CU_POINTER_ATTRIBUTE_BUFFER_ID (unique per allocation, as the region id is). Nothing reaches it
 * today: the engine hands device buffers to a proxy that stages them through pinned host memory.
 *
 * At most TUTTI_IB_MR_CACHE entries per communicator, least recently used evicted (deregistered);
 * ib_mr_cache_free deregisters the rest when the communicator closes. The entry of a region freed
 * meanwhile is never found again (its id is gone) and keeps its pages pinned until then.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "ib.h"
#include "memreg.h"

TUTTI_PARAM(IbMrCache, "IB_MR_CACHE", 16)

#define MR_KEY_DEVICE (1ull << 63) /* device buffer ids, apart from region ids */

typedef struct ib_mr_entry {
  uint64_t key;  /* region id, or buffer id | MR_KEY_DEVICE; 0: free */
  uint64_t used; /* the cache's clock at the last lookup */
  uintptr_t base;
  size_t bytes;
  struct ibv_mr *mr;
} ib_mr_entry_t;

struct ib_mr_cache {
  int n;
  uint64_t clock;
  ib_mr_entry_t e[];
};

/* ---- device memory: the allocation as a dma-buf ---- */

#define CU_POINTER_ATTRIBUTE_BUFFER_ID 17
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 18
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 19
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

typedef int (*cu_attr_fn)(void *data, int attribute, unsigned long long ptr);
typedef int (*cu_range_fn)(void *handle, unsigned long long ptr, size_t size, int type,
                           unsigned long long flags);

/* The device allocation holding p: its id, start and size. 0, or -1 when not known. */
static int device_range(const void *p, uint64_t *id, uintptr_t *base, size_t *bytes) {
  cu_attr_fn attr = (cu_attr_fn)cuda_driver_symbol("cuPointerGetAttribute");
  unsigned long long start = 0;
  size_t size = 0;
  if (!attr || attr(id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (uintptr_t)p) ||
      attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (uintptr_t)p) ||
      attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (uintptr_t)p))
    return -1;
  *base = (uintptr_t)start, *bytes = size;
  return 0;
}

/* Registers a device allocation through a dma-buf (GPUDirect RDMA); NULL where unsupported. */
static struct ibv_mr *reg_device(ib_state_t *st, uintptr_t base, size_t bytes) {
  cu_range_fn range = (cu_range_fn)cuda_driver_symbol("cuMemGetHandleForAddressRange");
  if (!range || !ib_v.reg_dmabuf_mr) return NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = base & ~(uintptr_t)(page - 1);
  size_t len = TUTTI_ALIGN_UP(base + bytes - start, page);
  int fd = -1;
  if (range(&fd, start, len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) || fd < 0) return NULL;
  struct ibv_mr *mr = ib_v.reg_dmabuf_mr(st->pd, 0, len, start, fd,
                                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  close(fd); /* the MR holds its own reference to the dma-buf */
  if (mr)
    INFO(SUB_NET, "ib: rank %d registered device memory %#lx (%zu bytes) on %s by dma-buf",
         st->comm->rank, (unsigned long)start, len, st->dev);
  return mr;
}

/* ---- the cache ---- */

static ib_mr_entry_t *cache_find(struct ib_mr_cache *c, uint64_t key) {
  for (int i = 0; i < c->n; i++)
    if (c->e[i].key == key) return &c->e[i];
  return NULL;
}

/* A free entry, or the least recently used one deregistered. */
static ib_mr_entry_t *cache_victim(struct ib_mr_cache *c) {
  ib_mr_entry_t *v = &c->e[0];
  for (int i = 0; i < c->n && v->key; i++)
    if (!c->e[i].key || c->e[i].used < v->used) v = &c->e[i];
  if (v->key && v->mr) ib_v.dereg_mr(v->mr);
  memset(v, 0, sizeof(*v));
  return v;
}

/* Where [buf, buf + bytes) can be written from without a copy: its cache key and allocation.
 * 0: it can; -1: it must be staged. */
static int buffer_source(const void *buf, size_t bytes, uint64_t *key, uintptr_t *base,
                         size_t *size, int *device) {
  *device = cuda_driver_mem_kind(buf) == MEM_KIND_DEVICE;
  if (*device) {
    if (device_range(buf, key, base, size)) return -1;
    *key |= MR_KEY_DEVICE;
    return 0;
  }
  memreg_ref_t ref;
  if (!memreg_find_region(buf, bytes, &ref)) return -1;
  *key = ref.id, *base = (uintptr_t)buf - ref.offset, *size = ref.bytes;
  return 0;
}

struct ibv_mr *ib_mr_get(ib_state_t *st, const void *buf, size_t bytes) {
  if (!st->mr_cache) {
    int n = (int)TUTTI_MAX(tutti_param_IbMrCache(), 0);
    st->mr_cache = calloc(1, sizeof(struct ib_mr_cache) + (size_t)n * sizeof(ib_mr_entry_t));
    if (!st->mr_cache) return NULL;
    st->mr_cache->n = n;
  }
  struct ib_mr_cache *c = st->mr_cache;
  uint64_t key;
  uintptr_t base;
  size_t size;
  int device;
  if (c->n == 0 || buffer_source(buf, bytes, &key, &base, &size, &device)) return NULL;
  ib_mr_entry_t *e = cache_find(c, key);
  if (!e) {
    struct ibv_mr *mr = device ? reg_device(st, base, size)
                               : ib_v.reg_mr(st->pd, (void *)base, size,
                                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) return NULL;
    e = cache_victim(c);
    *e = (ib_mr_entry_t){.key = key, .base = base, .bytes = size, .mr = mr};
    st->mr_registered++;
    INFO(SUB_NET, "ib: rank %d registered %s buffer %#lx (%zu bytes) on %s (cache entry %d of %d)",
         st->comm->rank, device ? "device" : "ncclMemAlloc", (unsigned long)base, size, st->dev,
         (int)(e - c->e) + 1, c->n);
  }
  e->used = ++c->clock;
  return e->mr;
}

void ib_mr_cache_free(ib_state_t *st) {
  struct ib_mr_cache *c = st->mr_cache;
  if (!c) return;
  for (int i = 0; i < c->n; i++)
    if (c->e[i].key && c->e[i].mr) ib_v.dereg_mr(c->e[i].mr);
  free(c);
  st->mr_cache = NULL;
}
