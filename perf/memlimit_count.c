/* memlimit's counting (the model: memlimit.h): the bytes each rank's steps read and write. */
#include <stdlib.h>
#include <string.h>

#include "memlimit.h"

/* Where the send buffer starts, in elements of the receive buffer, when the call is in place
 * (NCCL's in-place layouts); 0 otherwise, where the two never alias. */
typedef struct alias {
  int in_place;
  long send_at; /* send buffer element 0 = receive buffer element send_at */
} alias_t;

static alias_t call_alias(const sched_args_t *a) {
  long own = (long)a->count * a->rank;
  alias_t al = {.in_place = a->in_place, .send_at = 0};
  if (a->coll == COLL_ALLGATHER) al.send_at = own;
  if (a->coll == COLL_REDUCESCATTER) al.send_at = -own;
  return al;
}

/* 1 when the step's src and dst are the same elements (dst == src): the engine copies nothing. */
static int same_elements(const step_t *st, const alias_t *al) {
  if (st->src_buf == st->dst_buf) return st->src_off == st->dst_off;
  if (!al->in_place) return 0;
  long s = (long)st->src_off + (st->src_buf == BUF_SEND ? al->send_at : 0);
  long d = (long)st->dst_off + (st->dst_buf == BUF_SEND ? al->send_at : 0);
  return (st->src_buf == BUF_SEND || st->src_buf == BUF_RECV) &&
         (st->dst_buf == BUF_SEND || st->dst_buf == BUF_RECV) && s == d;
}

/* 1 when a plain store writes where it reads. */
static int store_in_place(const step_t *st, const alias_t *al) {
  if (st->recv_peer >= 0 || (st->flags & STEP_REDUCE) || !(st->flags & STEP_STORE)) return 0;
  return same_elements(st, al);
}

static void step_traffic(const step_t *st, int nranks, size_t esize, const alias_t *al,
                         memlimit_traffic_t *t) {
  double b = (double)st->count * (double)esize;
  int recv = st->recv_peer >= 0, send = st->send_peer >= 0, same = store_in_place(st, al);
  switch (st->kind) {
    case STEP_PEER_REDUCE:
      t->read += nranks * b;
      t->written += b * (st->flags & STEP_PUSH ? nranks : 1);
      return;
    case STEP_PEER_COPY: /* with STEP_PUSH: the own block into every rank's dst (its own too,
                          * unless it is there already: in place) */
      t->read += b;
      t->written += b * (st->flags & STEP_PUSH ? nranks - same_elements(st, al) : 1);
      return;
    case STEP_PEER_EXCHANGE: /* the own src and the peer's, into the own dst and the peer's */
      t->read += 2 * b;
      t->written += 2 * b;
      return;
    case STEP_PEER_DONE:
      return;
    default:
      break;
  }
  if (!recv && !send) {
    t->read += same ? 0 : st->flags & STEP_REDUCE ? 2 * b : b;
    t->written += same ? 0 : b;
    return;
  }
  t->read += (recv ? b : 0) + (!recv || (st->flags & STEP_REDUCE) ? b : 0);
  t->written += (send ? b : 0) + ((st->flags & STEP_STORE) && !same ? b : 0);
}

static void sched_traffic(const sched_t *s, int nranks, size_t esize, const alias_t *al,
                          memlimit_traffic_t *t) {
  for (size_t i = 0; i < s->n; i++) step_traffic(&s->steps[i], nranks, esize, al, t);
}

int memlimit_traffic(coll_t c, algo_t algo, int n, size_t count, int in_place, size_t esize,
                     memlimit_traffic_t *worst) {
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
                      .in_place = in_place,
                      .exchange = sched_exchanges(c, in_place)};
    memlimit_traffic_t t = {0, 0};
    rc = sched_build(algo, &a, NULL, &col, lanes);
    if (rc != 0) break;
    alias_t al = call_alias(&a);
    sched_traffic(&col, n, esize, &al, &t);
    for (int p = 0; p < 2 * n; p++) sched_traffic(&lanes[p], n, esize, &al, &t);
    if (t.read + t.written > worst->read + worst->written) *worst = t;
    sched_reset(&col);
    for (int p = 0; p < 2 * n; p++) sched_reset(&lanes[p]);
  }
  sched_free(&col);
  for (int p = 0; lanes && p < 2 * n; p++) sched_free(&lanes[p]);
  free(lanes);
  return rc == 0 ? 0 : -1;
}

double memlimit_bus_bytes(coll_t c, size_t count, int n, size_t esize, double *factor) {
  double bytes = (double)count * (double)esize;
  *factor = 1.0;
  if (c == COLL_ALLREDUCE) *factor = 2.0 * (n - 1) / n;
  if (c == COLL_ALLGATHER || c == COLL_REDUCESCATTER) bytes *= n, *factor = (double)(n - 1) / n;
  return bytes;
}
