/* The tuner: picks the algorithm and chunk size of each collective call from the registry's
 * cost functions (registry.h, cost.h), within the algorithms TUTTI_ALGO / NCCL_ALGO allows. Pure
 * functions of their arguments, so tests can check the choices against the formulas. */
#ifndef TUTTI_TUNER_H_
#define TUTTI_TUNER_H_

#include <stdint.h>

#include "algos/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TUNER_ALL_ALGOS ((1u << ALGO_NUM) - 1)

/* Default of TUTTI_SCRATCH_MAX_BYTES: how large a communicator's scratch may grow for the
 * algorithms that keep blocks in it (rhd's reduce-scatter: half the input; Bruck: the whole
 * input or output), so the tuner weighs them up to 1 GiB calls (2 GiB for rhd). The simulator
 * assumes the same. Memory held until ncclCommDestroy; 0 keeps the scratch at its initial size
 * (the chunk), where those algorithms run only when forced, in a temporary per call. */
#define TUNER_SCRATCH_MAX_BYTES ((size_t)1 << 30)

typedef struct tuner_choice {
  algo_t algo;
  size_t chunk_bytes;
  double us; /* the estimate */
} tuner_choice_t;

/* TUTTI_TUNER_{SHM,NET,PEER}_{LAT_US,GBPS}, TUTTI_TUNER_MSG_CPU_US, TUTTI_TUNER_SHM_MSG_CPU_US
 * or the defaults (see tuner.c). */
void tuner_model_from_env(tuner_model_t *m);

/* Parses NCCL_ALGO syntax into masks[c] (bit a: algorithm a allowed for collective c):
 * "ring,tree", "^tree", "allreduce:tree,ring;broadcast:ring", case-insensitive, NCCL's names
 * accepted. NULL or "" allows everything. Returns 0, or -1 after a WARN for each unknown token
 * (the token is ignored, the rest applies). */
int tuner_parse_algo(const char *spec, uint32_t masks[COLL_NUM]);

/* Estimated time in microseconds of collective c with algorithm a on `bytes` (count * element
 * size: the whole buffer for all-reduce, broadcast, reduce; recvbuf of all-gather; sendbuf of
 * reduce-scatter): the registry entry's cost. Negative when a does not implement c or cannot
 * run this call. */
double tuner_estimate_us(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, algo_t a,
                         size_t bytes);

/* The cheapest algorithm in `mask` and its chunk size; ALGO_NUM (us < 0) when none of them
 * can run this call. A mask other than "all" (TUTTI_ALGO was given) sets may_alloc. `log`:
 * print every candidate's estimate at INFO (TUNING). */
tuner_choice_t tuner_choose(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, size_t bytes,
                            uint32_t mask, int log);

#ifdef __cplusplus
}
#endif
#endif
