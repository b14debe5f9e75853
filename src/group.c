/* Groups: calls between ncclGroupStart and ncclGroupEnd are queued per thread and run together
 * at GroupEnd, all their lanes advancing at once in one engine loop, so a group of sends and
 * receives never deadlocks whatever their order, and one thread may drive several
 * communicators (one rank each) in one group, as with ncclCommInitAll. A call outside any group
 * is a group of one. A group containing an invalid call runs nothing and GroupEnd returns the
 * error (nothing is written to user buffers).
 */
#include "group.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collcheck.h"
#include "device.h"
#include "proxy.h"
#include "small.h"

typedef struct group_state {
  int depth;
  ncclResult_t error;
  pending_t *ops;
  size_t n, cap;
  /* reused by group_run */
  op_ctx_t *ctxs;
  lane_t *lanes;
  ncclComm_t *comms;
  size_t ctx_cap, lane_cap, comm_cap;
  /* reused by the stream path */
  size_t *idx;
  uint32_t *calls;
  pending_t *rest, *others;
  size_t idx_cap, call_cap, rest_cap, others_cap;
} group_state_t;

static TUTTI_TLS group_state_t grp;

/* The thread's reused buffers are freed when it exits (a key destructor runs while its
 * thread-local storage is still there). */
static pthread_key_t grp_key;
static pthread_once_t grp_key_once = PTHREAD_ONCE_INIT;

static void grp_free(void *unused) {
  free(grp.ops), free(grp.ctxs), free(grp.lanes), free(grp.comms);
  free(grp.idx), free(grp.calls), free(grp.rest), free(grp.others);
  memset(&grp, 0, sizeof(grp));
}

static void grp_key_make(void) {
  pthread_key_create(&grp_key, grp_free);
}

static int grow_slow(void **p, size_t *cap, size_t need, size_t elem) {
  if (!*p) {
    pthread_once(&grp_key_once, grp_key_make);
    pthread_setspecific(grp_key, &grp);
  }
  size_t c = *cap ? *cap : 8;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return -1;
  *p = q, *cap = c;
  return 0;
}

/* Makes room for `need` elements in *p (0, or -1 out of memory); the common case, room
 * already, inlined on the paths every call takes. */
static inline int grow(void **p, size_t *cap, size_t need, size_t elem) {
  return need <= *cap ? 0 : grow_slow(p, cap, need, elem);
}

void group_fail(ncclResult_t res) {
  if (grp.depth > 0 && grp.error == ncclSuccess) grp.error = res;
}

static int comm_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (ncclComm_t const *)a, y = (uintptr_t) * (ncclComm_t const *)b;
  return x < y ? -1 : x > y;
}

/* Distinct communicators of the group, sorted (a global lock order). */
static int collect_comms(group_state_t *g, const pending_t *ops, size_t n) {
  int nc = 0;
  for (size_t i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < nc && !seen; j++) seen = g->comms[j] == ops[i].ctx.comm;
    if (seen) continue;
    if (grow((void **)&g->comms, &g->comm_cap, (size_t)nc + 1, sizeof(ncclComm_t))) return -1;
    g->comms[nc++] = ops[i].ctx.comm;
  }
  if (nc > 1) qsort(g->comms, nc, sizeof(ncclComm_t), comm_cmp);
  return nc;
}

static ncclResult_t build_lanes(group_state_t *g, int nc, int *nlanes) {
  int nl = 0;
  for (int c = 0; c < nc; c++) {
    ncclComm_t comm = g->comms[c];
    size_t need = (size_t)nl + 1 + 2 * (size_t)comm->nranks;
    if (grow((void **)&g->lanes, &g->lane_cap, need, sizeof(lane_t)))
      return TUTTI_ERR(ncclSystemError, "out of memory");
    if (comm->sched_scratch.n)
      g->lanes[nl++] = (lane_t){.comm = comm,
                                .steps = comm->sched_scratch.steps,
                                .nsteps = comm->sched_scratch.n,
                                .phase = 0};
    for (int p = 0; comm->lanes_used && p < 2 * comm->nranks; p++)
      if (comm->p2p_lanes[p].n)
        g->lanes[nl++] = (lane_t){.comm = comm,
                                  .steps = comm->p2p_lanes[p].steps,
                                  .nsteps = comm->p2p_lanes[p].n,
                                  .phase = 1};
  }
  *nlanes = nl;
  return ncclSuccess;
}

