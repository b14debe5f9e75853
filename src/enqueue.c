/* Public collective and point-to-point calls: argument checks, then the group (group.c), which
 * plans (plan.c) and runs (engine.c) them. Every check runs before anything is written, and
 * names the argument it rejects. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "device.h"
#include "group.h"

typedef struct call {
  const char *fn;
  coll_t coll;
  const void *sendbuff;
  void *recvbuff;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  ncclComm_t comm;
  cudaStream_t stream;
} call_t;

/* Number of elements the send and receive buffers must hold on this rank. */
static void buffer_counts(const call_t *c, int n, int rank, size_t *send, size_t *recv) {
  size_t k = c->count;
  int root = rank == c->root;
  switch (c->coll) {
    case COLL_ALLGATHER:
      *send = k, *recv = k * n;
      break;
    case COLL_REDUCESCATTER:
      *send = k * n, *recv = k;
      break;
    case COLL_ALLTOALL:
      *send = *recv = k * n;
      break;
    case COLL_GATHER:
      *send = k, *recv = root ? k * n : 0;
      break;
    case COLL_SCATTER:
      *send = root ? k * n : 0, *recv = k;
      break;
    case COLL_BROADCAST:
      *send = root ? k : 0, *recv = k;
      break;
    case COLL_REDUCE:
      *send = k, *recv = root ? k : 0;
      break;
    case COLL_SEND:
      *send = k, *recv = 0;
      break;
    case COLL_RECV:
      *send = 0, *recv = k;
      break;
    default:
      *send = *recv = k;
      break;
  }
}

static int coll_has_op(coll_t c) {
  return c == COLL_ALLREDUCE || c == COLL_REDUCE || c == COLL_REDUCESCATTER;
}
static int coll_has_root(coll_t c) {
  return c == COLL_BROADCAST || c == COLL_REDUCE || c == COLL_GATHER || c == COLL_SCATTER ||
         c == COLL_SEND || c == COLL_RECV;
}

static ncclResult_t check_op(const call_t *c, reduce_op_t *rop, const void **scalar_dev) {
  ncclComm_t comm = c->comm;
  memset(rop, 0, sizeof(*rop));
  rop->type = c->type;
  rop->divisor = comm->nranks;
  if ((int)c->op >= 0 && c->op < ncclNumOps) {
    rop->base = c->op == ncclAvg ? ncclSum : c->op;
    rop->postdiv = c->op == ncclAvg;
    return ncclSuccess;
  }
  int idx = (int)c->op - ncclNumOps;
  if (idx < 0 || idx >= MAX_USER_OPS || !comm->user_ops[idx].used)
    return TUTTI_ERR(ncclInvalidArgument,
                     "%s: op %d is not a valid ncclRedOp_t for this "
                     "communicator",
                     c->fn, (int)c->op);
  const user_op_t *u = &comm->user_ops[idx];
  if (u->type != c->type)
    return TUTTI_ERR(ncclInvalidArgument, "%s: op %d was created for datatype %d, not %d", c->fn,
                     (int)c->op, (int)u->type, (int)c->type);
  rop->base = ncclSum;
  rop->premul = 1;
  if (u->residence == ncclScalarDevice && device_mem_kind(u->ptr) == MEM_KIND_DEVICE) {
    *scalar_dev = u->ptr; /* the proxy reads it when the call runs, as NCCL's kernels do */
    return ncclSuccess;
  }
  memcpy(rop->scalar, u->residence == ncclScalarHostImmediate ? (const void *)u->value : u->ptr,
         tuttiTypeSize(c->type));
  return ncclSuccess;
}

static int ranges_overlap(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen && blen && x < y + blen && y < x + alen;
}

/* NCCL's in-place layouts: all-gather sendbuff == recvbuff + rank * sendbytes; reduce-scatter
 * recvbuff == sendbuff + rank * recvbytes; otherwise send == recv. Other overlaps are errors. */
