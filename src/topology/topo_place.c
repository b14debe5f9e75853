/* Launcher placement: which CPUs each of a job's ranks is bound to (tutti-run --bind).
 *
 * The units are the cores (hwloc Core objects) the launcher may use, cut to its CPU mask; with
 * more ranks than such cores but no more than their PUs, the PUs (hardware threads). Each unit
 * belongs to a NUMA node. Units that another live job has claimed ("busy", tutti-run's
 * registry) are left out while the free ones suffice; otherwise the busy ones follow the free
 * ones and the result counts the ranks that share.
 *
 *   NUMA 0: core 0 core 1 core 2 core 3      spread, 4 ranks: r0 r1 | r2 r3   (blocks, balanced)
 *   NUMA 1: core 4 core 5 core 6 core 7      pack,   4 ranks: r0 r1 r2 r3 | -  (node 0 first)
 *
 * spread gives each node a balanced share of the ranks (one at a time, round-robin over the
 * nodes that have units left) and hands the shares out in blocks of consecutive ranks, so the
 * ring (rank order, then topology order) crosses between nodes as few times as possible while
 * every node's memory controllers are used; pack fills one node before the next (Open MPI's
 * --map-by core). A NUMA-unit rank (TOPO_PLACE_NUMA) gets every candidate CPU of its node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/topo_internal.h"

typedef struct place_unit {
  hwloc_bitmap_t set; /* the unit's CPUs within the mask */
  int node;           /* index into the node list */
  int busy;
} place_unit_t;

typedef struct place_ctx {
  const topo_t *t;
  hwloc_bitmap_t allowed, busy;
  int nnodes;
  hwloc_obj_t *nodes; /* NULL entry: the whole machine (no NUMA objects) */
  place_unit_t *units;
  int nunits;
} place_ctx_t;

static void place_free(place_ctx_t *c) {
  for (int i = 0; i < c->nunits; i++) hwloc_bitmap_free(c->units[i].set);
  free(c->units);
  free(c->nodes);
  hwloc_bitmap_free(c->allowed);
  hwloc_bitmap_free(c->busy);
}

static hwloc_const_cpuset_t node_cpuset(const place_ctx_t *c, int node) {
  return c->nodes[node] ? c->nodes[node]->cpuset : hwloc_topology_get_topology_cpuset(c->t->hw);
}

static int place_add(place_ctx_t *c, hwloc_const_cpuset_t cpus, int node, hwloc_bitmap_t covered) {
  hwloc_bitmap_t s = hwloc_bitmap_alloc();
  if (!s) return -1;
  hwloc_bitmap_and(s, cpus, c->allowed);
  if (hwloc_bitmap_iszero(s) || hwloc_bitmap_intersects(s, covered)) {
    hwloc_bitmap_free(s);
    return 0;
  }
  hwloc_bitmap_or(covered, covered, s);
  c->units[c->nunits++] =
      (place_unit_t){.set = s, .node = node, .busy = hwloc_bitmap_intersects(s, c->busy)};
  return 0;
}

/* Node n's hardware threads: the first thread of every core, then the second of every core, ...
 * so that ranks share a core only once every core has one. */
static int place_add_threads(place_ctx_t *c, int n, hwloc_bitmap_t covered) {
  hwloc_topology_t hw = c->t->hw;
  int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(hw, node_cpuset(c, n), HWLOC_OBJ_CORE);
  if (ncores <= 0) { /* no Core objects: the PUs as they come */
    hwloc_obj_t pu = NULL;
    while ((pu = hwloc_get_next_obj_inside_cpuset_by_type(hw, node_cpuset(c, n), HWLOC_OBJ_PU, pu)))
      if (place_add(c, pu->cpuset, n, covered) != 0) return -1;
    return 0;
  }
  for (int k = 0, more = 1; more; k++) {
    more = 0;
    for (int i = 0; i < ncores; i++) {
      hwloc_obj_t core =
          hwloc_get_obj_inside_cpuset_by_type(hw, node_cpuset(c, n), HWLOC_OBJ_CORE, (unsigned)i);
      hwloc_obj_t pu =
          hwloc_get_obj_inside_cpuset_by_type(hw, core->cpuset, HWLOC_OBJ_PU, (unsigned)k);
      if (!pu) continue;
      more = 1;
      if (place_add(c, pu->cpuset, n, covered) != 0) return -1;
    }
  }
  return 0;
}

/* Units of one type (cores or PUs) in node order; returns how many, -1 when out of memory. A
 * unit is listed once even where NUMA nodes share CPUs (a memory-only node beside a DRAM node
 * carries its parent's cpuset in hwloc 2). */
