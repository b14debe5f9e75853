/* The communicator: who the ranks are, how to reach them, and its state. */
#ifndef TUTTI_COMM_H_
#define TUTTI_COMM_H_

#include <pthread.h>

#include "algos/tuner.h"
#include "core.h"
#include "reduce.h"
#include "transport/transport.h"

#define COMM_MAGIC 0x7475747469636f6dull /* "tutticom" */
#define COMM_DEAD 0xdeadc0dedeadc0deull
#define HOST_NAME_BYTES 64
#define MAX_USER_OPS 64

/* What every rank learns about every other rank at bootstrap. */
typedef struct peer_info {
  int32_t rank;
  int32_t pid;
  uint64_t host_hash;    /* host identity: hostname + boot id, or TUTTI_HOSTID */
  uint64_t machine_hash; /* kernel identity (boot id): whose CPUs the rank shares */
  int32_t ncpu;          /* CPUs online on that machine */
  char hostname[HOST_NAME_BYTES];
  char version[32];   /* tutti version string */
  char build[64];     /* build options */
  char settings[512]; /* settings every rank must agree on (agreed.c) */
  int32_t cuda_dev;
  int32_t numa;     /* NUMA node of the CPUs the rank may use at init (-1: several, unknown) */
  int32_t solo_cpu; /* the one CPU the rank's init thread may use, -1 when it may use several */
} peer_info_t;

typedef struct user_op { /* ncclRedOpCreatePreMulSum */
  int used;
  ncclDataType_t type;
  ncclScalarResidence_t residence;
  unsigned char value[8]; /* immediate scalar */
  const void *ptr;        /* scalar read at call time (ncclScalarDevice on host memory) */
} user_op_t;

struct bootstrap;

#define PLAN_P2P_MAX 8 /* calls of a group of sends and receives the plan cache keeps */

/* Steps a plan cache keeps (plan.c, plan_p2p.c): a point-to-point algorithm's lanes one after
 * another, lane i steps [lane_end[i - 1], lane_end[i]) (nlanes of them; lane_end [2 * nranks],
 * allocated at the first use and kept across plans); nlanes 0: the steps are one lane. */
typedef struct kept_lanes {
  sched_t steps;
  int nlanes;
  uint32_t *lane_end;
} kept_lanes_t;

struct ncclComm {
  uint64_t magic;
  uint64_t serial;        /* this process's n-th communicator: tells it from an earlier one at its
                           * address (enqueue.c's cache of the last call) */
  uint64_t calls_checked; /* calls validated in full, not taken from that cache (tests read it) */
  uint64_t calls_quick;   /* calls run on the quick way (engine_run_quick; tests read it) */
  uint64_t calls_cached;  /* calls group_run ran from the cached steps (plan_one_cached; tests) */
  int rank, nranks;
  int local_rank, local_size; /* ranks sharing this rank's host */
  int *host_of_rank;          /* [nranks]: host of each rank (its first rank), for hier */
  int hier_ok;                /* hier_applicable(host_of_rank, nranks) */
  int *ring_order, *ring_pos; /* [nranks] ring position -> rank and back; NULL: rank order */
  int ring_grouped;           /* 1: the ring enters each host once */
  int nhosts;                 /* distinct hosts among the ranks */
  int host_blocks;            /* rank r is on host r / local_size (tutti-run --hosts placement) */
  int machine_size;           /* ranks on this kernel (containers, namespaces: several hosts) */
  int ncpu;                   /* CPUs online on this machine */
  /* The tuner's view, the same on every rank (so that all choose the same algorithm): the
   * largest host, and the machine with the most ranks per CPU (its ranks and CPUs). */
  int max_local_size, tuner_machine_ranks, tuner_ncpu;
  int oversubscribed; /* more ranks on this machine than CPUs: poll politely */
  int cuda_dev;
  void *dev_ctx;    /* the device context current where the rank was made (NULL: a host rank) */
  uint64_t id_hash; /* names this communicator's shared resources */
  unsigned char secret[16];
  peer_info_t *peers;          /* [nranks] */
  struct bootstrap *bootstrap; /* open during init only */

