/* Placement decisions: the NIC of a rank, where its helper threads and staging memory live,
 * whether two GPUs may use P2P. Each comes with a reason for the INFO log. Rings: topo_ring.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/topo_internal.h"

/* A 0/1 setting (IGNORE_CPU_AFFINITY, P2P_DISABLE): 1 only for the integer 1; garbage is a
 * WARN and counts as 0. */
static int flag_setting(const char *name, char *which, size_t len) {
  const char *s = tutti_getenv_which(name, which, len);
  int64_t v = 0;
  const char *why = s ? tutti_parse_int(s, &v) : NULL;
  if (why) WARN("setting %s=\"%s\" %s; taken as 0", which, s, why);
  return !why && v == 1;
}

hwloc_bitmap_t topo_current_cpuset(const topo_t *t) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) return NULL;
  if (!t->live || hwloc_get_cpubind(t->hw, set, HWLOC_CPUBIND_THREAD) != 0 ||
      hwloc_bitmap_iszero(set))
    hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(t->hw));
  return set;
}

static int set_to_list(hwloc_const_bitmap_t set, char *buf, size_t len) {
  int n = hwloc_bitmap_list_snprintf(buf, len, set);
  return n >= 0 && (size_t)n < len;
}

/* ---- NIC ---- */

typedef struct {
  int n;
  int nic[64];
} nic_set_t;

static topo_path_t nic_path(const topo_t *t, int gpu, const char *cpuset, int nic) {
  return gpu >= 0 ? topo_path_gpu_nic(t, gpu, nic) : topo_path_cpu_nic(t, cpuset, nic);
}

/* The closest candidates, then among them the fastest (unknown speed counts as 0). */
static topo_path_t best_nics(const topo_t *t, const nic_set_t *cand, int gpu, const char *cpuset,
                             nic_set_t *best) {
  topo_path_t bp = TOPO_PATH_COUNT;
  long bs = -1;
  best->n = 0;
  for (int i = 0; i < cand->n; i++) {
    int nic = cand->nic[i];
    topo_path_t p = nic_path(t, gpu, cpuset, nic);
    long s = t->nics[nic].speed_mbps;
    if (p < bp || (p == bp && s > bs)) bp = p, bs = s, best->n = 0;
    if (p == bp && s == bs) best->nic[best->n++] = nic;
  }
  return bp;
}

static int same_set(const nic_set_t *a, const nic_set_t *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++)
    if (a->nic[i] != b->nic[i]) return 0;
  return 1;
}

/* GPUs whose closest NICs are the same set take them in turn (GPU order). Returns the turn
 * of gpu and the number of GPUs sharing the set. */
static int gpu_turn(const topo_t *t, const nic_set_t *cand, const nic_set_t *best, int gpu,
                    int *sharing) {
  int turn = 0;
  *sharing = 0;
  for (int g = 0; g < t->ngpus; g++) {
    nic_set_t other;
    best_nics(t, cand, g, NULL, &other);
    if (!same_set(&other, best)) continue;
    if (g < gpu) turn++;
    (*sharing)++;
  }
  return turn;
}

static void candidates(const topo_t *t, topo_nic_kind_t kind, const char *spec, nic_set_t *cand,
                       int *of_kind) {
  cand->n = 0;
  *of_kind = 0;
  for (int i = 0; i < t->nnics && cand->n < 64; i++) {
    const topo_nic_info_t *n = &t->nics[i];
    if (n->kind != kind) continue;
    (*of_kind)++;
    if (!n->active) continue;
    if (spec && !tutti_name_list_matches(spec, n->name)) continue;
    cand->nic[cand->n++] = i;
  }
}

static void no_nic(topo_nic_choice_t *out, const char *what, const char *which, const char *spec,
                   int of_kind) {
  out->nic = -1;
  out->path = TOPO_PATH_SYS;
  if (spec)
    snprintf(out->reason, sizeof(out->reason), "%s=%s matches none of the %d %s in the topology%s",
             which, spec, of_kind, what,
             of_kind ? "" : " (the transport may still find it outside hwloc)");
  else
    snprintf(out->reason, sizeof(out->reason), "no usable %s in the topology (%d seen)", what,
             of_kind);
}

