/* Schedules: what each rank does for one collective, as data.
 *
 * A schedule is, per rank, an ordered list of steps. A step names at most one peer to receive
 * from and one to send to, a source and a destination buffer with element offsets, a length in
 * elements and flags. The engine cuts each step into pieces of one FIFO slot and, per piece:
 *
 *   input  = recv_peer >= 0 ? (REDUCE ? combine(src, received) : received) : src
 *   output = send to send_peer (if any); written to dst (if STORE)
 *   no peer at all: dst = REDUCE ? combine(src, dst) : copy(src)
 *   (SWAP: combine(received, src) and combine(dst, src) instead)
 *
 * PRE marks `src` as this rank's own input (PreMulSum scales it), POST marks the result as
 * final (Avg divides it). Algorithms (one file each in src/algos/, listed in registry.h) only
 * fill these lists; they never touch memory, sockets or shared memory, so they are unit-tested
 * without a network (tests/test_schedule.cc, tests/test_algos.cc).
 *
 * Steps that both receive and send around a cycle (rings, pairwise exchanges, the two trees of
 * tree.c) must move at most `chunk` elements per step per round: with every FIFO holding at
 * least 2 chunks, a cycle can never fill all of its FIFOs at once, so it can never deadlock.
 * Messages between two ranks travel through one FIFO per direction, so the sender's steps to a
 * peer and the receiver's steps from it list them in the same order with the same counts.
 * docs/adding-an-algorithm.md walks through adding one.
 */
#ifndef TUTTI_SCHEDULE_H_
#define TUTTI_SCHEDULE_H_

#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { BUF_SEND = 0, BUF_RECV = 1, BUF_NONE = 2, BUF_SCRATCH = 3 };
enum {
  STEP_REDUCE = 1,
  STEP_STORE = 2,
  STEP_PRE = 4,
  STEP_POST = 8,
  STEP_AFTER_PROGRESS = 16,
  STEP_PUSH = 32,  /* PEER_REDUCE: also writes each finished piece of dst into the same place
                      of every other rank's dst_buf (mapped: by store; else by copy); PEER_COPY
                      of the own src: the same with each piece copied */
  STEP_WHOLE = 64, /* FIFO step, only a send from src_buf or only a store into dst_buf, whose
                      peer's matching step is one too: a transport may move it whole by
                      rendezvous (transport.h, send_large / recv_large) */
  STEP_SWAP = 128, /* FIFO REDUCE step: the other operand order, combine(received, src), or
                      without a peer dst = combine(dst, src). Max and min of NaNs, and
                      rounding, depend on the order. The kernels scale only the first operand:
                      with PRE only where sched_args_t.premul is 0 (PRE then scales nothing) */
};

/* What a step does. FIFO steps move pieces through connections (the semantics above). Peer
 * steps read other ranks' buffers in place through the transports' peer-memory capability
 * (transport.h); an algorithm that uses them declares ALGO_NEEDS_PEER_MEMORY (registry.h) and
 * the planner only runs it once every rank has mapped every other rank's buffers:
 *
 *   PEER_REDUCE  dst[dst_off, +count) = x(f) (+) x(f+1) (+) ... (+) x(f-1), x(k) being rank k's
 *                src_buf at [src_off, +count) and f = recv_peer (the first operand: the order
 *                is fixed, so every rank's result has the same bits); dst is this rank's
 *                dst_buf, or with send_peer another rank's (mapped: by store; else by copy);
 *                publishes its progress
 *                (elements of dst final so far) for PEER_COPY steps of the other ranks;
 *                with STEP_PUSH it also writes every finished
 *                piece into the other ranks' dst_buf at the same place, so they copy nothing
 *   PEER_COPY    dst[dst_off, +count) = rank recv_peer's src_buf at [src_off, +count); with
 *                STEP_AFTER_PROGRESS only as far as that rank's PEER_REDUCE progress says;
 *                recv_peer this rank with STEP_PUSH: also into every other rank's dst_buf at
 *                the same place (host memory the peers map)
 *   PEER_DONE    says this rank is done with the call and waits until every rank is: nobody
 *                returns (and may reuse its buffers) while another rank still reads them
 *   PEER_EXCHANGE  with q = recv_peer: dst[dst_off, +count) = q's src_buf at [src_off, +count)
 *                and q's dst_buf at [src_off, +count) = this rank's src_buf at [dst_off,
 *                +count), each element of both read before either is written, so either side
 *                may be in place (src_buf and dst_buf one buffer); q touches none of these
 *                elements in the call (an in-place all-to-all's pair of blocks, swapped half by
 *                each of the two ranks)
 *
 * And one more FIFO kind, for a block that goes to a peer and comes from it in the same place:
 *   FIFO_SWAP    sends src[src_off, +count) to send_peer and receives dst[dst_off, +count) from
 *                recv_peer (the same rank), piece by piece through the FIFOs, each piece going
 *                out before the piece at its place comes in, so src and dst may be one range
 *                (an in-place all-to-all's block, with no copy of the input). On the wire it is
 *                a STEP_WHOLE send and a STEP_WHOLE store that ask for pieces: the peer's
 *                matching steps may be either. Only on transports that send through slots
 *                (send_post: pieces sent ahead are copies, so the lane never waits for its own
 *                bytes to leave).
 */
