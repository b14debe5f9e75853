/* InfiniBand / RoCE transport, setup (the data path and the vtable are in ib.c).
 *
 * libibverbs is loaded with dlopen on first use, so a machine without rdma-core still runs
 * tutti (over shm and tcp). ibv_fork_init is called before any resource exists, so fork-based
 * launchers stay safe on kernels without copy-on-fork for pinned pages.
 *
 * Device choice: the devices with an active port that TUTTI_IB_HCA / NCCL_IB_HCA admits
 * (NCCL's syntax: "mlx5_0:1,mlx5_1" prefixes, "=" exact names, "^" excludes, ":port"); a rank
 * takes the (local rank % count)-th, so the ranks of a host spread over its NICs. GID:
 * TUTTI_IB_GID_INDEX, else on Ethernet ports (RoCE) the first IPv4-mapped GID, else the first
 * non-zero one.
 *
 * setup opens the device, a protection domain and the failure board (one entry per rank, the
 * only memory peers write outside FIFOs) and publishes them in the blob. connect creates both
 * connections with a peer: arena, memory region, completion queue, TUTTI_IB_QPS_PER_CONNECTION
 * reliable-connected QPs in INIT with their receives posted. post_connect exchanges every
 * pair's QP numbers, PSNs, addresses and keys (one allgather) and brings the QPs to RTS; the
 * allgather of transport_connect_all's geometry follows, so no rank sends before every QP can
 * receive.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bootstrap.h"
#include "ib.h"

TUTTI_PARAM(IbDisable, "IB_DISABLE", 0)
TUTTI_PARAM(IbGidIndex, "IB_GID_INDEX", -1)
TUTTI_PARAM(IbQpsPerConn, "IB_QPS_PER_CONNECTION", 2)
TUTTI_PARAM(IbSlotBytes, "IB_SLOT_BYTES", 256 * 1024)
TUTTI_PARAM(IbSlots, "IB_NSLOTS", 16)
TUTTI_PARAM(IbTimeout, "IB_TIMEOUT", 18) /* 4.096 us x 2^18 = 1.07 s per try */
TUTTI_PARAM(IbRetryCnt, "IB_RETRY_CNT", 7)

ib_verbs_t ib_v;

/* ---- libibverbs, loaded once ---- */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;
static char load_error[256];

static void load_verbs(void) {
  void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(load_error, sizeof(load_error), "cannot load libibverbs.so.1: %s", dlerror());
    return;
  }
#define IB_SYM(field, name)                                                     \
  if (!(*(void **)&ib_v.field = dlsym(h, name))) {                              \
    snprintf(load_error, sizeof(load_error), "libibverbs.so.1 lacks %s", name); \
    return;                                                                     \
  }
  IB_SYM(fork_init, "ibv_fork_init");
  IB_SYM(get_device_list, "ibv_get_device_list");
  IB_SYM(free_device_list, "ibv_free_device_list");
  IB_SYM(get_device_name, "ibv_get_device_name");
  IB_SYM(open_device, "ibv_open_device");
  IB_SYM(close_device, "ibv_close_device");
  IB_SYM(query_device, "ibv_query_device");
  IB_SYM(query_port, "ibv_query_port");
  IB_SYM(query_gid, "ibv_query_gid");
  IB_SYM(alloc_pd, "ibv_alloc_pd");
  IB_SYM(dealloc_pd, "ibv_dealloc_pd");
  IB_SYM(reg_mr, "ibv_reg_mr");
  IB_SYM(dereg_mr, "ibv_dereg_mr");
  IB_SYM(create_cq, "ibv_create_cq");
  IB_SYM(destroy_cq, "ibv_destroy_cq");
  IB_SYM(create_qp, "ibv_create_qp");
  IB_SYM(modify_qp, "ibv_modify_qp");
  IB_SYM(destroy_qp, "ibv_destroy_qp");
  IB_SYM(wc_status_str, "ibv_wc_status_str");
  IB_SYM(create_comp_channel, "ibv_create_comp_channel");
  IB_SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
  IB_SYM(get_cq_event, "ibv_get_cq_event");
  IB_SYM(ack_cq_events, "ibv_ack_cq_events");
