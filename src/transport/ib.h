/* The InfiniBand / RoCE transport's private types, shared by its two files:
 *   ib_setup.c  libibverbs loaded at run time, device/port/GID choice, resources, QP bring-up
 *   ib.c        the vtable, the data path (RDMA write with immediate into the peer's FIFO,
 *               credits back), failure and teardown
 *   ib_rdv.c    large STEP_WHOLE steps by rendezvous: straight from buffer to buffer
 *   ib_mr.c     the registration cache for user buffers
 * See ib.c for the design. */
#ifndef TUTTI_TRANSPORT_IB_H_
#define TUTTI_TRANSPORT_IB_H_

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>

#include "comm.h"

#define IB_MAX_QPS 8
#define IB_MAX_SLOTS 64
#define IB_REASON_MAX 480
#define IB_BLOB_MAGIC 0x74757474692d6962ull
/* A large step is registered and offered in segments (ib_rdv.c): the first IB_RDV_SEG0 bytes,
 * each next segment twice the one before, the last of IB_RDV_SEGS taking the rest. */
#define IB_RDV_SEGS 16
#define IB_RDV_SEG0 ((size_t)1 << 20)

/* Immediates. A FIFO piece: slot << 24 | bytes, with IB_IMM_HEADER: a large step's header
 * (zero bytes; the low bits say LARGE_DONE or LARGE_PIECES). To the send end: 0 a credit,
 * IB_IMM_ANSWER | segment << 24 | the step's number (low 24 bits) an answer to a large step. */
#define IB_IMM_HEADER (1u << 31)
#define IB_IMM_ANSWER (1u << 30)
#define IB_IMM_SLOT(imm) (((imm) >> 24) & 0x3fu)

/* The verbs this transport calls, resolved with dlsym from libibverbs.so.1 (NULL: not loaded).
 * Posting and polling are inline in verbs.h (through the context's ops) and need no symbol. */
typedef struct ib_verbs {
  int (*fork_init)(void);
  struct ibv_device **(*get_device_list)(int *num);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *dev);
  struct ibv_context *(*open_device)(struct ibv_device *dev);
  int (*close_device)(struct ibv_context *ctx);
  int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
  int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *user, void *channel,
                              int vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  const char *(*wc_status_str)(enum ibv_wc_status status);
  struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
  int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
  int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx);
  void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
  /* optional (rdma-core >= 34; NULL where the library lacks it): GPUDirect RDMA by dma-buf */
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                  int fd, int access);
} ib_verbs_t;
extern ib_verbs_t ib_v;

/* What a rank publishes to everyone (the transport's setup blob). */
typedef struct ib_blob {
  uint64_t magic;
  union ibv_gid gid;
  uint16_t lid;
  uint8_t port, mtu; /* enum ibv_mtu */
  uint32_t nqps, nslots, slot_bytes;
  uint64_t board_addr; /* this rank's failure board: peer p writes board[p] */
  uint32_t board_rkey;
  char dev[32];
  uint64_t rdv_min; /* TUTTI_IB_RDV_MIN: large steps from this many bytes (0: none) */
} ib_blob_t;

/* What one end of one direction tells the other end (exchanged in post_connect). */
typedef struct ib_wire {
  uint32_t qpn[IB_MAX_QPS];
  uint32_t psn;
  uint32_t rkey;
  uint64_t addr; /* send end: its credit word; receive end: its FIFO's first slot */
} ib_wire_t;

/* One rank's failure board entry, written by the peer that failed (RDMA) or by this rank. */
typedef struct ib_board {
  volatile uint32_t failed;
  uint32_t pad;
  char reason[IB_REASON_MAX];
} ib_board_t;

/* A receiver's answer for one segment of a large step: where it goes, or addr 0 for pieces. */
typedef struct ib_rdv_msg {
  uint64_t seq;   /* the large step's number on this connection */
  uint64_t addr;  /* the segment's first byte in the receiver's buffer */
  uint64_t bytes; /* the whole step's */
  uint32_t rkey, seg;
} ib_rdv_msg_t;

/* The large step in progress on one end of a connection (ib_rdv.c). */
typedef struct ib_rdv {
  int state;         /* ib_rdv.c's RDV_* */
  int mode;          /* what the header says: LARGE_DONE or LARGE_PIECES */
  const char *buf;   /* the step's bytes (send) or their destination (recv); NULL: pieces */
  size_t bytes, off; /* send: bytes whose writes are posted */
  int nseg;          /* segments of the step */
  int nreg;          /* segments registered (all of them at once with a cached MR) */
  int nans;          /* recv: answers posted; send: answers taken */
  int wseg;          /* send: the segment `off` is in */
  int declined;      /* recv: an answer said pieces, no more follow */
  int own;           /* mr[] registered for this step; else mr[0] is the cache's for all */
  int out;           /* send: writes in flight */
  uint64_t ans_base; /* recv: answer writes posted before this step */
  struct ibv_mr *mr[IB_RDV_SEGS];
  uint64_t raddr[IB_RDV_SEGS]; /* send: where each segment goes */
  uint32_t rkey[IB_RDV_SEGS];
} ib_rdv_t;

struct ib_state;

/* One direction with one peer. One registered arena:
 *   send end   slots[nslots][slot_bytes]  staging: the RDMA writes' source
 *              credit (8 bytes)           the receiver's count of freed slots, written by RDMA
 *              answers[IB_RDV_SEGS]       the receiver's answers, one per segment (by RDMA)
 *   recv end   slots[nslots][slot_bytes]  the FIFO the peer writes into
 *              credit_src[nslots]         sources of the credit writes (one per slot: a write
 *                                         in flight keeps its value)
 *              answers[IB_RDV_SEGS]       sources of the answer writes
 */
