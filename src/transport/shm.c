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
 * and tail_at and rereads them only when the FIFO looks full. Having published a message of 241
 * B-16 KiB, it takes the lines the next one of that size would go to for writing
 * (shm_prefetch_next; TUTTI_SHM_PREFETCH=0 turns that off).
 * Waiting when the machine has more ranks than CPUs (comm->oversubscribed, the same on every rank
 * of a machine): after yielding for a while (engine.c), a waiting rank sleeps in shm_wait rather
 * than yielding on (a long wait's yields keep the CPU from the ranks with work; figures in
 * docs/perf.md, "Figures behind the code"): the waiter raises a flag next to the word it waits
 * for (the slot's seq, or tail), rechecks, and sleeps in futex(2) on that word's low 32 bits; the
 * other end, after publishing the word, fences and wakes it if the flag is up (one cache line it
 * writes anyway).
 * Elsewhere nobody sleeps and the flags are never looked at.
 * Peer memory: device buffers go to cuda_p2p.c (CUDA IPC, agreed at setup after CMA);
 * ncclMemAlloc regions are mapped by peers (memreg.c); any other memory of a local
 * peer (heap) is read by copy with process_vm_readv (cross-memory attach: the kernel copies
 * straight from the peer's pages, one copy where the FIFOs make two). Whether that works is
 * decided once, at setup, by every rank alike: each rank reads its local peers' segment headers
 * with process_vm_readv (the kernel allows it for processes of one user that are dumpable, under
 * Yama's ptrace_scope 0, or with CAP_SYS_PTRACE), and the ranks' answers are all-gathered; one
 * refusal, or TUTTI_CMA=0 on any rank, turns it off on every rank (comm->peer_read = 0).
 * The segment is created with MAP_POPULATE (page faults once, at init) and unlinked as soon as
 * every peer has mapped it, so nothing remains in /dev/shm even after kill -9. Segments left by
 * processes that died before unlinking (a kill during init) are removed by the next init.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "bootstrap.h"
#include "comm.h"
#include "copy.h"
#include "cuda_p2p.h"
#include "memreg.h"
#include "small.h"

TUTTI_PARAM(ShmDisable, "SHM_DISABLE", 0)
TUTTI_PARAM(ShmSlotBytes, "SHM_SLOT_BYTES", 128 * 1024)
TUTTI_PARAM(ShmSlots, "SHM_NSLOTS", 8)
TUTTI_PARAM(Cma, "CMA", 1)
TUTTI_PARAM(ShmRingWindow, "SHM_RING_WINDOW", 0)
TUTTI_PARAM(ShmPrefetch, "SHM_PREFETCH", 1)

#define SHM_MAGIC 0x74757474692d7368ull
#define SHM_PAGE 4096
#define SHM_MAX_SLOTS 64
#define SHM_DESC_PER_SLOT 4  /* headers per slot of ring: messages of a quarter slot fill it */
#define SHM_FAILED_WRITING 2 /* header.failed: the reason is being written */
#define SHM_FAILED 1

typedef struct shm_header {
  uint64_t magic;
  int32_t owner_rank, owner_pid;
  uint32_t nslots, local_size;
  uint64_t slot_bytes;
  char pad0[TUTTI_CACHELINE - 32];
  volatile uint64_t peer_progress; /* the owner's peer-memory words (transport.h), a line each */
  char pad1[TUTTI_CACHELINE - 8];
  volatile uint64_t peer_done;
  char pad2[SHM_PAGE / 2 - 3 * TUTTI_CACHELINE];
  volatile int32_t failed; /* SHM_FAILED once the owner failed or aborted */
  char reason[512];        /* the owner's error message, written before `failed` */
} shm_header_t;
_Static_assert(sizeof(shm_header_t) <= SHM_PAGE, "the shm header must fit its page");

/* A header's cache lines, on a boundary of as many: messages up to 240 bytes go inline, and
 * polling the first line the receiver's adjacent-line prefetch brings the second (measured
 * against one-line headers: docs/perf-baseline.md, "Headers of four lines"). */
#define SHM_HDR_LINES 4
#define SHM_INLINE (SHM_HDR_LINES * TUTTI_CACHELINE - 16)
/* A message of at most this many bytes goes to its header's own place (hot: rewritten every
 * nslots messages, so both caches keep it); a longer one to the ring. Where the two meet was
 * measured (docs/perf-baseline.md, "The FIFO as a ring of bytes"), and so was putting the places
 * a page apart: prefetchers, which stop at a page's end, then do not pull the next place's lines
 * into the reader's cache for the writer to take back. */
#define SHM_HOT_BYTES 2048
typedef struct shm_slot_hdr {
  volatile uint64_t seq; /* k + 1 once message k is in this slot */
  uint32_t bytes;
  volatile uint32_t sleeping; /* the receiver sleeps on seq (oversubscribed machines) */
  char inline_data[SHM_INLINE];
} shm_slot_hdr_t;

typedef struct shm_ctrl {
  volatile uint64_t tail;     /* messages released by the receiver */
  volatile uint32_t sleeping; /* the sender sleeps on tail, the FIFO full */
  uint32_t pad;
  volatile uint64_t tail_at; /* the receiver's `at` (shm_end_t) once it released them */
  char pad0[SHM_HDR_LINES * TUTTI_CACHELINE - 24];
  shm_slot_hdr_t hdr[SHM_MAX_SLOTS];
} shm_ctrl_t;
#define SHM_CTRL_BYTES ((sizeof(shm_ctrl_t) + SHM_PAGE - 1) / SHM_PAGE * SHM_PAGE)

typedef struct shm_end { /* one end of one FIFO */
  shm_ctrl_t *ctrl;
  char *hot;  /* nslots pages: a place per header, at its page's start */
  char *ring; /* nslots * slot_bytes bytes */
  size_t ring_bytes;
  size_t window;  /* sender: past this offset, a short message starts over when the ring is empty */
  uint32_t ndesc; /* headers in ctrl->hdr, one per slot: the most messages in flight */
  uint32_t desc;  /* pos % ndesc, kept as pos grows (a division costs tens of cycles) */
  uint64_t pos;   /* messages sent (sender) or consumed (receiver) */
  size_t off;     /* the ring offset after the last message placed (ring_place) */
  uint64_t at;    /* ring bytes passed so far, wrapped ends included (flow control) */
  uint64_t seen;  /* sender: cached copy of the receiver's tail ... */
  uint64_t seen_at; /* ... and of its tail_at */
  char *cur;        /* where message pos lies (send_slot, recv_slot) */
  int restart;      /* sender: message pos starts the ring over (SHM_RESTART) */
  size_t cur_bytes; /* receiver: message pos's size */
  int sleepy;       /* oversubscribed: the other end may sleep, wake it (shm_wait) */
  int prefetch;     /* sender: take the next message's lines for writing (shm_prefetch_next) */
  volatile int32_t *peer_failed;
  char small[SHM_INLINE]; /* sender: a message that goes inline is computed here */
} shm_end_t;

typedef struct shm_state {
  char name[96];
  char *seg;
  size_t seg_bytes;
  char **peer_seg; /* [nranks] mapping of each local peer's segment */
  size_t *peer_bytes;
  uint64_t *peer_seg_addr; /* [nranks] that segment's address in the peer's process */
  int *local_index;        /* [nranks]: index among this host's ranks, -1 if remote */
  shm_end_t *ends;         /* [2 * nranks]: send end to p, then receive end from p */
  int prefetch;            /* send ends prefetch (TUTTI_SHM_PREFETCH and the CPU's prefetchw) */
} shm_state_t;

typedef struct shm_blob {
  char name[96];
  uint64_t bytes;
  uint64_t seg_addr; /* the segment's address in its owner, for the process_vm_readv probe */
  int32_t local_index;
} shm_blob_t;

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

/* Under Yama's ptrace_scope 1 only a process's ancestors may read it: let any process of this
 * user read this one (what Open MPI's shared-memory transport does too), or peers' reads of it
 * are refused and cma_agree turns reading by copy off everywhere. */
static void cma_allow_peers(void) {
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  int scope = 0;
  if (!f) return;
  if (fscanf(f, "%d", &scope) != 1) scope = 0;
  fclose(f);
  if (scope == 1 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
    INFO(SUB_SHM, "Yama ptrace_scope 1: peers of this user may read this process (PR_SET_PTRACER)");
}

/* process_vm_readv (write = 0) or process_vm_writev of all `bytes` between `local` here and
 * `remote` in process pid (a call may move less than asked); 0 or the errno. */
static int cma_move(int pid, void *local, uint64_t remote, size_t bytes, int write) {
  while (bytes > 0) {
    struct iovec l = {local, bytes}, r = {(void *)(uintptr_t)remote, bytes};
    ssize_t got =
        write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got <= 0) return got < 0 ? errno : EIO;
    local = (char *)local + got, remote += (uint64_t)got, bytes -= (size_t)got;
  }
  return 0;
}

/* This rank's answer to "can I read every local peer's memory by copy": 1, or 0 with why. */
static int cma_probe(struct ncclComm *comm, char *why, size_t len) {
  shm_state_t *st = comm->shm;
  if (!tutti_param_Cma()) return snprintf(why, len, "TUTTI_CMA=0"), 0;
  for (int p = 0; st && p < comm->nranks; p++) {
    if (p == comm->rank || !st->peer_seg[p]) continue;
    uint64_t magic = 0;
    int err = cma_move(comm->peers[p].pid, &magic, st->peer_seg_addr[p], sizeof(magic), 0);
    if (err || magic != SHM_MAGIC)
      return snprintf(why, len, "process_vm_readv of rank %d (pid %d): %s", p, comm->peers[p].pid,
                      err ? strerror(err) : "read the wrong bytes"),
             0;
  }
  return 1;
}

/* Collective: comm->peer_read is 1 on every rank when every rank can read its local peers. */
static ncclResult_t cma_agree(struct ncclComm *comm) {
  int n = comm->nranks, first_no = -1;
  int32_t *ok = calloc((size_t)n, sizeof(int32_t));
  if (!ok) return TUTTI_ERR(ncclSystemError, "out of memory");
  char why[200] = "";
  ok[comm->rank] = cma_probe(comm, why, sizeof(why));
  ncclResult_t res = bootstrap_allgather(comm, ok, sizeof(int32_t));
  for (int r = 0; r < n && first_no < 0; r++)
    if (!ok[r]) first_no = r;
  free(ok);
  TUTTI_CHECK(res);
  comm->peer_read = first_no < 0;
  if (first_no < 0)
    INFO(SUB_SHM, "CMA: peers read heap buffers by copy (process_vm_readv), all ranks can");
  else if (first_no == comm->rank)
    INFO(SUB_SHM, "CMA refused here (%s): heap buffers go through the FIFOs on every rank", why);
  else
    INFO(SUB_SHM, "CMA refused on rank %d: heap buffers go through the FIFOs on every rank",
         first_no);
  return ncclSuccess;
}

/* Does the CPU have prefetchw (older Intel CPUs may not; AMD64 ones all do)? */
static int cpu_has_prefetchw(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & bit_PRFCHW);
#else
  return 0;
#endif
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
  st->prefetch = tutti_param_ShmPrefetch() && cpu_has_prefetchw();
  uint32_t nslots = (uint32_t)TUTTI_MIN(TUTTI_MAX(tutti_param_ShmSlots(), 2), SHM_MAX_SLOTS);
  /* at most 1 GiB: a message's size and the SHM_RESTART bit share 32 bits */
  size_t slot_bytes = TUTTI_ALIGN_UP(
      (size_t)TUTTI_MIN(TUTTI_MAX(tutti_param_ShmSlotBytes(), 4096), (int64_t)1 << 30), 4096);
  shm_remove_stale();
  if (tutti_param_Cma()) cma_allow_peers();
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
  INFO(SUB_SHM, "created %s: %d local ranks x %u slots x %zu bytes", st->name, local, nslots,
       slot_bytes);
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
      .peer_failed = &ph->failed};
  *re = (shm_end_t){.ctrl = seg_ctrl(st->seg, them),
                    .hot = seg_hot(st->seg, them, ls, mh->nslots),
                    .ring = seg_ring(st->seg, them, ls, mh->nslots, mh->slot_bytes),
                    .ring_bytes = ring_bytes,
                    .ndesc = mh->nslots,
                    .sleepy = comm->oversubscribed,
                    .peer_failed = &ph->failed};
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
  TUTTI_CHECK(cma_agree(comm));
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

#define SHM_RESTART (1u << 31)      /* in a header's bytes: the message starts the ring over */
#define SHM_RESTART_MAX (32 << 10)  /* messages at most this long may */
#define SHM_PREFETCH_MAX (16 << 10) /* the next message's lines are prefetched up to this */

/* The sender's copy of the receiver's tail and tail_at, reread. tail_at never moves it back: the
 * sender may have moved it past the ring's end itself (a start over, shm_send_slot). */
static void end_reread(shm_end_t *e) {
  e->seen = __atomic_load_n(&e->ctrl->tail, __ATOMIC_ACQUIRE);
  uint64_t at = __atomic_load_n(&e->ctrl->tail_at, __ATOMIC_RELAXED);
  if (at > e->seen_at) e->seen_at = at;
}

/* Once message pos - 1 is published: takes the lines the next message would be written to, if it
 * is as long and they are free by the cached tail, into this core's cache for writing
 * (prefetchw), while the receiver handles this one. Those lines were last read by the receiver
 * (a hot place nslots messages ago, the ring a lap ago), or by nobody since the program's other
 * memory pushed them out of the caches; taking them back line by line while copying the next
 * message in held that copy up. On an Intel Xeon guest, against TUTTI_SHM_PREFETCH=0: 1.06-1.5x
 * at 512 B-16 KiB for all-reduce, all-gather and reduce-scatter back to back, 1.03-1.44x in the
 * first 200 calls of each size after the program filled 256 MiB buffers (docs/perf-issue20-2.md,
 * thirty-fifth session). */
static void shm_prefetch_next(const shm_end_t *e, size_t bytes) {
#if defined(__x86_64__)
  if (bytes <= SHM_INLINE || bytes > SHM_PREFETCH_MAX || e->pos - e->seen >= e->ndesc) return;
  if (bytes > SHM_HOT_BYTES && /* in the ring: only without a wrap, and where it is free */
      (e->off + bytes > e->ring_bytes || e->at + bytes - e->seen_at > e->ring_bytes))
    return;
  const char *next = end_where(e, e->off, bytes);
  for (size_t i = 0; i < bytes; i += TUTTI_CACHELINE)
    __asm__ volatile("prefetchw %0" ::"m"(next[i]));
#else
  (void)e, (void)bytes;
#endif
}

static void *shm_send_slot(conn_t *c, size_t bytes) {
  shm_end_t *e = c->priv;
  size_t start = ring_place(e, bytes);
  e->restart = 0;
  if (bytes > SHM_HOT_BYTES && bytes <= SHM_RESTART_MAX && start >= e->window && bytes <= start) {
    if (e->seen != e->pos) end_reread(e);
    if (e->seen == e->pos) { /* empty: the ring's end it skips is free, nobody reads there */
      start = 0, e->restart = 1;
      e->seen_at = e->at + ring_skip(e, 0);
    }
  }
  if (!end_room(e, start, bytes)) {
    end_reread(e);
    if (!end_room(e, start, bytes)) return NULL;
  }
  return e->cur = bytes <= SHM_INLINE ? e->small : end_where(e, start, bytes);
}

/* `bytes` is what send_slot was asked for: the receiver places the message by it. */
static void shm_send_post(conn_t *c, size_t bytes) {
  shm_end_t *e = c->priv;
  shm_slot_hdr_t *h = &e->ctrl->hdr[e->desc];
  if (bytes <= SHM_INLINE) memcpy(h->inline_data, e->cur, bytes);
  h->bytes = (uint32_t)bytes | (e->restart ? SHM_RESTART : 0);
  end_advance(e, bytes);
  __atomic_store_n(&h->seq, e->pos, __ATOMIC_RELEASE);
  if (e->sleepy) wake_sleeper(&h->seq, &h->sleeping);
  if (e->prefetch) shm_prefetch_next(e, bytes);
}

static const void *shm_recv_slot(conn_t *c, size_t *bytes) {
  shm_end_t *e = c->priv;
  shm_slot_hdr_t *h = &e->ctrl->hdr[e->desc];
  if (__atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) != e->pos + 1) return NULL;
  uint32_t b = h->bytes;
  *bytes = e->cur_bytes = b & ~SHM_RESTART;
  if (*bytes <= SHM_INLINE) return h->inline_data;
  return e->cur = end_where(e, (b & SHM_RESTART) ? 0 : ring_place(e, *bytes), *bytes);
}

static void shm_recv_done(conn_t *c) {
  shm_end_t *e = c->priv;
  end_advance(e, e->cur_bytes);
  __atomic_store_n(&e->ctrl->tail_at, e->at, __ATOMIC_RELAXED);
  __atomic_store_n(&e->ctrl->tail, e->pos, __ATOMIC_RELEASE);
  if (e->sleepy) wake_sleeper(&e->ctrl->tail, &e->ctrl->sleeping);
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
  return e->peer_failed && __atomic_load_n(e->peer_failed, __ATOMIC_ACQUIRE) == SHM_FAILED;
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
  if (!shm_peer_failed(c)) return NULL;
  return (const char *)e->peer_failed + offsetof(shm_header_t, reason) -
         offsetof(shm_header_t, failed);
}

/* ---- peer memory: ncclMemAlloc regions (memreg.c) and peers of this process ---- */

typedef struct shm_handle { /* a peer_handle_t's bytes */
  int32_t pid;
  int32_t shared; /* 1: ref names an ncclMemAlloc region (never CUDA_P2P_HANDLE_KIND) */
  uint64_t addr;  /* the buffer's address in process pid */
  uint64_t bytes; /* the buffer's length */
  memreg_ref_t ref;
} shm_handle_t;
_Static_assert(sizeof(shm_handle_t) <= PEER_HANDLE_BYTES, "shm handle must fit a peer handle");

/* A buffer can be mapped when it lies in one ncclMemAlloc region; a peer in the same process
 * (ranks as threads) uses the address as is, whatever the memory. Other memory can be read by
 * copy where every rank agreed it can (comm->peer_read). */
static int shm_mem_expose(struct ncclComm *comm, const void *buf, size_t bytes, peer_handle_t *h) {
  if (comm->device_possible && cuda_p2p_is_device(buf)) return cuda_p2p_expose(comm, buf, bytes, h);
  shm_handle_t sh = {
      .pid = (int32_t)tutti_self_pid(), .addr = (uint64_t)(uintptr_t)buf, .bytes = bytes};
  sh.shared = memreg_find(buf, bytes, &sh.ref);
  if (sh.shared && memreg_populate_own(comm, buf, bytes, &sh.ref) != ncclSuccess)
    return PEER_EXPOSE_NONE;
  memset(h, 0, sizeof(*h));
  memcpy(h->bytes, &sh, sizeof(sh));
  if (sh.shared) return PEER_EXPOSE_MAP;
  for (int p = 0; p < comm->nranks; p++) /* heap memory: only peers of this process can map it */
    if (comm->peers[p].pid != sh.pid) return comm->peer_read ? PEER_EXPOSE_READ : PEER_EXPOSE_NONE;
  return PEER_EXPOSE_MAP;
}

/* One copy between a peer's buffer and `local`: memcpy within this process, process_vm_readv
 * or process_vm_writev otherwise. */
static ncclResult_t mem_move(struct ncclComm *comm, int peer, const peer_handle_t *h, size_t off,
                             void *local, size_t bytes, int write) {
  shm_handle_t sh;
  memcpy(&sh, h->bytes, sizeof(sh));
  char *remote = (char *)(uintptr_t)sh.addr + off;
  if (sh.pid == (int32_t)tutti_self_pid()) {
    copy_bytes(write ? remote : local, write ? local : remote, bytes);
    return ncclSuccess;
  }
  int err = cma_move(sh.pid, local, sh.addr + off, bytes, write);
  if (err)
    return TUTTI_ERR(ncclSystemError,
                     "rank %d: process_vm_%s of %zu bytes %s rank %d (pid %d) "
                     "failed: %s",
                     comm->rank, write ? "writev" : "readv", bytes, write ? "to" : "from", peer,
                     (int)sh.pid, strerror(err));
  return ncclSuccess;
}

static ncclResult_t shm_mem_read(struct ncclComm *comm, int peer, const peer_handle_t *h,
                                 size_t off, void *dst, size_t bytes) {
  return mem_move(comm, peer, h, off, dst, bytes, 0);
}

static ncclResult_t shm_mem_write(struct ncclComm *comm, int peer, const peer_handle_t *h,
                                  size_t off, const void *src, size_t bytes) {
  return mem_move(comm, peer, h, off, (void *)src, bytes, 1);
}

static ncclResult_t shm_mem_map(struct ncclComm *comm, int peer, const peer_handle_t *h,
                                const char **addr) {
  if (cuda_p2p_is_handle(h)) return cuda_p2p_map(comm, peer, h, addr);
  shm_handle_t sh;
  memcpy(&sh, h->bytes, sizeof(sh));
  if (sh.pid == (int32_t)tutti_self_pid()) {
    *addr = (const char *)(uintptr_t)sh.addr;
    return ncclSuccess;
  }
  if (!sh.shared) {
    *addr = NULL; /* heap memory of another process: not mappable */
    return ncclSuccess;
  }
  const char *base;
  TUTTI_CHECK(memreg_map_peer(comm, peer, sh.pid, &sh.ref, (size_t)sh.bytes, &base));
  *addr = base + sh.ref.offset;
  return ncclSuccess;
}

static volatile uint64_t *shm_mem_word(struct ncclComm *comm, int rank, int which) {
  shm_state_t *st = comm->shm;
  if (!st || !st->seg) return NULL;
  shm_header_t *h = (shm_header_t *)(rank == comm->rank ? st->seg : st->peer_seg[rank]);
  if (!h) return NULL;
  return which == PEER_WORD_PROGRESS ? &h->peer_progress : &h->peer_done;
}

/* The word's address in its owner's mapping: the same number for every rank of this process. */
static const void *shm_mem_word_key(struct ncclComm *comm, int rank, int which) {
  shm_state_t *st = comm->shm;
  size_t off = which == PEER_WORD_PROGRESS ? offsetof(shm_header_t, peer_progress)
                                           : offsetof(shm_header_t, peer_done);
  if (!st || !st->seg) return NULL;
  if (rank == comm->rank) return st->seg + off;
  if (comm->peers[rank].pid != tutti_self_pid() || !st->peer_seg_addr[rank]) return NULL;
  return (const char *)(uintptr_t)st->peer_seg_addr[rank] + off;
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
    .recv_slot = shm_recv_slot,
    .recv_done = shm_recv_done,
    .wait = shm_wait,
    .wait_oversubscribed_only = 1,
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