void topo_choose_nic(const topo_t *t, topo_nic_kind_t kind, int gpu, const char *cpuset,
                     topo_nic_choice_t *out) {
  char which[64] = "", from[TOPO_SET_CHARS + 16], filter[TOPO_SET_CHARS + 96] = "";
  const char *what = kind == TOPO_NIC_IB ? "InfiniBand/RoCE HCAs" : "network interfaces";
  const char *spec =
      tutti_getenv_which(kind == TOPO_NIC_IB ? "IB_HCA" : "SOCKET_IFNAME", which, sizeof(which));
  char cur[TOPO_SET_CHARS];
  nic_set_t cand, best;
  int of_kind, sharing = 1, turn = 0;
  memset(out, 0, sizeof(*out));
  if (gpu >= t->ngpus) gpu = -1;
  if (gpu < 0 && !cpuset) {
    hwloc_bitmap_t set = topo_current_cpuset(t);
    if (set && set_to_list(set, cur, sizeof(cur))) cpuset = cur;
    hwloc_bitmap_free(set);
  }
  candidates(t, kind, spec, &cand, &of_kind);
  if (cand.n == 0) {
    no_nic(out, what, which, spec, of_kind);
    return;
  }
  out->path = best_nics(t, &cand, gpu, cpuset, &best);
  if (gpu >= 0 && best.n > 1) turn = gpu_turn(t, &cand, &best, gpu, &sharing);
  out->nic = best.nic[turn % best.n];
  snprintf(out->name, sizeof(out->name), "%s", t->nics[out->nic].name);
  if (gpu >= 0)
    snprintf(from, sizeof(from), "GPU %d", gpu);
  else
    snprintf(from, sizeof(from), "CPUs %s", cpuset ? cpuset : "(all)");
  if (spec) snprintf(filter, sizeof(filter), "; %s=%s kept %d of %d", which, spec, cand.n, of_kind);
  if (best.n == 1)
    snprintf(out->reason, sizeof(out->reason), "%s is the closest of %d %s to %s (%s)%s", out->name,
             cand.n, what, from, topo_path_name(out->path), filter);
  else
    snprintf(out->reason, sizeof(out->reason),
             "%d %s at %s from %s, shared by %d GPUs taking them in turn: #%d%s", best.n, what,
             topo_path_name(out->path), from, sharing, turn % best.n, filter);
}

/* ---- binding ---- */

/* NUMA node os index covering cpus, -1 when several (or none). */
static int numa_of_cpus(const topo_t *t, hwloc_const_cpuset_t cpus) {
  hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
  int numa = -1;
  if (!nodes) return -1;
  hwloc_cpuset_to_nodeset(t->hw, cpus, nodes);
  if (hwloc_bitmap_weight(nodes) == 1) numa = hwloc_bitmap_first(nodes);
  hwloc_bitmap_free(nodes);
  return numa;
}

int topo_helper_cpus(const topo_t *t, int cpu, char *node, char *allowed, size_t len) {
  if (!t || !t->live) return -1;
  hwloc_const_cpuset_t ok = hwloc_topology_get_allowed_cpuset(t->hw);
  hwloc_obj_t n = NULL;
  while ((n = hwloc_get_next_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, n)))
    if (hwloc_bitmap_isset(n->cpuset, (unsigned)cpu)) break;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) return -1;
  hwloc_bitmap_and(set, n ? n->cpuset : ok, ok);
  int fits = set_to_list(set, node, len) && set_to_list(ok, allowed, len);
  hwloc_bitmap_free(set);
  return fits ? 0 : -1;
}

int topo_current_numa(const topo_t *t) {
  if (!t || !t->live || hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE) < 2) return -1;
  hwloc_bitmap_t cur = topo_current_cpuset(t);
  int numa = cur ? numa_of_cpus(t, cur) : -1;
  hwloc_bitmap_free(cur);
  return numa;
}

