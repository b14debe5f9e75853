/* Shared-memory transport, peer memory (transport.h): a rank's buffers read or written by its
 * local peers in place.
 *
 * Device buffers go to cuda_p2p.c (CUDA IPC, agreed at setup after CMA);
 * ncclMemAlloc regions are mapped by peers (memreg.c); any other memory of a local
 * peer (heap) is read by copy with process_vm_readv (cross-memory attach: the kernel copies
 * straight from the peer's pages, one copy where the FIFOs make two). Whether that works is
 * decided once, at setup, by every rank alike: each rank reads its local peers' segment headers
 * with process_vm_readv (the kernel allows it for processes of one user that are dumpable, under
 * Yama's ptrace_scope 0, or with CAP_SYS_PTRACE), and the ranks' answers are all-gathered; one
 * refusal, or TUTTI_CMA=0 on any rank, turns it off on every rank (comm->peer_read = 0).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#include "bootstrap.h"
#include "copy.h"
#include "cuda_p2p.h"
#include "memreg.h"
#include "shm.h"

TUTTI_PARAM(Cma, "CMA", 1)

/* Under Yama's ptrace_scope 1 only a process's ancestors may read it: let any process of this
 * user read this one (what Open MPI's shared-memory transport does too), or peers' reads of it
 * are refused and shm_cma_agree turns reading by copy off everywhere. */
void shm_cma_allow_peers(void) {
  if (!tutti_param_Cma()) return;
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  int scope = 0;
  if (!f) return;
  if (fscanf(f, "%d", &scope) != 1) scope = 0;
  fclose(f);
  if (scope == 1 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
    INFO(SUB_SHM, "Yama ptrace_scope 1: peers of this user may read this process (PR_SET_PTRACER)");
}

/* process_vm_readv (write = 0) or process_vm_writev of all `bytes` between `local` here and
 * `remote` in process pid (a call may move less than asked); 0 or the errno. */
int shm_cma_move(int pid, void *local, uint64_t remote, size_t bytes, int write) {
  while (bytes > 0) {
    struct iovec l = {local, bytes}, r = {(void *)(uintptr_t)remote, bytes};
    ssize_t got =
        write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got <= 0) return got < 0 ? errno : EIO;
    local = (char *)local + got, remote += (uint64_t)got, bytes -= (size_t)got;
  }
  return 0;
}

/* This rank's answer to "can I read every local peer's memory by copy": 1, or 0 with why. */
static int cma_probe(struct ncclComm *comm, char *why, size_t len) {
  shm_state_t *st = comm->shm;
  if (!tutti_param_Cma()) return snprintf(why, len, "TUTTI_CMA=0"), 0;
  for (int p = 0; st && p < comm->nranks; p++) {
    if (p == comm->rank || !st->peer_seg[p]) continue;
    uint64_t magic = 0;
    int err = shm_cma_move(comm->peers[p].pid, &magic, st->peer_seg_addr[p], sizeof(magic), 0);
    if (err || magic != SHM_MAGIC)
      return snprintf(why, len, "process_vm_readv of rank %d (pid %d): %s", p, comm->peers[p].pid,
                      err ? strerror(err) : "read the wrong bytes"),
             0;
  }
  return 1;
}

/* Collective: comm->peer_read is 1 on every rank when every rank can read its local peers. */
ncclResult_t shm_cma_agree(struct ncclComm *comm) {
  int n = comm->nranks, first_no = -1;
  int32_t *ok = calloc((size_t)n, sizeof(int32_t));
  if (!ok) return TUTTI_ERR(ncclSystemError, "out of memory");
  char why[200] = "";
  ok[comm->rank] = cma_probe(comm, why, sizeof(why));
  ncclResult_t res = bootstrap_allgather(comm, ok, sizeof(int32_t));
  for (int r = 0; r < n && first_no < 0; r++)
    if (!ok[r]) first_no = r;
  free(ok);
  TUTTI_CHECK(res);
  comm->peer_read = first_no < 0;
  if (first_no < 0)
    INFO(SUB_SHM, "CMA: peers read heap buffers by copy (process_vm_readv), all ranks can");
  else if (first_no == comm->rank)
    INFO(SUB_SHM, "CMA refused here (%s): heap buffers go through the FIFOs on every rank", why);
  else
    INFO(SUB_SHM, "CMA refused on rank %d: heap buffers go through the FIFOs on every rank",
         first_no);
  return ncclSuccess;
}

/* A buffer can be mapped when it lies in one ncclMemAlloc region; a peer in the same process
 * (ranks as threads) uses the address as is, whatever the memory. Other memory can be read by
 * copy where every rank agreed it can (comm->peer_read). */
