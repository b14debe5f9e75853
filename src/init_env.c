/* tuttiCommInitFromEnv: one communicator per process from a launcher's environment.
 *
 *   tutti-run  TUTTI_RANK, TUTTI_NRANKS, TUTTI_ROOT_ADDR, TUTTI_SECRET (+ TUTTI_ROOT_FD: the
 *              launcher's listening socket, handed to rank 0, so no port can be taken first)
 *   torchrun   RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (under torchrun itself the port is
 *              taken by its store, so tutti uses MASTER_PORT + 1 when TORCHELASTIC_RUN_ID is set)
 *   Open MPI   OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK     Slurm  SLURM_PROCID/NTASKS/LOCALID
 * Open MPI and Slurm give no root address: with MASTER_ADDR/MASTER_PORT (or TUTTI_ROOT_ADDR)
 * set it is used; else, under a PMIx server (mpirun, srun --mpi=pmix), rank 0 publishes a unique
 * id through PMIx (pmix_boot.c), across hosts; else, if all ranks are on one host, rank 0
 * publishes its address in a file /tmp/tutti-rdv-<job id> that the others read (removed once
 * everyone joined).
 * The job secret (docs/security.md) is TUTTI_SECRET when given (exactly 32 hex digits, else
 * init fails). Without it, when every rank is on one host, rank 0 draws a random secret and
 * hands it to the others in the rendezvous file, which only its user can read; on several hosts
 * it is derived from the job id and root address, which anyone who can reach the root can
 * compute: a warning says so.
 * The rendezvous file names rank 0's pid and start time; a file whose writer is gone is stale
 * and ignored, so a crashed job's file does not send the ranks to a dead address.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap.h"
#include "pmix_boot.h"

typedef struct launch {
  const char *launcher;
  int rank, nranks, local_size;
  char root[300]; /* "host:port", empty: PMIx or file rendezvous */
  int multi_host; /* ranks on several hosts and no root address: only PMIx can help */
  char job[320];  /* job identity for the rendezvous file and the derived secret */
  int root_fd;
} launch_t;

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end) return 0;
  *out = (int)x;
  return 1;
}

static const char *env_or(const char *a, const char *b) {
  const char *v = getenv(a);
  return (v && *v) ? v : (b ? getenv(b) : NULL);
}

