/* Measured choices for heap calls on one host: the FIFOs against reading by copy (cma), and on
 * buffers the peers map, for all-gathers direct (each rank reads the peers' blocks) against push
 * (each rank writes its block into the peers' buffers), for all-to-alls the FIFOs against direct.
 * An all-to-all in place sends from a copy of its input through the FIFOs (plan.c), 2-10x its
 * out-of-place time at 64-256 KiB on a Zen 5 guest, where cma and direct exchange each pair's
 * blocks (one rank moves both ways) as fast as they move them out of place; out of place the
 * FIFOs are as fast or faster. So an all-to-all the model gives the FIFOs is measured (the model
 * is the same on every rank, whatever each rank's placement), one it gives cma or direct keeps
 * it.
 *
 * Which of the two is faster is not a property of the machine's model: on a virtual machine
 * whose two vCPUs the host sometimes places close together and sometimes far apart, the FIFO
 * ring (copies in user space through shared pages) is 1.5-2x faster than cma (the kernel's copy)
 * in one placement and 2-3x slower in the other, and the placement changes within seconds
 * (docs/perf-baseline.md); and on two AMD EPYC guests with AVX-512 the push all-gather of 1-4
 * MiB was 0.92-0.96x direct on one and 1.3-1.45x on the other (docs/perf-issue20-2.md). So for
 * a call that is repeated, where the cost model says one of a pair, the planner measures both
 * and keeps the faster, per collective and size (the power of two below the call's bytes), and
 * measures again from time to time:
 *
 *   warm-up   the model's choice, ADAPT_WARM calls (a call made once or twice keeps it); but a
 *             size whose neighbour (the nearest within 4 powers of two, on the same pair)
 *             decided at most 256 covered calls ago starts steady on the neighbour's pick
 *             instead, its first probe 16 calls on: the placement moves neighbouring sizes
 *             alike, and a large call is seldom repeated enough to be measured before it counts
 *   probe     two calls of the other candidate (the first after a switch runs slower), then
 *             one call with a peer-memory handshake (cma; on mapped buffers the kept
 *             candidate) that carries every rank's time of each candidate (the faster of its
 *             last two calls): every rank takes the slowest rank's time of each and keeps the
 *             faster candidate (ties: the FIFOs, direct)
 *   steady    the kept candidate for `period` calls, then a probe again; period grows 4x while
 *             probes keep the same candidate (8, 32, 128, 512, 1024 calls; an all-to-all that
 *             keeps the FIFOs: 32 at most, adapt.c) and is 16 again after a change
 *
 * Which pair a bucket measures follows the handshakes: a handshake that maps every rank's
 * buffers switches it to direct against push, one that can only read them by copy back to the
 * FIFOs against cma; a switch starts the bucket over. Buffers no rank can read leave the bucket
 * to the model for good, and so do buffers of a pair the call does not qualify for (TUTTI_ALGO
 * without both candidates; mapped buffers of an all-reduce, whose push is 1.2-6x direct).
 *
 * Every rank makes the same choice: the state moves only with the call sequence (collectives
 * and sizes), which is the same on every rank, and with the handshake's answers, which every
 * rank receives alike. Not with placement: whether a call is in place may differ between ranks
 * (a bucket per placement had one rank probing while another ran steady, and the call failed as
 * a mismatch). So a program that moves a size from out of place to in place keeps the bucket's
 * pick until its next probe, which then times both candidates in the new placement. Times
 * are this rank's alone (a group of one call, from the planner to the engine's end), and only
 * enter a choice through a handshake. The choice never changes results: a call qualifies only
 * where both candidates give the same bits (2 ranks: x0 (+) x1 either way; integers; float max
 * and min, which are order-free; all-gathers and all-to-alls), plain ops, host memory, 1 host, and
 * at least TUTTI_ADAPT_MIN_BYTES bytes. TUTTI_ADAPT=0: the model's choice alone.
 */
#ifndef TUTTI_ADAPT_H_
#define TUTTI_ADAPT_H_

#include "engine.h"

/* What the planner runs for a qualifying call, decided before its handshake. */
enum {
  ADAPT_NOMEM = -2,
  ADAPT_MODEL = 0,
  ADAPT_FIFO = 1,
  ADAPT_CMA = 2,
  ADAPT_DIRECT = 3,
  ADAPT_PUSH = 4
};
/* The pairs a call qualifies for (adapt_qualifies). */
enum { ADAPT_PAIR_HEAP = 1, ADAPT_PAIR_MAP = 2 };

