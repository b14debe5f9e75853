/* NVLink between GPUs.
 *
 * hwloc does not see NVLink. At run time NVML (libnvidia-ml.so.1, loaded with dlopen so that
 * tutti neither needs it to build nor to run) lists, per GPU, its active links and the PCI
 * device at the other end: another GPU, or an NVSwitch (DGX/HGX). We write what it says on the
 * GPU's hwloc PCI device as the info "NVLinkPeers" = "BUSID*N,...,nvswitch*N", so the XML dump
 * carries it and XML files can describe NVLink the same way; topo_nvlink_build then reads only
 * that info, for live and file topologies alike.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/topo_internal.h"

/* The few NVML declarations we use (nvml.h, NVML API v2+; layouts are ABI-stable). */
typedef struct nvml_device *nvml_device_t;
typedef struct {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} nvml_pci_info_t;
#define NVML_SUCCESS 0
#define NVML_NVLINK_MAX_LINKS 18
#define NVML_NVLINK_DEVICE_TYPE_SWITCH 2

typedef struct {
  void *lib;
  int (*init)(void);
  int (*shutdown)(void);
  int (*by_busid)(const char *, nvml_device_t *);
  int (*link_state)(nvml_device_t, unsigned, int *);
  int (*remote_pci)(nvml_device_t, unsigned, nvml_pci_info_t *);
  int (*remote_type)(nvml_device_t, unsigned, int *); /* optional (NVML >= 11) */
} nvml_t;

static int nvml_open(nvml_t *n) {
  memset(n, 0, sizeof(*n));
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) return -1;
  n->init = (int (*)(void))dlsym(n->lib, "nvmlInit_v2");
  n->shutdown = (int (*)(void))dlsym(n->lib, "nvmlShutdown");
  n->by_busid =
      (int (*)(const char *, nvml_device_t *))dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
  n->link_state =
      (int (*)(nvml_device_t, unsigned, int *))dlsym(n->lib, "nvmlDeviceGetNvLinkState");
  n->remote_pci = (int (*)(nvml_device_t, unsigned, nvml_pci_info_t *))dlsym(
      n->lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  n->remote_type =
      (int (*)(nvml_device_t, unsigned, int *))dlsym(n->lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!n->init || !n->shutdown || !n->by_busid || !n->link_state || !n->remote_pci ||
      n->init() != NVML_SUCCESS) {
    dlclose(n->lib);
    return -1;
  }
  return 0;
}

/* Without nvmlDeviceGetNvLinkRemoteDeviceType: an NVSwitch is PCI class 0x0680 (NCCL does the
 * same through sysfs). */
static int remote_is_switch(const nvml_t *n, nvml_device_t dev, unsigned link, const char *busid) {
  int type = -1;
  if (n->remote_type && n->remote_type(dev, link, &type) == NVML_SUCCESS)
    return type == NVML_NVLINK_DEVICE_TYPE_SWITCH;
  char path[128], cls[32] = "";
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", busid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (!fgets(cls, sizeof(cls), f)) cls[0] = '\0';
  fclose(f);
  return strncmp(cls, "0x0680", 6) == 0;
}

static void append_peer(char *buf, size_t len, const char *peer, int links) {
  size_t used = strlen(buf);
  snprintf(buf + used, len - used, "%s%s*%d", used ? "," : "", peer, links);
}

/* Counts one GPU's active links per remote end and records them as "NVLinkPeers". */
static void annotate_gpu(const topo_t *t, const nvml_t *n, int g) {
  nvml_device_t dev;
  int per_gpu[256] = {0}, to_switch = 0;
  if (n->by_busid(t->gpus[g].busid, &dev) != NVML_SUCCESS) return;
  for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
    int active = 0;
    nvml_pci_info_t pci;
    if (n->link_state(dev, l, &active) != NVML_SUCCESS || !active) continue;
    if (n->remote_pci(dev, l, &pci) != NVML_SUCCESS) continue;
    int peer = topo_gpu_by_busid(t, pci.bus_id);
    if (peer >= 0 && peer < 256)
      per_gpu[peer]++;
    else if (peer < 0 && remote_is_switch(n, dev, l, pci.bus_id))
      to_switch++;
  }
  char value[1024] = "";
  for (int p = 0; p < t->ngpus && p < 256; p++)
    if (per_gpu[p]) append_peer(value, sizeof(value), t->gpus[p].busid, per_gpu[p]);
  if (to_switch) append_peer(value, sizeof(value), TOPO_NVSWITCH, to_switch);
  if (value[0]) hwloc_obj_add_info(t->gpu_obj[g], TOPO_NVLINK_PEERS, value);
}

void topo_nvml_annotate(topo_t *t) {
  nvml_t n;
  uint64_t t0 = tutti_time_ns();
  if (nvml_open(&n) != 0) {
    INFO(SUB_INIT, "topology: NVML not available, NVLink unknown (GPUs seen through PCIe only)");
    return;
  }
  for (int g = 0; g < t->ngpus; g++) {
    if (!hwloc_obj_get_info_by_name(t->gpu_obj[g], TOPO_NVLINK_PEERS)) annotate_gpu(t, &n, g);
  }
  n.shutdown();
  dlclose(n.lib);
  INFO(SUB_INIT, "topology: NVLink read from NVML in %.1f ms", (tutti_time_ns() - t0) / 1e6);
}

/* Parses "BUSID*N,nvswitch*N" into per-GPU link counts (row of t->nvl) and switch links. */
static void parse_peers(topo_t *t, int g, const char *value) {
  char buf[1024];
  char *save = NULL;
  snprintf(buf, sizeof(buf), "%s", value);
  for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    char *star = strchr(tok, '*');
    int links = 1;
    if (star) *star = '\0', links = atoi(star + 1);
    if (links <= 0) continue;
    t->gpus[g].nvlinks += links;
    if (strcmp(tok, TOPO_NVSWITCH) == 0) {
      t->gpus[g].nvswitch_links += links;
      continue;
    }
    int peer = topo_gpu_by_busid(t, tok);
    if (peer >= 0 && peer != g)
      t->nvl[g * t->ngpus + peer] += links;
    else if (peer < 0)
      INFO(SUB_INIT, "topology: GPU %d NVLink peer %s is not a GPU here", g, tok);
  }
}

ncclResult_t topo_nvlink_build(topo_t *t) {
  int n = t->ngpus;
  free(t->nvl); /* rebuilt from scratch: callable again after more infos were added */
  t->nvl = calloc(n ? (size_t)n * n : 1, sizeof(*t->nvl));
  if (!t->nvl) return TUTTI_ERR(ncclSystemError, "out of memory");
  for (int g = 0; g < n; g++) t->gpus[g].nvlinks = t->gpus[g].nvswitch_links = 0;
  for (int g = 0; g < n; g++) {
    const char *v = hwloc_obj_get_info_by_name(t->gpu_obj[g], TOPO_NVLINK_PEERS);
    if (v) parse_peers(t, g, v);
  }
  for (int a = 0; a < n; a++) {
    for (int b = 0; b < n; b++) {
      if (a == b) continue;
      int *ab = &t->nvl[a * n + b], *ba = &t->nvl[b * n + a];
      if (*ab != *ba) *ab = *ba = TUTTI_MAX(*ab, *ba); /* a file may list a link on one side */
      int sw = TUTTI_MIN(t->gpus[a].nvswitch_links, t->gpus[b].nvswitch_links);
      if (sw > *ab) *ab = sw;
    }
  }
  return ncclSuccess;
}