#undef IB_SYM
  *(void **)&ib_v.reg_dmabuf_mr = dlsym(h, "ibv_reg_dmabuf_mr"); /* optional */
  int err = ib_v.fork_init();
  if (err) INFO(SUB_NET | SUB_INIT, "ib: ibv_fork_init: %s (continuing)", strerror(err));
  loaded = 1; /* the handle stays open for the process's life */
}

/* Port attributes through the extended call where the provider has it, as verbs.h's inline
 * ibv_query_port does (the exported symbol fills the older, shorter struct). */
static int query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
  struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
  memset(attr, 0, sizeof(*attr));
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  return ib_v.query_port(ctx, port, attr);
}

/* ---- which devices: TUTTI_IB_HCA / NCCL_IB_HCA ---- */

/* Whether device name:port passes the filter (NULL or empty: all). */
static int hca_admits(const char *filter, const char *name, int port) {
  if (!filter || !*filter) return 1;
  int exclude = filter[0] == '^', exact = 0;
  const char *f = filter + exclude;
  if (*f == '=') exact = 1, f++;
  char list[512];
  snprintf(list, sizeof(list), "%s", f);
  int hit = 0;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && !hit;
       tok = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(tok, ':');
    int want_port = colon ? atoi(colon + 1) : 0;
    if (colon) *colon = '\0';
    int name_ok = exact ? strcmp(tok, name) == 0 : strncmp(tok, name, strlen(tok)) == 0;
    hit = name_ok && (!want_port || want_port == port);
  }
  return exclude ? !hit : hit;
}

typedef struct ib_choice {
  char name[32];
  int port;
} ib_choice_t;

/* The admitted devices' active ports, in the library's order (at most max). */
static int list_ports(ib_choice_t *out, int max) {
  int ndev = 0, n = 0;
  struct ibv_device **list = ib_v.get_device_list(&ndev);
  if (!list) return 0;
  const char *filter = tutti_getenv("IB_HCA");
  for (int d = 0; d < ndev && n < max; d++) {
    struct ibv_context *ctx = ib_v.open_device(list[d]);
    if (!ctx) continue;
    struct ibv_device_attr da;
    const char *name = ib_v.get_device_name(list[d]);
    for (int p = 1; ib_v.query_device(ctx, &da) == 0 && p <= da.phys_port_cnt && n < max; p++) {
      struct ibv_port_attr pa;
      if (query_port(ctx, (uint8_t)p, &pa) || pa.state != IBV_PORT_ACTIVE) continue;
      if (!hca_admits(filter, name, p)) continue;
      snprintf(out[n].name, sizeof(out[n].name), "%s", name);
      out[n++].port = p;
    }
    ib_v.close_device(ctx);
  }
  ib_v.free_device_list(list);
  return n;
}

static int ib_find(void) {
  if (tutti_param_IbDisable()) return 0;
  pthread_once(&load_once, load_verbs);
  if (!loaded) {
    INFO(SUB_NET | SUB_INIT, "ib: not used: %s", load_error);
    return 0;
  }
  ib_choice_t c[1];
  int avail = list_ports(c, 1) > 0;
  if (!avail)
    INFO(SUB_NET | SUB_INIT, "ib: no active port on a device that TUTTI_IB_HCA admits (%s)",
         tutti_getenv("IB_HCA") ? tutti_getenv("IB_HCA") : "unset");
  return avail;
}

int ib_available(void) {
  static int avail = -1;
  return tutti_cached_flag(&avail, ib_find);
}

/* ---- which state belongs to which communicator ---- */
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;
static ib_state_t *states;

