/* The small-call path: an all-reduce of a few KiB on device buffers between the ranks of one
 * host, run by the caller's stream alone. The proxy path (proxy.c) costs a hand-off to a host
 * thread, a handshake and synchronous copies per call; this one is five stream operations and
 * no host thread:
 *
 *   stream S of rank r, call s (the s-th small call of the communicator, alike on every rank)
 *   1. copy        sendbuff -> slot[s & 1] of r's region      (a kernel: loads and stores)
 *   2. arrive      for every peer p: p's region inbox[r] = s   (stream write, fenced)
 *   3. wait        for every peer p: r's region inbox[p] >= s  (stream wait)
 *   4. reduce      recvbuff = slot_0 OP slot_1 OP ... OP slot_{n-1}, all [s & 1], rank order
 *   5. done        r's region done = s
 *
 * Each rank's region is host memory shared by every rank of the host (a memfd every process
 * maps, registered with the device: kernels read it over PCIe, stream operations write and
 * wait on its words):
 *
 *   region of rank r (slot bytes B = the agreed TUTTI_SMALL_BYTES, rounded up to 256)
 *   [0, 640)             words: inbox[8] (one 64-byte line each; inbox[p] written by p's
 *                        stream), skip (set by abort: kernels write nothing), done
 *   [1024, 1024 + B)     slot[0]: r's input of its even calls
 *   [1024 + B, 1024+2B)  slot[1]: r's input of its odd calls
 *
 * Why two slots suffice: rank p overwrites slot_p[s & 1] at its call s, after its call s - 1
 * waited for every rank's arrival at s - 1, which each rank writes after its reduction of call
 * s - 2, the last one to read that slot. The reduction folds in rank order, so every rank gets
 * the same bits (the oneshot algorithm's order, algos/oneshot.c); the call is that algorithm
 * run by the device, so TUTTI_ALGO without oneshot turns this path off.
 *
 * Abort: the host sets skip (the kernels then write nothing) and writes past every waited-for
 * value into its own inbox words, again and again for at most 200 ms while its stream has small
 * calls left (a peer's stream may write a smaller value there once more: every value a peer
 * writes after this rank's first pending call is at least that call's number, which releases
 * it, but not the calls behind it). Regions a stream may still use are never unmapped: when
 * the stream is held by earlier work past those 200 ms, they stay mapped (skip set). A peer whose
 * process ends while this rank's stream waits for it: the next ncclCommGetAsyncError (PyTorch's
 * watchdog polls it) finds the process gone, fails the communicator naming the rank and releases
 * the stream as abort does (small_check). A peer that is alive but never calls keeps the stream
 * waiting, as NCCL's kernels do, until abort.
 */
#include "small.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "algos/registry.h"
#include "bootstrap.h"
#include "comm.h"
#include "device.h"

/* TUTTI_SMALL_BYTES: the largest all-reduce (bytes) that runs on the small path; 0 turns it
 * off. Read at each communicator's init; the ranks take the smallest value among them. */
#define SMALL_BYTES_DEFAULT (64 << 10)

#define SMALL_MAX_RANKS 8
#define SMALL_WORDS_BYTES 1024

typedef struct small_words { /* the head of a region: one 64-byte line per word */
  uint32_t inbox[SMALL_MAX_RANKS][16];
  uint32_t skip[16];
  uint32_t done[16];
} small_words_t;
_Static_assert(sizeof(small_words_t) <= SMALL_WORDS_BYTES, "words must fit their header");

typedef struct small_state {
  int n, me;
  size_t slot_bytes, region_bytes;
  int fd;                     /* this rank's memfd */
  char *map[SMALL_MAX_RANKS]; /* rank p's region in this process */
  char *dev[SMALL_MAX_RANKS]; /* the same, as the device reaches it */
  int registered[SMALL_MAX_RANKS];
  uint32_t seq; /* small calls submitted */
} small_state_t;

