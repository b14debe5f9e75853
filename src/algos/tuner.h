/* The tuner: picks the algorithm and chunk size of each collective call from a cost model
 * (tuner.c), within the algorithms TUTTI_ALGO / NCCL_ALGO allows. Pure functions of their
 * arguments, so tests can check the choices against the formulas. */
#ifndef TUTTI_TUNER_H_
#define TUTTI_TUNER_H_

#include "algos/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TUNER_ALL_ALGOS ((1u << ALGO_NUM) - 1)

typedef struct tuner_level { /* one transport level: a hop's latency and a link's bandwidth */
  double lat_us, gbps;       /* gbps: GB/s (1e9 bytes per second) */
} tuner_level_t;

typedef struct tuner_model {
  tuner_level_t shm, net; /* inside a host, across hosts */
  double msg_cpu_us;      /* CPU time of one message across hosts (send, kernel, wake-up, receive) */
  double shm_msg_cpu_us;  /* the same for a message through shared memory */
} tuner_model_t;

typedef struct tuner_topo { /* what the communicator knows */
  int nranks, nhosts, local_size, hier_ok; /* local_size: of the largest host */
  int machine_ranks, ncpu; /* the machine (kernel) with the most ranks per CPU: its ranks and
                              CPUs; 0: unknown. All ranks must see the same topology. */
  int host_blocks;         /* 1: rank r is on host r / local_size, every host alike */
  size_t slot_bytes, chunk_bytes, scratch_bytes, oneshot_max_bytes;
  int may_alloc; /* 1: a schedule may use more scratch than scratch_bytes (a temporary) */
} tuner_topo_t;

typedef struct tuner_choice {
  algo_t algo;
  size_t chunk_bytes;
  double us; /* the estimate */
} tuner_choice_t;

/* TUTTI_TUNER_{SHM,NET}_{LAT_US,GBPS}, TUTTI_TUNER_MSG_CPU_US, TUTTI_TUNER_SHM_MSG_CPU_US or the
 * defaults (see tuner.c). */
void tuner_model_from_env(tuner_model_t *m);

/* Parses NCCL_ALGO syntax into masks[c] (bit a: algorithm a allowed for collective c):
 * "ring,tree", "^tree", "allreduce:tree,ring;broadcast:ring", case-insensitive, NCCL's names
 * accepted. NULL or "" allows everything. Returns 0, or -1 after a WARN for each unknown token
 * (the token is ignored, the rest applies). */
int tuner_parse_algo(const char *spec, uint32_t masks[COLL_NUM]);

/* Estimated time in microseconds of collective c with algorithm a on `bytes` (count * element
 * size: the whole buffer for all-reduce, broadcast, reduce; recvbuf of all-gather; sendbuf of
 * reduce-scatter). Negative when a does not implement c or cannot run this call. */
double tuner_estimate_us(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, algo_t a,
                         size_t bytes);

/* The cheapest algorithm in `mask` (when none of them applies: the cheapest of all, with an
 * INFO), and its chunk size. A mask other than "all" (TUTTI_ALGO was given) sets may_alloc. `log`:
 * print every candidate's estimate at INFO (TUNING). */
tuner_choice_t tuner_choose(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, size_t bytes,
                            uint32_t mask, int log);

#ifdef __cplusplus
}
#endif
#endif
