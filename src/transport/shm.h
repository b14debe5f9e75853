/* The shared-memory transport's private types, shared by its three files:
 *   shm.c       the vtable, segments and FIFOs, waiting, failure and teardown (its design)
 *   shm_peer.c  peer memory: heap buffers read by copy (CMA), ncclMemAlloc regions mapped, the
 *               progress words
 *   shm_rdv.c   large STEP_WHOLE steps by rendezvous: one copy, from buffer to buffer
 */
#ifndef TUTTI_TRANSPORT_SHM_H_
#define TUTTI_TRANSPORT_SHM_H_

#include <stdint.h>

#include "comm.h"
#include "memreg.h"

#define SHM_MAGIC 0x74757474692d7368ull
#define SHM_PAGE 4096
#define SHM_MAX_SLOTS 64
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
  volatile uint64_t tail_at;   /* the receiver's `at` (shm_end_t) once it released them */
  volatile uint64_t large_ack; /* the receiver's answer to the last large header (shm_rdv.c) */
  char pad0[SHM_HDR_LINES * TUTTI_CACHELINE - 32];
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
  uint64_t seen_at;  /* ... and of its tail_at */
  char *cur;         /* where message pos lies (send_slot, recv_slot) */
  int restart;       /* sender: message pos starts the ring over (SHM_RESTART) */
  size_t cur_bytes;  /* receiver: message pos's size */
  int sleepy;        /* oversubscribed: the other end may sleep, wake it (shm_wait) */
  uint32_t prefetch; /* sender: after messages up to this long, take the next one's lines
                        (shm_prefetch_next) */
  int late; /* this rank's prefetches are noted by its sends (shm_prefetch_next) and taken when
               it waits or reads (shm_prefetch_due) */
  uint32_t batch; /* receiver: a release is published every batch-th message (1: each) */
  uint32_t taken; /* receiver: messages taken whose release it holds back (shm_recv_done) */
  uint32_t *held; /* the state's count of receive ends with taken > 0 */
  volatile int32_t *peer_failed;
  char small[SHM_INLINE]; /* sender: a message that goes inline is computed here */
  struct ncclComm *comm;  /* this rank's */
  int peer;               /* the other end's rank */
  uint64_t large_wait;    /* sender: the position of the large header it waits on (0: none) */
  const void *large_buf;  /* ... and where that step's bytes lie */
  char broken[256];       /* why this end stopped: the ranks disagree (shm_rdv.c), else "" */
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
  uint32_t prefetch;       /* the send ends' prefetch size (shm_prefetch_bytes) */
  int prefetch_late;       /* ... taken when this rank next waits or reads (shm_prefetch_due) */
  const char *prefetch_at; /* late: the lines noted, not yet taken (NULL: none) */
  uint32_t prefetch_len;   /* ... and how many bytes */
  uint32_t release_batch;  /* the receive ends' batch (shm_end_t) */
  uint32_t held;           /* receive ends holding releases back (shm_release_held) */
} shm_state_t;

typedef struct shm_blob {
  char name[96];
  uint64_t bytes;
  uint64_t seg_addr; /* the segment's address in its owner, for the process_vm_readv probe */
  int32_t local_index;
} shm_blob_t;

/* In a slot header's bytes, above a message's size (at most SHM_SLOT_MAX): */
#define SHM_RESTART (1u << 31) /* the message starts the ring over */
#define SHM_LARGE (1u << 30)   /* the message is the header of a large step (shm_rdv.c) */
#define SHM_SLOT_MAX ((size_t)1 << 29)

/* shm.c: the FIFO, for shm_rdv.c. shm_post is send_post with flags in the slot header's bytes;
 * shm_peek is recv_slot that also returns such a message (*flags: its header's bits). */
void *shm_send_slot(conn_t *c, size_t bytes);
void shm_post(conn_t *c, size_t bytes, uint32_t flags);
const void *shm_peek(conn_t *c, size_t *bytes, uint32_t *flags);
void shm_recv_done(conn_t *c);
void shm_end_reread(shm_end_t *e);
/* Publishes every release this rank's receive ends hold back (shm_recv_done). */
void shm_release_held(struct ncclComm *comm);
/* Stops the end with a reason (printf-style): its peer_failed then says so. */
void shm_end_break(shm_end_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* shm_peer.c */
typedef struct shm_handle { /* a peer_handle_t's bytes */
  int32_t pid;
  int32_t shared; /* 1: ref names an ncclMemAlloc region (never CUDA_P2P_HANDLE_KIND) */
  uint64_t addr;  /* the buffer's address in process pid */
  uint64_t bytes; /* the buffer's length */
  memreg_ref_t ref;
} shm_handle_t;
_Static_assert(sizeof(shm_handle_t) <= PEER_HANDLE_BYTES, "shm handle must fit a peer handle");

/* The handle of this process's buf: mappable by peers (shared) when it lies in an ncclMemAlloc
 * region or the shared heap's arena (memreg_find). */
void shm_handle_of(const void *buf, size_t bytes, shm_handle_t *sh);
/* Where `peer`'s buffer sh can be loaded here: its own address for a peer in this process, this
 * process's (cached) mapping of a shared one, NULL (and success) where it can only be read by
 * copy. */
ncclResult_t shm_handle_map(struct ncclComm *comm, int peer, const shm_handle_t *sh,
                            const char **addr);
void shm_cma_allow_peers(void);
int shm_cma_move(int pid, void *local, uint64_t remote, size_t bytes, int write);
ncclResult_t shm_cma_agree(struct ncclComm *comm);
int shm_mem_expose(struct ncclComm *comm, const void *buf, size_t bytes, peer_handle_t *h);
ncclResult_t shm_mem_map(struct ncclComm *comm, int peer, const peer_handle_t *h,
                         const char **addr);
volatile uint64_t *shm_mem_word(struct ncclComm *comm, int rank, int which);
const void *shm_mem_word_key(struct ncclComm *comm, int rank, int which);
ncclResult_t shm_mem_read(struct ncclComm *comm, int peer, const peer_handle_t *h, size_t off,
                          void *dst, size_t bytes);
ncclResult_t shm_mem_write(struct ncclComm *comm, int peer, const peer_handle_t *h, size_t off,
                           const void *src, size_t bytes);

/* shm_rdv.c */
void shm_large_agree(struct ncclComm *comm);
int shm_send_large(conn_t *conn, const void *buf, size_t bytes);
int shm_recv_large(conn_t *conn, void *buf, size_t bytes);

#endif
