/* Step lists: growable arrays reused between calls, plus names and a readable dump. */
#include <stdio.h>
#include <stdlib.h>

#include "algos/schedule.h"

int sched_push(sched_t *s, step_t st) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    step_t *p = realloc(s->steps, cap * sizeof(*p));
    if (!p) return -1;
    s->steps = p;
    s->cap = cap;
  }
  s->steps[s->n++] = st;
  return 0;
}

void sched_reset(sched_t *s) { s->n = s->tagged = 0; }

void sched_free(sched_t *s) {
  free(s->steps);
  s->steps = NULL;
  s->n = s->cap = s->tagged = 0;
}

static const char *buf_name(int b) {
  return b == BUF_SEND ? "send" : b == BUF_RECV ? "recv" : b == BUF_SCRATCH ? "scratch" : "-";
}

void sched_dump(const sched_t *s, int rank, const char *title, void *file) {
  FILE *f = file ? (FILE *)file : stderr;
  fprintf(f, "# rank %d: %s (%zu steps)\n", rank, title, s->n);
  for (size_t i = 0; i < s->n; i++) {
    const step_t *st = &s->steps[i];
    fprintf(f, "  %4zu recv<-%-3d send->%-3d %s%s%s%s src=%s+%zu dst=%s+%zu count=%zu\n", i,
            st->recv_peer, st->send_peer, st->flags & STEP_REDUCE ? "R" : "-",
            st->flags & STEP_STORE ? "S" : "-", st->flags & STEP_PRE ? "p" : "-",
            st->flags & STEP_POST ? "P" : "-", buf_name(st->src_buf), st->src_off,
            buf_name(st->dst_buf), st->dst_off, st->count);
  }
}

const char *coll_name(coll_t c) {
  static const char *names[COLL_NUM] = {"AllReduce", "Broadcast",     "Reduce",
                                        "AllGather", "ReduceScatter", "AlltoAll",
                                        "Gather",    "Scatter",       "Send",
                                        "Recv"};
  return (unsigned)c < COLL_NUM ? names[c] : "?";
}

const char *algo_name(algo_t a) {
  static const char *names[ALGO_NUM] = {"ring", "oneshot", "chain", "p2p", "hier", "tree", "rhd", "rd"};
  return (unsigned)a < ALGO_NUM ? names[a] : "?";
}

int sched_build(algo_t algo, const sched_args_t *a, const int *host_of_rank, sched_t *col,
                sched_t *lanes) {
  int n = a->nranks;
  switch (a->coll) {
    case COLL_ALLREDUCE:
      switch (algo) {
        case ALGO_RING: return ring_allreduce(a, col);
        case ALGO_ONESHOT: return oneshot_allreduce(a, col);
        case ALGO_HIER: return host_of_rank ? hier_allreduce(a, host_of_rank, col) : -2;
        default: return -2;
      }
    case COLL_REDUCESCATTER: return algo == ALGO_RING ? ring_reducescatter(a, col) : -2;
    case COLL_ALLGATHER: return algo == ALGO_RING ? ring_allgather(a, col) : -2;
    case COLL_BROADCAST: return algo == ALGO_CHAIN ? chain_broadcast(a, col) : -2;
    case COLL_REDUCE: return algo == ALGO_CHAIN ? chain_reduce(a, col) : -2;
    case COLL_ALLTOALL: return algo == ALGO_P2P ? p2p_alltoall(a, lanes) : -2;
    case COLL_GATHER: return algo == ALGO_P2P ? p2p_gather(a, lanes) : -2;
    case COLL_SCATTER: return algo == ALGO_P2P ? p2p_scatter(a, lanes) : -2;
    case COLL_SEND:
      return sched_push(&lanes[a->root], (step_t){.recv_peer = -1, .send_peer = a->root,
                        .src_buf = BUF_SEND, .dst_buf = BUF_NONE, .count = a->count});
    case COLL_RECV:
      return sched_push(&lanes[n + a->root], (step_t){.recv_peer = a->root, .send_peer = -1,
                        .src_buf = BUF_NONE, .dst_buf = BUF_RECV, .flags = STEP_STORE,
                        .count = a->count});
    default: return -2;
  }
}
