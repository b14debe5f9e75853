/* Communicator lifecycle: unique ids, init, InitAll, finalize, destroy, abort, queries. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "adapt.h"
#include "agreed.h"
#include "bootstrap.h"
#include "comm.h"
#include "cpulist.h"
#include "cuda_driver.h"
#include "device.h"
#include "group.h"
#include "net_addr.h"
#include "plan.h"
#include "proxy.h"
#include "small.h"
#include "topology/topo.h"

TUTTI_PARAM(OneshotMaxBytes, "ONESHOT_MAX_BYTES", 16384)
/* Calls from 8 MiB up whose buffers, those of the machine's ranks together, outgrow the
 * last-level cache (TUTTI_CACHE_BYTES; 0: the size the CPU reports) write their results with
 * streaming stores: below, the buffers stay in the caches and normal stores are as fast or
 * faster. docs/perf.md, "Figures behind the code"; plan.c decides per call (stream_results). */
TUTTI_PARAM(NtThreshold, "NT_THRESHOLD", 8 << 20)
TUTTI_PARAM(CacheBytes, "CACHE_BYTES", 0)
/* The last-level cache assumed where the kernel does not report one. */
#define CACHE_BYTES_UNKNOWN ((size_t)32 << 20)
TUTTI_PARAM_DECL(Timeout);
/* Test hook: the rank waits this long before it tells the root it is done with init, saying so
 * (Failure.ARankLateForTheEndOfInitFailsEveryInit). */
TUTTI_PARAM(TestDoneDelayMs, "TEST_DONE_DELAY_MS", 0)

/* The last-level cache the in-place all-gather's streaming decision compares with: the setting,
 * else what sysfs says for the CPU this thread runs on (after the binding), else 32 MiB. */
static void comm_cache_size(ncclComm_t c) {
  int cpu = -1;
  size_t set = (size_t)tutti_param_CacheBytes(), seen = set ? 0 : host_llc_bytes(&cpu);
  c->cache_bytes = set ? set : seen ? seen : CACHE_BYTES_UNKNOWN;
  if (seen)
    INFO(SUB_INIT, "last-level cache %zu bytes (sysfs, cpu %d)", c->cache_bytes, cpu);
  else
    INFO(SUB_INIT, "last-level cache %zu bytes (%s)", c->cache_bytes,
         set ? "TUTTI_CACHE_BYTES" : "not reported by the kernel: assumed");
}

/* ---- registry of live communicators: lets every call reject destroyed handles ---- */
static pthread_rwlock_t registry_lock = PTHREAD_RWLOCK_INITIALIZER;
static ncclComm_t *registry;
static size_t registry_n, registry_cap;

/* registry_gen changes with every add and remove, so a thread that found a comm in the
 * registry may skip the lock while the generation it saw is still current (every call checks
 * its comm: this keeps the check to one atomic load on the hot path). */
static uint64_t registry_gen;
static TUTTI_TLS ncclComm_t registry_seen;
static TUTTI_TLS uint64_t registry_seen_gen;

static ncclResult_t registry_add(ncclComm_t c) {
  pthread_rwlock_wrlock(&registry_lock);
  if (registry_n == registry_cap) {
    size_t cap = registry_cap ? registry_cap * 2 : 16;
    ncclComm_t *p = realloc(registry, cap * sizeof(*p));
    if (!p) {
      pthread_rwlock_unlock(&registry_lock);
      return TUTTI_ERR(ncclSystemError, "out of memory for the communicator registry");
    }
    registry = p, registry_cap = cap;
  }
  registry[registry_n++] = c;
  __atomic_add_fetch(&registry_gen, 1, __ATOMIC_RELEASE);
  pthread_rwlock_unlock(&registry_lock);
  return ncclSuccess;
}

enum { TAKE_GONE, TAKE_QUEUED, TAKE_OK };

/* Takes c out of the registry for destroy or abort, in one step under the write lock, so that
 * of two concurrent calls on one handle exactly one owns it (TAKE_OK) and the other sees a dead
 * handle (TAKE_GONE) without touching its memory. A communicator with calls still queued in an
 * open group (comm->queued) stays registered (TAKE_QUEUED): the group holds pointers to it.
 * abort: the abort flag is raised while the handle is known to be alive. */
