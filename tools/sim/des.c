/* tutti-sim: the discrete-event simulation of schedules on a modelled cluster.
 *
 * Every lane of every simulated rank runs its steps strictly in order, as the engine does, each
 * step cut into pieces of one FIFO slot (the communicator's slot: the smallest of the transports
 * in use). A piece of b bytes is processed at time t, when its input has arrived and the
 * send FIFO has a free slot:
 *
 *   busy    = overhead + (REDUCE ? b / reduce_bw : 0)    the rank's engine is busy this long
 *   shm     the sending rank copies the piece into the peer's slot: busy += b / intra_bw;
 *           the piece arrives at t + busy + intra_lat
 *   network the piece is handed to the NIC (NIC = local rank mod NICs) and crosses the sender
 *           node's transmit side, then the receiver node's receive side, each a FIFO server of
 *           inter_bw (b / inter_bw each, cut-through: the receive side cannot finish before
 *           the transmit side), and arrives inter_lat later; between leaf switches (with
 *           oversubscription) it also crosses the source leaf's uplink and the destination
 *           leaf's downlink, servers of leaf_nodes * nics * inter_bw / oversub. With
 *           --inter-burst, each NIC side is a token bucket (tc tbf): it sends at the peak rate
 *           while it has tokens, which accrue at inter_bw up to the burst (empty at time 0)
 *   CPUs    (with --cpus) the ranks of a machine (machine_nodes nodes) share its cpus CPUs, and
 *           every piece sent takes msg_cpu (intra_msg_cpu through shared memory) of one of
 *           them (system calls, the kernel's path,
 *           the receiver's wake-up), from t, on the CPU free first; the piece cannot arrive
 *           before that work is done. An idle machine hides it in the latency (msg_cpu < lat);
 *           8 ranks sending at once on 2 CPUs wait 4 msg_cpu (the namespace test bed)
 *   credits a connection holds `depth` slots (shm: fifo_intra; tcp: 2 x fifo_inter, the
 *           sender's and the receiver's FIFO; the kernel's socket buffers are not counted):
 *           piece k may be sent once piece k - depth was consumed, plus the link latency for
 *           the credit to travel back
 *
 * The collective's time is when the last lane finishes. Events (a lane ready to try its next
 * piece) are processed in time order from a binary heap, so resources (NICs, uplinks) are
 * claimed in time order. One ring step of s bytes on a uniform link thus costs a + s/B, and a
 * ring all-reduce of S bytes in one piece per step 2(n-1)(a + S/(nB)) (tests/test_sim.cc).
 * Under a symmetry (symmetry.c) only representatives run: channels and NICs of other ranks are
 * mapped onto theirs.
 *
 * Not modelled: CPU time of reductions and copies on a shared machine (only messages take CPU),
 * memory bandwidth shared by shm copies, TCP's congestion control and per-packet costs (a NIC is an
 * ideal pipe), helper-thread wakeups, the latency of a rank's first touch of a buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

typedef struct chan {
  uint64_t key;        /* src_rep << 32 | dst (canonical, see symmetry.c) */
  double *arr, *ctime; /* arrival of in-flight pieces, consume time of the last `cap` pieces */
  uint32_t *size;      /* elements of each in-flight piece */
  uint64_t sent, consumed, pieces;
  uint32_t cap, depth;
  int waiter_recv, waiter_send, intra;
  double lat;
} chan_t;

typedef struct proc {
  const sim_step_t *steps;
  int32_t *ch; /* per step: receive channel, send channel */
  size_t n, cur;
  uint32_t pos;
  int rank;
  double now;
} proc_t;

typedef struct nic {  /* one direction of a NIC */
  double free;        /* busy until */
  double tokens, upd; /* token bucket (with a burst): tokens at time upd */
} nic_t;

typedef struct event {
  double t;
  uint64_t seq;
  int p;
} event_t;

typedef struct des {
  const sim_cluster_t *c;
  const sim_sym_t *sym;
  int esize, nprocs, err;
  size_t slot;
  proc_t *procs;
  chan_t *ch;
  size_t nch, capch;
  int32_t *table; /* hash: key -> channel index, -1 empty */
  size_t tmask;
  event_t *heap;
  size_t nheap;
  uint64_t seq, events;
  nic_t *tx, *rx; /* per NIC: transmit side, receive side */
  double *cpu;    /* [machines][cpus]: busy until (with a CPU model) */
  double *up, *down, finish;
  double *const *done; /* per lane, per step: when it finished (NULL: not recorded) */
  char *msg;
} des_t;