static void bind_without_gpu(const topo_t *t, hwloc_const_cpuset_t cur, topo_binding_t *out) {
  int nnuma = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
  out->numa = numa_of_cpus(t, cur);
  out->membind = out->numa >= 0 && nnuma > 1;
  if (out->numa >= 0)
    snprintf(out->reason, sizeof(out->reason), "no GPU: keep the launcher's CPUs %s (NUMA %d)%s",
             out->cpuset, out->numa, out->membind ? ", memory there" : "");
  else
    snprintf(out->reason, sizeof(out->reason),
             "no GPU and CPUs %s span NUMA nodes: left to the kernel (bind with the launcher, "
             "e.g. mpirun --bind-to numa)",
             out->cpuset);
}

static void bind_with_gpu(const topo_t *t, int gpu, hwloc_const_cpuset_t cur, hwloc_bitmap_t target,
                          topo_binding_t *out) {
  hwloc_obj_t side = hwloc_get_non_io_ancestor_obj(t->hw, t->gpu_obj[gpu]);
  int nnuma = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
  char which[64], local[TOPO_SET_CHARS] = "?";
  int ignored = flag_setting("IGNORE_CPU_AFFINITY", which, sizeof(which));
  set_to_list(side->cpuset, local, sizeof(local));
  if (ignored)
    hwloc_bitmap_copy(target, side->cpuset);
  else
    hwloc_bitmap_and(target, side->cpuset, cur);
  if (hwloc_bitmap_iszero(target)) {
    hwloc_bitmap_copy(target, cur);
    set_to_list(target, out->cpuset, sizeof(out->cpuset));
    out->numa = numa_of_cpus(t, cur);
    out->membind = out->numa >= 0 && nnuma > 1;
    snprintf(out->reason, sizeof(out->reason),
             "the launcher's CPUs %s exclude GPU %d's CPUs %s: kept the launcher's binding",
             out->cpuset, gpu, local);
    return;
  }
  set_to_list(target, out->cpuset, sizeof(out->cpuset));
  out->numa = t->gpus[gpu].numa;
  out->cpubind = !hwloc_bitmap_isequal(target, cur);
  out->membind = out->numa >= 0 && nnuma > 1;
  const char *note = ignored        ? "; launcher's binding ignored (IGNORE_CPU_AFFINITY=1)"
                     : nnuma == 1   ? "; the only NUMA node"
                     : out->cpubind ? ""
                                    : "; the launcher's binding is already within it";
  if (out->numa >= 0)
    snprintf(out->reason, sizeof(out->reason), "GPU %d is local to NUMA %d (CPUs %s)%s", gpu,
             out->numa, local, note);
  else
    snprintf(out->reason, sizeof(out->reason),
             "GPU %d's locality spans several NUMA nodes (CPUs %s): memory left to the kernel%s",
             gpu, local, note);
}

void topo_choose_binding(const topo_t *t, int gpu, const char *current, topo_binding_t *out) {
  hwloc_bitmap_t cur = NULL, target = hwloc_bitmap_alloc();
  memset(out, 0, sizeof(*out));
  out->numa = -1;
  if (current && target && (cur = hwloc_bitmap_alloc()) &&
      (hwloc_bitmap_list_sscanf(cur, current) != 0 || hwloc_bitmap_iszero(cur))) {
    snprintf(out->reason, sizeof(out->reason), "\"%.64s\" is not a CPU set: no binding", current);
    goto done;
  }
  if (!current && target) cur = topo_current_cpuset(t);
  if (!cur || !target) {
    snprintf(out->reason, sizeof(out->reason), "out of memory: no binding");
  } else if (!set_to_list(cur, out->cpuset, sizeof(out->cpuset))) {
    snprintf(out->reason, sizeof(out->reason), "CPU set too long to record: no binding");
    out->cpuset[0] = '\0';
  } else if (gpu >= 0 && gpu < t->ngpus) {
    bind_with_gpu(t, gpu, cur, target, out);
  } else {
    bind_without_gpu(t, cur, out);
  }
done:
  if (out->cpuset[0] == '\0') out->cpubind = out->membind = 0;
  hwloc_bitmap_free(cur);
  hwloc_bitmap_free(target);
}