static int registry_take(ncclComm_t c, int abort, int *queued) {
  int state = TAKE_GONE;
  pthread_rwlock_wrlock(&registry_lock);
  for (size_t i = 0; i < registry_n && state == TAKE_GONE; i++) {
    if (registry[i] != c) continue;
    if (abort) __atomic_store_n(&c->abort_flag, 1, __ATOMIC_RELEASE);
    *queued = __atomic_load_n(&c->queued, __ATOMIC_ACQUIRE);
    state = *queued > 0 ? TAKE_QUEUED : TAKE_OK;
    if (state == TAKE_OK) registry[i] = registry[--registry_n];
  }
  __atomic_add_fetch(&registry_gen, 1, __ATOMIC_RELEASE);
  pthread_rwlock_unlock(&registry_lock);
  return state;
}

static int registry_has(ncclComm_t c) {
  if (c == registry_seen && __atomic_load_n(&registry_gen, __ATOMIC_ACQUIRE) == registry_seen_gen)
    return 1;
  int found = 0;
  pthread_rwlock_rdlock(&registry_lock);
  uint64_t gen = __atomic_load_n(&registry_gen, __ATOMIC_ACQUIRE);
  for (size_t i = 0; i < registry_n && !found; i++) found = registry[i] == c;
  pthread_rwlock_unlock(&registry_lock);
  if (found) registry_seen = c, registry_seen_gen = gen;
  return found;
}

ncclResult_t comm_check_handle(ncclComm_t comm, const char *fn) {
  if (comm == NULL) return TUTTI_ERR(ncclInvalidArgument, "%s: comm is NULL", fn);
  if (!registry_has(comm) || comm->magic != COMM_MAGIC)
    return TUTTI_ERR(ncclInvalidArgument,
                     "%s: comm %p is not a live communicator (destroyed, or never created)", fn,
                     (void *)comm);
  tutti_log_set_rank(comm->rank);
  return ncclSuccess;
}

ncclResult_t comm_check(ncclComm_t comm, const char *fn) {
  TUTTI_CHECK(comm_check_handle(comm, fn));
  return comm_check_state(comm, fn);
}

ncclResult_t comm_check_state(ncclComm_t comm, const char *fn) {
  if (comm->finalized)
    return TUTTI_ERR(ncclInvalidUsage, "%s: communicator (rank %d) was finalized", fn, comm->rank);
  if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE))
    return TUTTI_ERR(ncclInvalidUsage, "%s: communicator (rank %d) was aborted", fn, comm->rank);
  ncclResult_t failed = (ncclResult_t)__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
  if (failed != ncclSuccess)
    return TUTTI_ERR(failed, "%s: communicator (rank %d) failed earlier: %s", fn, comm->rank,
                     comm->error_msg);
  return ncclSuccess;
}

void comm_set_error(ncclComm_t comm, ncclResult_t code, const char *msg) {
  int expected = 0;
  /* Claim, write the message, then publish the code: readers load async_error (acquire)
   * before reading error_msg, so they never see a half-written message. */
  if (__atomic_compare_exchange_n(&comm->error_claimed, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    snprintf(comm->error_msg, sizeof(comm->error_msg), "%s", msg);
    __atomic_store_n(&comm->async_error, (int)code, __ATOMIC_RELEASE);
  }
  transport_mark_failed(comm);
}

const char *comm_error_text(ncclComm_t comm) {
  if (__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE) == ncclSuccess || !comm->error_msg[0])
    return NULL;
  return comm->error_msg;
}

const char *comm_failure_reason(ncclComm_t comm) {
  const char *text = comm_error_text(comm);
  if (text) return text;
  return comm->abort_flag ? "ncclCommAbort was called" : "its communicator failed during init";
}

/* ---- version, ids, errors ---- */

