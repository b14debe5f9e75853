/* Topology: what tutti knows about the machine a rank runs on, and the placement decisions made
 * from it.
 *
 * One hwloc topology per process (the live machine, or an hwloc XML file named by
 * TUTTI_TOPO_FILE / NCCL_TOPO_FILE so that decisions can be tested for servers we do not have).
 * From it we keep three tables: GPUs (NVIDIA PCI devices, ordered by PCI bus id), NICs
 * (InfiniBand/RoCE HCAs and Ethernet interfaces) and NVLink counts between GPUs. Every question
 * the communicator asks is answered from the hwloc tree by pure functions, each decision with a
 * reason string meant for the INFO log:
 *
 *   Machine
 *    +- Package 0 -- NUMANode 0, L3, cores ...      path classes, as NCCL names them:
 *    |   +- HostBridge                                LOC same device
 *    |       +- PCIBridge (root port)                 NVL NVLink (direct, or both on NVSwitches)
 *    |           +- PCIBridge (switch upstream)       PIX through one PCIe switch
 *    |               +- PCIBridge (downstream) - GPU0 PXB through several PCIe switches
 *    |               +- PCIBridge (downstream) - NIC  PHB through a host bridge, same NUMA node
 *    +- Package 1 ...                                 SYS across sockets (between NUMA nodes)
 *
 * A PCIe switch appears in hwloc as an upstream-port bridge whose children are downstream-port
 * bridges; bridges right below a host bridge are root ports and belong to the CPU, as in NCCL
 * (which walks sysfs two levels at a time for the same reason).
 *
 * Information tutti adds to hwloc objects (exported in the XML dump, read back from XML files):
 *   "NVLinkPeers"   on a GPU's PCI device: comma-separated "BUSID*N" (N NVLinks to that GPU) or
 *                   "nvswitch*N" (N NVLinks to NVSwitches; GPUs that both reach NVSwitches are
 *                   NVL to each other). "*N" may be omitted (1 link). Filled from NVML at run
 *                   time when libnvidia-ml.so.1 can be loaded (TUTTI_TOPO_NVML=0 skips it).
 *   "LinkSpeedMbps" on a NIC's OS device: link speed in Mbit/s, read from sysfs when live.
 *
 * Thread safety: a loaded topo_t is read-only; every query may run concurrently.
 */
#ifndef TUTTI_TOPO_H_
#define TUTTI_TOPO_H_

#include <stdio.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct topo topo_t;

typedef enum {
  TOPO_PATH_LOC = 0, /* same device */
  TOPO_PATH_NVL,     /* NVLink */
  TOPO_PATH_PIX,     /* one PCIe switch */
  TOPO_PATH_PXB,     /* several PCIe switches, not through the CPU */
  TOPO_PATH_PHB,     /* through a PCIe host bridge (the CPU) of one NUMA node */
  TOPO_PATH_SYS,     /* across the inter-socket link, between NUMA nodes */
  TOPO_PATH_COUNT
} topo_path_t;

typedef enum { TOPO_NIC_IB = 0, TOPO_NIC_SOCKET = 1 } topo_nic_kind_t;

#define TOPO_BUSID_CHARS 16 /* "0000:17:00.0" */
#define TOPO_NAME_CHARS 32
#define TOPO_SET_CHARS 256 /* hwloc list syntax "0-7,16-23" */
#define TOPO_REASON_CHARS 1024

typedef struct topo_gpu_info {
  int index;                    /* GPUs are numbered in PCI bus id order (CUDA_DEVICE_ORDER) */
  char busid[TOPO_BUSID_CHARS]; /* "0000:17:00.0" */
  unsigned vendor, device;      /* PCI ids, vendor 0x10de */
  int numa;                     /* NUMA node (os index) the GPU is attached to, -1 unknown */
  int package;                  /* package (os index), -1 unknown */
  int nvlinks;                  /* NVLinks in total (to GPUs and NVSwitches) */
  int nvswitch_links;           /* of which to NVSwitches */
} topo_gpu_info_t;