static ncclResult_t detect(launch_t *l) {
  memset(l, 0, sizeof(*l));
  l->root_fd = -1, l->local_size = -1;
  if (env_int("TUTTI_RANK", &l->rank) && env_int("TUTTI_NRANKS", &l->nranks)) {
    l->launcher = "tutti-run";
    env_int("TUTTI_LOCAL_SIZE", &l->local_size);
    env_int("TUTTI_ROOT_FD", &l->root_fd);
  } else if (env_int("RANK", &l->rank) && env_int("WORLD_SIZE", &l->nranks)) {
    l->launcher = "torchrun-style";
    env_int("LOCAL_WORLD_SIZE", &l->local_size);
  } else if (env_int("OMPI_COMM_WORLD_RANK", &l->rank) &&
             env_int("OMPI_COMM_WORLD_SIZE", &l->nranks)) {
    l->launcher = "Open MPI";
    env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &l->local_size);
    snprintf(l->job, sizeof(l->job), "ompi-%s",
             env_or("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE") ?: "0");
  } else if (env_int("SLURM_PROCID", &l->rank) && env_int("SLURM_NTASKS", &l->nranks)) {
    l->launcher = "Slurm";
    snprintf(l->job, sizeof(l->job), "slurm-%s.%s", getenv("SLURM_JOB_ID") ?: "0",
             getenv("SLURM_STEP_ID") ?: "0");
    const char *nodes = getenv("SLURM_NNODES");
    if (nodes && atoi(nodes) == 1) l->local_size = l->nranks;
  } else {
    return TUTTI_ERR(ncclInvalidUsage,
                     "tuttiCommInitFromEnv: no launcher environment found: run under tutti-run, "
                     "mpirun or srun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  }
  const char *root = getenv("TUTTI_ROOT_ADDR");
  const char *maddr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
  if (root && *root) {
    snprintf(l->root, sizeof(l->root), "%s", root);
  } else if ((maddr && *maddr) || (mport && *mport)) {
    if (!maddr || !*maddr || !mport || !*mport)
      return TUTTI_ERR(ncclInvalidUsage, "tuttiCommInitFromEnv (%s): %s is set but %s is missing",
                       l->launcher, maddr && *maddr ? "MASTER_ADDR" : "MASTER_PORT",
                       maddr && *maddr ? "MASTER_PORT" : "MASTER_ADDR");
    char *end = NULL;
    long port = strtol(mport, &end, 10) + (getenv("TORCHELASTIC_RUN_ID") ? 1 : 0);
    if (end == mport || *end || port < 1 || port > 65535)
      return TUTTI_ERR(
          ncclInvalidArgument,
          "tuttiCommInitFromEnv (%s): MASTER_PORT=\"%s\" is not "
          "a port number in [1, 65535]%s",
          l->launcher, mport,
          getenv("TORCHELASTIC_RUN_ID") ? " (tutti uses MASTER_PORT + 1 under torchrun)" : "");
    snprintf(l->root, sizeof(l->root), strchr(maddr, ':') ? "[%s]:%ld" : "%s:%ld", maddr, port);
  } else if (l->local_size != l->nranks) {
    l->multi_host = 1;
  }
  if (l->rank < 0 || l->rank >= l->nranks)
    return TUTTI_ERR(ncclInvalidUsage, "tuttiCommInitFromEnv (%s): rank %d is outside [0, %d)",
                     l->launcher, l->rank, l->nranks);
  if (!l->job[0]) snprintf(l->job, sizeof(l->job), "%s", l->root);
  return ncclSuccess;
}

/* TUTTI_SECRET: 1 and the secret when set and well formed, 0 when not set, else an error. */
static ncclResult_t secret_from_env(unsigned char secret[16], int *given) {
  const char *hex = getenv("TUTTI_SECRET");
  *given = 0;
  if (!hex || !*hex) return ncclSuccess;
  size_t n = strlen(hex);
  if (n != 32)
    return TUTTI_ERR(ncclInvalidArgument,
                     "TUTTI_SECRET must be exactly 32 hexadecimal digits "
                     "(128 bits, e.g. from `openssl rand -hex 16`); it has %zu characters",
                     n);
  for (size_t i = 0; i < 32; i++)
    if (!isxdigit((unsigned char)hex[i]))
      return TUTTI_ERR(ncclInvalidArgument,
                       "TUTTI_SECRET must be exactly 32 hexadecimal digits; "
                       "character %zu is not one",
                       i + 1);
  for (int i = 0; i < 16; i++) {
    unsigned v = 0;
    sscanf(hex + 2 * i, "%2x", &v);
    secret[i] = (unsigned char)v;
  }
  *given = 1;
  return ncclSuccess;
}

/* The secret of a multi-host job without TUTTI_SECRET: computable from the job id and root. */
static void derive_secret(const launch_t *l, const char *root, unsigned char secret[16]) {
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (const char *s = l->job; *s; s++) h1 = (h1 ^ (unsigned char)*s) * 0x100000001b3ull;
  for (const char *s = root; *s; s++) h2 = (h2 ^ (unsigned char)*s) * 0x100000001b3ull;
  memcpy(secret, &h1, 8);
  memcpy(secret + 8, &h2, 8);
}

static void rdv_path(const launch_t *l, char *path, size_t len) {
  char safe[128];
  size_t i = 0;
  for (; i < sizeof(safe) - 1 && l->job[i]; i++)
    safe[i] = (l->job[i] == '/' || l->job[i] == ' ') ? '_' : l->job[i];
  safe[i] = '\0';
  snprintf(path, len, "/tmp/tutti-rdv-%s", safe);
}

/* Start time of a process (clock ticks after boot, /proc/<pid>/stat field 22); 0 if gone. */
static unsigned long long proc_start_time(int pid) {
  char buf[1024];
  const char *p = tutti_proc_stat(pid, buf, sizeof(buf));
  unsigned long long start = 0;
  if (!p || sscanf(p,
                   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                   "%*d %*d %llu",
                   &start) != 1)
    return 0;
  return start;
}

/* Rank 0: listen (inherited fd, the root's own address and port, or any port on loopback) and
 * start the root with `secret`. */
static ncclResult_t start_root(launch_t *l, sock_addr_t *addr, const unsigned char secret[16]) {
  int fd = l->root_fd;
  if (fd >= 0) {
    socklen_t len = sizeof(*addr);
    sock_addr_t bound;
    if (getsockname(fd, &bound.sa, &len) != 0)
      return TUTTI_ERR(ncclInvalidUsage, "TUTTI_ROOT_FD=%d is not a listening socket", fd);
    unsetenv("TUTTI_ROOT_FD"); /* not inherited by children of this rank */
  } else {
    sock_addr_t here = *addr; /* the address the ranks connect to, not every address */
    if (sock_listen(&here, &fd) != ncclSuccess) {
      if (!l->root[0]) return ncclSystemError;
      char text[80]; /* not an address of this host (NAT, a proxy): the port on every address */
      WARN("cannot listen on %s (%s); listening on every address of this host at its port",
           sock_addr_str(addr, text, sizeof(text)), tutti_last_error());
      here = *addr;
      if (here.sa.sa_family == AF_INET6)
        memset(&here.sin6.sin6_addr, 0, sizeof(here.sin6.sin6_addr));
      else
        here.sin.sin_addr.s_addr = 0;
      TUTTI_CHECK(sock_listen(&here, &fd));
    }
    if (!l->root[0]) *addr = here;
  }
  ncclUniqueId id;
  bootstrap_make_id(addr, secret, &id);
  ncclResult_t res = bootstrap_root_start(fd, &id);
  if (res != ncclSuccess) close(fd);
  return res;
}

/* The rendezvous file: "address\nsecret-hex or -\npid start-time\n", mode 0600. */
static ncclResult_t publish_rdv(const launch_t *l, const sock_addr_t *addr,
                                const unsigned char *secret) {
  char path[256], tmp[300], text[80], hex[33] = "-";
  rdv_path(l, path, sizeof(path));
  snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
  if (secret)
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", secret[i]);
  unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return TUTTI_ERR(ncclSystemError, "cannot write %s: %s", tmp, strerror(errno));
  }
  fprintf(f, "%s\n%s\n%d %llu\n", sock_addr_str(addr, text, sizeof(text)), hex, (int)getpid(),
          proc_start_time((int)getpid()));
  fclose(f);
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return TUTTI_ERR(ncclSystemError, "cannot replace %s: %s (left by another user? remove it)",
                     path, strerror(e));
  }
  return ncclSuccess;
}

