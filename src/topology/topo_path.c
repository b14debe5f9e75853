/* Path classes between devices, read from the hwloc tree (see the picture in topo.h).
 *
 * Two PCI objects a and b:
 *   a == b                                              LOC
 *   GPUs with NVLink between them                       NVL (topo_path_gpu_gpu)
 *   common ancestor inside a PCIe switch: count the switches on both ways up to it;
 *     one                                               PIX
 *     several                                           PXB
 *   common ancestor is a root port, a host bridge or a CPU-side object (package, machine):
 *     their CPU sides share a NUMA node                 PHB
 *     they do not                                       SYS
 * Bridge levels below a host bridge: 1 = root port, then alternately a switch's upstream port
 * (even levels; it names the switch) and its downstream ports (odd levels >= 3).
 */
#include <string.h>

#include "topology/topo_internal.h"

static const char *const path_names[TOPO_PATH_COUNT] = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"};

const char *topo_path_name(topo_path_t p) {
  return (p >= 0 && p < TOPO_PATH_COUNT) ? path_names[p] : "?";
}

int topo_path_parse(const char *s, topo_path_t *p) {
  for (int i = 0; s && i < TOPO_PATH_COUNT; i++) {
    if (strcasecmp(s, path_names[i]) == 0) {
      *p = (topo_path_t)i;
      return 0;
    }
  }
  return -1;
}

static int is_pci_bridge(hwloc_obj_t o) {
  return o && o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

/* Level of a PCI-PCI bridge below its host bridge: 1 for a root port. */
static int bridge_level(hwloc_obj_t o) {
  int level = 0;
  for (; is_pci_bridge(o); o = o->parent) level++;
  return level;
}

/* The switch a bridge belongs to (its upstream port), NULL for root ports and non-bridges. */
static hwloc_obj_t switch_of(hwloc_obj_t o) {
  int level = bridge_level(o);
  if (level < 2) return NULL;
  return (level % 2 == 0) ? o : o->parent;
}

/* Adds the switches between o (exclusive) and top (inclusive) to set[] (distinct). */
static int collect_switches(hwloc_obj_t o, hwloc_obj_t top, hwloc_obj_t *set, int n, int max) {
  for (o = o->parent; o; o = o->parent) {
    hwloc_obj_t sw = switch_of(o);
    int seen = 0;
    for (int i = 0; sw && i < n; i++) seen |= set[i] == sw;
    if (sw && !seen && n < max) set[n++] = sw;
    if (o == top) break;
  }
  return n;
}

/* hwloc_get_common_ancestor_obj compares depths, which I/O objects do not have (their depths
 * are negative "virtual" ones): walk the parent links instead. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b) {
  for (hwloc_obj_t x = a; x; x = x->parent) {
    for (hwloc_obj_t y = b; y; y = y->parent)
      if (x == y) return x;
  }
  return NULL;
}

static hwloc_obj_t cpu_side(const topo_t *t, hwloc_obj_t o) {
  return hwloc_get_non_io_ancestor_obj(t->hw, o);
}

static topo_path_t numa_path(hwloc_const_nodeset_t a, hwloc_const_nodeset_t b) {
  if (!a || !b || hwloc_bitmap_iszero(a) || hwloc_bitmap_iszero(b)) return TOPO_PATH_PHB;
  return hwloc_bitmap_intersects(a, b) ? TOPO_PATH_PHB : TOPO_PATH_SYS;
}

topo_path_t topo_path_objs(const topo_t *t, hwloc_obj_t a, hwloc_obj_t b) {
  if (a == b) return TOPO_PATH_LOC;
  hwloc_obj_t c = common_ancestor(a, b);
  if (c && bridge_level(c) >= 2) {
    hwloc_obj_t set[64];
    int n = collect_switches(a, c, set, 0, 64);
    n = collect_switches(b, c, set, n, 64);
    return n <= 1 ? TOPO_PATH_PIX : TOPO_PATH_PXB;
  }
  return numa_path(cpu_side(t, a)->nodeset, cpu_side(t, b)->nodeset);
}

/* The single object of a type covering a nodeset, as its os index; -1 when none or several. */
static int single_covering(const topo_t *t, hwloc_const_nodeset_t ns, hwloc_obj_type_t type) {
  int found = -1, count = 0;
  if (!ns || hwloc_bitmap_iszero(ns)) return -1;
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_obj_by_type(t->hw, type, o));) {
    if (!o->nodeset || !hwloc_bitmap_intersects(o->nodeset, ns)) continue;
    found = (int)o->os_index;
    count++;
  }
  return count == 1 ? found : -1;
}

int topo_obj_numa(const topo_t *t, hwloc_obj_t o) {
  return single_covering(t, cpu_side(t, o)->nodeset, HWLOC_OBJ_NUMANODE);
}

int topo_obj_package(const topo_t *t, hwloc_obj_t o) {
  return single_covering(t, cpu_side(t, o)->nodeset, HWLOC_OBJ_PACKAGE);
}

topo_path_t topo_path_gpu_gpu(const topo_t *t, int a, int b) {
  if (a < 0 || b < 0 || a >= t->ngpus || b >= t->ngpus) return TOPO_PATH_SYS;
  if (a == b) return TOPO_PATH_LOC;
  if (topo_nvlinks(t, a, b) > 0) return TOPO_PATH_NVL;
  return topo_path_objs(t, t->gpu_obj[a], t->gpu_obj[b]);
}

/* A NIC not on PCI (rare: platform devices) is compared by its CPU side only. */
static hwloc_obj_t nic_anchor(const topo_t *t, int nic) {
  hwloc_obj_t pci = topo_pci_of(t->nic_obj[nic]);
  return pci ? pci : cpu_side(t, t->nic_obj[nic]);
}

topo_path_t topo_path_gpu_nic(const topo_t *t, int gpu, int nic) {
  if (gpu < 0 || nic < 0 || gpu >= t->ngpus || nic >= t->nnics) return TOPO_PATH_SYS;
  hwloc_obj_t n = nic_anchor(t, nic);
  if (n->type != HWLOC_OBJ_PCI_DEVICE)
    return numa_path(cpu_side(t, t->gpu_obj[gpu])->nodeset, n->nodeset);
  return topo_path_objs(t, t->gpu_obj[gpu], n);
}

topo_path_t topo_path_nic_nic(const topo_t *t, int a, int b) {
  if (a < 0 || b < 0 || a >= t->nnics || b >= t->nnics) return TOPO_PATH_SYS;
  hwloc_obj_t x = nic_anchor(t, a), y = nic_anchor(t, b);
  if (x->type != HWLOC_OBJ_PCI_DEVICE || y->type != HWLOC_OBJ_PCI_DEVICE)
    return x == y ? TOPO_PATH_LOC : numa_path(x->nodeset, y->nodeset);
  return topo_path_objs(t, x, y);
}

topo_path_t topo_path_cpu_nic(const topo_t *t, const char *cpuset, int nic) {
  if (nic < 0 || nic >= t->nnics) return TOPO_PATH_SYS;
  hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
  topo_path_t p = TOPO_PATH_PHB;
  if (!cpus || !nodes) goto done;
  if (cpuset)
    hwloc_bitmap_list_sscanf(cpus, cpuset);
  else
    hwloc_bitmap_copy(cpus, hwloc_topology_get_topology_cpuset(t->hw));
  hwloc_cpuset_to_nodeset(t->hw, cpus, nodes);
  p = numa_path(nodes, cpu_side(t, t->nic_obj[nic])->nodeset);
done:
  hwloc_bitmap_free(cpus);
  hwloc_bitmap_free(nodes);
  return p;
}
