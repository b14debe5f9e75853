/* Kernels of the small-call path (small.c), launched on the caller's stream:
 *
 *   tutti_cuda_copy      dst = src with the SMs' loads and stores (no copy engine: for a few
 *                        KiB a copy-engine launch costs more than the copy); 16-byte vectors
 *                        while dst, src and bytes allow, else bytes
 *   tutti_cuda_reduce_n  dst = in[0] OP in[1] OP ... OP in[n-1], left to right per element
 *                        with ro_apply of reduce_ops.h (the host kernels' functions), the last
 *                        step with the post-division (Avg)
 *
 * Both read *skip first (a word in device-mapped host memory the host sets on abort) and write
 * nothing when it is set. Inputs may be device memory or registered host memory (the peers'
 * slots of the small-call regions). Built with --fmad=false, as reduce_kernels.cu.
 */
#include <cuda_runtime.h>

#include "cuda/tutti_cuda.h"
#include "reduce_ops.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 64; /* the path is for small calls: a few SMs suffice */

struct inputs_t {
  const void *in[TUTTI_CUDA_MAX_INPUTS];
  int n;
};

__device__ __forceinline__ bool skipped(const volatile unsigned *skip) {
  return skip && *skip != 0;
}

__global__ void copy_kernel(void *dst, const void *src, size_t bytes, const unsigned *skip) {
  if (skipped(skip)) return;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t nvec = ((uintptr_t)dst | (uintptr_t)src) % 16 == 0 ? bytes / 16 : 0;
  for (size_t i = tid; i < nvec; i += stride) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
  for (size_t i = nvec * 16 + tid; i < bytes; i += stride)
    ((unsigned char *)dst)[i] = ((const unsigned char *)src)[i];
}

template <int TYPE, int OP>
__global__ void reduce_n_kernel(void *dst, inputs_t in, size_t count, reduce_args_t mid,
                                reduce_args_t last, const unsigned *skip) {
  if (skipped(skip)) return;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const ncclDataType_t type = (ncclDataType_t)TYPE;
  for (size_t i = tid; i < count; i += stride) {
    ro_apply(in.n == 2 ? &last : &mid, (ncclRedOp_t)OP, type, dst, in.in[0], in.in[1], i);
    for (int k = 2; k < in.n; k++)
      ro_apply(k == in.n - 1 ? &last : &mid, (ncclRedOp_t)OP, type, dst, dst, in.in[k], i);
  }
}

typedef void (*reduce_n_fn_t)(void *, inputs_t, size_t, reduce_args_t, reduce_args_t,
                              const unsigned *);

#define TUTTI_OPS_N(T)                                                                      \
  {                                                                                         \
    reduce_n_kernel<T, ncclSum>, reduce_n_kernel<T, ncclProd>, reduce_n_kernel<T, ncclMax>, \
        reduce_n_kernel<T, ncclMin>                                                         \
  }

/* [datatype][base op], in ncclDataType_t order. */
const reduce_n_fn_t reduce_n_kernels[ncclNumTypes][4] = {
    TUTTI_OPS_N(ncclInt8),     TUTTI_OPS_N(ncclUint8),      TUTTI_OPS_N(ncclInt32),
    TUTTI_OPS_N(ncclUint32),   TUTTI_OPS_N(ncclInt64),      TUTTI_OPS_N(ncclUint64),
    TUTTI_OPS_N(ncclFloat16),  TUTTI_OPS_N(ncclFloat32),    TUTTI_OPS_N(ncclFloat64),
    TUTTI_OPS_N(ncclBfloat16), TUTTI_OPS_N(ncclFloat8e4m3), TUTTI_OPS_N(ncclFloat8e5m2),
};

unsigned blocks_for(size_t work) {
  size_t b = (work + kThreads - 1) / kThreads;
  return (unsigned)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int tutti_cuda_copy(void *dst, const void *src,
                                                                      size_t bytes,
                                                                      const unsigned *skip,
                                                                      void *stream) {
  if (bytes == 0) return 0;
  size_t work = ((uintptr_t)dst | (uintptr_t)src) % 16 == 0 ? (bytes + 15) / 16 : bytes;
  copy_kernel<<<blocks_for(work), kThreads, 0, (cudaStream_t)stream>>>(dst, src, bytes, skip);
  return (int)cudaGetLastError();
}

extern "C" __attribute__((visibility("default"))) int tutti_cuda_reduce_n(
    void *dst, const void *const *in, int n, size_t count, ncclDataType_t type,
    const reduce_args_t *mid, const reduce_args_t *last, const unsigned *skip, void *stream) {
  if ((unsigned)type >= ncclNumTypes || (unsigned)mid->base >= 4 || n < 2 ||
      n > TUTTI_CUDA_MAX_INPUTS)
    return (int)cudaErrorInvalidValue;
  if (count == 0) return 0;
  inputs_t args = {};
  for (int k = 0; k < n; k++) args.in[k] = in[k];
  args.n = n;
  reduce_n_kernels[type][mid->base]<<<blocks_for(count), kThreads, 0, (cudaStream_t)stream>>>(
      dst, args, count, *mid, *last, skip);
  return (int)cudaGetLastError();
}
