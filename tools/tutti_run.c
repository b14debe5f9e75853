/*
 * tutti-run: starts N ranks of a program on this host and supervises them.
 *
 *   tutti-run -n N [options] [--] prog args...
 *   tutti-run --hosts h1:2,h2:2 [options] [--] prog args...    (the namespace test bed)
 *
 * The protocol (read by tuttiCommInitFromEnv): every rank gets TUTTI_RANK, TUTTI_NRANKS,
 * TUTTI_LOCAL_RANK, TUTTI_LOCAL_SIZE, TUTTI_ROOT_ADDR=127.0.0.1:PORT and TUTTI_SECRET (128
 * random bits as 32 lowercase hex digits). The launcher opens the root's listening socket
 * itself before any rank starts, so the port is known up front and no rank can connect before
 * the root listens; rank 0 alone inherits that socket, its number in TUTTI_ROOT_FD.
 *
 * --hosts places the ranks on the hosts of scripts/netns-cluster.sh, blocked (ranks 0..c1-1 on
 * the first host, and so on; "h1,h2 -n 4" splits evenly): each rank enters the host's network
 * namespace (/run/netns/<prefix><host>) and a new UTS namespace named after the host, exactly
 * like `netns-cluster.sh exec`. The root's socket is then opened inside the first host and
 * TUTTI_ROOT_ADDR is that host's own address, which every host can reach.
 *
 * Supervision: all ranks share one new process group (the first rank's pid), so one kill()
 * reaches them and anything they started. The launcher sleeps in poll() on a self-pipe fed by
 * its signal handlers (SIGCHLD and the forwarded signals) and, with --prefix, on each rank's
 * stdout and stderr pipes, relaying whole lines as "[r] line". The first failing rank, a
 * --timeout or a SIGINT/SIGTERM to the launcher starts the shutdown: a signal to the group,
 * TUTTI_RUN_KILL_GRACE seconds (default 3), then SIGKILL. tutti-run returns only after every
 * rank has been reaped.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

/* ---------------------------------------------------------------- small helpers */

void die(const char *fmt, ...) {
  va_list ap;
  fputs("tutti-run: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return; /* stdout gone: the output is dropped, the job goes on */
    p += k;
    n -= (size_t)k;
  }
}

/* ---------------------------------------------------------------- command line */

static const char run_usage[] =
    "Usage: tutti-run -n N [options] [--] prog [args...]\n"
    "       (mpirun's spellings work too: -np N, -x VAR, -H h1:2,h2:2,\n"
    "       --bind-to core|numa|none, --map-by core|numa, --report-bindings,\n"
    "       --oversubscribe)\n";

