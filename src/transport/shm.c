/* Shared-memory transport: ranks on the same host (processes or threads).
 *
 * Each rank owns one POSIX shared-memory segment holding the FIFOs its local peers send to it:
 *
 *   [ header: magic, owner, failed flag                 ]  4 KiB
 *   [ ctrl[local_size]: tail, tail_at | hdr[nslots]     ]  20 KiB each, 4 cache lines apiece
 *   [ hot[local_size][nslots][4 KiB]                    ]  FIFO i is written by local rank i:
 *   [ ring[local_size][nslots * slot_bytes]             ]  short messages here, long ones here
 *
 * Message k's header is hdr[k % nslots], 4 lines holding {seq, bytes, 240 inline bytes}: the
 * sender writes the data and publishes seq = k + 1 (release); the receiver polls that line, uses
 * the data in place and publishes tail = k + 1 so its room can be reused. Where the data lies
 * depends on its size:
 *   - up to 240 bytes inline in the header (what makes small collectives fast: the receiver
 *     then touches the lines it polls and the ones right after);
 *   - up to SHM_HOT_BYTES in the header's hot place (hot[k % nslots]), lines both caches keep;
 *   - longer ones in the ring of nslots * slot_bytes bytes, one after another, each from a cache
 *     line (one that would cross the ring's end starts at its beginning), so that a line is
 *     written again only once the whole ring has been, whatever the messages' size. With a
 *     slot per message, half-slot messages reused each line after half the ring, while the
 *     reader still held it in its cache, and every store paid a snoop (docs/perf-baseline.md,
 *     "Why the FIFOs slow down"). With TUTTI_SHM_RING_WINDOW=w (0, off, by default) a message
 *     of at most SHM_RESTART_MAX bytes that would start past w bytes starts over at the ring's
 *     beginning when the ring is empty (the sender rereads the receiver's tail to know; the
 *     header's SHM_RESTART bit tells the receiver): short messages that come one at a time
 *     then stay on the ring's first pages instead of walking all of it, which after large
 *     calls had pushed its lines and pages out costs every message of the first pass; but
 *     back to back they reuse lines the receiver still holds, 5-25 % slower at 4-32 KiB
 *     (docs/perf-issue20-2.md).
 * Both ends place message k alike from the sizes of the messages before it; the receiver also
 * publishes tail_at, how far in the ring it released. The sender keeps cached copies of tail
 * and tail_at and rereads them only when the FIFO looks full. A sender that runs ahead (a
 * stream of gathers) finds it full at every message, and each release it rereads costs the line
 * a trip each way, so the receiver holds back the releases of messages that took no ring room
 * (inline or hot) and publishes them with every TUTTI_SHM_RELEASE_BATCH-th (half the headers
 * by default, 1 where the ranks outnumber the CPUs), with the next ring message, and whenever
 * this rank waits: for a message, for room, or in the engine (transport idle). So a sender
 * waits for room only when over half the headers hold messages not yet taken.
 * Having published a message of 241 B up to shm_prefetch_bytes (16 KiB; 2 KiB on AMD CPUs), the
 * sender takes the lines the next one of that size would go to for writing (shm_prefetch_next;
 * on AMD CPUs once it next waits for a message or has read one, shm_prefetch_due;
 * TUTTI_SHM_PREFETCH=0 turns that off).
 * Waiting when the machine has more ranks than CPUs (comm->oversubscribed, the same on every rank
 * of a machine): after yielding for a while (engine.c), a waiting rank sleeps in shm_wait rather
 * than yielding on (a long wait's yields keep the CPU from the ranks with work; figures in
 * docs/perf.md, "Figures behind the code"): the waiter raises a flag next to the word it waits
 * for (the slot's seq, or tail), rechecks, and sleeps in futex(2) on that word's low 32 bits; the
 * other end, after publishing the word, fences and wakes it if the flag is up (one cache line it
 * writes anyway).
 * Elsewhere nobody sleeps and the flags are never looked at.
 * Peer memory (a rank's buffers read or written by its peers in place) is shm_peer.c's; large
 * steps by rendezvous, one copy from the sender's buffer into the receiver's, shm_rdv.c's.
 * The segment is created with MAP_POPULATE (page faults once, at init) and unlinked as soon as
 * every peer has mapped it, so nothing remains in /dev/shm even after kill -9. Segments left by
 * processes that died before unlinking (a kill during init) are removed by the next init.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "comm.h"
#include "cuda_p2p.h"
#include "memreg.h"
#include "shm.h"
#include "small.h"

TUTTI_PARAM(ShmDisable, "SHM_DISABLE", 0)
TUTTI_PARAM(ShmSlotBytes, "SHM_SLOT_BYTES", 128 * 1024)
TUTTI_PARAM(ShmSlots, "SHM_NSLOTS", 8)
TUTTI_PARAM(ShmRingWindow, "SHM_RING_WINDOW", 0)
TUTTI_PARAM(ShmPrefetch, "SHM_PREFETCH", 1)
TUTTI_PARAM(ShmPrefetchLate, "SHM_PREFETCH_LATE", -1)
TUTTI_PARAM(ShmReleaseBatch, "SHM_RELEASE_BATCH", -1)
#define SHM_PREFETCH_MAX (16 << 10) /* the next message's lines are prefetched up to this */

