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
#define TUTTI_CUDA_ABI_VERSION 2
/* Most inputs of one tutti_cuda_reduce_n. */
#define TUTTI_CUDA_MAX_INPUTS 8

/* dst[i] = post(pre(a[i]) OP b[i]) for i < count on device memory, b == NULL: no b, launched on
 * `stream` (a cudaStream_t; NULL is the legacy default stream). Asynchronous; returns the
 * launch error. args comes from reduce_args_decode (reduce_impl.h) on the host. */
int tutti_cuda_reduce(void *dst, const void *a, const void *b, size_t count, ncclDataType_t type,
                      const reduce_args_t *args, void *stream);
/* The small-call path's kernels (stream_kernels.cu), asynchronous on `stream`; both write
 * nothing when *skip != 0 as they run (skip may be NULL).
 * dst = src, bytes of device-reachable memory, with loads and stores (no copy engine). */
int tutti_cuda_copy(void *dst, const void *src, size_t bytes, const unsigned *skip, void *stream);
/* dst[i] = in[0][i] OP in[1][i] OP ... OP in[n-1][i], left to right, `mid` for every step but
 * the last, `last` (with the post-division) for the last; 2 <= n <= TUTTI_CUDA_MAX_INPUTS. */
int tutti_cuda_reduce_n(void *dst, const void *const *in, int n, size_t count, ncclDataType_t type,
                        const reduce_args_t *mid, const reduce_args_t *last, const unsigned *skip,
                        void *stream);
int tutti_cuda_abi_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_CUDA_TUTTI_CUDA_H_ */