static ncclResult_t check_overlap(const call_t *c, size_t sbytes, size_t rbytes, size_t es,
                                  int *in_place) {
  size_t own = (size_t)c->comm->rank * c->count * es; /* offset of this rank's block */
  const char *s = c->sendbuff, *r = c->recvbuff;
  if (c->coll == COLL_ALLGATHER || c->coll == COLL_GATHER)
    *in_place = s && r && s == r + own;
  else if (c->coll == COLL_REDUCESCATTER || c->coll == COLL_SCATTER)
    *in_place = s && r && r == s + own;
  else
    *in_place = s && s == r;
  if (!*in_place && ranges_overlap(s, sbytes, r, rbytes))
    return TUTTI_ERR(ncclInvalidArgument,
                     "%s: sendbuff %p and recvbuff %p overlap but are not "
                     "NCCL's in-place layout for this collective",
                     c->fn, (const void *)s, (void *)r);
  return ncclSuccess;
}

/* Pointer kind per call: the device in use (device.h) says whether a buffer is device memory.
 * Without one every buffer is host memory, except that the driver may know device memory it
 * cannot run the stream path for (an old driver lacking an entry point): that is refused. */
static ncclResult_t check_mem_kind(const call_t *c, const char *name, const void *buf, size_t n,
                                   int *on_device) {
  *on_device = 0;
  if (!n || !c->comm->device_possible) return ncclSuccess; /* every buffer is host memory */
  if (device_get()) {
    *on_device = device_mem_kind(buf) == MEM_KIND_DEVICE;
    return ncclSuccess;
  }
  if (cuda_driver_mem_kind(buf) == MEM_KIND_DEVICE) {
    char why[256];
    device_cuda_usable(why, sizeof why);
    return TUTTI_ERR(ncclInvalidArgument,
                     "%s: %s is device memory, which this process cannot "
                     "move: %s",
                     c->fn, name, why);
  }
  return ncclSuccess;
}

/* A stream needs a device; device buffers or a stream take the stream path (proxy.c). */
static ncclResult_t check_stream(const call_t *c) {
  if (c->stream != NULL && !device_get())
    return TUTTI_ERR(ncclInvalidArgument,
                     "%s: stream must be NULL for host buffers when there is no CUDA device "
                     "(%s)",
                     c->fn, cuda_driver_state());
  return ncclSuccess;
}

static ncclResult_t check_call(const call_t *c, pending_t *p) {
  TUTTI_CHECK(comm_check(c->comm, c->fn));
  ncclComm_t comm = c->comm;
  size_t es = tuttiTypeSize(c->type);
  if (es == 0)
    return TUTTI_ERR(ncclInvalidArgument, "%s: datatype %d is not a valid ncclDataType_t", c->fn,
                     (int)c->type);
  if (coll_has_root(c->coll) && (c->root < 0 || c->root >= comm->nranks))
    return TUTTI_ERR(ncclInvalidArgument, "%s: %s %d is outside [0, nranks=%d)", c->fn,
                     c->coll == COLL_SEND || c->coll == COLL_RECV ? "peer" : "root", c->root,
                     comm->nranks);
  size_t total; /* count x es x nranks, which bounds every buffer's bytes */
  if (__builtin_mul_overflow(c->count, es * (size_t)comm->nranks, &total))
    return TUTTI_ERR(ncclInvalidArgument, "%s: count %zu x %zu bytes x %d ranks overflows size_t",
                     c->fn, c->count, es, comm->nranks);
  size_t ns, nr;
  buffer_counts(c, comm->nranks, comm->rank, &ns, &nr);
  if (ns && !c->sendbuff) return TUTTI_ERR(ncclInvalidArgument, "%s: sendbuff is NULL", c->fn);
  if (nr && !c->recvbuff) return TUTTI_ERR(ncclInvalidArgument, "%s: recvbuff is NULL", c->fn);
  int dev_send = 0, dev_recv = 0; /* locals: p's fields are written once, never reloaded */
  TUTTI_CHECK(check_mem_kind(c, "sendbuff", c->sendbuff, ns, &dev_send));
  TUTTI_CHECK(check_mem_kind(c, "recvbuff", c->recvbuff, nr, &dev_recv));
  TUTTI_CHECK(check_stream(c));
  memset(p, 0, sizeof(*p));
  p->on_device[0] = dev_send, p->on_device[1] = dev_recv;
  p->stream = c->stream;
  p->on_stream = c->stream != NULL || dev_send || dev_recv;
  p->bytes[0] = ns * es, p->bytes[1] = nr * es;
  if (coll_has_op(c->coll))
    TUTTI_CHECK(check_op(c, &p->ctx.rop, &p->scalar_dev));
  else
    p->ctx.rop = (reduce_op_t){.type = c->type, .base = ncclSum, .divisor = comm->nranks};
  if (p->scalar_dev) p->on_stream = 1; /* only the proxy reads device memory */
  int in_place = 0;
  TUTTI_CHECK(check_overlap(c, ns * es, nr * es, es, &in_place));
  p->ctx.comm = comm;
  p->ctx.coll = c->coll;
  p->ctx.buf[BUF_SEND] = (char *)c->sendbuff;
  p->ctx.buf[BUF_RECV] = c->recvbuff;
  p->ctx.buf[BUF_SCRATCH] = comm->scratch;
  p->ctx.esize = es;
  p->args = (sched_args_t){.coll = c->coll,
                           .rank = comm->rank,
                           .nranks = comm->nranks,
                           .root = c->root,
                           .count = c->count,
                           .in_place = in_place,
                           .premul = p->ctx.rop.premul,
                           .ring = comm->ring_order,
                           .ring_pos = comm->ring_pos};
  return ncclSuccess;
}