typedef struct topo_nic_info {
  int index;
  char name[TOPO_NAME_CHARS]; /* "mlx5_0" (IB) or "eth0" (socket) */
  topo_nic_kind_t kind;
  char busid[TOPO_BUSID_CHARS]; /* PCI device, "" when not on PCI */
  int numa, package;            /* -1 unknown */
  long speed_mbps;              /* 0 unknown */
  int active;                   /* IB: a port is ACTIVE (hwloc Port<N>State=4); socket: 1 */
} topo_nic_info_t;

typedef struct topo_counts {
  int packages, numa_nodes, cores, pus, gpus, nics;
} topo_counts_t;

/* ---- loading ---- */
/* TUTTI_TOPO_FILE, else NCCL_TOPO_FILE, else the live machine; then, when TUTTI_TOPO_DUMP_FILE
 * is set, exports the XML there ("%h" host, "%p" pid). An NCCL-format NCCL_TOPO_FILE (<system>)
 * is ignored with a warning; an hwloc file that cannot be read is ncclInvalidUsage. */
ncclResult_t topo_load(topo_t **out);
ncclResult_t topo_load_live(topo_t **out);
ncclResult_t topo_load_xml(const char *path, topo_t **out);
/* The process-wide topology, loaded by topo_load on first use (thread-safe); never free it. */
ncclResult_t topo_get_process(const topo_t **out);
void topo_free(topo_t *t);

const char *topo_source(const topo_t *t); /* "live" or the XML path */
int topo_is_live(const topo_t *t); /* this machine (bindings apply): live, or HWLOC_THISSYSTEM=1 */
double topo_load_ms(const topo_t *t); /* discovery time */
void topo_get_counts(const topo_t *t, topo_counts_t *c);
const topo_gpu_info_t *topo_gpu(const topo_t *t, int gpu); /* NULL when out of range */
const topo_nic_info_t *topo_nic(const topo_t *t, int nic);
/* GPU index from a PCI bus id as CUDA or NVML print it ("0000:17:00.0", "00000000:17:00.0",
 * "17:00.0", any case); -1 when no such GPU. */
int topo_gpu_by_busid(const topo_t *t, const char *busid);
/* NVLinks between two GPUs (direct, or min of both NVSwitch link counts), 0 when none. */
int topo_nvlinks(const topo_t *t, int gpu_a, int gpu_b);

/* ---- paths ---- */
const char *topo_path_name(topo_path_t p);          /* "LOC" ... "SYS" */
int topo_path_parse(const char *s, topo_path_t *p); /* 0 on success */
topo_path_t topo_path_gpu_gpu(const topo_t *t, int gpu_a, int gpu_b);
topo_path_t topo_path_gpu_nic(const topo_t *t, int gpu, int nic);
/* cpuset in hwloc list syntax ("0-3,8"); NULL = the whole machine. */
topo_path_t topo_path_cpu_nic(const topo_t *t, const char *cpuset, int nic);

/* ---- decisions ---- */
typedef struct topo_nic_choice {
  int nic;          /* index for topo_nic(), -1 when none */
  topo_path_t path; /* from the GPU, or from the CPU set */
  char name[TOPO_NAME_CHARS];
  char reason[TOPO_REASON_CHARS];
} topo_nic_choice_t;
/* The NIC of a rank: closest to its GPU (gpu >= 0), else to its CPU set (cpuset NULL: the
 * calling thread's binding on the live machine, the whole machine for a file). Among NICs at
 * the same path class the fastest wins; GPUs sharing the same set of closest NICs take them in
 * turn. TUTTI_IB_HCA / NCCL_IB_HCA (IB) and TUTTI_SOCKET_IFNAME / NCCL_SOCKET_IFNAME (socket)
 * filter the candidates with NCCL's syntax: "mlx5" prefix list, "^" excludes, "=" exact,
 * ":port" ignored. Never fails: no candidate gives nic = -1 with the reason. */
