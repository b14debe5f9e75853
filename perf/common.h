/* The harness shared by the tutti benchmarks (all_reduce_perf, and later all_gather_perf,
 * broadcast_perf, ...). A benchmark is one small file that describes its collective in a
 * perf_coll_t and calls perf_main(); the harness does everything else: options, communicator,
 * buffers, warm-up, timing (max over ranks), the closed-form check and nccl-tests' output.
 *
 * Inputs follow a closed-form pattern (see common.c): element i of rank r's input is a small
 * integer that depends on i, r, the datatype, the op and the number of ranks, chosen so that
 * every partial result of every reduction order is exactly representable in the datatype.
 * A collective describes its expected output with perf_fill_input() (some rank's input, as an
 * all-gather or a broadcast delivers it) and perf_fill_reduced() (the reduction of all ranks'
 * inputs, as an all-reduce or a reduce-scatter delivers it).
 */
#ifndef TUTTI_PERF_COMMON_H_
#define TUTTI_PERF_COMMON_H_

#include <stddef.h>

#include "datatypes.h"
#include "tutti.h"

/* Element counts of one call. */
typedef struct perf_counts {
  size_t send_count;      /* elements in this rank's input */
  size_t recv_count;      /* elements in this rank's receive buffer */
  size_t param_count;     /* the `count` argument of the call */
  size_t count;           /* printed in the count column; algbw = count * type size / time */
  size_t in_place_offset; /* in-place: the input lives at recvbuff + offset (elements) */
} perf_counts_t;

typedef struct perf_pattern perf_pattern_t; /* private to common.c */

/* One (datatype, op, root, size) on this rank: what the collective's callbacks see. */
typedef struct perf_case {
  const perf_type_t *type;
  ncclRedOp_t op;      /* ncclSum for collectives that do not reduce */
  const char *op_name; /* "sum", ..., or "none" */
  int root;            /* -1 for collectives without a root */
  int rank, nranks;
  ncclComm_t comm;
  perf_counts_t counts;
  const perf_pattern_t *pattern;
} perf_case_t;

typedef struct perf_coll {
  const char *name;      /* "all_reduce": the program is name + "_perf" */
  const char *call_name; /* "ncclAllReduce", for error messages */
  int reduces;           /* takes a reduction op (-o); if 0 the redop column says "none" */
  int rooted;            /* takes a root (-r); if 0 the root column says -1 */
  /* Counts for a size of `bytes` (nccl-tests' meaning of -b/-e for this collective). */
  void (*counts)(size_t bytes, size_t type_size, int nranks, int rank, perf_counts_t *out);
  /* busbw = algbw * bus_factor(nranks): the bandwidth a single link needs. */
  double (*bus_factor)(int nranks);
  /* Writes this rank's input, counts.send_count elements, into buf. */
  void (*fill_input)(const perf_case_t *c, void *buf);
  /* Writes elements [first, first + count) of this rank's expected receive buffer into buf
   * (buf[0] is element `first`). Returns 0 if this rank's output is unspecified (e.g. a
   * non-root rank of reduce), so nothing is checked there. */
  int (*expected)(const perf_case_t *c, void *buf, size_t first, size_t count);
  /* The call itself, synchronous (host buffers, NULL stream). */
  ncclResult_t (*run)(const perf_case_t *c, const void *sendbuf, void *recvbuf);
} perf_coll_t;

/* Runs the benchmark; returns the process exit status (0, or 1 if any element was wrong). */
int perf_main(const perf_coll_t *coll, int argc, char **argv);

/* Elements [first, first + count) of `rank`'s input, written to buf. */
void perf_fill_input(const perf_case_t *c, int rank, void *buf, size_t first, size_t count);
/* Elements [first, first + count) of the reduction (c->op) of every rank's input. */
void perf_fill_reduced(const perf_case_t *c, void *buf, size_t first, size_t count);

/* Prints "<what> failed: <error string> (<last error>)" and exits 1 (after ncclCommAbort). */
void perf_fail(ncclComm_t comm, const char *what, ncclResult_t res);
#define PERF_NCCL(comm, call)                                        \
  do {                                                               \
    ncclResult_t perf_res_ = (call);                                 \
    if (perf_res_ != ncclSuccess) perf_fail(comm, #call, perf_res_); \
  } while (0)

#endif /* TUTTI_PERF_COMMON_H_ */
