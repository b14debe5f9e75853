/* Hierarchical compressed all-reduce: exact inside a host, compressed only between hosts.
 *
 *   host A: ranks a0 (leader), a1, ...      host B: b0 (leader), b1, ...
 *   1. ncclReduce (sum, exact) of every rank's input to its host's leader   (host comm)
 *   2. the leaders' compressed all-reduce of the host sums                   (leader comm)
 *   3. ncclBroadcast of the result from the leader to its host               (host comm)
 *
 * Only step 2 crosses hosts, so only it is compressed; its error feedback state is the
 * leaders' (the compressor's residual holds what the host's sum lost). The sub-communicators
 * come from ncclCommSplit at the first call (a collective on the parent: every rank makes its
 * first hierarchical call together), host = the communicator's own host identity, leader = the
 * host's lowest rank; they are kept in the compressor and destroyed with it.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "compress/compressor.h"

static ncclResult_t compress_hier_setup(struct tuttiCompressor *c, ncclComm_t comm, int rank) {
  if (c->hier_parent == comm) return ncclSuccess;
  if (c->hier_parent)
    return TUTTI_ERR(ncclInvalidUsage,
                     "comm: this hierarchical compressor belongs to another "
                     "communicator");
  c->hier_parent = comm;
  int host = comm->host_of_rank[rank], leader = host == rank;
  TUTTI_CHECK(ncclCommSplit(comm, host, rank, &c->hier_host, NULL));
  TUTTI_CHECK(ncclCommSplit(comm, leader ? 0 : NCCL_SPLIT_NOCOLOR, rank, &c->hier_leaders, NULL));
  c->hier_sum = malloc(c->count * sizeof(float));
  if (!c->hier_sum) return TUTTI_ERR(ncclSystemError, "out of memory for a host's sum");
  return ncclSuccess;
}

/* A leader that failed step 2 still tells its host (a status broadcast before the data), so
 * that no rank of the host waits for a broadcast that will not come. */
ncclResult_t compress_hier_allreduce(struct tuttiCompressor *c, const float *x, float *y,
                                     float scale, ncclComm_t comm, int rank) {
  TUTTI_CHECK(compress_hier_setup(c, comm, rank));
  TUTTI_CHECK(ncclReduce(x, c->hier_sum, c->count, ncclFloat, ncclSum, 0, c->hier_host, NULL));
  ncclResult_t res = ncclSuccess;
  int32_t status = 0;
  if (c->hier_leaders) /* the global scale: 1 / (all ranks) for ncclAvg */
    res = compress_flat_allreduce(c, c->hier_sum, y, scale, c->hier_leaders);
  if (res != ncclSuccess) status = (int32_t)res;
  TUTTI_CHECK(ncclBroadcast(&status, &status, 1, ncclInt32, 0, c->hier_host, NULL));
  if (res != ncclSuccess) return res;
  if (status != 0)
    return TUTTI_ERR(ncclRemoteError,
                     "compressed all-reduce: the leader of this host (rank %d) "
                     "failed the exchange between hosts",
                     comm->host_of_rank[rank]);
  return ncclBroadcast(y, y, c->count, ncclFloat, 0, c->hier_host, NULL);
}
