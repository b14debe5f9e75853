// The same all-reduce measurement on whichever libnccl.so.2 the dynamic linker finds, so that
// tests/gpu/run.sh runs it on tutti's and on NVIDIA's NCCL in one run (LD_LIBRARY_PATH picks
// the library; the program links the soname only, no RPATH). NCCL's public API only.
//
//   NCCL_BENCH_RANK=r NCCL_BENCH_NRANKS=n NCCL_BENCH_ID=<file> NCCL_BENCH_TAG=<name> nccl_bench
//
// One process per rank, all on GPU 0; rank 0 writes the ncclUniqueId to <file> (renamed into
// place), the others read it. Prints which library ran (its path and ncclGetVersion), then
//   RESULT <tag>_<n>ranks_allreduce_8B_us <median per call of 200 back-to-back calls>
//   RESULT <tag>_<n>ranks_allreduce_256MiB_busbw_GBps <busbw, median of 5 samples> (1 rank:
//          ..._algbw_GBps)
// timed with events on the stream. Exit status: 0 ran, 3 init refused (NVIDIA's NCCL refuses
// two ranks on one GPU), 2 other failure.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

bool exchange_id(int rank, const std::string &file, ncclUniqueId *id) {
  if (rank == 0) {
    if (ncclGetUniqueId(id) != ncclSuccess) return false;
    std::string tmp = file + ".tmp";
    FILE *f = fopen(tmp.c_str(), "wb");
    if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0) return false;
    return rename(tmp.c_str(), file.c_str()) == 0;
  }
  for (int i = 0; i < 6000; i++) {  // 60 s
    FILE *f = fopen(file.c_str(), "rb");
    if (f) {
      bool ok = fread(id, sizeof(*id), 1, f) == 1;
      fclose(f);
      if (ok) return true;
    }
    usleep(10000);
  }
  return false;
}

// Median over 5 samples (after one warm-up sample) of the time per call of `iters` calls.
double time_us(ncclComm_t comm, cudaStream_t st, void *buf, size_t count, int iters) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  std::vector<double> us;
  for (int s = 0; s < 6; s++) {
    cudaEventRecord(a, st);
    for (int i = 0; i < iters; i++)
      if (ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, st) != ncclSuccess) return -1;
    cudaEventRecord(b, st);
    if (cudaEventSynchronize(b) != cudaSuccess) return -1;
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (s > 0) us.push_back(ms * 1000.0 / iters);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main() {
  // line by line: a step the GPU script stops at its time limit keeps what was printed
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int rank = env_int("NCCL_BENCH_RANK", 0), n = env_int("NCCL_BENCH_NRANKS", 1);
  const char *idf = getenv("NCCL_BENCH_ID"), *tag = getenv("NCCL_BENCH_TAG");
  std::string t = tag && *tag ? tag : "lib";
  if (!idf) {
    fprintf(stderr, "nccl_bench: set NCCL_BENCH_ID to a file path\n");
    return 2;
  }
  Dl_info info = {};
  dladdr((void *)&ncclAllReduce, &info);
  int version = 0;
  ncclGetVersion(&version);
  if (rank == 0)
    printf("nccl_bench %s: %s, ncclGetVersion %d, %d rank(s) on GPU 0\n", t.c_str(),
           info.dli_fname ? info.dli_fname : "?", version, n);
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) return 2;
  ncclUniqueId id;
  if (!exchange_id(rank, idf, &id)) {
    fprintf(stderr, "nccl_bench rank %d: no unique id\n", rank);
    return 2;
  }
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
  if (r != ncclSuccess) {
    printf("nccl_bench %s rank %d: ncclCommInitRank refused: %s (%s)\n", t.c_str(), rank,
           ncclGetErrorString(r), ncclGetLastError(nullptr));
    return 3;
  }
  const size_t big = (size_t)256 << 20;
  void *buf;
  cudaStream_t st;
  if (cudaMalloc(&buf, big) != cudaSuccess || cudaMemset(buf, 0, big) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
    return 2;
  double small_us = time_us(comm, st, buf, 2, 200);
  double big_us = time_us(comm, st, buf, big / 4, 2);
  if (small_us < 0 || big_us < 0) {
    fprintf(stderr, "nccl_bench rank %d: an all-reduce failed: %s\n", rank, ncclGetLastError(comm));
    return 2;
  }
  double algbw = big / (big_us * 1e-6) / 1e9;
  if (rank == 0) {
    printf("RESULT %s_%dranks_allreduce_8B_us %.2f\n", t.c_str(), n, small_us);
    if (n > 1)  // nccl-tests' busbw: algbw * 2 (n - 1) / n
      printf("RESULT %s_%dranks_allreduce_256MiB_busbw_GBps %.2f\n", t.c_str(), n,
             algbw * 2.0 * (n - 1) / n);
    else  // one rank moves nothing between ranks: its algbw is the API's cost on one buffer
      printf("RESULT %s_1ranks_allreduce_256MiB_algbw_GBps %.2f\n", t.c_str(), algbw);
  }
  ncclCommDestroy(comm);
  cudaFree(buf);
  return 0;
}
