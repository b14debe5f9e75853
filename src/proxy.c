/* The stream path: NCCL's stream semantics for device buffers, with a host proxy thread per
 * communicator.
 *
 *   user thread (ncclGroupEnd)             stream S (GPU)                proxy thread
 *   seq = ++submitted                      ... work queued before ...
 *   on S: write start[slot] = seq  ----->  start[slot] = seq  --------> sees start[slot] >= seq
 *   on S: wait until done >= seq           (S stalls here)              copies device -> pinned
 *   queue the item, return                                              runs the host engine
 *                                                                       copies pinned -> device
 *                                          S goes on  <---------------  done = seq
 *
 * The words live in pinned host memory the GPU reads and writes (device.h: stream_write,
 * stream_wait), so the call returns at once, the operation starts after the work queued before
 * it, and the work queued after it waits. One group on one communicator is one item: with
 * several streams, every stream writes its own start word and waits on done, so the group
 * starts when all its streams got there and they all go on together. Items run in submission
 * order, which is the same on every rank (as the calls are).
 *
 * Device buffers are staged through a pinned arena of the proxy (one region per buffer; one
 * for both when they overlap, NCCL's in-place layouts): send bytes are copied in before the
 * engine runs, receive bytes are copied out only when it succeeded, so a failed operation
 * writes nothing to the user's buffers. The engine runs the same schedules as for host
 * buffers, on the staging memory; it never touches a device pointer.
 *
 * Device buffers left in place: where every rank's device maps every other's device memory
 * (transport/cuda_p2p.c: CUDA IPC, agreed at setup), a collective whose buffers are both device
 * memory is handed to the planner as it is (op_ctx_t.dev); the planner runs it with an
 * algorithm that runs on the device (direct: kernels read the peers' buffers in place, the copy
 * engine copies) or, when none can, calls pending_t.stage and it is staged as above. Those
 * calls write the user's receive buffer in place, so a failure may leave it partly written
 * (as NCCL's kernels do).
 *
 * Failures: the proxy records the error on the communicator (ncclCommGetAsyncError) and still
 * writes done, so no stream waits forever; ncclCommAbort raises the abort flag the proxy's
 * waits poll, so the items in flight fail at once and release their streams.
 *
 * CUDA graph capture is refused: the hand-off to the proxy happens at call time, so a captured
 * graph, replayed later, would wait on words no proxy item will ever write.
 *
 * The flag words of a proxy are never freed: a stream may still reach its wait on `done` after
 * the communicator is gone (destroy does not wait for the GPU). A stopped proxy's flag page
 * goes to a pool and the next proxy continues its sequence numbers, so a late wait there still
 * sees done >= seq.
 */
#include "proxy.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpulist.h"
#include "device.h"

#define PROXY_SLOTS 256     /* items in flight per communicator */
#define PROXY_MAX_STREAMS 4 /* distinct streams in one group on one communicator */
#define PROXY_STAGE_ALIGN 256

/* Device buffers left in place (cuda_p2p): the reductions run piece by piece, at most this
 * many bytes per kernel launch, the partial sums of 3+ ranks in a device scratch this large. */
TUTTI_PARAM(P2pPieceBytes, "P2P_PIECE_BYTES", 16 << 20)

typedef struct proxy_flags { /* pinned host memory, device-mapped */
  uint32_t start[PROXY_SLOTS][PROXY_MAX_STREAMS];
  uint32_t done;
  struct proxy_flags *next_free; /* in the pool */
} proxy_flags_t;

typedef struct proxy_item {
  uint32_t seq;
  int nstreams;
  void *streams[PROXY_MAX_STREAMS];
  ncclResult_t fail; /* set at submission: complete at once without running */
  proxy_run_fn run;
  size_t n;
  pending_t *ops;
  struct proxy_item *next;
} proxy_item_t;

typedef struct proxy_out { /* a staged receive buffer, copied out after a success */
  void *user;
  const void *staged;
  size_t bytes;
} proxy_out_t;

