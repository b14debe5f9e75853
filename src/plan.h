/* The planning layer: for every call, choose (the tuner, the plan cache, the peer-memory
 * agreement) -> build (the registry's builder) -> cache, and append the steps to the
 * communicator's lanes for the engine. The one place that decides which algorithm a call uses.
 * A call flows one way: API (enqueue.c) -> group (group.c) -> plan -> engine -> transport.
 */
#ifndef TUTTI_PLAN_H_
#define TUTTI_PLAN_H_

#include "engine.h"

typedef struct pending { /* one validated call waiting for its group to end */
  op_ctx_t ctx;
  sched_args_t args; /* args.root is the peer for send/recv */
  /* The stream path (proxy.c): a call with a device buffer or a stream runs there. */
  int on_stream;
  void *stream;           /* the user's cudaStream_t (NULL: the legacy default stream) */
  int on_device[2];       /* sendbuff, recvbuff are device memory */
  size_t bytes[2];        /* bytes of sendbuff, recvbuff this rank reads / writes */
  const void *scalar_dev; /* PreMulSum scalar in device memory: read when the call runs */
  /* Set by the proxy with ctx.dev when it left the device buffers in place: stages them into
   * host memory (ctx.dev then NULL). The planner calls it when the call cannot run on the
   * device (no algorithm for it, or some rank's buffers cannot be mapped). */
  ncclResult_t (*stage)(struct pending *p);
  int map_checked;       /* plan.c's map_excluded was asked (once per call) */
  uint32_t map_excluded; /* its answer: algorithms (bits) this call leaves out */
} pending_t;

/* Plans the calls of one group (the communicators locked, their lanes empty): chooses each
 * call's algorithm and appends its steps, tagged with the call's index in ops, to its
 * communicator's lanes (comm->sched_scratch for collectives, comm->p2p_lanes for point-to-point
 * algorithms). Sends and receives to self get no steps (the group copies them). The group's
 * peer-memory handshakes run together through the engine: collective, every rank plans the
 * same calls in the same order. */
ncclResult_t plan_group(pending_t *ops, size_t n);
/* The fast way for a group of one host call whose steps are its communicator's cached plan as
 * they are (the key of the last call, no peer steps, no input to copy first, not a send or a
 * receive): does for it what plan_group does and sets *steps to the cached steps, which the
 * engine runs in place as the lanes plan_cached_lanes gives (their op index is 0). *steps NULL:
 * plan it with plan_group. *timed: the planner wants the call's time (the measured choices,
 * adapt.h: the FIFOs against cma, direct against push, plain against streaming stores): the
 * caller times it from here to the engine's end and hands it to plan_timed; a call of the first
 * two never takes the fast way (nor, of the last, the quick way). */
ncclResult_t plan_one_cached(pending_t *p, const sched_t **steps, int *timed);
/* The quick way, tried first for a host call outside any group: when p repeats the cached plan
 * (its key, the same answer from map_excluded) and its cached steps are ones engine_run_quick
 * runs (comm->plan.quick), does for p what plan_one_cached does (the same counts: map_excluded's
 * skip, op_count) and sets *steps. *steps NULL: nothing was changed, plan p the ordinary way.
 * Never for a call the measured choice times, nor one whose scratch would have to grow (no
 * temporary is left for plan_release). p's map_checked and map_excluded are left as
 * they were (p may be the thread's cached call, enqueue.c). */
void plan_quick(pending_t *p, const sched_t **steps);
/* The lanes of comm's cached steps (those plan_one_cached and plan_quick give) into lanes, room
 * for 2 * nranks of them: one lane, or a point-to-point algorithm's lanes. Returns how many. */
int plan_cached_lanes(ncclComm_t comm, lane_t *lanes);
/* The quick way for a group of sends and receives (a send or a receive alone included) on one
 * communicator, locked, that repeats one of the last two such groups planned there (the same
 * calls in the same order: kind, peer, count, element size; plan_group keeps them): does for each
 * call what plan_group does, and puts the group's cached lanes into lanes (room for 2 * nranks):
 * *nlanes their number, *quick whether engine_run_quick may run them. *nlanes 0: the group is not
 * the one of them, nothing was changed. Only for a group plan_p2p_group takes. */
ncclResult_t plan_p2p_quick(pending_t *ops, size_t n, lane_t *lanes, int *nlanes, int *quick);
/* Whether ops is a group plan_p2p_quick may take: sends and receives on host memory, to and from
 * other ranks of one communicator, at most PLAN_P2P_MAX of them (reads nothing of the
 * communicator's state: no lock needed). */
int plan_p2p_group(const pending_t *ops, size_t n);
/* The time of a call plan_one_cached asked for, once the engine ran it. */
void plan_timed(const pending_t *p, uint64_t ns);
/* Memory that lives until plan_release (scratch beyond the communicator's, copies, peer
 * address tables): released once the group's engine run is over. */
void *plan_temp_alloc(size_t bytes);
/* Keeps p (malloc'd, may be NULL) to be freed by plan_release; 0, or -1 out of memory (p is then
 * not kept, the caller frees it). */
int plan_temp_keep(void *p);
void plan_release(void);
/* What the tuner knows of comm (the same on every rank); compress NULL: an exact call. */
tuner_topo_t plan_topo(ncclComm_t comm);
/* Frees the communicator's plan cache. */
void plan_free(ncclComm_t comm);

/* Shared by plan.c and plan_p2p.c. */
TUTTI_PARAM_DECL(DumpSchedule); /* TUTTI_DUMP_SCHEDULE: print every call's steps */
/* After the choice (p->ctx.algo, p->args.chunk), before the steps: streaming stores, scratch,
 * the log line. */
ncclResult_t plan_prepare(pending_t *p);
/* The communicator's p2p lanes, one after another, into k (its steps emptied first). 0, or -1
 * out of memory. */
int plan_lanes_keep(ncclComm_t comm, kept_lanes_t *k);
/* Kept lanes (nlanes 0: the steps as one lane) into lanes; returns how many. */
int plan_lanes_of(ncclComm_t comm, const kept_lanes_t *k, lane_t *lanes);
void plan_lanes_free(kept_lanes_t *k);
/* After plan_group: a group of sends and receives whose lanes hold only its calls' steps,
 * not kept yet, replaces the one of the communicator's two used less recently
 * (plan_p2p_quick). */
void plan_p2p_cache(const pending_t *ops, size_t n);
void plan_p2p_free(ncclComm_t comm);

/* Send and receive to self are the group's copies (group.c): no steps. */
static inline int plan_self_p2p(const pending_t *p) {
  return (p->args.coll == COLL_SEND || p->args.coll == COLL_RECV) && p->args.root == p->args.rank;
}

/* The in-place all-to-all's input (plan_a2a.c).
 * An in-place all-to-all whose send buffer is its receive buffer (args.count > 0). */
int plan_a2a_needs_copy(const pending_t *p);
/* args.swap of each call of a group whose algorithms are chosen: an in-place all-to-all swaps
 * its blocks through the FIFOs (FIFO_SWAP) where every connection sends through slots and every
 * call of the group with lane steps on its communicator swaps too. */
void plan_a2a_swaps(pending_t *ops, size_t n);
/* The same for a call alone that may run the cached steps (only a swapping one is kept). */
void plan_a2a_cached_swap(pending_t *p);
/* Sends from a copy of the other ranks' blocks (ctx.buf[BUF_SEND] becomes it). */
ncclResult_t plan_a2a_copy_input(ncclComm_t comm, pending_t *p);

#endif
