/* Fuzz target: loading a topology from hwloc XML (TUTTI_TOPO_FILE, tutti-topo --xml, tutti-sim
 * --topo): topo_load_xml and everything it derives (GPUs, NICs, PCI paths, link speeds),
 * then what tutti-topo prints (the tree, the matrix, the placement decisions for 4 ranks). hwloc
 * parses the XML; tutti must cope with whatever objects, attributes and info strings a file that
 * hwloc accepts holds.
 *
 * Input: the file's bytes, loaded from /proc/self/fd/N of a memfd.
 *
 * hwloc loads its plugins (the libxml2 reader, pci, opencl, gl, and the libraries they pull in)
 * when a process initialises its first topology and unloads them when it destroys its last: a
 * dlopen of some 25 libraries per input, which made this target slow to a crawl under ASan. One
 * topology initialised once and kept for the process's life keeps them loaded.
 *
 * topo_load_xml first loads a file in a forked child and refuses one that kills it (hwloc 2.9
 * crashes on some malformed files). A fork of this whole ASan process per input was most of an
 * input's time, so the target makes that trial in one helper process, forked once and reused
 * (forked again after an input killed it), which loads each input as the library's trial child
 * does, then calls topo_load_xml_tried: an input that kills the helper is refused as
 * topo_load_xml refuses it; one after which the helper ends without a signal (a sanitizer
 * report) is loaded here, as topo_load_xml would load it. The helper's trial has the library's
 * CPU limit (TUTTI_TOPO_LOAD_TIMEOUT), so a file that keeps hwloc busy for seconds is refused
 * in a few seconds instead of running into libFuzzer's timeout. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"
#include "topology/topo.h"
#include "topology/topo_internal.h"

static void fuzz_keep_hwloc_plugins(void) {
  static hwloc_topology_t keep;
  if (!keep && hwloc_topology_init(&keep) != 0) keep = NULL;
}

static int io_full(int fd, void *buf, size_t len, int writing) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL) : read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    p += n, len -= (size_t)n;
  }
  return 1;
}

/* A file's bytes in a memfd; its path in path[64]; the fd, or -1. */
static int memfd_with(const void *data, size_t size, char path[64]) {
  int fd = memfd_create("fuzz-topo", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (size && write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return -1;
  }
  snprintf(path, 64, "/proc/self/fd/%d", fd);
  return fd;
}

/* The library's CPU limit on a trial load, for the helper's next input: RLIMIT_CPU counts the
 * whole process, so the soft limit is the CPU used so far plus the setting (rounded up to whole
 * seconds, RLIMIT_CPU's unit); past it SIGXCPU ends the helper, and the input is refused as
 * topo_load_xml refuses a file whose trial load takes too long. */
static void helper_limit_cpu(double limit) {
  struct rusage ru;
  struct rlimit rl;
  if (getrusage(RUSAGE_SELF, &ru) != 0 || getrlimit(RLIMIT_CPU, &rl) != 0) return;
  double used = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  rl.rlim_cur = (rlim_t)ceil(used + limit);
  setrlimit(RLIMIT_CPU, &rl);
}

/* The helper: for each [u32 length][bytes] it reads, the library's trial load (init, set_xml,
 * load), then one byte back once hwloc returned. A crash, or the CPU limit, ends it by its
 * signal. */
static void trial_helper(int sock) {
  const int deadly[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGXCPU};
  for (size_t i = 0; i < sizeof(deadly) / sizeof(deadly[0]); i++) signal(deadly[i], SIG_DFL);
  char which[64];
  double limit = 5;
  if (topo_load_time_limit(&limit, which, sizeof(which)) != ncclSuccess) limit = 5;
  for (;;) {
    uint32_t len;
    if (!io_full(sock, &len, sizeof(len), 0)) _exit(0);
    helper_limit_cpu(limit);
    char *buf = malloc(len ? len : 1), path[64];
    if (!buf || !io_full(sock, buf, len, 0)) _exit(0);
    int fd = memfd_with(buf, len, path);
    free(buf);
    hwloc_topology_t t;
    int inited = hwloc_topology_init(&t) == 0;
    char ok =
        inited && fd >= 0 && hwloc_topology_set_xml(t, path) == 0 && hwloc_topology_load(t) == 0;
    if (!io_full(sock, &ok, 1, 1)) _exit(0);
    if (inited) hwloc_topology_destroy(t);
    if (fd >= 0) close(fd);
  }
}

static pid_t helper_pid = -1;
static int helper_sock = -1;

static int helper_start(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    trial_helper(sv[1]);
  }
  close(sv[1]);
  if (pid < 0) return close(sv[0]), 0;
  helper_pid = pid, helper_sock = sv[0];
  return 1;
}

/* The trial load of one input: 1 when it may be loaded here, 0 when it killed hwloc, -1 when
 * no helper runs (the caller then uses topo_load_xml, which makes its own trial). */
static int trial_load(const uint8_t *data, size_t size) {
  if (helper_pid < 0 && !helper_start()) return -1;
  uint32_t len = (uint32_t)size;
  char ok;
  if (io_full(helper_sock, &len, sizeof(len), 1) && io_full(helper_sock, (void *)data, size, 1) &&
      io_full(helper_sock, &ok, 1, 0))
    return 1;
  int status = 0;
  close(helper_sock);
  while (waitpid(helper_pid, &status, 0) < 0 && errno == EINTR) {
  }
  helper_pid = -1, helper_sock = -1;
  return WIFSIGNALED(status) ? 0 : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  fuzz_keep_hwloc_plugins();
  int trial = trial_load(data, size);
  if (trial == 0) return 0;
  char path[64];
  int fd = memfd_with(data, size, path);
  if (fd < 0) return 0;
  topo_t *t = NULL;
  ncclResult_t res = trial > 0 ? topo_load_xml_tried(path, &t) : topo_load_xml(path, &t);
  if (res == ncclSuccess) {
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
