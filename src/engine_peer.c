/* The engine's peer steps (algos/schedule.h): reading other ranks' buffers in place through the
 * transports' peer-memory capability (transport.h), and the agreement that comes before.
 *
 * Agreement (engine_peer_agree, before a call whose algorithm has peer steps): every rank
 * exposes its send and receive buffers and sends the handles, with whether the peers can map
 * them, to every peer (one FIFO message each). Every rank then knows every rank's answer: only
 * if all buffers can be mapped does the planner run the peer steps, otherwise every rank runs
 * another algorithm, so the decision is the same everywhere whatever each rank's memory. A
 * mapping that fails after that is an error of this rank (its peers see it fail), not a
 * fallback.
 *
 * Two flavours (transport.h): mapped (PEER_AGREE_MAP, the direct algorithm) and read by copy
 * (o->peer_read, the cma algorithm: the transport's mem_read copies from the peer's buffer in
 * one step of the kernel). Reading by copy, PEER_REDUCE reads each peer's piece of the segment
 * into an L2-sized buffer (TUTTI_CMA_PIECE_BYTES per peer) and reduces from there, piece by
 * piece, so the reads of the next piece follow the reduction of the last and the progress word
 * moves per piece; with STEP_PUSH it then writes the piece, still in cache, into every other
 * rank's destination (mem_write). PEER_COPY reads what the owner's progress says is final
 * straight into the destination. PEER_EXCHANGE (an all-to-all with a rank in place: the
 * handshake carries each rank's wish, and any rank's makes every rank exchange) swaps a pair's
 * elements through a buffer in cache, mapped or by mem_read and mem_write.
 *
 * Device buffers (o->dev, the stream path with cuda_p2p): the same steps, run by the proxy
 * thread through the device interface: PEER_REDUCE is a reduction kernel reading the peers'
 * mapped device buffers in place (load/store over NVLink/PCIe, or the same GPU), one launch per
 * operand and piece (o->dev_scratch_bytes), waited for before the progress word moves;
 * PEER_COPY is a copy-engine copy (PEER_EXCHANGE three of them through the scratch); the
 * schedule's local copies go through the device too.
 *
 * Words: each rank publishes two words through its transport (PEER_WORD_PROGRESS, _DONE) that
 * only grow: progress = call << 40 | elements of its PEER_REDUCE final so far, done = calls
 * finished. Every rank numbers the communicator's peer-memory calls alike (op_ctx.peer_seq), so
 * no word is ever reset. All waiting, failure checks and timeouts are the engine's: a blocked
 * peer step sets l->wait_peer as any step does.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy.h"
#include "device.h"
#include "engine.h"
#include "memreg.h"
#include "tls_cache.h"
#include "tsan.h"

#define PEER_SEQ_SHIFT 40
#define PEER_PIECE_BYTES (64 * 1024) /* progress is published every piece */
#define PEER_BLOCK_BYTES (16 * 1024) /* multi-input reductions run block by block, in L1 */
#define PEER_MSG_MAGIC 0x70656572u   /* "peer" */

TUTTI_PARAM(CmaPieceBytes, "CMA_PIECE_BYTES", 512 * 1024)

/* A buffer this rank does not use in the call (0 bytes: a non-root's in a rooted collective,
 * which may be NULL): no rank reads it, so it neither needs mapping nor stops the others'. */
#define PEER_EXPOSE_UNUSED 3

typedef struct agree_msg { /* where one rank's buffers are, for one call */
  uint32_t magic;
  int32_t exposed[2]; /* send, receive: PEER_EXPOSE_*, PEER_EXPOSE_UNUSED */
  peer_handle_t h[2];
  float adapt_t[2]; /* a deciding call's latest times of this rank (adapt.h), else 0 */
  int32_t exchange; /* 1: an in-place all-to-all sending from its live buffer (op_ctx.exchange) */
  int32_t algo;     /* the algorithm this rank planned (algo_t), the same on every rank */
} agree_msg_t;

/* The transport that reaches `rank`'s words and buffers from here (this rank's own: through any
 * peer's, they are all the same on one host). */
static const transport_t *peer_transport(ncclComm_t comm, int rank) {
  int p = rank == comm->rank ? (rank + 1) % comm->nranks : rank;
  return comm->send_conn[p].transport;
}

/* A rank's word as seen here (NULL: none), and its key for the race detector (tsan.h). */
typedef struct word_ref {
  volatile uint64_t *w;
  const void *key;
} word_ref_t;

static word_ref_t peer_word(ncclComm_t comm, int rank, int which) {
  const transport_t *t = peer_transport(comm, rank);
  word_ref_t pw = {t->mem_word ? t->mem_word(comm, rank, which) : NULL, NULL};
#ifdef TUTTI_TSAN
  if (t->mem_word_key) pw.key = t->mem_word_key(comm, rank, which);
#endif
  return pw;
}

