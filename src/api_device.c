/* The host entry points of NCCL 2.28's device API (the nccl_device headers: device
 * communicators, teams, barriers and the LL all-to-all that kernels drive themselves). tutti
 * has no device-initiated communication, but programs built against NVIDIA's NCCL reference
 * these functions (PyTorch 2.11's libtorch_cuda.so does, and is loaded with immediate binding), so
 * libnccl.so.2 must define every one of them or the program does not load at all.
 *
 * - ncclDevCommCreate and the *CreateRequirement functions return ncclInvalidUsage with a
 *   message naming the function; ncclDevCommDestroy the same (no device communicator can
 *   exist).
 * - The team functions answer for the communicator as tutti runs it: the world team is every
 *   rank; the load/store-accessible (LSA) team of the device API is the rank alone (no rank's
 *   kernels address another rank's memory through it); the rail team is then the world. The
 *   index arithmetic is the device API's (a team is nRanks ranks, this one at index rank,
 *   stride apart in world ranks).
 */
#include "comm.h"

typedef struct ncclTeam { /* the device API's layout: returned by value */
  int nRanks, rank, stride;
} ncclTeam_t;

struct ncclDevComm;
struct ncclDevCommRequirements;
struct ncclDevResourceRequirements;
struct ncclLsaBarrierHandle;
struct ncclGinBarrierHandle;
struct ncclLLA2AHandle;

static ncclResult_t device_api_refused(const char *fn) {
  return TUTTI_ERR(ncclInvalidUsage,
                   "%s: NCCL's device API (communication driven by kernels) is not available in "
                   "tutti; collectives and send/recv on device buffers are",
                   fn);
}

API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                                   struct ncclDevComm *outDevComm) {
  const char *fn = "ncclDevCommCreate";
  TUTTI_CHECK(comm_check(comm, fn));
  if (!reqs) return TUTTI_ERR(ncclInvalidArgument, "%s: reqs is NULL", fn);
  if (!outDevComm) return TUTTI_ERR(ncclInvalidArgument, "%s: outDevComm is NULL", fn);
  return device_api_refused(fn);
}

API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm *devComm) {
  const char *fn = "ncclDevCommDestroy";
  TUTTI_CHECK(comm_check_handle(comm, fn));
  return TUTTI_ERR(ncclInvalidUsage,
                   "%s: device communicator %p was not created by tutti (ncclDevCommCreate is "
                   "not available)",
                   fn, (const void *)devComm);
}

API ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                                 struct ncclLsaBarrierHandle *outHandle,
                                                 struct ncclDevResourceRequirements *outReq) {
  (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return device_api_refused("ncclLsaBarrierCreateRequirement");
}

API ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                                 struct ncclGinBarrierHandle *outHandle,
                                                 struct ncclDevResourceRequirements *outReq) {
  (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  TUTTI_CHECK(comm_check(comm, "ncclGinBarrierCreateRequirement"));
  return device_api_refused("ncclGinBarrierCreateRequirement");
}

API ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots,
                                            struct ncclLLA2AHandle *outHandle,
                                            struct ncclDevResourceRequirements *outReq) {
  (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
  return device_api_refused("ncclLLA2ACreateRequirement");
}

/* A slot count for an LL all-to-all session that tutti cannot open: -1, with the reason. */
API int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  (void)maxElts, (void)maxEltSize;
  device_api_refused("ncclLLA2ACalcSlots");
  return -1;
}

/* An invalid communicator gives the empty team (its reason is the last error). */
static int team_comm(ncclComm_t comm, const char *fn) {
  return comm_check_handle(comm, fn) == ncclSuccess;
}

API ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
  if (!team_comm(comm, "ncclTeamWorld")) return (ncclTeam_t){0, 0, 1};
  return (ncclTeam_t){comm->nranks, comm->rank, 1};
}

API ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
  if (!team_comm(comm, "ncclTeamLsa")) return (ncclTeam_t){0, 0, 1};
  return (ncclTeam_t){1, 0, 1};
}

API ncclTeam_t ncclTeamRail(ncclComm_t comm) { /* the world divided by the LSA team's size */
  if (!team_comm(comm, "ncclTeamRail")) return (ncclTeam_t){0, 0, 1};
  return (ncclTeam_t){comm->nranks, comm->rank, 1};
}

API int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  if (!team_comm(comm, "ncclTeamRankToWorld")) return -1;
  return comm->rank + (rank - team.rank) * team.stride;
}

API int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  if (!team_comm(comm, "ncclTeamRankToLsa")) return -1;
  return 0 + (rank - team.rank) * team.stride; /* this rank is index 0 of its LSA team */
}

/* What NVIDIA's ncclResetDebugInit calls; exported under this name by its library too. */
API void ncclResetDebugInitInternal(void) {
  ncclResetDebugInit();
}