  conn_t *send_conn;    /* [nranks]: to peer */
  conn_t *recv_conn;    /* [nranks]: from peer */
  void *shm;            /* shm transport state */
  void *memreg;         /* other processes' ncclMemAlloc regions mapped here (memreg.c) */
  struct proxy *proxy;  /* the stream path's thread (proxy.c), started on first use */
  int peer_mem;         /* every peer reached through a transport with peer memory */
  int peer_read;        /* every rank may read every peer's memory by copy (transport mem_read),
                         * agreed by all ranks at setup */
  size_t rdv_min_bytes; /* every peer's connection takes whole steps of this many bytes or more
                         * by rendezvous (transport.h, large_bytes); 0: some does not. Alike on
                         * every rank (one host: the agreed TUTTI_SHM_RDV_MIN, peer_read) */
  uint64_t peer_calls;  /* calls run with peer steps so far, alike on every rank */
  int dev_peer;         /* every rank's device buffers can be mapped by every other rank
                         * (transport/cuda_p2p.c), agreed by all ranks at setup */
  void *cuda_p2p;       /* the peers' device allocations this communicator opened */
  void *small;          /* the small-call path's regions (small.c); NULL on every rank when off */

  pthread_mutex_t lock;     /* one operation at a time on this communicator */
  volatile int abort_flag;  /* set by ncclCommAbort (any thread) */
  int queued;               /* calls of open groups naming it (atomic): destroy waits for 0 */
  volatile int async_error; /* ncclResult_t of the first fatal error (published last) */
  int error_claimed;        /* the first comm_set_error caller writes error_msg */
  char error_msg[512];
  int finalized;
  uint64_t op_count;      /* operations run so far (for messages) */
  uint64_t collcheck_seq; /* groups checked by TUTTI_CHECK_COLL (collcheck.c) */
  user_op_t user_ops[MAX_USER_OPS];

  /* Reused between calls (no allocation on the hot path). */
  sched_t sched_scratch;
  void *scratch; /* engine scratch (in-place one-shot), scratch_bytes long; grows on demand */
  size_t scratch_bytes;
  size_t scratch_max_bytes; /* how far it may grow (TUTTI_SCRATCH_MAX_BYTES): the tuner's limit */

  /* FIFO geometry, set by the transports: the smallest slot and ring chunk of any connection. */
  size_t slot_bytes;  /* 0 when there is no peer */
  size_t chunk_bytes; /* bytes a ring step may move per round (<= half a FIFO) */
  sched_t *p2p_lanes; /* [2 * nranks], reused */
  int lanes_used;     /* p2p_lanes hold steps (an ALGO_USES_LANES call was planned) */