static int self_p2p(const pending_t *p) { /* count 0 is a no-op, as any empty send/recv */
  return (p->args.coll == COLL_SEND || p->args.coll == COLL_RECV) && p->args.root == p->args.rank &&
         p->args.count > 0;
}

/* Sends to self and receives from self of one communicator pair up in call order (the k-th
 * send with the k-th receive), as NCCL does; each pair is one copy, made before the engine runs
 * the rest of the group. Unmatched or different sizes: nothing runs, the group fails. */
static ncclResult_t self_copies(const pending_t *ops, size_t n, int run) {
  for (size_t i = 0; i < n; i++) {
    if (!self_p2p(&ops[i]) || ops[i].args.coll != COLL_SEND) continue;
    size_t k = 0, j; /* ops[i] is the k-th send to self of its comm: find the k-th receive */
    for (j = 0; j < i; j++)
      k += self_p2p(&ops[j]) && ops[j].ctx.comm == ops[i].ctx.comm && ops[j].args.coll == COLL_SEND;
    for (j = 0; j < n; j++)
      if (self_p2p(&ops[j]) && ops[j].ctx.comm == ops[i].ctx.comm &&
          ops[j].args.coll == COLL_RECV && k-- == 0)
        break;
    size_t bytes = ops[i].args.count * ops[i].ctx.esize;
    if (j == n || ops[j].args.count * ops[j].ctx.esize != bytes)
      return TUTTI_ERR(ncclInvalidUsage,
                       "rank %d: ncclSend to itself of %zu bytes has no matching "
                       "ncclRecv from itself of %zu bytes in the group",
                       ops[i].args.rank, bytes, bytes);
    if (run && bytes) memmove(ops[j].ctx.buf[BUF_RECV], ops[i].ctx.buf[BUF_SEND], bytes);
  }
  for (size_t i = 0; i < n; i++) { /* receives from self without a send */
    if (!self_p2p(&ops[i]) || ops[i].args.coll != COLL_RECV) continue;
    size_t sends = 0, recvs = 0;
    for (size_t j = 0; j < n; j++)
      if (self_p2p(&ops[j]) && ops[j].ctx.comm == ops[i].ctx.comm)
        sends += ops[j].args.coll == COLL_SEND, recvs += ops[j].args.coll == COLL_RECV;
    if (recvs > sends)
      return TUTTI_ERR(ncclInvalidUsage,
                       "rank %d: ncclRecv from itself has no matching ncclSend "
                       "to itself in the group",
                       ops[i].args.rank);
  }
  return ncclSuccess;
}

/* The extent of a send's or a receive's buffer on the host (empty for anything else, or for
 * device memory in place, which the host does not copy). */
static void p2p_extent(const pending_t *p, coll_t coll, const char **lo, const char **hi) {
  int b = coll == COLL_SEND ? BUF_SEND : BUF_RECV;
  *lo = *hi = NULL;
  if (p->args.coll != coll || p->ctx.dev) return;
  *lo = p->ctx.buf[b], *hi = *lo + p->bytes[coll == COLL_SEND ? 0 : 1];
}

/* Whether send i's buffer overlaps some receive's of the group. */
static int send_overlaps(const pending_t *ops, size_t n, size_t i) {
  const char *slo, *shi, *rlo, *rhi;
  p2p_extent(&ops[i], COLL_SEND, &slo, &shi);
  if (slo == shi) return 0;
  for (size_t j = 0; j < n; j++) {
    p2p_extent(&ops[j], COLL_RECV, &rlo, &rhi);
    if (rlo != rhi && slo < rhi && rlo < shi) return 1;
  }
  return 0;
}

/* Whether the group sends from memory it also receives into (an exchange in place): first over
 * the extent of all its receives, then send by send. */
static int p2p_in_place(const pending_t *ops, size_t n) {
  const char *lo = NULL, *hi = NULL, *a, *b;
  for (size_t j = 0; j < n; j++) {
    p2p_extent(&ops[j], COLL_RECV, &a, &b);
    if (a == b) continue;
    if (!lo || a < lo) lo = a;
    if (!hi || b > hi) hi = b;
  }
  for (size_t i = 0; lo && i < n; i++) {
    p2p_extent(&ops[i], COLL_SEND, &a, &b);
    if (a != b && a < hi && lo < b && send_overlaps(ops, n, i)) return 1;
  }
  return 0;
}