/* One look at the rendezvous file: 1 when it is there and its writer alive, 0 to wait more. */
static int read_rdv_once(const char *path, char *addr, size_t alen, char *hex, size_t hlen,
                         int *stale) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  FILE *f = fdopen(fd, "r");
  int pid = 0, got = 0;
  unsigned long long start = 0;
  if (f) {
    got = fgets(addr, (int)alen, f) && fgets(hex, (int)hlen, f) &&
          fscanf(f, "%d %llu", &pid, &start) == 2;
    fclose(f);
  } else {
    close(fd);
  }
  if (!got) return 0; /* being written: look again */
  if (pid <= 0 || proc_start_time(pid) != start) {
    *stale = 1; /* its writer is gone: a crashed job's file */
    return 0;
  }
  addr[strcspn(addr, "\n")] = '\0';
  hex[strcspn(hex, "\n")] = '\0';
  return 1;
}

static ncclResult_t read_rdv(const launch_t *l, sock_addr_t *addr, unsigned char *secret) {
  char path[256], text[300], hex[80];
  rdv_path(l, path, sizeof(path));
  uint64_t deadline = tutti_time_ns() + (uint64_t)bootstrap_init_timeout_ms() * 1000000ull;
  int stale = 0;
  while (tutti_time_ns() < deadline) {
    int rc = read_rdv_once(path, text, sizeof(text), hex, sizeof(hex), &stale);
    if (rc < 0)
      return TUTTI_ERR(ncclSystemError,
                       "rank %d: cannot use the rendezvous file %s: %s (it must "
                       "belong to this user and be readable by no one else)",
                       l->rank, path, strerror(errno));
    if (rc == 1) {
      if (secret) {
        for (int i = 0; i < 16; i++) {
          unsigned v = 0;
          if (strlen(hex) != 32 || sscanf(hex + 2 * i, "%2x", &v) != 1)
            return TUTTI_ERR(ncclSystemError, "rank %d: %s holds no job secret", l->rank, path);
          secret[i] = (unsigned char)v;
        }
      }
      return addr ? sock_addr_parse(text, addr) : ncclSuccess;
    }
    usleep(10000);
  }
  return TUTTI_ERR(ncclSystemError,
                   "rank %d: rank 0 did not publish its address%s in %s within "
                   "TUTTI_INIT_TIMEOUT%s",
                   l->rank, secret ? " and the job secret" : "", path,
                   stale ? " (the file there was left by a process that is gone)" : "");
}