static const char run_help[] =
    "Starts N ranks of prog on this host and waits for them. Each rank gets TUTTI_RANK,\n"
    "TUTTI_NRANKS, TUTTI_LOCAL_RANK, TUTTI_LOCAL_SIZE, TUTTI_ROOT_ADDR and TUTTI_SECRET;\n"
    "rank 0 also inherits the root's listening socket as TUTTI_ROOT_FD. If a rank fails, the\n"
    "others get SIGTERM and, TUTTI_RUN_KILL_GRACE seconds later (default 3), SIGKILL.\n"
    "\n"
    "Options:\n"
    "  -n N, -np N       number of ranks, 1 to 1024 (required unless -H gives counts)\n"
    "  --prefix          prefix each output line of rank r with \"[r] \"\n"
    "  --timeout SEC     stop the job after SEC seconds (exit status 124)\n"
    "  -x VAR=VALUE      add VAR=VALUE to the ranks' environment (repeatable); -x VAR passes\n"
    "                    this environment's VAR (the ranks inherit the environment anyway)\n"
    "  --bind MODE       auto (default, or $TUTTI_RUN_BIND): each rank on a core of its own\n"
    "  --bind-to MODE    when the ranks fit the CPUs tutti-run may use (its affinity mask) and\n"
    "                    no other tutti-run job holds them; else unbound, with a line saying\n"
    "                    why. core: the same, but binds even onto CPUs another job holds (with\n"
    "                    a WARN) and refuses more ranks than CPUs. numa: each rank on all the\n"
    "                    CPUs of its NUMA node. none: ranks keep tutti-run's own mask.\n"
    "                    Jobs record their CPUs in $TUTTI_RUN_CPU_REGISTRY (default\n"
    "                    /dev/shm/tutti-run-cpus)\n"
    "  --map spread|pack how ranks fill NUMA nodes: pack one node before the next, or spread\n"
    "  --map-by core|numa them evenly in blocks of consecutive ranks (default: pack up to 2\n"
    "                    ranks, spread above, as mpirun)\n"
    "  --report-bindings print each rank's CPUs and NUMA node (stderr)\n"
    "  --oversubscribe   more ranks than CPUs with --bind core: run them unbound instead of\n"
    "                    refusing\n"
    "  --heap MODE       shared (default, or $TUTTI_RUN_HEAP): the ranks run with\n"
    "                    libtutti-heap.so preloaded, so their malloc blocks of 64 KiB and more\n"
    "                    are memory the other ranks map, and collectives on them copy once\n"
    "                    (docs/perf.md, \"The shared heap\"); a forked child copies the live\n"
    "                    blocks. private: the C library's malloc, read by copy\n"
    "  --print-settings  print the TUTTI_* and NCCL_* variables passed to the ranks\n"
    "  -H, --hosts LIST  run on the hosts of the namespace test bed (scripts/netns-cluster.sh):\n"
    "                    \"h1:2,h2:2\" (ranks per host), \"h1,h2\" (one each) or \"h1,h2\" with\n"
    "                    -n N (split evenly); ranks are placed in blocks, rank 0 on the\n"
    "                    first host\n"
    "  --netns-prefix P  namespace prefix of the test bed (default $TUTTI_NETNS_PREFIX or tutti-)\n"
    "  --keep-going      a failing rank does not stop the others: they must notice by\n"
    "                    themselves (failure tests); the exit status is still the first failure's\n"
    "  -h, --help        show this help\n"
    "  --version         show the version\n"
    "\n"
    "Exit status: 0 if every rank exits 0; else the first failing rank's status (128+signal\n"
    "if it was killed), 124 on timeout, 127 if prog cannot be executed, 128+signal if\n"
    "tutti-run itself was stopped by SIGINT or SIGTERM, 2 on a usage error.\n";

void usage_error(const char *fmt, ...) {
  va_list ap;
  fputs("tutti-run: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n%sTry 'tutti-run --help' for more information.\n", run_usage);
  exit(RUN_EXIT_USAGE);
}

static int parse_nranks(const char *s) {
  char *end;
  errno = 0;
  long n = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || n < 1 || n > RUN_MAX_RANKS)
    usage_error("-n expects a rank count from 1 to %d, got '%s'", RUN_MAX_RANKS, s);
  return (int)n;
}

static double parse_seconds(const char *s, const char *what) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !isfinite(v) || v <= 0)
    usage_error("%s expects a positive number of seconds, got '%s'", what, s);
  return v;
}

/* -x VAR=VALUE goes straight into our environment, which the ranks inherit; the protocol
 * variables are set later and win. putenv keeps the argv string itself, which lives on.
 * -x VAR (mpirun's form) passes this environment's VAR, which the ranks inherit anyway. */
