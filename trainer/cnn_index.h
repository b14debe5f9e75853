/* The CNN's index maps, element by element: im2col, its adjoint col2im, and 2x2 max pooling
 * followed by ReLU, forward and backward. Plain integer arithmetic and float loads, compiled by
 * cc, c++ and nvcc: the GPU trainer's kernels (train_cuda.cu) call these functions for one
 * element per thread, and test_cnn_index checks the same functions, on the host, bit for bit
 * against the host trainer's layers (layers.c), whose loops are written independently (runs of
 * K*C floats, whole windows).
 *
 * Shapes as in layers.h: images NHWC (B, H, W, C); a convolution with stride 1 and "same" zero
 * padding P = K/2 (K odd); cols (B*H*W, K*K*C), row r = (b*H + y)*W + x holds the K x K x C
 * window centred on (y, x), column j = (ky*K + kx)*C + c.
 */
#ifndef TRAINER_CNN_INDEX_H_
#define TRAINER_CNN_INDEX_H_

#include <stdint.h>

#include "layers.h" /* conv_shape_t */

#ifdef __CUDACC__
#define CNN_HD __host__ __device__
#else
#define CNN_HD
#endif

/* The index into inp (B, H, W, C) that cols element (r, j) copies, or -1 where the window leaves
 * the image (a padding zero). */
static inline CNN_HD long cnn_im2col_src(long r, int j, conv_shape_t s) {
  int P = s.K / 2, c = j % s.C, kx = (j / s.C) % s.K, ky = j / (s.C * s.K);
  int x = (int)(r % s.W), y = (int)((r / s.W) % s.H);
  long b = r / ((long)s.W * s.H);
  int iy = y + ky - P, ix = x + kx - P;
  if (iy < 0 || iy >= s.H || ix < 0 || ix >= s.W) return -1;
  return ((b * s.H + iy) * s.W + ix) * s.C + c;
}

/* cols element e = r*K*K*C + j. */
static inline CNN_HD float cnn_im2col_at(const float *inp, long e, conv_shape_t s) {
  int kkc = s.K * s.K * s.C;
  long src = cnn_im2col_src(e / kkc, (int)(e % kkc), s);
  return src < 0 ? 0.0f : inp[src];
}

/* col2im, gathered: input element i = (b, iy, ix, c) receives, from tap t = ky*K + kx, cols
 * element (r, j) of the window at (y, x) = (iy - ky + P, ix - kx + P), j = t*C + c; returns its
 * index into cols, or -1 where that window centre is outside the image. */
static inline CNN_HD long cnn_col2im_src(long i, int t, conv_shape_t s) {
  int P = s.K / 2, c = (int)(i % s.C), ix = (int)((i / s.C) % s.W);
  int iy = (int)((i / ((long)s.C * s.W)) % s.H);
  long b = i / ((long)s.C * s.W * s.H);
  int ky = t / s.K, kx = t % s.K, y = iy - ky + P, x = ix - kx + P;
  if (y < 0 || y >= s.H || x < 0 || x >= s.W) return -1;
  return ((b * s.H + y) * s.W + x) * (long)(s.K * s.K * s.C) + (long)t * s.C + c;
}

/* dinp[i] = the sum of every window's gradient at input element i. The host's col2im adds the
 * windows in row-major order of their centre (y, then x, ascending) into a zeroed dinp: for a
 * fixed input element that is ky descending, then kx descending, i.e. t from K*K-1 down to 0.
 * Summing in that order from 0.0f gives the host's bits. */
static inline CNN_HD float cnn_col2im_at(const float *dcols, long i, conv_shape_t s) {
  float acc = 0.0f;
  for (int t = s.K * s.K - 1; t >= 0; t--) {
    long src = cnn_col2im_src(i, t, s);
    if (src >= 0) acc += dcols[src];
  }
  return acc;
}

/* 2x2 max pooling, stride 2, of inp (B, H, W, C) into (B, H/2, W/2, C): the index into inp of
 * tap t (0..3: top left, top right, bottom left, bottom right) of output element o. */
static inline CNN_HD long cnn_pool_tap(long o, int t, int H, int W, int C) {
  int OH = H / 2, OW = W / 2, c = (int)(o % C), x = (int)((o / C) % OW);
  int y = (int)((o / ((long)C * OW)) % OH);
  long b = o / ((long)C * OW * OH);
  return ((b * H + 2 * y + t / 2) * W + 2 * x + t % 2) * C + c;
}

/* Output element o of pooling then ReLU: the first tap holding the maximum (taps in order,
 * strict >, as maxpool2_forward) goes to *arg, max(that value, 0) to *out (relu_forward's
 * "v > 0 ? v : 0"). */
static inline CNN_HD void cnn_pool_relu_at(float *out, int32_t *arg, const float *inp, long o,
                                           int H, int W, int C) {
  long best = cnn_pool_tap(o, 0, H, W, C);
  for (int t = 1; t < 4; t++) {
    long i = cnn_pool_tap(o, t, H, W, C);
    if (inp[i] > inp[best]) best = i;
  }
  *arg = (int32_t)best;
  *out = inp[best] > 0.0f ? inp[best] : 0.0f;
}

/* The output element whose window holds input element i (H, W even: windows tile the input). */
static inline CNN_HD long cnn_pool_window_of(long i, int H, int W, int C) {
  int c = (int)(i % C), ix = (int)((i / C) % W), iy = (int)((i / ((long)C * W)) % H);
  long b = i / ((long)C * W * H);
  return ((b * (H / 2) + iy / 2) * (W / 2) + ix / 2) * C + c;
}

/* The backward of pooling then ReLU at input element i: dout of its window where i won and the
 * output was positive (relu_backward then maxpool2_backward), else 0. */
static inline CNN_HD float cnn_pool_relu_backward_at(const float *dout, const float *out,
                                                     const int32_t *arg, long i, int H, int W,
                                                     int C) {
  long o = cnn_pool_window_of(i, H, W, C);
  return arg[o] == (int32_t)i && out[o] > 0.0f ? dout[o] : 0.0f;
}

#endif /* TRAINER_CNN_INDEX_H_ */
