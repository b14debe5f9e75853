/* ncclCommSplit: built on the parent's own collectives.
 * 1. all-gather (color, key) over the parent; 2. members of a color sorted by (key, parent rank)
 * give the new ranks; 3. each color's new rank 0 draws a unique id, all-gathered over the
 * parent; 4. ncclCommInitRank on the new communicator. NCCL_SPLIT_NOCOLOR ranks take part in
 * the all-gathers and get NULL. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "group.h"

typedef struct member {
  int32_t color, key, rank;
} member_t;

static int member_cmp(const void *a, const void *b) {
  const member_t *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static ncclResult_t split_run(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                              ncclConfig_t *config) {
  int n = comm->nranks;
  ncclResult_t res = ncclSuccess;
  member_t *all = calloc(n, sizeof(member_t)), *mine = calloc(n, sizeof(member_t));
  ncclUniqueId *ids = calloc(n, sizeof(ncclUniqueId));
  if (!all || !mine || !ids) {
    res = TUTTI_ERR(ncclSystemError, "out of memory");
    goto out;
  }
  member_t me = {color, key, comm->rank};
  TUTTI_CHECK_GOTO(ncclAllGather(&me, all, 3, ncclInt32, comm, NULL), res, out);
  int count = 0, newrank = -1;
  for (int i = 0; i < n; i++)
    if (color != NCCL_SPLIT_NOCOLOR && all[i].color == color) mine[count++] = all[i];
  qsort(mine, count, sizeof(member_t), member_cmp);
  for (int i = 0; i < count; i++)
    if (mine[i].rank == comm->rank) newrank = i;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (newrank == 0) TUTTI_CHECK_GOTO(ncclGetUniqueId(&id), res, out);
  TUTTI_CHECK_GOTO(ncclAllGather(&id, ids, sizeof(id), ncclUint8, comm, NULL), res, out);
  if (newrank < 0) goto out; /* NCCL_SPLIT_NOCOLOR */
  TUTTI_CHECK_GOTO(ncclCommInitRankConfig(newcomm, count, ids[mine[0].rank], newrank, config), res,
                   out);
  (*newcomm)->cuda_dev = comm->cuda_dev, (*newcomm)->dev_ctx = comm->dev_ctx;
  INFO(SUB_INIT, "split: parent rank %d color %d key %d -> rank %d of %d", comm->rank, color, key,
       newrank, count);
out:
  free(all);
  free(mine);
  free(ids);
  return res;
}

/* Inside a group the split runs at ncclGroupEnd (its all-gathers cannot wait in a queue of the
 * group: they would write into buffers the split has freed). The job holds the parent (queued),
 * so that ncclCommDestroy of the parent before the group ends is refused. */
typedef struct split_job {
  ncclComm_t comm, *newcomm;
  int color, key;
  ncclConfig_t *config;
} split_job_t;

static ncclResult_t split_job_run(void *p) {
  split_job_t *j = p;
  ncclResult_t res = comm_check(j->comm, "ncclCommSplit");
  if (res == ncclSuccess) res = split_run(j->comm, j->color, j->key, j->newcomm, j->config);
  __atomic_sub_fetch(&j->comm->queued, 1, __ATOMIC_ACQ_REL);
  free(j);
  return res;
}

static void split_job_drop(void *p) {
  split_job_t *j = p;
  __atomic_sub_fetch(&j->comm->queued, 1, __ATOMIC_ACQ_REL);
  free(j);
}

API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                               ncclConfig_t *config) {
  tutti_clear_error();
  TUTTI_CHECK(comm_check(comm, "ncclCommSplit"));
  if (!newcomm) return TUTTI_ERR(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return TUTTI_ERR(ncclInvalidArgument,
                     "ncclCommSplit: color %d must be >= 0 or "
                     "NCCL_SPLIT_NOCOLOR",
                     color);
  *newcomm = NULL;
  if (group_depth() == 0) return split_run(comm, color, key, newcomm, config);
  split_job_t *j = malloc(sizeof(*j));
  if (!j) return TUTTI_ERR(ncclSystemError, "out of memory");
  *j =
      (split_job_t){.comm = comm, .newcomm = newcomm, .color = color, .key = key, .config = config};
  __atomic_add_fetch(&comm->queued, 1, __ATOMIC_ACQ_REL);
  return group_defer(split_job_run, split_job_drop, j);
}