static void add_extra_env(char *assignment) {
  const char *eq = strchr(assignment, '=');
  if (eq == NULL && assignment[0] &&
      strspn(assignment,
             "abcdefghijklmnopqrstuvwxyz"
             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == strlen(assignment)) {
    if (!getenv(assignment))
      fprintf(stderr, "tutti-run: -x %s: not set here, so not passed\n", assignment);
    return;
  }
  if (eq == NULL || eq == assignment)
    usage_error("-x expects VAR or VAR=VALUE, got '%s'", assignment);
  if (putenv(assignment) != 0) die("putenv: %s", strerror(errno));
}

/* "h1:2,h2:2" or "h1,h2": host names (letters, digits, '.', '_', '-') with optional counts. */
static void parse_hosts(const char *spec, run_options_t *o) {
  o->hosts = calloc(RUN_MAX_HOSTS, sizeof *o->hosts);
  if (o->hosts == NULL) die("out of memory");
  o->nhosts = 0;
  int with_counts = -1;
  for (const char *p = spec; *p;) {
    size_t len = strcspn(p, ",");
    char item[96];
    if (len == 0 || len >= sizeof item || o->nhosts == RUN_MAX_HOSTS)
      usage_error("--hosts expects h1,h2 or h1:2,h2:2 (at most %d hosts), got '%s'", RUN_MAX_HOSTS,
                  spec);
    memcpy(item, p, len);
    item[len] = '\0';
    char *colon = strchr(item, ':');
    run_host_t *h = &o->hosts[o->nhosts++];
    if (colon) {
      *colon = '\0';
      h->count = parse_nranks(colon + 1);
    }
    if ((with_counts >= 0 && with_counts != (colon != NULL)))
      usage_error("--hosts: give a rank count for every host or for none ('%s')", spec);
    with_counts = colon != NULL;
    if (item[0] == '\0' || strlen(item) >= sizeof h->name ||
        strspn(item,
               "abcdefghijklmnopqrstuvwxyz"
               "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(item))
      usage_error("--hosts: bad host name '%s'", item);
    snprintf(h->name, sizeof h->name, "%s", item);
    p += len + (p[len] == ',');
  }
  if (o->nhosts == 0) usage_error("--hosts: no host given");
}

/* Ranks per host: the given counts (which must add up to -n, if given), or -n split evenly. */
static void place_ranks(run_options_t *o) {
  int sum = 0;
  for (int i = 0; i < o->nhosts; i++) sum += o->hosts[i].count;
  if (sum > 0 && o->nranks > 0 && sum != o->nranks)
    usage_error("--hosts places %d ranks but -n says %d", sum, o->nranks);
  if (sum > RUN_MAX_RANKS) usage_error("--hosts places %d ranks, at most %d", sum, RUN_MAX_RANKS);
  if (sum > 0) {
    o->nranks = sum;
    return;
  }
  if (o->nranks == 0) o->nranks = o->nhosts; /* "h1,h2,h3": one rank each */
  for (int i = 0; i < o->nhosts; i++)
    o->hosts[i].count = o->nranks / o->nhosts + (i < o->nranks % o->nhosts);
  if (o->hosts[o->nhosts - 1].count == 0) usage_error("-n %d is fewer ranks than hosts", o->nranks);
}

/* Host index of rank r (blocked placement) and its rank and count on that host. */
static int host_of_rank(const run_options_t *o, int r, int *local_rank) {
  int first = 0;
  for (int i = 0; i < o->nhosts; i++) {
    if (r < first + o->hosts[i].count) {
      *local_rank = r - first;
      return i;
    }
    first += o->hosts[i].count;
  }
  *local_rank = r;
  return -1;
}

int parse_bind(const char *v) {
  static const struct {
    const char *name;
    int mode;
  } modes[] = {{"auto", RUN_BIND_AUTO},
               {"none", RUN_BIND_NONE},
               {"core", RUN_BIND_CORE},
               {"numa", RUN_BIND_NUMA}};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
    if (strcmp(v, modes[i].name) == 0) return modes[i].mode;
  usage_error("--bind takes auto, core, numa or none, not '%s'", v);
}

/* --map spread|pack; mpirun's --map-by core (pack) and numa (spread) are taken too. */
static int parse_map(const char *v) {
  if (strcmp(v, "spread") == 0 || strcmp(v, "numa") == 0) return 1;
  if (strcmp(v, "pack") == 0 || strcmp(v, "core") == 0) return 0;
  usage_error("--map takes spread or pack, not '%s'", v);
}

/* Long options; getopt_long_only also takes them after one dash, as mpirun does ("-np 4",
 * "-oversubscribe"), while "-n4" and "-x A=1" stay short options. */
enum {
  OPT_TIMEOUT = 256,
  OPT_PREFIX,
  OPT_BIND,
  OPT_PRINT,
  OPT_NETNS,
  OPT_KEEP,
  OPT_VERSION,
  OPT_OVERSUB,
  OPT_MAP,
  OPT_REPORT,
  OPT_HEAP
};
static const struct option run_long_options[] = {
    {"np", required_argument, NULL, 'n'},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"prefix", no_argument, NULL, OPT_PREFIX},
    {"bind", required_argument, NULL, OPT_BIND},
    {"bind-to", required_argument, NULL, OPT_BIND},
    {"oversubscribe", no_argument, NULL, OPT_OVERSUB},
    {"map", required_argument, NULL, OPT_MAP},
    {"map-by", required_argument, NULL, OPT_MAP},
    {"report-bindings", no_argument, NULL, OPT_REPORT},
    {"heap", required_argument, NULL, OPT_HEAP},
    {"print-settings", no_argument, NULL, OPT_PRINT},
    {"hosts", required_argument, NULL, 'H'},
    {"host", required_argument, NULL, 'H'},
    {"netns-prefix", required_argument, NULL, OPT_NETNS},
    {"keep-going", no_argument, NULL, OPT_KEEP},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0}};

static void parse_option(int c, char *v, run_options_t *o) {
  switch (c) {
    case 'n':
      o->nranks = parse_nranks(v);
      break;
    case OPT_TIMEOUT:
      o->timeout_s = parse_seconds(v, "--timeout");
      break;
    case 'x':
      add_extra_env(v);
      break;
    case OPT_PREFIX:
      o->prefix = 1;
      break;
    case OPT_BIND:
      o->bind_mode = parse_bind(v), o->bind_set = 1;
      break;
    case OPT_MAP:
      o->map_spread = parse_map(v);
      break;
    case OPT_REPORT:
      o->report_bindings = 1;
      break;
    case OPT_HEAP:
      o->heap = parse_heap(v), o->heap_set = 1;
      break;
    case OPT_OVERSUB:
      o->oversubscribe = 1;
      break;
    case OPT_PRINT:
      o->print_settings = 1;
      break;
    case 'H':
      parse_hosts(v, o);
      break;
    case OPT_NETNS:
      o->netns_prefix = v;
      break;
    case OPT_KEEP:
      o->keep_going = 1;
      break;
    case 'h':
      printf("%s%s", run_usage, run_help);
      exit(0);
    case OPT_VERSION:
      printf("tutti-run (tutti) %s\n", TUTTI_RUN_VERSION);
      exit(0);
    default:
      usage_error("unknown option '%s'", v ? v : "?");
  }
}

static void parse_args(int argc, char **argv, run_options_t *o) {
  int c, idx;
  opterr = 0; /* our own messages, with the usage line */
  while ((c = getopt_long_only(argc, argv, "+:n:x:H:h", run_long_options, &idx)) != -1) {
    if (c == '?' || c == ':')
      usage_error(c == ':' ? "option '%s' needs a value" : "unknown option '%s'", argv[optind - 1]);
    parse_option(c, optarg, o);
  }
  int i = optind;
  if (o->hosts) place_ranks(o);
  if (o->nranks == 0) usage_error("the rank count -n N (or -np N) is required");
  plan_binding(o);
  if (!o->netns_prefix) o->netns_prefix = getenv("TUTTI_NETNS_PREFIX");
  if (!o->netns_prefix || !*o->netns_prefix) o->netns_prefix = "tutti-";
  if (i >= argc) usage_error("no program given");
  o->prog_argv = argv + i;
}

/* ---------------------------------------------------------------- job setup */

static double read_kill_grace(void) {
  const char *s = getenv("TUTTI_RUN_KILL_GRACE");
  if (s == NULL || *s == '\0') return RUN_DEFAULT_GRACE_S;
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || !isfinite(v) || v < 0) {
    fprintf(stderr, "tutti-run: ignoring TUTTI_RUN_KILL_GRACE='%s' (not a number of seconds)\n", s);
    return RUN_DEFAULT_GRACE_S;
  }
  return v;
}