API ncclResult_t ncclGetVersion(int *version) {
  if (!version) return TUTTI_ERR(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

API const char *tuttiVersionString(void) {
  static char buf[96];
  snprintf(buf, sizeof(buf), "%s (%s)", TUTTI_VERSION_STRING, tutti_build_options());
  return buf;
}

API ncclResult_t ncclGetUniqueId(ncclUniqueId *out) {
  if (!out) return TUTTI_ERR(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  sock_addr_t addr;
  char ifname[64];
  int fd;
  TUTTI_CHECK(net_local_addr(&addr, ifname, sizeof(ifname)));
  TUTTI_CHECK(sock_listen(&addr, &fd));
  bootstrap_make_id(&addr, NULL, out);
  ncclResult_t res = bootstrap_root_start(fd, out);
  if (res != ncclSuccess) close(fd);
  return res;
}

API const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the tutti developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

API const char *ncclGetLastError(ncclComm_t comm) {
  const char *msg = tutti_last_error();
  if (msg[0] == '\0' && comm && registry_has(comm) &&
      __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE) != ncclSuccess)
    return comm->error_msg;
  return msg;
}

static uint64_t comm_serials; /* communicators created so far (comm->serial) */

/* ---- init ---- */

static ncclResult_t comm_alloc(ncclComm_t *out, int nranks, int rank) {
  ncclComm_t c = calloc(1, sizeof(*c));
  if (!c) return TUTTI_ERR(ncclSystemError, "out of memory");
  c->peers = calloc(nranks, sizeof(peer_info_t));
  c->p2p_lanes = calloc(2 * (size_t)nranks, sizeof(sched_t));
  c->host_of_rank = calloc(nranks, sizeof(int));
  if (!c->peers || !c->p2p_lanes || !c->host_of_rank) {
    free(c->peers);
    free(c->p2p_lanes);
    free(c->host_of_rank);
    free(c);
    return TUTTI_ERR(ncclSystemError, "out of memory");
  }
  c->magic = COMM_MAGIC;
  c->serial = __atomic_add_fetch(&comm_serials, 1, __ATOMIC_RELAXED);
  const device_ops_t *dev = device_current(); /* NCCL's communicator is on the current device */
  c->rank = rank, c->nranks = nranks, c->cuda_dev = dev ? dev->ordinal() : -1;
  c->dev_ctx = dev ? dev->current_ctx() : NULL;
  pthread_mutex_init(&c->lock, NULL);
  peer_info_t *me = &c->peers[rank];
  me->rank = rank;
  me->pid = (int32_t)getpid();
  me->host_hash = host_identity(me->hostname, sizeof(me->hostname));
  me->machine_hash = machine_identity();
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  me->ncpu = ncpu > 0 ? (int32_t)ncpu : 0;
  const char *fake = tutti_getenv("TEST_FAKE_VERSION"); /* test hook for the mismatch check */
  snprintf(me->version, sizeof(me->version), "%s", fake ? fake : TUTTI_VERSION_STRING);
  snprintf(me->build, sizeof(me->build), "%s", tutti_build_options());
  me->cuda_dev = c->cuda_dev;
  const topo_t *t = NULL;
  me->numa = topo_get_process(&t) == ncclSuccess ? topo_current_numa(t) : -1;
  me->solo_cpu = tutti_solo_cpu();
  tutti_clear_error();
  *out = c;
  return ncclSuccess;
}

static void comm_free(ncclComm_t c) {
  small_close(c, 0); /* when init failed after small_agree */
  engine_peer_free(c);
  transport_close_all(c);
  bootstrap_close(c);
  sched_free(&c->sched_scratch);
  plan_free(c);
  for (int i = 0; c->p2p_lanes && i < 2 * c->nranks; i++) sched_free(&c->p2p_lanes[i]);
  free(c->p2p_lanes);
  free(c->host_of_rank);
  free(c->ring_order);
  free(c->ring_pos);
  free(c->scratch);
  free(c->peers);
  pthread_mutex_destroy(&c->lock);
  c->magic = COMM_DEAD;
  free(c);
}

int comm_machine_ranks(ncclComm_t c, int p) {
  int n = 0;
  for (int q = 0; q < c->nranks; q++) n += c->peers[q].machine_hash == c->peers[p].machine_hash;
  return n;
}

int comm_machine_oversubscribed(ncclComm_t c, int p) {
  return c->peers[p].ncpu > 0 && comm_machine_ranks(c, p) > c->peers[p].ncpu;
}

/* What the tuner sees must not depend on the rank: hosts and machines may differ in size. */
static void comm_tuner_view(ncclComm_t c) {
  c->max_local_size = 0, c->tuner_machine_ranks = 0, c->tuner_ncpu = 0;
  for (int p = 0; p < c->nranks; p++) {
    int host = 0, machine = comm_machine_ranks(c, p);
    for (int q = 0; q < c->nranks; q++) host += c->peers[q].host_hash == c->peers[p].host_hash;
    if (host > c->max_local_size) c->max_local_size = host;
    int cpus = c->peers[p].ncpu;
    if (cpus > 0 && (c->tuner_ncpu == 0 ||
                     (double)machine / cpus > (double)c->tuner_machine_ranks / c->tuner_ncpu))
      c->tuner_machine_ranks = machine, c->tuner_ncpu = cpus;
  }
}

static void comm_topology(ncclComm_t c) {
  c->local_size = 0;
  for (int p = 0; p < c->nranks; p++) {
    if (c->peers[p].host_hash != c->peers[c->rank].host_hash) continue;
    if (p == c->rank) c->local_rank = c->local_size;
    c->local_size++;
  }
  /* Oversubscription counts every rank on this kernel: hosts that are containers or network
   * namespaces of one machine (the test bed) share its CPUs, and a rank that spins there takes
   * the CPU from the peer it waits for. */
  c->machine_size = comm_machine_ranks(c, c->rank);
  c->ncpu = c->peers[c->rank].ncpu;
  c->oversubscribed = comm_machine_oversubscribed(c, c->rank);
  comm_tuner_view(c);
  c->nhosts = 0;
  for (int p = 0; p < c->nranks; p++) { /* a host is named by its first rank */
    int q = 0;
    while (c->peers[q].host_hash != c->peers[p].host_hash) q++;
    c->host_of_rank[p] = q;
    c->nhosts += q == p;
  }
  c->hier_ok = hier_applicable(c->host_of_rank, c->nranks);
  c->host_blocks = c->hier_ok;
  for (int p = 0; p < c->nranks && c->host_blocks; p++)
    c->host_blocks = c->host_of_rank[p] == p - p % c->local_size;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 16; i++) h = (h ^ c->secret[i]) * 0x100000001b3ull;
  c->id_hash = h;
}

static int ring_host_crossings(ncclComm_t c, const int *order) {
  int n = c->nranks, x = 0;
  for (int i = 0; i < n; i++)
    x += c->host_of_rank[order ? order[i] : i] !=
         c->host_of_rank[order ? order[(i + 1) % n] : (i + 1) % n];
  return x;
}

static void ring_log(ncclComm_t c, const char *why) {
  char list[160];
  size_t k = 0;
  for (int i = 0; i < c->nranks && k + 16 < sizeof(list); i++)
    k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%d", i ? " " : "",
                          c->ring_order ? c->ring_order[i] : i);
  if (k + 16 >= sizeof(list)) snprintf(list + k, sizeof(list) - k, " ...");
  INFO(SUB_INIT, "ring order %s (%s): %d host crossings, %d in rank order", list, why,
       ring_host_crossings(c, c->ring_order), ring_host_crossings(c, NULL));
}

