/* Device buffers as peer memory between ranks of one host: CUDA IPC behind the device-memory
 * interface (device.h), plugged into the same-host transport's mem_expose / mem_map (shm.c), so
 * the planner's direct algorithm and the engine's peer steps (engine_peer.c) read and write
 * the peers' device buffers in place: a reduction kernel loads the peers' buffers over
 * NVLink/PCIe (or from the same GPU); finished segments are copied by a load/store kernel
 * (pieces up to TUTTI_P2P_LDST_BYTES) or the copy engine.
 *
 *   setup (collective)  every rank's device id (UUID) all-gathered; each rank checks it reaches
 *                       every other rank's device (the same GPU: several ranks on one GPU are
 *                       allowed; else cuDeviceCanAccessPeer); the answers all-gathered:
 *                       comm->dev_peer, the same on every rank
 *   per call            the planner's handshake (engine_peer_agree): each rank exposes its
 *                       buffers: a handle = {pid, kind, offset, bytes, IPC handle of the
 *                       allocation}; a peer in another process opens the allocation once
 *                       (cuIpcOpenMemHandle, cached per process with a reference per
 *                       communicator) and adds the offset; a peer in this process uses the
 *                       address as it is
 *   close               the communicator's references dropped; the last one closes the handle
 *
 * Through the emulation (device_emu.c) the same code runs with memfd-backed "device" memory
 * opened through /proc/<pid>/fd: that is what the protocol tests exercise here.
 * A rank that dies: its mapped allocation stays valid here (the driver and the kernel keep it
 * while it is open), and the engine's waits on its progress words report it (shm's dead-peer
 * checks), as for host peer memory.
 */
#include "cuda_p2p.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "device.h"

typedef struct p2p_handle { /* a peer_handle_t's bytes */
  int32_t pid;
  int32_t kind;    /* CUDA_P2P_HANDLE_KIND */
  uint64_t addr;   /* the buffer's address in process pid */
  uint64_t offset; /* of the buffer in its allocation */
  uint64_t bytes;  /* 0: nothing to open (the peers never read an empty buffer) */
  unsigned char ipc[DEVICE_IPC_BYTES];
} p2p_handle_t;
_Static_assert(sizeof(p2p_handle_t) <= PEER_HANDLE_BYTES, "device handle must fit a peer handle");

typedef struct p2p_open { /* an allocation of another process, opened here */
  unsigned char ipc[DEVICE_IPC_BYTES];
  void *base;
  void *ctx; /* the device context it was opened in, which closes it */
  int refs;
  struct p2p_open *next;
} p2p_open_t;

typedef struct p2p_state { /* per communicator: the openings it holds a reference to */
  p2p_open_t **held;
  size_t n, cap;
} p2p_state_t;

static pthread_mutex_t p2p_lock = PTHREAD_MUTEX_INITIALIZER;
static p2p_open_t *p2p_opened;

typedef struct p2p_id {
  int32_t has; /* 1: id names this rank's device */
  int32_t disabled;
  unsigned char id[DEVICE_ID_BYTES];
} p2p_id_t;

/* This rank's answer: -1 when it reaches every rank's device, else the first rank it does not
 * reach (itself when it has no device or disabled peer memory). */
static int p2p_first_unreached(ncclComm_t comm, const p2p_id_t *ids) {
  const device_ops_t *dev = device_get();
  const p2p_id_t *me = &ids[comm->rank];
  if (!me->has || me->disabled) return comm->rank;
  for (int p = 0; p < comm->nranks; p++) {
    if (!ids[p].has || ids[p].disabled || !dev->can_reach(me->id, ids[p].id)) return p;
    /* ranks as threads of one process use each other's pointers as they are: on two GPUs
     * that would need peer access enabled between their contexts, which this does not do */
    if (comm->peers[p].pid == comm->peers[comm->rank].pid &&
        memcmp(me->id, ids[p].id, DEVICE_ID_BYTES))
      return p;
  }
  return -1;
}

