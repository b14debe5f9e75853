/* The device-memory interface (device.h) emulated on the host, for protocol tests.
 *
 * Device memory: device_emu_alloc reserves an address range with no access rights (PROT_NONE),
 * so any load or store through a device pointer by the library is a SIGSEGV; the bytes live
 * in a separate host block that copies (and the tests, through device_emu_view) reach. So a
 * protocol test that passes shows the host engine never touched a device buffer: every byte
 * went through the proxy's copies, or through this interface's copy and reduce between device
 * buffers (the peer path, transport/cuda_p2p.c).
 * Peer memory: the bytes of an allocation live in a memfd; its exported handle names the fd
 * in the exporting process, and another process opens it through /proc/<pid>/fd (the same
 * user may), as cuIpcOpenMemHandle opens a peer's allocation. Reductions between device
 * buffers run the host kernels (reduce.c) on the bytes behind them.
 * Streams: one thread each, running its queue in order: the application's work
 * (device_emu_stream_call), word writes and word waits (what cuStreamWriteValue32 and
 * cuStreamWaitValue32 do on a GPU). The NULL stream is one process-wide default stream.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "device.h"
#include "reduce.h"

/* ---- memory ---- */

/* An allocation: its reserved range and the bytes behind it. The bytes of an allocation made
 * here live in a memfd (shared mapping), so another process can open it from an exported
 * handle (/proc/<pid>/fd/<fd>), as CUDA IPC opens another process's device allocation; an
 * opened handle is a block of its own here (imported), with the same bytes behind it. A block
 * allocated before a fork() is shared with the child (a real device allocation is unusable in
 * a forked child anyway); allocate after forking. */
typedef struct emu_block {
  char *base; /* reserved, PROT_NONE */
  size_t bytes, reserved;
  char *backing; /* MAP_SHARED of the memfd */
  int fd;        /* the memfd (-1 for an imported block) */
  int imported;
  uint64_t serial; /* unique in this process: a handle never names a later allocation */
  struct emu_block *next;
} emu_block_t;

static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
static emu_block_t *emu_blocks;
static device_emu_counts_t emu_counts;
static uint64_t emu_serial;

device_emu_counts_t device_emu_counts(void) {
  pthread_mutex_lock(&emu_lock);
  device_emu_counts_t c = emu_counts;
  pthread_mutex_unlock(&emu_lock);
  return c;
}

static void emu_count(uint64_t *counter) {
  pthread_mutex_lock(&emu_lock);
  (*counter)++;
  pthread_mutex_unlock(&emu_lock);
}

/* A new block over `backing` (reserved bytes); NULL when out of address space. */
static void *emu_block_add(char *backing, size_t bytes, size_t reserved, int fd, int imported) {
  emu_block_t *b = calloc(1, sizeof(*b));
  void *base = mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (!b || base == MAP_FAILED) {
    if (base != MAP_FAILED) munmap(base, reserved);
    free(b);
    return NULL;
  }
  *b = (emu_block_t){.base = base,
                     .bytes = bytes,
                     .reserved = reserved,
                     .backing = backing,
                     .fd = fd,
                     .imported = imported};
  pthread_mutex_lock(&emu_lock);
  b->serial = ++emu_serial;
  b->next = emu_blocks, emu_blocks = b;
  pthread_mutex_unlock(&emu_lock);
  return base;
}