/* The ring order every rank computes alike from the peer table. TUTTI_RING_ORDER: "topo" (the
 * default: topo_ring_global over the ranks' hosts and NUMA nodes, so the ring enters each host
 * once and crosses NUMA nodes as little as possible) or "rank" (rank order). */
static ncclResult_t comm_ring(ncclComm_t c) {
  char which[64];
  const char *v = tutti_getenv_which("RING_ORDER", which, sizeof(which));
  int n = c->nranks, ident = 1;
  c->ring_grouped = c->host_blocks || c->nhosts == 1;
  if (v && strcasecmp(v, "rank") == 0) return ring_log(c, "RING_ORDER=rank"), ncclSuccess;
  if (v && strcasecmp(v, "topo") != 0)
    return TUTTI_ERR(ncclInvalidUsage, "setting %s=\"%s\" is not \"topo\" or \"rank\"", which, v);
  uint64_t *hosts = malloc(sizeof(uint64_t) * (size_t)n);
  topo_rank_loc_t *locs = malloc(sizeof(*locs) * (size_t)n);
  int *order = malloc(sizeof(int) * (size_t)n), *pos = malloc(sizeof(int) * (size_t)n);
  ncclResult_t res =
      hosts && locs && order && pos ? ncclSuccess : TUTTI_ERR(ncclSystemError, "out of memory");
  for (int p = 0; p < n && res == ncclSuccess; p++)
    hosts[p] = c->peers[p].host_hash,
    locs[p] = (topo_rank_loc_t){.gpu = -1, .numa = c->peers[p].numa};
  if (res == ncclSuccess && topo_ring_global(NULL, n, hosts, locs, order) != ncclSuccess) {
    INFO(SUB_INIT, "ring order: %s; rank order kept", tutti_last_error());
    tutti_clear_error();
    ident = -1;
  }
  for (int i = 0; i < n && res == ncclSuccess && ident == 1; i++) ident = order[i] == i;
  if (res == ncclSuccess && ident == 0) {
    for (int i = 0; i < n; i++) pos[order[i]] = i;
    c->ring_order = order, c->ring_pos = pos, order = pos = NULL;
  }
  if (res == ncclSuccess && ident >= 0) c->ring_grouped = 1;
  if (res == ncclSuccess) ring_log(c, "topology: hosts, then NUMA nodes");
  free(hosts), free(locs), free(order), free(pos);
  return res;
}