typedef struct small_info { /* what a rank tells the others at setup */
  int32_t ok, pid, fd, pad;
  uint64_t slot_bytes;
} small_info_t;

static small_words_t *small_words(const small_state_t *st, int p) {
  return (small_words_t *)st->map[p];
}

static void *small_slot_dev(const small_state_t *st, int p, uint32_t s) {
  return st->dev[p] + SMALL_WORDS_BYTES + (s & 1) * st->slot_bytes;
}

static void small_unmap(small_state_t *st) {
  const device_ops_t *dev = device_get();
  for (int p = 0; p < st->n; p++) {
    if (st->registered[p]) dev->host_unregister(st->map[p]);
    if (st->map[p]) munmap(st->map[p], st->region_bytes);
  }
  if (st->fd >= 0) close(st->fd);
  free(st);
}

static size_t small_round(uint64_t bytes) {
  return (size_t)((bytes + 255) / 256 * 256);
}

/* This rank's region: a memfd sized for this rank's own limit before any peer may map it (the
 * agreed limit, the smallest, fits every rank's file). */
static int small_create(small_state_t *st, uint64_t limit, char *why, size_t len) {
  st->fd = memfd_create("tutti-small", MFD_CLOEXEC);
  if (st->fd < 0 || ftruncate(st->fd, (off_t)(SMALL_WORDS_BYTES + 2 * small_round(limit))) != 0) {
    snprintf(why, len, "memfd: %s", strerror(errno));
    return -1;
  }
  return 0;
}

/* Maps rank p's region (pid, fd) here and registers it with the device. */
static int small_map(small_state_t *st, int p, const small_info_t *in, char *why, size_t len) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)in->pid, (int)in->fd);
  int fd = p == st->me ? st->fd : open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, len, "cannot open rank %d's region (%s): %s", p, path, strerror(errno));
    return -1;
  }
  void *m = mmap(NULL, st->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (fd != st->fd) close(fd);
  if (m == MAP_FAILED) {
    snprintf(why, len, "cannot map rank %d's region: %s", p, strerror(errno));
    return -1;
  }
  st->map[p] = m;
  const device_ops_t *dev = device_get();
  void *d = NULL;
  int rc = dev->host_register(m, st->region_bytes, &d);
  if (rc) {
    snprintf(why, len, "cannot register rank %d's region with the device: %s (%d)", p,
             dev->error_string(rc), rc);
    return -1;
  }
  st->registered[p] = 1, st->dev[p] = d;
  return 0;
}

/* This rank's part of the setup: the region (ok = 1) or why not (ok = 0). */
static void small_prepare(small_state_t *st, small_info_t *mine, char *why, size_t len) {
  const device_ops_t *dev = device_get();
  unsigned char id[DEVICE_ID_BYTES];
  int64_t limit = tutti_param_fresh("SMALL_BYTES", SMALL_BYTES_DEFAULT);
  *mine = (small_info_t){.pid = (int32_t)getpid(), .fd = -1};
  if (limit <= 0)
    snprintf(why, len, "set TUTTI_SMALL_BYTES=%lld", (long long)limit);
  else if (!dev || dev->device_id(id) != 0)
    snprintf(why, len, "has no device usable for it");
  else if (small_create(st, (uint64_t)limit, why, len) == 0)
    *mine = (small_info_t){
        .ok = 1, .pid = (int32_t)getpid(), .fd = st->fd, .slot_bytes = (uint64_t)limit};
}

/* Every rank logs who turned the path off; that rank says why. */
static void small_log_off(ncclComm_t comm, int first, const char *why) {
  if (first == comm->rank)
    INFO(SUB_INIT, "small-call path off on every rank: rank %d %s", first, why);
  else
    INFO(SUB_INIT, "small-call path off on every rank: rank %d turned it off", first);
}

