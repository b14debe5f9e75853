// The CNN's element-wise kernels of the GPU trainer: one thread per element, each calling the
// maps of cnn_index.h. Included by train_cuda.cu and by tests/gpu/test_cnn_kernels.cu, which
// runs them on a GPU against the host layers of layers.c, bit for bit.
#ifndef TRAINER_CNN_KERNELS_CUH_
#define TRAINER_CNN_KERNELS_CUH_

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "cnn_index.h"
}

constexpr int kCnnThreads = 256;

static inline unsigned cnn_blocks(size_t n) {
  return (unsigned)((n + kCnnThreads - 1) / kCnnThreads);
}

// cols (n = B*H*W*K*K*C) = im2col(inp).
static __global__ void cnn_im2col_kernel(float *cols, const float *inp, conv_shape_t s, size_t n) {
  size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < n) cols[e] = cnn_im2col_at(inp, (long)e, s);
}

// dinp (n = B*H*W*C) = col2im(dcols), every element summed in the host's order.
static __global__ void cnn_col2im_kernel(float *dinp, const float *dcols, conv_shape_t s,
                                         size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = cnn_col2im_at(dcols, (long)i, s);
}

// out, arg (n = B*H/2*W/2*C) = ReLU(maxpool2(inp (B, H, W, C))) and the winning taps.
static __global__ void cnn_pool_relu_kernel(float *out, int32_t *arg, const float *inp, int H,
                                            int W, int C, size_t n) {
  size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (o < n) cnn_pool_relu_at(out + o, arg + o, inp, (long)o, H, W, C);
}

// dinp (n = B*H*W*C) = the backward of pool + ReLU from dout, out, arg (B, H/2, W/2, C).
static __global__ void cnn_pool_relu_back_kernel(float *dinp, const float *dout, const float *out,
                                                 const int32_t *arg, int H, int W, int C,
                                                 size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = cnn_pool_relu_backward_at(dout, out, arg, (long)i, H, W, C);
}

// Launchers on a stream; shapes as in layers.h.
static inline void cnn_im2col(cudaStream_t st, float *cols, const float *inp, conv_shape_t s) {
  size_t n = (size_t)s.B * s.H * s.W * s.K * s.K * s.C;
  if (n) cnn_im2col_kernel<<<cnn_blocks(n), kCnnThreads, 0, st>>>(cols, inp, s, n);
}

static inline void cnn_col2im(cudaStream_t st, float *dinp, const float *dcols, conv_shape_t s) {
  size_t n = (size_t)s.B * s.H * s.W * s.C;
  if (n) cnn_col2im_kernel<<<cnn_blocks(n), kCnnThreads, 0, st>>>(dinp, dcols, s, n);
}

static inline void cnn_pool_relu(cudaStream_t st, float *out, int32_t *arg, const float *inp, int B,
                                 int H, int W, int C) {
  size_t n = (size_t)B * (H / 2) * (W / 2) * C;
  if (n) cnn_pool_relu_kernel<<<cnn_blocks(n), kCnnThreads, 0, st>>>(out, arg, inp, H, W, C, n);
}

static inline void cnn_pool_relu_back(cudaStream_t st, float *dinp, const float *dout,
                                      const float *out, const int32_t *arg, int B, int H, int W,
                                      int C) {
  size_t n = (size_t)B * H * W * C;
  if (n)
    cnn_pool_relu_back_kernel<<<cnn_blocks(n), kCnnThreads, 0, st>>>(dinp, dout, out, arg, H, W, C,
                                                                     n);
}

#endif  // TRAINER_CNN_KERNELS_CUH_
