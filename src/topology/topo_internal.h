/* What the files of src/topology/ share: the topo_t layout and the helpers between them.
 * Nothing outside src/topology/ includes this; the API is topo.h. */
#ifndef TUTTI_TOPO_INTERNAL_H_
#define TUTTI_TOPO_INTERNAL_H_

#include <hwloc.h>

#include "topology/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TOPO_NVLINK_PEERS "NVLinkPeers"
#define TOPO_LINK_SPEED "LinkSpeedMbps"
#define TOPO_NVSWITCH "nvswitch"

struct topo {
  hwloc_topology_t hw;
  char source[1024]; /* "live" or the XML path */
  int live;          /* describes this machine: hwloc_topology_is_thissystem() (a file is
                        not, unless HWLOC_THISSYSTEM=1) -- bindings apply only then */
  double load_ms;
  int ngpus;
  topo_gpu_info_t *gpus; /* [ngpus] */
  hwloc_obj_t *gpu_obj;  /* [ngpus] the GPUs' PCI devices */
  int nnics;
  topo_nic_info_t *nics; /* [nnics] IB first, then socket; each by PCI bus id, then name */
  hwloc_obj_t *nic_obj;  /* [nnics] the NICs' OS devices */
  int *nvl;              /* [ngpus * ngpus] NVLinks between GPUs (topo_nvlinks) */
};

/* topo_load.c */
int topo_parse_busid(const char *s, unsigned *domain, unsigned *bus, unsigned *dev, unsigned *func);
/* topo_load_xml after its trial load in a child process: for a caller that made the trial
 * itself (fuzz_topo_xml does it in one long-lived helper process, not in a fork per file). */
ncclResult_t topo_load_xml_tried(const char *path, topo_t **out);
/* TUTTI_TOPO_LOAD_TIMEOUT: the seconds of CPU the trial load of a topology file may take
 * (default 5); which[len] receives the variable's name for messages. ncclInvalidUsage naming
 * the variable when it is not a number in (0, 3600]. */
ncclResult_t topo_load_time_limit(double *secs, char *which, size_t len);
/* The PCI device an object hangs from (itself when it is one), NULL when none. */
hwloc_obj_t topo_pci_of(hwloc_obj_t o);

/* topo_nvml.c: adds "NVLinkPeers" to the GPUs' PCI devices from NVML (live topology only). */
void topo_nvml_annotate(topo_t *t);
/* Fills t->nvl from the "NVLinkPeers" infos and the GPUs' nvlinks counts. */
ncclResult_t topo_nvlink_build(topo_t *t);

/* topo_path.c */
topo_path_t topo_path_objs(const topo_t *t, hwloc_obj_t a, hwloc_obj_t b);
topo_path_t topo_path_nic_nic(const topo_t *t, int a, int b); /* for the printed matrix */
/* NUMA node / package (os index) an I/O object is local to, -1 when unknown or several. */
int topo_obj_numa(const topo_t *t, hwloc_obj_t o);
int topo_obj_package(const topo_t *t, hwloc_obj_t o);

/* topo_decide.c */
/* cpuset of the calling thread (live) or the whole machine (file), as a new bitmap. */
hwloc_bitmap_t topo_current_cpuset(const topo_t *t);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_TOPO_INTERNAL_H_ */