/* The job secret: TUTTI_SECRET; else on one host a random one that rank 0 hands over in the
 * rendezvous file (use_file); else derived, with a warning. */
static ncclResult_t choose_secret(const launch_t *l, unsigned char secret[16], int *use_file) {
  int given = 0;
  *use_file = 0;
  TUTTI_CHECK(secret_from_env(secret, &given));
  if (given) return ncclSuccess;
  if (l->local_size == l->nranks) {
    *use_file = 1;
    if (l->rank == 0 && getrandom(secret, 16, 0) != 16)
      return TUTTI_ERR(ncclSystemError, "getrandom: %s", strerror(errno));
    return ncclSuccess;
  }
  derive_secret(l, l->root[0] ? l->root : l->job, secret);
  if (l->rank == 0)
    WARN(
        "tuttiCommInitFromEnv (%s): no TUTTI_SECRET on a job across hosts: its secret is "
        "derived from the root address %s, so anyone who can reach that port can join as a "
        "rank; set TUTTI_SECRET to the same 32 hex digits on every rank (see docs/security.md)",
        l->launcher, l->root[0] ? l->root : l->job);
  return ncclSuccess;
}

API ncclResult_t tuttiCommInitFromEnv(ncclComm_t *comm) {
  tutti_clear_error();
  if (!comm) return TUTTI_ERR(ncclInvalidArgument, "tuttiCommInitFromEnv: comm is NULL");
  *comm = NULL;
  launch_t l;
  sock_addr_t addr;
  unsigned char secret[16];
  int use_file = 0;
  TUTTI_CHECK(detect(&l));
  if (!l.root[0]) { /* no root address given: a PMIx server (mpirun, srun) passes the id */
    int used = 0;
    ncclUniqueId pid;
    TUTTI_CHECK(pmix_boot_id(l.rank, l.nranks, &pid, &used));
    if (used) return ncclCommInitRank(comm, l.nranks, pid, l.rank);
    if (l.multi_host)
      return TUTTI_ERR(ncclInvalidUsage,
                       "tuttiCommInitFromEnv (%s): ranks span several hosts, no PMIx server "
                       "answers and MASTER_ADDR and MASTER_PORT (or TUTTI_ROOT_ADDR) are not set: "
                       "set them to an address and free port of rank 0's host",
                       l.launcher);
  }
  TUTTI_CHECK(choose_secret(&l, secret, &use_file));
  if (l.root[0])
    TUTTI_CHECK(sock_addr_parse(l.root, &addr));
  else {
    memset(&addr, 0, sizeof(addr));
    addr.sin.sin_family = AF_INET;
    addr.sin.sin_addr.s_addr = htonl(0x7f000001);
  }
  int rdv = use_file || !l.root[0];
  if (l.rank == 0) {
    TUTTI_CHECK(start_root(&l, &addr, secret));
    if (rdv) TUTTI_CHECK(publish_rdv(&l, &addr, use_file ? secret : NULL));
  } else if (rdv) {
    sock_addr_t published;
    TUTTI_CHECK(read_rdv(&l, &published, use_file ? secret : NULL));
    if (!l.root[0]) addr = published;
  }
  char text[80];
  sock_addr_str(&addr, text, sizeof(text));
  ncclUniqueId id;
  bootstrap_make_id(&addr, secret, &id);
  /* tutti-run opened the root's socket before any rank started; true of the first init only (a
   * second one's root listens anew, maybe after a rank tries it): every rank forgets it here */
  if (strcmp(l.launcher, "tutti-run") == 0 && getenv("TUTTI_ROOT_LISTENING"))
    bootstrap_id_set_root_listened(&id);
  unsetenv("TUTTI_ROOT_LISTENING");
  INFO(SUB_INIT | SUB_BOOTSTRAP, "launcher %s: rank %d of %d, root %s, secret from %s", l.launcher,
       l.rank, l.nranks, text,
       use_file                 ? "the rendezvous file"
       : getenv("TUTTI_SECRET") ? "TUTTI_SECRET"
                                : "the root address");
  ncclResult_t res = ncclCommInitRank(comm, l.nranks, id, l.rank);
  if (l.rank == 0 && rdv) {
    char path[256];
    rdv_path(&l, path, sizeof(path));
    unlink(path);
  }
  return res;
}
