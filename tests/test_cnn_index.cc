// The GPU trainer's CNN maps (trainer/cnn_index.h: im2col, col2im, pooling + ReLU and its
// backward, one element at a time, the functions train_cuda.cu's kernels call) run here on the
// host and are compared with the host trainer's layers (trainer/layers.c, independent loops)
// on small inputs: bit for bit, since both sides copy, compare and add the same floats in the
// same order. A last test composes a convolution the way the GPU trainer does (im2col, then a
// linear layer over its rows with W (OC, K*K*C), bias added after the product) and compares it
// with conv2d_forward/backward within the rounding bound of the two summation orders.
//
// These are host tests of the index arithmetic; no CUDA call runs here (the kernels themselves
// run only in tests/gpu/run.sh on a GPU machine).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cnn_test_data.h"

extern "C" {
#include "cnn_index.h"
#include "layers.h"
}

namespace {

using Vec = std::vector<float>;

size_t image_floats(conv_shape_t s) {
  return (size_t)s.B * s.H * s.W * s.C;
}
size_t cols_floats(conv_shape_t s) {
  return (size_t)s.B * s.H * s.W * s.K * s.K * s.C;
}

// Shapes with K larger than the image, one pixel, one channel (conv1's), many channels
// (conv2's), non-square images and K = 3, 5, 7 (OC is unused by the maps).
const conv_shape_t kShapes[] = {
    {2, 6, 5, 3, 1, 5}, {1, 28, 28, 1, 1, 5}, {2, 14, 14, 32, 1, 5},
    {3, 4, 7, 2, 1, 3}, {1, 3, 3, 4, 1, 7},   {1, 1, 1, 1, 1, 1},
};

TEST(CnnIndex, Im2colEqualsHostIm2colBitForBit) {
  for (conv_shape_t s : kShapes) {
    Vec inp(image_floats(s));
    for (size_t i = 0; i < inp.size(); i++) inp[i] = (float)(i + 1); /* distinct, never 0 */
    Vec host(cols_floats(s), NAN), dev(cols_floats(s));
    conv2d_im2col(host.data(), inp.data(), s);
    long zeros = 0;
    for (size_t e = 0; e < dev.size(); e++) {
      dev[e] = cnn_im2col_at(inp.data(), (long)e, s);
      zeros += dev[e] == 0.0f;
    }
    printf("im2col B%d H%d W%d C%d K%d: %zu cols floats, %ld padding zeros, first %g %g %g\n", s.B,
           s.H, s.W, s.C, s.K, dev.size(), zeros, dev[0], dev[dev.size() / 2], dev.back());
    EXPECT_EQ(count_differing_bits(host.data(), dev.data(), dev.size()), 0)
        << "B" << s.B << " H" << s.H << " W" << s.W << " C" << s.C << " K" << s.K;
    if (s.K > 1) {
      EXPECT_GT(zeros, 0); /* the padding is exercised */
    }
  }
}

TEST(CnnIndex, Col2imEqualsHostCol2imBitForBit) {
  std::mt19937 gen(21);
  for (conv_shape_t s : kShapes) {
    Vec dcols = spread_floats(cols_floats(s), gen);
    Vec host(image_floats(s), NAN), dev(image_floats(s)), reversed(image_floats(s));
    conv2d_col2im(host.data(), dcols.data(), s);
    for (size_t i = 0; i < dev.size(); i++) {
      dev[i] = cnn_col2im_at(dcols.data(), (long)i, s);
      float acc = 0.0f; /* the same taps summed in the other order */
      for (int t = 0; t < s.K * s.K; t++) {
        long src = cnn_col2im_src((long)i, t, s);
        if (src >= 0) acc += dcols[src];
      }
      reversed[i] = acc;
    }
    long other = count_differing_bits(host.data(), reversed.data(), dev.size());
    printf(
        "col2im B%d H%d W%d C%d K%d: first %.9g %.9g, host %.9g %.9g; %ld of %zu elements "
        "differ when summed in the other order\n",
        s.B, s.H, s.W, s.C, s.K, dev[0], dev.back(), host[0], host.back(), other, dev.size());
    EXPECT_EQ(count_differing_bits(host.data(), dev.data(), dev.size()), 0)
        << "B" << s.B << " H" << s.H << " W" << s.W << " C" << s.C << " K" << s.K;
    if (s.K >= 5 && s.H >= 14) {
      EXPECT_GT(other, 0) << "the order check cannot fail here";
    }
  }
}

struct PoolShape {
  int B, H, W, C;
};
const PoolShape kPools[] = {{2, 28, 28, 32}, {2, 14, 14, 64}, {1, 2, 2, 1}, {3, 6, 4, 5}};

TEST(CnnIndex, PoolReluEqualsHostMaxpoolThenReluBitForBit) {
  std::mt19937 gen(7);
  for (PoolShape p : kPools) {
    size_t n = (size_t)p.B * p.H * p.W * p.C, no = n / 4;
    Vec inp = tied_floats(n, gen), host(no, NAN), dev(no);
    std::vector<int32_t> host_arg(no, -1), dev_arg(no, -2);
    maxpool2_forward(host.data(), host_arg.data(), inp.data(), p.B, p.H, p.W, p.C);
    relu_forward(host.data(), host.data(), (long)no);
    long ties = 0;
    for (size_t o = 0; o < no; o++) {
      cnn_pool_relu_at(&dev[o], &dev_arg[o], inp.data(), (long)o, p.H, p.W, p.C);
      for (int t = 1; t < 4; t++)
        ties += inp[cnn_pool_tap((long)o, t, p.H, p.W, p.C)] == inp[dev_arg[o]] &&
                cnn_pool_tap((long)o, t, p.H, p.W, p.C) != dev_arg[o];
    }
    printf("pool+relu B%d H%d W%d C%d: %zu outputs, %ld tied taps, first %g (arg %d)\n", p.B, p.H,
           p.W, p.C, no, ties, dev[0], dev_arg[0]);
    EXPECT_EQ(count_differing_bits(host.data(), dev.data(), no), 0);
    EXPECT_EQ(host_arg, dev_arg);
    if (no >= 16) {
      EXPECT_GT(ties, 0) << "no tie: the tie rule is not exercised";
    }
  }
}

TEST(CnnIndex, PoolReluBackwardEqualsHostReluThenMaxpoolBackwardBitForBit) {
  std::mt19937 gen(8);
  for (PoolShape p : kPools) {
    size_t n = (size_t)p.B * p.H * p.W * p.C, no = n / 4;
    Vec inp = tied_floats(n, gen), out(no), dout = spread_floats(no, gen);
    std::vector<int32_t> arg(no);
    maxpool2_forward(out.data(), arg.data(), inp.data(), p.B, p.H, p.W, p.C);
    relu_forward(out.data(), out.data(), (long)no);
    Vec dp(dout), host(n, NAN), dev(n);
    relu_backward(dp.data(), dp.data(), out.data(), (long)no);
    maxpool2_backward(host.data(), dp.data(), arg.data(), p.B, p.H, p.W, p.C);
    long nonzero = 0;
    for (size_t i = 0; i < n; i++) {
      dev[i] =
          cnn_pool_relu_backward_at(dout.data(), out.data(), arg.data(), (long)i, p.H, p.W, p.C);
      nonzero += dev[i] != 0.0f;
    }
    printf("pool+relu backward B%d H%d W%d C%d: %ld of %zu input gradients nonzero\n", p.B, p.H,
           p.W, p.C, nonzero, n);
    EXPECT_EQ(count_differing_bits(host.data(), dev.data(), n), 0);
    EXPECT_GT(nonzero, 0);
    EXPECT_LT(nonzero, (long)no + 1); /* at most one winner per window */
  }
}

// gamma_n = n u / (1 - n u), u = 2^-24: a float sum of n products (in any order) is within
// gamma_n * sum |terms| of the exact value (Higham, Accuracy and Stability, 3.1), so two
// implementations summing in different orders are within twice that of each other.
double gamma_n(long n) {
  double u = std::ldexp(1.0, -24);
  return n * u / (1.0 - n * u);
}

// The convolution as the GPU trainer computes it: cols = im2col (the maps above), then the
// linear layer y (M, OC) = cols (M, KKC) W^T + b, the product first and the bias after (cuBLAS
// with beta = 0, then the bias kernel); backward dW = dy^T cols, db = column sums of dy,
// dx = col2im(dy W).
TEST(CnnIndex, ConvAsLinearOverColsMatchesHostConv) {
  std::mt19937 gen(5);
  const conv_shape_t shapes[] = {{2, 28, 28, 1, 32, 5}, {2, 14, 14, 32, 64, 5}, {1, 6, 5, 3, 4, 3}};
  for (conv_shape_t s : shapes) {
    int kkc = s.K * s.K * s.C;
    long M = (long)s.B * s.H * s.W;
    Vec x = spread_floats(image_floats(s), gen), w = spread_floats((size_t)s.OC * kkc, gen);
    Vec b = spread_floats(s.OC, gen), dy = spread_floats((size_t)M * s.OC, gen);
    Vec cols(cols_floats(s));
    for (size_t e = 0; e < cols.size(); e++) cols[e] = cnn_im2col_at(x.data(), (long)e, s);
    // forward
    Vec host_y((size_t)M * s.OC), scratch(conv2d_scratch_floats(s)), dscratch(scratch.size());
    conv2d_forward(host_y.data(), scratch.data(), x.data(), w.data(), b.data(), s);
    double worst = 0;
    for (long r = 0; r < M; r++)
      for (int oc = 0; oc < s.OC; oc++) {
        float acc = 0.0f;
        double mag = std::fabs(b[oc]);
        for (int j = 0; j < kkc; j++) {
          acc += cols[r * kkc + j] * w[(long)oc * kkc + j];
          mag += std::fabs((double)cols[r * kkc + j] * w[(long)oc * kkc + j]);
        }
        acc += b[oc];
        double diff = std::fabs((double)acc - host_y[r * s.OC + oc]),
               tol = 2 * gamma_n(kkc + 1) * mag;
        worst = std::fmax(worst, mag > 0 ? diff / tol : diff);
        ASSERT_LE(diff, tol) << "forward r " << r << " oc " << oc;
      }
    // backward
    Vec hdx(image_floats(s)), hdw((size_t)s.OC * kkc), hdb(s.OC);
    conv2d_backward(hdx.data(), hdw.data(), hdb.data(), scratch.data(), dscratch.data(), dy.data(),
                    x.data(), w.data(), s, 0);
    for (int oc = 0; oc < s.OC; oc++) {
      float db = 0.0f;
      double dbmag = 0;
      for (long r = 0; r < M; r++) db += dy[r * s.OC + oc], dbmag += std::fabs(dy[r * s.OC + oc]);
      ASSERT_LE(std::fabs((double)db - hdb[oc]), 2 * gamma_n(M) * dbmag) << "db " << oc;
      for (int j = 0; j < kkc; j++) {
        float acc = 0.0f;
        double mag = 0;
        for (long r = 0; r < M; r++) {
          acc += dy[r * s.OC + oc] * cols[r * kkc + j];
          mag += std::fabs((double)dy[r * s.OC + oc] * cols[r * kkc + j]);
        }
        ASSERT_LE(std::fabs((double)acc - hdw[(long)oc * kkc + j]), 2 * gamma_n(M) * mag)
            << "dw oc " << oc << " j " << j;
      }
    }
    Vec dcols(cols.size()), absdcols(cols.size());
    for (long r = 0; r < M; r++)
      for (int j = 0; j < kkc; j++) {
        float acc = 0.0f, mag = 0.0f;
        for (int oc = 0; oc < s.OC; oc++) {
          acc += dy[r * s.OC + oc] * w[(long)oc * kkc + j];
          mag += std::fabs(dy[r * s.OC + oc] * w[(long)oc * kkc + j]);
        }
        dcols[r * kkc + j] = acc, absdcols[r * kkc + j] = mag;
      }
    // Each input gradient: K*K taps, each a sum of OC products: a chain of at most OC + K*K
    // additions over sum |terms| (absdcols, itself rounded: the 1.01 covers its few ulps).
    for (size_t i = 0; i < hdx.size(); i++) {
      double mag = 1.01 * cnn_col2im_at(absdcols.data(), (long)i, s);
      double diff = std::fabs((double)cnn_col2im_at(dcols.data(), (long)i, s) - hdx[i]);
      ASSERT_LE(diff, 2 * gamma_n(s.OC + s.K * s.K) * mag) << "dx " << i;
    }
    printf(
        "conv as linear over cols B%d H%d W%d C%d OC%d K%d: forward within %.3f of the "
        "bound; backward dw, db, dx within their bounds\n",
        s.B, s.H, s.W, s.C, s.OC, s.K, worst);
  }
}

}  // namespace