/* An exchange in place: a receive would overwrite the bytes of a send of the same group while
 * they go out (piece by piece through the FIFO once it is full, or while the peer reads them by
 * rendezvous), which NCCL leaves undefined. Each such send goes from a copy of its buffer made
 * here, before anything runs, so every receiver gets what the buffer held at the call. */
static ncclResult_t copy_in_place_sends(pending_t *ops, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!send_overlaps(ops, n, i)) continue;
    char *copy = plan_temp_alloc(ops[i].bytes[0]);
    if (!copy) return TUTTI_ERR(ncclSystemError, "out of memory for an in-place send's copy");
    memcpy(copy, ops[i].ctx.buf[BUF_SEND], ops[i].bytes[0]);
    ops[i].ctx.buf[BUF_SEND] = copy;
  }
  return ncclSuccess;
}

/* Empties a locked communicator's lanes before its calls are planned. */
static void lanes_reset(ncclComm_t comm) {
  sched_reset(&comm->sched_scratch);
  for (int p = 0; comm->lanes_used && p < 2 * comm->nranks; p++) sched_reset(&comm->p2p_lanes[p]);
  comm->lanes_used = 0;
}

/* The thread's group state. The empty asm hides that the pointer is &grp, so the compiler keeps
 * it in a register instead of recomputing the thread-local's address (a TLS-descriptor call in
 * the shared library, src/core.h) at every use. */
static group_state_t *grp_self(void) {
  group_state_t *g = &grp;
  __asm__("" : "+r"(g));
  return g;
}

static ncclResult_t group_run(pending_t *ops, size_t n) {
  group_state_t *g = grp_self();
  ncclResult_t res = ncclSuccess;
  int nc = collect_comms(g, ops, n), nlanes = 0, locked = 0;
  if (nc < 0 || grow((void **)&g->ctxs, &g->ctx_cap, n, sizeof(op_ctx_t)))
    return TUTTI_ERR(ncclSystemError, "out of memory");
  for (; locked < nc; locked++) {
    pthread_mutex_lock(&g->comms[locked]->lock);
    TUTTI_CHECK_GOTO(comm_check_state(g->comms[locked], "ncclGroupEnd"), res, out);
    lanes_reset(g->comms[locked]);
  }
  if (n > 1 && p2p_in_place(ops, n)) TUTTI_CHECK_GOTO(copy_in_place_sends(ops, n), res, out);
  int selfs = 0; /* sends or receives to self: self_copies has something to look at */
  for (size_t i = 0; i < n && !selfs; i++) selfs = self_p2p(&ops[i]);
  if (selfs) TUTTI_CHECK_GOTO(self_copies(ops, n, 0), res, out);
  /* the check and the planner talk to the peers (exchanges, peer-memory handshakes): a failure
   * there, as in the engine, leaves the communicators failed; a mismatch the check finds
   * (ncclInvalidUsage) runs nothing and leaves them usable */
  if (collcheck_wanted(ops, n) && (res = collcheck_run(ops, n)) != ncclSuccess) {
    if (res != ncclInvalidUsage) goto failed;
    goto out;
  }
  const sched_t *cached = NULL;
  int timed = 0; /* the planner wants the call's time, to the engine's end (adapt.h) */
  if (n == 1 && (res = plan_one_cached(&ops[0], &cached, &timed)) != ncclSuccess) goto failed;
  uint64_t t0 = timed ? tutti_time_ns() : 0;
  if (cached) { /* one call repeated: its cached steps run in place */
    ncclComm_t comm = ops[0].ctx.comm;
    if (grow((void **)&g->lanes, &g->lane_cap, 2 * (size_t)comm->nranks, sizeof(lane_t))) {
      res = TUTTI_ERR(ncclSystemError, "out of memory");
      goto failed;
    }
    res = engine_run(g->lanes, plan_cached_lanes(comm, g->lanes), &ops[0].ctx);
    comm->calls_cached++;
    if (t0 && res == ncclSuccess) plan_timed(&ops[0], tutti_time_ns() - t0);
    goto failed;
  }
  if ((res = plan_group(ops, n)) != ncclSuccess) goto failed;
  for (size_t i = 0; i < n; i++) g->ctxs[i] = ops[i].ctx;
  if (selfs) TUTTI_CHECK_GOTO(self_copies(ops, n, 1), res, out);
  TUTTI_CHECK_GOTO(build_lanes(g, nc, &nlanes), res, out);
  res = engine_run(g->lanes, nlanes, g->ctxs);
  if (t0 && res == ncclSuccess) plan_timed(&ops[0], tutti_time_ns() - t0);
failed:
  if (res != ncclSuccess)
    for (int c = 0; c < nc; c++) comm_set_error(g->comms[c], res, tutti_last_error());
out:
  for (int c = 0; c < locked; c++) pthread_mutex_unlock(&g->comms[c]->lock);
  plan_release();
  return res;
}