static void p2p_log(ncclComm_t comm, const int32_t *verdict, const p2p_id_t *ids) {
  for (int r = 0; r < comm->nranks; r++) {
    int q = verdict[r];
    if (q < 0) continue;
    if (q != r)
      INFO(SUB_INIT, "cuda_p2p off on every rank: rank %d cannot reach rank %d's device", r, q);
    else
      INFO(SUB_INIT, "cuda_p2p off on every rank: rank %d %s", r,
           ids[r].disabled ? "set TUTTI_P2P_DISABLE" : "has no device usable for peer memory");
    return;
  }
  INFO(SUB_INIT,
       "cuda_p2p: every rank reaches every rank's device: the direct algorithm reads "
       "device buffers in place (CUDA IPC)");
}

/* Every rank sees the same nhosts and, after the first all-gather, the same ids: the early
 * returns are taken by every rank alike (no all-gather at all across hosts, one where no rank
 * has a device). */
ncclResult_t cuda_p2p_agree(ncclComm_t comm) {
  int n = comm->nranks;
  const device_ops_t *dev = device_get();
  comm->dev_peer = 0;
  if (comm->nhosts != 1 || n < 2) return ncclSuccess;
  p2p_id_t *ids = calloc((size_t)n, sizeof(*ids));
  int32_t *verdict = calloc((size_t)n, sizeof(*verdict));
  ncclResult_t res = ncclSuccess;
  int any = 0;
  if (!ids || !verdict) {
    res = TUTTI_ERR(ncclSystemError, "out of memory");
    goto out;
  }
  const char *off = tutti_getenv("P2P_DISABLE"); /* read per communicator: tests flip it */
  ids[comm->rank].disabled = off && strcmp(off, "0") != 0;
  ids[comm->rank].has = dev && dev->device_id(ids[comm->rank].id) == 0;
  TUTTI_CHECK_GOTO(bootstrap_allgather(comm, ids, sizeof(*ids)), res, out);
  for (int r = 0; r < n; r++) any |= ids[r].has;
  if (!any) goto out; /* no device anywhere: nothing to agree on */
  verdict[comm->rank] = p2p_first_unreached(comm, ids);
  TUTTI_CHECK_GOTO(bootstrap_allgather(comm, verdict, sizeof(*verdict)), res, out);
  comm->dev_peer = 1;
  for (int r = 0; r < n; r++) comm->dev_peer &= verdict[r] < 0;
  p2p_log(comm, verdict, ids);
out:
  free(ids);
  free(verdict);
  return res;
}

int cuda_p2p_is_device(const void *buf) {
  return device_mem_kind(buf) == MEM_KIND_DEVICE;
}

int cuda_p2p_is_handle(const peer_handle_t *h) {
  p2p_handle_t ph;
  memcpy(&ph, h->bytes, sizeof(ph));
  return ph.kind == CUDA_P2P_HANDLE_KIND;
}

int cuda_p2p_expose(ncclComm_t comm, const void *buf, size_t bytes, peer_handle_t *h) {
  p2p_handle_t ph = {.pid = (int32_t)tutti_self_pid(),
                     .kind = CUDA_P2P_HANDLE_KIND,
                     .addr = (uint64_t)(uintptr_t)buf,
                     .bytes = bytes};
  memset(h, 0, sizeof(*h));
  if (!comm->dev_peer) return PEER_EXPOSE_NONE;
  int others = 0; /* peers in other processes need the IPC handle */
  for (int p = 0; p < comm->nranks; p++) others |= comm->peers[p].pid != ph.pid;
  if (others && bytes) {
    size_t off = 0;
    int rc = device_get()->ipc_export(buf, bytes, ph.ipc, &off);
    if (rc) {
      INFO(SUB_COLL, "rank %d: device buffer %p cannot be shared (IPC export: %s): staged",
           comm->rank, buf, device_get()->error_string(rc));
      return PEER_EXPOSE_NONE;
    }
    ph.offset = off;
  }
  memcpy(h->bytes, &ph, sizeof(ph));
  return PEER_EXPOSE_MAP;
}

