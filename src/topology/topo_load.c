/* Loading a topology: the live machine through hwloc, or an hwloc XML file, then the GPU and NIC
 * tables every decision reads.
 *
 * Discovery cost is what matters here (it is paid in every communicator init), so hwloc is told
 * to skip what we never read:
 *  - I/O objects: only "important" ones (GPUs, NICs, storage and the bridges above them);
 *  - the x86 backend (it binds the thread to every PU in turn to run cpuid: slow on big
 *    machines and it touches the caller's binding); the Linux backend reads the same from sysfs
 *    and /proc;
 *  - the opencl/gl/cuda/nvml/rsmi/levelzero components: on a GPU machine they initialise a GPU
 *    runtime inside discovery (hundreds of ms, and a CUDA context before the user made one);
 *  - the pci component (libpciaccess): the Linux backend reads the PCI tree from sysfs itself;
 *  - distances, memory attributes and CPU kinds.
 * hwloc_topology_init still dlopens its plugins (a few ms of wall time on a cold cache, not
 * CPU); HWLOC_PLUGINS_BLACKLIST=hwloc_opencl,hwloc_gl,hwloc_pci in a job's environment saves
 * that too. We do not set it ourselves: it would change other hwloc users in the process.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "topology/topo_internal.h"

TUTTI_PARAM(TopoNvml, "TOPO_NVML", 1);

static const char *const skipped_components[] = {"x86",  "pci",  "opencl", "gl",
                                                 "cuda", "nvml", "rsmi",   "levelzero"};

static void hw_configure(hwloc_topology_t hw) {
  hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_type_filter(hw, HWLOC_OBJ_MISC, HWLOC_TYPE_FILTER_KEEP_NONE);
#if HWLOC_API_VERSION >= 0x00020800 /* hwloc >= 2.8; older ones just discover a bit more */
  hwloc_topology_set_flags(
      hw, HWLOC_TOPOLOGY_FLAG_DONT_CHANGE_BINDING | HWLOC_TOPOLOGY_FLAG_NO_DISTANCES |
              HWLOC_TOPOLOGY_FLAG_NO_MEMATTRS | HWLOC_TOPOLOGY_FLAG_NO_CPUKINDS);
#endif
#if HWLOC_API_VERSION >= 0x00020100
  for (size_t i = 0; i < sizeof(skipped_components) / sizeof(skipped_components[0]); i++)
    hwloc_topology_set_components(hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                  skipped_components[i]);
#endif
}

int topo_parse_busid(const char *s, unsigned *domain, unsigned *bus, unsigned *dev,
                     unsigned *func) {
  char tail;
  if (!s) return -1;
  if (sscanf(s, "%x:%x:%x.%x%c", domain, bus, dev, func, &tail) == 4) return 0;
  *domain = 0;
  if (sscanf(s, "%x:%x.%x%c", bus, dev, func, &tail) == 3) return 0;
  return -1;
}

hwloc_obj_t topo_pci_of(hwloc_obj_t o) {
  while (o && o->type == HWLOC_OBJ_OS_DEVICE) o = o->parent;
  return (o && o->type == HWLOC_OBJ_PCI_DEVICE) ? o : NULL;
}

static void format_busid(hwloc_obj_t pci, char *buf, size_t len) {
  if (!pci) {
    snprintf(buf, len, "%s", "");
    return;
  }
  snprintf(buf, len, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
           pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

static int is_nvidia_gpu(hwloc_obj_t o) {
  return o->attr->pcidev.vendor_id == 0x10de && (o->attr->pcidev.class_id >> 8) == 0x03;
}

/* hwloc lists PCI devices in bus order, which is CUDA's PCI_BUS_ID order. */
static ncclResult_t scan_gpus(topo_t *t) {
  int n = 0;
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->hw, o));) n += is_nvidia_gpu(o);
  t->gpus = calloc(n ? n : 1, sizeof(*t->gpus));
  t->gpu_obj = calloc(n ? n : 1, sizeof(*t->gpu_obj));
  if (!t->gpus || !t->gpu_obj) return TUTTI_ERR(ncclSystemError, "out of memory");
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->hw, o));) {
    if (!is_nvidia_gpu(o)) continue;
    topo_gpu_info_t *g = &t->gpus[t->ngpus];
    g->index = t->ngpus;
    format_busid(o, g->busid, sizeof(g->busid));
    g->vendor = o->attr->pcidev.vendor_id;
    g->device = o->attr->pcidev.device_id;
    g->numa = topo_obj_numa(t, o);
    g->package = topo_obj_package(t, o);
    t->gpu_obj[t->ngpus++] = o;
  }
  return ncclSuccess;
}

