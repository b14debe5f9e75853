/* memlimit: the memory traffic of a collective's schedule, per byte of busbw: how many bytes
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
 *                 writes b
 *   PEER_REDUCE   reads every rank's src (n b), writes dst (b) and, with STEP_PUSH, every other
 *                 rank's dst ((n-1) b): pieces staged in a cache-sized buffer are not counted
 *   PEER_COPY     reads b (the peer's buffer), writes b
 * Point-to-point lanes (alltoall, gather, scatter) count their send and receive steps alike.
 * Caches are not modelled: at sizes that fit the last-level cache the limit is the cache's, and
 * the fraction is of the measured copy rate at that size, whatever memory served it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/registry.h"

typedef struct traffic {
  double read, written;
} traffic_t;

static void step_traffic(const step_t *st, int nranks, size_t esize, traffic_t *t) {
  double b = (double)st->count * (double)esize;
  int recv = st->recv_peer >= 0, send = st->send_peer >= 0;
  switch (st->kind) {
    case STEP_PEER_REDUCE:
      t->read += nranks * b;
      t->written += b * (st->flags & STEP_PUSH ? nranks : 1);
      return;
    case STEP_PEER_COPY:
      t->read += b, t->written += b;
      return;
    case STEP_PEER_DONE:
      return;
    default:
      break;
  }
  if (!recv && !send) {
    t->read += st->flags & STEP_REDUCE ? 2 * b : b;
    t->written += b;
    return;
  }
  t->read += (recv ? b : 0) + (!recv || (st->flags & STEP_REDUCE) ? b : 0);
  t->written += (send ? b : 0) + (st->flags & STEP_STORE ? b : 0);
}

static void sched_traffic(const sched_t *s, int nranks, size_t esize, traffic_t *t) {
  for (size_t i = 0; i < s->n; i++) step_traffic(&s->steps[i], nranks, esize, t);
}

/* The busiest rank's traffic for one call; 0, or -1 when the algorithm cannot build it. */
static int call_traffic(coll_t c, algo_t algo, int n, size_t count, int in_place, size_t esize,
                        traffic_t *worst) {
  sched_t col = {0}, *lanes = calloc(2 * (size_t)n, sizeof(sched_t));
  int rc = lanes ? 0 : -1;
  memset(worst, 0, sizeof(*worst));
  for (int r = 0; r < n && rc == 0; r++) {
    sched_args_t a = {.coll = c,
                      .rank = r,
                      .nranks = n,
                      .root = 0,
                      .count = count,
                      .chunk = 131072 / esize,
                      .in_place = in_place};
    traffic_t t = {0, 0};
    rc = sched_build(algo, &a, NULL, &col, lanes);
    if (rc != 0) break;
    sched_traffic(&col, n, esize, &t);
    for (int p = 0; p < 2 * n; p++) sched_traffic(&lanes[p], n, esize, &t);
    if (t.read + t.written > worst->read + worst->written) *worst = t;
    sched_reset(&col);
    for (int p = 0; p < 2 * n; p++) sched_reset(&lanes[p]);
  }
  sched_free(&col);
  for (int p = 0; lanes && p < 2 * n; p++) sched_free(&lanes[p]);
  free(lanes);
  return rc == 0 ? 0 : -1;
}

/* nccl-tests' size and busbw factor of a call. */
static double call_bytes(coll_t c, size_t count, int n, size_t esize, double *factor) {
  double bytes = (double)count * (double)esize;
  *factor = 1.0;
  if (c == COLL_ALLREDUCE) *factor = 2.0 * (n - 1) / n;
  if (c == COLL_ALLGATHER || c == COLL_REDUCESCATTER) bytes *= n, *factor = (double)(n - 1) / n;
  return bytes;
}

static void usage(void) {
  fprintf(stderr,
          "usage: memlimit --coll C --nranks N [--esize BYTES] < lines \"COUNT IN_PLACE ALGO\"\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *coll = NULL;
  int n = 0;
  long esize = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--coll") == 0)
      coll = argv[i + 1];
    else if (strcmp(argv[i], "--nranks") == 0)
      n = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--esize") == 0)
      esize = atol(argv[i + 1]);
    else
      usage();
  }
  int c = coll ? coll_parse(coll) : -1;
  if (c < 0 || n < 1 || n > 4096 || esize < 1 || esize > 64 || argc % 2 == 0) usage();
  char line[256], name[64];
  while (fgets(line, sizeof line, stdin)) {
    size_t count;
    int in_place;
    if (sscanf(line, "%zu %d %63s", &count, &in_place, name) != 3) continue;
    algo_t a = algo_by_name(name);
    traffic_t t;
    if (a == ALGO_NUM || call_traffic((coll_t)c, a, n, count, in_place, (size_t)esize, &t) != 0) {
      fprintf(stderr, "memlimit: cannot build %s %s count %zu\n", coll, name, count);
      continue;
    }
    double factor, bytes = call_bytes((coll_t)c, count, n, (size_t)esize, &factor);
    double bus = bytes * factor;
    printf("%zu %d %s %.0f %.0f %.0f %.0f %.4f\n", count, in_place, algo_name(a), bytes, bus,
           t.read, t.written, bus > 0 ? (t.read + t.written) / 2 / bus : 0.0);
  }
  return 0;
}