static int node_of(const des_t *d, int r) {
  return r / d->c->ppn;
}
static int machine_of(const des_t *d, int r) {
  return node_of(d, r) / d->c->machine_nodes;
}
static int nic_of(const des_t *d, int r) {
  return node_of(d, r) * d->c->nics + (r % d->c->ppn) % d->c->nics;
}

/* Every duration is rounded to a multiple of 2^-50 s (0.89 fs), so that every time below 8 s is
 * an exact multiple of it: sums are exact, two paths that take equally long end at the same
 * time (ties are broken by the order of events, not by rounding), and moving a run by a
 * period moves every time exactly (rounds.c relies on it). The rounding adds at most 0.44 fs
 * per term: 0.12 ns over the 262,140 terms of the 131,070 hops of a ring of 65,536 ranks. */
static double des_quantize(double x) {
  return ldexp(nearbyint(ldexp(x, 50)), -50);
}

/* ---- event heap ---- */
static int ev_less(const event_t *a, const event_t *b) {
  return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(des_t *d, double t, int p) {
  size_t i = d->nheap++;
  event_t e = {t, d->seq++, p};
  while (i > 0 && ev_less(&e, &d->heap[(i - 1) / 2])) {
    d->heap[i] = d->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  d->heap[i] = e;
}

static event_t pop(des_t *d) {
  event_t top = d->heap[0], last = d->heap[--d->nheap];
  size_t i = 0;
  for (;;) {
    size_t k = 2 * i + 1;
    if (k >= d->nheap) break;
    if (k + 1 < d->nheap && ev_less(&d->heap[k + 1], &d->heap[k])) k++;
    if (!ev_less(&d->heap[k], &last)) break;
    d->heap[i] = d->heap[k];
    i = k;
  }
  if (d->nheap) d->heap[i] = last;
  return top;
}

/* ---- channels ---- */
static uint64_t hash64(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33;
  return x;
}

/* Index of channel src_rep -> dst (created on first use), -1 out of memory. */
static int32_t chan_get(des_t *d, int src_rep, int dst) {
  uint64_t key = (uint64_t)(uint32_t)src_rep << 32 | (uint32_t)dst;
  size_t i = hash64(key) & d->tmask;
  while (d->table[i] >= 0) {
    if (d->ch[d->table[i]].key == key) return d->table[i];
    i = (i + 1) & d->tmask;
  }
  if (d->nch == d->capch) {
    size_t cap = d->capch ? 2 * d->capch : 1024;
    chan_t *p = realloc(d->ch, cap * sizeof *p);
    if (!p) return -1;
    d->ch = p, d->capch = cap;
  }
  int intra = node_of(d, src_rep) == node_of(d, dst);
  d->ch[d->nch] = (chan_t){.key = key,
                           .waiter_recv = -1,
                           .waiter_send = -1,
                           .intra = intra,
                           .depth = (uint32_t)(intra ? d->c->fifo_intra : 2 * d->c->fifo_inter),
                           .lat = des_quantize(intra ? d->c->intra_lat : d->c->inter_lat)};
  d->table[i] = (int32_t)d->nch;
  return (int32_t)d->nch++;
}

/* Elements per piece of a step: one slot (local steps: all at once), as the engine; a whole
 * step through shared memory (intra) of at least rdv_intra bytes goes by rendezvous, in one. */
static uint32_t piece_elems(const des_t *d, const sim_step_t *st, int intra) {
  if (st->recv < 0 && st->send < 0) return st->count;
  if (intra && (st->flags & STEP_WHOLE) && d->c->rdv_intra &&
      (size_t)st->count * (size_t)d->esize >= d->c->rdv_intra)
    return st->count;
  size_t e = d->slot / (size_t)d->esize;
  return e == 0 ? 1 : e < st->count ? (uint32_t)e : st->count;
}

/* ---- setup ---- */
static int setup_proc(des_t *d, proc_t *p, const sim_lane_t *l) {
  *p = (proc_t){.steps = l->steps, .n = l->n, .rank = l->rank};
  p->ch = malloc((2 * l->n + 1) * sizeof(int32_t));
  if (!p->ch) return -1;
  for (size_t i = 0; i < l->n; i++) {
    const sim_step_t *st = &l->steps[i];
    int32_t rc = -1, sc = -1;
    if (st->recv >= 0 &&
        (rc = chan_get(d, sym_rep(d->sym, st->recv), sym_map(d->sym, st->recv, l->rank))) < 0)
      return -1;
    if (st->send >= 0) {
      if ((sc = chan_get(d, l->rank, st->send)) < 0) return -1;
      uint32_t pe = piece_elems(d, st, d->ch[sc].intra);
      d->ch[sc].pieces += (st->count + pe - 1) / pe;
    }
    p->ch[2 * i] = rc, p->ch[2 * i + 1] = sc;
  }
  return 0;
}

static int setup(des_t *d, const sim_lane_t *lanes, int nlanes) {
  size_t refs = 16;
  for (int i = 0; i < nlanes; i++) refs += 2 * lanes[i].n;
  size_t tsize = 1024;
  while (tsize < 2 * refs && tsize < ((size_t)1 << 31)) tsize *= 2;
  int nn = d->c->nodes * d->c->nics, nleaf = d->c->nodes / d->c->leaf_nodes + 1;
  d->table = malloc(tsize * sizeof(int32_t));
  d->procs = calloc((size_t)nlanes, sizeof(proc_t));
  d->heap = malloc(((size_t)nlanes + 1) * sizeof(event_t));
  d->tx = calloc((size_t)nn, sizeof(nic_t)), d->rx = calloc((size_t)nn, sizeof(nic_t));
  d->up = calloc((size_t)nleaf, sizeof(double)), d->down = calloc((size_t)nleaf, sizeof(double));
  if (d->c->cpus > 0) {
    size_t nm = (size_t)(d->c->nodes / d->c->machine_nodes + 1) * (size_t)d->c->cpus;
    if (!(d->cpu = calloc(nm, sizeof(double)))) return -1;
  }
  if (!d->table || !d->procs || !d->heap || !d->tx || !d->rx || !d->up || !d->down) return -1;
  memset(d->table, 0xff, tsize * sizeof(int32_t));
  d->tmask = tsize - 1;
  d->nprocs = nlanes;
  for (int i = 0; i < nlanes; i++)
    if (setup_proc(d, &d->procs[i], &lanes[i]) != 0) return -1;
  for (size_t k = 0; k < d->nch; k++) {
    chan_t *c = &d->ch[k];
    c->cap = c->pieces < c->depth ? (uint32_t)(c->pieces ? c->pieces : 1) : c->depth;
    c->arr = malloc(c->cap * sizeof(double));
    c->ctime = malloc(c->cap * sizeof(double));
    c->size = malloc(c->cap * sizeof(uint32_t));
    if (!c->arr || !c->ctime || !c->size) return -1;
  }
  return 0;
}

static void teardown(des_t *d) {
  for (size_t k = 0; k < d->nch; k++) free(d->ch[k].arr), free(d->ch[k].ctime), free(d->ch[k].size);
  for (int i = 0; d->procs && i < d->nprocs; i++) free(d->procs[i].ch);
  free(d->ch), free(d->table), free(d->procs), free(d->heap);
  free(d->tx), free(d->rx), free(d->up), free(d->down), free(d->cpu);
}

/* ---- the model ---- */

/* One stage of a network path: a resource free at *free moving `rate` bytes/s. The piece enters
 * when it is free (and not before it entered the previous stage), and cannot leave before it
 * left the previous stage (cut-through). Returns its end; *start is updated for the next. */
static double stage(double *free, double rate, double bytes, double *start, double prev_end) {
  double dt = des_quantize(bytes / rate), s = fmax(*start, *free), e = fmax(s + dt, prev_end);
  *free = s + dt;
  *start = s;
  return e;
}

/* A NIC side: a stage whose rate is inter_bw, or, with a burst (a token bucket, like tc tbf),
 * up to inter_peak_bw while tokens last; tokens accrue at inter_bw up to the burst, from an empty
 * bucket at time 0 (back-to-back calls leave none), so idle time is partly made up later. */
static double nic_stage(const sim_cluster_t *c, nic_t *q, double bytes, double *start,
                        double prev_end) {
  double r = c->inter_bw, peak = c->inter_peak_bw > r ? c->inter_peak_bw : r;
  double t0 = fmax(*start, q->free), dur = bytes / r;
  double k0 = fmin((double)c->inter_burst, q->tokens + (t0 - q->upd) * r);
  if (c->inter_burst > 0 && peak > r) {
    double drain = k0 / (peak - r), at_peak = peak * drain; /* bytes sent before it is empty */
    dur = bytes <= at_peak ? bytes / peak : drain + (bytes - at_peak) / r;
  }
  dur = des_quantize(dur);
  q->free = q->upd = t0 + dur;
  q->tokens = fmax(0, fmin((double)c->inter_burst, k0 + dur * r - bytes));
  *start = t0;
  return fmax(t0 + dur, prev_end);
}

/* A network piece from rank src (simulated) to rank dst, ready at t: returns when its last byte
 * reached the receiving NIC. Path: sender's NIC (transmit), [leaf uplink, destination leaf's
 * downlink], receiver's NIC (receive); the switches buffer, so a busy receiver does not hold
 * the sender's NIC (it is a switched network, not a reserved circuit). */
static double net_reserve(des_t *d, int src, int dst, double t, double bytes) {
  const sim_cluster_t *c = d->c;
  int rdst = sym_rep(d->sym, dst);
  double start = t, end = nic_stage(c, &d->tx[nic_of(d, src)], bytes, &start, t);
  int ls = node_of(d, src) / c->leaf_nodes, ld = node_of(d, dst) / c->leaf_nodes;
  if (c->oversub > 1 && ls != ld) {
    double cap = c->leaf_nodes * c->nics * c->inter_bw / c->oversub;
    end = stage(&d->up[ls], cap, bytes, &start, end);
    end = stage(&d->down[node_of(d, rdst) / c->leaf_nodes], cap, bytes, &start, end);
  }
  return nic_stage(c, &d->rx[nic_of(d, rdst)], bytes, &start, end);
}

/* The CPU work of a piece rank r sends at t: on its machine's CPU free first (the simulated
 * ranks stand for their machine: symmetry classes cover whole machines). Returns its end. */
static double cpu_run(des_t *d, int r, double t, int intra) {
  double *cpu = d->cpu + (size_t)machine_of(d, r) * (size_t)d->c->cpus;
  int k = 0;
  for (int i = 1; i < d->c->cpus; i++)
    if (cpu[i] < cpu[k]) k = i;
  cpu[k] = fmax(cpu[k], t) + des_quantize(intra ? sim_intra_msg_cpu(d->c) : d->c->msg_cpu);
  return cpu[k];
}

/* Can the piece go at p->now? 1 yes; 0 no (p is queued or waits on a channel). */
static int piece_ready(des_t *d, int pi, chan_t *rc, chan_t *sc) {
  proc_t *p = &d->procs[pi];
  if (rc) {
    if (rc->consumed == rc->sent) return rc->waiter_recv = pi, 0;
    double ta = rc->arr[rc->consumed % rc->cap];
    if (ta > p->now) return push(d, ta, pi), 0;
  }
  if (sc && sc->sent >= sc->depth) {
    uint64_t k = sc->sent - sc->depth;
    if (k >= sc->consumed) return sc->waiter_send = pi, 0;
    double tc = sc->ctime[k % sc->cap] + sc->lat;
    if (tc > p->now) return push(d, tc, pi), 0;
  }
  return 1;
}

/* Processes one piece of p's current step; returns the time p is busy until. */
static double piece_run(des_t *d, proc_t *p, const sim_step_t *st, chan_t *rc, chan_t *sc,
                        uint32_t elems) {
  const sim_cluster_t *c = d->c;
  double t = p->now, bytes = (double)elems * d->esize, busy = c->overhead;
  if ((st->flags & STEP_REDUCE) && c->reduce_bw > 0) busy += bytes / c->reduce_bw;
  if (!rc && !sc && !(st->flags & STEP_REDUCE)) busy += bytes / c->intra_bw; /* local copy */
  if (sc && sc->intra) busy += bytes / c->intra_bw; /* the copy into the peer's slot */
  busy = des_quantize(busy);
  if (sc) {
    double arrival;
    if (sc->intra) {
      arrival = t + busy + sc->lat;
    } else {
      arrival = net_reserve(d, p->rank, st->send, t + busy, bytes) + sc->lat;
    }
    if (d->cpu) arrival = fmax(arrival, cpu_run(d, p->rank, t, sc->intra));
    sc->arr[sc->sent % sc->cap] = arrival;
    sc->size[sc->sent % sc->cap] = elems;
    sc->sent++;
    if (sc->waiter_recv >= 0) push(d, arrival, sc->waiter_recv), sc->waiter_recv = -1;
  }
  if (rc) {
    rc->ctime[rc->consumed % rc->cap] = t + busy;
    rc->consumed++;
    if (rc->waiter_send >= 0) push(d, t + busy + rc->lat, rc->waiter_send), rc->waiter_send = -1;
  }
  return t + busy;
}

/* Runs lane pi from its current time as far as it can without time passing. */
static void advance(des_t *d, int pi) {
  proc_t *p = &d->procs[pi];
  while (p->cur < p->n) {
    const sim_step_t *st = &p->steps[p->cur];
    chan_t *rc = st->recv >= 0 ? &d->ch[p->ch[2 * p->cur]] : NULL;
    chan_t *sc = st->send >= 0 ? &d->ch[p->ch[2 * p->cur + 1]] : NULL;
    const chan_t *any = rc ? rc : sc;
    uint32_t pe = piece_elems(d, st, any && any->intra);
    uint32_t left = st->count - p->pos, elems = left < pe ? left : pe;
    if (!piece_ready(d, pi, rc, sc)) return;
    /* an approximate symmetry (block sizes off by one) lets image pieces differ by one */
    if (rc && rc->size[rc->consumed % rc->cap] != elems && !d->sym->approx) {
      snprintf(d->msg, 160, "rank %d step %zu expects %u elements from rank %d, which sent %u",
               p->rank, p->cur, elems, st->recv, rc->size[rc->consumed % rc->cap]);
      d->err = 1;
      return;
    }
    double end = piece_run(d, p, st, rc, sc, elems);
    p->pos += elems;
    if (p->pos == st->count) {
      if (d->done && d->done[pi]) d->done[pi][p->cur] = end;
      p->cur++, p->pos = 0;
    }
    if (end > p->now) {
      p->now = end;
      push(d, end, pi);
      return;
    }
  }
  if (p->now > d->finish) d->finish = p->now;
}

int sim_des(const sim_cluster_t *c, const sim_lane_t *lanes, int nlanes, const sim_sym_t *sym,
            int esize, sim_result_t *r) {
  return sim_des_trace(c, lanes, nlanes, sym, esize, NULL, r);
}

int sim_des_trace(const sim_cluster_t *c, const sim_lane_t *lanes, int nlanes, const sim_sym_t *sym,
                  int esize, double *const *done, sim_result_t *r) {
  des_t d = {
      .c = c, .sym = sym, .esize = esize, .slot = sim_comm_slot(c), .done = done, .msg = r->msg};
  int rc = -1;
  if (setup(&d, lanes, nlanes) != 0) {
    snprintf(r->msg, sizeof r->msg, "out of memory setting up the simulation");
    goto out;
  }
  for (int i = 0; i < nlanes; i++) push(&d, 0, i);
  while (d.nheap && !d.err) {
    event_t e = pop(&d);
    proc_t *p = &d.procs[e.p];
    if (e.t > p->now) p->now = e.t;
    d.events++;
    advance(&d, e.p);
  }
  for (int i = 0; i < nlanes && !d.err; i++) {
    proc_t *p = &d.procs[i];
    r->steps += p->n;
    if (p->cur < p->n) {
      snprintf(r->msg, sizeof r->msg, "deadlock: rank %d stuck at step %zu of %zu (t=%.6g s)",
               p->rank, p->cur, p->n, p->now);
      d.err = 1;
    }
  }
  if (!d.err) rc = 0, r->time = d.finish, r->events = d.events;
out:
  teardown(&d);
  return rc;
}
