/* The reference interpreter of steps (interp.h). Simple rather than fast: FIFOs are linked
 * lists of malloc'd pieces. */
#include "algos/interp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct piece {
  struct piece *next;
  size_t n;
  int64_t v[];
} piece_t;

typedef struct fifo {
  piece_t *head, *tail;
  size_t count;
} fifo_t;

typedef struct lane_state {
  size_t cur, pos;
  size_t sent; /* FIFO_SWAP: elements sent (pos: received) */
} lane_state_t;

typedef struct interp {
  interp_rank_t *ranks;
  int n;
  const interp_opts_t *o;
  fifo_t *fifo;        /* [src * n + dst] */
  lane_state_t **lane; /* [rank][lane] */
  int *reduced, *done; /* per rank: PEER_REDUCE final, PEER_DONE reached */
  char *err;
  size_t errlen;
} interp_t;

static int fail(interp_t *in, const char *fmt, int a, int b) {
  snprintf(in->err, in->errlen, fmt, a, b);
  return -1;
}

/* x[off + i] for i < n, if it lies inside buffer b of rank r; NULL otherwise. */
static int64_t *at(const interp_t *in, int r, int b, size_t off, size_t n) {
  static int64_t nothing; /* an empty range is inside any buffer */
  const interp_rank_t *rk = &in->ranks[r];
  if (n == 0) return &nothing;
  if (b < 0 || b > 3 || !rk->buf[b] || off > rk->len[b] || n > rk->len[b] - off) return NULL;
  return rk->buf[b] + off;
}

static int64_t pre(const interp_t *in, const step_t *st, int64_t x) {
  return (st->flags & STEP_PRE) ? x * in->o->pre_mul : x;
}

static void fifo_put(fifo_t *q, piece_t *p) {
  p->next = NULL;
  if (q->tail)
    q->tail->next = p;
  else
    q->head = p;
  q->tail = p, q->count++;
}

static void fifo_drop_head(fifo_t *q) {
  piece_t *p = q->head;
  q->head = p->next, q->count--, free(p);
  if (!q->head) q->tail = NULL;
}

/* A FIFO_SWAP step: sends what the FIFO takes, then receives the pieces already sent, each into
 * the place it was sent from (1 moved, 0 blocked, -1 error). */
static int swap_pieces(interp_t *in, int me, const step_t *st, lane_state_t *ls) {
  size_t slot = in->o->slot ? in->o->slot : st->count;
  fifo_t *iq = &in->fifo[st->recv_peer * in->n + me], *oq = &in->fifo[me * in->n + st->send_peer];
  int moved = 0;
  while (ls->sent < st->count && !(in->o->depth && oq->count >= in->o->depth)) {
    size_t n = st->count - ls->sent < slot ? st->count - ls->sent : slot;
    int64_t *src = at(in, me, st->src_buf, st->src_off + ls->sent, n);
    piece_t *out = src ? malloc(sizeof(piece_t) + n * 8) : NULL;
    if (!out)
      return fail(in, "rank %d: step %d reads outside its buffers (or no memory)", me,
                  (int)ls->cur);
    memcpy(out->v, src, n * 8);
    out->n = n, ls->sent += n, moved = 1;
    fifo_put(oq, out);
  }
  while (ls->pos < ls->sent && iq->head) {
    size_t n = st->count - ls->pos < slot ? st->count - ls->pos : slot;
    int64_t *dst = at(in, me, st->dst_buf, st->dst_off + ls->pos, n);
    if (!dst) return fail(in, "rank %d: step %d writes outside its buffers", me, (int)ls->cur);
    if (iq->head->n != n)
      return fail(in, "rank %d got a piece of the wrong size at step %d", me, (int)ls->cur);
    memcpy(dst, iq->head->v, n * 8);
    fifo_drop_head(iq);
    ls->pos += n, moved = 1;
  }
  return moved;
}