/* The thread's last two calls that check_call passed on a communicator without a device (their
 * buffers host memory), with a built-in op: a program that repeats a call (a training step's
 * all-reduce, a benchmark's loop) or two in turn (a send and a receive) has each validated in
 * full once. A repeat checks the communicator's handle and state again and takes the pending
 * call as check_call left it, with the scratch block read anew (the planner grows it): the quick
 * way runs it as it lies here, anything else plans a copy (group_enqueue's keep). A call not
 * cached replaces the older of the two. The serial tells the communicator from an earlier one
 * created at the same address. */
typedef struct last_call {
  call_t c;
  uint64_t serial; /* 0: none */
  pending_t p;
} last_call_t;

static TUTTI_TLS last_call_t last[2];
static TUTTI_TLS unsigned last_older; /* the entry a call not cached replaces */

static int same_call(const call_t *a, const call_t *b) {
  return a->comm == b->comm && a->coll == b->coll && a->sendbuff == b->sendbuff &&
         a->recvbuff == b->recvbuff && a->count == b->count && a->type == b->type &&
         a->op == b->op && a->root == b->root && a->stream == b->stream;
}

/* *use: the validated call, the cached record itself on a repeat (*keep 1: the group must leave
 * it as it is), else p, which check_call filled. */
static ncclResult_t check_call_cached(const call_t *c, pending_t *p, pending_t **use, int *keep) {
  for (int i = 0; i < 2; i++) {
    last_call_t *l = &last[i];
    if (!l->serial || !same_call(c, &l->c)) continue;
    TUTTI_CHECK(comm_check(c->comm, c->fn));
    if (c->comm->serial != l->serial) { /* another communicator at that address */
      l->serial = 0;
      continue;
    }
    l->p.ctx.buf[BUF_SCRATCH] = c->comm->scratch;
    *use = &l->p, *keep = 1;
    return ncclSuccess;
  }
  last_call_t *l = &last[last_older];
  *use = p, *keep = 0;
  l->serial = 0;
  TUTTI_CHECK(check_call(c, p));
  __atomic_add_fetch(&c->comm->calls_checked, 1, __ATOMIC_RELAXED);
  if (c->comm->device_possible || c->stream || (int)c->op >= (int)ncclNumOps) return ncclSuccess;
  l->c = *c, l->p = *p, l->serial = c->comm->serial;
  last_older ^= 1;
  return ncclSuccess;
}

