/* Fuzz target: loading a topology from hwloc XML (TUTTI_TOPO_FILE, tutti-topo --xml, tutti-sim
 * --topo): topo_load_xml and everything it derives (GPUs, NICs, PCI paths, link speeds),
 * then what tutti-topo prints (the tree, the matrix, the placement decisions for 4 ranks). hwloc
 * parses the XML; tutti must cope with whatever objects, attributes and info strings a file that
 * hwloc accepts holds.
 *
 * Input: the file's bytes, given to topo_load_xml as /proc/self/fd/N of a memfd.
 *
 * hwloc loads its plugins (the libxml2 reader, pci, opencl, gl, and the libraries they pull in)
 * when a process initialises its first topology and unloads them when it destroys its last: a
 * dlopen of some 25 libraries per input, which made this target slow to a crawl under ASan. One
 * topology initialised once and kept for the process's life keeps them loaded. */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "topology/topo.h"
#include "topology/topo_internal.h"

static void fuzz_keep_hwloc_plugins(void) {
  static hwloc_topology_t keep;
  if (!keep && hwloc_topology_init(&keep) != 0) keep = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  fuzz_keep_hwloc_plugins();
  int fd = memfd_create("fuzz-topo", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size && write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return 0;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  topo_t *t = NULL;
  if (topo_load_xml(path, &t) == ncclSuccess) {
    FILE *out = fopen("/dev/null", "w");
    if (out) topo_print(t, out), topo_print_decisions(t, 4, out), fclose(out);
    topo_free(t);
  }
  close(fd);
  return 0;
}

/* ---- seeds: this machine's topology as hwloc writes it (the fixtures in tests/fixtures are
 * the other seeds: ctest runs them too) ---- */

void fuzz_seeds(fuzz_put_fn put, void *arg) {
  topo_t *t = NULL;
  if (topo_load_live(&t) != ncclSuccess) return;
  char *xml = NULL;
  int len = 0;
  if (hwloc_topology_export_xmlbuffer(t->hw, &xml, &len, 0) == 0 && xml) {
    put(arg, "live", xml, (size_t)(len > 0 ? len - 1 : 0));
    hwloc_free_xmlbuffer(t->hw, xml);
  }
  topo_free(t);
}