static size_t seg_hot_bytes(uint32_t nslots, int local_size) {
  return TUTTI_ALIGN_UP((size_t)local_size * nslots * SHM_PAGE, SHM_PAGE);
}
static size_t seg_size(uint32_t nslots, size_t slot_bytes, int local_size) {
  return SHM_PAGE + (size_t)local_size * SHM_CTRL_BYTES + seg_hot_bytes(nslots, local_size) +
         (size_t)local_size * nslots * slot_bytes;
}
static shm_ctrl_t *seg_ctrl(char *seg, int i) {
  return (shm_ctrl_t *)(seg + SHM_PAGE + (size_t)i * SHM_CTRL_BYTES);
}
static char *seg_hot(char *seg, int i, int local_size, uint32_t nslots) {
  return seg + SHM_PAGE + (size_t)local_size * SHM_CTRL_BYTES + (size_t)i * nslots * SHM_PAGE;
}
static char *seg_ring(char *seg, int i, int local_size, uint32_t nslots, size_t slot_bytes) {
  return seg + SHM_PAGE + (size_t)local_size * SHM_CTRL_BYTES + seg_hot_bytes(nslots, local_size) +
         (size_t)i * nslots * slot_bytes;
}

static int shm_can_connect(struct ncclComm *comm, int peer) {
  return !tutti_param_ShmDisable() &&
         comm->peers[peer].host_hash == comm->peers[comm->rank].host_hash;
}

/* Removes /dev/shm/tutti-<pid>-* segments whose creating process no longer exists (or is a
 * zombie: a rank killed during init leaves its segment before any peer could unlink it). */
static void shm_remove_stale(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int pid = 0;
    if (sscanf(e->d_name, "tutti-%d-", &pid) != 1 || pid <= 0) continue;
    if (!tutti_pid_gone(pid)) continue;
    char path[300];
    snprintf(path, sizeof(path), "/%s", e->d_name);
    if (shm_unlink(path) == 0)
      INFO(SUB_SHM, "removed stale segment /dev/shm%s (pid %d is gone)", path, pid);
  }
  closedir(d);
}

/* The error for a segment whose pages /dev/shm could not reserve (err from posix_fallocate). */
static ncclResult_t shm_reserve_error(const char *name, size_t bytes, int err) {
  if (err == ENOSPC || err == EFBIG)
    return TUTTI_ERR(ncclSystemError,
                     "/dev/shm has too little free space for the %zu bytes of "
                     "%s (%s): give the job more shared memory (docker run --shm-size=1g, or a "
                     "larger tmpfs), lower TUTTI_SHM_SLOT_BYTES / TUTTI_SHM_NSLOTS, or set "
                     "TUTTI_SHM_DISABLE=1 to use sockets",
                     bytes, name, strerror(err));
  return TUTTI_ERR(ncclSystemError, "cannot size shared memory %s to %zu bytes: %s", name, bytes,
                   strerror(err));
}

/* Opens (create: makes) the segment and maps it with its pages faulted in. The creator sizes it
 * with ftruncate and lets mmap's MAP_POPULATE allocate the pages, then reserves with
 * posix_fallocate whatever the populate could not allocate: a sparse segment on a full /dev/shm
 * (Docker's default is 64 MiB) maps fine and kills the process with SIGBUS at the first write to
 * a missing page, while posix_fallocate reports ENOSPC. The pages come from the fault path,
 * not from posix_fallocate: with slots allocated by posix_fallocate the out-of-place FIFO calls
 * measured slower, for a reason not found (docs/perf-baseline.md, "Pair ratios"). */