struct proxy {
  ncclComm_t comm;
  const device_ops_t *dev;
  void *ctx;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  proxy_item_t *head, *tail;
  uint32_t submitted, completed; /* under lock */
  int stop;
  proxy_flags_t *flags;
  /* proxy thread only */
  void *copy_q;
  char *stage;
  size_t stage_bytes;
  char *retired;     /* outgrown arenas, freed when the thread ends (proxy_stage_reserve) */
  char *stage_at;    /* the next free byte of stage while an item is set up and planned */
  void *dev_scratch; /* device memory for partial sums and exchanges (engine_peer.c) */
  pending_t *run;
  proxy_out_t *out;
  size_t run_cap;
};

static pthread_mutex_t proxy_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static proxy_flags_t *proxy_pool;

static int proxy_flags_get(const device_ops_t *dev, proxy_flags_t **f) {
  pthread_mutex_lock(&proxy_pool_lock);
  *f = proxy_pool;
  if (*f) proxy_pool = (*f)->next_free;
  pthread_mutex_unlock(&proxy_pool_lock);
  return *f ? 0 : dev->host_alloc((void **)f, sizeof(proxy_flags_t));
}

static void proxy_flags_put(proxy_flags_t *f) {
  pthread_mutex_lock(&proxy_pool_lock);
  f->next_free = proxy_pool, proxy_pool = f;
  pthread_mutex_unlock(&proxy_pool_lock);
}

static uint64_t proxy_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Polite polling: spin for the first 200 us (latency), then sleep 20 us per look. */
static void proxy_pause(uint64_t since_ns) {
  if (proxy_now_ns() - since_ns < 200000) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

static ncclResult_t proxy_comm_state(ncclComm_t comm) {
  if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE))
    return TUTTI_ERR(ncclInvalidUsage,
                     "rank %d: communicator aborted (ncclCommAbort) while an "
                     "operation waited for its stream",
                     comm->rank);
  int err = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
  if (err != ncclSuccess)
    return TUTTI_ERR((ncclResult_t)err, "rank %d: communicator failed earlier: %s", comm->rank,
                     comm->error_msg);
  return ncclSuccess;
}

/* Until every stream of the item got to it. No time limit: the work before it on the stream
 * may take as long as it takes; abort and failures end the wait. */
static ncclResult_t proxy_wait_start(struct proxy *px, const proxy_item_t *it) {
  volatile uint32_t *start = px->flags->start[it->seq % PROXY_SLOTS];
  uint64_t t0 = proxy_now_ns();
  for (int k = 0; k < it->nstreams; k++) {
    while ((int32_t)(__atomic_load_n(&start[k], __ATOMIC_ACQUIRE) - it->seq) < 0) {
      TUTTI_CHECK(proxy_comm_state(px->comm));
      proxy_pause(t0);
    }
  }
  return ncclSuccess;
}

static ncclResult_t proxy_copy(struct proxy *px, void *dst, const void *src, size_t bytes,
                               const char *what) {
  int rc = px->dev->copy(px->copy_q, dst, src, bytes);
  if (rc)
    return TUTTI_ERR(ncclUnhandledCudaError, "rank %d: %s copy of %zu bytes failed: %s (%d)",
                     px->comm->rank, what, bytes, px->dev->error_string(rc), rc);
  return ncclSuccess;
}

static size_t proxy_align(size_t n) {
  return (n + PROXY_STAGE_ALIGN - 1) / PROXY_STAGE_ALIGN * PROXY_STAGE_ALIGN;
}

static int proxy_overlap(const pending_t *p) {
  const char *s = p->ctx.buf[BUF_SEND], *r = p->ctx.buf[BUF_RECV];
  return p->bytes[0] && p->bytes[1] && s < r + p->bytes[1] && r < s + p->bytes[0];
}

/* Staging bytes one call needs: its device buffers, one region when they overlap. */
static size_t proxy_stage_need(const pending_t *p) {
  if (p->on_device[0] && p->on_device[1] && proxy_overlap(p)) {
    const char *s = p->ctx.buf[BUF_SEND], *r = p->ctx.buf[BUF_RECV];
    const char *lo = s < r ? s : r;
    const char *hi = s + p->bytes[0] > r + p->bytes[1] ? s + p->bytes[0] : r + p->bytes[1];
    return proxy_align((size_t)(hi - lo));
  }
  return proxy_align(p->on_device[0] ? p->bytes[0] : 0) +
         proxy_align(p->on_device[1] ? p->bytes[1] : 0);
}

