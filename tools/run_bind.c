/* tutti-run's placement of ranks on CPUs (--bind auto|core|numa|none, --map spread|pack).
 *
 * By default (auto) each rank is bound to a core of its own when the ranks fit the CPUs the
 * launcher may use (its own affinity mask: taskset, cgroups, an outer launcher), as mpirun
 * binds to cores; with more ranks than CPUs they run unbound, and tutti-run says so. Which core
 * comes from the topology module (topo_place_ranks, src/topology/topo_place.c): NUMA nodes
 * filled by --map (pack: node by node, Open MPI's --map-by core; spread: balanced over the
 * nodes in blocks of consecutive ranks; default pack up to 2 ranks and spread above, as Open
 * MPI 4.1's mpirun maps by core up to 2 ranks and round-robin by socket above).
 *
 * Jobs side by side: every binding tutti-run job records the CPUs it took in a registry file
 * (TUTTI_RUN_CPU_REGISTRY, default /dev/shm/tutti-run-cpus, flock'ed while read or written):
 *
 *   <launcher pid> <launcher start time (clock ticks since boot, /proc/pid/stat field 22)> <CPUs>
 *
 * A line whose launcher is gone, a zombie, or a different process under a reused pid (its start
 * time differs) is stale: ignored and dropped at the next write. A new job places its ranks on
 * CPUs no live job claimed; when too few are free, auto leaves the ranks unbound and an explicit
 * --bind core|numa binds them anyway; either way a WARN line names the jobs in the way. The
 * launcher removes its line when the job ends (a SIGKILLed launcher's line goes stale), and the
 * file with its last line. Only tutti-run jobs of this pid namespace are seen: a launcher in
 * another one looks gone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "cpulist.h"
#include "run.h"
#include "topology/topo.h"

#define RUN_REGISTRY_DEFAULT "/dev/shm/tutti-run-cpus"
#define RUN_REGISTRY_MAX_BYTES (1 << 20)

/* ---------------------------------------------------------------- the registry */

/* Start time of pid (clock ticks since boot), 0 when it is gone or a zombie. */
static unsigned long long run_start_time(pid_t pid) {
  char buf[1024];
  const char *p = tutti_proc_stat((int)pid, buf, sizeof buf); /* from field 3, the state */
  if (p == NULL || *p == 'Z' || *p == 'X') return 0;
  for (int field = 3; field < 22 && p; field++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  return p ? strtoull(p, NULL, 10) : 0;
}

static const char *run_registry_path(void) {
  const char *p = getenv("TUTTI_RUN_CPU_REGISTRY");
  return p && *p ? p : RUN_REGISTRY_DEFAULT;
}

static int run_flock(int fd) {
  while (flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) return -1;
  return 0;
}

/* 1 while fd is still the file at path: the last job removes the file (run_registry_write), so
 * a launcher that waited for the lock on the removed file opens the path again. */
static int run_still_linked(int fd, const char *path) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Opens and locks the registry; -1 (errno set) when it cannot be opened for writing. */
static int run_registry_lock(void) {
  const char *path = run_registry_path();
  for (;;) {
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0666) != 0666)
      (void)fchmod(fd, 0666); /* every user's jobs share the machine's CPUs */
    if (run_flock(fd) != 0) {
      int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
    if (run_still_linked(fd, path)) return fd;
    close(fd);
  }
}

static char *run_registry_read(int fd) {
  char *text = calloc(1, RUN_REGISTRY_MAX_BYTES + 2); /* + a newline the last line lacked */
  size_t n = 0;
  ssize_t k;
  if (text == NULL) die("out of memory");
  while (n < RUN_REGISTRY_MAX_BYTES &&
         (k = pread(fd, text + n, RUN_REGISTRY_MAX_BYTES - n, (off_t)n)) != 0) {
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) break;
    n += (size_t)k;
  }
  text[n] = '\0';
  return text;
}

/* Keeps the live lines of text (minus the one of drop_pid, if any) in place, adds their CPUs
 * to busy and their pids to `who` ("1234, 5678"). */
static void run_registry_filter(char *text, pid_t drop_pid, cpu_set_t *busy, char *who,
                                size_t wholen) {
  char *out = text, *line = text, *next;
  CPU_ZERO(busy);
  who[0] = '\0';
  for (; *line; line = next) {
    next = strchr(line, '\n');
    next = next ? next + 1 : line + strlen(line);
    int pid;
    unsigned long long start;
    char cpus[4096];
    cpu_set_t set;
    int n = 0;
    if (next - line >= (long)sizeof cpus ||
        sscanf(line, "%d %llu %4095s%n", &pid, &start, cpus, &n) != 3 || pid <= 0 ||
        pid == drop_pid || run_start_time(pid) != start || tutti_cpulist_parse(cpus, &set) != 0)
      continue; /* stale, ours, or not a line of ours */
    CPU_OR(busy, busy, &set);
    size_t w = strlen(who);
    if (w + 16 < wholen) snprintf(who + w, wholen - w, "%s%d", w ? ", " : "", pid);
    size_t len = (size_t)(next - line);
    memmove(out, line, len);
    out += len;
    if (len && out[-1] != '\n') *out++ = '\n';
  }
  *out = '\0';
}