static ncclResult_t map_segment(const char *name, size_t bytes, int create, char **out) {
  int fd = shm_open(name, create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR, 0600);
  if (fd < 0)
    return TUTTI_ERR(ncclSystemError, "shm_open(%s) failed: %s (is /dev/shm full or missing?)",
                     name, strerror(errno));
  int err = create && ftruncate(fd, (off_t)bytes) != 0 ? errno : 0;
  void *p = err ? MAP_FAILED
                : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int map_err = p == MAP_FAILED && !err ? errno : 0;
  if (create && !err && !map_err) err = posix_fallocate(fd, 0, (off_t)bytes);
  close(fd);
  if (err || map_err) {
    if (p != MAP_FAILED) munmap(p, bytes);
    if (create) shm_unlink(name);
    if (map_err)
      return TUTTI_ERR(ncclSystemError, "mmap of %s (%zu bytes) failed: %s", name, bytes,
                       strerror(map_err));
    return shm_reserve_error(name, bytes, err);
  }
  *out = p;
  return ncclSuccess;
}

/* The longest FIFO message after which the sender takes the next one's lines (shm_prefetch_next),
 * from TUTTI_SHM_PREFETCH: 0 none, 1 as measured for this CPU, more: that many bytes (at most
 * SHM_PREFETCH_MAX). None where the CPU lacks prefetchw (cpuid 0x80000001 ECX bit 8; older Intel).
 * As measured: on an Intel Xeon guest messages to 16 KiB gain (ring places too); on an AMD Zen 5
 * guest the hot places' messages (to SHM_HOT_BYTES) gained 1.04-1.27x at 1-4 KiB calls but
 * prefetching the ring's next region cost 0.82-0.87x at 4-16 KiB, so AMD CPUs stop there
 * (docs/perf-issue20-2.md, forty-third session). */
static uint32_t shm_prefetch_bytes(void) {
  int64_t v = tutti_param_ShmPrefetch();
  if (v <= 0) return 0;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000001, &a, &b, &c, &d) || !(c & bit_PRFCHW)) return 0;
  if (v > 1) return (uint32_t)TUTTI_MIN(v, SHM_PREFETCH_MAX);
  return __builtin_cpu_is("amd") ? SHM_HOT_BYTES : SHM_PREFETCH_MAX;
#else
  return 0;
#endif
}

/* How many messages a receive end may take before it publishes their release (shm_recv_done):
 * TUTTI_SHM_RELEASE_BATCH, at most half the headers; unset, half the headers, or 1 (each at
 * once) where the ranks outnumber the CPUs, whose senders sleep until a release wakes them. */
static uint32_t release_batch(uint32_t nslots, int oversubscribed) {
  int64_t b = tutti_param_ShmReleaseBatch(), half = nslots / 2;
  if (b < 0) b = oversubscribed ? 1 : half;
  return (uint32_t)TUTTI_MAX(1, TUTTI_MIN(b, half));
}

