/* tutti-sim's model: a cluster, the schedules of src/algos (through sched_build) and a
 * discrete-event simulation of them. See des.c for the model and symmetry.c for the fast method
 * that reaches tens of thousands of ranks. Times are in seconds, sizes in bytes, bandwidths in
 * bytes per second.
 */
#ifndef TUTTI_SIM_H_
#define TUTTI_SIM_H_

#include <stddef.h>
#include <stdint.h>

#include "algos/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The modelled cluster: `nodes` hosts of `ppn` ranks each, ranks placed in blocks (rank r on
 * node r / ppn, as tutti-run --hosts places them). */
typedef struct sim_cluster {
  int nodes, ppn;
  double intra_bw, intra_lat;    /* shared memory: per connection (a copy by the sending rank) */
  double inter_bw, inter_lat;    /* network: per NIC and direction, shared by the node's ranks */
  int nics;                      /* NICs per node; local rank l uses NIC l % nics */
  size_t inter_burst;            /* token bucket of each NIC side (0: a plain rate), bytes */
  double inter_peak_bw;          /* rate while the bucket has tokens */
  double oversub;                /* fabric oversubscription: leaf uplinks carry
                                    leaf_nodes * nics * inter_bw / oversub (1: non-blocking) */
  int leaf_nodes;                /* nodes per leaf switch (only used when oversub > 1) */
  double reduce_bw;              /* reduction speed (bytes of output per second; 0: free) */
  double overhead;               /* engine time per piece (seconds) */
  int cpus;                      /* CPUs per machine (0: a core per rank, no CPU model) */
  int machine_nodes;             /* nodes per machine (containers, namespaces of one kernel) */
  double msg_cpu;                /* CPU time of one piece sent across nodes (seconds; cpus > 0) */
  double intra_msg_cpu;          /* the same through shared memory (negative: msg_cpu) */
  size_t slot_intra, slot_inter; /* FIFO slot bytes: shm, tcp (TUTTI_SHM/TCP_SLOT_BYTES); all
                                    connections use the smaller of those in use */
  int fifo_intra, fifo_inter;    /* FIFO slots: shm, tcp (TUTTI_SHM_NSLOTS, TUTTI_TCP_NSLOTS) */
  size_t rdv_intra;              /* shm: whole steps (the p2p lanes' blocks) of at least this
                                    many bytes go by rendezvous, one piece (TUTTI_SHM_RDV_MIN;
                                    0: none) */
  double codec_ns;               /* compression CPU time per element and pass (nanoseconds) */
  const tuner_compress_t *compress; /* the calls' compressor (tutti-sim --compress; NULL: exact
                                       calls): the lossy entries apply, fp32 only */
} sim_cluster_t;

void sim_cluster_defaults(sim_cluster_t *c);
/* CPU time of one piece sent through shared memory (intra_msg_cpu, or msg_cpu if unset). */
static inline double sim_intra_msg_cpu(const sim_cluster_t *c) {
  return c->intra_msg_cpu >= 0 ? c->intra_msg_cpu : c->msg_cpu;
}
/* Sets one key ("nodes", "ppn", "intra-gbps", "intra-lat-us", "inter-gbps", "inter-lat-us",
 * "nics", "inter-burst", "inter-peak-gbps", "oversub", "leaf-nodes", "reduce-gbps",
 * "overhead-us", "cpus", "machine-nodes", "msg-cpu-us", "intra-msg-cpu-us", "slot-intra",
 * "slot-inter", "fifo-intra", "fifo-inter", "rdv-intra", "codec-ns"). Returns 0, or -1 (unknown key
 * or bad value). */
int sim_cluster_set(sim_cluster_t *c, const char *key, const char *value);
/* Reads "key value" or "key = value" lines ('#' comments). Returns 0 or -1 (err says why). */
int sim_cluster_load(sim_cluster_t *c, const char *path, char *err, size_t errlen);
/* Checks the values; returns 0 or -1 (err says why). */
int sim_cluster_check(const sim_cluster_t *c, char *err, size_t errlen);
void sim_cluster_print(const sim_cluster_t *c, void *file);
static inline int sim_nranks(const sim_cluster_t *c) {
  return c->nodes * c->ppn;
}

/* How the collective is simulated. FULL: every rank; FAST: a few pipeline rounds extended by
 * their period (rounds.c: "rounds/K") or one representative rank per class of a symmetry of
 * the schedule (symmetry.c); AUTO: FAST where one applies, else FULL. */
typedef enum { SIM_AUTO = 0, SIM_FULL, SIM_FAST } sim_method_t;

typedef struct sim_result {
  algo_t algo;     /* the algorithm simulated (the tuner's choice for SIM_ALGO_AUTO) */
  double time;     /* seconds until the last rank finished */
  char method[32]; /* "full", "shift/8", "xor/8" (+ "~" when block sizes differ by 1) */
  int simulated;   /* ranks simulated */
  uint64_t events; /* events processed */
  uint64_t steps;  /* steps simulated */
  char msg[160];   /* why it failed */
} sim_result_t;

