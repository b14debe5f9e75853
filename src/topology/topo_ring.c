/* Ring order of the ranks of one host, and of hosts in a global ring.
 *
 * A ring of n ranks has n edges; each edge has a path class (topo_path_t) between the two
 * ranks' GPUs (or, for ranks without a GPU, their NUMA nodes). The ring's cost counts its edges
 * per class, worst class first: fewer SYS edges always wins, then fewer PHB, PXB, PIX, NVL.
 * Encoded as one integer with 9 bits per class (n <= 256 edges fits), so costs add and compare
 * as numbers. A ring's bandwidth is its slowest edge, and each SYS edge is a trip over the
 * inter-socket link, so minimising the worst edges first is what we want; NVLink neighbours end
 * up side by side because NVL is the cheapest class between two GPUs.
 *
 * Search: order[0] is rank 0; for n <= 9 every order of the others (8! = 40320) in
 * lexicographic order, keeping the first of the cheapest; above, nearest neighbour from rank 0
 * then 2-opt moves until none improves. Both are deterministic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/topo_internal.h"

#define RING_MAX_RANKS 256
#define RING_EXHAUSTIVE_MAX 9

static uint64_t class_cost(topo_path_t p) {
  return 1ull << (9 * (unsigned)p);
}

static const topo_gpu_info_t *rank_gpu(const topo_t *t, const topo_rank_loc_t *l) {
  return t ? topo_gpu(t, l->gpu) : NULL;
}

static int rank_numa(const topo_t *t, const topo_rank_loc_t *l) {
  const topo_gpu_info_t *g = rank_gpu(t, l);
  return g ? g->numa : l->numa;
}

static topo_path_t rank_path(const topo_t *t, const topo_rank_loc_t *a, const topo_rank_loc_t *b) {
  if (rank_gpu(t, a) && rank_gpu(t, b)) return topo_path_gpu_gpu(t, a->gpu, b->gpu);
  int na = rank_numa(t, a), nb = rank_numa(t, b);
  return (na < 0 || nb < 0 || na == nb) ? TOPO_PATH_PHB : TOPO_PATH_SYS;
}

static uint64_t ring_cost(int n, const uint64_t *cost, const int *order) {
  uint64_t c = 0;
  for (int i = 0; i < n; i++) c += cost[order[i] * n + order[(i + 1) % n]];
  return c;
}

/* std::next_permutation on order[1..n-1]; 0 when it wrapped around. */
static int next_order(int *a, int n) {
  int i = n - 2;
  while (i >= 1 && a[i] >= a[i + 1]) i--;
  if (i < 1) return 0;
  int j = n - 1;
  while (a[j] <= a[i]) j--;
  int tmp = a[i];
  a[i] = a[j], a[j] = tmp;
  for (int l = i + 1, r = n - 1; l < r; l++, r--) tmp = a[l], a[l] = a[r], a[r] = tmp;
  return 1;
}

static long search_exhaustive(int n, const uint64_t *cost, int *best) {
  int cur[RING_EXHAUSTIVE_MAX];
  long tried = 0;
  for (int i = 0; i < n; i++) cur[i] = best[i] = i;
  uint64_t best_cost = ring_cost(n, cost, best);
  do {
    uint64_t c = ring_cost(n, cost, cur);
    tried++;
    if (c < best_cost) best_cost = c, memcpy(best, cur, sizeof(int) * n);
  } while (next_order(cur, n));
  return tried;
}

static void greedy(int n, const uint64_t *cost, int *order) {
  char used[RING_MAX_RANKS] = {0};
  order[0] = 0;
  used[0] = 1;
  for (int i = 1; i < n; i++) {
    int prev = order[i - 1], pick = -1;
    for (int r = 0; r < n; r++)
      if (!used[r] && (pick < 0 || cost[prev * n + r] < cost[prev * n + pick])) pick = r;
    order[i] = pick;
    used[pick] = 1;
  }
}

/* Reversing order[i..j] replaces edges (i-1,i) and (j,j+1) by (i-1,j) and (i,j+1). */
static long two_opt(int n, const uint64_t *cost, int *order) {
  long moves = 0;
  for (int improved = 1; improved;) {
    improved = 0;
    for (int i = 1; i < n - 1; i++) {
      for (int j = i + 1; j < n; j++) {
        int a = order[i - 1], b = order[i], c = order[j], d = order[(j + 1) % n];
        if (cost[a * n + c] + cost[b * n + d] >= cost[a * n + b] + cost[c * n + d]) continue;
        for (int l = i, r = j; l < r; l++, r--) {
          int tmp = order[l];
          order[l] = order[r], order[r] = tmp;
        }
        improved = 1;
        moves++;
      }
    }
  }
  return moves;
}

