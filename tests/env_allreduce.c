/* A tiny rank program for the launcher tests (test_env_launch.cc): makes its communicator with
 * tuttiCommInitFromEnv (tutti-run, mpirun or a torchrun-style environment), checks two
 * all-reduces of int32 with closed-form sums (one-shot and ring sizes) and an all-gather of the
 * ranks, and prints "rank R of N ok" (and, under Open MPI, its job id). The all-reduce buffers
 * come from malloc, or from ncclMemAlloc when ENV_ALLREDUCE_MEM=memalloc. Exit status: 0 ok,
 * 1 wrong result, 2 init failed, 3 a call failed, 4 wrong size (argv[1] is the expected size). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tutti.h"

static int use_memalloc(void) {
  const char *v = getenv("ENV_ALLREDUCE_MEM");
  return v && strcmp(v, "memalloc") == 0;
}

static int32_t *buffer(size_t count) {
  void *p = NULL;
  if (!use_memalloc()) return malloc(count * sizeof(int32_t));
  return ncclMemAlloc(&p, count * sizeof(int32_t)) == ncclSuccess ? p : NULL;
}

/* 1 when ncclMemFree failed. */
static int release(int32_t *p) {
  if (use_memalloc()) return p && ncclMemFree(p) != ncclSuccess;
  free(p);
  return 0;
}

static int check_allreduce(ncclComm_t comm, int rank, int n, size_t count) {
  int32_t *in = buffer(count), *out = buffer(count);
  if (!in || !out) return 3;
  for (size_t j = 0; j < count; j++) in[j] = rank * 1000 + (int32_t)(j % 1000), out[j] = -1;
  int status = 0;
  ncclResult_t rc = ncclAllReduce(in, out, count, ncclInt32, ncclSum, comm, NULL);
  if (rc != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclAllReduce: %s: %s\n", rank, ncclGetErrorString(rc),
            ncclGetLastError(comm));
    status = 3;
  }
  for (size_t j = 0; j < count && status == 0; j++) {
    int32_t want = 1000 * n * (n - 1) / 2 + n * (int32_t)(j % 1000);
    if (out[j] != want) {
      fprintf(stderr, "rank %d: count %zu: out[%zu] = %d, expected %d\n", rank, count, j, out[j],
              want);
      status = 1;
    }
  }
  if ((release(in) | release(out)) && status == 0) status = 3;
  return status;
}

int main(int argc, char **argv) {
  ncclComm_t comm;
  ncclResult_t rc = tuttiCommInitFromEnv(&comm);
  if (rc != ncclSuccess) {
    fprintf(stderr, "tuttiCommInitFromEnv: %s: %s\n", ncclGetErrorString(rc),
            ncclGetLastError(NULL));
    return 2;
  }
  int rank = -1, n = -1;
  ncclCommUserRank(comm, &rank);
  ncclCommCount(comm, &n);
  int status = argc > 1 && atoi(argv[1]) != n ? 4 : 0;
  if (status == 0) status = check_allreduce(comm, rank, n, 10);
  if (status == 0) status = check_allreduce(comm, rank, n, 100000);
  int32_t *ranks = calloc((size_t)n, sizeof(int32_t));
  int32_t mine = rank;
  if (status == 0 &&
      (!ranks || ncclAllGather(&mine, ranks, 1, ncclInt32, comm, NULL) != ncclSuccess))
    status = 3;
  for (int i = 0; i < n && status == 0; i++)
    if (ranks[i] != i) status = 1;
  free(ranks);
  if (ncclCommDestroy(comm) != ncclSuccess && status == 0) status = 3;
  if (status == 0) {
    const char *job = getenv("OMPI_MCA_ess_base_jobid");
    printf("rank %d of %d ok pid=%d%s%s\n", rank, n, (int)getpid(), job ? " job=" : "",
           job ? job : "");
  }
  return status;
}