/* Live only: link speed from sysfs, recorded on the OS device so that the XML dump keeps it. */
static void annotate_speed(hwloc_obj_t os) {
  char path[512], line[128] = "";
  long mbps = 0;
  if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK)
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", os->name);
  else
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/rate", os->name);
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (fgets(line, sizeof(line), f)) mbps = strtol(line, NULL, 10); /* Mb/s, or "400 Gb/sec" */
  fclose(f);
  if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) mbps *= 1000;
  if (mbps <= 0) return;
  snprintf(line, sizeof(line), "%ld", mbps);
  hwloc_obj_add_info(os, TOPO_LINK_SPEED, line);
}

/* An HCA is usable when one of its ports is ACTIVE (hwloc: Port<N>State = 4); without any
 * port information (hand-written files) we assume it is. */
static int ib_active(hwloc_obj_t os) {
  int seen = 0;
  for (unsigned i = 0; i < os->infos_count; i++) {
    const char *n = os->infos[i].name;
    if (strncmp(n, "Port", 4) != 0 || !strstr(n, "State")) continue;
    seen = 1;
    if (atoi(os->infos[i].value) == 4) return 1;
  }
  return !seen;
}

static int nic_cmp(const void *pa, const void *pb) {
  const topo_nic_info_t *a = pa, *b = pb;
  if (a->kind != b->kind) return (int)a->kind - (int)b->kind;
  int c = strcmp(a->busid, b->busid);
  if (c) return c;
  size_t la = strlen(a->name), lb = strlen(b->name); /* mlx5_2 before mlx5_10 */
  return la != lb ? (la < lb ? -1 : 1) : strcmp(a->name, b->name);
}

static void fill_nic(topo_t *t, hwloc_obj_t os, topo_nic_info_t *n) {
  hwloc_obj_t pci = topo_pci_of(os);
  snprintf(n->name, sizeof(n->name), "%s", os->name ? os->name : "?");
  n->kind = os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS ? TOPO_NIC_IB : TOPO_NIC_SOCKET;
  format_busid(pci, n->busid, sizeof(n->busid));
  n->numa = topo_obj_numa(t, os);
  n->package = topo_obj_package(t, os);
  if (t->live) annotate_speed(os);
  const char *speed = hwloc_obj_get_info_by_name(os, TOPO_LINK_SPEED);
  n->speed_mbps = speed ? atol(speed) : 0;
  n->active = n->kind == TOPO_NIC_IB ? ib_active(os) : 1;
}

static int is_nic(hwloc_obj_t os) {
  return os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS ||
         os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK;
}

static ncclResult_t scan_nics(topo_t *t) {
  int n = 0;
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(t->hw, o));) n += is_nic(o);
  t->nics = calloc(n ? n : 1, sizeof(*t->nics));
  t->nic_obj = calloc(n ? n : 1, sizeof(*t->nic_obj));
  if (!t->nics || !t->nic_obj) return TUTTI_ERR(ncclSystemError, "out of memory");
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(t->hw, o));) {
    if (!is_nic(o)) continue;
    fill_nic(t, o, &t->nics[t->nnics]);
    t->nics[t->nnics].index = t->nnics; /* position before sorting: finds the object back */
    t->nic_obj[t->nnics++] = o;
  }
  qsort(t->nics, t->nnics, sizeof(*t->nics), nic_cmp);
  hwloc_obj_t *objs = malloc(sizeof(*objs) * (n ? n : 1));
  if (!objs) return TUTTI_ERR(ncclSystemError, "out of memory");
  for (int i = 0; i < t->nnics; i++) {
    objs[i] = t->nic_obj[t->nics[i].index];
    t->nics[i].index = i;
  }
  free(t->nic_obj);
  t->nic_obj = objs;
  return ncclSuccess;
}

static ncclResult_t topo_new(topo_t **out) {
  topo_t *t = calloc(1, sizeof(*t));
  if (!t) return TUTTI_ERR(ncclSystemError, "out of memory");
  if (hwloc_topology_init(&t->hw) != 0) {
    free(t);
    return TUTTI_ERR(ncclSystemError, "hwloc_topology_init failed");
  }
  hw_configure(t->hw);
  *out = t;
  return ncclSuccess;
}

