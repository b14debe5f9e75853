/* The functions NCCL 2.28 added to nccl.h, so that a program built against current NCCL loads
 * on tutti and gets either a working result or ncclInvalidUsage with a message naming the
 * function (never a missing symbol).
 *
 * - ncclCommInitRankScalable: NCCL spreads the bootstrap over nId roots to speed up very large
 *   jobs. tutti's bootstrap has one root, so every rank joins commIds[0]; rank k (0 < k < nId)
 *   also joins the root of commIds[k] as the single rank of a throw-away communicator, so no
 *   root created by ncclGetUniqueId stays behind waiting for ranks until its timeout.
 * - ncclCommShrink: the lowest surviving rank draws a new unique id and sends it to the other
 *   survivors over the parent's point-to-point links; excluded ranks do not call. The parent
 *   must be healthy: tutti cannot rebuild a communicator that lost a rank (NCCL_SHRINK_ABORT on
 *   a failed parent returns ncclInvalidUsage).
 * - ncclCommRevoke: releases every operation waiting on the communicator (as ncclCommAbort,
 *   without freeing it); afterwards only ncclCommDestroy / ncclCommAbort are accepted.
 * - ncclCommWindowRegister / ncclCommWindowDeregister, ncclGroupSimulateEnd: not available
 *   (see include/tutti.h); they check their arguments, then return ncclInvalidUsage.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "transport/transport.h"

#define SIM_INFO_MAGIC 0x74685283u

/* ---- ncclCommInitRankScalable ---- */

static ncclResult_t scalable_check_args(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                        const ncclUniqueId *commIds) {
  const char *fn = "ncclCommInitRankScalable";
  if (!newcomm) return TUTTI_ERR(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (nranks < 1) return TUTTI_ERR(ncclInvalidArgument, "%s: nranks %d must be >= 1", fn, nranks);
  if (myrank < 0 || myrank >= nranks)
    return TUTTI_ERR(ncclInvalidArgument, "%s: myrank %d is outside [0, nranks=%d)", fn, myrank,
                     nranks);
  if (nId < 1 || nId > nranks)
    return TUTTI_ERR(ncclInvalidArgument, "%s: nId %d must be in [1, nranks=%d]", fn, nId, nranks);
  if (!commIds) return TUTTI_ERR(ncclInvalidArgument, "%s: commIds is NULL", fn);
  return ncclSuccess;
}

/* Joins the root of `id` as the only rank of a communicator and destroys it at once. */
static ncclResult_t scalable_release_root(const ncclUniqueId *id) {
  ncclComm_t tmp = NULL;
  TUTTI_CHECK(ncclCommInitRank(&tmp, 1, *id, 0));
  return ncclCommDestroy(tmp);
}

API ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                          ncclUniqueId *commIds, ncclConfig_t *config) {
  tutti_clear_error();
  TUTTI_CHECK(scalable_check_args(newcomm, nranks, myrank, nId, commIds));
  TUTTI_CHECK(ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config));
  if (myrank > 0 && myrank < nId) {
    ncclResult_t res = scalable_release_root(&commIds[myrank]);
    if (res != ncclSuccess) {
      ncclCommDestroy(*newcomm);
      *newcomm = NULL;
      return TUTTI_ERR(res,
                       "ncclCommInitRankScalable: rank %d could not join the root of "
                       "commIds[%d]: %s",
                       myrank, myrank, tutti_last_error());
    }
  }
  return ncclSuccess;
}

/* ---- ncclCommShrink ---- */

/* Fills keep[] with 1 for the ranks that stay; checks the list. */
static ncclResult_t shrink_parse_excluded(ncclComm_t comm, const int *list, int count, char *keep) {
  const char *fn = "ncclCommShrink";
  if (count < 0 || count >= comm->nranks)
    return TUTTI_ERR(ncclInvalidArgument, "%s: excludeRanksCount %d must be in [0, nranks=%d)", fn,
                     count, comm->nranks);
  if (count > 0 && !list)
    return TUTTI_ERR(ncclInvalidArgument, "%s: excludeRanksList is NULL with count %d", fn, count);
  memset(keep, 1, (size_t)comm->nranks);
  for (int i = 0; i < count; i++) {
    int r = list[i];
    if (r < 0 || r >= comm->nranks)
      return TUTTI_ERR(ncclInvalidArgument, "%s: excludeRanksList[%d] = %d is outside [0, %d)", fn,
                       i, r, comm->nranks);
    if (!keep[r])
      return TUTTI_ERR(ncclInvalidArgument, "%s: rank %d appears twice in excludeRanksList", fn, r);
    keep[r] = 0;
  }
  if (!keep[comm->rank])
    return TUTTI_ERR(ncclInvalidUsage,
                     "%s: rank %d is in excludeRanksList; excluded ranks must "
                     "not call ncclCommShrink",
                     fn, comm->rank);
  return ncclSuccess;
}