void shm_handle_of(const void *buf, size_t bytes, shm_handle_t *sh) {
  *sh = (shm_handle_t){
      .pid = (int32_t)tutti_self_pid(), .addr = (uint64_t)(uintptr_t)buf, .bytes = bytes};
  sh->shared = memreg_find(buf, bytes, &sh->ref);
}

ncclResult_t shm_handle_map(struct ncclComm *comm, int peer, const shm_handle_t *sh,
                            const char **addr) {
  if (sh->pid == (int32_t)tutti_self_pid()) {
    *addr = (const char *)(uintptr_t)sh->addr;
    return ncclSuccess;
  }
  if (!sh->shared) {
    *addr = NULL; /* heap memory of another process: not mappable */
    return ncclSuccess;
  }
  const char *base;
  TUTTI_CHECK(memreg_map_peer(comm, peer, sh->pid, &sh->ref, (size_t)sh->bytes, &base));
  *addr = base + sh->ref.offset;
  return ncclSuccess;
}

int shm_mem_expose(struct ncclComm *comm, const void *buf, size_t bytes, peer_handle_t *h) {
  if (comm->device_possible && cuda_p2p_is_device(buf)) return cuda_p2p_expose(comm, buf, bytes, h);
  shm_handle_t sh;
  shm_handle_of(buf, bytes, &sh);
  if (sh.shared && memreg_populate_own(comm, buf, bytes, &sh.ref) != ncclSuccess)
    return PEER_EXPOSE_NONE;
  memset(h, 0, sizeof(*h));
  memcpy(h->bytes, &sh, sizeof(sh));
  if (sh.shared) return PEER_EXPOSE_MAP;
  for (int p = 0; p < comm->nranks; p++) /* heap memory: only peers of this process can map it */
    if (comm->peers[p].pid != sh.pid) return comm->peer_read ? PEER_EXPOSE_READ : PEER_EXPOSE_NONE;
  return PEER_EXPOSE_MAP;
}

/* One copy between a peer's buffer and `local`: memcpy within this process, process_vm_readv
 * or process_vm_writev otherwise. */
static ncclResult_t mem_move(struct ncclComm *comm, int peer, const peer_handle_t *h, size_t off,
                             void *local, size_t bytes, int write) {
  shm_handle_t sh;
  memcpy(&sh, h->bytes, sizeof(sh));
  char *remote = (char *)(uintptr_t)sh.addr + off;
  if (sh.pid == (int32_t)tutti_self_pid()) {
    copy_bytes(write ? remote : local, write ? local : remote, bytes);
    return ncclSuccess;
  }
  int err = shm_cma_move(sh.pid, local, sh.addr + off, bytes, write);
  if (err)
    return TUTTI_ERR(ncclSystemError,
                     "rank %d: process_vm_%s of %zu bytes %s rank %d (pid %d) "
                     "failed: %s",
                     comm->rank, write ? "writev" : "readv", bytes, write ? "to" : "from", peer,
                     (int)sh.pid, strerror(err));
  return ncclSuccess;
}

ncclResult_t shm_mem_read(struct ncclComm *comm, int peer, const peer_handle_t *h, size_t off,
                          void *dst, size_t bytes) {
  return mem_move(comm, peer, h, off, dst, bytes, 0);
}

ncclResult_t shm_mem_write(struct ncclComm *comm, int peer, const peer_handle_t *h, size_t off,
                           const void *src, size_t bytes) {
  return mem_move(comm, peer, h, off, (void *)src, bytes, 1);
}

ncclResult_t shm_mem_map(struct ncclComm *comm, int peer, const peer_handle_t *h,
                         const char **addr) {
  if (cuda_p2p_is_handle(h)) return cuda_p2p_map(comm, peer, h, addr);
  shm_handle_t sh;
  memcpy(&sh, h->bytes, sizeof(sh));
  return shm_handle_map(comm, peer, &sh, addr);
}

volatile uint64_t *shm_mem_word(struct ncclComm *comm, int rank, int which) {
  shm_state_t *st = comm->shm;
  if (!st || !st->seg) return NULL;
  shm_header_t *h = (shm_header_t *)(rank == comm->rank ? st->seg : st->peer_seg[rank]);
  if (!h) return NULL;
  return which == PEER_WORD_PROGRESS ? &h->peer_progress : &h->peer_done;
}

/* The word's address in its owner's mapping: the same number for every rank of this process. */
const void *shm_mem_word_key(struct ncclComm *comm, int rank, int which) {
  shm_state_t *st = comm->shm;
  size_t off = which == PEER_WORD_PROGRESS ? offsetof(shm_header_t, peer_progress)
                                           : offsetof(shm_header_t, peer_done);
  if (!st || !st->seg) return NULL;
  if (rank == comm->rank) return st->seg + off;
  if (comm->peers[rank].pid != tutti_self_pid() || !st->peer_seg_addr[rank]) return NULL;
  return (const char *)(uintptr_t)st->peer_seg_addr[rank] + off;
}