static ncclResult_t submit(const call_t *c) {
  pending_t p, *use;
  int keep;
  tutti_clear_error();
  ncclResult_t res = check_call_cached(c, &p, &use, &keep);
  if (res != ncclSuccess) {
    group_fail(res);
    return res;
  }
  return group_enqueue(use, keep);
}

/* ---- public entry points ---- */

#define CALL(...)              \
  do {                         \
    call_t c_ = {__VA_ARGS__}; \
    return submit(&c_);        \
  } while (0)

API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  CALL("ncclAllReduce", COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  CALL("ncclReduce", COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  CALL("ncclBroadcast", COLL_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
       stream);
}

API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  CALL("ncclBcast", COLL_BROADCAST, buff, buff, count, datatype, ncclSum, root, comm, stream);
}

API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                   cudaStream_t stream) {
  CALL("ncclReduceScatter", COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0,
       comm, stream);
}

API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                               ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  CALL("ncclAllGather", COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm,
       stream);
}

API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  CALL("ncclAlltoAll", COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum, 0, comm,
       stream);
}

API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  CALL("ncclGather", COLL_GATHER, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                             ncclDataType_t datatype, int root, ncclComm_t comm,
                             cudaStream_t stream) {
  CALL("ncclScatter", COLL_SCATTER, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
       stream);
}

API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                          ncclComm_t comm, cudaStream_t stream) {
  CALL("ncclSend", COLL_SEND, sendbuff, NULL, count, datatype, ncclSum, peer, comm, stream);
}

API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                          ncclComm_t comm, cudaStream_t stream) {
  CALL("ncclRecv", COLL_RECV, NULL, recvbuff, count, datatype, ncclSum, peer, comm, stream);
}

/* ---- PreMulSum operators ---- */

API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                          ncclScalarResidence_t residence, ncclComm_t comm) {
  tutti_clear_error();
  TUTTI_CHECK(comm_check(comm, "ncclRedOpCreatePreMulSum"));
  if (!op) return TUTTI_ERR(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op is NULL");
  if (!scalar) return TUTTI_ERR(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: scalar is NULL");
  if (tuttiTypeSize(datatype) == 0)
    return TUTTI_ERR(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: datatype %d is not valid",
                     (int)datatype);
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return TUTTI_ERR(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: residence %d is not valid",
                     (int)residence);
  pthread_mutex_lock(&comm->lock);
  int idx = -1;
  for (int i = 0; i < MAX_USER_OPS && idx < 0; i++)
    if (!comm->user_ops[i].used) idx = i;
  if (idx >= 0) {
    user_op_t *u = &comm->user_ops[idx];
    *u = (user_op_t){.used = 1, .type = datatype, .residence = residence, .ptr = scalar};
    if (residence == ncclScalarHostImmediate) /* a device scalar is read when calls run */
      memcpy(u->value, scalar, tuttiTypeSize(datatype));
  }
  pthread_mutex_unlock(&comm->lock);
  if (idx < 0)
    return TUTTI_ERR(ncclInvalidUsage,
                     "ncclRedOpCreatePreMulSum: more than %d live ops on this "
                     "communicator; destroy some with ncclRedOpDestroy",
                     MAX_USER_OPS);
  *op = (ncclRedOp_t)(ncclNumOps + idx);
  return ncclSuccess;
}

API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  tutti_clear_error();
  TUTTI_CHECK(comm_check_handle(comm, "ncclRedOpDestroy"));
  int idx = (int)op - ncclNumOps;
  if (idx < 0 || idx >= MAX_USER_OPS || !comm->user_ops[idx].used)
    return TUTTI_ERR(ncclInvalidArgument,
                     "ncclRedOpDestroy: op %d was not created by "
                     "ncclRedOpCreatePreMulSum on this communicator",
                     (int)op);
  pthread_mutex_lock(&comm->lock);
  comm->user_ops[idx].used = 0;
  pthread_mutex_unlock(&comm->lock);
  return ncclSuccess;
}
