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
 * The job secret is TUTTI_SECRET when given, else derived from the job id and root address.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  } else if (env_int("OMPI_COMM_WORLD_RANK", &l->rank) && env_int("OMPI_COMM_WORLD_SIZE", &l->nranks)) {
    l->launcher = "Open MPI";
    env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &l->local_size);
    snprintf(l->job, sizeof(l->job), "ompi-%s", env_or("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE") ?: "0");
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
    int64_t port = 0;
    if (tutti_parse_int(mport, &port) || port < 1 || port > 65535)
      return TUTTI_ERR(ncclInvalidUsage,
                       "tuttiCommInitFromEnv (%s): MASTER_PORT=\"%s\" is not a port (1-65535)",
                       l->launcher, mport);
    port += getenv("TORCHELASTIC_RUN_ID") ? 1 : 0;
    snprintf(l->root, sizeof(l->root), strchr(maddr, ':') ? "[%s]:%d" : "%s:%d", maddr, (int)port);
  } else if (l->local_size != l->nranks) {
    l->multi_host = 1;
  }
  if (l->rank < 0 || l->rank >= l->nranks)
    return TUTTI_ERR(ncclInvalidUsage, "tuttiCommInitFromEnv (%s): rank %d is outside [0, %d)",
                     l->launcher, l->rank, l->nranks);
  if (!l->job[0]) snprintf(l->job, sizeof(l->job), "%s", l->root);
  return ncclSuccess;
}

static void derive_secret(const launch_t *l, const char *root, unsigned char secret[16]) {
  const char *hex = getenv("TUTTI_SECRET");
  if (hex && strlen(hex) >= 32) {
    for (int i = 0; i < 16; i++) {
      unsigned v = 0;
      sscanf(hex + 2 * i, "%2x", &v);
      secret[i] = (unsigned char)v;
    }
    return;
  }
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (const char *s = l->job; *s; s++) h1 = (h1 ^ (unsigned char)*s) * 0x100000001b3ull;
  for (const char *s = root; *s; s++) h2 = (h2 ^ (unsigned char)*s) * 0x100000001b3ull;
  memcpy(secret, &h1, 8);
  memcpy(secret + 8, &h2, 8);
}

static void rdv_path(const launch_t *l, char *path, size_t len) {
  char safe[128];
  size_t i = 0;
  for (; l->job[i] && i < sizeof(safe) - 1; i++)
    safe[i] = (l->job[i] == '/' || l->job[i] == ' ') ? '_' : l->job[i];
  safe[i] = '\0';
  snprintf(path, len, "/tmp/tutti-rdv-%s", safe);
}

/* Rank 0: listen (inherited fd, the given port, or any port on loopback) and start the root. */
static ncclResult_t start_root(launch_t *l, sock_addr_t *addr) {
  int fd = l->root_fd;
  if (fd >= 0) {
    socklen_t len = sizeof(*addr);
    sock_addr_t bound;
    if (getsockname(fd, &bound.sa, &len) != 0)
      return TUTTI_ERR(ncclInvalidUsage, "TUTTI_ROOT_FD=%d is not a listening socket", fd);
    unsetenv("TUTTI_ROOT_FD"); /* not inherited by children of this rank */
  } else {
    sock_addr_t any = *addr;
    if (l->root[0]) { /* listen on every address of this host at the given port */
      if (any.sa.sa_family == AF_INET6) memset(&any.sin6.sin6_addr, 0, sizeof(any.sin6.sin6_addr));
      else any.sin.sin_addr.s_addr = 0;
    }
    TUTTI_CHECK(sock_listen(&any, &fd));
    if (!l->root[0]) *addr = any;
  }
  char text[80];
  sock_addr_str(addr, text, sizeof(text));
  unsigned char secret[16];
  derive_secret(l, l->root[0] ? l->root : l->job, secret);
  ncclUniqueId id;
  bootstrap_make_id(addr, secret, &id);
  ncclResult_t res = bootstrap_root_start(fd, &id);
  if (res != ncclSuccess) close(fd);
  return res;
}