static ncclResult_t shm_setup(struct ncclComm *comm, char blob[TRANSPORT_BLOB_BYTES]) {
  int n = comm->nranks;
  shm_state_t *st = calloc(1, sizeof(*st));
  if (!st) return TUTTI_ERR(ncclSystemError, "out of memory");
  comm->shm = st;
  st->peer_seg = calloc(n, sizeof(char *));
  st->peer_bytes = calloc(n, sizeof(size_t));
  st->peer_seg_addr = calloc(n, sizeof(uint64_t));
  st->local_index = calloc(n, sizeof(int));
  st->ends = calloc(2 * (size_t)n, sizeof(shm_end_t));
  if (!st->peer_seg || !st->peer_bytes || !st->peer_seg_addr || !st->local_index || !st->ends)
    return TUTTI_ERR(ncclSystemError, "out of memory");
  int local = 0;
  for (int p = 0; p < n; p++)
    st->local_index[p] =
        (comm->peers[p].host_hash == comm->peers[comm->rank].host_hash) ? local++ : -1;
  if (local <= 1) return ncclSuccess; /* no local peer: nothing to share */
  st->prefetch = shm_prefetch_bytes();
  st->prefetch_late = (int)tutti_param_ShmPrefetchLate();
#if defined(__x86_64__)
  if (st->prefetch_late < 0) st->prefetch_late = __builtin_cpu_is("amd");
#endif
  if (st->prefetch_late < 0) st->prefetch_late = 0;
  uint32_t nslots = (uint32_t)TUTTI_MIN(TUTTI_MAX(tutti_param_ShmSlots(), 2), SHM_MAX_SLOTS);
  st->release_batch = release_batch(nslots, comm->oversubscribed);
  /* at most SHM_SLOT_MAX: a message's size and the flags share 32 bits */
  size_t slot_bytes = TUTTI_ALIGN_UP(
      (size_t)TUTTI_MIN(TUTTI_MAX(tutti_param_ShmSlotBytes(), 4096), (int64_t)SHM_SLOT_MAX), 4096);
  shm_remove_stale();
  shm_cma_allow_peers();
  snprintf(st->name, sizeof(st->name), "/tutti-%d-%016llx-%d", (int)getpid(),
           (unsigned long long)comm->id_hash, comm->rank);
  st->seg_bytes = seg_size(nslots, slot_bytes, local);
  TUTTI_CHECK(map_segment(st->name, st->seg_bytes, 1, &st->seg));
  shm_header_t *h = (shm_header_t *)st->seg;
  h->magic = SHM_MAGIC;
  h->owner_rank = comm->rank;
  h->owner_pid = (int32_t)getpid();
  h->nslots = nslots;
  h->local_size = (uint32_t)local;
  h->slot_bytes = slot_bytes;
  if (!comm->slot_bytes || slot_bytes < comm->slot_bytes) comm->slot_bytes = slot_bytes;
  if (!comm->chunk_bytes || slot_bytes * (nslots / 2) < comm->chunk_bytes)
    comm->chunk_bytes = slot_bytes * (nslots / 2);
  shm_blob_t b = {.bytes = st->seg_bytes,
                  .seg_addr = (uint64_t)(uintptr_t)st->seg,
                  .local_index = st->local_index[comm->rank]};
  snprintf(b.name, sizeof(b.name), "%s", st->name);
  memcpy(blob, &b, sizeof(b));
  INFO(SUB_SHM,
       "created %s: %d local ranks x %u slots x %zu bytes, prefetch to %u bytes%s, releases "
       "published every %u messages",
       st->name, local, nslots, slot_bytes, st->prefetch,
       st->prefetch && st->prefetch_late ? " (late)" : "", st->release_batch);
  return ncclSuccess;
}

static ncclResult_t shm_connect(struct ncclComm *comm, int peer, const char *peer_blob,
                                conn_t *send, conn_t *recv) {
  shm_state_t *st = comm->shm;
  shm_blob_t b;
  memcpy(&b, peer_blob, sizeof(b));
  if (!st->peer_seg[peer]) {
    ncclResult_t res = map_segment(b.name, b.bytes, 0, &st->peer_seg[peer]);
    if (res != ncclSuccess && tutti_pid_gone(comm->peers[peer].pid))
      return TUTTI_ERR(
          ncclRemoteError,
          "rank %d: peer rank %d (pid %d on host %s) ended during init: its segment is gone (%s)",
          comm->rank, peer, comm->peers[peer].pid, comm->peers[peer].hostname, tutti_last_error());
    TUTTI_CHECK(res);
    st->peer_bytes[peer] = b.bytes;
    st->peer_seg_addr[peer] = b.seg_addr;
  }
  shm_header_t *ph = (shm_header_t *)st->peer_seg[peer], *mh = (shm_header_t *)st->seg;
  if (ph->magic != SHM_MAGIC || ph->nslots != mh->nslots || ph->slot_bytes != mh->slot_bytes)
    return TUTTI_ERR(ncclInvalidUsage,
                     "rank %d and rank %d disagree on shared-memory FIFOs (%u x %llu vs %u x "
                     "%llu bytes): set TUTTI_SHM_NSLOTS / TUTTI_SHM_SLOT_BYTES alike everywhere",
                     comm->rank, peer, mh->nslots, (unsigned long long)mh->slot_bytes, ph->nslots,
                     (unsigned long long)ph->slot_bytes);
  int me = st->local_index[comm->rank], them = st->local_index[peer], ls = (int)mh->local_size;
  shm_end_t *se = &st->ends[peer], *re = &st->ends[comm->nranks + peer];
  size_t ring_bytes = (size_t)mh->nslots * mh->slot_bytes;
  *se = (shm_end_t){
      .ctrl = seg_ctrl(st->peer_seg[peer], me),
      .hot = seg_hot(st->peer_seg[peer], me, ls, mh->nslots),
      .ring = seg_ring(st->peer_seg[peer], me, ls, mh->nslots, mh->slot_bytes),
      .ring_bytes = ring_bytes,
      .window = tutti_param_ShmRingWindow() > 0 ? (size_t)tutti_param_ShmRingWindow() : ring_bytes,
      .ndesc = mh->nslots,
      .sleepy = comm->oversubscribed,
      .prefetch = st->prefetch,
      .late = st->prefetch && st->prefetch_late,
      .held = &st->held,
      .peer_failed = &ph->failed,
      .comm = comm,
      .peer = peer};
  *re = (shm_end_t){.ctrl = seg_ctrl(st->seg, them),
                    .hot = seg_hot(st->seg, them, ls, mh->nslots),
                    .ring = seg_ring(st->seg, them, ls, mh->nslots, mh->slot_bytes),
                    .ring_bytes = ring_bytes,
                    .ndesc = mh->nslots,
                    .sleepy = comm->oversubscribed,
                    .late = st->prefetch && st->prefetch_late,
                    .batch = st->release_batch,
                    .held = &st->held,
                    .peer_failed = &ph->failed,
                    .comm = comm,
                    .peer = peer};
  send->priv = se;
  recv->priv = re;
  send->slot_bytes = recv->slot_bytes = mh->slot_bytes;
  /* Both ends' headers, hot places and rings read once per page now, at init: MAP_POPULATE filled
   * their page-table entries, but on some virtual machines the first access to each page through a
   * mapping still costs ~6 us (docs/perf-issue20-2.md), which the first calls of each message
   * size would pay (the first 241-byte message in each header's hot place, the first long ones
   * in the ring). */
  memreg_touch(se->ctrl, SHM_CTRL_BYTES);
  memreg_touch(re->ctrl, SHM_CTRL_BYTES);
  memreg_touch(se->hot, (size_t)mh->nslots * SHM_PAGE);
  memreg_touch(re->hot, (size_t)mh->nslots * SHM_PAGE);
  memreg_touch(se->ring, ring_bytes);
  memreg_touch(re->ring, ring_bytes);
  return ncclSuccess;
}

