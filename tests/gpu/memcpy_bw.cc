// Device-to-device cudaMemcpy bandwidth (GPU only; run by tests/gpu/run.sh): the peer figure
// GPU collectives are compared with. Prints "d2d_memcpy bytes=<S> GB/s=<median of 10>", where
// GB/s counts the S bytes copied (each copy reads S and writes S).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv) {
  // line by line: a step the GPU script stops at its time limit keeps what was printed
  setvbuf(stdout, nullptr, _IOLBF, 0);
  size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t)256 << 20;
  void *src, *dst;
  if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) {
    fprintf(stderr, "memcpy_bw: cudaMalloc of %zu bytes failed\n", bytes);
    return 1;
  }
  cudaMemset(src, 1, bytes);
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  std::vector<float> gbs;
  for (int i = 0; i < 12; i++) {
    cudaEventRecord(t0);
    cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    if (i >= 2) gbs.push_back((float)(bytes / (ms * 1e-3) / 1e9));  // first two are warm-up
  }
  if (cudaGetLastError() != cudaSuccess) return 1;
  std::sort(gbs.begin(), gbs.end());
  printf("d2d_memcpy bytes=%zu GB/s=%.1f\n", bytes, gbs[gbs.size() / 2]);
  return 0;
}