/* Grows the staging arena (at least doubling). The old arena is not freed here: freeing pinned
 * memory (cuMemFreeHost) waits until the device is idle, and the streams of the item being set
 * up are parked on `done`, which only this thread writes. Old arenas are kept on a list (linked
 * through their first bytes) and freed when the thread ends. */
static ncclResult_t proxy_stage_reserve(struct proxy *px, size_t need) {
  if (need <= px->stage_bytes) return ncclSuccess;
  size_t want = TUTTI_MAX(need, 2 * px->stage_bytes);
  char *fresh = NULL;
  int rc = px->dev->host_alloc((void **)&fresh, want);
  if (rc)
    return TUTTI_ERR(ncclSystemError, "rank %d: pinned staging memory of %zu bytes: %s (%d)",
                     px->comm->rank, want, px->dev->error_string(rc), rc);
  if (px->stage) {
    memcpy(px->stage, &px->retired, sizeof(px->retired));
    px->retired = px->stage;
  }
  px->stage = fresh, px->stage_bytes = want;
  return ncclSuccess;
}

static void proxy_stage_free(struct proxy *px) {
  while (px->retired) {
    char *next;
    memcpy(&next, px->retired, sizeof(next));
    px->dev->host_free(px->retired);
    px->retired = next;
  }
  px->dev->host_free(px->stage);
  px->stage = NULL, px->stage_bytes = 0;
}

static ncclResult_t proxy_run_reserve(struct proxy *px, size_t n) {
  if (n <= px->run_cap) return ncclSuccess;
  pending_t *run = realloc(px->run, n * sizeof(*run));
  if (run) px->run = run;
  proxy_out_t *out = realloc(px->out, n * sizeof(*out));
  if (out) px->out = out;
  if (!run || !out) return TUTTI_ERR(ncclSystemError, "out of memory");
  px->run_cap = n;
  return ncclSuccess;
}

/* One call: its device buffers replaced by staging at *at, send bytes copied in, the receive
 * region remembered for the copy out. */
static ncclResult_t proxy_stage_call(struct proxy *px, pending_t *p, proxy_out_t *out, char **at) {
  char *s = p->ctx.buf[BUF_SEND], *r = p->ctx.buf[BUF_RECV];
  *out = (proxy_out_t){0};
  if (p->on_device[0] && p->on_device[1] && proxy_overlap(p)) {
    char *lo = s < r ? s : r;
    p->ctx.buf[BUF_SEND] = *at + (s - lo), p->ctx.buf[BUF_RECV] = *at + (r - lo);
    *at += proxy_stage_need(p);
  } else {
    if (p->on_device[0]) p->ctx.buf[BUF_SEND] = *at, *at += proxy_align(p->bytes[0]);
    if (p->on_device[1]) p->ctx.buf[BUF_RECV] = *at, *at += proxy_align(p->bytes[1]);
  }
  if (p->on_device[0])
    TUTTI_CHECK(proxy_copy(px, p->ctx.buf[BUF_SEND], s, p->bytes[0], "sendbuff"));
  if (p->on_device[1])
    *out = (proxy_out_t){.user = r, .staged = p->ctx.buf[BUF_RECV], .bytes = p->bytes[1]};
  if (p->scalar_dev)
    TUTTI_CHECK(proxy_copy(px, p->ctx.rop.scalar, p->scalar_dev, p->ctx.esize, "PreMulSum scalar"));
  return ncclSuccess;
}

static TUTTI_TLS struct proxy *proxy_self; /* the proxy this thread is (for proxy_stage_late) */

/* pending_t.stage: the planner found that a call left on the device cannot run there. */
static ncclResult_t proxy_stage_late(pending_t *p) {
  struct proxy *px = proxy_self;
  size_t i = (size_t)(p - px->run);
  p->ctx.dev = NULL, p->stage = NULL;
  return proxy_stage_call(px, p, &px->out[i], &px->stage_at);
}

/* Whether a call's device buffers may stay in place: every buffer it uses is device memory (a
 * buffer of 0 bytes, a non-root's in a rooted collective, is not used) and every rank's device
 * maps every other's (cuda_p2p); the planner then runs it on the device or stages it
 * (proxy_stage_late). Point-to-point calls and device PreMulSum scalars are staged at once. */