/* Publishes v: what this rank did before is visible to whoever reads v (word_read). */
static void word_publish(word_ref_t pw, uint64_t v) {
  if (!pw.w) return;
  TUTTI_HB_RELEASE(pw.key);
  __atomic_store_n(pw.w, v, __ATOMIC_RELEASE);
}

static uint64_t word_read(word_ref_t pw) {
  uint64_t v = __atomic_load_n(pw.w, __ATOMIC_ACQUIRE);
  TUTTI_HB_ACQUIRE(pw.key);
  return v;
}

/* Test hook: rank TUTTI_TEST_HANDSHAKE_SKEW_RANK (-1: none) says in its handshakes that it
 * planned another algorithm than it did, as a planning bug would have it (decide). */
TUTTI_PARAM(TestHandshakeSkewRank, "TEST_HANDSHAKE_SKEW_RANK", -1)

/* Test hook: rank TUTTI_TEST_PEER_DELAY_RANK sleeps TUTTI_TEST_PEER_DELAY_US before each peer step
 * that reads other ranks' buffers or writes into them, so that a test can hold one rank back
 * while its peers finish (a rank must not return while a peer may still read its buffers:
 * PEER_DONE); with TUTTI_TEST_PEER_DELAY_ALGO=<name>, only in that algorithm's calls (to make one
 * candidate of the measured choice lose, adapt.h). */
TUTTI_PARAM(TestPeerDelayUs, "TEST_PEER_DELAY_US", 0)
TUTTI_PARAM(TestPeerDelayRank, "TEST_PEER_DELAY_RANK", 0)

