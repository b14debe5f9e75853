/* memlimit.h: the memory traffic of a collective's schedule, per byte of busbw: how many bytes
 * one core must copy for every byte nccl-tests' busbw counts. With a copy rate c (GB/s, memcpy
 * of the same size measured beside it: membw), the memory system allows at most
 *
 *   busbw_limit = c / k,    k = (bytes read + bytes written by the busiest rank) / 2 / busbytes
 *
 * (a memcpy of b bytes reads b and writes b, so (read + written) / 2 is the schedule's traffic in
 * memcpy bytes), and a measured busbw is busbw / busbw_limit of that limit.
 *
 *   memlimit --coll all_reduce --nranks 2 [--esize 4] < calls
 *
 * Each input line names one call as the library ran it, "COUNT IN_PLACE ALGO" (count as NCCL
 * defines it for the collective, IN_PLACE 0 or 1, ALGO a registered name: the COLL log line's
 * "algo" at TUTTI_DEBUG=INFO); each output line is
 *
 *   COUNT IN_PLACE ALGO BYTES BUSBYTES READ WRITTEN K
 *
 * BYTES the nccl-tests size, BUSBYTES = BYTES x busbw factor (2(n-1)/n all-reduce, (n-1)/n
 * all-gather and reduce-scatter, 1 otherwise), READ and WRITTEN the busiest rank's traffic.
 *
 * The traffic is counted from the steps of every rank's schedule (sched_build, the same builder
 * the library runs), per step of b bytes:
 *   FIFO step     reads: the received piece (b) when it receives, plus src (b) when it reduces
 *                 or does not receive; writes: the outgoing FIFO slot (b) when it sends, dst (b)
 *                 when it stores; no peer at all: a copy reads b, writes b; a reduce reads 2b,
 *                 writes b; a store whose dst is its src (in place: NCCL's layouts alias the
 *                 buffers) copies nothing, as the engine skips it
 *   PEER_REDUCE   reads every rank's src (n b), writes dst (b) and, with STEP_PUSH, every other
 *                 rank's dst ((n-1) b): pieces staged in a cache-sized buffer are not counted
 *   PEER_COPY     reads b (the peer's buffer), writes b
 *   PEER_EXCHANGE reads 2b (the own src, the peer's), writes 2b (the own dst, the peer's)
 * Point-to-point lanes (alltoall, gather, scatter) count their send and receive steps alike.
 * Caches are not modelled: at sizes that fit the last-level cache the limit is the cache's, and
 * the fraction is of the measured copy rate at that size, whatever memory served it.
 */
#ifndef TUTTI_PERF_MEMLIMIT_H_
#define TUTTI_PERF_MEMLIMIT_H_

#include <stddef.h>

#include "algos/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memlimit_traffic {
  double read, written; /* bytes, the busiest rank's (the largest read + written) */
} memlimit_traffic_t;

/* The busiest rank's traffic for one call of collective c with algorithm algo on n ranks (count
 * as NCCL defines it for c, esize bytes per element); 0, or -1 when the algorithm cannot build
 * the call or memory runs out. */
int memlimit_traffic(coll_t c, algo_t algo, int n, size_t count, int in_place, size_t esize,
                     memlimit_traffic_t *worst);
/* nccl-tests' size of the call in bytes; *factor its busbw factor (busbytes = size x factor). */
double memlimit_bus_bytes(coll_t c, size_t count, int n, size_t esize, double *factor);

#ifdef __cplusplus
}
#endif
#endif