void topo_choose_nic(const topo_t *t, topo_nic_kind_t kind, int gpu, const char *cpuset,
                     topo_nic_choice_t *out);

typedef struct topo_binding {
  int numa;    /* NUMA node (os index) for helper threads and staging memory, -1 none */
  int cpubind; /* 1: topo_bind_thread restricts the thread to cpuset */
  int membind; /* 1: topo_bind_thread makes the thread's allocations prefer numa */
  char cpuset[TOPO_SET_CHARS];
  char reason[TOPO_REASON_CHARS];
} topo_binding_t;
/* Where a rank's helper threads and staging memory live: its GPU's NUMA node intersected with
 * the launcher's binding (current; NULL = the calling thread's binding on the live machine, the
 * whole machine for a file). TUTTI_IGNORE_CPU_AFFINITY=1 drops the launcher's binding, as NCCL.
 * Without a GPU the launcher's binding is kept; memory follows it when it lies in one node. */
void topo_choose_binding(const topo_t *t, int gpu, const char *current, topo_binding_t *out);

/* The binding of local rank local_rank of local_size on this host: for a rank with a GPU,
 * topo_choose_binding's; for one without, when the launcher left it unbound (its CPUs are all
 * the allowed ones), its share of the machine: local_size sets spread by hwloc_distrib over
 * packages, NUMA nodes and cores, so that the host's ranks do not share CPUs while there are
 * enough; a launcher's binding is kept. Always of the calling thread's current binding. */
void topo_choose_binding_local(const topo_t *t, int gpu, int local_rank, int local_size,
                               topo_binding_t *out);
/* Where a helper thread of a thread bound to CPU cpu alone may go: the CPUs of cpu's NUMA node
 * (the whole machine without NUMA information) and all the CPUs, both as far as the process is
 * allowed them (a cgroup's cpuset), as lists ("0-3,8"); 0 on success, -1 when t is not this
 * machine or a list does not fit in len. */
int topo_helper_cpus(const topo_t *t, int cpu, char *node, char *allowed, size_t len);
/* The NUMA node (os index) holding every CPU the calling thread may run on; -1 when they span
 * several nodes, the machine has one, or t is not this machine. */
int topo_current_numa(const topo_t *t);

typedef struct topo_saved_binding {
  int has_cpu, has_mem, mem_policy;
  char cpuset[TOPO_SET_CHARS], nodeset[TOPO_SET_CHARS];
} topo_saved_binding_t;
/* Applies a binding to the calling thread (threads it creates inherit it). Never fails the
 * caller: a refused binding is a WARN; nothing is done for a topology read from a file (unless
 * HWLOC_THISSYSTEM=1 says the file describes this machine).
 * saved (may be NULL) receives what topo_restore_thread needs to undo it. */
void topo_bind_thread(const topo_t *t, const topo_binding_t *b, topo_saved_binding_t *saved);
void topo_restore_thread(const topo_t *t, const topo_saved_binding_t *saved);

/* P2P level: TUTTI_P2P_DISABLE=1 -> LOC, else TUTTI_P2P_LEVEL / NCCL_P2P_LEVEL (LOC, NVL, PIX,
 * PXB, PHB, SYS, or NCCL's legacy 0-5), else PXB (NCCL's default on Intel x86). Read each call. */
topo_path_t topo_p2p_level(char *reason, size_t len);
/* 1 when P2P between two GPUs is allowed at level (path <= level), with the reason. */
int topo_p2p_allowed(const topo_t *t, int gpu_a, int gpu_b, topo_path_t level, char *reason,
                     size_t len);

/* Where a local rank sits: its GPU (-1 none) and, for ranks without one, its NUMA node (-1). */
typedef struct topo_rank_loc {
  int gpu;
  int numa;
} topo_rank_loc_t;
/* Ring order of n local ranks: order[0] = 0, then the ring minimising first the number of SYS
 * edges, then PHB, PXB, PIX, NVL (so NVLink neighbours sit side by side and sockets are crossed
 * as little as possible); ties go to the lexicographically smallest order. Exhaustive for
 * n <= 9, greedy + 2-opt above. Deterministic: every rank computes the same ring from the same
 * inputs. Fails only for n < 1 or n > 256. */
