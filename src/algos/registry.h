/* The algorithm registry: one entry per algorithm, the one list the planner, the tuner,
 * tutti-sched, tutti-sim and the tests iterate.
 *
 * An entry names the algorithm (what TUTTI_ALGO / NCCL_ALGO take), gives its schedule builder
 * per collective (NULL: not implemented), its cost function (the tuner's estimate, in
 * microseconds; negative where it cannot run this call), its scratch needs and its
 * preconditions. Adding an algorithm is one file in src/algos/ that defines its
 * `const algo_desc_t algo_<name>` (opening with its picture, cost and invariants), one
 * X(...) line in TUTTI_ALGOS below, one line in CMakeLists.txt, and its tests
 * (docs/adding-an-algorithm.md).
 */
#ifndef TUTTI_REGISTRY_H_
#define TUTTI_REGISTRY_H_

#include "algos/cost.h"
#include "algos/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every algorithm, in tie-break order (the tuner prefers the earlier of two equal estimates).
 * X(ENUM, name): ALGO_<ENUM> is its algo_t, algo_<name> its entry. */
#define TUTTI_ALGOS(X) \
  X(RING, ring)        \
  X(ONESHOT, oneshot)  \
  X(CHAIN, chain)      \
  X(P2P, p2p)          \
  X(HIER, hier)        \
  X(TREE, tree)        \
  X(RHD, rhd)          \
  X(RD, rd)            \
  X(MRING, mring)      \
  X(BRUCK, bruck)      \
  X(DIRECT, direct)    \
  X(CMA, cma)          \
  X(PUSH, push)        \
  X(CBLOCK, cblock)    \
  X(CTOPK, ctopk)      \
  X(CPSGD, cpsgd)      \
  X(CHIER, chier)

typedef enum {
#define TUTTI_ALGO_ENUM(e, name) ALGO_##e,
  TUTTI_ALGOS(TUTTI_ALGO_ENUM)
#undef TUTTI_ALGO_ENUM
      ALGO_NUM
} algo_t;

/* Builds rank a->rank's steps: collective algorithms append to `col`, point-to-point ones to
 * lanes[0 .. 2*nranks) (lanes[p] sends to p, lanes[n + p] receives from p). Returns 0, -1 out
 * of memory, -2 when the algorithm cannot build this call (e.g. needs a power of two). */
typedef int (*algo_build_fn)(const sched_args_t *a, sched_t *col, sched_t *lanes);

/* Defines `wrapper`, an algo_build_fn that appends to col with fn(a, col). */
#define ALGO_COL_BUILDER(wrapper, fn)                                       \
  static int wrapper(const sched_args_t *a, sched_t *col, sched_t *lanes) { \
    (void)lanes;                                                            \
    return fn(a, col);                                                      \
  }

enum {
  ALGO_NEEDS_PEER_MEMORY = 1, /* peer steps: every rank maps every other rank's buffers */
  ALGO_USES_LANES = 2,        /* builds into the point-to-point lanes, not `col` */
  ALGO_NEEDS_PLAIN_OP = 4,    /* no PreMulSum (its reductions read each input once, unscaled) */
  ALGO_NEEDS_PEER_READ = 8,   /* peer steps that read every other rank's buffers by copy
                                 (transport mem_read) where they cannot be mapped */
  ALGO_RUNS_ON_DEVICE = 16,   /* only peer steps and local copies: runs on device buffers in
                                 place where they can be mapped (cuda_p2p: CUDA IPC) */
  ALGO_LOSSY = 32, /* a compressed all-reduce (compressed.c): applies only to calls that carry a
                      compressor (tuner_topo_t.compress), never to an exact one; its schedule
                      is the wire traffic in fp32 units, run by src/compress, not the engine */
};
/* Either kind of peer steps: the call needs the peer-memory handshake. */
#define ALGO_PEER_STEPS (ALGO_NEEDS_PEER_MEMORY | ALGO_NEEDS_PEER_READ)