static void test_delay(ncclComm_t comm, const op_ctx_t *o) {
  int64_t us = tutti_param_TestPeerDelayUs();
  if (us <= 0 || comm->rank != tutti_param_TestPeerDelayRank()) return;
  const char *only = tutti_getenv("TEST_PEER_DELAY_ALGO");
  if (only && *only && strcmp(only, algo_name(o->algo)) != 0) return;
  struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void *tls_buffer(size_t bytes) {
  static TUTTI_TLS void *buf;
  static TUTTI_TLS size_t cap;
  if (bytes > cap) {
    void *p = realloc(buf, bytes);
    if (!p) return NULL;
    buf = p, cap = bytes;
    tls_cache_keep(&buf, &cap);
  }
  return buf;
}

/* Maps peer p's buffers described by m into o->peer_buf. Every rank exposed them, so a
 * failure here is an error (the peers then see this rank fail), not a fallback. */
static ncclResult_t map_peer(ncclComm_t comm, const op_ctx_t *o, int p, const agree_msg_t *m) {
  const transport_t *t = peer_transport(comm, p);
  for (int b = 0; b < 2; b++) {
    const char *addr = NULL;
    if (m->exposed[b] == PEER_EXPOSE_UNUSED) {
      o->peer_buf[b][p] = NULL;
      continue;
    }
    if (t->mem_map) TUTTI_CHECK(t->mem_map(comm, p, &m->h[b], &addr));
    if (!addr)
      return TUTTI_ERR(ncclSystemError,
                       "rank %d: cannot map the %s buffer rank %d exposed in nccl%s", comm->rank,
                       b == 0 ? "send" : "receive", p, coll_name(o->coll));
    o->peer_buf[b][p] = addr;
  }
  return ncclSuccess;
}

/* This rank's message: its buffers, exposed where its transport can. */
static void expose(const op_ctx_t *o, const size_t bytes[2], agree_msg_t *m) {
  ncclComm_t comm = o->comm;
  const transport_t *t = peer_transport(comm, comm->rank);
  memset(m, 0, sizeof(*m));
  m->magic = PEER_MSG_MAGIC;
  for (int b = 0; b < 2; b++) {
    const char *buf = o->buf[b == 0 ? BUF_SEND : BUF_RECV];
    o->peer_buf[b][comm->rank] = buf;
    m->exposed[b] = !bytes[b]       ? PEER_EXPOSE_UNUSED
                    : t->mem_expose ? t->mem_expose(comm, buf, bytes[b], &m->h[b])
                                    : PEER_EXPOSE_NONE;
  }
  if (o->adapt_decide) m->adapt_t[0] = o->adapt_t[0], m->adapt_t[1] = o->adapt_t[1];
  m->exchange = o->exchange;
  m->algo = (int32_t)o->algo;
  if (comm->rank == tutti_param_TestHandshakeSkewRank())
    m->algo = (int32_t)((o->algo + 1) % ALGO_NUM);
}

/* *ok: PEER_AGREE_* from every rank's answers for both buffers (the same on every rank: all
 * saw all messages); maps the buffers when all can be mapped and keeps every handle. An error
 * when a peer sent no handshake. */
static ncclResult_t decide(op_ctx_t *o, const agree_msg_t *all, int *ok) {
  ncclComm_t comm = o->comm;
  int map = 1, read = 1, exchange = 0;
  for (int p = 0; p < comm->nranks; p++) {
    if (all[p].magic != PEER_MSG_MAGIC)
      return TUTTI_ERR(ncclInvalidUsage,
                       "rank %d: rank %d sent no peer-memory handshake in nccl%s "
                       "(op #%llu): ranks called different collectives",
                       comm->rank, p, coll_name(o->coll), (unsigned long long)o->seq);
    for (int b = 0; b < 2; b++) {
      int e = all[p].exposed[b];
      map &= e == PEER_EXPOSE_MAP || e == PEER_EXPOSE_UNUSED;
      read &= e != PEER_EXPOSE_NONE;
      if (o->peer_h[b]) o->peer_h[b][p] = all[p].h[b];
    }
    exchange |= all[p].exchange != 0;
  }
  o->exchange = exchange;
  *ok = map ? PEER_AGREE_MAP : read && comm->peer_read ? PEER_AGREE_READ : PEER_AGREE_NONE;
  /* Every rank plans alike (plan.c); ranks whose peer steps would run different algorithms on
   * each other's buffers would write wrong results or wait for steps that never come, so a
   * disagreement here is an error on every rank (each sees every message), not a guess. */
  for (int p = 0; *ok != PEER_AGREE_NONE && p < comm->nranks; p++)
    if (all[p].algo != all[comm->rank].algo)
      return TUTTI_ERR(ncclInternalError,
                       "rank %d: the ranks planned different algorithms for nccl%s (op #%llu): "
                       "%s on rank %d, %s on rank %d; every rank must choose alike, so this is a "
                       "bug in tutti's planning (please report it with TUTTI_DEBUG=INFO "
                       "TUTTI_DEBUG_SUBSYS=COLL,TUNING logs)",
                       comm->rank, coll_name(o->coll), (unsigned long long)o->seq,
                       algo_name((algo_t)all[comm->rank].algo), comm->rank,
                       all[p].algo >= 0 && all[p].algo < ALGO_NUM ? algo_name((algo_t)all[p].algo)
                                                                  : "an unknown algorithm",
                       p);
  for (int p = 0; o->adapt_decide && p < comm->nranks; p++)
    for (int k = 0; k < 2; k++) o->adapt_t[k] = TUTTI_MAX(o->adapt_t[k], all[p].adapt_t[k]);
  for (int p = 0; map && p < comm->nranks; p++)
    if (p != comm->rank) TUTTI_CHECK(map_peer(comm, o, p, &all[p]));
  return ncclSuccess;
}

/* The handshake orders what every rank wrote into its buffers before the call before the peers'
 * reads; for the race detector (tsan.h) it releases this rank's progress key before the
 * messages go (after = 0) and acquires every peer's after they came (after = 1). */
static void handshake_hb(op_ctx_t *const *ops, int k, int after) {
#ifdef TUTTI_TSAN
  for (int i = 0; i < k; i++) {
    ncclComm_t comm = ops[i]->comm;
    for (int p = 0; p < comm->nranks; p++) {
      if ((p == comm->rank) == after) continue;
      word_ref_t pw = peer_word(comm, p, PEER_WORD_PROGRESS);
      if (after)
        TUTTI_HB_ACQUIRE(pw.key);
      else
        TUTTI_HB_RELEASE(pw.key);
    }
  }
#else
  (void)ops, (void)k, (void)after;
#endif
}

/* Per call i: n messages (this rank's own at its index) and the exchange of call i. */
ncclResult_t engine_peer_agree(op_ctx_t *const *ops, const size_t (*bytes)[2], int *ok, int k) {
  size_t total = 0;
  for (int i = 0; i < k; i++) total += (size_t)ops[i]->comm->nranks * sizeof(agree_msg_t);
  total = (total + 15) & ~(size_t)15; /* the exchanges after the messages, aligned */
  char *buf = tls_buffer(total + (size_t)k * sizeof(exchange_t));
  if (!buf) return TUTTI_ERR(ncclSystemError, "out of memory for the peer-memory handshake");
  exchange_t *x = (exchange_t *)(buf + total);
  agree_msg_t *all[k > 0 ? k : 1];
  size_t off = 0;
  for (int i = 0; i < k; i++) {
    all[i] = (agree_msg_t *)(buf + off);
    off += (size_t)ops[i]->comm->nranks * sizeof(agree_msg_t);
    agree_msg_t *mine = &all[i][ops[i]->comm->rank];
    expose(ops[i], bytes[i], mine);
    INFO(SUB_COLL, "nccl%s (op #%llu): peer-memory handshake with every rank",
         coll_name(ops[i]->coll), (unsigned long long)ops[i]->seq);
    x[i] = (exchange_t){ops[i]->comm, mine, all[i], sizeof(agree_msg_t), ops[i]};
  }
  handshake_hb(ops, k, 0);
  TUTTI_CHECK(engine_exchange(x, k));
  handshake_hb(ops, k, 1);
  for (int i = 0; i < k; i++) TUTTI_CHECK(decide(ops[i], all[i], &ok[i]));
  return ncclSuccess;
}

/* The buffer peer reads by copy land in before they are reduced ((nranks - 1) pieces). */
static char *tls_read_buffer(size_t bytes) {
  static TUTTI_TLS char *buf;
  static TUTTI_TLS size_t cap;
  if (bytes > cap) {
    free(buf);
    buf = NULL, cap = 0;
    if (posix_memalign((void **)&buf, 4096, bytes) != 0) return NULL;
    cap = bytes;
    tls_cache_keep(&buf, &cap);
  }
  return buf;
}

static int block(lane_t *l, int peer) {
  l->wait_peer = peer, l->wait_send = 0;
  return 0;
}

/* dst = x(f) (+) x(f+1) (+) ... (+) x(f-1) over `len` elements, where in[k] points at rank k's
 * operand. Partial sums stay in an L1 block until the last operand, so dst may be any of the
 * inputs (in place). With `also` (a streaming push: the `nalso` mapped peer buffers, at dst's
 * place) the last operand is reduced into the block too, which is streamed to dst and to each of
 * them while it is in L1: no line of them is read for ownership. Without, dst is written with
 * plain stores: a push from dst (push_piece) or a peer's direct read then finds it in cache. */
static void reduce_inputs(const op_ctx_t *o, const step_t *st, const char *const *in, size_t len,
                          char *dst, char *const *also, int nalso) {
  static TUTTI_TLS uint64_t acc[PEER_BLOCK_BYTES / 8];
  int n = o->comm->nranks, f = st->recv_peer;
  size_t es = o->esize, blk = TUTTI_MAX(PEER_BLOCK_BYTES / es, 1);
  int post = (st->flags & STEP_POST) && o->rop.postdiv ? REDUCE_POST : 0;
  for (size_t i = 0; i < len; i += blk) {
    size_t m = TUTTI_MIN(blk, len - i), off = i * es;
    if (n == 1) {
      reduce_copy(&o->rop, dst + off, in[f] + off, m, post);
      continue;
    }
    const char *a = in[f] + off;
    for (int k = 1; k < n - 1; k++) {
      reduce_combine(&o->rop, acc, a, in[tutti_mod(f + k, n)] + off, m, 0);
      a = (const char *)acc;
    }
    const char *last = in[tutti_mod(f + n - 1, n)] + off;
    if (!also) {
      reduce_combine(&o->rop, dst + off, a, last, m, post);
      continue;
    }
    reduce_combine(&o->rop, acc, a, last, m, post);
    char *to[nalso + 1];
    to[0] = dst + off;
    for (int j = 0; j < nalso; j++) to[j + 1] = also[j] + off;
    copy_stream_multi(to, nalso + 1, acc, m * es);
  }
}

/* A peer-memory access to rank `peer` failed (res, its message recorded). The peer is blamed
 * where it failed first or died (a read from a process that exited after a failure names the
 * rank that failed first); else the access's own error stands. */
static int access_failed(lane_t *l, const op_ctx_t *o, int peer, ncclResult_t res) {
  ncclResult_t blame = engine_peer_blame(l->comm, peer, o);
  l->err = blame != ncclSuccess ? blame : res;
  return -1;
}

/* The operands at element offset `at` of every rank's src buffer: mapped (or this rank's own)
 * in place; read by copy into tmp (one piece per peer) when o->peer_read (*bad: the peer a
 * failed read was from). */
static ncclResult_t gather_inputs(const op_ctx_t *o, const step_t *st, size_t at, size_t len,
                                  char *tmp, const char **in, int *bad) {
  ncclComm_t comm = o->comm;
  int b = st->src_buf == BUF_SEND ? 0 : 1;
  size_t es = o->esize;
  for (int k = 0; k < comm->nranks; k++) {
    if (!o->peer_read || k == comm->rank) {
      in[k] = o->peer_buf[b][k] + at * es;
      continue;
    }
    const transport_t *t = peer_transport(comm, k);
    in[k] = tmp, tmp += len * es;
    *bad = k;
    TUTTI_CHECK(t->mem_read(comm, k, &o->peer_h[b][k], at * es, (char *)in[k], len * es));
  }
  return ncclSuccess;
}

/* A copy in host memory (a peer's, mapped, or this rank's): streaming stores for calls that
 * stream (from TUTTI_NT_THRESHOLD, written where nothing was just read, their buffers past the
 * cache: plan.c; no read for ownership). */
static void host_copy(const op_ctx_t *o, char *dst, const char *src, size_t bytes) {
  if (o->stream)
    copy_stream(dst, src, bytes);
  else
    copy_bytes(dst, src, bytes);
}

/* host_copy into each of to[0..k), each line of src loaded once for every two of them. */
static void host_copy_multi(const op_ctx_t *o, char *const *to, int k, const char *src,
                            size_t bytes) {
  if (o->stream)
    copy_stream_multi(to, k, src, bytes);
  else
    copy_bytes_multi(to, k, src, bytes);
}

/* Where element `at` of st's dst lies in rank q's mapped dst buffer (a push's destination). */
static char *push_dst(const op_ctx_t *o, const step_t *st, int q, size_t at) {
  return (char *)o->peer_buf[st->dst_buf == BUF_SEND ? 0 : 1][q] + (st->dst_off + at) * o->esize;
}

/* STEP_PUSH: the finished piece [at, +len) of dst into every other rank's dst buffer, by store
 * where it is mapped (streaming stores for calls from TUTTI_NT_THRESHOLD), else by copy (*bad:
 * the peer a failed write was to). */
static ncclResult_t push_piece(const op_ctx_t *o, const step_t *st, size_t at, size_t len,
                               const char *piece, int *bad) {
  ncclComm_t comm = o->comm;
  int b = st->dst_buf == BUF_SEND ? 0 : 1;
  for (int k = 1; k < comm->nranks; k++) {
    int q = tutti_mod(comm->rank + k, comm->nranks);
    if (!o->peer_read) {
      host_copy(o, push_dst(o, st, q, at), piece, len * o->esize);
      continue;
    }
    const transport_t *t = peer_transport(comm, q);
    *bad = q;
    TUTTI_CHECK(t->mem_write(comm, q, &o->peer_h[b][q], (st->dst_off + at) * o->esize, piece,
                             len * o->esize));
  }
  return ncclSuccess;
}

/* A copy between device memory (a peer's, mapped, or this rank's): pieces of at most
 * TUTTI_P2P_LDST_BYTES by the device's threads (a load/store kernel), larger ones by the copy
 * engine, whose launch costs more than a small copy takes. */
TUTTI_PARAM(P2pLdstBytes, "P2P_LDST_BYTES", 1 << 20)

static int dev_copy(const op_ctx_t *o, void *dst, const void *src, size_t bytes) {
  if ((int64_t)bytes <= tutti_param_P2pLdstBytes())
    return o->dev->copy_ldst(o->dev_q, dst, src, bytes);
  return o->dev->copy(o->dev_q, dst, src, bytes);
}

/* A device operation failed: the device's error, recorded (no peer is blamed). */
static int device_failed(lane_t *l, const op_ctx_t *o, const char *what, int rc) {
  TUTTI_ERR(ncclUnhandledCudaError, "rank %d: %s on device buffers in nccl%s failed: %s (%d)",
            l->comm->rank, what, coll_name(o->coll), o->dev->error_string(rc), rc);
  l->err = ncclUnhandledCudaError;
  return -1;
}

/* reduce_inputs on device memory (a kernel per operand, on the proxy's queue): the same order
 * of operands, so the same bits as the host; partial sums in o->dev_scratch (len elements fit),
 * so dst may be any of the inputs. 0 or the device's error. */
static int reduce_inputs_dev(const op_ctx_t *o, const step_t *st, const char *const *in, size_t len,
                             char *dst) {
  const device_ops_t *d = o->dev;
  int n = o->comm->nranks, f = st->recv_peer;
  int post = (st->flags & STEP_POST) && o->rop.postdiv ? REDUCE_POST : 0;
  if (n == 1) return d->reduce(o->dev_q, dst, in[f], NULL, len, &o->rop, post);
  const char *second = in[tutti_mod(f + 1, n)];
  if (n == 2) return d->reduce(o->dev_q, dst, in[f], second, len, &o->rop, post);
  char *acc = o->dev_scratch;
  int rc = d->reduce(o->dev_q, acc, in[f], second, len, &o->rop, 0);
  for (int k = 2; k < n - 1 && !rc; k++)
    rc = d->reduce(o->dev_q, acc, acc, in[tutti_mod(f + k, n)], len, &o->rop, 0);
  return rc ? rc : d->reduce(o->dev_q, dst, acc, in[tutti_mod(f + n - 1, n)], len, &o->rop, post);
}

/* A local step (no peer) of a call on device buffers: a copy or a kernel. */
static int step_local_dev(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved) {
  if (st->recv_peer >= 0 || st->send_peer >= 0) {
    TUTTI_ERR(ncclInternalError,
              "rank %d: nccl%s on device buffers reached a FIFO step of algorithm %s; only "
              "peer steps run on device memory",
              l->comm->rank, coll_name(o->coll), algo_name(o->algo));
    return -1;
  }
  size_t es = o->esize;
  char *src = o->buf[st->src_buf] ? o->buf[st->src_buf] + st->src_off * es : NULL;
  char *dst = o->buf[st->dst_buf] ? o->buf[st->dst_buf] + st->dst_off * es : NULL;
  int rflags =
      ((st->flags & STEP_PRE) ? REDUCE_PRE : 0) | ((st->flags & STEP_POST) ? REDUCE_POST : 0);
  int transform = reduce_transforms(&o->rop, rflags), swap = (st->flags & STEP_SWAP) != 0;
  int rc = 0;
  if (st->flags & STEP_REDUCE)
    rc = o->dev->reduce(o->dev_q, dst, swap ? dst : src, swap ? src : dst, st->count, &o->rop,
                        rflags);
  else if ((st->flags & STEP_STORE) && transform)
    rc = o->dev->reduce(o->dev_q, dst, src, NULL, st->count, &o->rop, rflags);
  else if ((st->flags & STEP_STORE) && dst != src)
    rc = dev_copy(o, dst, src, st->count * es);
  if (rc) return device_failed(l, o, "a local copy", rc);
  *moved = 1;
  return 1;
}

/* Where PEER_REDUCE writes element `at` of its result: this rank's dst_buf, or with send_peer
 * (another rank) that rank's, mapped; read by copy, into `out` (a piece then written to the rank
 * by away_write). */
static char *reduce_dst(const op_ctx_t *o, const step_t *st, size_t at, char *out) {
  int to = st->send_peer;
  if (to < 0 || to == o->comm->rank) return o->buf[st->dst_buf] + (st->dst_off + at) * o->esize;
  return o->peer_read ? out : push_dst(o, st, to, at);
}

/* The piece [at, +len) of a result read by copy into another rank's dst_buf (*bad: that rank,
 * where the write fails). */
static ncclResult_t away_write(const op_ctx_t *o, const step_t *st, size_t at, size_t len,
                               const char *piece, int *bad) {
  int to = st->send_peer, b = st->dst_buf == BUF_SEND ? 0 : 1;
  const transport_t *t = peer_transport(o->comm, to);
  *bad = to;
  return t->mem_write(o->comm, to, &o->peer_h[b][to], (st->dst_off + at) * o->esize, piece,
                      len * o->esize);
}

static int step_reduce(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved) {
  ncclComm_t comm = l->comm;
  word_ref_t prog = peer_word(comm, comm->rank, PEER_WORD_PROGRESS);
  size_t es = o->esize;
  size_t piece_bytes = o->dev         ? o->dev_scratch_bytes
                       : o->peer_read ? (size_t)tutti_param_CmaPieceBytes()
                                      : PEER_PIECE_BYTES;
  size_t piece = TUTTI_MAX(piece_bytes / es, 1);
  char *tmp = NULL, *out = NULL;
  const char *in[comm->nranks];
  char *also[comm->nranks];
  uint64_t seq = o->peer_seq << PEER_SEQ_SHIFT;
  /* a streaming push to mapped peers writes them block by block (reduce_inputs), else piece by
   * piece after the reduction (push_piece) */
  int fused = (st->flags & STEP_PUSH) && o->stream && !o->peer_read && !o->dev;
  /* read by copy into another rank's buffer: each piece reduced into `out` (after the peers'
   * pieces), then written there */
  int away = o->peer_read && st->send_peer >= 0 && st->send_peer != comm->rank;
  if (o->peer_read && !(tmp = tls_read_buffer((size_t)(comm->nranks - 1 + away) * piece * es))) {
    TUTTI_ERR(ncclSystemError, "rank %d: out of memory for peer reads", comm->rank);
    return -1;
  }
  if (away) out = tmp + (size_t)(comm->nranks - 1) * piece * es;
  test_delay(comm, o);
  for (size_t at = 0; at < st->count; at += piece) {
    size_t len = TUTTI_MIN(piece, st->count - at);
    char *dst = reduce_dst(o, st, at, out);
    int bad = -1;
    ncclResult_t res = gather_inputs(o, st, st->src_off + at, len, tmp, in, &bad);
    if (res != ncclSuccess) return access_failed(l, o, bad, res);
    if (o->dev) {
      int rc = reduce_inputs_dev(o, st, in, len, dst);
      if (rc) return device_failed(l, o, "a reduction kernel", rc);
    } else if (fused) {
      int nalso = 0;
      for (int k = 1; k < comm->nranks; k++)
        also[nalso++] = push_dst(o, st, tutti_mod(comm->rank + k, comm->nranks), at);
      reduce_inputs(o, st, in, len, dst, also, nalso);
      word_publish(prog, seq | (at + len));
      continue;
    } else {
      reduce_inputs(o, st, in, len, dst, NULL, 0);
    }
    if (away && (res = away_write(o, st, at, len, dst, &bad)) != ncclSuccess)
      return access_failed(l, o, bad, res);
    if ((st->flags & STEP_PUSH) && (res = push_piece(o, st, at, len, dst, &bad)) != ncclSuccess)
      return access_failed(l, o, bad, res);
    word_publish(prog, seq | (at + len));
  }
  *moved = 1;
  return 1;
}

/* PEER_COPY of this rank's own src with STEP_PUSH: piece by piece into its own dst (unless in
 * place) and, while the piece is in cache, into every other rank's dst at the same place. Both
 * copies stream where the call does (host_copy): the own dst, like the peers', is a line nobody
 * just read, and a plain store would read it for ownership first. To mapped peers each line of
 * src is loaded once for every two destinations (host_copy_multi). */
static int step_copy_push(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved) {
  size_t es = o->esize, piece = TUTTI_MAX(PEER_PIECE_BYTES / es, 1);
  const char *src = o->buf[st->src_buf] + st->src_off * es;
  char *dst = o->buf[st->dst_buf] + st->dst_off * es;
  int n = l->comm->nranks, fused = !o->peer_read;
  char *to[n];
  test_delay(l->comm, o);
  for (size_t at = 0; at < st->count; at += piece) {
    size_t len = TUTTI_MIN(piece, st->count - at);
    int bad = -1, k = 0;
    if (fused) {
      if (src != dst) to[k++] = dst + at * es;
      for (int j = 1; j < n; j++) to[k++] = push_dst(o, st, tutti_mod(l->comm->rank + j, n), at);
      host_copy_multi(o, to, k, src + at * es, len * es);
      continue;
    }
    if (src != dst) host_copy(o, dst + at * es, src + at * es, len * es);
    ncclResult_t res = push_piece(o, st, at, len, src + at * es, &bad);
    if (res != ncclSuccess) return access_failed(l, o, bad, res);
  }
  *moved = 1;
  return 1;
}

static int step_copy(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved) {
  int q = st->recv_peer;
  if (st->flags & STEP_PUSH) return step_copy_push(l, o, st, moved);
  size_t es = o->esize, ready = st->count;
  if (st->flags & STEP_AFTER_PROGRESS) {
    word_ref_t prog = peer_word(l->comm, q, PEER_WORD_PROGRESS);
    uint64_t seq = o->peer_seq << PEER_SEQ_SHIFT, avail = prog.w ? word_read(prog) : 0;
    ready = avail < seq                               ? 0
            : avail >= seq + (1ull << PEER_SEQ_SHIFT) ? st->count
                                                      : (size_t)(avail - seq);
  }
  if (ready > l->pos) {
    if (l->pos == 0) test_delay(l->comm, o);
    int b = st->src_buf == BUF_SEND ? 0 : 1;
    char *to = o->buf[st->dst_buf] + (st->dst_off + l->pos) * es;
    if (o->peer_read) {
      const transport_t *t = peer_transport(l->comm, q);
      ncclResult_t res = t->mem_read(l->comm, q, &o->peer_h[b][q], (st->src_off + l->pos) * es, to,
                                     (ready - l->pos) * es);
      if (res != ncclSuccess) return access_failed(l, o, q, res);
      l->pos = ready, *moved = 1;
      return l->pos < st->count ? block(l, q) : 1;
    }
    const char *src = o->peer_buf[b][q] + (st->src_off + l->pos) * es;
    size_t bytes = (ready - l->pos) * es;
    if (o->dev) { /* a load/store kernel or the copy engine, by size (dev_copy) */
      int rc = dev_copy(o, to, src, bytes);
      if (rc) return device_failed(l, o, "a peer copy", rc);
    } else {
      host_copy(o, to, src, bytes);
    }
    l->pos = ready, *moved = 1;
  }
  return l->pos < st->count ? block(l, q) : 1;
}

/* PEER_EXCHANGE with rank q (schedule.h), piece by piece through a buffer in cache: this rank's
 * piece of src into it, q's piece into this rank's dst, then the buffer into q's dst (both
 * streamed where the call streams). Read by copy: q's piece into the buffer (mem_read), this
 * rank's piece into q's dst (mem_write), then the buffer into place. The piece is L1-sized on
 * mapped buffers (three copies per piece) and TUTTI_CMA_PIECE_BYTES read by copy (two system
 * calls per piece); on device buffers the same three copies through o->dev_scratch, each waited
 * for (dev_copy), so in its order. */
static int step_exchange(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved) {
  ncclComm_t comm = l->comm;
  int q = st->recv_peer, sb = st->src_buf == BUF_SEND ? 0 : 1, db = st->dst_buf == BUF_SEND ? 0 : 1;
  size_t es = o->esize;
  size_t bytes = o->dev         ? o->dev_scratch_bytes
                 : o->peer_read ? (size_t)tutti_param_CmaPieceBytes()
                                : PEER_BLOCK_BYTES;
  size_t piece = TUTTI_MAX(bytes / es, 1);
  char *tmp = o->dev ? o->dev_scratch : tls_read_buffer(piece * es);
  if (!tmp) {
    TUTTI_ERR(ncclSystemError, "rank %d: out of memory for an all-to-all exchange", comm->rank);
    return -1;
  }
  const char *mine = o->buf[st->src_buf] + st->dst_off * es;
  char *into = o->buf[st->dst_buf] + st->dst_off * es;
  const transport_t *t = peer_transport(comm, q);
  test_delay(comm, o);
  for (size_t at = 0; at < st->count; at += piece) {
    size_t len = TUTTI_MIN(piece, st->count - at), off = (st->src_off + at) * es;
    if (o->dev) {
      int rc = dev_copy(o, tmp, mine + at * es, len * es);
      if (!rc) rc = dev_copy(o, into + at * es, o->peer_buf[sb][q] + off, len * es);
      if (!rc) rc = dev_copy(o, (char *)o->peer_buf[db][q] + off, tmp, len * es);
      if (rc) return device_failed(l, o, "an all-to-all exchange", rc);
      continue;
    }
    if (o->peer_read) {
      ncclResult_t res = t->mem_read(comm, q, &o->peer_h[sb][q], off, tmp, len * es);
      if (res == ncclSuccess)
        res = t->mem_write(comm, q, &o->peer_h[db][q], off, mine + at * es, len * es);
      if (res != ncclSuccess) return access_failed(l, o, q, res);
      host_copy(o, into + at * es, tmp, len * es);
      continue;
    }
    copy_bytes(tmp, mine + at * es, len * es);
    host_copy(o, into + at * es, o->peer_buf[sb][q] + off, len * es);
    host_copy(o, (char *)o->peer_buf[db][q] + off, tmp, len * es);
  }
  *moved = 1;
  return 1;
}

/* l->pos: 0 before this rank said it is done, then 1 + the peers found done so far. */
static int step_done(lane_t *l, const op_ctx_t *o, int *moved) {
  ncclComm_t comm = l->comm;
  int n = comm->nranks, r = comm->rank;
  if (l->pos == 0) {
    word_publish(peer_word(comm, r, PEER_WORD_DONE), o->peer_seq + 1);
    l->pos = 1, *moved = 1;
  }
  while (l->pos < (size_t)n) {
    int k = tutti_mod(r + (int)l->pos, n);
    word_ref_t done = peer_word(comm, k, PEER_WORD_DONE);
    if (done.w && word_read(done) < o->peer_seq + 1) return block(l, k);
    l->pos++;
  }
  return 1;
}

int engine_peer_step(lane_t *l, const op_ctx_t *o, const step_t *st, int *moved) {
  int rc = st->kind == STEP_FIFO && o->dev  ? step_local_dev(l, o, st, moved)
           : st->kind == STEP_PEER_REDUCE   ? step_reduce(l, o, st, moved)
           : st->kind == STEP_PEER_COPY     ? step_copy(l, o, st, moved)
           : st->kind == STEP_PEER_DONE     ? step_done(l, o, moved)
           : st->kind == STEP_PEER_EXCHANGE ? step_exchange(l, o, st, moved)
                                            : -2;
  if (rc == -2)
    TUTTI_ERR(ncclInternalError, "rank %d: unknown step kind %d in nccl%s", l->comm->rank,
              (int)st->kind, coll_name(o->coll));
  if (rc == 1) l->cur++, l->pos = 0;
  return rc < 0 ? -1 : rc; /* -1: the error is recorded */
}

void engine_peer_free(ncclComm_t comm) {
  memreg_comm_free(comm);
}
