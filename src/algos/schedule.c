/* Step lists: growable arrays reused between calls, plus names and a readable dump. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "algos/schedule.h"

/* Room for `need` steps in all (doubling, at least 64). 0, or -1 out of memory. */
static int sched_reserve(sched_t *s, size_t need) {
  if (need <= s->cap) return 0;
  size_t cap = s->cap ? s->cap : 64;
  while (cap < need) cap *= 2;
  step_t *p = realloc(s->steps, cap * sizeof(*p));
  if (!p) return -1;
  s->steps = p;
  s->cap = cap;
  return 0;
}

int sched_push(sched_t *s, step_t st) {
  if (sched_reserve(s, s->n + 1) != 0) return -1;
  s->steps[s->n++] = st;
  return 0;
}

int sched_append(sched_t *s, const step_t *steps, size_t n) {
  if (sched_reserve(s, s->n + n) != 0) return -1;
  memcpy(s->steps + s->n, steps, n * sizeof(*steps));
  s->n += n;
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

static const char *peer_str(int peer, char *buf, size_t len) {
  if (peer < 0) return "-";
  snprintf(buf, len, "%d", peer);
  return buf;
}

/* One line per step: index, peers, what happens to the data, source and destination
 * (buffer+offset, in elements), count and flags, e.g.
 *      1  recv 4   send 0   recv-reduce+send  src recv+0         dst -              count 4 */
static void dump_step(FILE *f, size_t i, const step_t *st) {
  char rp[16], sp[16], src[40], dst[40], kind[24];
  const char *what = (st->flags & STEP_DIRECT) ? "direct"
                     : st->recv_peer >= 0 ? (st->flags & STEP_REDUCE ? "recv-reduce" : "recv")
                     : st->send_peer >= 0 ? "send"
                     : st->flags & STEP_REDUCE ? "local-reduce" : "copy";
  snprintf(kind, sizeof(kind), "%s%s", what, st->recv_peer >= 0 && st->send_peer >= 0 ? "+send" : "");
  snprintf(src, sizeof(src), "%s+%zu", buf_name(st->src_buf), st->src_off);
  snprintf(dst, sizeof(dst), "%s+%zu", buf_name(st->dst_buf), st->dst_off);
  fprintf(f, "  %5zu  recv %-3s send %-3s %-17s src %-14s dst %-14s count %zu%s%s%s\n", i,
          peer_str(st->recv_peer, rp, sizeof(rp)), peer_str(st->send_peer, sp, sizeof(sp)), kind,
          st->src_buf == BUF_NONE ? "-" : src, (st->flags & STEP_STORE) ? dst : "-", st->count,
          st->flags & STEP_STORE ? " store" : "", st->flags & STEP_PRE ? " pre" : "",
          st->flags & STEP_POST ? " post" : "");
  if (st->flags & STEP_DIRECT)
    fprintf(f, "         (else the next %zu steps, through the FIFOs)\n", st->dst_off);
}

void sched_dump_range(const sched_t *s, size_t from, size_t to, int rank, const char *title,
                      void *file) {
  FILE *f = file ? (FILE *)file : stderr;
  fprintf(f, "# rank %d: %s (%zu steps)\n", rank, title, to - from);
  for (size_t i = from; i < to; i++) dump_step(f, i - from, &s->steps[i]);
}

void sched_dump(const sched_t *s, int rank, const char *title, void *file) {
  sched_dump_range(s, 0, s->n, rank, title, file);
}

const char *coll_name(coll_t c) {
  static const char *names[COLL_NUM] = {"AllReduce", "Broadcast",     "Reduce",
                                        "AllGather", "ReduceScatter", "AlltoAll",
                                        "Gather",    "Scatter",       "Send",
                                        "Recv"};
  return (unsigned)c < COLL_NUM ? names[c] : "?";
}

int coll_parse(const char *name) {
  char key[32];
  size_t n = 0;
  if (!name) return -1;
  if (strncasecmp(name, "nccl", 4) == 0) name += 4;
  for (; *name && n + 1 < sizeof(key); name++)
    if (*name != '_' && *name != '-') key[n++] = *name;
  key[n] = '\0';
  for (int c = 0; c < COLL_SEND; c++)
    if (strcasecmp(key, coll_name((coll_t)c)) == 0) return c;
  return -1;
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
        case ALGO_TREE: return tree_allreduce(a, col);
        case ALGO_RHD: return rhd_allreduce(a, col);
        case ALGO_RD: return rd_allreduce(a, host_of_rank, col);
        default: return -2;
      }
    case COLL_REDUCESCATTER:
      return algo == ALGO_RING ? ring_reducescatter(a, col)
             : algo == ALGO_RHD ? rhd_reducescatter(a, col) : -2;
    case COLL_ALLGATHER:
      return algo == ALGO_RING ? ring_allgather(a, col)
             : algo == ALGO_RHD ? rhd_allgather(a, col) : -2;
    case COLL_BROADCAST:
      return algo == ALGO_CHAIN ? chain_broadcast(a, col)
             : algo == ALGO_TREE ? tree_broadcast(a, col) : -2;
    case COLL_REDUCE:
      return algo == ALGO_CHAIN ? chain_reduce(a, col) : algo == ALGO_TREE ? tree_reduce(a, col) : -2;
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

size_t sched_scratch_elems(algo_t algo, const sched_args_t *a) {
  if (algo == ALGO_ONESHOT && a->coll == COLL_ALLREDUCE && a->in_place) return a->count;
  if (algo == ALGO_TREE && a->coll == COLL_REDUCE) return a->chunk ? a->chunk : 1;
  if (algo == ALGO_RHD && a->coll == COLL_REDUCESCATTER) return (size_t)(a->nranks / 2) * a->count;
  return 0;
}