/* "0 1 3 2: 2 NVL + 2 PIX edges" */
static void describe(int n, const int *order, const uint64_t *cost, char *buf, size_t len) {
  size_t o = 0;
  for (int i = 0; i < n && o < len; i++)
    o += snprintf(buf + o, len - o, "%s%d", i ? " " : "", order[i]);
  uint64_t c = ring_cost(n, cost, order);
  const char *sep = ": ";
  for (int p = TOPO_PATH_SYS; p >= TOPO_PATH_LOC && o < len; p--) {
    unsigned count = (unsigned)((c >> (9 * p)) & 511);
    if (!count) continue;
    o += snprintf(buf + o, len - o, "%s%u %s", sep, count, topo_path_name((topo_path_t)p));
    sep = " + ";
  }
  if (o < len) snprintf(buf + o, len - o, " edges");
}

ncclResult_t topo_ring_order(const topo_t *t, int n, const topo_rank_loc_t *locs, int *order,
                             char *reason, size_t len) {
  if (n < 1 || n > RING_MAX_RANKS)
    return TUTTI_ERR(ncclInvalidArgument, "ring of %d local ranks: must be 1..%d", n,
                     RING_MAX_RANKS);
  uint64_t *cost = malloc(sizeof(*cost) * n * n);
  if (!cost) return TUTTI_ERR(ncclSystemError, "out of memory");
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) cost[a * n + b] = class_cost(rank_path(t, &locs[a], &locs[b]));
  char how[64], ring[TOPO_REASON_CHARS];
  if (n <= RING_EXHAUSTIVE_MAX) {
    long tried = search_exhaustive(n, cost, order);
    snprintf(how, sizeof(how), "best of %ld orders", tried);
  } else {
    greedy(n, cost, order);
    long moves = two_opt(n, cost, order);
    snprintf(how, sizeof(how), "nearest neighbour + %ld 2-opt moves", moves);
  }
  describe(n, order, cost, ring, sizeof(ring));
  if (reason && n == 1)
    snprintf(reason, len, "ring 0: a single rank");
  else if (reason)
    snprintf(reason, len, "ring %s (%s)", ring, how);
  free(cost);
  return ncclSuccess;
}

void topo_ring_hosts(int nranks, const uint64_t *host, const int *local_pos, int *order) {
  int k = 0;
  for (int r = 0; r < nranks; r++) {
    int first = 1;
    for (int q = 0; q < r && first; q++) first = host[q] != host[r];
    if (!first) continue;
    int start = k;
    for (int q = r; q < nranks; q++) {
      if (host[q] != host[r]) continue;
      int i = k++; /* insertion by (local_pos, rank) */
      while (i > start && local_pos[order[i - 1]] > local_pos[q]) order[i] = order[i - 1], i--;
      order[i] = q;
    }
  }
}

/* Each host's local ring (topo_ring_order on its ranks, in rank order), then the hosts. */
ncclResult_t topo_ring_global(const topo_t *t, int nranks, const uint64_t *host_hash,
                              const topo_rank_loc_t *locs, int *order) {
  ncclResult_t res = ncclSuccess;
  int *members = malloc(sizeof(int) * (size_t)nranks), *pos = malloc(sizeof(int) * (size_t)nranks);
  int *local = malloc(sizeof(int) * (size_t)nranks);
  topo_rank_loc_t *hl = malloc(sizeof(*hl) * (size_t)nranks);
  if (!members || !pos || !local || !hl) {
    res = TUTTI_ERR(ncclSystemError, "out of memory");
    goto out;
  }
  for (int r = 0; r < nranks; r++) {
    int first = 1, m = 0;
    for (int q = 0; q < r && first; q++) first = host_hash[q] != host_hash[r];
    if (!first) continue;
    for (int q = r; q < nranks; q++)
      if (host_hash[q] == host_hash[r]) members[m] = q, hl[m++] = locs[q];
    TUTTI_CHECK_GOTO(topo_ring_order(t, m, hl, local, NULL, 0), res, out);
    for (int i = 0; i < m; i++) pos[members[local[i]]] = i;
  }
  topo_ring_hosts(nranks, host_hash, pos, order);
out:
  free(members), free(pos), free(local), free(hl);
  return res;
}