/* Replaces the registry's lines with text; with none left the file goes (under the lock), so
 * that no file outlives the last job. */
static void run_registry_write(int fd, const char *text) {
  size_t n = strlen(text), off = 0;
  if (n == 0 && unlink(run_registry_path()) == 0) return;
  if (ftruncate(fd, 0) != 0) return;
  while (off < n) {
    ssize_t k = pwrite(fd, text + off, n - off, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    off += (size_t)k;
  }
}

static pid_t run_claim_pid;

/* atexit: the job's line goes when tutti-run exits (also through die()). */
static void run_claim_release(void) {
  if (run_claim_pid == 0 || run_claim_pid != getpid()) return;
  int fd = run_registry_lock();
  if (fd < 0) return;
  char *text = run_registry_read(fd), who[16];
  cpu_set_t busy;
  run_registry_filter(text, run_claim_pid, &busy, who, sizeof who);
  run_registry_write(fd, text);
  free(text);
  close(fd);
  run_claim_pid = 0;
}

/* ---------------------------------------------------------------- placement */

static const char *bind_name(int mode) {
  static const char *names[] = {"auto", "none", "core", "numa"};
  return names[mode];
}

/* The mask the ranks are placed in: this process's affinity, as a list. */
static void launcher_mask(cpu_set_t *mask, char *list, size_t len) {
  if (sched_getaffinity(0, sizeof *mask, mask) != 0) die("sched_getaffinity: %s", strerror(errno));
  tutti_cpulist_format(mask, list, len);
}

static void warn_oversubscribed(const run_options_t *o, int units) {
  fprintf(stderr,
          "tutti-run: %d ranks on %d CPUs: ranks not bound (more ranks than CPUs; "
          "--bind numa binds each to its NUMA node)\n",
          o->nranks, units);
}

/* The placement failed to fit one rank per CPU: auto runs unbound, core needs --oversubscribe. */
static void handle_no_fit(run_options_t *o, const topo_place_t *p) {
  if (o->bind_mode == RUN_BIND_CORE && !o->oversubscribe)
    usage_error(
        "--bind core: %d ranks but only %d CPUs to bind them to (add --oversubscribe "
        "to run them unbound)",
        o->nranks, p->units);
  if (o->bind_mode == RUN_BIND_CORE)
    fprintf(stderr, "tutti-run: --oversubscribe: %d ranks on %d CPUs, not binding\n", o->nranks,
            p->units);
  else
    warn_oversubscribed(o, p->units);
}

/* Per-rank sets from the placement; 0 when a set cannot be read. */
static int run_take_sets(run_options_t *o, const topo_place_t *p, cpu_set_t *claim) {
  o->rank_sets = calloc((size_t)o->nranks, sizeof *o->rank_sets);
  if (o->rank_sets == NULL) die("out of memory");
  CPU_ZERO(claim);
  for (int r = 0; r < o->nranks; r++) {
    if (tutti_cpulist_parse(p->cpuset[r], &o->rank_sets[r]) != 0) return 0;
    CPU_OR(claim, claim, &o->rank_sets[r]);
  }
  return 1;
}

static void report_bindings(const run_options_t *o, const topo_place_t *p, int applied) {
  fprintf(stderr, "tutti-run: --bind %s: %s%s\n", bind_name(o->bind_mode), p->reason,
          applied ? "" : " (topology from a file: reported, not applied)");
  for (int r = 0; r < o->nranks; r++)
    fprintf(stderr, "tutti-run: rank %d bound to CPUs %s (NUMA %d)\n", r, p->cpuset[r], p->numa[r]);
}

/* Appends this launcher's line (its CPUs) to the registry text, released at exit. */
static void run_claim_add(char *text, const cpu_set_t *claim) {
  char list[4096], line[4200];
  tutti_cpulist_format(claim, list, sizeof list);
  run_claim_pid = getpid();
  snprintf(line, sizeof line, "%d %llu %s\n", (int)run_claim_pid, run_start_time(run_claim_pid),
           list);
  if (strlen(text) + strlen(line) <= RUN_REGISTRY_MAX_BYTES) strcat(text, line);
  atexit(run_claim_release);
}

/* What the placement means for the job: unbound (with the reason said), or bound (with a WARN
 * when ranks share CPUs with other jobs) and claimed. text: the registry's live lines, or NULL. */
static void apply_placement(run_options_t *o, const topo_place_t *p, int live, char *text,
                            const char *who, const char *busy_list) {
  cpu_set_t claim;
  if (!p->fits && o->bind_mode != RUN_BIND_NUMA) {
    handle_no_fit(o, p);
    return;
  }
  if (p->shared > 0 && o->bind_mode == RUN_BIND_AUTO) {
    fprintf(stderr,
            "tutti-run: WARN: CPUs %s are bound by other tutti-run jobs (launcher pid %s, %s); "
            "too few free for %d ranks: ranks not bound (--bind core binds them anyway)\n",
            busy_list, who, run_registry_path(), o->nranks);
    return;
  }
  if (p->shared > 0)
    fprintf(stderr,
            "tutti-run: WARN: %d rank(s) share CPUs with other tutti-run jobs (launcher pid %s "
            "bound CPUs %s, %s): too few free CPUs\n",
            p->shared, who, busy_list, run_registry_path());
  if (!run_take_sets(o, p, &claim)) die("cannot read the placement's CPU sets");
  if (!live) free(o->rank_sets), o->rank_sets = NULL;
  if (o->report_bindings) report_bindings(o, p, live);
  if (live && text) run_claim_add(text, &claim);
}

/* Places the ranks (a decision from the topology, the mask and the registry) and, when they
 * are bound, records their CPUs in the registry until the job ends. */
static void place_with_topology(run_options_t *o, const topo_t *t, int reg) {
  cpu_set_t mask, busy;
  char list[4096], busy_list[4096], who[512] = "";
  int live = topo_is_live(t);
  char *text = reg >= 0 ? run_registry_read(reg) : NULL;
  CPU_ZERO(&busy);
  if (text) run_registry_filter(text, 0, &busy, who, sizeof who);
  launcher_mask(&mask, list, sizeof list);
  tutti_cpulist_format(&busy, busy_list, sizeof busy_list);
  int spread = o->map_spread >= 0 ? o->map_spread : o->nranks > 2;
  topo_place_t p;
  if (topo_place_ranks(t, live ? list : NULL, live ? busy_list : NULL, o->nranks,
                       o->bind_mode == RUN_BIND_NUMA ? TOPO_PLACE_NUMA : TOPO_PLACE_CORE, spread,
                       &p) != ncclSuccess)
    die("cannot place the ranks: %s", tutti_last_error());
  apply_placement(o, &p, live, text, who, busy_list);
  if (text) run_registry_write(reg, text);
  free(text);
  topo_place_free(&p);
}

/* The topology, loaded with the library's logging at its default (WARN, stderr) and without a
 * topology dump: the ranks' TUTTI_DEBUG / TUTTI_DEBUG_FILE / TUTTI_TOPO_DUMP_FILE (and NCCL's
 * names) are meant for them, not for the launcher. The variables stay in the environment the
 * ranks inherit; the library reads its logging settings once, here. */
static ncclResult_t load_topology_quietly(const topo_t **t) {
  static const char *const names[] = {"TUTTI_DEBUG",          "NCCL_DEBUG",
                                      "TUTTI_DEBUG_FILE",     "NCCL_DEBUG_FILE",
                                      "TUTTI_TOPO_DUMP_FILE", "NCCL_TOPO_DUMP_FILE"};
  enum { N = sizeof names / sizeof names[0] };
  char *saved[N];
  for (int i = 0; i < N; i++) {
    const char *v = getenv(names[i]);
    saved[i] = v ? strdup(v) : NULL;
    unsetenv(names[i]);
  }
  tutti_log_enabled(LOG_WARN, 0); /* the library's logging settles with the masked settings */
  ncclResult_t res = topo_get_process(t);
  for (int i = 0; i < N; i++) {
    if (saved[i] && setenv(names[i], saved[i], 1) != 0) die("setenv: %s", strerror(errno));
    free(saved[i]);
  }
  return res;
}

void plan_binding(run_options_t *o) {
  const char *env = getenv("TUTTI_RUN_BIND");
  if (!o->bind_set && env && *env) o->bind_mode = parse_bind(env);
  if (o->bind_mode == RUN_BIND_NONE) return;
  const topo_t *t = NULL;
  if (load_topology_quietly(&t) != ncclSuccess || t == NULL) {
    if (o->bind_mode != RUN_BIND_AUTO)
      die("--bind %s: no topology: %s", bind_name(o->bind_mode), tutti_last_error());
    fprintf(stderr, "tutti-run: no topology (%s): ranks not bound\n", tutti_last_error());
    return;
  }
  int reg = run_registry_lock();
  if (reg < 0)
    fprintf(stderr, "tutti-run: cannot open %s (%s): other jobs' CPUs are not known\n",
            run_registry_path(), strerror(errno));
  place_with_topology(o, t, reg);
  if (reg >= 0) close(reg); /* unlocks */
}

void bind_rank(const run_options_t *o, int rank) {
  if (o->rank_sets == NULL) return;
  if (sched_setaffinity(0, sizeof o->rank_sets[rank], &o->rank_sets[rank]) != 0) {
    char list[256];
    tutti_cpulist_format(&o->rank_sets[rank], list, sizeof list);
    fprintf(stderr, "tutti-run: rank %d: cannot bind to CPUs %s: %s\n", rank, list,
            strerror(errno));
  }
}