/* With --prefix the launcher holds two pipes per rank: make sure the fd limit allows it. */
static void raise_fd_limit(const run_options_t *o) {
  rlim_t need = (rlim_t)(o->prefix ? 2 * o->nranks : 0) + 32;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need) return;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
    die("%d ranks need %lu open files, the hard limit is %lu", o->nranks, (unsigned long)need,
        (unsigned long)rl.rlim_max);
  rl.rlim_cur = need;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    die("cannot raise the open file limit: %s", strerror(errno));
}

static void make_secret(char hex[33]) {
  unsigned char raw[16];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw)
      die("cannot read random bytes for the job secret: %s", strerror(errno));
    close(fd);
  }
  for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
}

/* The root's listening socket, any port: on 127.0.0.1, or on every address of `family`
 * (the test bed's first host). CLOEXEC: only rank 0 keeps it. */
static int open_root_listener(int *port, int family, int loopback) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("cannot create the root socket: %s", strerror(errno));
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
    die("setsockopt(SO_REUSEADDR) on the root socket: %s", strerror(errno));
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in *sa = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *sa6 = (struct sockaddr_in6 *)&ss;
  socklen_t len = family == AF_INET6 ? sizeof *sa6 : sizeof *sa;
  ss.ss_family = (sa_family_t)family;
  if (family == AF_INET)
    sa->sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
  else
    sa6->sin6_addr = in6addr_any; /* dual stack */
  if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    die("cannot listen for the root: %s", strerror(errno));
  *port = ntohs(family == AF_INET6 ? sa6->sin6_port : sa->sin_port);
  return fd;
}