static void shm_unlink_own(struct ncclComm *comm) {
  shm_state_t *st = comm->shm;
  if (st && st->name[0]) {
    shm_unlink(st->name);
    INFO(SUB_SHM, "unlinked %s: every peer has mapped it", st->name);
    st->name[0] = '\0';
  }
}

static ncclResult_t shm_post_connect(struct ncclComm *comm) {
  shm_unlink_own(comm);
  TUTTI_CHECK(shm_cma_agree(comm));
  shm_large_agree(comm);
  TUTTI_CHECK(cuda_p2p_agree(comm));
  return small_agree(comm);
}

/* After publishing *word: wakes the other end if it sleeps on it (shm_wait). The fence pairs
 * with the sleeper's between raising its flag and rechecking the word: one of them sees the
 * other's write. The futex word is the low half of the 64-bit counter (little-endian). */
static void wake_sleeper(volatile uint64_t *word, volatile uint32_t *flag) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(flag, __ATOMIC_RELAXED))
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Where a message of `bytes` after the last one placed starts: right after it, or at the ring's
 * beginning when it would cross the end. Both ends place every message alike. */
static size_t ring_place(const shm_end_t *e, size_t bytes) {
  return e->off + bytes > e->ring_bytes ? 0 : e->off;
}

/* The ring's end a message placed at `start` skips (0 unless it starts over at the beginning). */
static size_t ring_skip(const shm_end_t *e, size_t start) {
  return start < e->off ? e->ring_bytes - e->off : 0;
}

/* Message pos, of `bytes`, is done with: the ring moves past it (it lies at e->cur). Messages
 * that go inline or to the header's hot place take no room. */
static void end_advance(shm_end_t *e, size_t bytes) {
  if (bytes > SHM_HOT_BYTES) {
    size_t start = (size_t)(e->cur - e->ring), used = TUTTI_ALIGN_UP(bytes, TUTTI_CACHELINE);
    e->at += ring_skip(e, start) + used;
    e->off = start + used;
  }
  e->pos++;
  if (++e->desc == e->ndesc) e->desc = 0;
}

/* Is there a header free and, for a message of `bytes` going into the ring at `start`, room in
 * the ring (what lies from the receiver's tail_at on is still in use)? */