typedef struct algo_desc {
  const char *name;    /* TUTTI_ALGO / NCCL_ALGO name, tutti-sim -a */
  const char *summary; /* one line: what it is, where it wins */
  algo_build_fn build[COLL_NUM];
  /* The tuner's estimate for collective c of `bytes` (count x element size: the whole buffer
   * for all-reduce, broadcast, reduce; recvbuf of all-gather; sendbuf of reduce-scatter), or
   * negative when the algorithm cannot run it here (its preconditions on the topology and the
   * size: a power of two, one slot, several hosts...). */
  double (*cost_us)(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double bytes);
  /* Elements of BUF_SCRATCH the schedule for `a` uses (NULL: none). */
  size_t (*scratch_elems)(const sched_args_t *a);
  /* Bytes per round (NULL: the communicator's chunk, t->chunk_bytes). */
  size_t (*chunk_bytes)(const tuner_topo_t *t, coll_t c, size_t bytes);
  /* Elements of a->count one pipeline round takes (NULL or 0: no uniform rounds): taking that
   * many from count takes one whole round out of every rank's schedule and changes nothing
   * else (tutti-sim's rounds method simulates a few rounds and extends the period it finds). */
  size_t (*round_elems)(const sched_args_t *a);
  unsigned needs; /* ALGO_NEEDS_* / ALGO_USES_* */
} algo_desc_t;

/* The entries, defined by the algorithm files. */
#define TUTTI_ALGO_EXTERN(e, name) extern const algo_desc_t algo_##name;
TUTTI_ALGOS(TUTTI_ALGO_EXTERN)
#undef TUTTI_ALGO_EXTERN

/* The table, indexed by algo_t (registry.c). */
extern const algo_desc_t *const algo_registry[ALGO_NUM];
/* The entry of `a` (NULL when out of range). */
static inline const algo_desc_t *algo_get(algo_t a) {
  return (unsigned)a < ALGO_NUM ? algo_registry[a] : NULL;
}
const char *algo_name(algo_t a);
/* algo_t of `name` (case-insensitive), or ALGO_NUM. */
algo_t algo_by_name(const char *name);
/* 1 when `a` has a builder for collective c. */
int algo_implements(algo_t a, coll_t c);
/* Bits (1 << algo_t) of the algorithms whose needs include any flag of `needs` (ALGO_NEEDS_*,
 * ALGO_USES_*); of those with a builder for collective c. */
uint32_t algos_needing(unsigned needs);
uint32_t algos_building(coll_t c);

/* Builds rank a->rank's schedule of collective a->coll with algorithm `algo` (the one entry
 * point the planner, the simulator, tutti-sched and the tests share); host_of_rank, when not
 * NULL, replaces a->host_of_rank. Returns 0, -1 out of
 * memory, -2 when the algorithm does not implement the collective or cannot build this call, -3
 * when the builder broke a rule of the steps (a PreMulSum with STEP_SWAP | STEP_PRE: the kernels
 * scale only the first operand, schedule.h). */
int sched_build(algo_t algo, const sched_args_t *a, const int *host_of_rank, sched_t *col,
                sched_t *lanes);
/* Elements of BUF_SCRATCH the schedule of `algo` for `a` uses (0 for most). */
size_t sched_scratch_elems(algo_t algo, const sched_args_t *a);

/* ---- the builders (used by the entries; the tests call some directly) ---- */
int ring_allreduce(const sched_args_t *a, sched_t *s);
int ring_reducescatter(const sched_args_t *a, sched_t *s);
int ring_allgather(const sched_args_t *a, sched_t *s);
int oneshot_allreduce(const sched_args_t *a, sched_t *s);
/* Peer-step schedules (direct.c), shared by direct (mapped) and cma (read by copy, with push's
 * all-reduce): their builders and the .build table of an algorithm made of them, `ar` its
 * all-reduce's builder. */
