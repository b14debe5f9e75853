/* PMIx bootstrap for tuttiCommInitFromEnv (see pmix_boot.c). */
#ifndef TUTTI_PMIX_BOOT_H_
#define TUTTI_PMIX_BOOT_H_
#include "core.h"

/* Under a PMIx launcher (PMIX_RANK set, libpmix loadable, TUTTI_PMIX not 0): rank 0 draws a
 * unique id and every rank receives it; *used = 1. Without PMIx: ncclSuccess and *used = 0, so
 * the caller falls back to its other ways. An error only when PMIx was there and failed. */
ncclResult_t pmix_boot_id(int rank, int nranks, ncclUniqueId *id, int *used);

#endif