ib_state_t *ib_state_of(struct ncclComm *comm) {
  pthread_mutex_lock(&states_mu);
  ib_state_t *s = states;
  while (s && s->comm != comm) s = s->next;
  pthread_mutex_unlock(&states_mu);
  return s;
}

void ib_state_unlink(ib_state_t *st) {
  pthread_mutex_lock(&states_mu);
  for (ib_state_t **p = &states; *p; p = &(*p)->next)
    if (*p == st) {
      *p = st->next;
      break;
    }
  pthread_mutex_unlock(&states_mu);
}

static ncclResult_t state_new(struct ncclComm *comm, ib_state_t **out) {
  ib_state_t *st = calloc(1, sizeof(*st));
  if (!st) return TUTTI_ERR(ncclSystemError, "out of memory");
  st->comm = comm;
  pthread_mutex_init(&st->life_mu, NULL);
  pthread_mutex_lock(&states_mu);
  st->next = states;
  states = st;
  pthread_mutex_unlock(&states_mu);
  *out = st;
  int n = comm->nranks;
  st->send = calloc(n, sizeof(ib_conn_t *));
  st->recv = calloc(n, sizeof(ib_conn_t *));
  st->peer_blob = calloc(n, sizeof(ib_blob_t));
  if (!st->send || !st->recv || !st->peer_blob) return TUTTI_ERR(ncclSystemError, "out of memory");
  return ncclSuccess;
}

/* ---- device, port, GID ---- */

static int local_rank(struct ncclComm *comm) {
  int r = 0;
  for (int p = 0; p < comm->rank; p++)
    r += comm->peers[p].host_hash == comm->peers[comm->rank].host_hash;
  return r;
}

static int pick_gid(ib_state_t *st) {
  int64_t want = tutti_param_IbGidIndex();
  if (want >= 0) return (int)want;
  if (st->port_attr.link_layer != IBV_LINK_LAYER_ETHERNET) return 0;
  int first = -1;
  for (int i = 0; i < st->port_attr.gid_tbl_len; i++) {
    union ibv_gid g;
    if (ib_v.query_gid(st->ctx, (uint8_t)st->port, i, &g) ||
        !(g.global.subnet_prefix | g.global.interface_id))
      continue;
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(g.raw, v4, 12) == 0) return i;
    if (first < 0) first = i;
  }
  return first < 0 ? 0 : first;
}

