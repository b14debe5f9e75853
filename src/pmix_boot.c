/* PMIx bootstrap: under mpirun (Open MPI) or srun (Slurm with PMIx) the launcher runs a PMIx
 * server next to every rank, the way MPI libraries find each other across hosts. Rank 0 draws
 * the unique id (ncclGetUniqueId: its root listens on a routable address of its host) and
 * publishes it:
 *
 *   rank 0:       PMIx_Put(GLOBAL, "tutti.uid.<n>", id)  PMIx_Commit  PMIx_Fence(all, collect)
 *   other ranks:                                         PMIx_Commit  PMIx_Fence(all, collect)
 *                 PMIx_Get(rank 0, "tutti.uid.<n>")
 *
 * <n> counts the communicators this process created from the environment, so each gets its own
 * key. libpmix is loaded with dlopen, never linked: a machine without PMIx runs the same binary
 * and tuttiCommInitFromEnv falls back to MASTER_ADDR / the rendezvous file. Built without
 * pmix.h (libpmix-dev), PMIx is never used.
 */
#include "pmix_boot.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"

TUTTI_PARAM(Pmix, "PMIX", 1)

#ifdef TUTTI_HAVE_PMIX_H
#include <pmix.h>

typedef struct pmix_api {
  pmix_status_t (*init)(pmix_proc_t *, pmix_info_t *, size_t);
  pmix_status_t (*finalize)(const pmix_info_t *, size_t);
  pmix_status_t (*put)(pmix_scope_t, const pmix_key_t, pmix_value_t *);
  pmix_status_t (*commit)(void);
  pmix_status_t (*fence)(const pmix_proc_t *, size_t, const pmix_info_t *, size_t);
  pmix_status_t (*get)(const pmix_proc_t *, const pmix_key_t, const pmix_info_t *, size_t,
                       pmix_value_t **);
  const char *(*error_string)(pmix_status_t);
  void (*value_destruct)(pmix_value_t *); /* optional (PMIx >= 4) */
} pmix_api_t;

static int pmix_load(pmix_api_t *api) {
  static const char *const names[] = {"libpmix.so.2", "libpmix.so"};
  void *lib = NULL;
  for (size_t i = 0; i < 2 && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    INFO(SUB_BOOTSTRAP, "PMIx: libpmix not loadable (%s)", dlerror());
    return -1;
  }
  *(void **)&api->init = dlsym(lib, "PMIx_Init");
  *(void **)&api->finalize = dlsym(lib, "PMIx_Finalize");
  *(void **)&api->put = dlsym(lib, "PMIx_Put");
  *(void **)&api->commit = dlsym(lib, "PMIx_Commit");
  *(void **)&api->fence = dlsym(lib, "PMIx_Fence");
  *(void **)&api->get = dlsym(lib, "PMIx_Get");
  *(void **)&api->error_string = dlsym(lib, "PMIx_Error_string");
  *(void **)&api->value_destruct = dlsym(lib, "PMIx_Value_destruct");
  if (!api->init || !api->finalize || !api->put || !api->commit || !api->fence || !api->get ||
      !api->error_string) {
    INFO(SUB_BOOTSTRAP, "PMIx: libpmix lacks a function tutti needs");
    return -1; /* the library stays loaded: unloading it is not worth the risk */
  }
  return 0;
}

#define PMIX_TRY(api, call, what)                                               \
  do {                                                                          \
    pmix_status_t st_ = (call);                                                 \
    if (st_ != PMIX_SUCCESS) {                                                  \
      res = TUTTI_ERR(ncclSystemError, "PMIx bootstrap: %s failed: %s", (what), \
                      (api)->error_string(st_));                                \
      goto out;                                                                 \
    }                                                                           \
  } while (0)