/* One piece of a FIFO step: 1 ran, 0 blocked, -1 error. */
static int fifo_piece(interp_t *in, int me, const step_t *st, lane_state_t *ls) {
  size_t left = st->count - ls->pos, n = left;
  int has_peer = st->recv_peer >= 0 || st->send_peer >= 0;
  if (has_peer && in->o->slot && n > in->o->slot) n = in->o->slot;
  fifo_t *iq = st->recv_peer >= 0 ? &in->fifo[st->recv_peer * in->n + me] : NULL;
  fifo_t *oq = st->send_peer >= 0 ? &in->fifo[me * in->n + st->send_peer] : NULL;
  if ((iq && !iq->head) || (oq && in->o->depth && oq->count >= in->o->depth)) return 0;
  int needs_src = st->src_buf != BUF_NONE && (!iq || (st->flags & STEP_REDUCE));
  int64_t *src = needs_src ? at(in, me, st->src_buf, st->src_off + ls->pos, n) : NULL;
  int64_t *dst = (st->flags & STEP_STORE) || (!has_peer && (st->flags & STEP_REDUCE))
                     ? at(in, me, st->dst_buf, st->dst_off + ls->pos, n)
                     : NULL;
  if ((needs_src && !src) || (!dst && ((st->flags & STEP_STORE) || !has_peer)))
    return fail(in, "rank %d: step %d reads or writes outside its buffers", me, (int)ls->cur);
  piece_t *got = iq ? iq->head : NULL, *out = oq ? malloc(sizeof(piece_t) + n * 8) : NULL;
  if (got && got->n != n)
    return fail(in, "rank %d got a piece of the wrong size at step %d", me, (int)ls->cur);
  if (oq && !out) return fail(in, "rank %d: out of memory at step %d", me, (int)ls->cur);
  int64_t post = (st->flags & STEP_POST) ? in->o->post_add : 0;
  for (size_t i = 0; i < n; i++) {
    int64_t v, stored;
    if (got && (st->flags & STEP_REDUCE))
      v = stored = pre(in, st, src[i]) + got->v[i] + post;
    else if (got)
      v = got->v[i], stored = got->v[i] + post;
    else if (!oq && (st->flags & STEP_REDUCE))
      v = stored = pre(in, st, src[i]) + dst[i] + post;
    else
      v = stored = pre(in, st, src[i]) + post;
    if (out) out->v[i] = v;
    if (st->flags & STEP_STORE) dst[i] = stored;
  }
  if (got) fifo_drop_head(iq);
  if (out) out->n = n, fifo_put(oq, out);
  ls->pos += n;
  return 1;
}

/* A peer step: 1 ran, 0 blocked, -1 error. */
static int peer_step(interp_t *in, int me, const step_t *st, lane_state_t *ls) {
  int q = st->recv_peer, n = in->n;
  /* PEER_REDUCE with send_peer: the result goes into that rank's dst_buf */
  int to = st->kind == STEP_PEER_REDUCE && st->send_peer >= 0 ? st->send_peer : me;
  int64_t *dst = st->kind == STEP_PEER_DONE || to >= n
                     ? NULL
                     : at(in, to, st->dst_buf, st->dst_off, st->count);
  if (st->kind != STEP_PEER_DONE && (!dst || q < 0 || q >= n))
    return fail(in, "rank %d: peer step %d writes outside its buffers or names no rank", me,
                (int)ls->cur);
  if (st->kind == STEP_PEER_REDUCE) {
    int64_t post = (st->flags & STEP_POST) ? in->o->post_add : 0;
    for (size_t i = 0; i < st->count; i++) {
      int64_t acc = 0;
      for (int k = 0; k < n; k++) {
        int64_t *x = at(in, (q + k) % n, st->src_buf, st->src_off + i, 1);
        if (!x)
          return fail(in, "rank %d: PEER_REDUCE reads outside rank %d's buffer", me, (q + k) % n);
        acc += pre(in, st, *x);
      }
      dst[i] = acc + post;
    }
    for (int k = 1; (st->flags & STEP_PUSH) && k < n; k++) { /* into every other rank's dst */
      int64_t *y = at(in, (me + k) % n, st->dst_buf, st->dst_off, st->count);
      if (!y)
        return fail(in, "rank %d: PEER_REDUCE pushes outside rank %d's buffer", me, (me + k) % n);
      memmove(y, dst, st->count * sizeof(int64_t));
    }
    in->reduced[me] = 1;
  } else if (st->kind == STEP_PEER_COPY) {
    if ((st->flags & STEP_AFTER_PROGRESS) && !in->reduced[q]) return 0;
    int64_t *x = at(in, q, st->src_buf, st->src_off, st->count);
    if (!x) return fail(in, "rank %d: PEER_COPY reads outside rank %d's buffer", me, q);
    memmove(dst, x, st->count * sizeof(int64_t));
    for (int k = 1; (st->flags & STEP_PUSH) && k < n; k++) { /* into every other rank's dst */
      int64_t *y = at(in, (me + k) % n, st->dst_buf, st->dst_off, st->count);
      if (!y)
        return fail(in, "rank %d: PEER_COPY pushes outside rank %d's buffer", me, (me + k) % n);
      memmove(y, x, st->count * sizeof(int64_t));
    }
  } else if (st->kind == STEP_PEER_EXCHANGE) {
    int64_t *mine = at(in, me, st->src_buf, st->dst_off, st->count);
    int64_t *theirs = at(in, q, st->src_buf, st->src_off, st->count);
    int64_t *there = at(in, q, st->dst_buf, st->src_off, st->count);
    if (!mine || !theirs || !there)
      return fail(in, "rank %d: PEER_EXCHANGE reaches outside its or rank %d's buffers", me, q);
    for (size_t i = 0; i < st->count; i++) {
      int64_t a = mine[i], b = theirs[i];
      dst[i] = b, there[i] = a;
    }
  } else {
    in->done[me] = 1;
    for (int k = 0; k < n; k++)
      if (!in->done[k]) return ls->pos = 1, 0; /* said done; waits for the others */
  }
  return 1;
}