static ncclResult_t open_device(ib_state_t *st) {
  struct ncclComm *comm = st->comm;
  ib_choice_t c[16];
  int n = list_ports(c, 16);
  if (n == 0)
    return TUTTI_ERR(ncclSystemError, "rank %d (host %s): no active ib port (TUTTI_IB_HCA=%s)",
                     comm->rank, ib_host_of(st, comm->rank),
                     tutti_getenv("IB_HCA") ? tutti_getenv("IB_HCA") : "unset");
  ib_choice_t *me = &c[local_rank(comm) % n];
  snprintf(st->dev, sizeof(st->dev), "%.31s", me->name);
  st->port = me->port;
  int ndev = 0;
  struct ibv_device **list = ib_v.get_device_list(&ndev);
  for (int d = 0; list && d < ndev && !st->ctx; d++)
    if (strcmp(ib_v.get_device_name(list[d]), st->dev) == 0) st->ctx = ib_v.open_device(list[d]);
  if (list) ib_v.free_device_list(list);
  if (!st->ctx)
    return TUTTI_ERR(ncclSystemError, "rank %d (host %s): cannot open ib device %s: %s", comm->rank,
                     ib_host_of(st, comm->rank), st->dev, strerror(errno));
  if (query_port(st->ctx, (uint8_t)st->port, &st->port_attr))
    return TUTTI_ERR(ncclSystemError, "rank %d: cannot query %s port %d", comm->rank, st->dev,
                     st->port);
  st->gid_index = pick_gid(st);
  if (ib_v.query_gid(st->ctx, (uint8_t)st->port, st->gid_index, &st->gid))
    return TUTTI_ERR(ncclInvalidArgument,
                     "rank %d (host %s): %s port %d has no GID at index %d (TUTTI_IB_GID_INDEX)",
                     comm->rank, ib_host_of(st, comm->rank), st->dev, st->port, st->gid_index);
  st->pd = ib_v.alloc_pd(st->ctx);
  if (!st->pd)
    return TUTTI_ERR(ncclSystemError, "rank %d: ibv_alloc_pd on %s failed: %s", comm->rank, st->dev,
                     strerror(errno));
  /* one completion channel for all CQs: a waiting rank sleeps on its fd (ib.c, ib_wait) */
  st->chan = ib_v.create_comp_channel(st->ctx);
  int fl = st->chan ? fcntl(st->chan->fd, F_GETFL) : -1;
  if (fl < 0 || fcntl(st->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return TUTTI_ERR(ncclSystemError, "rank %d: ibv_create_comp_channel on %s failed: %s",
                     comm->rank, st->dev, strerror(errno));
  return ncclSuccess;
}

/* The failure board: board[nranks] (peers write) then board_src[nranks] (this rank's source). */
static ncclResult_t board_new(ib_state_t *st) {
  size_t bytes = TUTTI_ALIGN_UP(2 * (size_t)st->comm->nranks * sizeof(ib_board_t), 4096);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return TUTTI_ERR(ncclSystemError, "out of memory");
  st->board = p;
  st->board_src = st->board + st->comm->nranks;
  st->board_mr = ib_v.reg_mr(st->pd, p, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!st->board_mr)
    return TUTTI_ERR(ncclSystemError, "rank %d: ibv_reg_mr of %zu bytes on %s failed: %s",
                     st->comm->rank, bytes, st->dev, strerror(errno));
  return ncclSuccess;
}

ncclResult_t ib_setup(struct ncclComm *comm, char blob[TRANSPORT_BLOB_BYTES]) {
  ib_state_t *st = NULL;
  TUTTI_CHECK(state_new(comm, &st));
  for (int p = 0; p < comm->nranks; p++)
    st->npeers += p != comm->rank && comm->send_conn[p].transport == &ib_transport;
  if (st->npeers == 0) return ncclSuccess; /* empty blob */
  st->nqps = (int)TUTTI_MIN(TUTTI_MAX(tutti_param_IbQpsPerConn(), 1), IB_MAX_QPS);
  st->nslots = (uint32_t)TUTTI_MIN(TUTTI_MAX(tutti_param_IbSlots(), 2), IB_MAX_SLOTS);
  st->slot_bytes =
      TUTTI_ALIGN_UP((size_t)TUTTI_MIN(TUTTI_MAX(tutti_param_IbSlotBytes(), 4096), 8 << 20), 4096);
  TUTTI_CHECK(open_device(st));
  TUTTI_CHECK(board_new(st));
  ib_blob_t b = {.magic = IB_BLOB_MAGIC,
                 .gid = st->gid,
                 .lid = st->port_attr.lid,
                 .port = (uint8_t)st->port,
                 .mtu = (uint8_t)st->port_attr.active_mtu,
                 .nqps = (uint32_t)st->nqps,
                 .nslots = st->nslots,
                 .slot_bytes = (uint32_t)st->slot_bytes,
                 .board_addr = (uint64_t)(uintptr_t)st->board,
                 .board_rkey = st->board_mr->rkey,
                 .rdv_min = ib_rdv_min()};
  snprintf(b.dev, sizeof(b.dev), "%s", st->dev);
  _Static_assert(sizeof(ib_blob_t) <= TRANSPORT_BLOB_BYTES, "the ib blob must fit");
  memcpy(blob, &b, sizeof(b));
  if (!comm->slot_bytes || st->slot_bytes < comm->slot_bytes) comm->slot_bytes = st->slot_bytes;
  if (!comm->chunk_bytes || comm->slot_bytes * (st->nslots / 2) < comm->chunk_bytes)
    comm->chunk_bytes = comm->slot_bytes * (st->nslots / 2);
  return ncclSuccess;
}

/* ---- connections ---- */

void ib_conn_free(ib_conn_t *c) {
  for (int q = 0; q < c->nqps; q++)
    if (c->qp[q]) ib_v.destroy_qp(c->qp[q]);
  if (c->cq) ib_v.destroy_cq(c->cq);
  ib_rdv_release(c);
  if (c->mr) ib_v.dereg_mr(c->mr);
  if (c->arena) munmap(c->arena, c->arena_bytes);
  free(c);
}

static ncclResult_t qp_new(ib_conn_t *c, int q) {
  ib_state_t *st = c->st;
  struct ibv_qp_init_attr ia = {.send_cq = c->cq,
                                .recv_cq = c->cq,
                                .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = (uint32_t)c->sq_max,
                                        .max_recv_wr = (uint32_t)c->sq_max,
                                        .max_send_sge = 1,
                                        .max_recv_sge = 1}};
  c->qp[q] = ib_v.create_qp(st->pd, &ia);
  if (!c->qp[q])
    return TUTTI_ERR(ncclSystemError, "rank %d: ibv_create_qp on %s for rank %d failed: %s",
                     st->comm->rank, st->dev, c->peer, strerror(errno));
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = (uint8_t)st->port,
                          .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
  int err = ib_v.modify_qp(c->qp[q], &a,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (err)
    return TUTTI_ERR(ncclSystemError, "rank %d: QP to rank %d on %s: INIT failed: %s",
                     st->comm->rank, c->peer, st->dev, strerror(err));
  /* receive end: a receive per slot on every QP (data writes with immediate); send end: one per
   * credit write that may be in flight, on QP 0 (credits come with an immediate to wake us) */
  int nrecv = c->is_send ? (q == 0 ? c->sq_max : 0) : (int)c->nslots;
  for (int i = 0; i < nrecv; i++)
    if (ib_post_recv(c, q))
      return TUTTI_ERR(ncclSystemError, "rank %d: ibv_post_recv on %s failed", st->comm->rank,
                       st->dev);
  return ncclSuccess;
}

static ncclResult_t conn_new(ib_state_t *st, int peer, int is_send, int nqps, uint32_t nslots,
                             size_t slot_bytes, ib_conn_t **out) {
  ib_conn_t *c = calloc(1, sizeof(*c));
  if (!c) return TUTTI_ERR(ncclSystemError, "out of memory");
  *out = c;
  c->st = st, c->peer = peer, c->is_send = is_send, c->nqps = nqps, c->nslots = nslots,
  c->slot_bytes = slot_bytes;
  size_t ctrl = (is_send ? 1 : nslots) * sizeof(uint64_t);
  c->arena_bytes =
      TUTTI_ALIGN_UP((size_t)nslots * slot_bytes + ctrl + IB_RDV_SEGS * sizeof(ib_rdv_msg_t), 4096);
  void *p = mmap(NULL, c->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return TUTTI_ERR(ncclSystemError, "cannot map %zu bytes of ib FIFO", c->arena_bytes);
  c->arena = c->slots = p;
  char *tail = c->slots + (size_t)nslots * slot_bytes;
  if (is_send)
    c->credit = (volatile uint64_t *)tail;
  else
    c->credit_src = (uint64_t *)tail;
  c->answers = (ib_rdv_msg_t *)(tail + ctrl); /* the send end's right after its credit word */
  c->mr = ib_v.reg_mr(st->pd, p, c->arena_bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!c->mr)
    return TUTTI_ERR(
        ncclSystemError,
        "rank %d: ibv_reg_mr of %zu bytes on %s failed: %s (locked-memory limit? ulimit -l)",
        st->comm->rank, c->arena_bytes, st->dev, strerror(errno));
  /* send queue: data writes (at most nslots in flight), credit writes (idem), an abort notice */
  c->sq_max = (int)nslots + 2;
  c->cq = ib_v.create_cq(st->ctx, nqps * 2 * c->sq_max + 4, NULL, st->chan, 0);
  if (!c->cq)
    return TUTTI_ERR(ncclSystemError, "rank %d: ibv_create_cq on %s failed: %s", st->comm->rank,
                     st->dev, strerror(errno));
  for (int q = 0; q < nqps; q++) TUTTI_CHECK(qp_new(c, q));
  c->psn = (uint32_t)(random() & 0xffffff);
  return ncclSuccess;
}

ncclResult_t ib_setup_connect(struct ncclComm *comm, int peer, const char *peer_blob, conn_t *send,
                              conn_t *recv) {
  ib_state_t *st = ib_state_of(comm);
  ib_blob_t b;
  memcpy(&b, peer_blob, sizeof(b));
  if (!st || b.magic != IB_BLOB_MAGIC)
    return TUTTI_ERR(ncclInvalidUsage,
                     "rank %d (host %s) chose ib for rank %d (host %s), which has no ib device or "
                     "ib disabled: set NCCL_IB_DISABLE=1 (or TUTTI_IB_HCA) alike on every rank",
                     comm->rank, comm->peers[comm->rank].hostname, peer,
                     comm->peers[peer].hostname);
  st->peer_blob[peer] = b;
  int nqps = (int)TUTTI_MIN((uint32_t)st->nqps, b.nqps);
  uint32_t nslots = TUTTI_MIN(st->nslots, b.nslots);
  size_t slot = TUTTI_MIN(st->slot_bytes, (size_t)b.slot_bytes);
  TUTTI_CHECK(conn_new(st, peer, 1, nqps, nslots, slot, &st->send[peer]));
  TUTTI_CHECK(conn_new(st, peer, 0, nqps, nslots, slot, &st->recv[peer]));
  send->priv = st->send[peer];
  recv->priv = st->recv[peer];
  send->slot_bytes = recv->slot_bytes = slot;
  send->nslots = recv->nslots = (int)nslots;
  /* large steps: from the larger of both ends' TUTTI_IB_RDV_MIN, none if either has 0 */
  size_t large = ib_rdv_min() && b.rdv_min ? TUTTI_MAX(ib_rdv_min(), (size_t)b.rdv_min) : 0;
  send->large_bytes = recv->large_bytes = large;
  st->send[peer]->large_bytes = st->recv[peer]->large_bytes = large;
  return ncclSuccess;
}

/* ---- post_connect: every pair's QPs to RTS ---- */

static ib_wire_t wire_of(const ib_conn_t *c) {
  ib_wire_t w = {.psn = c->psn,
                 .rkey = c->mr->rkey,
                 .addr = (uint64_t)(uintptr_t)(c->is_send ? (void *)c->credit : (void *)c->slots)};
  for (int q = 0; q < c->nqps; q++) w.qpn[q] = c->qp[q]->qp_num;
  return w;
}

static ncclResult_t qp_ready(ib_conn_t *c, int q) {
  ib_state_t *st = c->st;
  const ib_blob_t *pb = &st->peer_blob[c->peer];
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = (enum ibv_mtu)TUTTI_MIN(pb->mtu, (uint8_t)st->port_attr.active_mtu),
      .dest_qp_num = c->remote.qpn[q],
      .rq_psn = c->remote.psn,
      .max_dest_rd_atomic = 1,
      .min_rnr_timer = 12,
      .ah_attr = {.dlid = pb->lid, .sl = 0, .port_num = (uint8_t)st->port}};
  if (st->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET || pb->lid == 0) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh = (struct ibv_global_route){
        .dgid = pb->gid, .sgid_index = (uint8_t)st->gid_index, .hop_limit = 64};
  }
  int err = ib_v.modify_qp(c->qp[q], &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (!err) {
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS,
                             .sq_psn = c->psn,
                             .timeout = (uint8_t)tutti_param_IbTimeout(),
                             .retry_cnt = (uint8_t)TUTTI_MIN(tutti_param_IbRetryCnt(), 7),
                             .rnr_retry = 7,
                             .max_rd_atomic = 1};
    err = ib_v.modify_qp(c->qp[q], &a,
                         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  }
  if (err)
    return TUTTI_ERR(ncclSystemError,
                     "rank %d (host %s): QP %d to rank %d (host %s, device %s) on %s port %d "
                     "cannot reach RTS: %s",
                     st->comm->rank, ib_host_of(st, st->comm->rank), q, c->peer,
                     ib_host_of(st, c->peer), pb->dev, st->dev, st->port, strerror(err));
  return ncclSuccess;
}

static void log_connection(ib_state_t *st, int p) {
  char g[64];
  const uint8_t *r = st->gid.raw;
  snprintf(g, sizeof(g), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
           r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
           r[14], r[15]);
  const ib_blob_t *pb = &st->peer_blob[p];
  INFO(SUB_NET | SUB_INIT,
       "ib: rank %d -> rank %d (host %s): device %s port %d GID[%d] %s, peer device %s, MTU %d, %d "
       "QP(s) per direction, %u slots x %zu bytes",
       st->comm->rank, p, ib_host_of(st, p), st->dev, st->port, st->gid_index, g, pb->dev,
       128 << TUTTI_MIN(pb->mtu, (uint8_t)st->port_attr.active_mtu), st->send[p]->nqps,
       st->send[p]->nslots, st->send[p]->slot_bytes);
}

ncclResult_t ib_setup_post_connect(struct ncclComm *comm) {
  ib_state_t *st = ib_state_of(comm);
  int n = comm->nranks, me = comm->rank;
  size_t per_rank = (size_t)n * 2 * sizeof(ib_wire_t);
  ib_wire_t *all = calloc((size_t)n, per_rank); /* all[r][p][d]: rank r's end for p, d 0 send */
  if (!all) return TUTTI_ERR(ncclSystemError, "out of memory");
  for (int p = 0; st && p < n; p++) {
    if (st->send[p]) all[(size_t)me * n * 2 + 2 * p] = wire_of(st->send[p]);
    if (st->recv[p]) all[(size_t)me * n * 2 + 2 * p + 1] = wire_of(st->recv[p]);
  }
  ncclResult_t res = bootstrap_allgather(comm, all, per_rank); /* collective: every rank calls */
  for (int p = 0; res == ncclSuccess && st && p < n; p++) {
    if (!st->send[p]) continue;
    st->send[p]->remote = all[(size_t)p * n * 2 + 2 * me + 1]; /* its receive end for us */
    st->recv[p]->remote = all[(size_t)p * n * 2 + 2 * me];
    for (int q = 0; q < st->send[p]->nqps && res == ncclSuccess; q++) {
      res = qp_ready(st->send[p], q);
      if (res == ncclSuccess) res = qp_ready(st->recv[p], q);
    }
    if (res == ncclSuccess) log_connection(st, p);
  }
  free(all);
  return res;
}

void ib_state_free(ib_state_t *st) {
  for (int p = 0; p < st->comm->nranks; p++) {
    if (st->send && st->send[p]) ib_conn_free(st->send[p]);
    if (st->recv && st->recv[p]) ib_conn_free(st->recv[p]);
  }
  ib_mr_cache_free(st);
  if (st->board_mr) ib_v.dereg_mr(st->board_mr);
  if (st->board)
    munmap(st->board, TUTTI_ALIGN_UP(2 * (size_t)st->comm->nranks * sizeof(ib_board_t), 4096));
  if (st->chan) ib_v.destroy_comp_channel(st->chan); /* after its CQs */
  if (st->pd) ib_v.dealloc_pd(st->pd);
  if (st->ctx) ib_v.close_device(st->ctx);
  ib_state_unlink(st);
  pthread_mutex_destroy(&st->life_mu);
  free(st->send);
  free(st->recv);
  free(st->peer_blob);
  free(st);
}