/* The tail of both quick ways, the communicator locked and its plan found: runs the kept lanes
 * (ops indexed by their steps' op), counts the ncalls calls when they went the quick way, and
 * leaves the communicator failed on an error as group_run does. */
static ncclResult_t run_kept(ncclComm_t comm, lane_t *lanes, int nlanes, const op_ctx_t *ops,
                             int quick, size_t ncalls) {
  lanes_reset(comm); /* as group_run leaves them */
  ncclResult_t r = quick ? engine_run_quick(lanes, nlanes, ops) : engine_run(lanes, nlanes, ops);
  if (quick) comm->calls_quick += ncalls; /* under the lock */
  if (r != ncclSuccess) comm_set_error(comm, r, tutti_last_error());
  return r;
}

/* The quick way for a host call run alone (outside any group, or the only call of one; no group
 * open) that repeats its communicator's cached plan (plan_quick, engine_run_quick): 1 when it
 * ran the call (*res its result, the communicator failed as group_run leaves it on an error), 0
 * when it did not take it and changed nothing (the plan does not fit, TUTTI_CHECK_COLL). p is
 * planned in place, its map_checked left as it was. */
static int group_quick(pending_t *p, ncclResult_t *res) {
  ncclComm_t comm = p->ctx.comm;
  group_state_t *g = grp_self();
  if (comm->proxy || p->on_stream || p->args.coll == COLL_SEND || p->args.coll == COLL_RECV ||
      collcheck_wanted(p, 1) ||
      grow((void **)&g->lanes, &g->lane_cap, 2 * (size_t)comm->nranks, sizeof(lane_t)))
    return 0; /* sends and receives: group_quick_p2p */
  pthread_mutex_lock(&comm->lock);
  const sched_t *steps = NULL;
  ncclResult_t r = comm_check_state(comm, "ncclGroupEnd"); /* as group_run: not failed by it */
  if (r == ncclSuccess) {
    plan_quick(p, &steps);
    if (!steps) {
      pthread_mutex_unlock(&comm->lock);
      return 0;
    }
    r = run_kept(comm, g->lanes, plan_cached_lanes(comm, g->lanes), &p->ctx, 1, 1);
  }
  pthread_mutex_unlock(&comm->lock);
  *res = r;
  return 1;
}

/* The quick way for a group of sends and receives on one communicator (or one alone, outside
 * any group) that repeats one of the last two such groups planned there (plan_p2p_quick): 1
 * when it ran the group (*res its result), 0 when it did not take it and changed nothing. */
static int group_quick_p2p(pending_t *ops, size_t n, ncclResult_t *res) {
  ncclComm_t comm = ops[0].ctx.comm;
  group_state_t *g = grp_self();
  if (comm->proxy || !plan_p2p_group(ops, n) || collcheck_wanted(ops, n) ||
      (n > 1 && p2p_in_place(ops, n)) || /* group_run sends from copies */
      grow((void **)&g->lanes, &g->lane_cap, 2 * (size_t)comm->nranks, sizeof(lane_t)) ||
      (n > 1 && grow((void **)&g->ctxs, &g->ctx_cap, n, sizeof(op_ctx_t))))
    return 0;
  pthread_mutex_lock(&comm->lock);
  int nlanes = 0, quick = 0;
  ncclResult_t r = comm_check_state(comm, "ncclGroupEnd");
  if (r == ncclSuccess) {
    r = plan_p2p_quick(ops, n, g->lanes, &nlanes, &quick);
    if (r == ncclSuccess && !nlanes) {
      pthread_mutex_unlock(&comm->lock);
      return 0;
    }
  }
  if (r == ncclSuccess) {
    for (size_t i = 0; n > 1 && i < n; i++) g->ctxs[i] = ops[i].ctx; /* the engine's op table */
    r = run_kept(comm, g->lanes, nlanes, n > 1 ? g->ctxs : &ops[0].ctx, quick, n);
  }
  pthread_mutex_unlock(&comm->lock);
  *res = r;
  return 1;
}