ncclResult_t topo_ring_order(const topo_t *t, int n, const topo_rank_loc_t *locs, int *order,
                             char *reason, size_t len);
/* Global ring with the fewest host crossings: hosts in the order of their lowest rank, each
 * host's ranks in their local ring position (local_pos[r] = position of rank r in its host's
 * local ring). Pure; each host is entered and left once. */
void topo_ring_hosts(int nranks, const uint64_t *host_hash, const int *local_pos, int *order);
/* The global ring of nranks ranks: each host's ranks (equal host_hash) in the order
 * topo_ring_order gives for their locations, the hosts in the order of their lowest rank
 * (topo_ring_hosts). Pure: ranks that pass the same host_hash and locs get the same order. A
 * rank without a GPU is placed by its NUMA node alone, so for CPU-only ranks t may be NULL and
 * every rank agrees whatever its machine; with GPUs every rank must pass the same t (identical
 * hosts). Fails only for more than 256 ranks on one host. The communicator's ring order
 * (init.c, TUTTI_RING_ORDER) is this; the ring algorithms walk it (sched_args_t.ring). */
ncclResult_t topo_ring_global(const topo_t *t, int nranks, const uint64_t *host_hash,
                              const topo_rank_loc_t *locs, int *order);

/* ---- launcher placement (tutti-run --bind, topo_place.c) ---- */
typedef enum { TOPO_PLACE_CORE = 0, TOPO_PLACE_NUMA = 1 } topo_place_unit_t;
#define TOPO_PLACE_MAX_RANKS 1024
typedef struct topo_place {
  int nranks;    /* ranks placed: nranks, or 0 when they do not fit (core units) */
  int fits;      /* 1: at most one rank per unit */
  int units;     /* units (cores, or hardware threads) within the mask */
  int hwthreads; /* 1: more ranks than cores, so one hardware thread each */
  int shared;    /* ranks placed on units the busy set claims (the free ones did not suffice) */
  char (*cpuset)[TOPO_SET_CHARS]; /* [nranks] rank r's CPUs, hwloc list syntax */
  int *numa;                      /* [nranks] rank r's NUMA node (os index), -1 unknown */
  char reason[TOPO_REASON_CHARS];
} topo_place_t;
/* Places nranks ranks of one job on the CPUs of allowed (hwloc list; NULL: the calling thread's
 * binding on the live machine, the whole machine for a file), avoiding busy (CPUs other jobs
 * claimed; NULL or "" none) while the free units suffice. unit CORE: one core per rank (one
 * hardware thread when ranks outnumber cores); with more ranks than hardware threads nothing is
 * placed (fits 0, nranks 0). unit NUMA: each rank gets its node's candidate CPUs (any number of
 * ranks). spread 1: ranks balanced over the NUMA nodes in blocks of consecutive ranks; 0: pack,
 * node by node. Pure (nothing is bound); free with topo_place_free. */
ncclResult_t topo_place_ranks(const topo_t *t, const char *allowed, const char *busy, int nranks,
                              topo_place_unit_t unit, int spread, topo_place_t *out);
void topo_place_free(topo_place_t *p);

/* ---- output ---- */
/* Readable tree: packages, NUMA nodes, caches, cores, the PCI tree with GPUs and NICs, then
 * the GPU/NIC path matrix (as `nvidia-smi topo -m`). */
void topo_print(const topo_t *t, FILE *f);
/* Decisions for nranks hypothetical local ranks (rank r uses GPU r % ngpus; CPU-only ranks
 * keep the current binding): NICs, binding, ring, P2P. */
void topo_print_decisions(const topo_t *t, int nranks, FILE *f);
ncclResult_t topo_export_xml(const topo_t *t, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_TOPO_H_ */