static int proxy_keeps_on_device(const struct proxy *px, const pending_t *p) {
  coll_t c = p->args.coll;
  int used_on_device = (p->on_device[0] || !p->bytes[0]) && (p->on_device[1] || !p->bytes[1]);
  return px->comm->dev_peer && used_on_device && (p->on_device[0] || p->on_device[1]) &&
         !p->scalar_dev && c != COLL_SEND && c != COLL_RECV;
}

static size_t proxy_scratch_bytes(void) {
  return (size_t)TUTTI_MAX(tutti_param_P2pPieceBytes(), 4096);
}

static ncclResult_t proxy_keep(struct proxy *px, pending_t *p) {
  p->ctx.dev = px->dev, p->ctx.dev_q = px->copy_q;
  p->ctx.dev_scratch = px->dev_scratch, p->ctx.dev_scratch_bytes = proxy_scratch_bytes();
  p->stage = proxy_stage_late;
  return ncclSuccess;
}

static ncclResult_t proxy_run_item(struct proxy *px, const proxy_item_t *it) {
  if (it->fail != ncclSuccess) return it->fail; /* recorded on the communicator already */
  TUTTI_CHECK(proxy_wait_start(px, it));
  TUTTI_CHECK(proxy_run_reserve(px, it->n));
  size_t need = 0; /* also for the calls kept on the device: the planner may stage them */
  for (size_t i = 0; i < it->n; i++) need += proxy_stage_need(&it->ops[i]);
  TUTTI_CHECK(proxy_stage_reserve(px, need));
  px->stage_at = px->stage;
  for (size_t i = 0; i < it->n; i++) {
    px->run[i] = it->ops[i];
    px->out[i] = (proxy_out_t){0};
    if (proxy_keeps_on_device(px, &px->run[i]))
      TUTTI_CHECK(proxy_keep(px, &px->run[i]));
    else
      TUTTI_CHECK(proxy_stage_call(px, &px->run[i], &px->out[i], &px->stage_at));
  }
  TUTTI_CHECK(it->run(px->run, it->n));
  for (size_t i = 0; i < it->n; i++)
    if (px->out[i].bytes)
      TUTTI_CHECK(proxy_copy(px, px->out[i].user, px->out[i].staged, px->out[i].bytes, "recvbuff"));
  return ncclSuccess;
}

static void proxy_complete(struct proxy *px, proxy_item_t *it, ncclResult_t res) {
  if (res != ncclSuccess) {
    WARN("rank %d: operation %u on the stream path failed: %s", px->comm->rank, it->seq,
         tutti_last_error());
    comm_set_error(px->comm, res, tutti_last_error());
  }
  __atomic_store_n(&px->flags->done, it->seq, __ATOMIC_RELEASE); /* releases the streams */
  pthread_mutex_lock(&px->lock);
  px->completed = it->seq;
  pthread_cond_broadcast(&px->cond);
  pthread_mutex_unlock(&px->lock);
  free(it->ops), free(it);
}

static proxy_item_t *proxy_next(struct proxy *px) {
  pthread_mutex_lock(&px->lock);
  while (!px->head && !px->stop) pthread_cond_wait(&px->cond, &px->lock);
  proxy_item_t *it = px->head;
  if (it) {
    px->head = it->next;
    if (!px->head) px->tail = NULL;
  }
  pthread_mutex_unlock(&px->lock);
  return it;
}

static void *proxy_main(void *arg) {
  struct proxy *px = arg;
  proxy_self = px;
  tutti_log_set_rank(px->comm->rank);
  int rc = px->dev->bind(px->ctx);
  if (rc == 0) rc = px->dev->copy_queue_create(&px->copy_q);
  for (proxy_item_t *it; (it = proxy_next(px));) {
    ncclResult_t res = ncclSuccess;
    if (rc)
      res = TUTTI_ERR(ncclUnhandledCudaError, "rank %d: the proxy thread has no device: %s (%d)",
                      px->comm->rank, px->dev->error_string(rc), rc);
    else
      res = proxy_run_item(px, it);
    proxy_complete(px, it, res);
  }
  /* Every item is done: no stream waits for this thread, so the frees (which wait until the
   * device is idle) can return; unless the communicator was aborted, whose streams may still
   * wait for the caller's own work (ncclCommAbort must return): its device scratch and pinned
   * staging are then left allocated. */
  int aborted = __atomic_load_n(&px->comm->abort_flag, __ATOMIC_ACQUIRE) != 0;
  if (px->dev_scratch && !aborted) px->dev->dev_free(px->dev_scratch);
  px->dev->copy_queue_destroy(px->copy_q);
  if (!aborted) proxy_stage_free(px);
  return NULL;
}

