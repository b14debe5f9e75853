/* The topology and its decisions in readable text (tutti-topo, bug reports), and the XML dump.
 *
 *   Machine (2048 GiB) from dgx-h100.xml
 *     Package P#0 "Intel(R) Xeon(R) Platinum 8480C", CPUs 0-7,16-23
 *       NUMANode P#0 (1024 GiB)
 *       L3 105 MiB x1, L2 2 MiB x8, L1d 48 KiB x8; 8 cores, 16 PUs
 *       HostBridge 0000:[10-1f]
 *         PCIBridge 0000:10:01.0 (root port)
 *           PCIBridge 0000:11:00.0 (switch)
 *             PCIBridge 0000:12:00.0 (switch port)
 *               PCI 0000:13:00.0 [10de:2330] GPU 0, NVLink nvswitch*18
 *   ...then the GPU/NIC path matrix, as `nvidia-smi topo -m`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topology/topo_internal.h"

static void indent(FILE *f, int depth) {
  fprintf(f, "%*s", 2 * depth, "");
}

static void human_bytes(unsigned long long b, char *buf, size_t len) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && b % 1024 == 0 && u < 4) b /= 1024, u++;
  if (b >= 10240 && u < 4) b /= 1024, u++; /* not a round number: approximate */
  snprintf(buf, len, "%llu %s", b, units[u]);
}

static int gpu_index_of(const topo_t *t, hwloc_obj_t o) {
  for (int i = 0; i < t->ngpus; i++)
    if (t->gpu_obj[i] == o) return i;
  return -1;
}

static int nic_index_of(const topo_t *t, hwloc_obj_t o) {
  for (int i = 0; i < t->nnics; i++)
    if (t->nic_obj[i] == o) return i;
  return -1;
}

static const char *bridge_role(hwloc_obj_t o) {
  int level = 0;
  for (hwloc_obj_t p = o;
       p && p->type == HWLOC_OBJ_BRIDGE && p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
       p = p->parent)
    level++;
  return level == 1 ? "root port" : level % 2 == 0 ? "switch" : "switch port";
}

static void print_osdev(const topo_t *t, hwloc_obj_t o, FILE *f) {
  int nic = nic_index_of(t, o);
  fprintf(f, "%s", o->name ? o->name : "?");
  if (nic < 0) return;
  const topo_nic_info_t *n = &t->nics[nic];
  fprintf(f, " (NIC %d, %s", nic, n->kind == TOPO_NIC_IB ? "InfiniBand/RoCE" : "network");
  if (n->speed_mbps) fprintf(f, ", %ld Gb/s", n->speed_mbps / 1000);
  if (n->kind == TOPO_NIC_IB) fprintf(f, ", %s", n->active ? "active" : "no active port");
  fprintf(f, ")");
}

static void print_io(const topo_t *t, hwloc_obj_t o, int depth, FILE *f) {
  indent(f, depth);
  if (o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
    const struct hwloc_bridge_attr_s *b = &o->attr->bridge;
    fprintf(f, "HostBridge %04x:[%02x-%02x]\n", b->downstream.pci.domain,
            b->downstream.pci.secondary_bus, b->downstream.pci.subordinate_bus);
  } else if (o->type == HWLOC_OBJ_BRIDGE || o->type == HWLOC_OBJ_PCI_DEVICE) {
    const struct hwloc_pcidev_attr_s *p = &o->attr->pcidev;
    int gpu = gpu_index_of(t, o);
    fprintf(f, "%s %04x:%02x:%02x.%x [%04x:%04x]",
            o->type == HWLOC_OBJ_BRIDGE ? "PCIBridge" : "PCI", p->domain, p->bus, p->dev, p->func,
            p->vendor_id, p->device_id);
    if (o->type == HWLOC_OBJ_BRIDGE) fprintf(f, " (%s)", bridge_role(o));
    if (gpu >= 0) fprintf(f, " GPU %d", gpu);
    const char *nvl = hwloc_obj_get_info_by_name(o, TOPO_NVLINK_PEERS);
    if (nvl) fprintf(f, ", NVLink %s", nvl);
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
      if (c->type == HWLOC_OBJ_OS_DEVICE) fprintf(f, " - "), print_osdev(t, c, f);
    fprintf(f, "\n");
  }
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
    if (c->type != HWLOC_OBJ_OS_DEVICE) print_io(t, c, depth + 1, f);
}

/* I/O hanging from o or from any CPU-side object below it. */
static void print_io_under(const topo_t *t, hwloc_obj_t o, int depth, FILE *f) {
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) print_io(t, c, depth, f);
  for (unsigned i = 0; i < o->arity; i++) print_io_under(t, o->children[i], depth, f);
}