static int end_room(const shm_end_t *e, size_t start, size_t bytes) {
  if (e->pos - e->seen >= e->ndesc) return 0;
  if (bytes <= SHM_HOT_BYTES) return 1;
  uint64_t end = e->at + ring_skip(e, start) + bytes;
  return end - e->seen_at <= e->ring_bytes;
}

/* Where message pos of `bytes` lies (inline messages excepted), ring placement at `start`. */
static char *end_where(const shm_end_t *e, size_t start, size_t bytes) {
  return bytes <= SHM_HOT_BYTES ? e->hot + (size_t)e->desc * SHM_PAGE : e->ring + start;
}

#define SHM_RESTART_MAX (32 << 10) /* messages at most this long may */

/* The sender's copy of the receiver's tail and tail_at, reread. tail_at never moves it back: the
 * sender may have moved it past the ring's end itself (a start over, shm_send_slot). */
void shm_end_reread(shm_end_t *e) {
  e->seen = __atomic_load_n(&e->ctrl->tail, __ATOMIC_ACQUIRE);
  uint64_t at = __atomic_load_n(&e->ctrl->tail_at, __ATOMIC_RELAXED);
  if (at > e->seen_at) e->seen_at = at;
}

/* Takes `bytes` from `at` into this core's cache for writing (prefetchw). */
static void prefetch_lines(const char *at, size_t bytes) {
#if defined(__x86_64__)
  for (size_t i = 0; i < bytes; i += TUTTI_CACHELINE) __asm__ volatile("prefetchw %0" ::"m"(at[i]));
#else
  (void)at, (void)bytes;
#endif
}

/* Once message pos - 1 is published: takes the lines the next message would be written to, if it
 * is as long and they are free by the cached tail, into this core's cache for writing, while the
 * receiver handles this one. Those lines were last read by the receiver (a hot place nslots
 * messages ago, the ring a lap ago), or by nobody since the program's other memory pushed them
 * out of the caches; taking them back line by line while copying the next message in held that
 * copy up. On an Intel Xeon guest, against TUTTI_SHM_PREFETCH=0: 1.06-1.5x at 512 B-16 KiB for
 * all-reduce, all-gather and reduce-scatter back to back, 1.03-1.44x in the first 200 calls of
 * each size after the program filled 256 MiB buffers (docs/perf-issue20-2.md, thirty-fifth
 * session). Where the state says late (TUTTI_SHM_PREFETCH_LATE=1; -1, the default, is 1 on AMD
 * CPUs and 0 on others) the lines are only noted here and taken by shm_prefetch_due. */
static void shm_prefetch_next(const shm_end_t *e, size_t bytes) {
  shm_state_t *st = e->comm->shm;
  if (e->late) st->prefetch_at = NULL;
  if (bytes <= SHM_INLINE || bytes > e->prefetch || e->pos - e->seen >= e->ndesc) return;
  if (bytes > SHM_HOT_BYTES && /* in the ring: only without a wrap, and where it is free */
      (e->off + bytes > e->ring_bytes || e->at + bytes - e->seen_at > e->ring_bytes))
    return;
  const char *next = end_where(e, e->off, bytes);
  if (e->late) {
    st->prefetch_at = next;
    st->prefetch_len = (uint32_t)bytes;
  } else {
    prefetch_lines(next, bytes);
  }
}

/* A late prefetch is taken once this rank waits for a message or has read one (shm_recv_done),
 * not right after publishing, when the rank's next work is mostly reading the peer's message:
 * on an AMD Zen 5 guest the lines taken then held up the all-gather's copy out of the FIFO
 * (0.95x at 2-4 KiB in place against no prefetch); taken late, 1.02-1.06x against taking them at
 * once, the all-reduce and the reduce-scatter even (docs/perf-issue20-2.md, forty-fourth
 * session). The rank's next publication replaces or forgets the note (shm_prefetch_next): the
 * lines noted may be the ones it just wrote. */
static inline void shm_prefetch_due(const shm_end_t *e) {
  if (!e->late) return; /* taken at once, or none */
  shm_state_t *st = e->comm->shm;
  if (st->prefetch_at) prefetch_lines(st->prefetch_at, st->prefetch_len), st->prefetch_at = NULL;
}