/* TUTTI_BIND: "none" (the default: the thread keeps the launcher's binding, or none) or
 * "auto" (the binding topo_choose_binding_local decides is applied to the thread creating the
 * communicator, and so to the threads it starts later; the engine runs in the caller's thread).
 * "none" is the default because binding is the launcher's job (mpirun --bind-to, srun
 * --cpu-bind, tutti-run --bind) and a library that moves its caller's threads surprises the
 * programs that place their own. */
static ncclResult_t bind_setting(int *apply) {
  char which[64];
  const char *v = tutti_getenv_which("BIND", which, sizeof(which));
  *apply = 0;
  if (!v || strcasecmp(v, "none") == 0) return ncclSuccess;
  if (strcasecmp(v, "auto") == 0) return *apply = 1, ncclSuccess;
  return TUTTI_ERR(ncclInvalidUsage, "setting %s=\"%s\" is not \"none\" or \"auto\"", which, v);
}

/* This rank's place among the ranks sharing its machine's CPUs (all its hosts). */
static int comm_machine_index(ncclComm_t c) {
  int i = 0;
  for (int q = 0; q < c->rank; q++) i += c->peers[q].machine_hash == c->peers[c->rank].machine_hash;
  return i;
}

/* Topology decisions for this rank (hwloc, once per process), printed at INFO with reasons;
 * the binding is applied with TUTTI_BIND=auto. Host-memory ranks have no GPU: a rank the
 * launcher left unbound takes its share of the machine's CPUs, a bound one keeps its binding.
 * (The socket address, the other decision, is made where it is used: net_addr.c.) */
static void comm_topology_decisions(ncclComm_t c, int apply) {
  const topo_t *t = NULL;
  if (topo_get_process(&t) != ncclSuccess || !t) {
    INFO(SUB_INIT, "topology: not available (%s); no placement decisions", tutti_last_error());
    tutti_clear_error();
    return;
  }
  topo_binding_t bind;
  topo_choose_binding_local(t, -1, comm_machine_index(c), c->machine_size, &bind);
  INFO(SUB_INIT, "topology (%s, %.1f ms): rank %d binding numa %d cpuset %s: %s", topo_source(t),
       topo_load_ms(t), c->rank, bind.numa, bind.cpuset[0] ? bind.cpuset : "-", bind.reason);
  if (!apply)
    INFO(SUB_INIT, "topology: binding not applied (TUTTI_BIND=none, the default; auto applies it)");
  else if (!bind.cpubind && !bind.membind)
    INFO(SUB_INIT, "topology: TUTTI_BIND=auto: this thread's binding is already the chosen one");
  else
    topo_bind_thread(t, &bind, NULL);
}