/* ---------------------------------------------------------------- namespace test bed */

static int open_host_netns(const run_options_t *o, const char *host) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "/run/netns/%s%s", o->netns_prefix, host);
  return open(path, O_RDONLY | O_CLOEXEC);
}

/* The root's socket inside the first host: enter its network namespace, listen on every
 * address, advertise its first non-loopback IPv4 address, come back. */
static int open_root_listener_in_host(const run_options_t *o, char *addr, size_t len) {
  const char *host = o->hosts[0].name;
  int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), ns = open_host_netns(o, host);
  if (self < 0 || ns < 0)
    die("cannot open the network namespace of host %s (/run/netns/%s%s): %s; is the test bed up "
        "(scripts/netns-cluster.sh up K) with the same prefix?",
        host, o->netns_prefix, host, strerror(errno));
  if (setns(ns, CLONE_NEWNET) != 0)
    die("cannot enter host %s: %s (root needed)", host, strerror(errno));
  struct ifaddrs *ifs = NULL, *ifa = NULL;
  if (getifaddrs(&ifs) != 0) die("getifaddrs: %s", strerror(errno));
  for (int family = AF_INET; family && !ifa; family = family == AF_INET ? AF_INET6 : 0)
    for (ifa = ifs; ifa; ifa = ifa->ifa_next)
      if (ifa->ifa_addr && ifa->ifa_addr->sa_family == family && (ifa->ifa_flags & IFF_UP) &&
          !(ifa->ifa_flags & IFF_LOOPBACK) &&
          !(family == AF_INET6 &&
            IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr)))
        break;
  if (ifa == NULL) die("host %s has no IPv4 or global IPv6 address", host);
  int family = ifa->ifa_addr->sa_family, port, fd = open_root_listener(&port, family, 0);
  char ip[INET6_ADDRSTRLEN];
  if (family == AF_INET) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)ifa->ifa_addr)->sin_addr, ip, sizeof ip);
    snprintf(addr, len, "%s:%d", ip, port);
  } else {
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr, ip, sizeof ip);
    snprintf(addr, len, "[%s]:%d", ip, port);
  }
  freeifaddrs(ifs);
  if (setns(self, CLONE_NEWNET) != 0)
    die("cannot return to our network namespace: %s", strerror(errno));
  close(self);
  close(ns);
  for (int i = 1; i < o->nhosts; i++) { /* every host must exist before anything starts */
    int f = open_host_netns(o, o->hosts[i].name);
    if (f < 0)
      die("host %s: no namespace /run/netns/%s%s (is the test bed up?)", o->hosts[i].name,
          o->netns_prefix, o->hosts[i].name);
    close(f);
  }
  return fd;
}

/* In a rank's child: become a process of `host` (network namespace + hostname). */
static int enter_host(const run_options_t *o, const char *host) {
  int fd = open_host_netns(o, host);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return -1;
  close(fd);
  if (unshare(CLONE_NEWUTS) != 0 || sethostname(host, strlen(host)) != 0) return -1;
  return 0;
}

static void set_env(const char *name, const char *value) {
  if (setenv(name, value, 1) != 0) die("setenv %s: %s", name, strerror(errno));
}

static void set_env_int(const char *name, int value) {
  char s[16];
  snprintf(s, sizeof s, "%d", value);
  set_env(name, s);
}

/* Sets what every rank shares in our own environment; the per-rank variables are set in
 * each child after fork. They override any -x setting of the same name. */