void *shm_send_slot(conn_t *c, size_t bytes) {
  shm_end_t *e = c->priv;
  size_t start = ring_place(e, bytes);
  e->restart = 0;
  if (bytes > SHM_HOT_BYTES && bytes <= SHM_RESTART_MAX && start >= e->window && bytes <= start) {
    if (e->seen != e->pos) shm_end_reread(e);
    if (e->seen == e->pos) { /* empty: the ring's end it skips is free, nobody reads there */
      start = 0, e->restart = 1;
      e->seen_at = e->at + ring_skip(e, 0);
    }
  }
  if (!end_room(e, start, bytes)) {
    shm_end_reread(e);
    if (!end_room(e, start, bytes)) {
      if (*e->held) shm_release_held(e->comm); /* the peer may wait for room to this rank */
      return NULL;
    }
  }
  return e->cur = bytes <= SHM_INLINE ? e->small : end_where(e, start, bytes);
}

/* `bytes` is what send_slot was asked for: the receiver places the message by it. */
static inline void post(conn_t *c, size_t bytes, uint32_t flags) {
  shm_end_t *e = c->priv;
  shm_slot_hdr_t *h = &e->ctrl->hdr[e->desc];
  if (bytes <= SHM_INLINE) memcpy(h->inline_data, e->cur, bytes);
  h->bytes = (uint32_t)bytes | (e->restart ? SHM_RESTART : 0) | flags;
  end_advance(e, bytes);
  __atomic_store_n(&h->seq, e->pos, __ATOMIC_RELEASE);
  if (e->sleepy) wake_sleeper(&h->seq, &h->sleeping);
  if (e->prefetch) shm_prefetch_next(e, bytes);
}

static void shm_send_post(conn_t *c, size_t bytes) {
  post(c, bytes, 0);
}

void shm_post(conn_t *c, size_t bytes, uint32_t flags) {
  post(c, bytes, flags);
}

static inline const void *peek(conn_t *c, size_t *bytes, uint32_t *flags) {
  shm_end_t *e = c->priv;
  shm_slot_hdr_t *h = &e->ctrl->hdr[e->desc];
  if (__atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) != e->pos + 1) {
    if (*e->held) shm_release_held(e->comm);
    shm_prefetch_due(e);
    return NULL;
  }
  uint32_t b = h->bytes;
  *flags = b & (SHM_RESTART | SHM_LARGE);
  *bytes = e->cur_bytes = b & ~(SHM_RESTART | SHM_LARGE);
  if (*bytes <= SHM_INLINE) return h->inline_data;
  return e->cur = end_where(e, (b & SHM_RESTART) ? 0 : ring_place(e, *bytes), *bytes);
}

const void *shm_peek(conn_t *c, size_t *bytes, uint32_t *flags) {
  return peek(c, bytes, flags);
}

/* A piece, which the header of a large step is not (the ranks disagree on the step's size:
 * the end stops, naming both, and the engine reports it as the peer's failure). */
static const void *shm_recv_slot(conn_t *c, size_t *bytes) {
  uint32_t flags;
  const void *m = peek(c, bytes, &flags);
  if (!m || !(flags & SHM_LARGE)) return m;
  shm_end_t *e = c->priv;
  shm_end_break(e,
                "rank %d announced a large message (a step of at least TUTTI_SHM_RDV_MIN bytes) "
                "where rank %d expected a piece of a shorter one: ranks called different counts, "
                "types or collectives",
                e->peer, e->comm->rank);
  return NULL;
}

/* Publishes what the receive end e took: its header, hot place and ring bytes are free again. */
static void end_release(shm_end_t *e) {
  __atomic_store_n(&e->ctrl->tail_at, e->at, __ATOMIC_RELAXED);
  __atomic_store_n(&e->ctrl->tail, e->pos, __ATOMIC_RELEASE);
  if (e->taken) e->taken = 0, (*e->held)--;
  if (e->sleepy) wake_sleeper(&e->ctrl->tail, &e->ctrl->sleeping);
}

void shm_release_held(struct ncclComm *comm) {
  shm_state_t *st = comm->shm;
  if (!st) return;
  for (int p = 0; p < comm->nranks && st->held; p++) {
    shm_end_t *e = &st->ends[comm->nranks + p];
    if (e->taken) end_release(e);
  }
}

void shm_recv_done(conn_t *c) {
  shm_end_t *e = c->priv;
  shm_prefetch_due(e);
  end_advance(e, e->cur_bytes);
  if (e->cur_bytes <= SHM_HOT_BYTES && e->taken + 1 < e->batch) {
    if (e->taken++ == 0) (*e->held)++;
    return; /* released with a later message, or when this rank waits */
  }
  end_release(e);
}

