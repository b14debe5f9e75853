/* The C entry points of libtutti_cuda.so, the CUDA kernel library (the .cu files of src/cuda/).
 *
 * libtutti.so never links it: the library is built only when CMake finds a CUDA toolkit, and
 * it is meant to be opened with dlopen at run time (like libcuda), so a machine without a
 * driver or a GPU runs the host library unchanged. The GPU tests (tests/gpu/) link it directly.
 * Return values are cudaError_t codes (0: success).
 */
#ifndef TUTTI_CUDA_TUTTI_CUDA_H_
#define TUTTI_CUDA_TUTTI_CUDA_H_

#include <stddef.h>

#include "reduce_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when an entry point changes, so a dlopen'ed library is checked against the header. */
#define TUTTI_CUDA_ABI_VERSION 1

/* dst[i] = post(pre(a[i]) OP b[i]) for i < count on device memory, b == NULL: no b, launched on
 * `stream` (a cudaStream_t; NULL is the legacy default stream). Asynchronous; returns the
 * launch error. args comes from reduce_args_decode (reduce_impl.h) on the host. */
int tutti_cuda_reduce(void *dst, const void *a, const void *b, size_t count, ncclDataType_t type,
                      const reduce_args_t *args, void *stream);
int tutti_cuda_abi_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_CUDA_TUTTI_CUDA_H_ */