  /* The last collective's plan: a call with the same key (collective, count, element size,
   * root, in place, PreMulSum or not) reuses its algorithm and chunk, and its steps when they
   * were cached (steps_valid), instead of asking the tuner and the builder again (plan.c). */
  struct {
    int valid, steps_valid, root, in_place, premul;
    int quick;            /* the steps are cached and engine_run_quick may run them (plan_quick) */
    size_t scratch_bytes; /* the scratch the cached call needs (sched_scratch_elems) */
    uint32_t map_excluded;
    coll_t coll;
    size_t count, esize, chunk;
    algo_t algo;
    kept_lanes_t kept; /* a point-to-point algorithm's (ALGO_USES_LANES) are its lanes */
  } plan;
  /* The last two groups of sends and receives (or a send or receive alone) planned: a group of
   * the same calls in the same order (kind, peer, count, element size) as one of them runs its
   * lanes again (plan_p2p.c). n 0: none. */
  struct plan_p2p {
    int n, quick; /* quick: engine_run_quick may run the lanes */
    struct plan_p2p_call {
      coll_t coll;
      int peer;
      size_t count, esize, chunk;
    } call[PLAN_P2P_MAX];
    kept_lanes_t kept;
  } p2p_plan[2];
  int p2p_older; /* the entry of p2p_plan used less recently: a group not kept replaces it */
  /* Keys (collective, count, element size) whose handshake showed that a kind of peer-memory
   * algorithm does not fit the buffers (some rank's cannot be mapped; or all can, so reading
   * by copy is not wanted): the next `skip` calls of that key leave those algorithms (bits
   * `exclude`) out, and with them a handshake that would decide nothing (plan.c,
   * map_excluded). The same on every rank. */
  struct map_miss {
    coll_t coll;
    size_t count, esize;
    uint32_t skip, exclude;
    uint32_t span; /* the skips this key was given last (they double while it keeps missing) */
  } map_miss[16];
  struct adapt_bucket *adapt; /* the measured choice's table (adapt.c), NULL until used */
  size_t adapt_min_bytes;     /* adapt_min_bytes(), read at the first call (0: not yet) */
  uint32_t adapt_calls;       /* calls the measured choice covered (the same on every rank) */
  struct nt_bucket *nt_adapt; /* plain or streaming stores, measured (adapt_stream.c), or NULL */
  uint32_t nt_calls;          /* calls that choice covered (this rank's) */
  int nt_measure;             /* nt_measure_enabled() at init */

  /* Settings read at init. */
  int64_t timeout_ms;
  size_t oneshot_max_bytes;
  size_t nt_threshold;          /* calls at least this large may stream their results (plan.c) */
  size_t cache_bytes;           /* last-level cache (TUTTI_CACHE_BYTES or sysfs), for the same */
  int device_possible;          /* a device layer or a CUDA driver exists: buffers may be device */
  uint32_t algo_mask[COLL_NUM]; /* algorithms TUTTI_ALGO / NCCL_ALGO allows, per collective */
  tuner_model_t tuner;          /* cost model (TUTTI_TUNER_*) */
};

/* Validates a communicator handle passed by the user (NULL, destroyed, finalized, failed). */
ncclResult_t comm_check(ncclComm_t comm, const char *fn);
/* The state part of comm_check (finalized, aborted, failed) for an already validated handle. */
ncclResult_t comm_check_state(ncclComm_t comm, const char *fn);
/* Like comm_check but accepts finalized/failed communicators (for queries and destroy). */
ncclResult_t comm_check_handle(ncclComm_t comm, const char *fn);
/* Records a fatal error on the communicator (first one wins) and tells the peers. */
void comm_set_error(ncclComm_t comm, ncclResult_t code, const char *msg);
/* The recorded error's message once there is one (comm_set_error), else NULL. */
const char *comm_error_text(ncclComm_t comm);
/* Why this rank stopped, for its peers: the recorded error, else an abort or a failed init. */
const char *comm_failure_reason(ncclComm_t comm);
/* Host identity of this process (hostname + boot id, or TUTTI_HOSTID). */
uint64_t host_identity(char *hostname, size_t len);
/* Identity of the kernel this process runs on (boot id): ranks of several hosts (containers,
 * network namespaces) on one machine share its CPUs. TUTTI_HOSTID overrides it too. */
uint64_t machine_identity(void);
/* The largest-level data cache of the CPU this thread runs on (sysfs: the kernel's view, which
 * inside a VM is the share the guest sees, where sysconf may report the host's whole L3), in
 * bytes; 0 when the kernel does not say. cpu_out (may be NULL) receives that CPU. */
size_t host_llc_bytes(int *cpu_out);
/* Ranks on rank p's machine (kernel), and whether they outnumber its CPUs; every rank of the
 * communicator computes the same answers. */
int comm_machine_ranks(ncclComm_t c, int p);
int comm_machine_oversubscribed(ncclComm_t c, int p);

#endif