typedef enum {
  STEP_FIFO = 0,
  STEP_PEER_REDUCE,
  STEP_PEER_COPY,
  STEP_PEER_DONE,
  STEP_PEER_EXCHANGE,
  STEP_FIFO_SWAP
} step_kind_t;

typedef struct step {
  int32_t recv_peer; /* -1: none */
  int32_t send_peer; /* -1: none */
  uint8_t src_buf, dst_buf, flags;
  uint8_t kind;            /* step_kind_t */
  uint16_t op;             /* index of the operation (buffers, type, op) in the engine's table */
  size_t src_off, dst_off; /* elements */
  size_t count;            /* elements */
} step_t;

/* A growable list of steps (one "lane" of the engine: steps run strictly in order). */
typedef struct sched {
  step_t *steps;
  size_t n, cap;
  size_t tagged; /* steps [0, tagged) already carry their op index */
} sched_t;

int sched_push(sched_t *s, step_t st); /* 0 on success, -1 out of memory */
/* For the algorithm files: appends the step given by designated initializers to `s` (the
 * sched_t * in scope), returning -1 from the calling function when out of memory, e.g.
 *   SCHED_PUSH(.recv_peer = prev, .send_peer = next, .flags = STEP_REDUCE, .count = len); */
#define SCHED_PUSH(...)                     \
  do {                                      \
    step_t st_ = {__VA_ARGS__};             \
    if (sched_push(s, st_) != 0) return -1; \
  } while (0)
int sched_append(sched_t *s, const step_t *steps, size_t n); /* the same, n steps at once */
void sched_reset(sched_t *s);
void sched_free(sched_t *s);
/* Human-readable dump of a schedule (for TUTTI_DUMP_SCHEDULE and tests). */
void sched_dump(const sched_t *s, int rank, const char *title, void *file);
/* Steps [from, to) only, numbered from 0. */
void sched_dump_range(const sched_t *s, size_t from, size_t to, int rank, const char *title,
                      void *file);

/* Collective kinds. */
typedef enum {
  COLL_ALLREDUCE,
  COLL_BROADCAST,
  COLL_REDUCE,
  COLL_ALLGATHER,
  COLL_REDUCESCATTER,
  COLL_ALLTOALL,
  COLL_GATHER,
  COLL_SCATTER,
  COLL_SEND,
  COLL_RECV,
  COLL_NUM
} coll_t;
const char *coll_name(coll_t c);
/* The collective a tool's --coll names, in any of the spellings users bring: nccl-tests'
 * "all_reduce", "allreduce", NCCL's "AllReduce" or "ncclAllReduce" (case, '_' and '-' ignored).
 * Send and Recv are not collectives a tool can pick: -1 for them and for unknown names. */
int coll_parse(const char *name);

/* Everything an algorithm needs to know: ranks, counts, root. Counts are in elements. */
typedef struct sched_args {
  coll_t coll;
  int rank, nranks, root; /* root: also the peer for send/recv */
  size_t count;           /* per NCCL's definition for the collective */
  size_t chunk;           /* elements per ring step per round (>= 1) */
  int in_place;
  int premul; /* a PreMulSum: PRE scales (and rounds) a rank's input; 0: PRE changes nothing */
  const int *host_of_rank; /* [nranks]: host label of each rank (NULL: unknown) */
  const int *ring;         /* [nranks]: the rank at each ring position (NULL: rank order) */
  const int *ring_pos;     /* [nranks]: the ring position of each rank (with ring) */
  const struct tuner_compress *compress; /* lossy entries: the call's compressor (cost.h) */
  /* all-to-all with peer steps: some rank sends from its live buffer (in place, no copy), so
   * every rank swaps each pair's blocks with PEER_EXCHANGE (the same on every rank) */
  int exchange;
  /* in-place all-to-all through the FIFOs: each peer's block is one FIFO_SWAP, the input not
   * copied (plan.c sets it where the group's other steps allow it) */
  int swap;
} sched_args_t;

/* sched_args_t.exchange for tools that build a call whose ranks are all in place or all not (the
 * planner learns it from the handshake): an in-place all-to-all exchanges. */
static inline int sched_exchanges(coll_t c, int in_place) {
  return c == COLL_ALLTOALL && in_place;
}

/* The rank at ring position p (any integer: taken mod nranks) and this rank's position. */
static inline int sched_ring_rank(const sched_args_t *a, int p) {
  int n = a->nranks, q = ((p % n) + n) % n;
  return a->ring ? a->ring[q] : q;
}
static inline int sched_ring_me(const sched_args_t *a) {
  return a->ring ? a->ring_pos[a->rank] : a->rank;
}

/* Start of block k when `count` elements are split into n nearly equal blocks. */
static inline size_t block_start(size_t count, int n, int k) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  return base * (size_t)k + ((size_t)k < rem ? (size_t)k : rem);
}

#ifdef __cplusplus
}
#endif
#endif
