/* The device-memory interface (device.h) emulated on the host, for protocol tests.
 *
 * Device memory: device_emu_alloc reserves an address range with no access rights (PROT_NONE),
 * so any load or store through a device pointer by the library is a SIGSEGV; the bytes live
 * in a separate host block that copies (and the tests, through device_emu_view) reach. So a
 * protocol test that passes shows the host engine never touched a device buffer: every byte
 * went through the proxy's copies.
 * Streams: one thread each, running its queue in order: the application's work
 * (device_emu_stream_call), word writes and word waits (what cuStreamWriteValue32 and
 * cuStreamWaitValue32 do on a GPU). The NULL stream is one process-wide default stream.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "device.h"

/* ---- memory ---- */

typedef struct emu_block {
  char *base; /* reserved, PROT_NONE */
  size_t bytes, reserved;
  char *backing;
  struct emu_block *next;
} emu_block_t;

static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
static emu_block_t *emu_blocks;

void *device_emu_alloc(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t reserved = (bytes + page - 1) / page * page;
  if (!reserved) reserved = page;
  emu_block_t *b = calloc(1, sizeof(*b));
  void *base = mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  char *backing = calloc(1, reserved);
  if (!b || base == MAP_FAILED || !backing) {
    if (base != MAP_FAILED) munmap(base, reserved);
    free(b), free(backing);
    return NULL;
  }
  *b = (emu_block_t){.base = base, .bytes = bytes, .reserved = reserved, .backing = backing};
  pthread_mutex_lock(&emu_lock);
  b->next = emu_blocks, emu_blocks = b;
  pthread_mutex_unlock(&emu_lock);
  return base;
}

void device_emu_free(void *p) {
  pthread_mutex_lock(&emu_lock);
  for (emu_block_t **pp = &emu_blocks; *pp; pp = &(*pp)->next) {
    emu_block_t *b = *pp;
    if (b->base != p) continue;
    *pp = b->next;
    munmap(b->base, b->reserved);
    free(b->backing), free(b);
    break;
  }
  pthread_mutex_unlock(&emu_lock);
}

/* The backing bytes of [p, p + bytes) when that range lies inside one allocation. */
static char *emu_lookup(const void *p, size_t bytes) {
  const char *c = p;
  char *hit = NULL;
  pthread_mutex_lock(&emu_lock);
  for (emu_block_t *b = emu_blocks; b && !hit; b = b->next)
    if (c >= b->base && c < b->base + b->reserved && bytes <= (size_t)(b->base + b->bytes - c))
      hit = b->backing + (c - b->base);
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
  int capturing; /* device_emu_stream_set_capturing */
} emu_stream_t;

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
  return s;
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

static void *emu_current_ctx(void) {
  return NULL;
}
static int emu_bind(void *ctx) {
  (void)ctx;
  return 0;
}
static int emu_host_alloc(void **p, size_t bytes) {
  *p = calloc(1, bytes ? bytes : 1);
  return *p ? 0 : 2;
}
static void emu_host_free(void *p) {
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
  return 0;
}
static void emu_copy_queue_destroy(void *q) {
  (void)q;
}

/* Either side may be emulated device memory (then the whole range must lie in one
 * allocation) or host memory. */
static int emu_copy(void *q, void *dst, const void *src, size_t bytes) {
  (void)q;
  if (!bytes) return 0;
  char *d = emu_mem_kind(dst) == MEM_KIND_DEVICE ? emu_lookup(dst, bytes) : dst;
  const char *s = emu_mem_kind(src) == MEM_KIND_DEVICE ? emu_lookup(src, bytes) : src;
  if (!d || !s) return 1;
  memcpy(d, s, bytes);
  return 0;
}

static const char *emu_error_string(int rc) {
  return rc == 1   ? "copy range outside an emulated device allocation"
         : rc == 2 ? "out of memory"
                   : "unknown emulation error";
}

const device_ops_t device_emu_ops = {
    .name = "host-emulation",
    .mem_kind = emu_mem_kind,
    .current_ctx = emu_current_ctx,
    .bind = emu_bind,
    .host_alloc = emu_host_alloc,
    .host_free = emu_host_free,
    .stream_write = emu_stream_write,
    .stream_wait = emu_stream_wait,
    .stream_capturing = emu_stream_capturing,
    .copy_queue_create = emu_copy_queue_create,
    .copy_queue_destroy = emu_copy_queue_destroy,
    .copy = emu_copy,
    .error_string = emu_error_string,
};