static void prepare_environment(run_job_t *job) {
  int port;
  char addr[64], secret[33];
  if (job->opt.hosts) {
    job->listen_fd = open_root_listener_in_host(&job->opt, addr, sizeof addr);
  } else {
    job->listen_fd = open_root_listener(&port, AF_INET, 1);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  }
  make_secret(secret);
  set_env_int("TUTTI_NRANKS", job->opt.nranks);
  set_env_int("TUTTI_LOCAL_SIZE", job->opt.nranks);
  set_env("TUTTI_ROOT_ADDR", addr);
  set_env("TUTTI_ROOT_LISTENING", "1"); /* opened above: a refused connection means rank 0 left */
  set_env("TUTTI_SECRET", secret);
  unsetenv("TUTTI_RANK");
  unsetenv("TUTTI_LOCAL_RANK");
  unsetenv("TUTTI_ROOT_FD");
}

static int compare_strings(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* --print-settings: the TUTTI_* and NCCL_* variables the ranks get, sorted. The secret is
 * shown as set, not printed; the per-rank variables are shown as their ranges. */
static void print_settings(const run_job_t *job) {
  extern char **environ;
  size_t n = 0, cap = 8;
  for (char **e = environ; *e; e++) cap++;
  char **lines = calloc(cap, sizeof *lines);
  char ranks[64], fd[64];
  if (lines == NULL) die("out of memory");
  snprintf(ranks, sizeof ranks, "0..%d", job->opt.nranks - 1);
  snprintf(fd, sizeof fd, "TUTTI_ROOT_FD=%d (rank 0 only)", job->listen_fd);
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "TUTTI_", 6) == 0 || strncmp(*e, "NCCL_", 5) == 0) lines[n++] = *e;
  qsort(lines, n, sizeof *lines, compare_strings);
  printf("tutti-run: settings passed to the ranks:\n");
  for (size_t i = 0; i < n; i++) {
    if (strncmp(lines[i], "TUTTI_SECRET=", 13) == 0)
      printf("  TUTTI_SECRET=<32 hex digits, not shown>\n");
    else
      printf("  %s\n", lines[i]);
  }
  printf("  TUTTI_RANK=%s\n  TUTTI_LOCAL_RANK=%s\n  %s\n", ranks, ranks, fd);
  const char *preload = getenv("LD_PRELOAD");
  if (job->opt.heap == RUN_HEAP_SHARED && preload) printf("  LD_PRELOAD=%s\n", preload);
  fflush(stdout);
  free(lines);
}

/* ---------------------------------------------------------------- launching */

/* In the child: wire up stdio and the environment, then exec. On failure the errno goes back
 * through status_fd (closed by a successful exec) and the parent prints the error. */
static void child_exec(const run_job_t *job, int rank, int out_fd, int err_fd, int status_fd,
                       const sigset_t *old_mask, pid_t launcher) {
  restore_child_signals(old_mask);
  /* A rank dies with tutti-run, also when tutti-run is SIGKILLed and cannot forward anything:
   * the kernel sends SIGKILL when the parent exits. If the parent is already gone (it died
   * before this line), the rank never starts. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher) _exit(RUN_EXIT_NOEXEC);
  setpgid(0, job->pgid); /* pgid 0 for the first rank: a new group named by its pid */
  bind_rank(&job->opt, rank);
  if (job->opt.prefix) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
  }
  if (rank != 0) { /* like mpirun: stdin goes to rank 0 only */
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0 && null_fd != STDIN_FILENO) {
      dup2(null_fd, STDIN_FILENO);
      close(null_fd);
    }
  }
  char num[16];
  snprintf(num, sizeof num, "%d", rank);
  setenv("TUTTI_RANK", num, 1);
  setenv("TUTTI_LOCAL_RANK", num, 1);
  if (job->opt.hosts) {
    int local, h = host_of_rank(&job->opt, rank, &local);
    if (enter_host(&job->opt, job->opt.hosts[h].name) != 0) {
      fprintf(stderr, "tutti-run: rank %d cannot enter host %s: %s\n", rank, job->opt.hosts[h].name,
              strerror(errno));
      _exit(RUN_EXIT_NOEXEC);
    }
    snprintf(num, sizeof num, "%d", local);
    setenv("TUTTI_LOCAL_RANK", num, 1);
    snprintf(num, sizeof num, "%d", job->opt.hosts[h].count);
    setenv("TUTTI_LOCAL_SIZE", num, 1);
  }
  if (rank == 0) {
    fcntl(job->listen_fd, F_SETFD, 0); /* clear FD_CLOEXEC: rank 0 inherits the socket */
    snprintf(num, sizeof num, "%d", job->listen_fd);
    setenv("TUTTI_ROOT_FD", num, 1);
  }
  execvp(job->opt.prog_argv[0], job->opt.prog_argv);
  int e = errno;
  ssize_t ignored = write(status_fd, &e, sizeof e);
  (void)ignored;
  _exit(RUN_EXIT_NOEXEC);
}