/* Maps every region; 0, or -1 with why. */
static int small_map_all(small_state_t *st, const small_info_t *all, char *why, size_t len) {
  for (int p = 0; p < st->n; p++)
    if (small_map(st, p, &all[p], why, len)) return -1;
  return 0;
}

ncclResult_t small_agree(ncclComm_t comm) {
  int n = comm->nranks;
  comm->small = NULL;
  if (comm->nhosts != 1 || n < 2 || n > SMALL_MAX_RANKS) return ncclSuccess;
  small_state_t *st = calloc(1, sizeof(*st));
  small_info_t *all = calloc((size_t)n, sizeof(*all));
  int32_t *verdict = calloc((size_t)n, sizeof(*verdict));
  char why[256] = "";
  ncclResult_t res = ncclSuccess;
  if (!st || !all || !verdict) {
    res = TUTTI_ERR(ncclSystemError, "out of memory");
    goto out;
  }
  *st = (small_state_t){.n = n, .me = comm->rank, .fd = -1};
  small_prepare(st, &all[comm->rank], why, sizeof(why));
  TUTTI_CHECK_GOTO(bootstrap_allgather(comm, all, sizeof(*all)), res, out);
  uint64_t bytes = UINT64_MAX; /* the smallest limit: every rank takes the same calls */
  int first_off = -1;
  for (int p = 0; p < n; p++) {
    if (!all[p].ok && first_off < 0) first_off = p;
    if (all[p].slot_bytes < bytes) bytes = all[p].slot_bytes;
  }
  if (first_off >= 0) {
    small_log_off(comm, first_off, why);
    goto out;
  }
  st->slot_bytes = small_round(bytes);
  st->region_bytes = SMALL_WORDS_BYTES + 2 * st->slot_bytes;
  verdict[comm->rank] = small_map_all(st, all, why, sizeof(why)) == 0;
  TUTTI_CHECK_GOTO(bootstrap_allgather(comm, verdict, sizeof(*verdict)), res, out);
  for (int p = 0; p < n && first_off < 0; p++)
    if (!verdict[p]) first_off = p;
  if (first_off >= 0) {
    small_log_off(comm, first_off, why);
    goto out;
  }
  INFO(SUB_INIT,
       "small-call path: all-reduces of at most %zu bytes on device buffers run on the "
       "caller's stream (one-shot through shared host memory, %d ranks)",
       st->slot_bytes, n);
  comm->small = st, st = NULL;
out:
  if (st) small_unmap(st);
  free(all);
  free(verdict);
  return res;
}

int small_eligible(const pending_t *p) {
  ncclComm_t comm = p->ctx.comm;
  const small_state_t *st = comm->small;
  return st && p->args.coll == COLL_ALLREDUCE && p->on_device[0] && p->on_device[1] &&
         !p->scalar_dev && !p->ctx.rop.premul && p->bytes[1] > 0 && p->bytes[1] <= st->slot_bytes &&
         (comm->algo_mask[COLL_ALLREDUCE] & (1u << ALGO_ONESHOT)) &&
         !device_get()->stream_capturing(p->stream);
}

static ncclResult_t small_fail(ncclComm_t comm, const char *what, int rc) {
  const device_ops_t *dev = device_get();
  ncclResult_t res = TUTTI_ERR(ncclUnhandledCudaError,
                               "rank %d: small-call path: cannot enqueue the %s on the stream: "
                               "%s (%d)",
                               comm->rank, what, dev->error_string(rc), rc);
  comm_set_error(comm, res, tutti_last_error());
  return res;
}

ncclResult_t small_start(const pending_t *p, uint32_t *call) {
  ncclComm_t comm = p->ctx.comm;
  small_state_t *st = comm->small;
  const device_ops_t *dev = device_get();
  uint32_t s = *call = ++st->seq;
  volatile uint32_t *skip_dev =
      (volatile uint32_t *)(st->dev[st->me] + offsetof(small_words_t, skip));
  int rc = dev->stream_copy(p->stream, small_slot_dev(st, st->me, s), p->ctx.buf[BUF_SEND],
                            p->bytes[0], skip_dev);
  if (rc) return small_fail(comm, "copy-in", rc);
  for (int q = 0; q < st->n; q++) {
    if (q == st->me) continue;
    rc = dev->stream_write(p->stream, &small_words(st, q)->inbox[st->me][0], s);
    if (rc) return small_fail(comm, "arrival write", rc);
  }
  return ncclSuccess;
}

