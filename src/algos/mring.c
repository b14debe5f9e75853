/* Multi-channel ring all-reduce: the buffer split over C rings that leave each host through
 * different ranks, so that the C rings cross the network on C different NICs at once (NCCL's
 * channels).
 *
 * The communicator's ring order (sched_args_t.ring) enters each host once: a host's ranks are
 * a run u_0 .. u_{m-1} of consecutive positions. Channel c visits every run rotated by c:
 *
 *   hosts {0 1 2 3} {4 5 6 7}, C = 4      (u_i -> u_{i+1} inside a host, exit -> next entry)
 *   channel 0:  1 2 3 0 | 5 6 7 4        exits at local 0 (NIC 0), enters at local 1
 *   channel 1:  2 3 0 1 | 6 7 4 5        exits at local 1 (NIC 1), enters at local 2
 *   channel 2:  3 0 1 2 | 7 4 5 6        exits at local 2 ...
 *   channel 3:  0 1 2 3 | 4 5 6 7        exits at local 3
 *
 * Local rank l uses NIC l mod nics, so with C = nics the channels' network hops go through C
 * different NICs: each carries 1/C of the ring's bytes. Channel c all-reduces slice c of the
 * buffer (block_start over C) exactly as ring.c does (segments by position in its ring, the
 * reduction of each segment in ring order from its owner's neighbour: bitwise reproducible,
 * the same on every rank).
 *
 * C = the smallest host's number of ranks, at most MRING_MAX_CHANNELS and at most `chunk`; 1 (the
 * plain ring) on one host, with no host map, or when the ring order does not keep hosts
 * together.
 *
 * One lane runs all channels, step by step: round j, step k of every channel, then step k + 1
 * (channels one after another would each run at the pace of its one network hop; side by side
 * they share it out). The rank at index l < C of its host takes the channels in the order
 * l, l+1, .., l-1 (mod C), the others 0 .. C-1: it sends its own network hop first (channel l
 * leaves the host from it) and waits for the one it receives (channel l-1 enters at it) last,
 * while the pieces inside the host go on. Two neighbours u_l -> u_{l+1} list the channels of
 * their link (all but channel l) in the same order, so each FIFO's messages match.
 *
 * Cost per rank: 2(n-1) steps per channel and round, 2(n-1)/n * bytes sent (the ring's), of
 * which 1/C per NIC across hosts; every step of every round waits for a network hop unless the
 * copies inside the host take longer (below): it pays for large buffers on mid-size jobs.
 *
 * Bounded FIFOs (schedule.h). Take the earliest unfinished (round, step, place in the rank's
 * order) anywhere, (j, k, t) at rank x sending to y. x's link to y holds at most the messages
 * of step k-1 that y has not taken (its places t.. of step k) and those of x's places ..t-1 of
 * step k, plus the one x sends: C + 1 messages, and C - 1 when every host has exactly C ranks
 * (the link u_l -> u_{l+1} carries every channel but l, in orders rotated by one between x
 * and y: (t-1) + (C-1-t) + 1). So every channel moves q = 2 chunk / C elements per step and
 * round when hosts have C ranks ((C-1) q < 2 chunks), chunk / C otherwise ((C+1) q <= 2 chunks);
 * C <= chunk keeps q >= 1. In slots (a message of fewer elements than a slot takes a whole one)
 * the tuner's cost refuses geometries whose FIFOs hold fewer pieces (mring_fifo_ok); the
 * simulator's credits and the interpreter's bounded FIFOs in the tests check it.
 */
#include <stdlib.h>

#include "algos/registry.h"
#include "core.h"

#define MRING_MAX_CHANNELS 8

typedef struct mring_chan { /* this rank in one channel's ring */
  int pos, prev, next;
} mring_chan_t;

typedef struct mring {
  int nch, first; /* channels; the first in this rank's order (then first+1, .. mod nch) */
  int uniform;    /* every host has exactly nch ranks */
  mring_chan_t ch[MRING_MAX_CHANNELS];
} mring_t;

static int cmp_int(const void *x, const void *y) {
  int a = *(const int *)x, b = *(const int *)y;
  return (a > b) - (a < b);
}

/* The runs of the ring order: run_start[h] (position), run_len[h], h < *nruns, starting at a
 * position where the host changes; *maxlen the longest. Returns the number of channels (1: no
 * runs to rotate). */
static int mring_runs(const sched_args_t *a, int *run_start, int *run_len, int *nruns, int *labels,
                      int *maxlen) {
  int n = a->nranks, s = -1;
  const int *host = a->host_of_rank;
  if (!host || n < 2) return 1;
  for (int p = 0; p < n && s < 0; p++)
    if (host[sched_ring_rank(a, p - 1)] != host[sched_ring_rank(a, p)]) s = p;
  if (s < 0) return 1; /* one host */
  int H = 0, minlen = n;
  for (int i = 0; i < n; i++) {
    int p = s + i, h = host[sched_ring_rank(a, p)];
    if (i == 0 || h != host[sched_ring_rank(a, p - 1)]) {
      run_start[H] = p, run_len[H] = 0, labels[H] = h;
      H++;
    }
    run_len[H - 1]++;
  }
  for (int h = 0; h < H; h++) {
    minlen = run_len[h] < minlen ? run_len[h] : minlen;
    *maxlen = run_len[h] > *maxlen ? run_len[h] : *maxlen;
  }
  qsort(labels, (size_t)H, sizeof(int), cmp_int);
  for (int h = 1; h < H; h++)
    if (labels[h] == labels[h - 1]) return 1; /* a host entered twice */
  *nruns = H;
  return minlen < MRING_MAX_CHANNELS ? minlen : MRING_MAX_CHANNELS;
}