int direct_build_allreduce(const sched_args_t *a, sched_t *col, sched_t *lanes);
int direct_build_reducescatter(const sched_args_t *a, sched_t *col, sched_t *lanes);
int direct_build_allgather(const sched_args_t *a, sched_t *col, sched_t *lanes);
int direct_build_broadcast(const sched_args_t *a, sched_t *col, sched_t *lanes);
int direct_build_reduce(const sched_args_t *a, sched_t *col, sched_t *lanes);
int direct_build_gather(const sched_args_t *a, sched_t *col, sched_t *lanes);
int direct_build_scatter(const sched_args_t *a, sched_t *col, sched_t *lanes);
int direct_build_alltoall(const sched_args_t *a, sched_t *col, sched_t *lanes);
#define DIRECT_BUILD_TABLE(ar)                                                            \
  {                                                                                       \
    [COLL_ALLREDUCE] = (ar), [COLL_REDUCESCATTER] = direct_build_reducescatter,           \
    [COLL_ALLGATHER] = direct_build_allgather, [COLL_BROADCAST] = direct_build_broadcast, \
    [COLL_REDUCE] = direct_build_reduce, [COLL_GATHER] = direct_build_gather,             \
    [COLL_SCATTER] = direct_build_scatter, [COLL_ALLTOALL] = direct_build_alltoall        \
  }
/* Bytes the busiest rank of these schedules reads from its peers for S bytes (the tuner's S of
 * collective c), the cost models' volume for direct and cma. */
double direct_moved(coll_t c, int n, double S);
/* The all-reduce that pushes its results (push.c), shared by push (mapped) and cma. */
int push_allreduce(const sched_args_t *a, sched_t *s);
/* Hierarchical all-reduce (hier.c): host_of_rank[r] names rank r's host (any integer label). */
int hier_allreduce(const sched_args_t *a, const int *host_of_rank, sched_t *s);
/* 1 when hier_allreduce applies: at least 2 hosts, the same number of ranks on each. */
int hier_applicable(const int *host_of_rank, int nranks);
int chain_broadcast(const sched_args_t *a, sched_t *s);
int chain_reduce(const sched_args_t *a, sched_t *s);
/* Double binary tree all-reduce, tree reduce and broadcast (tree.c); depth = floor(log2 n). */
int tree_allreduce(const sched_args_t *a, sched_t *s);
int tree_reduce(const sched_args_t *a, sched_t *s);
int tree_broadcast(const sched_args_t *a, sched_t *s);
int tree_depth(int nranks);
/* Recursive halving-doubling and recursive doubling (rhd.c); the reduce-scatter and all-gather
 * return -2 unless nranks is a power of two. rhd_log2 = floor(log2 n). */
int rhd_allreduce(const sched_args_t *a, sched_t *s);
/* host_of_rank (NULL: none): fold each host's ranks into its first rank around rd across hosts. */
int rd_allreduce(const sched_args_t *a, const int *host_of_rank, sched_t *s);
int rhd_reducescatter(const sched_args_t *a, sched_t *s);
int rhd_allgather(const sched_args_t *a, sched_t *s);
int rhd_log2(int nranks);
/* Multi-channel ring all-reduce (mring.c): C rings leaving each host through different ranks. */
int mring_allreduce(const sched_args_t *a, sched_t *s);
/* Bruck all-gather and reduce-scatter (bruck.c): ceil(log2 n) steps for any n, BUF_SCRATCH of
 * n * count elements. */
int bruck_allgather(const sched_args_t *a, sched_t *s);
int bruck_reducescatter(const sched_args_t *a, sched_t *s);
/* Compressed all-reduces' wire traffic (compressed.c): -2 without a compressor of their kind. */
int cblock_allreduce(const sched_args_t *a, sched_t *s);
int ctopk_allreduce(const sched_args_t *a, sched_t *s);
int cpsgd_allreduce(const sched_args_t *a, sched_t *s);
int chier_allreduce(const sched_args_t *a, sched_t *s);
/* Point-to-point based: one lane per peer and direction; lanes[p] sends, lanes[n + p] receives. */
int p2p_alltoall(const sched_args_t *a, sched_t *lanes);
int p2p_gather(const sched_args_t *a, sched_t *lanes);
int p2p_scatter(const sched_args_t *a, sched_t *lanes);
int p2p_broadcast(const sched_args_t *a, sched_t *lanes);

#ifdef __cplusplus
}
#endif
#endif