ncclResult_t small_finish(const pending_t *p, uint32_t s) {
  ncclComm_t comm = p->ctx.comm;
  small_state_t *st = comm->small;
  const device_ops_t *dev = device_get();
  small_words_t *mine = small_words(st, st->me);
  for (int q = 0; q < st->n; q++) {
    if (q == st->me) continue;
    int rc = dev->stream_wait(p->stream, &mine->inbox[q][0], s);
    if (rc) return small_fail(comm, "arrival wait", rc);
  }
  const void *in[SMALL_MAX_RANKS];
  for (int q = 0; q < st->n; q++) in[q] = small_slot_dev(st, q, s);
  volatile uint32_t *skip_dev =
      (volatile uint32_t *)(st->dev[st->me] + offsetof(small_words_t, skip));
  int rc = dev->stream_reduce_n(p->stream, p->ctx.buf[BUF_RECV], in, st->n,
                                p->bytes[1] / p->ctx.esize, &p->ctx.rop, skip_dev);
  if (rc) return small_fail(comm, "reduction", rc);
  rc = dev->stream_write(p->stream, &mine->done[0], s);
  if (rc) return small_fail(comm, "done write", rc);
  INFO(SUB_COLL, "rank %d: ncclAllReduce of %zu bytes on the small-call path (call %u)", comm->rank,
       p->bytes[1], s);
  return ncclSuccess;
}

static int small_ran_all(small_state_t *st) {
  small_words_t *w = small_words(st, st->me);
  return (int32_t)(__atomic_load_n(&w->done[0], __ATOMIC_ACQUIRE) - st->seq) >= 0;
}

/* Aborted: the kernels still queued write nothing and every wait of the stream is released
 * (written again while a peer's stream may overwrite a word), for at most 200 ms. */
static void small_release(small_state_t *st) {
  small_words_t *w = small_words(st, st->me);
  __atomic_store_n(&w->skip[0], 1, __ATOMIC_RELEASE);
  struct timespec tick = {0, 100000};
  for (int i = 0; i < 2000 && !small_ran_all(st); i++) {
    for (int q = 0; q < st->n; q++)
      if (q != st->me) __atomic_store_n(&w->inbox[q][0], st->seq + (1u << 30), __ATOMIC_RELEASE);
    nanosleep(&tick, NULL);
  }
}

void small_check(ncclComm_t comm) {
  small_state_t *st = comm->small;
  if (!st || small_ran_all(st)) return;
  for (int p = 0; p < st->n; p++) {
    if (p == st->me || !tutti_pid_gone(comm->peers[p].pid)) continue;
    ncclResult_t res =
        TUTTI_ERR(ncclRemoteError,
                  "rank %d: small-call path: rank %d (pid %d on host %s) ended while call %u "
                  "waited for it",
                  comm->rank, p, comm->peers[p].pid, comm->peers[p].hostname, st->seq);
    comm_set_error(comm, res, tutti_last_error());
    small_release(st);
    return;
  }
}

void small_close(ncclComm_t comm, int aborted) {
  small_state_t *st = comm->small;
  if (!st) return;
  comm->small = NULL;
  if (aborted) small_release(st);
  if (!small_ran_all(st)) { /* a stream still holds calls: it may use the regions later */
    INFO(SUB_INIT,
         "rank %d: small-call regions kept mapped: the stream has not run call %u yet "
         "(destroyed with calls in flight)",
         comm->rank, st->seq);
    return;
  }
  small_unmap(st);
}