/* Rank at index i (mod its length) of run h in channel c's ring: u_{(i + c + 1) mod m}. */
static int run_rank(const sched_args_t *a, const int *start, const int *len, int h, int i, int c) {
  return sched_ring_rank(a, start[h] + tutti_mod(i + c + 1, len[h]));
}

/* Fills this rank's place in every channel. Returns 0 or -1 (out of memory). */
static int mring_place(const sched_args_t *a, mring_t *m) {
  int n = a->nranks, me = sched_ring_me(a), H = 0, maxlen = 0;
  int *buf = malloc(3 * (size_t)n * sizeof(int));
  if (!buf) return -1;
  int *start = buf, *len = buf + n, *labels = buf + 2 * n;
  m->nch = mring_runs(a, start, len, &H, labels, &maxlen);
  if (m->nch > 1 && (size_t)m->nch > a->chunk) m->nch = a->chunk ? (int)a->chunk : 1;
  m->first = 0, m->uniform = maxlen == m->nch;
  if (m->nch == 1) { /* the plain ring */
    m->ch[0] = (mring_chan_t){me, sched_ring_rank(a, me - 1), sched_ring_rank(a, me + 1)};
    free(buf);
    return 0;
  }
  int h = 0; /* my run: the last whose start (mod n, from start[0]) is at or before me */
  int rel = tutti_mod(me - start[0], n);
  while (h + 1 < H && tutti_mod(start[h + 1] - start[0], n) <= rel) h++;
  int idx = tutti_mod(me - start[h], n), base = tutti_mod(start[h] - start[0], n);
  m->first = idx < m->nch ? idx : 0;
  for (int c = 0; c < m->nch; c++) {
    int i = tutti_mod(idx - c - 1, len[h]), hp = (h + H - 1) % H, hn = (h + 1) % H;
    m->ch[c].pos = base + i;
    m->ch[c].prev =
        i > 0 ? run_rank(a, start, len, h, i - 1, c) : run_rank(a, start, len, hp, len[hp] - 1, c);
    m->ch[c].next =
        i + 1 < len[h] ? run_rank(a, start, len, h, i + 1, c) : run_rank(a, start, len, hn, 0, c);
  }
  free(buf);
  return 0;
}

/* Step k (0 .. 2n-2) of round j of channel `ch`, whose slice is [off, off + len): segment
 * (pos - k) mod n, the ring's reduce-scatter then all-gather (ring.c). */
static int mring_step(const sched_args_t *a, const mring_chan_t *ch, size_t off, size_t len,
                      size_t j, size_t q, int k, sched_t *s) {
  int n = a->nranks, seg = tutti_mod(ch->pos - k, n);
  size_t lo = off + block_start(len, n, seg), hi = off + block_start(len, n, seg + 1);
  size_t o = lo + j * q, cnt = o < hi ? (hi - o < q ? hi - o : q) : 0;
  if (o > hi) o = hi;
  if (k == 0)
    SCHED_PUSH(.recv_peer = -1, .send_peer = ch->next, .src_buf = BUF_SEND, .dst_buf = BUF_NONE,
               .flags = STEP_PRE, .src_off = o, .count = cnt);
  else if (k < n - 1)
    SCHED_PUSH(.recv_peer = ch->prev, .send_peer = ch->next, .src_buf = BUF_SEND,
               .dst_buf = BUF_NONE, .flags = STEP_REDUCE | STEP_PRE, .src_off = o, .count = cnt);
  else if (k == n - 1)
    SCHED_PUSH(.recv_peer = ch->prev, .send_peer = ch->next, .src_buf = BUF_SEND,
               .dst_buf = BUF_RECV, .flags = STEP_REDUCE | STEP_PRE | STEP_POST | STEP_STORE,
               .src_off = o, .dst_off = o, .count = cnt);
  else
    SCHED_PUSH(.recv_peer = ch->prev, .send_peer = k < 2 * n - 2 ? ch->next : -1,
               .src_buf = BUF_NONE, .dst_buf = BUF_RECV, .flags = STEP_STORE, .dst_off = o,
               .count = cnt);
  return 0;
}

/* Elements of the longest segment of any channel (slices differ by at most one element). */
static size_t mring_seg_max(size_t count, int nch, int n) {
  size_t slice = count / (size_t)nch + (count % (size_t)nch != 0);
  return slice / (size_t)n + (slice % (size_t)n != 0);
}