/* Sleeps until the connection can probably move (a message in, or room to send), at most
 * timeout_ns; only where the ends wake each other (e->sleepy), else it just yields. */
static void shm_wait(conn_t *c, int send, uint64_t timeout_ns) {
  shm_end_t *e = c->priv;
  if (!e->sleepy) {
    sched_yield();
    return;
  }
  volatile uint64_t *word;
  volatile uint32_t *flag;
  uint64_t want;
  if (send) {
    word = &e->ctrl->tail, flag = &e->ctrl->sleeping, want = e->seen + 1; /* one more released */
  } else {
    shm_slot_hdr_t *h = &e->ctrl->hdr[e->desc];
    word = &h->seq, flag = &h->sleeping, want = e->pos + 1;
  }
  uint32_t seen = (uint32_t)__atomic_load_n(word, __ATOMIC_ACQUIRE);
  __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  uint64_t now = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  if (send ? now < want : now != want) {
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, &ts, NULL, 0);
  }
  __atomic_store_n(flag, 0, __ATOMIC_RELAXED);
}

static int shm_peer_failed(conn_t *c) {
  shm_end_t *e = c->priv;
  return (e->peer_failed && __atomic_load_n(e->peer_failed, __ATOMIC_ACQUIRE) == SHM_FAILED) ||
         e->broken[0];
}

void shm_end_break(shm_end_t *e, const char *fmt, ...) {
  if (e->broken[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->broken, sizeof(e->broken), fmt, ap);
  va_end(ap);
  INFO(SUB_SHM, "%s", e->broken);
}

static void shm_mark_failed(struct ncclComm *comm) {
  shm_state_t *st = comm->shm;
  if (!st || !st->seg) return;
  shm_header_t *h = (shm_header_t *)st->seg;
  /* the message is complete once async_error is published (comm_set_error) */
  int has_msg = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE) != ncclSuccess;
  int32_t unclaimed = 0; /* threads of this rank may fail at once: one writes the reason */
  if (__atomic_compare_exchange_n(&h->failed, &unclaimed, SHM_FAILED_WRITING, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    snprintf(h->reason, sizeof(h->reason), "%s",
             has_msg && comm->error_msg[0] ? comm->error_msg : "it called ncclCommAbort");
    __atomic_store_n(&h->failed, SHM_FAILED, __ATOMIC_RELEASE);
  }
}

static const char *shm_peer_reason(conn_t *c) {
  shm_end_t *e = c->priv;
  if (e->broken[0]) return e->broken;
  if (!shm_peer_failed(c)) return NULL;
  return (const char *)e->peer_failed + offsetof(shm_header_t, reason) -
         offsetof(shm_header_t, failed);
}

static void shm_close(struct ncclComm *comm) {
  shm_state_t *st = comm->shm;
  shm_remove_stale(); /* what a peer killed before it could unlink its segment left */
  cuda_p2p_close(comm);
  if (!st) return;
  shm_unlink_own(comm); /* unlink if init failed before the barrier */
  for (int p = 0; p < comm->nranks; p++)
    if (st->peer_seg && st->peer_seg[p]) munmap(st->peer_seg[p], st->peer_bytes[p]);
  if (st->seg) munmap(st->seg, st->seg_bytes);
  free(st->peer_seg);
  free(st->peer_bytes);
  free(st->peer_seg_addr);
  free(st->local_index);
  free(st->ends);
  free(st);
  comm->shm = NULL;
}

const transport_t shm_transport = {
    .name = "shm",
    .can_connect = shm_can_connect,
    .setup = shm_setup,
    .connect = shm_connect,
    .post_connect = shm_post_connect,
    .send_slot = shm_send_slot,
    .send_post = shm_send_post,
    .send_large = shm_send_large,
    .recv_large = shm_recv_large,
    .recv_slot = shm_recv_slot,
    .recv_done = shm_recv_done,
    .wait = shm_wait,
    .wait_oversubscribed_only = 1,
    .idle = shm_release_held,
    .peer_failed = shm_peer_failed,
    .peer_reason = shm_peer_reason,
    .mark_failed = shm_mark_failed,
    .close = shm_close,
    .mem_expose = shm_mem_expose,
    .mem_map = shm_mem_map,
    .mem_word = shm_mem_word,
    .mem_word_key = shm_mem_word_key,
    .mem_read = shm_mem_read,
    .mem_write = shm_mem_write,
};