/* Plans and runs calls now, in the calling thread (the proxy's path into the engine). */
static ncclResult_t group_run_now(pending_t *ops, size_t n) {
  return group_run(ops, n);
}

/* The group's calls that take the small-call path (small.c): eligible, and the first such
 * call of their communicator in the group. Returns how many; their indices in idx. */
static size_t group_pick_small(const pending_t *ops, size_t n, size_t *idx) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (!small_eligible(&ops[i])) continue;
    size_t j = 0;
    while (j < k && ops[idx[j]].ctx.comm != ops[i].ctx.comm) j++;
    if (j == k) idx[k++] = i;
  }
  return k;
}

/* Small all-reduces go on their streams directly, all copies and arrivals before any wait
 * (ranks of one process may share a stream); then each communicator's other calls of the
 * group become one item of its proxy. */
static ncclResult_t group_submit_small(pending_t *ops, size_t n, const size_t *idx, size_t k) {
  group_state_t *g = grp_self();
  ncclResult_t res = ncclSuccess;
  size_t m = 0, j = 0, started = 0;
  if (grow((void **)&g->calls, &g->call_cap, k, sizeof(*g->calls)) ||
      grow((void **)&g->rest, &g->rest_cap, n - k + 1, sizeof(*g->rest)))
    res = TUTTI_ERR(ncclSystemError, "out of memory");
  uint32_t *calls = g->calls;
  pending_t *rest = g->rest;
  for (; res == ncclSuccess && started < k; started++)
    res = small_start(&ops[idx[started]], &calls[started]);
  for (size_t i = 0; res == ncclSuccess && i < k; i++) res = small_finish(&ops[idx[i]], calls[i]);
  for (size_t i = 0; res == ncclSuccess && i < n; i++) {
    if (j < k && idx[j] == i)
      j++;
    else
      rest[m++] = ops[i];
  }
  int nc = res == ncclSuccess && m ? collect_comms(g, rest, m) : 0;
  if (nc < 0) res = TUTTI_ERR(ncclSystemError, "out of memory");
  if (res == ncclSuccess && m) res = proxy_submit(g->comms, nc, rest, m, group_run_now);
  return res;
}

/* A call of a single-rank communicator on device buffers is a copy of sendbuff to recvbuff
 * (every collective of one rank is; nothing to do in place), enqueued on its stream at once,
 * without the proxy. Left to the proxy: send/recv, PreMulSum (a multiplication), buffers that
 * overlap without being the same or differ in size, a capturing stream (refused there). */
static int self_eligible(const pending_t *p) {
  const char *s = p->ctx.buf[BUF_SEND], *r = p->ctx.buf[BUF_RECV];
  size_t b = p->bytes[1];
  return p->ctx.comm->nranks == 1 && p->on_device[0] && p->on_device[1] && !p->scalar_dev &&
         !p->ctx.rop.premul && p->args.coll != COLL_SEND && p->args.coll != COLL_RECV &&
         p->bytes[0] == b && (s == r || s + b <= r || r + b <= s) &&
         !device_get()->stream_capturing(p->stream);
}

/* Enqueues the group's single-rank copies; *others gets the calls left (in order), *m their
 * number: ops itself, uncopied, when no call is a single-rank copy (the usual group). */
static ncclResult_t group_submit_self(pending_t *ops, size_t n, pending_t **others, size_t *m) {
  size_t first = 0;
  while (first < n && !self_eligible(&ops[first])) first++;
  *others = ops, *m = n;
  if (first == n) return ncclSuccess;
  group_state_t *g = grp_self();
  const device_ops_t *dev = device_get();
  if (grow((void **)&g->others, &g->others_cap, n, sizeof(*g->others)))
    return TUTTI_ERR(ncclSystemError, "out of memory");
  memcpy(g->others, ops, first * sizeof(*ops));
  *others = g->others, *m = first;
  for (size_t i = first; i < n; i++) {
    pending_t *p = &ops[i];
    if (!self_eligible(p)) {
      g->others[(*m)++] = *p;
      continue;
    }
    char *s = p->ctx.buf[BUF_SEND], *r = p->ctx.buf[BUF_RECV];
    int rc = s == r || !p->bytes[1] ? 0 : dev->stream_memcpy(p->stream, r, s, p->bytes[1]);
    if (rc) {
      ncclResult_t res = TUTTI_ERR(ncclUnhandledCudaError,
                                   "rank 0 of 1: cannot enqueue the copy of %s on its stream: "
                                   "%s (%d)",
                                   coll_name(p->args.coll), dev->error_string(rc), rc);
      comm_set_error(p->ctx.comm, res, tutti_last_error());
      return res;
    }
  }
  return ncclSuccess;
}