static pthread_mutex_t proxy_create_lock = PTHREAD_MUTEX_INITIALIZER;

/* Where the proxy thread runs (cpulist.h, proxy_cpus_choose): off the CPU of a caller bound to
 * a single CPU, where the thread that waits for the stream spins (CUDA's synchronize calls spin
 * by default) and would leave the proxy a scheduler slice per hand-off; docs/gpu.md, "The proxy
 * thread's CPUs". A proxy left on that CPU gets a WARN, once per process. */
static void proxy_place(ncclComm_t comm, pthread_t thread, int chosen, const cpu_set_t *set,
                        const char *why) {
  static int warned;
  int err = chosen ? pthread_setaffinity_np(thread, sizeof(*set), set) : 0;
  char name[16]; /* the kernel keeps 15 characters */
  snprintf(name, sizeof(name), "tutti-proxy%d", comm->rank);
  (void)pthread_setname_np(thread, name);
  if (chosen && err == 0) {
    cpu_set_t now;
    char list[1024] = "?";
    if (pthread_getaffinity_np(thread, sizeof(now), &now) == 0)
      tutti_cpulist_format(&now, list, sizeof(list));
    INFO(SUB_COLL, "rank %d: proxy thread on CPUs %s: %s", comm->rank, list, why);
    return;
  }
  int cpu = tutti_solo_cpu();
  if (cpu < 0 || sysconf(_SC_NPROCESSORS_ONLN) < 2 ||
      __atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    return;
  char reason[600];
  if (err)
    snprintf(reason, sizeof(reason), "moving it failed: %s", strerror(err));
  else
    snprintf(reason, sizeof(reason), "%s", why);
  WARN(
      "rank %d is bound to CPU %d alone and its proxy thread (device buffers, streams) stays "
      "there (%s): it shares the CPU with the thread that waits for the stream, which can make "
      "every device call slow; bind each rank to two or more CPUs or leave TUTTI_PROXY_CPUS at "
      "auto",
      comm->rank, cpu, reason);
}

static ncclResult_t proxy_start(ncclComm_t comm, struct proxy **out) {
  const device_ops_t *dev = device_get();
  cpu_set_t cpus, taken;
  char cpus_why[512];
  CPU_ZERO(&taken);
  for (int p = 0; p < comm->nranks; p++) /* ranks of this machine bound to one CPU each */
    if (comm->peers[p].machine_hash == comm->peers[comm->rank].machine_hash &&
        comm->peers[p].solo_cpu >= 0 && comm->peers[p].solo_cpu < CPU_SETSIZE)
      CPU_SET(comm->peers[p].solo_cpu, &taken);
  int place = proxy_cpus_choose(&taken, &cpus, cpus_why, sizeof(cpus_why));
  if (place < 0) return ncclInvalidArgument; /* a malformed TUTTI_PROXY_CPUS, error set */
  struct proxy *px = calloc(1, sizeof(*px));
  if (!px) return TUTTI_ERR(ncclSystemError, "out of memory");
  /* The rank's own context (its device), whichever thread makes the first call. The device
   * memory below is taken in it, the caller's own context given back after. */
  int switched = 0;
  void *caller = comm->dev_ctx ? device_switch(dev, comm->dev_ctx, &switched) : dev->current_ctx();
  *px = (struct proxy){.comm = comm, .dev = dev, .ctx = comm->dev_ctx ? comm->dev_ctx : caller};
  int rc = proxy_flags_get(dev, &px->flags);
  if (rc) {
    if (switched) dev->bind(caller);
    free(px);
    return TUTTI_ERR(ncclUnhandledCudaError, "rank %d: pinned flag memory: %s (%d)", comm->rank,
                     dev->error_string(rc), rc);
  }
  /* Device scratch for partial sums (engine_peer.c, more than 2 ranks) and the in-place
   * all-to-all's exchanges, taken here, in the calling thread before any stream waits for this
   * proxy, and never while one does: CUDA's allocation calls may wait for the device. */
  if (comm->dev_peer && comm->nranks > 1)
    rc = dev->dev_alloc(&px->dev_scratch, proxy_scratch_bytes());
  if (switched) dev->bind(caller);
  if (rc) {
    proxy_flags_put(px->flags);
    free(px);
    return TUTTI_ERR(ncclUnhandledCudaError, "rank %d: %zu bytes of device scratch: %s (%d)",
                     comm->rank, proxy_scratch_bytes(), dev->error_string(rc), rc);
  }
  px->submitted = px->completed = __atomic_load_n(&px->flags->done, __ATOMIC_ACQUIRE);
  pthread_mutex_init(&px->lock, NULL);
  pthread_cond_init(&px->cond, NULL);
  if (pthread_create(&px->thread, NULL, proxy_main, px) != 0) {
    if (px->dev_scratch) { /* in the context it was taken in */
      device_switch(dev, px->ctx, &switched);
      dev->dev_free(px->dev_scratch);
      if (switched) dev->bind(caller);
    }
    proxy_flags_put(px->flags);
    free(px);
    return TUTTI_ERR(ncclSystemError, "rank %d: cannot start the proxy thread", comm->rank);
  }
  INFO(SUB_COLL, "rank %d: proxy thread started (device: %s)", comm->rank, dev->name);
  proxy_place(comm, px->thread, place, &cpus, cpus_why);
  *out = px;
  return ncclSuccess;
}

static ncclResult_t proxy_get(ncclComm_t comm, struct proxy **px) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&proxy_create_lock);
  if (!comm->proxy) res = proxy_start(comm, &comm->proxy);
  *px = comm->proxy;
  pthread_mutex_unlock(&proxy_create_lock);
  return res;
}

