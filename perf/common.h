/* The harness shared by the tutti benchmarks (all_reduce_perf, all_gather_perf, broadcast_perf,
 * ...). A benchmark is one small file that describes its collective in a perf_coll_t and calls
 * perf_main(); the harness does everything else: options, communicator, buffers, warm-up,
 * timing (aggregated across ranks as -a says), the closed-form check, the -T watchdog, JSON and
 * nccl-tests' output.
 *
 * Data. Buffers are laid out in blocks of `count` elements, as NCCL's collectives see them
 * (an all-gather's receive buffer is one block per rank, an alltoall's send buffer one block per
 * destination, an all-reduce's buffers a single block). Element k of block b of rank r's input
 * is a closed form of (r, b, k) -- see common.c -- written by perf_fill_blocks(), so a
 * collective states its input and its expected output as "which rank's which block goes where":
 *   all-gather input   perf_fill_blocks(c, buf, first, n, count, c->rank, 0)
 *   all-gather output  perf_fill_blocks(c, buf, first, n, count, PERF_EACH, 0)
 *   alltoall output    perf_fill_blocks(c, buf, first, n, count, PERF_EACH, c->rank)
 *   reduce-scatter out perf_fill_blocks(c, buf, first, n, count, PERF_REDUCED, c->rank)
 * Values are small integers chosen so that every partial result of every reduction order is
 * exact in the datatype, and so that different (rank, block) pairs hold different data, which
 * catches a block delivered to the wrong place.
 */
#ifndef TUTTI_PERF_COMMON_H_
#define TUTTI_PERF_COMMON_H_

#include <stddef.h>

#include "datatypes.h"
#include "tutti.h"

/* Element counts of one call on one rank. The printed size is max(send, recv) elements, as in
 * nccl-tests. */
typedef struct perf_counts {
  size_t send_count;    /* elements in this rank's input */
  size_t recv_count;    /* elements of this rank's output: what is checked */
  size_t param_count;   /* the `count` argument of the call; the count column */
  size_t bw_count;      /* algbw = bw_count * type size / time (nccl-tests' algbw) */
  size_t in_place_send; /* in-place: the input starts at recvbuff + in_place_send (elements) */
  size_t in_place_recv; /* in-place: the output starts at recvbuff + in_place_recv */
} perf_counts_t;

typedef struct perf_pattern perf_pattern_t; /* private to common.c */
typedef struct perf_coll perf_coll_t;

/* One (datatype, op, root, size, placement) on this rank: what the callbacks see. */
typedef struct perf_case {
  const perf_coll_t *coll;
  const perf_type_t *type;
  ncclRedOp_t op;      /* ncclSum for collectives that do not reduce */
  const char *op_name; /* "sum", ..., or "none" */
  int root;            /* -1 for collectives without a root */
  int rank, nranks;
  int in_place;
  ncclComm_t comm;
  perf_counts_t counts;
  perf_pattern_t *pattern;
} perf_case_t;

struct perf_coll {
  const char *name;       /* "all_reduce": the program is name + "_perf" */
  const char *call_name;  /* "ncclAllReduce", for messages */
  int reduces;            /* takes a reduction op (-o); if 0 the redop column says "none" */
  int rooted;             /* takes a root (-r); if 0 the root column says -1 */
  int in_place_unchecked; /* nccl-tests reports N/A for the in-place check (sendrecv) */
  /* Counts for a size of `bytes` (nccl-tests' meaning of -b/-e for this collective). */
  void (*counts)(size_t bytes, size_t type_size, int nranks, int rank, perf_counts_t *out);
  /* busbw = algbw * bus_factor(nranks), nccl-tests' factor. */
  double (*bus_factor)(int nranks);
  /* Writes elements [first, first + n) of this rank's input into buf (buf[0] is element
   * `first`). Writes nothing where the call reads no input on this rank (a broadcast's
   * non-root ranks). */
  void (*fill_input)(const perf_case_t *c, void *buf, size_t first, size_t n);
  /* Writes elements [first, first + n) of this rank's expected output into buf. */
  void (*expected)(const perf_case_t *c, void *buf, size_t first, size_t n);
  /* The call itself, synchronous (host buffers, NULL stream). */
  ncclResult_t (*run)(const perf_case_t *c, const void *sendbuf, void *recvbuf);
  /* NULL, or: returns 0 and fills why[] when the collective cannot run on nranks ranks; the
   * program then prints "# <why>, skipping" and exits 0, as nccl-tests does. */
  int (*supported)(int nranks, char *why, size_t len);
};

/* Runs the benchmark; returns the process exit status (0, or 1 if any element was wrong). */
int perf_main(const perf_coll_t *coll, int argc, char **argv);

#define PERF_EACH (-1)    /* perf_fill_blocks: the block's own index, as rank or block */
#define PERF_REDUCED (-2) /* perf_fill_blocks rank: the reduction (c->op) over all ranks */

/* Elements [first, first + n) of a buffer of consecutive blocks of `block_count` elements in
 * which block j holds block `block` (or j, for PERF_EACH) of rank `rank`'s input (or of rank j,
 * for PERF_EACH; or the reduction over all ranks, for PERF_REDUCED). */
void perf_fill_blocks(const perf_case_t *c, void *buf, size_t first, size_t n, size_t block_count,
                      int rank, int block);

/* What a call must leave in a receive buffer it does not own (a reduce's or a gather's
 * non-root ranks): the harness's poison, and the in-place input where it lives. */
void perf_fill_untouched(const perf_case_t *c, void *buf, size_t first, size_t n);

/* Prints "<what> failed: <error string> (<last error>)" and exits 1 (after ncclCommAbort). */
void perf_fail(ncclComm_t comm, const char *what, ncclResult_t res);
#define PERF_NCCL(comm, call)                                        \
  do {                                                               \
    ncclResult_t perf_res_ = (call);                                 \
    if (perf_res_ != ncclSuccess) perf_fail(comm, #call, perf_res_); \
  } while (0)

/* Counts helpers for the common layouts (nccl-tests' GetCollByteCount functions). */
/* One block of bytes / size elements, sent and received in place (all-reduce, broadcast,
 * reduce, sendrecv). */
void perf_counts_flat(size_t bytes, size_t type_size, perf_counts_t *out);
/* rank-th block of n: send one block, receive n (all-gather, gather). */
void perf_counts_gather(size_t bytes, size_t type_size, int nranks, int rank, perf_counts_t *out);
/* send n blocks, receive the rank-th (reduce-scatter, scatter). */
void perf_counts_scatter(size_t bytes, size_t type_size, int nranks, int rank, perf_counts_t *out);

/* Bus factors (nccl-tests' GetBw). */
double perf_bus_one(int nranks);       /* broadcast, reduce, sendrecv, hypercube */
double perf_bus_n_minus_1(int nranks); /* (n-1)/n: all-gather, reduce-scatter, alltoall, ... */

#endif /* TUTTI_PERF_COMMON_H_ */