/* The stream path: single-rank calls and small all-reduces on their streams, the rest to the
 * proxies. */
static ncclResult_t group_submit(pending_t *ops, size_t n) {
  group_state_t *g = grp_self();
  TUTTI_CHECK(group_submit_self(ops, n, &ops, &n));
  if (n == 0) return ncclSuccess;
  if (grow((void **)&g->idx, &g->idx_cap, n, sizeof(*g->idx)))
    return TUTTI_ERR(ncclSystemError, "out of memory");
  size_t *idx = g->idx;
  size_t k = group_pick_small(ops, n, idx);
  ncclResult_t res;
  if (k) {
    res = group_submit_small(ops, n, idx, k);
  } else {
    int nc = collect_comms(g, ops, n);
    res = nc < 0 ? TUTTI_ERR(ncclSystemError, "out of memory")
                 : proxy_submit(g->comms, nc, ops, n, group_run_now);
  }
  return res;
}

/* A group with a device buffer or a stream goes to the proxies and returns at once; any other
 * runs here, after what the proxies still have of its communicators (it must not overtake). */
static ncclResult_t group_launch_rest(pending_t *ops, size_t n) {
  int on_stream = 0;
  for (size_t i = 0; i < n; i++) on_stream |= ops[i].on_stream;
  if (on_stream) return group_submit(ops, n);
  for (size_t i = 0; i < n; i++)
    if (ops[i].ctx.comm->proxy) proxy_drain(ops[i].ctx.comm);
  return group_run(ops, n);
}

/* A call alone whose plan is its communicator's cached one runs on the quick way. */
static ncclResult_t group_launch(pending_t *ops, size_t n) {
  ncclResult_t quick;
  if (n == 1 && group_quick(&ops[0], &quick)) return quick;
  if (group_quick_p2p(ops, n, &quick)) return quick;
  return group_launch_rest(ops, n);
}

ncclResult_t group_enqueue(pending_t *p, int keep) {
  if (grp.depth == 0) {
    ncclResult_t quick;
    if (group_quick(p, &quick) || group_quick_p2p(p, 1, &quick)) return quick;
    if (!keep) return group_launch_rest(p, 1);
    pending_t copy = *p; /* group_run plans it in place */
    return group_launch_rest(&copy, 1);
  }
  if (grp.n >= 65535) return TUTTI_ERR(ncclInvalidUsage, "more than 65535 calls in one group");
  if (grow((void **)&grp.ops, &grp.cap, grp.n + 1, sizeof(pending_t)))
    return TUTTI_ERR(ncclSystemError, "out of memory");
  grp.ops[grp.n++] = *p;
  __atomic_add_fetch(&p->ctx.comm->queued, 1, __ATOMIC_ACQ_REL); /* destroy refuses until the end */
  return ncclSuccess;
}

/* The group's calls no longer hold their communicators (they ran, or never will). */
static void group_release(pending_t *ops, size_t n) {
  for (size_t i = 0; i < n; i++) __atomic_sub_fetch(&ops[i].ctx.comm->queued, 1, __ATOMIC_ACQ_REL);
}

int group_depth(void) {
  return grp.depth;
}

API ncclResult_t ncclGroupStart(void) {
  if (grp.depth == 0) grp.error = ncclSuccess, grp.n = 0;
  grp.depth++;
  return ncclSuccess;
}

API ncclResult_t ncclGroupEnd(void) {
  if (grp.depth == 0)
    return TUTTI_ERR(ncclInvalidUsage, "ncclGroupEnd called without a matching ncclGroupStart");
  if (--grp.depth > 0) return ncclSuccess;
  ncclResult_t res = grp.error;
  if (res != ncclSuccess) {
    char why[512];
    snprintf(why, sizeof(why), "%s", tutti_last_error());
    group_jobs_run(0);
    TUTTI_ERR(res, "ncclGroupEnd: the group contained an invalid call (%s); nothing was run", why);
  } else {
    res = group_jobs_run(1); /* deferred inits and splits first: the calls may use them */
    if (res == ncclSuccess && grp.n > 0) res = group_launch(grp.ops, grp.n);
  }
  group_release(grp.ops, grp.n);
  grp.n = 0;
  grp.error = ncclSuccess;
  return res;
}