static ncclResult_t publish_rdv(const launch_t *l, const sock_addr_t *addr) {
  char path[256], tmp[300], text[80];
  rdv_path(l, path, sizeof(path));
  snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return TUTTI_ERR(ncclSystemError, "cannot write %s: %s", tmp, strerror(errno));
  fprintf(f, "%s\n", sock_addr_str(addr, text, sizeof(text)));
  fclose(f);
  if (rename(tmp, path) != 0) return TUTTI_ERR(ncclSystemError, "cannot rename %s: %s", tmp, strerror(errno));
  return ncclSuccess;
}

static ncclResult_t read_rdv(const launch_t *l, sock_addr_t *addr) {
  char path[256], text[300];
  rdv_path(l, path, sizeof(path));
  uint64_t deadline = tutti_time_ns() + (uint64_t)bootstrap_init_timeout_ms() * 1000000ull;
  while (tutti_time_ns() < deadline) {
    FILE *f = fopen(path, "r");
    if (f) {
      int ok = fgets(text, sizeof(text), f) != NULL;
      fclose(f);
      if (ok) {
        text[strcspn(text, "\n")] = '\0';
        return sock_addr_parse(text, addr);
      }
    }
    usleep(10000);
  }
  return TUTTI_ERR(ncclSystemError, "rank %d: rank 0 did not publish its address in %s within "
                   "TUTTI_INIT_TIMEOUT", l->rank, path);
}

API ncclResult_t tuttiCommInitFromEnv(ncclComm_t *comm) {
  tutti_clear_error();
  if (!comm) return TUTTI_ERR(ncclInvalidArgument, "tuttiCommInitFromEnv: comm is NULL");
  *comm = NULL;
  launch_t l;
  sock_addr_t addr;
  TUTTI_CHECK(detect(&l));
  if (!l.root[0]) {
    int used = 0;
    ncclUniqueId id;
    TUTTI_CHECK(pmix_boot_id(l.rank, l.nranks, &id, &used));
    if (used) return ncclCommInitRank(comm, l.nranks, id, l.rank);
    if (l.multi_host)
      return TUTTI_ERR(ncclInvalidUsage, "tuttiCommInitFromEnv (%s): ranks span several hosts, "
                       "no PMIx server answers and MASTER_ADDR and MASTER_PORT (or "
                       "TUTTI_ROOT_ADDR) are not set: set them to an address and free port of "
                       "rank 0's host", l.launcher);
  }
  if (l.root[0]) TUTTI_CHECK(sock_addr_parse(l.root, &addr));
  else {
    memset(&addr, 0, sizeof(addr));
    addr.sin.sin_family = AF_INET;
    addr.sin.sin_addr.s_addr = htonl(0x7f000001);
  }
  if (l.rank == 0) {
    TUTTI_CHECK(start_root(&l, &addr));
    if (!l.root[0]) TUTTI_CHECK(publish_rdv(&l, &addr));
  } else if (!l.root[0]) {
    TUTTI_CHECK(read_rdv(&l, &addr));
  }
  char text[80];
  sock_addr_str(&addr, text, sizeof(text));
  unsigned char secret[16];
  derive_secret(&l, l.root[0] ? l.root : l.job, secret);
  ncclUniqueId id;
  bootstrap_make_id(&addr, secret, &id);
  INFO(SUB_INIT | SUB_BOOTSTRAP, "launcher %s: rank %d of %d, root %s", l.launcher, l.rank, l.nranks, text);
  ncclResult_t res = ncclCommInitRank(comm, l.nranks, id, l.rank);
  if (l.rank == 0 && !l.root[0]) {
    char path[256];
    rdv_path(&l, path, sizeof(path));
    unlink(path);
  }
  return res;
}