/* Local rank i of m takes set i of hwloc_distrib over the allowed CPUs: m sets spread over
 * packages, NUMA nodes, caches and cores in turn, each as large as the split allows (2 ranks on
 * 2 packages: a package each; more ranks than CPUs: ranks share). */
static int distrib_share(const topo_t *t, int local_rank, int local_size, hwloc_bitmap_t out) {
  hwloc_bitmap_t *sets = calloc((size_t)local_size, sizeof(*sets));
  hwloc_obj_t root = hwloc_get_root_obj(t->hw);
  int ok = 0;
  if (!sets) return 0;
  if (hwloc_distrib(t->hw, &root, 1, sets, (unsigned)local_size, INT_MAX, 0) == 0) {
    hwloc_bitmap_and(out, sets[local_rank], hwloc_topology_get_allowed_cpuset(t->hw));
    ok = !hwloc_bitmap_iszero(out);
  }
  for (int i = 0; i < local_size; i++) hwloc_bitmap_free(sets[i]);
  free(sets);
  return ok;
}

void topo_choose_binding_local(const topo_t *t, int gpu, int local_rank, int local_size,
                               topo_binding_t *out) {
  topo_choose_binding(t, gpu, NULL, out);
  if ((gpu >= 0 && gpu < t->ngpus) || local_size <= 1 || local_rank < 0 ||
      local_rank >= local_size || out->cpuset[0] == '\0')
    return;
  hwloc_bitmap_t cur = hwloc_bitmap_alloc(), share = hwloc_bitmap_alloc();
  int nnuma = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
  char launcher[TOPO_SET_CHARS];
  snprintf(launcher, sizeof(launcher), "%s", out->cpuset);
  if (!cur || !share || hwloc_bitmap_list_sscanf(cur, launcher) != 0) goto done;
  if (!hwloc_bitmap_isequal(cur, hwloc_topology_get_allowed_cpuset(t->hw))) {
    snprintf(out->reason, sizeof(out->reason),
             "no GPU; the launcher bound this rank to CPUs %s: kept (NUMA %d%s)", launcher,
             out->numa, out->membind ? ", memory there" : "");
    goto done;
  }
  if (!distrib_share(t, local_rank, local_size, share) ||
      !set_to_list(share, out->cpuset, sizeof(out->cpuset))) {
    snprintf(out->cpuset, sizeof(out->cpuset), "%s", launcher);
    goto done;
  }
  out->numa = numa_of_cpus(t, share);
  out->cpubind = !hwloc_bitmap_isequal(share, cur);
  out->membind = out->numa >= 0 && nnuma > 1;
  snprintf(out->reason, sizeof(out->reason),
           "no GPU, launcher's CPUs %s unbound: local rank %d of %d takes its share %s "
           "(hwloc_distrib over packages, NUMA nodes, cores)%s",
           launcher, local_rank, local_size, out->cpuset,
           out->membind ? ", memory on its node" : "");
done:
  hwloc_bitmap_free(cur);
  hwloc_bitmap_free(share);
}

static void save_binding(const topo_t *t, topo_saved_binding_t *saved) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_membind_policy_t policy;
  memset(saved, 0, sizeof(*saved));
  if (!set) return;
  if (hwloc_get_cpubind(t->hw, set, HWLOC_CPUBIND_THREAD) == 0)
    saved->has_cpu = set_to_list(set, saved->cpuset, sizeof(saved->cpuset));
  if (hwloc_get_membind(t->hw, set, &policy, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0) {
    saved->has_mem = set_to_list(set, saved->nodeset, sizeof(saved->nodeset));
    saved->mem_policy = (int)policy;
  }
  hwloc_bitmap_free(set);
}

/* hwloc's BIND without HWLOC_MEMBIND_STRICT on one node is Linux's MPOL_PREFERRED: allocations
 * go to the node while it has memory, and elsewhere after that instead of failing. */
