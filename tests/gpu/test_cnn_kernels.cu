// GPU test (needs a GPU; run by tests/gpu/run.sh, not by ctest): the GPU trainer's CNN kernels
// (trainer/cnn_kernels.cuh: im2col, col2im, pooling + ReLU and its backward) against the host
// trainer's layers (trainer/layers.c), bit for bit, at the CNN's own shapes (conv1, conv2, both
// pools, batch 3) and at small odd ones. Both sides copy, compare and add the same floats in
// the same order (test_cnn_index checks the maps on the host); here the kernels run them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../cnn_test_data.h"
#include "cnn_kernels.cuh"
extern "C" {
#include "layers.h"
}

namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

using Vec = std::vector<float>;

template <typename T>
struct Dev {  // a device copy of a host vector
  T *p = nullptr;
  size_t n;
  explicit Dev(const std::vector<T> &h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T) + 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T) + 1), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0xff, n * sizeof(T) + 1), cudaSuccess);  // NaN / -1 until written
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

long differing(const Vec &a, const Vec &b) {
  return a.size() == b.size() ? count_differing_bits(a.data(), b.data(), a.size()) : -1;
}

const conv_shape_t kShapes[] = {
    {3, 28, 28, 1, 32, 5}, {3, 14, 14, 32, 64, 5}, {2, 6, 5, 3, 4, 3}, {1, 3, 3, 4, 2, 7}};

TEST(CnnKernels, Im2colAndCol2imEqualHostBitForBit) {
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  ASSERT_GT(devices, 0);
  std::mt19937 gen(3);
  for (conv_shape_t s : kShapes) {
    size_t ni = (size_t)s.B * s.H * s.W * s.C, nc = ni * s.K * s.K;
    Vec x = spread_floats(ni, gen), dcols = spread_floats(nc, gen);
    Vec host_cols(nc), host_dx(ni);
    conv2d_im2col(host_cols.data(), x.data(), s);
    conv2d_col2im(host_dx.data(), dcols.data(), s);
    Dev<float> dx_in(x), cols(nc), ddcols(dcols), dx(ni);
    cnn_im2col(0, cols.p, dx_in.p, s);
    cnn_col2im(0, dx.p, ddcols.p, s);
    CUDA_OK(cudaGetLastError());
    Vec gpu_cols = cols.host(), gpu_dx = dx.host();
    printf(
        "B%d H%d W%d C%d K%d: im2col %zu floats, col2im %zu floats; first dx gpu %.9g host "
        "%.9g\n",
        s.B, s.H, s.W, s.C, s.K, nc, ni, gpu_dx[0], host_dx[0]);
    EXPECT_EQ(differing(gpu_cols, host_cols), 0) << "im2col C" << s.C;
    EXPECT_EQ(differing(gpu_dx, host_dx), 0) << "col2im C" << s.C;
  }
}

TEST(CnnKernels, PoolReluAndBackwardEqualHostBitForBit) {
  struct {
    int B, H, W, C;
  } pools[] = {{3, 28, 28, 32}, {3, 14, 14, 64}, {3, 6, 4, 5}};
  std::mt19937 gen(4);
  for (auto p : pools) {
    size_t n = (size_t)p.B * p.H * p.W * p.C, no = n / 4;
    Vec x = tied_floats(n, gen), dout = spread_floats(no, gen), out(no), dp(dout), dx(n);
    std::vector<int32_t> arg(no);
    maxpool2_forward(out.data(), arg.data(), x.data(), p.B, p.H, p.W, p.C);
    relu_forward(out.data(), out.data(), (long)no);
    relu_backward(dp.data(), dp.data(), out.data(), (long)no);
    maxpool2_backward(dx.data(), dp.data(), arg.data(), p.B, p.H, p.W, p.C);
    Dev<float> dx_in(x), dout_in(dout), gout(no), gdx(n);
    Dev<int32_t> garg(no);
    cnn_pool_relu(0, gout.p, garg.p, dx_in.p, p.B, p.H, p.W, p.C);
    cnn_pool_relu_back(0, gdx.p, dout_in.p, gout.p, garg.p, p.B, p.H, p.W, p.C);
    CUDA_OK(cudaGetLastError());
    Vec gpu_out = gout.host(), gpu_dx = gdx.host();
    std::vector<int32_t> gpu_arg = garg.host();
    printf("pool B%d H%d W%d C%d: %zu outputs\n", p.B, p.H, p.W, p.C, no);
    EXPECT_EQ(differing(gpu_out, out), 0);
    EXPECT_EQ(gpu_arg, arg);
    EXPECT_EQ(differing(gpu_dx, dx), 0);
  }
}

}  // namespace