typedef struct ib_conn {
  struct ib_state *st;
  int peer, is_send, nqps;
  uint32_t nslots;
  size_t slot_bytes, arena_bytes;
  char *arena, *slots;
  volatile uint64_t *credit; /* send end */
  uint64_t *credit_src;      /* recv end */
  ib_rdv_msg_t *answers;     /* both ends: IB_RDV_SEGS entries */
  struct ibv_mr *mr;
  struct ibv_cq *cq;
  struct ibv_qp *qp[IB_MAX_QPS];
  int sq_out[IB_MAX_QPS], sq_max;
  uint32_t psn;
  ib_wire_t remote;
  uint64_t pos;                  /* pieces posted (send) or consumed (recv) */
  uint32_t got[IB_MAX_SLOTS];    /* recv: bytes + 1 of the piece in each slot, 0: empty */
  uint8_t hdr[IB_MAX_SLOTS];     /* recv: the slot holds a large step's header (its mode) */
  size_t large_bytes;            /* large steps from this many bytes (agreed; 0: none) */
  uint64_t rdv_seq;              /* large steps settled on this connection */
  uint64_t rdv_posted;           /* recv: answer writes posted */
  uint64_t rdv_answers;          /* recv: answer writes completed */
  uint32_t ans_imm[IB_RDV_SEGS]; /* send: the immediate of the last answer per segment, 0 taken */
  ib_rdv_t rdv;
  int credit_pending;   /* recv: a credit write waits for room */
  const void *zc_buf;   /* send: a piece written from user memory, posted, not yet taken */
  int zc_inflight;      /* its write has not completed */
  uint64_t quiet_since; /* when a completion last came (a waiting end probes the peer) */
  int probe_out;        /* a probe write is in flight */
  int failed;
  char reason[IB_REASON_MAX];
} ib_conn_t;

typedef struct ib_state {
  struct ncclComm *comm;
  struct ib_state *next;
  int npeers;
  char dev[32];
  int port, gid_index, nqps;
  uint32_t nslots;
  size_t slot_bytes;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_comp_channel *chan; /* every CQ's events: a waiting rank sleeps on its fd */
  struct ibv_port_attr port_attr;
  union ibv_gid gid;
  ib_board_t *board; /* [nranks]: board[p] is written by p when it fails */
  ib_board_t *board_src;
  struct ibv_mr *board_mr;
  ib_blob_t *peer_blob;         /* [nranks] */
  ib_conn_t **send, **recv;     /* [nranks] */
  struct ib_mr_cache *mr_cache; /* user buffers' MRs (ib_mr.c) */
  uint64_t mr_registered;       /* user buffers registered so far */
  int aborted, closing, nwarn;  /* aborted: this rank failed (mark_failed) */
  pthread_mutex_t life_mu;
} ib_state_t;

static inline const char *ib_host_of(const ib_state_t *st, int rank) {
  return st->comm->peers[rank].hostname;
}

/* ib_setup.c */
int ib_available(void); /* libibverbs loads and a usable device matches TUTTI_IB_HCA */
ib_state_t *ib_state_of(struct ncclComm *comm);
void ib_state_unlink(ib_state_t *st);
ncclResult_t ib_setup(struct ncclComm *comm, char blob[TRANSPORT_BLOB_BYTES]);
ncclResult_t ib_setup_connect(struct ncclComm *comm, int peer, const char *peer_blob, conn_t *send,
                              conn_t *recv);
ncclResult_t ib_setup_post_connect(struct ncclComm *comm);
void ib_conn_free(ib_conn_t *c);
void ib_state_free(ib_state_t *st);
/* ib.c */
#define WR_RECV 0u
#define WR_DATA 1u
#define WR_CREDIT 2u
#define WR_BOARD 3u
#define WR_PROBE 4u
#define WR_ZC 5u     /* a data write straight from user memory */
#define WR_RDV 6u    /* a large step's write into the receiver's buffer */
#define WR_ANSWER 7u /* a receiver's answer to a large step */
#define WR_HEADER 8u /* a large step's header (a FIFO piece) */
int ib_post_recv(ib_conn_t *c, int q);
int ib_post_write(ib_conn_t *c, int q, uint64_t kind, void *src, uint32_t lkey, size_t bytes,
                  uint64_t raddr, uint32_t rkey, int imm, uint32_t imm_data);
int ib_poll_cq(ib_conn_t *c);
void ib_flush_credit(ib_conn_t *c);
void ib_conn_fail(ib_conn_t *c, const char *fmt, const char *detail, int status, uint32_t vendor);
/* ib_rdv.c (the vtable's send_large / recv_large) */
int ib_send_large(conn_t *conn, const void *buf, size_t bytes);
int ib_recv_large(conn_t *conn, void *buf, size_t bytes);
void ib_rdv_release(ib_conn_t *c); /* the step's own MR, if any (close, failure) */
size_t ib_rdv_min(void);           /* TUTTI_IB_RDV_MIN (0: no large steps) */
/* ib_mr.c: the MR covering [buf, buf + bytes) when it may be written from in place (an
 * ncclMemAlloc region, or device memory registered by dma-buf), registered on first use and
 * cached; NULL: stage it. */
struct ibv_mr *ib_mr_get(ib_state_t *st, const void *buf, size_t bytes);
void ib_mr_cache_free(ib_state_t *st);

#endif