#define SIM_ALGO_AUTO ALGO_NUM /* the library's automatic choice (its tuner) */

/* Simulates one collective of `bytes` (nccl-tests' size) of elements of `esize` bytes with
 * algorithm `algo` (an algo_t or SIM_ALGO_AUTO), with the chunk the library's tuner gives it.
 * Returns 0; -2 when the algorithm does not implement the collective or does not apply here
 * (the tuner would run another one, e.g. oneshot above its size limit); -1 on other failures
 * (too big, out of memory): r->msg says why. */
int sim_run(const sim_cluster_t *c, coll_t coll, int algo, size_t bytes, int esize,
            sim_method_t method, size_t max_steps, sim_result_t *r);
/* The tuner's algorithm and chunk for this call on this cluster (its model: the cluster's
 * latencies and bandwidths). Returns 0, or -2 when a forced `algo` does not apply. */
int sim_choose(const sim_cluster_t *c, coll_t coll, int algo, size_t bytes, algo_t *chosen,
               size_t *chunk_bytes);

/* The slot every connection uses (the smallest of the transports in use, as the library). */
size_t sim_comm_slot(const sim_cluster_t *c);

/* nccl-tests' sizes: count per sched_args for `bytes`, and the busbw factor. */
size_t sim_count_for(coll_t coll, size_t bytes, int esize, int nranks);
double sim_bus_factor(coll_t coll, int nranks);

/* ---- internals shared by des.c and symmetry.c ---- */
typedef struct sim_step {
  int32_t recv, send; /* peers (real ranks), -1 none */
  uint32_t count;     /* elements */
  uint32_t flags;     /* STEP_*, as SIM_FLAGS keeps them */
} sim_step_t;
/* The flags that change a step's time: the operand order (STEP_SWAP) does not, and ranks whose
 * steps differ only in it are alike to the symmetry search. */
#define SIM_FLAGS(f) ((uint32_t)(f) & ~(uint32_t)STEP_SWAP)

typedef struct sim_lane { /* one sequential lane of one simulated rank */
  sim_step_t *steps;
  size_t n;
  int rank;
} sim_lane_t;

enum { SYM_NONE = 0, SYM_SHIFT, SYM_XOR };
typedef struct sim_sym {
  int kind, period, n;
  int approx; /* block sizes differ by one element between a class's ranks */
} sim_sym_t;

/* rep(x): the representative of rank x's class; map(x, y): the symmetry taking x to rep(x),
 * applied to y. */
static inline int sym_rep(const sim_sym_t *s, int x) {
  return s->kind == SYM_SHIFT ? x % s->period : s->kind == SYM_XOR ? (x & (s->period - 1)) : x;
}
static inline int sym_map(const sim_sym_t *s, int x, int y) {
  if (s->kind == SYM_SHIFT) return ((y - (x - x % s->period)) % s->n + s->n) % s->n;
  if (s->kind == SYM_XOR) return y ^ (x & ~(s->period - 1));
  return y;
}

/* symmetry.c: the lanes of the ranks to simulate and the symmetry that stands for the others.
 * Returns 0, -2 (algorithm does not implement it), -1 (msg says why). */
int sim_build(const sim_cluster_t *c, const sched_args_t *a, algo_t algo, sim_method_t method,
              size_t max_steps, sim_lane_t **lanes, int *nlanes, sim_sym_t *sym, int *approx,
              char *msg, size_t msglen);
void sim_lanes_free(sim_lane_t *lanes, int nlanes);
/* peer.c: the lanes of an algorithm with peer steps (every rank, peer reads as messages).
 * Returns 0, -2 (not implemented), -1 (out of memory). */
int sim_build_peer(const sim_cluster_t *c, const sched_args_t *a, algo_t algo, sim_lane_t **lanes,
                   int *nlanes);

/* des.c: runs the lanes; returns 0 or -1 (msg says why). */
int sim_des(const sim_cluster_t *c, const sim_lane_t *lanes, int nlanes, const sim_sym_t *sym,
            int esize, sim_result_t *r);
/* The same, also recording when each step of lane i finished in done[i][step] (done[i] NULL:
 * not recorded). */
int sim_des_trace(const sim_cluster_t *c, const sim_lane_t *lanes, int nlanes, const sim_sym_t *sym,
                  int esize, double *const *done, sim_result_t *r);
/* rounds.c: the rounds method for algorithms with uniform pipeline rounds (algo_desc_t's
 * round_elems): simulates the call with most middle rounds taken out, checks that every step
 * of every lane repeats, a round later, the same period later, and extends that period over the
 * rounds taken out. Returns 0 (r filled), 1 (the method does not apply or found no period:
 * use another), -1 (r->msg says why). */
int sim_run_rounds(const sim_cluster_t *c, const sched_args_t *a, algo_t algo, int esize,
                   size_t max_steps, sim_result_t *r);

#ifdef __cplusplus
}
#endif
#endif