static ncclResult_t p2p_hold(ncclComm_t comm, p2p_open_t *o) {
  p2p_state_t *st = comm->cuda_p2p;
  if (!st && !(st = comm->cuda_p2p = calloc(1, sizeof(*st))))
    return TUTTI_ERR(ncclSystemError, "out of memory");
  for (size_t i = 0; i < st->n; i++)
    if (st->held[i] == o) return ncclSuccess;
  if (st->n == st->cap) {
    size_t cap = st->cap ? 2 * st->cap : 8;
    p2p_open_t **held = realloc(st->held, cap * sizeof(*held));
    if (!held) return TUTTI_ERR(ncclSystemError, "out of memory");
    st->held = held, st->cap = cap;
  }
  st->held[st->n++] = o;
  o->refs++;
  return ncclSuccess;
}

/* The allocation behind ipc, opened here once per process. */
static ncclResult_t p2p_open(ncclComm_t comm, int peer, const unsigned char *ipc, void **base) {
  const device_ops_t *dev = device_get();
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&p2p_lock);
  p2p_open_t *o = p2p_opened;
  while (o && memcmp(o->ipc, ipc, DEVICE_IPC_BYTES) != 0) o = o->next;
  if (!o) {
    void *b = NULL;
    int rc = dev->ipc_open(ipc, &b);
    if (rc || !(o = calloc(1, sizeof(*o)))) {
      if (!rc) dev->ipc_close(b);
      res = TUTTI_ERR(ncclUnhandledCudaError,
                      "rank %d: cannot open the device buffer rank %d (pid %d) exposed: %s (%d)",
                      comm->rank, peer, comm->peers[peer].pid,
                      rc ? dev->error_string(rc) : "out of memory", rc);
      goto out;
    }
    memcpy(o->ipc, ipc, DEVICE_IPC_BYTES);
    o->base = b, o->ctx = dev->current_ctx();
    o->next = p2p_opened, p2p_opened = o;
  }
  res = p2p_hold(comm, o);
  *base = o->base;
out:
  pthread_mutex_unlock(&p2p_lock);
  return res;
}

ncclResult_t cuda_p2p_map(ncclComm_t comm, int peer, const peer_handle_t *h, const char **addr) {
  p2p_handle_t ph;
  memcpy(&ph, h->bytes, sizeof(ph));
  if (ph.pid == (int32_t)tutti_self_pid() || !ph.bytes) { /* this process's, or never read */
    *addr = (const char *)(uintptr_t)ph.addr;
    return ncclSuccess;
  }
  void *base = NULL;
  TUTTI_CHECK(p2p_open(comm, peer, ph.ipc, &base));
  *addr = (const char *)base + ph.offset;
  return ncclSuccess;
}

void cuda_p2p_close(ncclComm_t comm) {
  p2p_state_t *st = comm->cuda_p2p;
  if (!st) return;
  pthread_mutex_lock(&p2p_lock);
  for (size_t i = 0; i < st->n; i++) {
    p2p_open_t *o = st->held[i];
    if (--o->refs > 0) continue;
    for (p2p_open_t **pp = &p2p_opened; *pp; pp = &(*pp)->next)
      if (*pp == o) {
        *pp = o->next;
        break;
      }
    const device_ops_t *dev = device_get();
    int switched = 0;
    void *was = device_switch(dev, o->ctx, &switched); /* the caller may have another, or none */
    dev->ipc_close(o->base);
    if (switched) dev->bind(was);
    free(o);
  }
  pthread_mutex_unlock(&p2p_lock);
  free(st->held);
  free(st);
  comm->cuda_p2p = NULL;
}