void *device_emu_alloc(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t reserved = (bytes + page - 1) / page * page;
  if (!reserved) reserved = page;
  int fd = memfd_create("tutti-emu-device", MFD_CLOEXEC);
  if (fd < 0) return NULL;
  char *backing = MAP_FAILED;
  if (ftruncate(fd, (off_t)reserved) == 0)
    backing = mmap(NULL, reserved, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void *base = backing == MAP_FAILED ? NULL : emu_block_add(backing, bytes, reserved, fd, 0);
  if (!base) {
    if (backing != MAP_FAILED) munmap(backing, reserved);
    close(fd);
  }
  return base;
}

/* Removes the block starting at p (of the given kind); 1 when there was one. */
static int emu_block_remove(void *p, int imported) {
  emu_block_t *found = NULL;
  pthread_mutex_lock(&emu_lock);
  for (emu_block_t **pp = &emu_blocks; *pp; pp = &(*pp)->next)
    if ((*pp)->base == p && (*pp)->imported == imported) {
      found = *pp;
      *pp = found->next;
      break;
    }
  pthread_mutex_unlock(&emu_lock);
  if (!found) return 0;
  munmap(found->base, found->reserved);
  munmap(found->backing, found->reserved);
  if (found->fd >= 0) close(found->fd);
  free(found);
  return 1;
}

void device_emu_free(void *p) {
  emu_block_remove(p, 0);
}

/* The block holding [p, p + bytes), under emu_lock. */
static emu_block_t *emu_find_locked(const void *p, size_t bytes) {
  const char *c = p;
  for (emu_block_t *b = emu_blocks; b; b = b->next)
    if (c >= b->base && c < b->base + b->reserved && bytes <= (size_t)(b->base + b->bytes - c))
      return b;
  return NULL;
}

/* The backing bytes of [p, p + bytes) when that range lies inside one allocation. */
static char *emu_lookup(const void *p, size_t bytes) {
  pthread_mutex_lock(&emu_lock);
  emu_block_t *b = emu_find_locked(p, bytes);
  char *hit = b ? b->backing + ((const char *)p - b->base) : NULL;
  pthread_mutex_unlock(&emu_lock);
  return hit;
}

void *device_emu_view(const void *p) {
  return emu_lookup(p, 0);
}

static mem_kind_t emu_mem_kind(const void *p) {
  return p && emu_lookup(p, 0) ? MEM_KIND_DEVICE : MEM_KIND_HOST;
}

/* ---- streams ---- */

typedef enum { EMU_CALL, EMU_WRITE, EMU_WAIT } emu_op_kind_t;

typedef struct emu_op {
  emu_op_kind_t kind;
  void (*fn)(void *);
  void *arg;
  volatile uint32_t *word;
  uint32_t value;
  struct emu_op *next;
} emu_op_t;

typedef struct emu_stream {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  emu_op_t *head, *tail;
  uint64_t queued, ran;
  int stop;
  int capturing;           /* device_emu_stream_set_capturing */
  struct emu_stream *next; /* emu_streams */
} emu_stream_t;

/* Every stream (for emu_device_idle). Stream threads never take this lock. */
static pthread_mutex_t emu_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static emu_stream_t *emu_streams;

static void emu_sleep_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

/* A GPU waits on the word as long as it takes; here the wait gives up after 10 minutes (a
 * broken proxy then shows as wrong values, not as a hung test process). */
static void emu_wait_word(volatile uint32_t *word, uint32_t value) {
  for (long waited_us = 0; (int32_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - value) < 0;
       waited_us += 20) {
    if (waited_us > 600L * 1000 * 1000) {
      WARN("device emulation: stream waited 10 minutes for a word to reach %u; going on", value);
      return;
    }
    emu_sleep_us(20);
  }
}

static void emu_run_op(emu_op_t *op) {
  if (op->kind == EMU_CALL) op->fn(op->arg);
  if (op->kind == EMU_WRITE) __atomic_store_n(op->word, op->value, __ATOMIC_RELEASE);
  if (op->kind == EMU_WAIT) emu_wait_word(op->word, op->value);
}

static void *emu_stream_main(void *arg) {
  emu_stream_t *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
    if (!s->head) break;
    emu_op_t *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    emu_run_op(op);
    free(op);
    pthread_mutex_lock(&s->lock);
    s->ran++;
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

void *device_emu_stream_create(void) {
  emu_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  if (pthread_create(&s->thread, NULL, emu_stream_main, s) != 0) {
    free(s);
    return NULL;
  }
  pthread_mutex_lock(&emu_streams_lock);
  s->next = emu_streams, emu_streams = s;
  pthread_mutex_unlock(&emu_streams_lock);
  return s;
}

/* CUDA's frees of pinned and device memory (cuMemFreeHost, cuMemFree) wait until the device
 * ran everything queued on every stream. So do these: a free called while a stream waits for
 * work that only the calling thread would do hangs on a GPU; here it ends the process after
 * 10 s, naming the cause, so a protocol test fails instead of hanging. */
static void emu_device_idle(const char *what) {
  pthread_mutex_lock(&emu_streams_lock);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  for (emu_stream_t *s = emu_streams; s; s = s->next) {
    pthread_mutex_lock(&s->lock);
    uint64_t target = s->queued;
    int rc = 0;
    while (s->ran < target && rc == 0) rc = pthread_cond_timedwait(&s->cond, &s->lock, &until);
    int idle = s->ran >= target;
    pthread_mutex_unlock(&s->lock);
    if (!idle) {
      WARN(
          "device emulation: %s waits until every stream ran its queue, as CUDA's does, and a "
          "stream has not in 10 s: on a GPU this free would hang (a stream waits for work that "
          "only the freeing thread would do)",
          what);
      abort();
    }
  }
  pthread_mutex_unlock(&emu_streams_lock);
}

static emu_stream_t *emu_default;
static pthread_once_t emu_default_once = PTHREAD_ONCE_INIT;
static void emu_default_make(void) {
  emu_default = device_emu_stream_create();
}

static emu_stream_t *emu_stream(void *stream) {
  if (stream) return stream;
  pthread_once(&emu_default_once, emu_default_make);
  return emu_default;
}

/* Ends the stream's thread after everything queued ran. */
void device_emu_stream_destroy(void *stream) {
  emu_stream_t *s = stream;
  if (!s || s == emu_default) return;
  pthread_mutex_lock(&emu_streams_lock);
  for (emu_stream_t **pp = &emu_streams; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  pthread_mutex_unlock(&emu_streams_lock);
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static int emu_push(void *stream, emu_op_t op) {
  emu_stream_t *s = emu_stream(stream);
  emu_op_t *o = malloc(sizeof(*o));
  if (!s || !o) {
    free(o);
    return 2; /* out of memory */
  }
  *o = op;
  o->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->queued++;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

void device_emu_stream_call(void *stream, void (*fn)(void *), void *arg) {
  emu_push(stream, (emu_op_t){.kind = EMU_CALL, .fn = fn, .arg = arg});
}

int device_emu_stream_sync(void *stream, int64_t timeout_ms) {
  emu_stream_t *s = emu_stream(stream);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  int rc = 0;
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->queued;
  while (s->ran < target && rc == 0) rc = pthread_cond_timedwait(&s->cond, &s->lock, &until);
  int done = s->ran >= target;
  pthread_mutex_unlock(&s->lock);
  return done ? 0 : -1;
}

static int emu_stream_write(void *stream, volatile uint32_t *word, uint32_t value) {
  return emu_push(stream, (emu_op_t){.kind = EMU_WRITE, .word = word, .value = value});
}

static int emu_stream_wait(void *stream, volatile uint32_t *word, uint32_t value) {
  return emu_push(stream, (emu_op_t){.kind = EMU_WAIT, .word = word, .value = value});
}

/* ---- the rest of the interface ---- */

static _Thread_local int emu_has_context;
static char emu_context; /* what current_ctx answers for a thread that has one */
void device_emu_set_context(int on) {
  emu_has_context = on;
}
static void *emu_current_ctx(void) {
  return emu_has_context ? &emu_context : NULL;
}
/* 1 where CUDA would fail for want of a current context (CUDA_ERROR_INVALID_CONTEXT): the
 * device's identity, device and pinned memory (taking, registering and giving it back), IPC
 * mappings' release and the proxy's copy queue need one (TUTTI_DEVICE_EMULATION_CONTEXT=0
 * lifts the check). */
#define EMU_INVALID_CONTEXT 201
static int emu_context_missing(void) {
  const char *lax = tutti_getenv("DEVICE_EMULATION_CONTEXT");
  return !emu_has_context && !(lax && strcmp(lax, "0") == 0);
}
/* A free or unmap CUDA would refuse for want of a context (the memory would stay taken on a
 * GPU): in the emulation a bug of the library that stops the process, naming the call. */
static void emu_release_needs_context(const char *call) {
  if (!emu_context_missing()) return;
  fprintf(stderr,
          "tutti device emulation: %s without a current device context: CUDA refuses it "
          "(CUDA_ERROR_INVALID_CONTEXT) and the memory stays allocated\n",
          call);
  abort();
}
static int emu_bind(void *ctx) {
  emu_has_context = ctx != NULL;
  return 0;
}
static int emu_ordinal(void) {
  return emu_has_context ? 0 : -1;
}
static void *emu_device_ctx(int ordinal) {
  return ordinal == 0 ? &emu_context : NULL;
}
static int emu_host_alloc(void **p, size_t bytes) {
  *p = NULL;
  if (emu_context_missing()) return EMU_INVALID_CONTEXT; /* cuMemHostAlloc: a context's */
  *p = calloc(1, bytes ? bytes : 1);
  return *p ? 0 : 2;
}
static void emu_host_free(void *p) {
  if (!p) return;
  emu_release_needs_context("cuMemFreeHost");
  emu_device_idle("freeing pinned memory (cuMemFreeHost)");
  free(p);
}
static int emu_stream_capturing(void *stream) {
  return __atomic_load_n(&emu_stream(stream)->capturing, __ATOMIC_ACQUIRE);
}

void device_emu_stream_set_capturing(void *stream, int on) {
  __atomic_store_n(&emu_stream(stream)->capturing, on, __ATOMIC_RELEASE);
}
static int emu_copy_queue_create(void **q) {
  *q = NULL;
  return emu_context_missing() ? EMU_INVALID_CONTEXT : 0;
}
static void emu_copy_queue_destroy(void *q) {
  (void)q;
}

/* Either side may be emulated device memory (then the whole range must lie in one
 * allocation) or host memory. */
static int emu_copy(void *q, void *dst, const void *src, size_t bytes) {
  (void)q;
  if (!bytes) return 0;
  int dd = emu_mem_kind(dst) == MEM_KIND_DEVICE, sd = emu_mem_kind(src) == MEM_KIND_DEVICE;
  char *d = dd ? emu_lookup(dst, bytes) : dst;
  const char *s = sd ? emu_lookup(src, bytes) : src;
  if (!d || !s) return 1;
  memcpy(d, s, bytes);
  emu_count(dd && sd ? &emu_counts.dev_copies : &emu_counts.staging_copies);
  return 0;
}

/* The load/store copy: the same bytes as emu_copy, counted apart (which copy the engine chose). */
static int emu_copy_ldst(void *q, void *dst, const void *src, size_t bytes) {
  (void)q;
  if (!bytes) return 0;
  char *d = emu_lookup(dst, bytes);
  const char *s = emu_lookup(src, bytes);
  if (!d || !s) return 1;
  memmove(d, s, bytes);
  emu_count(&emu_counts.ldst_copies);
  return 0;
}

/* ---- peer memory ---- */

typedef struct emu_ipc { /* the bytes of an exported handle */
  uint64_t magic;
  int32_t pid, fd; /* the memfd in the exporting process */
  uint64_t bytes, reserved, serial;
} emu_ipc_t;
#define EMU_IPC_MAGIC 0x74757474692d6970ull
_Static_assert(sizeof(emu_ipc_t) <= DEVICE_IPC_BYTES, "emulated handle must fit");

/* One emulated device per process, all reaching each other; TUTTI_DEVICE_EMULATION_ID (a
 * number) gives a process another device, which no other device reaches (for tests of the
 * fallback between devices without peer access). */
static int emu_device_id(unsigned char id[DEVICE_ID_BYTES]) {
  if (emu_context_missing()) return EMU_INVALID_CONTEXT;
  const char *which = tutti_getenv("DEVICE_EMULATION_ID");
  memset(id, 0, DEVICE_ID_BYTES);
  snprintf((char *)id, DEVICE_ID_BYTES, "emu-%s", which ? which : "0");
  return 0;
}

static int emu_can_reach(const unsigned char mine[DEVICE_ID_BYTES],
                         const unsigned char theirs[DEVICE_ID_BYTES]) {
  return memcmp(mine, theirs, DEVICE_ID_BYTES) == 0;
}

static int emu_ipc_export(const void *p, size_t bytes, unsigned char h[DEVICE_IPC_BYTES],
                          size_t *offset) {
  pthread_mutex_lock(&emu_lock);
  emu_block_t *b = emu_find_locked(p, bytes);
  emu_ipc_t e = {0};
  if (b && !b->imported)
    e = (emu_ipc_t){.magic = EMU_IPC_MAGIC,
                    .pid = (int32_t)getpid(),
                    .fd = b->fd,
                    .bytes = b->bytes,
                    .reserved = b->reserved,
                    .serial = b->serial};
  if (b) *offset = (size_t)((const char *)p - b->base);
  pthread_mutex_unlock(&emu_lock);
  if (!e.magic) return 3; /* not an allocation of this process */
  memset(h, 0, DEVICE_IPC_BYTES);
  memcpy(h, &e, sizeof(e));
  return 0;
}

static int emu_ipc_open(const unsigned char h[DEVICE_IPC_BYTES], void **base) {
  emu_ipc_t e;
  memcpy(&e, h, sizeof(e));
  *base = NULL;
  if (e.magic != EMU_IPC_MAGIC) return 4;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)e.pid, (int)e.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return 5; /* the exporting process is gone (or freed the allocation) */
  struct stat st;
  char *backing = MAP_FAILED;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == e.reserved)
    backing = mmap(NULL, e.reserved, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (backing == MAP_FAILED) return 5;
  *base = emu_block_add(backing, e.bytes, e.reserved, -1, 1);
  if (!*base) munmap(backing, e.reserved);
  if (*base) emu_count(&emu_counts.ipc_opens);
  return *base ? 0 : 2;
}

static void emu_ipc_close(void *base) {
  emu_release_needs_context("cuIpcCloseMemHandle");
  emu_block_remove(base, 1);
}

static int emu_dev_alloc(void **p, size_t bytes) {
  *p = NULL;
  if (emu_context_missing()) return EMU_INVALID_CONTEXT; /* cuMemAlloc: in the current context */
  *p = device_emu_alloc(bytes);
  return *p ? 0 : 2;
}

static void emu_dev_free(void *p) {
  if (!p) return;
  emu_release_needs_context("cuMemFree");
  emu_device_idle("freeing device memory (cuMemFree)");
  device_emu_free(p);
}

/* The host kernels on the bytes behind the three ranges (what the CUDA kernel computes with
 * the same element-wise functions, reduce_ops.h). */
static int emu_reduce(void *q, void *dst, const void *a, const void *b, size_t count,
                      const reduce_op_t *op, int flags) {
  (void)q;
  size_t bytes = count * tuttiTypeSize(op->type);
  char *d = emu_lookup(dst, bytes);
  const char *x = emu_lookup(a, bytes), *y = b ? emu_lookup(b, bytes) : NULL;
  if (!d || !x || (b && !y)) return 1;
  if (y)
    reduce_combine(op, d, x, y, count, flags);
  else
    reduce_copy(op, d, x, count, flags);
  emu_count(&emu_counts.dev_reduces);
  return 0;
}

/* ---- the small-call path: copies and reductions run by the stream ---- */

static int emu_host_register(void *p, size_t bytes, void **dev) {
  (void)bytes;
  *dev = NULL;
  if (emu_context_missing()) return EMU_INVALID_CONTEXT; /* cuMemHostRegister: a context's */
  *dev = p; /* host memory is what the emulated device reaches */
  return 0;
}

static void emu_host_unregister(void *p) {
  if (p) emu_release_needs_context("cuMemHostUnregister");
}

/* Host bytes behind a device-reachable address: emulated device memory or host memory. */
static char *emu_reach(const void *p, size_t bytes) {
  return emu_mem_kind(p) == MEM_KIND_DEVICE ? emu_lookup(p, bytes) : (char *)p;
}

typedef struct emu_work { /* one copy or reduction queued on a stream */
  void *dst;
  const void *in[8];
  int n; /* 1: a copy of bytes; else a reduction of count elements */
  size_t bytes, count;
  reduce_op_t op;
  const volatile uint32_t *skip; /* NULL: never skipped */
  int engine;                    /* a copy engine's copy (stream_memcpy), not a kernel's */
} emu_work_t;

/* On the stream's thread: what the kernel does (a missing range: nothing written, a WARN,
 * as a faulting kernel would leave it). */
static void emu_work_run(void *arg) {
  emu_work_t *w = arg;
  if (!w->skip || !__atomic_load_n(w->skip, __ATOMIC_ACQUIRE)) {
    char *d = emu_reach(w->dst, w->bytes);
    const char *x[8];
    int ok = d != NULL;
    for (int k = 0; k < w->n; k++) ok &= (x[k] = emu_reach(w->in[k], w->bytes)) != NULL;
    if (!ok) {
      WARN("device emulation: a stream %s named memory outside any allocation",
           w->n == 1 ? "copy" : "reduction");
    } else if (w->n == 1) {
      memmove(d, x[0], w->bytes);
      emu_count(w->engine ? &emu_counts.stream_memcpys : &emu_counts.stream_copies);
    } else {
      for (int k = 1; k < w->n; k++) /* left to right: ((x0 OP x1) OP x2) ... */
        reduce_combine(&w->op, d, k == 1 ? x[0] : d, x[k], w->count,
                       k == w->n - 1 ? REDUCE_POST : 0);
      emu_count(&emu_counts.stream_reduces);
    }
  }
  free(w);
}

/* Queues a copy or reduction; the work is freed when it ran, or here when it cannot be queued. */
static int emu_push_work(void *stream, emu_work_t *w) {
  int rc = emu_push(stream, (emu_op_t){.kind = EMU_CALL, .fn = emu_work_run, .arg = w});
  if (rc) free(w);
  return rc;
}

static int emu_stream_copy(void *stream, void *dst, const void *src, size_t bytes,
                           const volatile uint32_t *skip) {
  emu_work_t *w = malloc(sizeof(*w));
  if (!w) return 2;
  *w = (emu_work_t){.dst = dst, .in = {src}, .n = 1, .bytes = bytes, .skip = skip};
  return emu_push_work(stream, w);
}

/* A copy engine's copy: the work of a stream copy, never skipped, counted apart. */
static int emu_stream_memcpy(void *stream, void *dst, const void *src, size_t bytes) {
  emu_work_t *w = malloc(sizeof(*w));
  if (!w) return 2;
  *w = (emu_work_t){.dst = dst, .in = {src}, .n = 1, .bytes = bytes, .engine = 1};
  return emu_push_work(stream, w);
}

static int emu_stream_reduce_n(void *stream, void *dst, const void *const *in, int n, size_t count,
                               const reduce_op_t *op, const volatile uint32_t *skip) {
  if (n < 2 || n > 8) return 1;
  emu_work_t *w = malloc(sizeof(*w));
  if (!w) return 2;
  *w = (emu_work_t){.dst = dst,
                    .n = n,
                    .bytes = count * tuttiTypeSize(op->type),
                    .count = count,
                    .op = *op,
                    .skip = skip};
  memcpy(w->in, in, (size_t)n * sizeof(*in));
  return emu_push_work(stream, w);
}

static const char *emu_error_string(int rc) {
  return rc == 1                     ? "range outside an emulated device allocation"
         : rc == 2                   ? "out of memory"
         : rc == 3                   ? "not an emulated device allocation of this process"
         : rc == 4                   ? "not an emulated IPC handle"
         : rc == 5                   ? "cannot open the exporting process's memory (process gone?)"
         : rc == EMU_INVALID_CONTEXT ? "no current device context on this thread"
                                     : "unknown emulation error";
}

const device_ops_t device_emu_ops = {
    .name = "host-emulation",
    .mem_kind = emu_mem_kind,
    .current_ctx = emu_current_ctx,
    .bind = emu_bind,
    .ordinal = emu_ordinal,
    .device_ctx = emu_device_ctx,
    .host_alloc = emu_host_alloc,
    .host_free = emu_host_free,
    .stream_write = emu_stream_write,
    .stream_wait = emu_stream_wait,
    .stream_capturing = emu_stream_capturing,
    .copy_queue_create = emu_copy_queue_create,
    .copy_queue_destroy = emu_copy_queue_destroy,
    .copy = emu_copy,
    .error_string = emu_error_string,
    .device_id = emu_device_id,
    .can_reach = emu_can_reach,
    .ipc_export = emu_ipc_export,
    .ipc_open = emu_ipc_open,
    .ipc_close = emu_ipc_close,
    .dev_alloc = emu_dev_alloc,
    .dev_free = emu_dev_free,
    .reduce = emu_reduce,
    .copy_ldst = emu_copy_ldst,
    .host_register = emu_host_register,
    .host_unregister = emu_host_unregister,
    .stream_copy = emu_stream_copy,
    .stream_reduce_n = emu_stream_reduce_n,
    .stream_memcpy = emu_stream_memcpy,
};
