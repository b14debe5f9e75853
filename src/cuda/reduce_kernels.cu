/* Reduction kernels on device memory: every datatype x op, one element function per type from
 * reduce_ops.h (the same functions the host kernels of reduce.c run), so a GPU result equals
 * the host result bit for bit.
 *
 * One kernel per datatype x base op (a template, 12 x 4 instances); pre/post (PreMulSum, Avg)
 * are fields of reduce_args_t, uniform across a launch. Each thread reduces 16-byte vectors
 * (16 / element size elements: one uint4 load per operand) while all three pointers are
 * 16-byte aligned, then the elements after the last whole vector one by one:
 *
 *   [0, nvec * V)      vector part, V = 16 / esize elements per thread per iteration
 *   [nvec * V, count)  tail, one element per thread
 *
 * Grid-stride loops, so any grid size covers any count. b == NULL: no second operand
 * (reduce_copy with premul/postdiv). Built with --fmad=false (CMakeLists.txt).
 */
#include <cuda_runtime.h>

#include "cuda/tutti_cuda.h"
#include "reduce_ops.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

template <int TYPE, int OP>
__device__ __forceinline__ void reduce_vec16(uint4 *d, const uint4 *a, const uint4 *b,
                                             const reduce_args_t &args) {
  const ncclDataType_t type = (ncclDataType_t)TYPE;
  const size_t v = 16 / (TYPE == ncclFloat64 || TYPE == ncclInt64 || TYPE == ncclUint64   ? 8
                         : TYPE == ncclInt32 || TYPE == ncclUint32 || TYPE == ncclFloat32 ? 4
                         : TYPE == ncclFloat16 || TYPE == ncclBfloat16                    ? 2
                                                                                          : 1);
  uint4 va = *a, vb = b ? *b : make_uint4(0, 0, 0, 0), vd;
#pragma unroll
  for (size_t j = 0; j < v; j++)
    ro_apply(&args, (ncclRedOp_t)OP, type, &vd, &va, b ? &vb : NULL, j);
  *d = vd;
}

template <int TYPE, int OP>
__global__ void reduce_kernel(void *dst, const void *a, const void *b, size_t count, size_t nvec,
                              size_t vlen, reduce_args_t args) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t i = tid; i < nvec; i += stride) {
    reduce_vec16<TYPE, OP>((uint4 *)dst + i, (const uint4 *)a + i, b ? (const uint4 *)b + i : NULL,
                           args);
  }
  for (size_t i = nvec * vlen + tid; i < count; i += stride)
    ro_apply(&args, (ncclRedOp_t)OP, (ncclDataType_t)TYPE, dst, a, b, i);
}

typedef void (*kernel_fn_t)(void *, const void *, const void *, size_t, size_t, size_t,
                            reduce_args_t);

#define TUTTI_OPS(T)                                                                  \
  {                                                                                   \
    reduce_kernel<T, ncclSum>, reduce_kernel<T, ncclProd>, reduce_kernel<T, ncclMax>, \
        reduce_kernel<T, ncclMin>                                                     \
  }

/* [datatype][base op], in ncclDataType_t order. */
const kernel_fn_t kernels[ncclNumTypes][4] = {
    TUTTI_OPS(ncclInt8),     TUTTI_OPS(ncclUint8),      TUTTI_OPS(ncclInt32),
    TUTTI_OPS(ncclUint32),   TUTTI_OPS(ncclInt64),      TUTTI_OPS(ncclUint64),
    TUTTI_OPS(ncclFloat16),  TUTTI_OPS(ncclFloat32),    TUTTI_OPS(ncclFloat64),
    TUTTI_OPS(ncclBfloat16), TUTTI_OPS(ncclFloat8e4m3), TUTTI_OPS(ncclFloat8e5m2),
};

/* Element sizes in ncclDataType_t order (the kernel library does not link libtutti). */
const unsigned char type_size[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

}  // namespace

extern "C" __attribute__((visibility("default"))) int tutti_cuda_reduce(void *dst, const void *a,
                                                                        const void *b, size_t count,
                                                                        ncclDataType_t type,
                                                                        const reduce_args_t *args,
                                                                        void *stream) {
  if ((unsigned)type >= ncclNumTypes || (unsigned)args->base >= 4)
    return (int)cudaErrorInvalidValue;
  if (count == 0) return 0;
  size_t esize = type_size[type], vlen = 16 / esize;
  uintptr_t align = (uintptr_t)dst | (uintptr_t)a | (uintptr_t)b;
  size_t nvec = (align % 16 == 0) ? count / vlen : 0;
  size_t work = nvec ? nvec : count;
  size_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  kernels[type][args->base]<<<(unsigned)blocks, kThreads, 0, (cudaStream_t)stream>>>(
      dst, a, b, count, nvec, vlen, *args);
  return (int)cudaGetLastError();
}

extern "C" __attribute__((visibility("default"))) int tutti_cuda_abi_version(void) {
  return TUTTI_CUDA_ABI_VERSION;
}