static ncclResult_t topo_finish(topo_t *t, uint64_t t0) {
  t->live = hwloc_topology_is_thissystem(t->hw);
  TUTTI_CHECK(scan_gpus(t));
  TUTTI_CHECK(scan_nics(t));
  if (t->live && t->ngpus > 1 && tutti_param_TopoNvml()) topo_nvml_annotate(t);
  TUTTI_CHECK(topo_nvlink_build(t));
  t->load_ms = (tutti_time_ns() - t0) / 1e6;
  topo_counts_t c;
  topo_get_counts(t, &c);
  INFO(SUB_INIT,
       "topology (%s): %d packages, %d NUMA nodes, %d cores, %d PUs, %d GPUs, %d NICs; "
       "discovered in %.1f ms",
       t->source, c.packages, c.numa_nodes, c.cores, c.pus, c.gpus, c.nics, t->load_ms);
  return ncclSuccess;
}

ncclResult_t topo_load_live(topo_t **out) {
  uint64_t t0 = tutti_time_ns();
  topo_t *t = NULL;
  ncclResult_t res;
  *out = NULL;
  TUTTI_CHECK(topo_new(&t));
  snprintf(t->source, sizeof(t->source), "live");
  if (hwloc_topology_load(t->hw) != 0) {
    res = TUTTI_ERR(ncclSystemError, "hwloc could not discover this machine: %s", strerror(errno));
    goto fail;
  }
  TUTTI_CHECK_GOTO(topo_finish(t, t0), res, fail);
  *out = t;
  return ncclSuccess;
fail:
  topo_free(t);
  return res;
}

/* hwloc 2.9's XML importer crashes (SIGSEGV in hwloc_bitmap_compare_first) on some malformed
 * files, and so do its own lstopo and hwloc-info (tests/fuzz/regress/topo_xml/hwloc-crash.xml,
 * found by fuzz_topo_xml); other files keep it busy for seconds (an os_index near 2^31 makes
 * bitmaps of 256 MiB). A file is therefore loaded once in a child process first, and refused
 * with an error instead of taking the caller (every rank, at init) down or holding it when
 *  - the child dies by a signal (hwloc crashed), or
 *  - the child's main thread used more than TUTTI_TOPO_LOAD_TIMEOUT seconds of CPU: CPU time,
 *    not wall time, is the main limit, since on a loaded machine a valid file takes longer by
 *    the wall clock, not by the CPU it uses, or
 *  - that thread has used no CPU for ten times that (at least 10 s) of the caller's time: a file
 *    that blocks (a FIFO, a hung file system). The caller sleeps up to 20 ms between checks,
 *    and a sleep that took longer counts 0.5 s at most, so a SIGSTOP of the job does not use
 *    it up; a child starved on a loaded machine still uses some CPU, so it is not "blocked".
 * Where no child can be made (fork refused), the file is loaded as it is. */
#define TOPO_LOAD_TIMEOUT_DEFAULT 5.0 /* s of CPU; real machines' files load in < 0.1 s */

ncclResult_t topo_load_time_limit(double *secs, char *which, size_t len) {
  const char *text = tutti_getenv_which("TOPO_LOAD_TIMEOUT", which, len);
  double v = TOPO_LOAD_TIMEOUT_DEFAULT;
  const char *why = text ? tutti_parse_double(text, &v) : NULL;
  if (!why && !(v > 0 && v <= 3600)) why = "is outside the allowed range";
  if (why)
    return TUTTI_ERR(ncclInvalidUsage,
                     "setting %s=\"%s\" %s: expected seconds of CPU a topology file's load may "
                     "take, more than 0 and at most 3600",
                     which, text, why);
  *secs = v;
  return ncclSuccess;
}

typedef enum { TRIAL_DONE, TRIAL_OVER_CPU, TRIAL_OVER_WALL, TRIAL_UNKNOWN } trial_end_t;

/* CPU time of the child's main thread, the one that runs hwloc (a sanitizer's runtime may keep
 * a thread of its own in the child, using CPU while hwloc blocks): /proc/PID/task/PID/schedstat
 * in ns, else the whole process's CPU clock. */
static double child_cpu_s(pid_t pid) {
  char path[64];
  unsigned long long ns;
  snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, (int)pid);
  FILE *f = fopen(path, "r");
  if (f) {
    int got = fscanf(f, "%llu", &ns);
    fclose(f);
    if (got == 1) return ns / 1e9;
  }
  clockid_t clock;
  struct timespec ts;
  if (clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &ts) != 0) return 0;
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits for the trial child, killing it past its limits; *status is its wait status. A child
 * is stalled while its CPU clock does not move: a starved child on a loaded machine still
 * moves, a blocked one does not. */
