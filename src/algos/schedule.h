/* Schedules: what each rank does for one collective, as data.
 *
 * A schedule is, per rank, an ordered list of steps. A step names at most one peer to receive
 * from and one to send to, a source and a destination buffer with element offsets, a length in
 * elements and flags. The engine cuts each step into pieces of one FIFO slot and, per piece:
 *
 *   input  = recv_peer >= 0 ? (REDUCE ? combine(src, received) : received) : src
 *   output = send to send_peer (if any); written to dst (if STORE)
 *   no peer at all: dst = REDUCE ? combine(src, dst) : copy(src)
 *
 * PRE marks `src` as this rank's own input (PreMulSum scales it), POST marks the result as
 * final (Avg divides it). Algorithms (ring.c, chain.c, oneshot.c, p2p.c, hier.c, tree.c, rhd.c)
 * only fill these lists; they never touch memory, sockets or shared memory, so they are
 * unit-tested without a network (tests/test_schedule.cc, tests/test_algos.cc).
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
enum { STEP_REDUCE = 1, STEP_STORE = 2, STEP_PRE = 4, STEP_POST = 8, STEP_DIRECT = 16 };
/* STEP_DIRECT (added by the engine's caller, never by an algorithm): a whole all-reduce read
 * straight from the other ranks' buffers when every rank's buffers can be mapped (direct.c);
 * dst_off then holds the number of steps after it that do the same through the FIFOs, run only
 * when some rank's buffers cannot be shared. */

typedef struct step {
  int32_t recv_peer; /* -1: none */
  int32_t send_peer; /* -1: none */
  uint8_t src_buf, dst_buf, flags;
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
#define SCHED_PUSH(...)                       \
  do {                                        \
    step_t st_ = {__VA_ARGS__};               \
    if (sched_push(s, st_) != 0) return -1;   \
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

/* Names (algo_name) are what TUTTI_ALGO / NCCL_ALGO take: ring, oneshot, chain, p2p, hier, tree
 * (double binary tree), rhd (recursive halving-doubling), rd (recursive doubling). */
typedef enum {
  ALGO_RING = 0,
  ALGO_ONESHOT,
  ALGO_CHAIN,
  ALGO_P2P,
  ALGO_HIER,
  ALGO_TREE,
  ALGO_RHD,
  ALGO_RD,
  ALGO_NUM
} algo_t;
const char *algo_name(algo_t a);

/* Everything an algorithm needs to know: ranks, counts, root. Counts are in elements. */
typedef struct sched_args {
  coll_t coll;
  int rank, nranks, root; /* root: also the peer for send/recv */
  size_t count;           /* per NCCL's definition for the collective */
  size_t chunk;           /* elements per ring step per round (>= 1) */
  int in_place;
} sched_args_t;

/* Appends rank's steps for the collective to s. Returns 0, or -1 out of memory. */
int ring_allreduce(const sched_args_t *a, sched_t *s);
int ring_reducescatter(const sched_args_t *a, sched_t *s);
int ring_allgather(const sched_args_t *a, sched_t *s);
int oneshot_allreduce(const sched_args_t *a, sched_t *s);
/* Hierarchical all-reduce (hier.c): host_of_rank[r] names rank r's host (any integer label). */
int hier_allreduce(const sched_args_t *a, const int *host_of_rank, sched_t *s);
/* 1 when hier_allreduce applies: at least 2 hosts, the same number of ranks on each. */
int hier_applicable(const int *host_of_rank, int nranks);
int chain_broadcast(const sched_args_t *a, sched_t *s);
int chain_reduce(const sched_args_t *a, sched_t *s);
/* Double binary tree all-reduce, tree reduce and broadcast (tree.c); depth = floor(log2 n). */
int tree_allreduce(const sched_args_t *a, sched_t *s);
int tree_reduce(const sched_args_t *a, sched_t *s);
int tree_broadcast(const sched_args_t *a, sched_t *s);
int tree_depth(int nranks);
/* Recursive halving-doubling and recursive doubling (rhd.c); the reduce-scatter and all-gather
 * return -2 unless nranks is a power of two. rhd_log2 = floor(log2 n). */
int rhd_allreduce(const sched_args_t *a, sched_t *s);
/* host_of_rank (NULL: none): fold each host's ranks into its first rank around rd across hosts. */
int rd_allreduce(const sched_args_t *a, const int *host_of_rank, sched_t *s);
int rhd_reducescatter(const sched_args_t *a, sched_t *s);
int rhd_allgather(const sched_args_t *a, sched_t *s);
int rhd_log2(int nranks);
/* Point-to-point based: one lane per peer and direction; lanes[p] sends, lanes[n + p] receives. */
int p2p_alltoall(const sched_args_t *a, sched_t *lanes);
int p2p_gather(const sched_args_t *a, sched_t *lanes);
int p2p_scatter(const sched_args_t *a, sched_t *lanes);

/* Builds rank a->rank's schedule of collective a->coll with algorithm `algo` (the one entry point
 * the engine and the simulator share). Collective algorithms append to `col`; point-to-point
 * ones (ALGO_P2P, send/recv) to lanes[0 .. 2*nranks). host_of_rank is needed by ALGO_HIER only.
 * Returns 0, -1 out of memory, -2 when the algorithm does not implement the collective. */
int sched_build(algo_t algo, const sched_args_t *a, const int *host_of_rank, sched_t *col,
                sched_t *lanes);

/* Elements of BUF_SCRATCH the schedule of `algo` for `a` uses (the engine provides at least
 * that many): in-place one-shot all-reduce (count), tree reduce (chunk), halving
 * reduce-scatter (n/2 * count); 0 for the others. */
size_t sched_scratch_elems(algo_t algo, const sched_args_t *a);

/* Start of block k when `count` elements are split into n nearly equal blocks. */
static inline size_t block_start(size_t count, int n, int k) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  return base * (size_t)k + ((size_t)k < rem ? (size_t)k : rem);
}

#ifdef __cplusplus
}
#endif
#endif