static void print_caches(const topo_t *t, hwloc_const_cpuset_t set, int depth, FILE *f) {
  static const hwloc_obj_type_t types[] = {HWLOC_OBJ_L5CACHE, HWLOC_OBJ_L4CACHE,
                                           HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L2CACHE,
                                           HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L1ICACHE};
  const char *sep = "";
  indent(f, depth);
  for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
    int n = hwloc_get_nbobjs_inside_cpuset_by_type(t->hw, set, types[i]);
    hwloc_obj_t c = hwloc_get_next_obj_inside_cpuset_by_type(t->hw, set, types[i], NULL);
    if (!n || !c) continue;
    char type[16], size[32];
    hwloc_obj_type_snprintf(type, sizeof(type), c, 0);
    human_bytes(c->attr->cache.size, size, sizeof(size));
    fprintf(f, "%s%s %s x%d", sep, type, size, n);
    sep = ", ";
  }
  fprintf(f, "%s%d cores, %d PUs\n", *sep ? "; " : "",
          hwloc_get_nbobjs_inside_cpuset_by_type(t->hw, set, HWLOC_OBJ_CORE),
          hwloc_get_nbobjs_inside_cpuset_by_type(t->hw, set, HWLOC_OBJ_PU));
}

static void print_numa(const topo_t *t, hwloc_const_nodeset_t ns, int depth, FILE *f) {
  for (hwloc_obj_t n = NULL; (n = hwloc_get_next_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, n));) {
    if (!hwloc_bitmap_isset(ns, n->os_index)) continue;
    char mem[32], cpus[TOPO_SET_CHARS];
    human_bytes(n->attr->numanode.local_memory, mem, sizeof(mem));
    hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), n->cpuset);
    indent(f, depth);
    fprintf(f, "NUMANode P#%u (%s), CPUs %s\n", n->os_index, mem, cpus);
  }
}

static void print_package(const topo_t *t, hwloc_obj_t p, FILE *f) {
  char cpus[TOPO_SET_CHARS];
  const char *model = hwloc_obj_get_info_by_name(p, "CPUModel");
  hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), p->cpuset);
  fprintf(f, "  Package P#%u \"%s\", CPUs %s\n", p->os_index, model ? model : "?", cpus);
  print_numa(t, p->nodeset, 2, f);
  print_caches(t, p->cpuset, 2, f);
  print_io_under(t, p, 2, f);
}

/* Packages (with the I/O below them), then I/O attached higher up: to groups of packages, or
 * to the machine when hwloc does not know the locality (VMs). */
static void print_tree(const topo_t *t, hwloc_obj_t o, FILE *f) {
  if (o->type == HWLOC_OBJ_PACKAGE) {
    print_package(t, o, f);
    return;
  }
  for (unsigned i = 0; i < o->arity; i++) print_tree(t, o->children[i], f);
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) print_io(t, c, 1, f);
}

static void print_matrix_cell(const topo_t *t, int gpu_row, int nic_row, int gpu_col, int nic_col,
                              FILE *f) {
  char cell[16];
  if (gpu_row >= 0 && gpu_col >= 0 && gpu_row != gpu_col && topo_nvlinks(t, gpu_row, gpu_col))
    snprintf(cell, sizeof(cell), "NV%d", topo_nvlinks(t, gpu_row, gpu_col));
  else if ((gpu_row >= 0 && gpu_row == gpu_col) || (nic_row >= 0 && nic_row == nic_col))
    snprintf(cell, sizeof(cell), "X");
  else if (gpu_row >= 0)
    snprintf(cell, sizeof(cell), "%s",
             topo_path_name(gpu_col >= 0 ? topo_path_gpu_gpu(t, gpu_row, gpu_col)
                                         : topo_path_gpu_nic(t, gpu_row, nic_col)));
  else
    snprintf(cell, sizeof(cell), "%s",
             topo_path_name(gpu_col >= 0 ? topo_path_gpu_nic(t, gpu_col, nic_row)
                                         : topo_path_nic_nic(t, nic_row, nic_col)));
  fprintf(f, " %8s", cell);
}

static void print_matrix(const topo_t *t, FILE *f) {
  int n = t->ngpus + t->nnics;
  if (n == 0) return;
  fprintf(f,
          "\nPaths (LOC same device, NV# NVLinks, PIX one PCIe switch, PXB several, PHB host "
          "bridge, SYS across sockets):\n%-12s",
          "");
  for (int c = 0; c < n; c++) {
    char name[16];
    if (c < t->ngpus)
      snprintf(name, sizeof(name), "GPU%d", c);
    else
      snprintf(name, sizeof(name), "%.8s", t->nics[c - t->ngpus].name);
    fprintf(f, " %8s", name);
  }
  fprintf(f, "   NUMA\n");
  for (int r = 0; r < n; r++) {
    int gr = r < t->ngpus ? r : -1, nr = r < t->ngpus ? -1 : r - t->ngpus;
    if (gr >= 0)
      fprintf(f, "GPU%-9d", gr);
    else
      fprintf(f, "%-12.12s", t->nics[nr].name);
    for (int c = 0; c < n; c++)
      print_matrix_cell(t, gr, nr, c < t->ngpus ? c : -1, c < t->ngpus ? -1 : c - t->ngpus, f);
    int numa = gr >= 0 ? t->gpus[gr].numa : t->nics[nr].numa;
    if (numa >= 0)
      fprintf(f, "   %d\n", numa);
    else
      fprintf(f, "   ?\n");
  }
}