int mring_allreduce(const sched_args_t *a, sched_t *s) {
  int n = a->nranks;
  mring_t m;
  if (n == 1) {
    SCHED_PUSH(.recv_peer = -1, .send_peer = -1, .src_buf = BUF_SEND, .dst_buf = BUF_RECV,
               .flags = STEP_STORE | STEP_PRE | STEP_POST, .count = a->count);
    return 0;
  }
  if (mring_place(a, &m) != 0) return -1;
  size_t chunk = a->chunk ? a->chunk : 1;
  size_t q = m.nch == 1 ? chunk : (m.uniform ? 2 : 1) * chunk / (size_t)m.nch;
  size_t rounds = (mring_seg_max(a->count, m.nch, n) + q - 1) / q;
  for (size_t j = 0; j < rounds; j++)
    for (int k = 0; k <= 2 * n - 2; k++)
      for (int t = 0; t < m.nch; t++) {
        int c = (m.first + t) % m.nch;
        size_t off = block_start(a->count, m.nch, c);
        size_t len = block_start(a->count, m.nch, c + 1) - off;
        if (mring_step(a, &m.ch[c], off, len, j, q, k, s) != 0) return -1;
      }
  return 0;
}

/* The channels of a communicator whose hosts hold m ranks each in blocks: min(m, max). */
static int mring_channels(const tuner_topo_t *t) {
  if (t->nhosts < 2 || !(t->host_blocks || t->ring_grouped) || t->local_size < 2) return 1;
  return t->local_size < MRING_MAX_CHANNELS ? t->local_size : MRING_MAX_CHANNELS;
}

/* Elements (of a byte each here: bytes) a channel moves per step and round, as the builder:
 * 2 chunk / C when every host has C ranks (host_blocks: all hosts alike), else chunk / C. */
static double mring_q_bytes(const tuner_topo_t *t, int nch) {
  return (t->local_size == nch ? 2.0 : 1.0) * (double)t->chunk_bytes / nch;
}

/* FIFOs hold at least 2 chunk / slot pieces (the transports' agreement); a message of q
 * elements takes ceil(q / slot) of them and C - 1 (hosts of C ranks) or C + 1 messages may
 * wait in one FIFO. */
static int mring_fifo_ok(const tuner_topo_t *t, int nch) {
  if (!t->slot_bytes || !t->chunk_bytes) return 1;
  double k = (double)t->chunk_bytes / (double)t->slot_bytes;
  double per = mring_q_bytes(t, nch) / (double)t->slot_bytes;
  double pieces = cost_pieces(per, 1);
  int waiting = nch == t->local_size ? nch - 1 : nch + 1;
  return waiting * pieces <= 2 * k;
}

/* Cost. The channels run in lock step: R rounds of 2(n-1) steps, R = ceil((S / C / n) / q) (q
 * bytes per channel and step, as the builder; a step moves q' = min(q, S / C / n)). In a step a
 * rank sends its network piece first and waits for the one it receives (it is some channel's
 * entry) last, while it copies its C - 1 pieces through shared memory, so a step takes
 *   max(a_net + ceil(C / nics) q' / b_net,  (C-1) q' / b_shm + C pieces x piece_us)
 * (the NIC's share: the channels that leave through it). Where rounds are few and the buffer
 * large the network hops overlap the copies and each NIC carries 1/C of the ring's bytes;
 * otherwise every step pays a network latency, where the ring pays it on H of its n hops. Where
 * messages cost CPU time (cost.h) a step also takes its C messages' (one across hosts, C - 1
 * through shared memory) x max(1, R / CPUs). On one host (C = 1) it builds the ring and costs
 * what the ring costs. */
static double mring_cost(const tuner_model_t *m, const tuner_topo_t *t, coll_t c, double S) {
  int n = t->nranks, C = mring_channels(t), nics = t->nics > 1 ? t->nics : 1;
  if (c != COLL_ALLREDUCE) return -1;
  if (C < 2) return algo_ring.cost_us(m, t, c, S); /* it builds the ring (which wins ties) */
  if (!mring_fifo_ok(t, C)) return -1;
  double q = mring_q_bytes(t, C), seg = S / C / n;
  double rounds = cost_pieces(seg, q);
  double qe = seg < q ? seg : q, pieces = cost_pieces(qe, (double)t->slot_bytes);
  double net = m->net.lat_us + (double)((C + nics - 1) / nics) * qe / (m->net.gbps * 1e3);
  double busy = (C - 1) * qe / (m->shm.gbps * 1e3) + C * pieces * m->piece_us;
  double cpu = (m->msg_cpu_us + (C - 1) * m->shm_msg_cpu_us) * cost_cpu_share(t);
  double step = net > busy ? net : busy;
  return rounds * 2.0 * (n - 1) * (step > cpu ? step : cpu);
}

ALGO_COL_BUILDER(build_allreduce, mring_allreduce)

const algo_desc_t algo_mring = {
    .name = "mring",
    .summary = "multi-channel ring: C rings leaving each host through C NICs, large sizes",
    .build = {[COLL_ALLREDUCE] = build_allreduce},
    .cost_us = mring_cost,
};