/* A candidate's time for a decision: the faster of its last two (0: none yet), so that one call
 * slowed by something else (the first touch of new buffers' pages) decides nothing. */
static inline float adapt_best_of_two(const float t[2]) {
  return t[1] > 0 && t[1] < t[0] ? t[1] : t[0];
}

/* The smallest call (the tuner's bytes) that may qualify; SIZE_MAX with TUTTI_ADAPT=0. Callers
 * on the small-call path compare with it (kept per communicator) before asking more. */
size_t adapt_min_bytes(void);
/* The pairs (ADAPT_PAIR_*) the call (o, a) qualifies for, 0 none (the same answer on every
 * rank); peer_read: the tuner may read peers' memory by copy, peer_map: it may map it
 * (plan_topo). Cheap: asked for every large call. */
int adapt_qualifies(ncclComm_t comm, const op_ctx_t *o, const sched_args_t *a, int peer_read,
                    int peer_map);
/* For a call that qualifies for `pairs`, whose model choice is `model`: what to run
 * (ADAPT_MODEL, _FIFO, _CMA, _DIRECT or _PUSH; ADAPT_NOMEM: no memory for the table); sets
 * o->adapt (the bucket, -1 none) and, for a deciding call, o->adapt_decide and o->adapt_t (this
 * rank's times, for the handshake). */
int adapt_plan(ncclComm_t comm, op_ctx_t *o, const sched_args_t *a, int pairs, algo_t model);
/* Whether adapt_plan, asked now for this call, would run the model's choice (ADAPT_MODEL, or
 * the candidate that is the model's) without a deciding handshake: then a call repeating the
 * cached plan may take its cached steps, with adapt_plan still asked (it moves the bucket, as on
 * every rank). No side effects; adapt_plan cannot run out of memory after it said yes. */
int adapt_keeps_model(ncclComm_t comm, const op_ctx_t *o, const sched_args_t *a, int pairs,
                      algo_t model);
/* After the handshake of a call: agreed (PEER_AGREE_*), and in o->adapt_t the slowest rank's
 * times when it decides. */
void adapt_agreed(ncclComm_t comm, op_ctx_t *o, const sched_args_t *a, int agreed);
/* After the engine ran the call (a group of one) in `ns` nanoseconds. */
void adapt_record(ncclComm_t comm, const op_ctx_t *o, uint64_t ns);
/* Frees the communicator's table. */
void adapt_free(ncclComm_t comm);

/* Plain or streaming stores for a large call (adapt_stream.c). Whether streaming stores pay
 * depends on how much of the call's buffers the caches hold between calls: the rule (plan.c,
 * stream_results) guesses from the last-level cache's size, but on a virtual machine the guest
 * may not know it, and what the rank shares with its peers changes with where the host puts the
 * vCPUs (2 ranks, Zen 5 guest: out-of-place all-reduces of 8 MiB 1.02x faster with plain stores
 * in one placement and 1.47x in another; all-gathers of 16 MiB 1.08x and 1.24x;
 * docs/perf-issue20-3.md). So a repeated call the rule would stream (from TUTTI_NT_THRESHOLD;
 * never a reduction in place) is timed, alone in its group, per collective, placement,
 * algorithm and power-of-two size: streaming stores for NT_WARM calls, then plain ones 3
 * times (once where the first is 1.25x the streamed time), then the faster of the two (each the
 * faster of its last two calls) for a period that grows 4x while probes keep it (16 to 1024
 * calls; 64 after a first decision for the rule).
 * Where the rule says plain stores the buffers fit the cache, and streaming there was never
 * measured faster (an all-gather of 8 MiB: 2.3x slower), so nothing is probed. A rank decides
 * alone: stores are its own, and a streaming copy is fenced before anything says it is done
 * (copy.c), so ranks that choose differently stay correct; the same bits either way. Off with
 * TUTTI_NT_MEASURE=0 or TUTTI_ADAPT=0 (the rule alone). */
int nt_measure_enabled(void);
/* The call's choice (1: streaming stores) where `model` is the rule's; sets o->nt_bucket so that
 * nt_measure_record files its time. */
int nt_measure_plan(ncclComm_t comm, op_ctx_t *o, const sched_args_t *a, size_t bytes, int model);
void nt_measure_record(ncclComm_t comm, const op_ctx_t *o, uint64_t ns);
void nt_measure_free(ncclComm_t comm);

#endif