/* Rank 0 publishes, everyone fences, the others read. */
static ncclResult_t pmix_exchange(pmix_api_t *api, const pmix_proc_t *me, int rank, const char *key,
                                  ncclUniqueId *id) {
  ncclResult_t res = ncclSuccess;
  if (rank == 0) {
    pmix_value_t v;
    memset(&v, 0, sizeof(v));
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)id->internal;
    v.data.bo.size = sizeof(id->internal);
    PMIX_TRY(api, api->put(PMIX_GLOBAL, key, &v), "PMIx_Put");
  }
  PMIX_TRY(api, api->commit(), "PMIx_Commit");
  /* the fence waits for every rank: a rank that never comes must not hold the others past
   * TUTTI_INIT_TIMEOUT (the PMIx server ends the fence with PMIX_ERR_TIMEOUT) */
  pmix_info_t info[2];
  memset(info, 0, sizeof(info));
  snprintf(info[0].key, sizeof(info[0].key), "%s", PMIX_COLLECT_DATA);
  info[0].value.type = PMIX_BOOL;
  info[0].value.data.flag = true;
  snprintf(info[1].key, sizeof(info[1].key), "%s", PMIX_TIMEOUT);
  info[1].value.type = PMIX_INT;
  info[1].value.data.integer = (int)TUTTI_MAX(bootstrap_init_timeout_ms() / 1000, 1);
  pmix_status_t fst = api->fence(NULL, 0, info, 2);
  if (fst == PMIX_ERR_TIMEOUT) {
    res = TUTTI_ERR(ncclSystemError,
                    "PMIx bootstrap: rank %d: not every rank reached the PMIx fence of "
                    "tuttiCommInitFromEnv within TUTTI_INIT_TIMEOUT=%ds",
                    rank, info[1].value.data.integer);
    goto out;
  }
  PMIX_TRY(api, fst, "PMIx_Fence");
  if (rank != 0) {
    pmix_proc_t root;
    memset(&root, 0, sizeof(root));
    memcpy(root.nspace, me->nspace, sizeof(root.nspace));
    root.rank = 0;
    pmix_value_t *got = NULL;
    PMIX_TRY(api, api->get(&root, key, NULL, 0, &got), "PMIx_Get of rank 0's unique id");
    int ok = got && got->type == PMIX_BYTE_OBJECT && got->data.bo.size == sizeof(id->internal);
    if (ok) memcpy(id->internal, got->data.bo.bytes, sizeof(id->internal));
    if (got && api->value_destruct) api->value_destruct(got), free(got); /* PMIX_VALUE_RELEASE */
    if (!ok)
      res = TUTTI_ERR(ncclSystemError, "PMIx bootstrap: %s from rank 0 is not a unique id", key);
  }
out:
  return res;
}

ncclResult_t pmix_boot_id(int rank, int nranks, ncclUniqueId *id, int *used) {
  static int ncomms;
  static pmix_api_t api;
  static int loaded = -2; /* -2: not tried, -1: unavailable, 0: loaded */
  *used = 0;
  if (!tutti_param_Pmix() || !getenv("PMIX_RANK") || !getenv("PMIX_NAMESPACE")) return ncclSuccess;
  if (loaded == -2) loaded = pmix_load(&api);
  if (loaded != 0) return ncclSuccess;
  pmix_proc_t me;
  memset(&me, 0, sizeof(me));
  pmix_status_t st = api.init(&me, NULL, 0);
  if (st != PMIX_SUCCESS) {
    INFO(SUB_BOOTSTRAP, "PMIx: PMIx_Init failed (%s); not using PMIx", api.error_string(st));
    return ncclSuccess;
  }
  if ((int)me.rank != rank) {
    api.finalize(NULL, 0);
    return TUTTI_ERR(ncclInvalidUsage,
                     "PMIx bootstrap: PMIx says rank %u but the launcher's "
                     "environment says rank %d (of %d)",
                     me.rank, rank, nranks);
  }
  char key[64];
  snprintf(key, sizeof(key), "tutti.uid.%d", ncomms++);
  ncclResult_t res = ncclSuccess;
  if (rank == 0) res = ncclGetUniqueId(id);
  if (res == ncclSuccess) res = pmix_exchange(&api, &me, rank, key, id);
  api.finalize(NULL, 0);
  if (res == ncclSuccess) {
    *used = 1;
    INFO(SUB_BOOTSTRAP, "PMIx: rank %d of %d got the unique id through %s in %s", rank, nranks, key,
         me.nspace);
  }
  return res;
}

#else /* built without pmix.h */

ncclResult_t pmix_boot_id(int rank, int nranks, ncclUniqueId *id, int *used) {
  *used = 0;
  return ncclSuccess;
}

#endif