static ncclResult_t comm_init(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank) {
  char why[1024];
  ncclComm_t c = NULL;
  ncclResult_t res;
  int bind = 0;
  uint64_t t0 = tutti_time_ns();
  tutti_log_set_rank(rank);
  tutti_log_version();
  tutti_log_settings();
  TUTTI_CHECK(comm_alloc(&c, nranks, rank));
  agreed_settings_format(c->peers[rank].settings, sizeof(c->peers[rank].settings));
  c->timeout_ms = tutti_param_Timeout() * 1000;
  c->oneshot_max_bytes = (size_t)tutti_param_OneshotMaxBytes();
  tuner_parse_algo(tutti_getenv("ALGO"), c->algo_mask);
  tuner_model_from_env(&c->tuner);
  c->nt_threshold = (size_t)tutti_param_NtThreshold();
  c->nt_measure = nt_measure_enabled();
  c->device_possible = device_get() != NULL || cuda_driver_ready();
  TUTTI_CHECK_GOTO(bind_setting(&bind), res, fail);
  TUTTI_CHECK_GOTO(bootstrap_join(c, id, t0), res, fail);
  comm_topology(c);
  TUTTI_CHECK_GOTO(comm_ring(c), res, fail);
  comm_topology_decisions(c, bind);
  comm_cache_size(c); /* after the binding: the CPU the rank runs on */
  TUTTI_CHECK_GOTO(transport_connect_all(c), res, fail);
  c->peer_mem = c->nhosts == 1 && c->nranks > 1;
  for (int p = 0; p < nranks; p++)
    if (p != rank) c->peer_mem &= c->send_conn[p].transport->mem_expose != NULL;
  for (int p = 0; p < nranks; p++) /* peer_read: set by the transport's setup, alike everywhere */
    if (p != rank)
      c->peer_read &= c->peer_mem && c->send_conn[p].transport->mem_read &&
                      c->send_conn[p].transport->mem_write;
  c->dev_peer &= c->peer_mem; /* device buffers too: set by cuda_p2p at setup, alike */
  int all_rdv = c->peer_mem;  /* whole steps by rendezvous to every peer: from the largest floor */
  c->rdv_min_bytes = 0;
  for (int p = 0; p < nranks; p++)
    if (p != rank) {
      all_rdv &= c->send_conn[p].large_bytes > 0;
      c->rdv_min_bytes = TUTTI_MAX(c->rdv_min_bytes, c->send_conn[p].large_bytes);
    }
  if (!all_rdv) c->rdv_min_bytes = 0;
  /* scratch: in-place one-shot (oneshot_max_bytes), tree reduce partials (one chunk) */
  c->scratch_bytes = TUTTI_MAX(TUTTI_MAX(c->oneshot_max_bytes, c->chunk_bytes), 64);
  c->scratch = malloc(c->scratch_bytes);
  /* a schedule that needs more (rhd's reduce-scatter, Bruck) grows it up to this (plan.c) */
  int64_t smax = tutti_param_fresh("SCRATCH_MAX_BYTES", (int64_t)TUNER_SCRATCH_MAX_BYTES);
  c->scratch_max_bytes = TUTTI_MAX(smax > 0 ? (size_t)smax : 0, c->scratch_bytes);
  if (!c->scratch) {
    res = TUTTI_ERR(ncclSystemError, "out of memory");
    goto fail;
  }
  tutti_test_hold("TUTTI_TEST_DONE_DELAY_MS", tutti_param_TestDoneDelayMs(), rank,
                  "before it ends its init");
  TUTTI_CHECK_GOTO(bootstrap_done(c), res, fail);
  bootstrap_close(c);
  TUTTI_CHECK_GOTO(registry_add(c), res, fail);
  INFO(SUB_INIT,
       "comm %p rank %d nranks %d local %d/%d host %s pid %d (%d ranks on %d CPUs%s): init done "
       "in %.1f ms",
       (void *)c, rank, nranks, c->local_rank, c->local_size, c->peers[rank].hostname,
       c->peers[rank].pid, c->machine_size, c->ncpu, c->oversubscribed ? ", oversubscribed" : "",
       (tutti_time_ns() - t0) / 1e6);
  *out = c;
  return ncclSuccess;
fail:
  res = bootstrap_abort(c, res); /* before the segments go: local peers still map them */
  snprintf(why, sizeof(why), "%s", tutti_last_error());
  transport_mark_failed(c);
  comm_free(c);
  tutti_restore_error(why); /* the cleanup's own complaints are not why init failed */
  return res;
}

