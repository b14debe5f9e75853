/* Step lists: growable arrays reused between calls, plus collective names and a readable dump. */
#include "algos/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
  if (n == 0) return 0; /* an empty schedule (count 0) may have no steps array: no memcpy(NULL) */
  if (sched_reserve(s, s->n + n) != 0) return -1;
  memcpy(s->steps + s->n, steps, n * sizeof(*steps));
  s->n += n;
  return 0;
}

void sched_reset(sched_t *s) {
  s->n = s->tagged = 0;
}

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
  static const char *kinds[] = {"",          "peer-reduce",   "peer-copy",
                                "peer-done", "peer-exchange", "swap"};
  const char *what = st->kind != STEP_FIFO     ? kinds[st->kind % 6]
                     : st->recv_peer >= 0      ? (st->flags & STEP_REDUCE ? "recv-reduce" : "recv")
                     : st->send_peer >= 0      ? "send"
                     : st->flags & STEP_REDUCE ? "local-reduce"
                                               : "copy";
  snprintf(kind, sizeof(kind), "%s%s", what,
           st->recv_peer >= 0 && st->send_peer >= 0 && st->kind != STEP_FIFO_SWAP ? "+send" : "");
  snprintf(src, sizeof(src), "%s+%zu", buf_name(st->src_buf), st->src_off);
  snprintf(dst, sizeof(dst), "%s+%zu", buf_name(st->dst_buf), st->dst_off);
  /* a peer step's "recv" is the rank whose memory it reads (PEER_REDUCE: the first operand) */
  fprintf(f, "  %5zu  recv %-3s send %-3s %-17s src %-14s dst %-14s count %zu%s%s%s%s%s%s\n", i,
          peer_str(st->recv_peer, rp, sizeof(rp)), peer_str(st->send_peer, sp, sizeof(sp)), kind,
          st->src_buf == BUF_NONE ? "-" : src, (st->flags & STEP_STORE) ? dst : "-", st->count,
          st->flags & STEP_STORE ? " store" : "", st->flags & STEP_PRE ? " pre" : "",
          st->flags & STEP_POST ? " post" : "",
          st->flags & STEP_AFTER_PROGRESS ? " after-progress" : "",
          st->flags & STEP_WHOLE ? " whole" : "", st->flags & STEP_SWAP ? " swap" : "");
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
  static const char *names[COLL_NUM] = {"AllReduce",     "Broadcast", "Reduce", "AllGather",
                                        "ReduceScatter", "AlltoAll",  "Gather", "Scatter",
                                        "Send",          "Recv"};
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