/* The item's distinct streams, in first-use order; capture is refused. */
static ncclResult_t proxy_streams(struct proxy *px, const pending_t *ops, size_t n, void **streams,
                                  int *ns) {
  *ns = 0;
  for (size_t i = 0; i < n; i++) {
    int k = 0;
    while (k < *ns && streams[k] != ops[i].stream) k++;
    if (k < *ns) continue;
    if (*ns == PROXY_MAX_STREAMS)
      return TUTTI_ERR(ncclInvalidUsage,
                       "rank %d: a group uses more than %d streams on one communicator",
                       px->comm->rank, PROXY_MAX_STREAMS);
    if (px->dev->stream_capturing(ops[i].stream))
      return TUTTI_ERR(ncclInvalidUsage,
                       "rank %d: stream %p is being captured into a CUDA graph; tutti's stream "
                       "path runs operations at call time and does not support graph capture",
                       px->comm->rank, ops[i].stream);
    streams[(*ns)++] = ops[i].stream;
  }
  return ncclSuccess;
}

/* A sequence number with a free slot (at most PROXY_SLOTS items in flight). */
static ncclResult_t proxy_reserve_seq(struct proxy *px, uint32_t *seq) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&px->lock);
  while (px->submitted - px->completed >= PROXY_SLOTS && res == ncclSuccess) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 10000000;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&px->cond, &px->lock, &until);
    res = proxy_comm_state(px->comm);
  }
  if (res == ncclSuccess) *seq = ++px->submitted;
  pthread_mutex_unlock(&px->lock);
  return res;
}

/* Phase one of a submission: the item, its sequence number, and the start words its streams
 * write when they get there. */