static ncclResult_t check_init_args(ncclComm_t *comm, int nranks, int rank, const char *fn) {
  if (!comm) return TUTTI_ERR(ncclInvalidArgument, "%s: comm (the output pointer) is NULL", fn);
  *comm = NULL;
  if (nranks < 1) return TUTTI_ERR(ncclInvalidArgument, "%s: nranks %d must be >= 1", fn, nranks);
  if (rank < 0 || rank >= nranks)
    return TUTTI_ERR(ncclInvalidArgument, "%s: rank %d is outside [0, nranks=%d)", fn, rank,
                     nranks);
  return ncclSuccess;
}

/* Inside a group, init runs at ncclGroupEnd (group_jobs.c); *comm is set then. */
typedef struct init_job {
  ncclComm_t *slot;
  int nranks, rank;
  ncclUniqueId id;
} init_job_t;

static ncclResult_t init_job_run(void *p) {
  init_job_t *j = p;
  ncclResult_t res = comm_init(j->slot, j->nranks, &j->id, j->rank);
  free(j);
  return res;
}

static ncclResult_t comm_init_or_defer(ncclComm_t *comm, int nranks, const ncclUniqueId *id,
                                       int rank) {
  if (group_depth() == 0) return comm_init(comm, nranks, id, rank);
  init_job_t *j = malloc(sizeof(*j));
  if (!j) return TUTTI_ERR(ncclSystemError, "out of memory");
  *j = (init_job_t){.slot = comm, .nranks = nranks, .rank = rank, .id = *id};
  return group_defer(init_job_run, free, j);
}

API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  tutti_clear_error();
  TUTTI_CHECK(check_init_args(comm, nranks, rank, "ncclCommInitRank"));
  return comm_init_or_defer(comm, nranks, &id, rank);
}

API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t *config) {
  tutti_clear_error();
  TUTTI_CHECK(check_init_args(comm, nranks, rank, "ncclCommInitRankConfig"));
  if (config && (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, blocking)))
    return TUTTI_ERR(ncclInvalidArgument,
                     "ncclCommInitRankConfig: config was not initialised "
                     "with NCCL_CONFIG_INITIALIZER");
  /* blocking/CTA settings have no meaning on host memory: init completes here, or at the
   * ncclGroupEnd of an open group. */
  return comm_init_or_defer(comm, nranks, &id, rank);
}

typedef struct init_all_arg {
  ncclComm_t *slot;
  int nranks, rank;
  ncclUniqueId id;
  const device_ops_t *dev; /* with the context to bind, where the caller has a device */
  void *ctx;
  ncclResult_t res;
  char err[512];
} init_all_arg_t;

static void *init_all_thread(void *p) {
  init_all_arg_t *a = p;
  if (a->dev) a->dev->bind(a->ctx);
  a->res = comm_init(a->slot, a->nranks, &a->id, a->rank);
  if (a->res != ncclSuccess) snprintf(a->err, sizeof(a->err), "%s", tutti_last_error());
  return NULL;
}