static trial_end_t trial_wait(pid_t pid, double cpu_limit, int *status) {
  double stall_limit = fmax(10 * cpu_limit, 10), stalled = 0, last_cpu = -1;
  useconds_t nap = 100;
  trial_end_t end = TRIAL_DONE;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return end;
    if (r < 0 && errno != EINTR) return TRIAL_UNKNOWN; /* reaped elsewhere (SIGCHLD ignored) */
    double cpu = child_cpu_s(pid);
    if (cpu > last_cpu) last_cpu = cpu, stalled = 0;
    if (end == TRIAL_DONE && cpu > cpu_limit) end = TRIAL_OVER_CPU;
    if (end == TRIAL_DONE && stalled > stall_limit) end = TRIAL_OVER_WALL;
    if (end != TRIAL_DONE) {
      kill(pid, SIGKILL);
      while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR) return end;
      return end;
    }
    uint64_t t0 = tutti_time_ns();
    usleep(nap);
    stalled += fmin((tutti_time_ns() - t0) / 1e9, 0.5); /* a stopped caller does not count */
    nap = nap < 20000 ? nap * 2 : nap;
  }
}

/* The trial load in a child: ncclSuccess when the caller may load the file itself. */
static ncclResult_t xml_trial(const char *path) {
  char which[64];
  double limit;
  TUTTI_CHECK(topo_load_time_limit(&limit, which, sizeof(which)));
  pid_t pid = fork();
  if (pid == 0) { /* a crash must end the child by its signal, not in the caller's handlers */
    const int deadly[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof(deadly) / sizeof(deadly[0]); i++) signal(deadly[i], SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    hwloc_topology_t t;
    int ok = hwloc_topology_init(&t) == 0 && hwloc_topology_set_xml(t, path) == 0 &&
             hwloc_topology_load(t) == 0;
    _exit(ok ? 0 : 1);
  }
  if (pid < 0) return ncclSuccess;
  int status = 0;
  const char *head = "cannot load the hwloc XML topology";
  switch (trial_wait(pid, limit, &status)) {
    case TRIAL_OVER_CPU:
      return TUTTI_ERR(ncclInvalidUsage,
                       "%s \"%s\": hwloc used more than %g s of CPU reading it (the limit, %s; "
                       "the trial load was killed): the file is malformed or describes objects far "
                       "beyond a real machine (e.g. an os_index near 2^31)",
                       head, path, limit, which);
    case TRIAL_OVER_WALL:
      return TUTTI_ERR(ncclInvalidUsage,
                       "%s \"%s\": hwloc used no CPU reading it for %g s (ten times %s, at least "
                       "10 s; the trial load was killed): the file blocks (a FIFO, a hung file "
                       "system)",
                       head, path, fmax(10 * limit, 10), which);
    case TRIAL_UNKNOWN:
      return ncclSuccess;
    case TRIAL_DONE:
      break;
  }
  if (WIFSIGNALED(status))
    return TUTTI_ERR(ncclInvalidUsage,
                     "%s \"%s\": hwloc crashed reading it (%s in a trial load): the file is "
                     "malformed (`lstopo --if xml --input FILE` crashes the same way)",
                     head, path, strsignal(WTERMSIG(status)));
  return ncclSuccess;
}

ncclResult_t topo_load_xml(const char *path, topo_t **out) {
  *out = NULL;
  if (access(path, R_OK) != 0)
    return TUTTI_ERR(ncclInvalidUsage, "cannot load the hwloc XML topology \"%s\": %s", path,
                     strerror(errno));
  TUTTI_CHECK(xml_trial(path));
  return topo_load_xml_tried(path, out);
}

ncclResult_t topo_load_xml_tried(const char *path, topo_t **out) {
  uint64_t t0 = tutti_time_ns();
  topo_t *t = NULL;
  ncclResult_t res;
  *out = NULL;
  TUTTI_CHECK(topo_new(&t));
  snprintf(t->source, sizeof(t->source), "%s", path);
  if (hwloc_topology_set_xml(t->hw, path) != 0 || hwloc_topology_load(t->hw) != 0) {
    res = TUTTI_ERR(ncclInvalidUsage,
                    "cannot load the hwloc XML topology \"%s\": it is not a "
                    "valid hwloc XML file (`lstopo --if xml --input FILE` shows what hwloc "
                    "finds wrong)",
                    path);
    goto fail;
  }
  TUTTI_CHECK_GOTO(topo_finish(t, t0), res, fail);
  *out = t;
  return ncclSuccess;
fail:
  topo_free(t);
  return res;
}

/* NCCL's own topology files (<system version=...>, e.g. the ones cloud images set through
 * NCCL_TOPO_FILE) are not hwloc XML. */
static int is_nccl_topo_file(const char *path) {
  char head[1024] = "";
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(head, 1, sizeof(head) - 1, f);
  fclose(f);
  head[n] = '\0';
  char *sys = strstr(head, "<system"), *topo = strstr(head, "<topology");
  return sys && (!topo || sys < topo);
}

/* "%h" -> host name, "%p" -> pid, as NCCL_DEBUG_FILE. */
static void expand_path(const char *in, char *out, size_t len) {
  size_t o = 0;
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  for (; *in && o + 1 < len; in++) {
    int w = 0;
    if (in[0] == '%' && in[1] == 'h')
      w = snprintf(out + o, len - o, "%s", host), in++;
    else if (in[0] == '%' && in[1] == 'p')
      w = snprintf(out + o, len - o, "%d", getpid()), in++;
    else
      out[o] = *in, w = 1;
    o += (size_t)w < len - o ? (size_t)w : len - o - 1;
  }
  out[o] = '\0';
}

static void dump_from_env(const topo_t *t) {
  char which[64], path[1024];
  const char *spec = tutti_getenv_which("TOPO_DUMP_FILE", which, sizeof(which));
  if (!spec) return;
  expand_path(spec, path, sizeof(path));
  if (topo_export_xml(t, path) == ncclSuccess)
    INFO(SUB_INIT, "topology: exported to %s (%s)", path, which);
}

ncclResult_t topo_load(topo_t **out) {
  char which[64];
  const char *file = tutti_getenv_which("TOPO_FILE", which, sizeof(which));
  if (file && strncmp(which, "NCCL_", 5) == 0 && is_nccl_topo_file(file)) {
    WARN("%s=%s is an NCCL topology file, not hwloc XML: ignored, discovering the machine", which,
         file);
    file = NULL;
  }
  if (file) {
    INFO(SUB_INIT, "topology: loading %s from %s", file, which);
    TUTTI_CHECK(topo_load_xml(file, out));
  } else {
    TUTTI_CHECK(topo_load_live(out));
  }
  dump_from_env(*out);
  return ncclSuccess;
}

static pthread_mutex_t process_lock = PTHREAD_MUTEX_INITIALIZER;
static topo_t *process_topo;

ncclResult_t topo_get_process(const topo_t **out) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&process_lock);
  if (!process_topo) res = topo_load(&process_topo);
  *out = process_topo;
  pthread_mutex_unlock(&process_lock);
  return res;
}