void topo_print(const topo_t *t, FILE *f) {
  hwloc_obj_t root = hwloc_get_root_obj(t->hw);
  topo_counts_t c;
  char mem[32];
  topo_get_counts(t, &c);
  human_bytes(root->total_memory, mem, sizeof(mem));
  fprintf(f,
          "Machine (%s) from %s: %d packages, %d NUMA nodes, %d cores, %d PUs, %d GPUs, "
          "%d NICs; discovered in %.1f ms\n",
          mem, t->source, c.packages, c.numa_nodes, c.cores, c.pus, c.gpus, c.nics, t->load_ms);
  if (hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE) == 0) {
    print_numa(t, root->nodeset, 1, f);
    print_caches(t, root->cpuset, 1, f);
  }
  print_tree(t, root, f);
  print_matrix(t, f);
}

static void print_rank(const topo_t *t, int r, int gpu, FILE *f) {
  topo_nic_choice_t ib, sock;
  topo_binding_t b;
  topo_choose_nic(t, TOPO_NIC_IB, gpu, NULL, &ib);
  topo_choose_nic(t, TOPO_NIC_SOCKET, gpu, NULL, &sock);
  topo_choose_binding(t, gpu, NULL, &b);
  if (gpu >= 0)
    fprintf(f, "  rank %d: GPU %d %s\n", r, gpu, t->gpus[gpu].busid);
  else
    fprintf(f, "  rank %d: no GPU\n", r);
  fprintf(f, "    IB NIC:   %s (%s) - %s\n", ib.nic >= 0 ? ib.name : "none",
          ib.nic >= 0 ? topo_path_name(ib.path) : "-", ib.reason);
  fprintf(f, "    socket:   %s (%s) - %s\n", sock.nic >= 0 ? sock.name : "none",
          sock.nic >= 0 ? topo_path_name(sock.path) : "-", sock.reason);
  fprintf(f, "    binding:  NUMA %d, CPUs %s, %s threads, %s memory - %s\n", b.numa,
          b.cpuset[0] ? b.cpuset : "?", b.cpubind ? "bind" : "leave",
          b.membind ? "prefer" : "leave", b.reason);
}

static void print_p2p(const topo_t *t, int nranks, const topo_rank_loc_t *locs, FILE *f) {
  char why[TOPO_REASON_CHARS];
  topo_path_t level = topo_p2p_level(why, sizeof(why));
  if (t->ngpus == 0) {
    fprintf(f, "  P2P: no GPUs\n");
    return;
  }
  fprintf(f, "  P2P at level %s (%s):\n      ", topo_path_name(level), why);
  for (int c = 0; c < nranks; c++) fprintf(f, " %4d", c);
  fprintf(f, "\n");
  for (int r = 0; r < nranks; r++) {
    fprintf(f, "  %4d", r);
    for (int c = 0; c < nranks; c++) {
      if (locs[r].gpu < 0 || locs[c].gpu < 0)
        fprintf(f, " %4s", "-");
      else
        fprintf(f, " %4s",
                topo_p2p_allowed(t, locs[r].gpu, locs[c].gpu, level, NULL, 0) ? "yes" : "no");
    }
    fprintf(f, "\n");
  }
}

void topo_print_decisions(const topo_t *t, int nranks, FILE *f) {
  if (nranks < 1) return;
  topo_rank_loc_t *locs = calloc(nranks, sizeof(*locs));
  int *order = calloc(nranks, sizeof(*order));
  char why[TOPO_REASON_CHARS];
  if (!locs || !order) goto done;
  if (t->ngpus)
    fprintf(f, "\nDecisions for %d local ranks (rank r uses GPU r %% %d):\n", nranks, t->ngpus);
  else
    fprintf(f, "\nDecisions for %d local ranks (no GPU: CPU-only ranks):\n", nranks);
  for (int r = 0; r < nranks; r++) {
    locs[r].gpu = t->ngpus ? r % t->ngpus : -1;
    locs[r].numa = -1;
    print_rank(t, r, locs[r].gpu, f);
  }
  if (topo_ring_order(t, nranks, locs, order, why, sizeof(why)) == ncclSuccess)
    fprintf(f, "  %s\n", why);
  print_p2p(t, nranks, locs, f);
done:
  free(locs);
  free(order);
}

ncclResult_t topo_export_xml(const topo_t *t, const char *path) {
  char tmp[1100];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  if (hwloc_topology_export_xml(t->hw, tmp, 0) != 0) {
    unlink(tmp);
    return TUTTI_ERR(ncclSystemError, "cannot write the topology to %s: %s", path, strerror(errno));
  }
  if (rename(tmp, path) != 0) {
    unlink(tmp);
    return TUTTI_ERR(ncclSystemError, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  }
  return ncclSuccess;
}