static int place_collect(place_ctx_t *c, hwloc_obj_type_t type) {
  int cap = hwloc_get_nbobjs_by_type(c->t->hw, HWLOC_OBJ_PU), rc = 0;
  hwloc_bitmap_t covered = hwloc_bitmap_alloc();
  c->units = calloc((size_t)(cap > 0 ? cap : 1), sizeof(*c->units));
  c->nunits = 0;
  for (int n = 0; n < c->nnodes && rc == 0 && c->units && covered; n++) {
    if (type == HWLOC_OBJ_PU) {
      rc = place_add_threads(c, n, covered);
      continue;
    }
    hwloc_obj_t o = NULL;
    while (rc == 0 &&
           (o = hwloc_get_next_obj_inside_cpuset_by_type(c->t->hw, node_cpuset(c, n), type, o)))
      rc = place_add(c, o->cpuset, n, covered);
  }
  rc = rc || !c->units || !covered ? -1 : c->nunits;
  hwloc_bitmap_free(covered);
  return rc;
}

static void place_drop_units(place_ctx_t *c) {
  for (int i = 0; i < c->nunits; i++) hwloc_bitmap_free(c->units[i].set);
  free(c->units);
  c->units = NULL;
  c->nunits = 0;
}

static int place_init(place_ctx_t *c, const topo_t *t, const char *allowed, const char *busy) {
  memset(c, 0, sizeof(*c));
  c->t = t;
  c->busy = hwloc_bitmap_alloc();
  c->allowed = allowed ? hwloc_bitmap_alloc() : topo_current_cpuset(t);
  if (!c->busy || !c->allowed) return -1;
  if (allowed && hwloc_bitmap_list_sscanf(c->allowed, allowed) != 0) return -2;
  if (busy && *busy && hwloc_bitmap_list_sscanf(c->busy, busy) != 0) return -2;
  hwloc_bitmap_and(c->allowed, c->allowed, hwloc_topology_get_allowed_cpuset(t->hw));
  int n = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
  c->nnodes = n > 0 ? n : 1;
  c->nodes = calloc((size_t)c->nnodes, sizeof(*c->nodes));
  if (!c->nodes) return -1;
  for (int i = 0; i < n; i++) c->nodes[i] = hwloc_get_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, i);
  return 0;
}

/* Per node, the units ranks may take (free ones first, then busy ones when the free ones do
 * not suffice): order[] lists unit indices node by node, cap[node] how many. */
static int place_candidates(const place_ctx_t *c, int nranks, int *order, int *cap) {
  int nfree = 0, k = 0;
  for (int i = 0; i < c->nunits; i++) nfree += !c->units[i].busy;
  int use_busy = nfree < nranks;
  for (int n = 0; n < c->nnodes; n++) {
    cap[n] = 0;
    for (int pass = 0; pass < 1 + use_busy; pass++)
      for (int i = 0; i < c->nunits; i++)
        if (c->units[i].node == n && c->units[i].busy == pass) order[k++] = i, cap[n]++;
  }
  return use_busy ? nranks - nfree : 0;
}

/* Ranks per node: spread round-robin over the nodes with units left, or pack node by node.
 * unlimited: no cap (NUMA units with more ranks than units). */
static void place_quotas(int nnodes, const int *cap, int nranks, int spread, int unlimited,
                         int *quota) {
  memset(quota, 0, sizeof(*quota) * (size_t)nnodes);
  int left = nranks, room = 0;
  for (int n = 0; n < nnodes; n++) room += cap[n] > 0;
  if (room == 0) return;
  for (int n = 0; !spread && n < nnodes && left > 0; n++) {
    int take = cap[n] < left ? cap[n] : left;
    quota[n] = take, left -= take;
  }
  while (left > 0)
    for (int n = 0; n < nnodes && left > 0; n++)
      if (cap[n] > 0 && (unlimited || quota[n] < cap[n])) quota[n]++, left--;
}

static int node_os_index(const place_ctx_t *c, int node) {
  return c->nodes[node] ? (int)c->nodes[node]->os_index : -1;
}

/* Writes rank r's set: its unit (CORE) or every candidate unit of its node (NUMA). */
static int place_write(const place_ctx_t *c, const int *order, const int *cap, const int *quota,
                       topo_place_unit_t unit, topo_place_t *out) {
  hwloc_bitmap_t s = hwloc_bitmap_alloc();
  int r = 0, first = 0;
  if (!s) return -1;
  for (int n = 0; n < c->nnodes; n++) {
    hwloc_bitmap_zero(s);
    for (int i = 0; i < cap[n]; i++) hwloc_bitmap_or(s, s, c->units[order[first + i]].set);
    for (int i = 0; i < quota[n]; i++, r++) {
      hwloc_const_bitmap_t set = unit == TOPO_PLACE_NUMA ? s : c->units[order[first + i]].set;
      if (hwloc_bitmap_list_snprintf(out->cpuset[r], TOPO_SET_CHARS, set) >= TOPO_SET_CHARS) {
        hwloc_bitmap_free(s);
        return -1;
      }
      out->numa[r] = node_os_index(c, n);
    }
    first += cap[n];
  }
  hwloc_bitmap_free(s);
  return 0;
}