void topo_free(topo_t *t) {
  if (!t) return;
  if (t->hw) hwloc_topology_destroy(t->hw);
  free(t->gpus);
  free(t->gpu_obj);
  free(t->nics);
  free(t->nic_obj);
  free(t->nvl);
  free(t);
}

const char *topo_source(const topo_t *t) {
  return t->source;
}
int topo_is_live(const topo_t *t) {
  return t->live;
}
double topo_load_ms(const topo_t *t) {
  return t->load_ms;
}

void topo_get_counts(const topo_t *t, topo_counts_t *c) {
  c->packages = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE);
  c->numa_nodes = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
  c->cores = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE);
  c->pus = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU);
  c->gpus = t->ngpus;
  c->nics = t->nnics;
}

const topo_gpu_info_t *topo_gpu(const topo_t *t, int gpu) {
  return (gpu >= 0 && gpu < t->ngpus) ? &t->gpus[gpu] : NULL;
}

const topo_nic_info_t *topo_nic(const topo_t *t, int nic) {
  return (nic >= 0 && nic < t->nnics) ? &t->nics[nic] : NULL;
}

int topo_gpu_by_busid(const topo_t *t, const char *busid) {
  unsigned d, b, v, f;
  if (topo_parse_busid(busid, &d, &b, &v, &f) != 0) return -1;
  for (int i = 0; i < t->ngpus; i++) {
    const struct hwloc_pcidev_attr_s *p = &t->gpu_obj[i]->attr->pcidev;
    if (p->domain == d && p->bus == b && p->dev == v && p->func == f) return i;
  }
  return -1;
}

int topo_nvlinks(const topo_t *t, int a, int b) {
  if (a < 0 || b < 0 || a >= t->ngpus || b >= t->ngpus || a == b) return 0;
  return t->nvl[a * t->ngpus + b];
}