void stream_init(run_stream_t *s, int fd, int out_fd) {
  s->fd = fd;
  s->out_fd = out_fd;
  s->len = 0;
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

void close_pair(int p[2]) {
  close_fd(&p[0]);
  close_fd(&p[1]);
}

/* 0 if the exec succeeded, else the child's errno. */
static int read_exec_status(int fd) {
  int e = 0;
  ssize_t n;
  do {
    n = read(fd, &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof e ? e : 0;
}

/* Forks rank r. Returns 0 once it runs prog, the exec's errno if prog could not be executed
 * (the child then exits 127), or -errno if no child could be made. */
static int spawn_rank(run_job_t *job, int r) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
  if (pipe2(status, O_CLOEXEC) != 0 ||
      (job->opt.prefix && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0))) {
    int e = errno;
    close_pair(out);
    close_pair(err);
    close_pair(status);
    return -e;
  }
  sigset_t old;
  block_signals(&old);
  fflush(NULL);
  pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid == 0) child_exec(job, r, out[1], err[1], status[1], &old, launcher);
  int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  close_fd(&out[1]);
  close_fd(&err[1]);
  close_fd(&status[1]);
  if (pid < 0) {
    close_fd(&out[0]);
    close_fd(&err[0]);
    close_fd(&status[0]);
    return -fork_errno;
  }
  if (job->pgid == 0) job->pgid = pid;
  setpgid(pid, job->pgid); /* also done in the child; whichever runs first wins the race */
  run_rank_t *rk = &job->ranks[r];
  rk->pid = pid;
  stream_init(&rk->out, out[0], STDOUT_FILENO);
  stream_init(&rk->err, err[0], STDERR_FILENO);
  job->nlaunched++;
  job->nalive++;
  int exec_errno = read_exec_status(status[0]);
  close(status[0]);
  return exec_errno;
}

static void launch_ranks(run_job_t *job) {
  if (job->opt.timeout_s > 0) job->timeout_at = now_s() + job->opt.timeout_s;
  for (int r = 0; r < job->opt.nranks; r++) {
    int e = spawn_rank(job, r);
    if (e > 0) {
      fprintf(stderr, "tutti-run: cannot execute '%s': %s\n", job->opt.prog_argv[0], strerror(e));
      start_shutdown(job, RUN_EXIT_NOEXEC, SIGTERM);
      break;
    }
    if (e < 0) {
      fprintf(stderr, "tutti-run: cannot start rank %d: %s\n", r, strerror(-e));
      start_shutdown(job, 1, SIGTERM);
      break;
    }
  }
  close(job->listen_fd); /* rank 0 has its copy */
  job->listen_fd = -1;
}

/* Makes sure fds 0..2 are open, so no socket or pipe of ours lands on a stdio number. */
static void ensure_stdio_open(void) {
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0)
      die("cannot open /dev/null: %s", strerror(errno));
}

int main(int argc, char **argv) {
  run_job_t job;
  memset(&job, 0, sizeof job);
  job.listen_fd = -1;
  job.opt.map_spread = -1; /* mpirun's rule: pack up to 2 ranks, spread above */
  ensure_stdio_open();
  parse_args(argc, argv, &job.opt);
  job.grace_s = read_kill_grace();
  raise_fd_limit(&job.opt);
  prepare_heap(&job.opt);
  install_signal_handlers();
  prepare_environment(&job);
  if (job.opt.print_settings) print_settings(&job);
  job.ranks = calloc((size_t)job.opt.nranks, sizeof *job.ranks);
  if (job.ranks == NULL) die("out of memory");
  launch_ranks(&job);
  supervise(&job);
  free(job.ranks);
  free(job.opt.hosts);
  free(job.opt.rank_sets);
  return job.exit_code;
}