API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  tutti_clear_error();
  if (!comms) return TUTTI_ERR(ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
  if (ndev < 1)
    return TUTTI_ERR(ncclInvalidArgument, "ncclCommInitAll: ndev %d must be >= 1", ndev);
  ncclUniqueId id;
  TUTTI_CHECK(ncclGetUniqueId(&id));
  init_all_arg_t *args = calloc(ndev, sizeof(*args));
  pthread_t *threads = calloc(ndev, sizeof(*threads));
  if (!args || !threads) {
    free(args), free(threads);
    return TUTTI_ERR(ncclSystemError, "out of memory");
  }
  ncclResult_t res = ncclSuccess;
  int started = 0;
  /* Where the caller has a device context, rank i is on device devlist[i] (i without a devlist),
   * as in NCCL: its thread binds the caller's context when that is the device, else the device's
   * primary context. Several ranks may name one device. Without a context: host ranks. */
  for (int i = 0; i < ndev; i++) comms[i] = NULL;
  const device_ops_t *dev = device_current();
  void *own = dev ? dev->current_ctx() : NULL;
  int own_ordinal = dev ? dev->ordinal() : -1;
  for (int i = 0; i < ndev && res == ncclSuccess; i++) {
    args[i] = (init_all_arg_t){.slot = &comms[i], .nranks = ndev, .rank = i, .id = id, .dev = dev};
    int want = devlist ? devlist[i] : i;
    if (dev) args[i].ctx = want == own_ordinal ? own : dev->device_ctx(want);
    if (dev && !args[i].ctx)
      res = TUTTI_ERR(ncclInvalidArgument,
                      "ncclCommInitAll: rank %d is to be on device %d%s, which this process "
                      "cannot use",
                      i, want, devlist ? " (devlist)" : " (no devlist: rank i on device i)");
  }
  for (int i = 0; i < ndev && res == ncclSuccess; i++) {
    if (pthread_create(&threads[i], NULL, init_all_thread, &args[i]) != 0) {
      res = TUTTI_ERR(ncclSystemError, "ncclCommInitAll: cannot start thread %d", i);
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  for (int i = 0; i < started && res == ncclSuccess; i++)
    if (args[i].res != ncclSuccess)
      res = TUTTI_ERR(args[i].res, "ncclCommInitAll: rank %d: %s", i, args[i].err);
  for (int i = 0; i < ndev; i++) {
    if (res != ncclSuccess && comms[i])
      ncclCommDestroy(comms[i]), comms[i] = NULL;
    else if (comms[i])
      comms[i]->cuda_dev = devlist ? devlist[i] : i;
  }
  free(args);
  free(threads);
  return res;
}

/* ---- end of life ---- */

API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  TUTTI_CHECK(comm_check_handle(comm, "ncclCommFinalize"));
  proxy_drain(comm);               /* operations queued on streams complete first */
  pthread_mutex_lock(&comm->lock); /* waits for an operation running in another thread */
  comm->finalized = 1;
  pthread_mutex_unlock(&comm->lock);
  return ncclSuccess;
}

/* Destroy and abort: the call that takes the handle out of the registry frees it; a second
 * call (another thread, a watchdog) gets an error instead of a double free. */
static ncclResult_t comm_end(ncclComm_t comm, int abort, const char *fn) {
  int queued = 0, state = registry_take(comm, abort, &queued);
  if (state == TAKE_GONE)
    return TUTTI_ERR(ncclInvalidArgument,
                     "%s: comm %p is not a live communicator (destroyed or "
                     "aborted already, being destroyed by another thread, or never created)",
                     fn, (void *)comm);
  if (abort) transport_mark_failed(comm); /* releases a blocked call and the peers waiting on us */
  if (state == TAKE_QUEUED)
    return TUTTI_ERR(ncclInvalidUsage,
                     "%s: rank %d still has %d call(s) queued in an open group "
                     "(ncclGroupStart without ncclGroupEnd, or a pending ncclCommSplit); end the "
                     "group first%s",
                     fn, comm->rank, queued,
                     abort ? " (the communicator is aborted: the group will fail)" : "");
  /* The rank's device memory, registrations and mappings go back in its own context, whichever
   * thread ends it (CUDA refuses them without one); the caller's context is given back. */
  const device_ops_t *dev = comm->dev_ctx ? device_get() : NULL;
  int switched = 0;
  void *caller = device_switch(dev, comm->dev_ctx, &switched);
  proxy_stop(comm);         /* runs what the streams queued (aborted: fails it, releasing them) */
  small_close(comm, abort); /* aborted: releases the streams' small calls */
  pthread_mutex_lock(&comm->lock); /* waits for an operation running in another thread */
  pthread_mutex_unlock(&comm->lock);
  comm_free(comm);
  if (switched) dev->bind(caller);
  return ncclSuccess;
}

API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* as NCCL: destroying NULL is a no-op */
  return comm_end(comm, 0, "ncclCommDestroy");
}

API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  return comm_end(comm, 1, "ncclCommAbort");
}

API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
  TUTTI_CHECK(comm_check_handle(comm, "ncclCommGetAsyncError"));
  if (!err) return TUTTI_ERR(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  small_check(comm); /* a peer that ended while this rank's stream waits for it */
  *err = (ncclResult_t)__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
  return ncclSuccess;
}

API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  TUTTI_CHECK(comm_check_handle(comm, "ncclCommCount"));
  if (!count) return TUTTI_ERR(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  TUTTI_CHECK(comm_check_handle(comm, "ncclCommCuDevice"));
  if (!device) return TUTTI_ERR(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = comm->cuda_dev;
  return ncclSuccess;
}

API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  TUTTI_CHECK(comm_check_handle(comm, "ncclCommUserRank"));
  if (!rank) return TUTTI_ERR(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}