void topo_bind_thread(const topo_t *t, const topo_binding_t *b, topo_saved_binding_t *saved) {
  if (saved) memset(saved, 0, sizeof(*saved));
  if (!t->live) {
    INFO(SUB_INIT, "topology from %s: binding not applied (HWLOC_THISSYSTEM=1 applies it)",
         t->source);
    return;
  }
  if (!b->cpubind && !b->membind) return;
  if (saved) save_binding(t, saved);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) return;
  if (b->cpubind && (hwloc_bitmap_list_sscanf(set, b->cpuset) != 0 ||
                     hwloc_set_cpubind(t->hw, set, HWLOC_CPUBIND_THREAD) != 0))
    WARN("could not bind this thread to CPUs %s (%s); continuing unbound", b->cpuset,
         strerror(errno));
  if (b->membind) {
    hwloc_bitmap_only(set, (unsigned)b->numa);
    if (hwloc_set_membind(t->hw, set, HWLOC_MEMBIND_BIND,
                          HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0)
      WARN("could not prefer NUMA node %d for this thread's memory (%s); continuing", b->numa,
           strerror(errno));
  }
  hwloc_bitmap_free(set);
  INFO(SUB_INIT, "bound this thread: CPUs %s%s, memory %s", b->cpuset,
       b->cpubind ? "" : " (unchanged)", b->membind ? "on its NUMA node" : "unchanged");
}

void topo_restore_thread(const topo_t *t, const topo_saved_binding_t *saved) {
  if (!t->live || !saved) return;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) return;
  if (saved->has_cpu && hwloc_bitmap_list_sscanf(set, saved->cpuset) == 0 &&
      hwloc_set_cpubind(t->hw, set, HWLOC_CPUBIND_THREAD) != 0)
    WARN("could not restore this thread's CPUs %s (%s)", saved->cpuset, strerror(errno));
  if (saved->has_mem && hwloc_bitmap_list_sscanf(set, saved->nodeset) == 0 &&
      hwloc_set_membind(t->hw, set, (hwloc_membind_policy_t)saved->mem_policy,
                        HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0)
    WARN("could not restore this thread's memory policy (%s)", strerror(errno));
  hwloc_bitmap_free(set);
}

/* ---- P2P ---- */

/* NCCL's legacy integer levels: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS. */
static const topo_path_t legacy_levels[] = {TOPO_PATH_LOC, TOPO_PATH_PIX, TOPO_PATH_PXB,
                                            TOPO_PATH_PHB, TOPO_PATH_SYS};

topo_path_t topo_p2p_level(char *reason, size_t len) {
  char which[64];
  topo_path_t level = TOPO_PATH_PXB;
  if (flag_setting("P2P_DISABLE", which, sizeof(which))) {
    if (reason) snprintf(reason, len, "%s=1: P2P only within a GPU (LOC)", which);
    return TOPO_PATH_LOC;
  }
  const char *s = tutti_getenv_which("P2P_LEVEL", which, sizeof(which));
  int64_t old = -1;
  if (s && topo_path_parse(s, &level) == 0) {
    if (reason) snprintf(reason, len, "%s=%s", which, s);
  } else if (s && !tutti_parse_int(s, &old) && old >= 0) {
    level = legacy_levels[old > 4 ? 4 : old];
    if (reason)
      snprintf(reason, len, "%s=%s (legacy number) = %s", which, s, topo_path_name(level));
  } else {
    if (s) WARN("%s=%s is not one of LOC, NVL, PIX, PXB, PHB, SYS or 0-5: using PXB", which, s);
    level = TOPO_PATH_PXB;
    if (reason) snprintf(reason, len, "default level PXB");
  }
  return level;
}

int topo_p2p_allowed(const topo_t *t, int a, int b, topo_path_t level, char *reason, size_t len) {
  if (a < 0 || b < 0 || a >= t->ngpus || b >= t->ngpus) {
    if (reason) snprintf(reason, len, "GPU %d or %d is not in the topology", a, b);
    return 0;
  }
  topo_path_t p = topo_path_gpu_gpu(t, a, b);
  int ok = p <= level;
  if (reason)
    snprintf(reason, len, "GPU %d - GPU %d path %s %s level %s: P2P %s", a, b, topo_path_name(p),
             ok ? "within" : "beyond", topo_path_name(level), ok ? "allowed" : "not allowed");
  return ok;
}