static ncclResult_t proxy_item_start(ncclComm_t comm, const pending_t *ops, size_t n,
                                     proxy_run_fn run, proxy_item_t **out) {
  struct proxy *px;
  TUTTI_CHECK(proxy_get(comm, &px));
  proxy_item_t *it = calloc(1, sizeof(*it));
  pending_t *mine = malloc(n * sizeof(*mine));
  if (!it || !mine) {
    free(it), free(mine);
    return TUTTI_ERR(ncclSystemError, "out of memory");
  }
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (ops[i].ctx.comm == comm) mine[m++] = ops[i];
  *it = (proxy_item_t){.run = run, .n = m, .ops = mine};
  ncclResult_t res = proxy_streams(px, mine, m, it->streams, &it->nstreams);
  if (res == ncclSuccess) res = proxy_reserve_seq(px, &it->seq);
  if (res != ncclSuccess) {
    free(mine), free(it);
    return res;
  }
  volatile uint32_t *start = px->flags->start[it->seq % PROXY_SLOTS];
  int rc = 0;
  for (int k = 0; k < it->nstreams && !rc; k++)
    rc = px->dev->stream_write(it->streams[k], &start[k], it->seq);
  if (rc)
    it->fail = TUTTI_ERR(ncclUnhandledCudaError,
                         "rank %d: cannot order the operation on its stream (stream write): %s "
                         "(%d)",
                         comm->rank, px->dev->error_string(rc), rc);
  *out = it;
  return ncclSuccess;
}

/* Phase two: the streams wait for done, and the proxy gets the item. */
static ncclResult_t proxy_item_finish(ncclComm_t comm, proxy_item_t *it) {
  struct proxy *px = comm->proxy;
  int rc = 0;
  for (int k = 0; k < it->nstreams; k++) { /* even after a failure: the proxy writes done */
    int rc2 = px->dev->stream_wait(it->streams[k], &px->flags->done, it->seq);
    if (!rc) rc = rc2;
  }
  if (rc && it->fail == ncclSuccess)
    it->fail = TUTTI_ERR(ncclUnhandledCudaError,
                         "rank %d: cannot order the operation on its stream (stream wait): %s (%d)",
                         comm->rank, px->dev->error_string(rc), rc);
  ncclResult_t res = it->fail;
  if (res != ncclSuccess) comm_set_error(comm, res, tutti_last_error());
  pthread_mutex_lock(&px->lock);
  if (px->tail)
    px->tail->next = it;
  else
    px->head = it;
  px->tail = it;
  pthread_cond_broadcast(&px->cond);
  pthread_mutex_unlock(&px->lock);
  return res;
}

/* All start writes of the group before any wait: ranks of one process whose calls share a
 * stream (one thread driving several ranks) do not wait for each other's operations. */
ncclResult_t proxy_submit(ncclComm_t const *comms, int nc, const pending_t *ops, size_t n,
                          proxy_run_fn run) {
  proxy_item_t **items = calloc((size_t)nc, sizeof(*items));
  if (!items) return TUTTI_ERR(ncclSystemError, "out of memory");
  ncclResult_t res = ncclSuccess;
  int started = 0;
  for (; started < nc && res == ncclSuccess; started++)
    res = proxy_item_start(comms[started], ops, n, run, &items[started]);
  if (res != ncclSuccess) started--; /* comms[started] has no item */
  for (int c = 0; c < started; c++) {
    if (res != ncclSuccess && items[c]->fail == ncclSuccess)
      items[c]->fail = res; /* the group is incomplete: its other items must not run */
    ncclResult_t r = proxy_item_finish(comms[c], items[c]);
    if (res == ncclSuccess) res = r;
  }
  free(items);
  return res;
}

void proxy_drain(ncclComm_t comm) {
  struct proxy *px = comm->proxy;
  if (!px) return;
  pthread_mutex_lock(&px->lock);
  while (px->completed != px->submitted) pthread_cond_wait(&px->cond, &px->lock);
  pthread_mutex_unlock(&px->lock);
}

void proxy_stop(ncclComm_t comm) {
  struct proxy *px = comm->proxy;
  if (!px) return;
  pthread_mutex_lock(&px->lock);
  px->stop = 1;
  pthread_cond_broadcast(&px->cond);
  pthread_mutex_unlock(&px->lock);
  pthread_join(px->thread, NULL); /* runs (or, aborted, fails) what is queued first */
  free(px->run), free(px->out);
  pthread_cond_destroy(&px->cond);
  pthread_mutex_destroy(&px->lock);
  proxy_flags_put(px->flags);
  comm->proxy = NULL;
  free(px);
}