static int place_units(place_ctx_t *c, int nranks, topo_place_unit_t unit, topo_place_t *out) {
  int ncores = place_collect(c, HWLOC_OBJ_CORE);
  if (ncores < 0) return -1;
  out->hwthreads = 0;
  if (unit == TOPO_PLACE_CORE && ncores < nranks) { /* hardware threads, if they suffice */
    place_drop_units(c);
    if (place_collect(c, HWLOC_OBJ_PU) < 0) return -1;
    out->hwthreads = c->nunits > ncores;
  }
  if (c->nunits == 0 && place_collect(c, HWLOC_OBJ_PU) < 0) return -1; /* no Core objects */
  out->units = c->nunits;
  return 0;
}

static void place_reason(const place_ctx_t *c, int nranks, int spread, topo_place_unit_t unit,
                         const int *quota, topo_place_t *out) {
  char *p = out->reason;
  size_t len = sizeof(out->reason), o = 0;
  o += (size_t)snprintf(p + o, len - o, "%d rank%s on %d %s%s", nranks, nranks == 1 ? "" : "s",
                        out->units, out->hwthreads ? "hardware threads" : "cores",
                        unit == TOPO_PLACE_NUMA ? " (bound to their NUMA node's CPUs)" : "");
  for (int n = 0; n < c->nnodes && o < len; n++)
    if (quota[n] > 0)
      o += (size_t)snprintf(p + o, len - o, "%s NUMA %d: %d", n ? "," : ";", node_os_index(c, n),
                            quota[n]);
  if (o < len)
    o += (size_t)snprintf(p + o, len - o, " (%s)",
                          spread ? "spread: balanced over NUMA nodes, consecutive ranks together"
                                 : "pack: one NUMA node filled before the next");
  if (out->shared > 0 && o < len)
    snprintf(p + o, len - o, "; %d rank%s on CPUs another job claimed", out->shared,
             out->shared == 1 ? "" : "s");
}

ncclResult_t topo_place_ranks(const topo_t *t, const char *allowed, const char *busy, int nranks,
                              topo_place_unit_t unit, int spread, topo_place_t *out) {
  place_ctx_t c;
  ncclResult_t res = ncclSuccess;
  memset(&c, 0, sizeof(c));
  memset(out, 0, sizeof(*out));
  if (nranks < 1 || nranks > TOPO_PLACE_MAX_RANKS)
    return TUTTI_ERR(ncclInvalidArgument, "topo_place_ranks: nranks %d not in [1, %d]", nranks,
                     TOPO_PLACE_MAX_RANKS);
  out->cpuset = calloc((size_t)nranks, sizeof(*out->cpuset));
  out->numa = calloc((size_t)nranks, sizeof(*out->numa));
  int rc = out->cpuset && out->numa ? place_init(&c, t, allowed, busy) : -1;
  int *order = NULL, *cap = NULL, *quota = NULL;
  if (rc == -2) {
    res = TUTTI_ERR(ncclInvalidArgument, "topo_place_ranks: \"%s\" or \"%s\" is not a CPU list",
                    allowed ? allowed : "", busy ? busy : "");
    goto done;
  }
  if (rc != 0 || place_units(&c, nranks, unit, out) != 0) goto oom;
  if (c.nunits == 0) {
    res = TUTTI_ERR(ncclInvalidUsage, "topo_place_ranks: no CPU of %s in the topology (%s)",
                    allowed ? allowed : "the current binding", topo_source(t));
    goto done;
  }
  order = calloc((size_t)c.nunits + 1, sizeof(int));
  cap = calloc((size_t)c.nnodes, sizeof(int));
  quota = calloc((size_t)c.nnodes, sizeof(int));
  if (!order || !cap || !quota) goto oom;
  out->fits = c.nunits >= nranks;
  if (!out->fits && unit == TOPO_PLACE_CORE) {
    snprintf(out->reason, sizeof(out->reason), "%d ranks but %d CPUs", nranks, c.nunits);
    goto done;
  }
  out->shared = place_candidates(&c, nranks, order, cap);
  if (!out->fits) out->shared = 0; /* NUMA units, oversubscribed: every node is shared anyway */
  place_quotas(c.nnodes, cap, nranks, spread, !out->fits, quota);
  if (place_write(&c, order, cap, quota, unit, out) != 0) goto oom;
  out->nranks = nranks;
  place_reason(&c, nranks, spread, unit, quota, out);
  goto done;
oom:
  res = TUTTI_ERR(ncclSystemError, "topo_place_ranks: out of memory or CPU list too long");
done:
  free(order), free(cap), free(quota);
  place_free(&c);
  return res;
}

void topo_place_free(topo_place_t *p) {
  free(p->cpuset);
  free(p->numa);
  p->cpuset = NULL;
  p->numa = NULL;
}