/* Advances lane l of rank me as far as it goes: 1 moved, 0 blocked, -1 error. */
static int advance(interp_t *in, int me, int l) {
  const sched_t *s = &in->ranks[me].lanes[l];
  lane_state_t *ls = &in->lane[me][l];
  int moved = 0;
  while (ls->cur < s->n) {
    const step_t *st = &s->steps[ls->cur];
    int rc;
    if (st->kind == STEP_FIFO_SWAP && ls->pos >= st->count) {
      ls->cur++, ls->pos = 0, ls->sent = 0, rc = 1;
    } else if (st->kind == STEP_FIFO_SWAP) {
      rc = swap_pieces(in, me, st, ls);
    } else if (st->kind != STEP_FIFO) {
      rc = peer_step(in, me, st, ls);
      if (rc == 1) ls->cur++, ls->pos = 0;
    } else if (ls->pos >= st->count) {
      ls->cur++, ls->pos = 0, rc = 1;
    } else {
      rc = fifo_piece(in, me, st, ls);
    }
    if (rc <= 0) return rc < 0 ? -1 : moved;
    moved = 1;
  }
  return moved;
}

static int check_end(interp_t *in) {
  for (int r = 0; r < in->n; r++)
    for (int l = 0; l < in->ranks[r].nlanes; l++)
      if (in->lane[r][l].cur < in->ranks[r].lanes[l].n)
        return fail(in, "deadlock: rank %d stuck in lane %d", r, l);
  for (int i = 0; i < in->n * in->n; i++)
    if (in->fifo[i].head)
      return fail(in, "unconsumed message from rank %d to rank %d", i / in->n, i % in->n);
  return 0;
}

int interp_run(interp_rank_t *ranks, int n, const interp_opts_t *o, char *err, size_t errlen) {
  interp_t in = {.ranks = ranks, .n = n, .o = o, .err = err, .errlen = errlen};
  int rc = -1;
  err[0] = '\0';
  in.fifo = calloc((size_t)n * n, sizeof(fifo_t));
  in.lane = calloc((size_t)n, sizeof(lane_state_t *));
  in.reduced = calloc((size_t)n, sizeof(int));
  in.done = calloc((size_t)n, sizeof(int));
  if (!in.fifo || !in.lane || !in.reduced || !in.done) goto out;
  for (int r = 0; r < n; r++)
    if (!(in.lane[r] = calloc((size_t)ranks[r].nlanes + 1, sizeof(lane_state_t)))) goto out;
  for (int moved = 1; moved;) {
    moved = 0;
    for (int r = 0; r < n; r++)
      for (int l = 0; l < ranks[r].nlanes; l++) {
        int m = advance(&in, r, l);
        if (m < 0) goto out;
        moved |= m;
      }
  }
  rc = check_end(&in);
out:
  if (rc != 0 && !err[0]) snprintf(err, errlen, "out of memory");
  for (int i = 0; in.fifo && i < n * n; i++)
    for (piece_t *p = in.fifo[i].head, *q; p; p = q) q = p->next, free(p);
  for (int r = 0; in.lane && r < n; r++) free(in.lane[r]);
  free(in.fifo), free(in.lane), free(in.reduced), free(in.done);
  return rc;
}