/* The lowest surviving rank draws the id and sends it to the other survivors. */
static ncclResult_t shrink_share_id(ncclComm_t comm, const char *keep, ncclUniqueId *id) {
  int first = 0;
  while (!keep[first]) first++;
  if (comm->rank != first) return ncclRecv(id, sizeof(*id), ncclUint8, first, comm, NULL);
  TUTTI_CHECK(ncclGetUniqueId(id));
  TUTTI_CHECK(ncclGroupStart());
  ncclResult_t res = ncclSuccess;
  for (int r = 0; r < comm->nranks && res == ncclSuccess; r++)
    if (keep[r] && r != first) res = ncclSend(id, sizeof(*id), ncclUint8, r, comm, NULL);
  ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

API ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  const char *fn = "ncclCommShrink";
  tutti_clear_error();
  if (!newcomm) return TUTTI_ERR(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return TUTTI_ERR(ncclInvalidArgument,
                     "%s: shrinkFlags %d must be NCCL_SHRINK_DEFAULT or "
                     "NCCL_SHRINK_ABORT",
                     fn, shrinkFlags);
  TUTTI_CHECK(comm_check_handle(comm, fn));
  if (comm_check_state(comm, fn) != ncclSuccess)
    return TUTTI_ERR(ncclInvalidUsage,
                     "%s: tutti cannot shrink a communicator that failed, was "
                     "revoked or aborted (%s); create a new one with ncclCommInitRank",
                     fn, tutti_last_error());
  char *keep = malloc((size_t)comm->nranks);
  if (!keep) return TUTTI_ERR(ncclSystemError, "%s: out of memory", fn);
  ncclResult_t res = shrink_parse_excluded(comm, excludeRanksList, excludeRanksCount, keep);
  int newrank = 0;
  for (int r = 0; r < comm->rank; r++) newrank += keep[r];
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (res == ncclSuccess) res = shrink_share_id(comm, keep, &id);
  if (res == ncclSuccess)
    res = ncclCommInitRankConfig(newcomm, comm->nranks - excludeRanksCount, id, newrank, config);
  if (res == ncclSuccess) {
    (*newcomm)->cuda_dev = comm->cuda_dev, (*newcomm)->dev_ctx = comm->dev_ctx;
    INFO(SUB_INIT, "shrink: parent rank %d -> rank %d of %d", comm->rank, newrank,
         comm->nranks - excludeRanksCount);
  }
  free(keep);
  return res;
}

/* ---- ncclCommRevoke ---- */

API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  TUTTI_CHECK(comm_check_handle(comm, "ncclCommRevoke"));
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return TUTTI_ERR(ncclInvalidArgument,
                     "ncclCommRevoke: revokeFlags %d must be "
                     "NCCL_REVOKE_DEFAULT (0)",
                     revokeFlags);
  __atomic_store_n(&comm->abort_flag, 1, __ATOMIC_RELEASE); /* releases a blocked call */
  transport_mark_failed(comm);                              /* and the peers waiting on us */
  INFO(SUB_INIT, "comm %p rank %d revoked", (void *)comm, comm->rank);
  return ncclSuccess;
}

/* ---- what tutti cannot do ---- */

API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                        int winFlags) {
  const char *fn = "ncclCommWindowRegister";
  TUTTI_CHECK(comm_check(comm, fn));
  if (!win) return TUTTI_ERR(ncclInvalidArgument, "%s: win is NULL", fn);
  *win = NULL;
  if (!buff || size == 0)
    return TUTTI_ERR(ncclInvalidArgument, "%s: buff %p / size %zu describe no memory", fn, buff,
                     size);
  return TUTTI_ERR(ncclInvalidUsage,
                   "%s: tutti has no symmetric memory windows (they need device "
                   "memory mapped by the CUDA driver into every rank); use ncclMemAlloc and "
                   "ncclCommRegister for in-place access between ranks of a host",
                   fn);
}

API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  const char *fn = "ncclCommWindowDeregister";
  TUTTI_CHECK(comm_check_handle(comm, fn));
  return TUTTI_ERR(ncclInvalidUsage,
                   "%s: window %p was not registered by tutti (tutti has no "
                   "symmetric memory windows)",
                   fn, (void *)win);
}

API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  const char *fn = "ncclGroupSimulateEnd";
  if (!simInfo) return TUTTI_ERR(ncclInvalidArgument, "%s: simInfo is NULL", fn);
  if (simInfo->magic != SIM_INFO_MAGIC || simInfo->size < sizeof(ncclSimInfo_t))
    return TUTTI_ERR(ncclInvalidArgument,
                     "%s: simInfo was not initialised with "
                     "NCCL_SIM_INFO_INITIALIZER",
                     fn);
  return TUTTI_ERR(ncclInvalidUsage,
                   "%s: tutti cannot simulate a group (tutti-sim models "
                   "schedules offline); the group stays open: finish it with ncclGroupEnd",
                   fn);
}

API void ncclResetDebugInit(void) {
  tutti_log_reinit();
}
