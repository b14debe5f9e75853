/* Layer forward/backward pairs; see layers.h for the conventions. */
#include "layers.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "rng.h"

/* ---------------------------------------------------------------- linear */

void linear_forward(float *out, const float *inp, const float *w, const float *b, int B, int IN,
                    int OUT) {
  for (int r = 0; r < B; r++) memcpy(out + (long)r * OUT, b, (size_t)OUT * sizeof(float));
  // out (B, OUT) += inp (B, IN) . w^T (IN, OUT)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OUT, IN, 1.0f, inp, IN, w, IN, 1.0f, out,
              OUT);
}

/* db (n) += column sums of d (rows, n). */
TRAINER_SIMD static void add_column_sums(float *db, const float *d, long rows, int n) {
  for (long r = 0; r < rows; r++) {
    const float *row = d + r * n;
    for (int j = 0; j < n; j++) db[j] += row[j];
  }
}

void linear_backward_weight_units(float *dw, const float *dout, const float *inp, int B, int IN,
                                  int OUT, int u0, int u1, int accumulate) {
  // dw[u0:u1] (u1 - u0, IN) (+)= dout[:, u0:u1]^T (u1 - u0, B) . inp (B, IN)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, u1 - u0, IN, B, 1.0f, dout + u0, OUT, inp,
              IN, accumulate ? 1.0f : 0.0f, dw + (long)u0 * IN, IN);
}

void linear_backward_bias(float *db, const float *dout, int B, int OUT, int accumulate) {
  if (!accumulate) memset(db, 0, (size_t)OUT * sizeof(float));
  add_column_sums(db, dout, B, OUT);
}

void linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, int B, int IN, int OUT, int accumulate) {
  linear_backward_weight_units(dw, dout, inp, B, IN, OUT, 0, OUT, accumulate);
  linear_backward_bias(db, dout, B, OUT, accumulate);
  // dinp (B, IN) = dout (B, OUT) . w (OUT, IN)
  if (dinp)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f,
                dinp, IN);
}

/* g[i, j0:j1) of dw = scale x dout[:, i]^T inp[:, j0:j1) for rows i in [i0, i1). */
static void weight_grad_rect(float *dw, const float *dout, const float *inp, int K, int IN, int OUT,
                             int i0, int i1, int j0, int j1, float scale) {
  if (i1 > i0 && j1 > j0)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1 - i0, j1 - j0, K, scale, dout + i0, OUT,
                inp + j0, IN, 0.0f, dw + (long)i0 * IN + j0, IN);
}

TRAINER_SIMD static void bias_grad_units(float *db, const float *dout, int K, int OUT, int u0,
                                         int u1, float scale) {
  memset(db + u0, 0, (size_t)(u1 - u0) * sizeof(float));
  for (long k = 0; k < K; k++)
    for (int u = u0; u < u1; u++) db[u] += dout[k * OUT + u];
  for (int u = u0; u < u1; u++) db[u] *= scale;
}

void linear_grad_from_factors(float *g, const float *dout, const float *inp, int K, int IN, int OUT,
                              size_t lo, size_t hi, float scale) {
  size_t wend = (size_t)OUT * IN, h = hi < wend ? hi : wend;
  if (lo < h) { /* weight entries [lo, h): a partial first row, whole rows, a partial last row */
    int i0 = (int)(lo / IN), j0 = (int)(lo % IN), i1 = (int)(h / IN), j1 = (int)(h % IN);
    if (i0 == i1) {
      weight_grad_rect(g, dout, inp, K, IN, OUT, i0, i0 + 1, j0, j1, scale);
    } else {
      weight_grad_rect(g, dout, inp, K, IN, OUT, i0, i0 + 1, j0, IN, scale);
      weight_grad_rect(g, dout, inp, K, IN, OUT, i0 + 1, i1, 0, IN, scale);
      weight_grad_rect(g, dout, inp, K, IN, OUT, i1, i1 + 1, 0, j1, scale);
    }
  }
  if (hi > wend) /* bias entries */
    bias_grad_units(g + wend, dout, K, OUT, (int)((lo > wend ? lo : wend) - wend), (int)(hi - wend),
                    scale);
}

/* ---------------------------------------------------------------- relu */

TRAINER_SIMD void relu_forward(float *out, const float *inp, long n) {
  for (long i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

TRAINER_SIMD void relu_backward(float *dinp, const float *dout, const float *out, long n) {
  for (long i = 0; i < n; i++) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

/* ---------------------------------------------------------------- dropout */

TRAINER_SIMD void dropout_forward(float *out, float *mask, const float *inp, int B, int n, float p,
                                  const uint64_t *keys, uint64_t salt) {
  float keep_scale = 1.0f / (1.0f - p);
  for (int b = 0; b < B; b++) {
    rng_t r = {keys[b] ^ salt};
    float *m = mask + (long)b * n;
    for (int j = 0; j < n; j++) m[j] = rng_uniform(&r) < p ? 0.0f : keep_scale;
    for (int j = 0; j < n; j++) out[(long)b * n + j] = inp[(long)b * n + j] * m[j];
  }
}

TRAINER_SIMD void dropout_backward(float *dinp, const float *dout, const float *mask, long n) {
  for (long i = 0; i < n; i++) dinp[i] = dout[i] * mask[i];
}

/* ---------------------------------------------------------------- conv2d */

/* cols (B*H*W, K*K*C): row (b, y, x) holds the K x K x C window centred on (y, x), zeros
 * where the window leaves the image. In NHWC one window row (ky) is a single contiguous run of
 * K*C floats of the input, cut at the left and right borders: we copy runs, not taps. */
TRAINER_SIMD void conv2d_im2col(float *cols, const float *inp, conv_shape_t s) {
  int P = s.K / 2, C = s.C, KC = s.K * s.C;
  for (int b = 0; b < s.B; b++)
    for (int y = 0; y < s.H; y++)
      for (int x = 0; x < s.W; x++) {
        float *dst = cols + (((long)b * s.H + y) * s.W + x) * s.K * KC;
        int lo = x < P ? P - x : 0, hi = x + P >= s.W ? s.W - x + P : s.K; /* valid kx range */
        for (int ky = 0; ky < s.K; ky++, dst += KC) {
          int iy = y + ky - P;
          if (iy < 0 || iy >= s.H) {
            for (int i = 0; i < KC; i++) dst[i] = 0.0f;
            continue;
          }
          const float *src = inp + (((long)b * s.H + iy) * s.W + x - P + lo) * C;
          for (int i = 0; i < lo * C; i++) dst[i] = 0.0f;
          for (int i = 0; i < (hi - lo) * C; i++) dst[lo * C + i] = src[i];
          for (int i = hi * C; i < KC; i++) dst[i] = 0.0f;
        }
      }
}

/* The adjoint of im2col: dinp (B, H, W, C) = sum of every window's gradient at its place. */
TRAINER_SIMD void conv2d_col2im(float *dinp, const float *dcols, conv_shape_t s) {
  int P = s.K / 2, C = s.C, KC = s.K * s.C;
  memset(dinp, 0, (size_t)s.B * s.H * s.W * C * sizeof(float));
  for (int b = 0; b < s.B; b++)
    for (int y = 0; y < s.H; y++)
      for (int x = 0; x < s.W; x++) {
        const float *src = dcols + (((long)b * s.H + y) * s.W + x) * s.K * KC;
        int lo = x < P ? P - x : 0, hi = x + P >= s.W ? s.W - x + P : s.K;
        for (int ky = 0; ky < s.K; ky++, src += KC) {
          int iy = y + ky - P;
          if (iy < 0 || iy >= s.H) continue;
          float *d = dinp + (((long)b * s.H + iy) * s.W + x - P + lo) * C;
          for (int i = 0; i < (hi - lo) * C; i++) d[i] += src[lo * C + i];
        }
      }
}

/* A single input channel (conv1): a window has only K*K taps, too shallow for an efficient
 * sgemm (and im2col copies runs of one pixel), so the convolution is computed directly, tap by
 * tap, on a zero-padded copy of each image: out[y][x][:] += in[y+ky][x+kx] * wt[ky][kx][:],
 * with the weights transposed to wt (K, K, OC) so that the inner loop runs over contiguous
 * output channels. Used when the padded image and wt fit the stack buffers below. */
#define C1_MAX_PAD 4096
#define C1_MAX_WT 4096

static int conv_c1_direct(conv_shape_t s) {
  int PH = s.H + s.K - 1, PW = s.W + s.K - 1;
  return s.C == 1 && PH * PW <= C1_MAX_PAD && s.K * s.K * s.OC <= C1_MAX_WT;
}

/* pad (H + K - 1, W + K - 1) = image b of inp (H, W) with K/2 zeros on every side. */
static void c1_pad(float *pad, const float *img, conv_shape_t s) {
  int P = s.K / 2, PW = s.W + s.K - 1;
  memset(pad, 0, (size_t)(s.H + s.K - 1) * PW * sizeof(float));
  for (int y = 0; y < s.H; y++) memcpy(pad + (y + P) * PW + P, img + y * s.W, s.W * sizeof(float));
}

/* wt (K*K, OC) = w (OC, K*K) transposed. */
static void c1_transpose(float *wt, const float *w, int taps, int OC) {
  for (int oc = 0; oc < OC; oc++)
    for (int t = 0; t < taps; t++) wt[t * OC + oc] = w[oc * taps + t];
}

/* One output row o (W, OC) = b + sum over taps of the padded input times wt. Inlined into
 * a variant with OC = 32 (conv1's), where the channel loop is two AVX-512 vectors, and a
 * generic one. Pixels go four at a time, their channels in registers across all the taps, so
 * each tap's weights are loaded once per four pixels and nothing is stored until the end. */
static inline __attribute__((always_inline)) void c1_row_forward(float *restrict o,
                                                                 const float *restrict pad,
                                                                 const float *restrict wt,
                                                                 const float *restrict b, int y,
                                                                 int W, int K, int OC) {
  int PW = W + K - 1, x = 0;
  for (; x + 4 <= W; x += 4) {
    float a0[OC], a1[OC], a2[OC], a3[OC];
    for (int oc = 0; oc < OC; oc++) a0[oc] = a1[oc] = a2[oc] = a3[oc] = b[oc];
    for (int ky = 0; ky < K; ky++)
      for (int kx = 0; kx < K; kx++) {
        const float *restrict p = pad + (y + ky) * PW + x + kx, *restrict wk =
                                                                    wt + (ky * K + kx) * OC;
        for (int oc = 0; oc < OC; oc++) {
          a0[oc] += p[0] * wk[oc], a1[oc] += p[1] * wk[oc];
          a2[oc] += p[2] * wk[oc], a3[oc] += p[3] * wk[oc];
        }
      }
    for (int oc = 0; oc < OC; oc++) {
      o[x * OC + oc] = a0[oc], o[(x + 1) * OC + oc] = a1[oc];
      o[(x + 2) * OC + oc] = a2[oc], o[(x + 3) * OC + oc] = a3[oc];
    }
  }
  for (; x < W; x++) /* the same sums, one pixel at a time */
    for (int oc = 0; oc < OC; oc++) {
      float acc = b[oc];
      for (int t = 0; t < K * K; t++) acc += pad[(y + t / K) * PW + x + t % K] * wt[t * OC + oc];
      o[x * OC + oc] = acc;
    }
}

TRAINER_SIMD static void c1_rows_forward(float *o, const float *pad, const float *wt,
                                         const float *b, conv_shape_t s) {
  for (int y = 0; y < s.H; y++, o += (long)s.W * s.OC) {
    if (s.OC == 32)
      c1_row_forward(o, pad, wt, b, y, s.W, s.K, 32);
    else
      c1_row_forward(o, pad, wt, b, y, s.W, s.K, s.OC);
  }
}

static void conv_c1_forward(float *out, const float *inp, const float *w, const float *b,
                            conv_shape_t s) {
  float pad[C1_MAX_PAD] __attribute__((aligned(64))), wt[C1_MAX_WT] __attribute__((aligned(64)));
  c1_transpose(wt, w, s.K * s.K, s.OC);
  for (int n = 0; n < s.B; n++) {
    c1_pad(pad, inp + (long)n * s.H * s.W, s);
    c1_rows_forward(out + (long)n * s.H * s.W * s.OC, pad, wt, b, s);
  }
}

/* dwt (K*K, OC) += the taps' products of one output row's gradient d (W, OC) with the input;
 * OC = 32 and generic variants as for the forward. Taps of a window row go four at a time,
 * their sums in registers across the pixels, so each pixel's gradient is loaded once per four
 * taps. */
static inline __attribute__((always_inline)) void c1_row_dw(float *restrict dwt,
                                                            const float *restrict d,
                                                            const float *restrict pad, int y, int W,
                                                            int K, int OC) {
  int PW = W + K - 1;
  for (int ky = 0; ky < K; ky++) {
    const float *restrict row = pad + (y + ky) * PW;
    float *restrict acc = dwt + ky * K * OC;
    int kx = 0;
    for (; kx + 4 <= K; kx += 4) {
      float a0[OC], a1[OC], a2[OC], a3[OC];
      for (int oc = 0; oc < OC; oc++) a0[oc] = a1[oc] = a2[oc] = a3[oc] = 0.0f;
      for (int x = 0; x < W; x++) {
        const float *restrict p = row + x + kx, *restrict dx = d + x * OC;
        for (int oc = 0; oc < OC; oc++) {
          a0[oc] += p[0] * dx[oc], a1[oc] += p[1] * dx[oc];
          a2[oc] += p[2] * dx[oc], a3[oc] += p[3] * dx[oc];
        }
      }
      for (int oc = 0; oc < OC; oc++) {
        acc[kx * OC + oc] += a0[oc], acc[(kx + 1) * OC + oc] += a1[oc];
        acc[(kx + 2) * OC + oc] += a2[oc], acc[(kx + 3) * OC + oc] += a3[oc];
      }
    }
    for (; kx < K; kx++) {
      float a0[OC];
      for (int oc = 0; oc < OC; oc++) a0[oc] = 0.0f;
      for (int x = 0; x < W; x++)
        for (int oc = 0; oc < OC; oc++) a0[oc] += row[x + kx] * d[x * OC + oc];
      for (int oc = 0; oc < OC; oc++) acc[kx * OC + oc] += a0[oc];
    }
  }
}

TRAINER_SIMD static void c1_rows_dw(float *dwt, const float *d, const float *pad, conv_shape_t s) {
  for (int y = 0; y < s.H; y++, d += (long)s.W * s.OC) {
    if (s.OC == 32)
      c1_row_dw(dwt, d, pad, y, s.W, s.K, 32);
    else
      c1_row_dw(dwt, d, pad, y, s.W, s.K, s.OC);
  }
}

/* dpad (padded) += every output's gradient spread over its window; then cropped into dinp. */
static void c1_dinp(float *dinp, float *dpad, const float *d, const float *wt, conv_shape_t s) {
  int P = s.K / 2, PW = s.W + s.K - 1, OC = s.OC;
  memset(dpad, 0, (size_t)(s.H + s.K - 1) * PW * sizeof(float));
  for (int y = 0; y < s.H; y++)
    for (int x = 0; x < s.W; x++)
      for (int t = 0; t < s.K * s.K; t++) {
        float sum = 0.0f;
        for (int oc = 0; oc < OC; oc++) sum += d[(y * s.W + x) * OC + oc] * wt[t * OC + oc];
        dpad[(y + t / s.K) * PW + x + t % s.K] += sum;
      }
  for (int y = 0; y < s.H; y++)
    memcpy(dinp + y * s.W, dpad + (y + P) * PW + P, s.W * sizeof(float));
}

static void conv_c1_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, conv_shape_t s, int accumulate) {
  float pad[C1_MAX_PAD] __attribute__((aligned(64))), wt[C1_MAX_WT] __attribute__((aligned(64)));
  float dwt[C1_MAX_WT] __attribute__((aligned(64)));
  int taps = s.K * s.K;
  long img = (long)s.H * s.W;
  memset(dwt, 0, (size_t)taps * s.OC * sizeof(float));
  if (dinp) c1_transpose(wt, w, taps, s.OC);
  for (int n = 0; n < s.B; n++) {
    const float *d = dout + n * img * s.OC;
    c1_pad(pad, inp + n * img, s);
    c1_rows_dw(dwt, d, pad, s);
    if (dinp) c1_dinp(dinp + n * img, pad, d, wt, s); /* pad is free again: scratch */
  }
  for (int oc = 0; oc < s.OC; oc++)
    for (int t = 0; t < taps; t++)
      dw[oc * taps + t] = (accumulate ? dw[oc * taps + t] : 0.0f) + dwt[t * s.OC + oc];
  if (!accumulate) memset(db, 0, (size_t)s.OC * sizeof(float));
  add_column_sums(db, dout, s.B * img, s.OC);
}

/* Images per tile: the batch is convolved a few images at a time so that the unfolded input of
 * a tile (and its gradient) stays in the core's L2 cache between im2col and the sgemm that
 * reads it; whole-batch im2col buffers (40 MB for conv2 at batch 64) make every sgemm stream
 * from memory and run ~30% slower. */
int conv2d_tile_images(conv_shape_t s) {
  long bytes = (long)s.H * s.W * s.K * s.K * s.C * (long)sizeof(float);
  long n = CONV_TILE_BYTES / bytes;
  return (int)(n < 1 ? 1 : n > s.B ? s.B : n);
}

long conv2d_scratch_floats(conv_shape_t s) {
  return (long)conv2d_tile_images(s) * s.H * s.W * s.K * s.K * s.C;
}

void conv2d_forward(float *out, float *cols, const float *inp, const float *w, const float *b,
                    conv_shape_t s) {
  if (conv_c1_direct(s)) {
    conv_c1_forward(out, inp, w, b, s);
    return;
  }
  int kkc = s.K * s.K * s.C, tile = conv2d_tile_images(s);
  long in_img = (long)s.H * s.W * s.C, out_img = (long)s.H * s.W * s.OC;
  for (int b0 = 0; b0 < s.B; b0 += tile) {
    conv_shape_t t = s;
    t.B = b0 + tile <= s.B ? tile : s.B - b0;
    long M = (long)t.B * s.H * s.W;
    float *o = out + b0 * out_img;
    conv2d_im2col(cols, inp + b0 * in_img, t);
    for (long r = 0; r < M; r++) memcpy(o + r * s.OC, b, (size_t)s.OC * sizeof(float));
    // out (M, OC) += cols (M, KKC) . w^T (KKC, OC)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, s.OC, kkc, 1.0f, cols, kkc, w, kkc,
                1.0f, o, s.OC);
  }
}

void conv2d_backward(float *dinp, float *dw, float *db, float *cols, float *dcols,
                     const float *dout, const float *inp, const float *w, conv_shape_t s,
                     int accumulate) {
  if (conv_c1_direct(s)) {
    conv_c1_backward(dinp, dw, db, dout, inp, w, s, accumulate);
    return;
  }
  if (!accumulate) memset(db, 0, (size_t)s.OC * sizeof(float));
  int kkc = s.K * s.K * s.C, tile = conv2d_tile_images(s);
  long in_img = (long)s.H * s.W * s.C, out_img = (long)s.H * s.W * s.OC;
  for (int b0 = 0; b0 < s.B; b0 += tile) {
    conv_shape_t t = s;
    t.B = b0 + tile <= s.B ? tile : s.B - b0;
    long M = (long)t.B * s.H * s.W;
    const float *d = dout + b0 * out_img;
    conv2d_im2col(cols, inp + b0 * in_img, t); /* again: cheaper than keeping the batch's */
    // dw (OC, KKC) (+)= dout^T (OC, M) . cols (M, KKC): the first tile overwrites unless
    // accumulating
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.OC, kkc, (int)M, 1.0f, d, s.OC, cols,
                kkc, accumulate || b0 > 0 ? 1.0f : 0.0f, dw, kkc);
    add_column_sums(db, d, M, s.OC);
    if (!dinp) continue;
    // dcols (M, KKC) = dout (M, OC) . w (OC, KKC)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, kkc, s.OC, 1.0f, d, s.OC, w, kkc,
                0.0f, dcols, kkc);
    conv2d_col2im(dinp + b0 * in_img, dcols, t);
  }
}

/* ---------------------------------------------------------------- maxpool 2x2 */

/* Window (b, y, x) of a 2x2 pool: the output offset, and the input offsets of its 4 taps. */
static inline long pool_window(long taps[4], int b, int y, int x, int H, int W, int C) {
  long i00 = (((long)b * H + 2 * y) * W + 2 * x) * C;
  taps[0] = i00, taps[1] = i00 + C, taps[2] = i00 + (long)W * C, taps[3] = i00 + (long)W * C + C;
  return (((long)b * (H / 2) + y) * (W / 2) + x) * C;
}

TRAINER_SIMD void maxpool2_forward(float *out, int32_t *arg, const float *inp, int B, int H, int W,
                                   int C) {
  int OH = H / 2, OW = W / 2;
  for (int b = 0; b < B; b++)
    for (int y = 0; y < OH; y++)
      for (int x = 0; x < OW; x++) {
        long taps[4], o = pool_window(taps, b, y, x, H, W, C);
        for (int c = 0; c < C; c++) {
          long best = taps[0] + c;
          for (int t = 1; t < 4; t++)
            if (inp[taps[t] + c] > inp[best]) best = taps[t] + c;
          out[o + c] = inp[best];
          arg[o + c] = (int32_t)best;
        }
      }
}

/* Windows tile the input exactly (H, W even), so each input gets dout or 0 in one pass. */
TRAINER_SIMD void maxpool2_backward(float *dinp, const float *dout, const int32_t *arg, int B,
                                    int H, int W, int C) {
  int OH = H / 2, OW = W / 2;
  for (int b = 0; b < B; b++)
    for (int y = 0; y < OH; y++)
      for (int x = 0; x < OW; x++) {
        long taps[4], o = pool_window(taps, b, y, x, H, W, C);
        for (int t = 0; t < 4; t++)
          for (int c = 0; c < C; c++)
            dinp[taps[t] + c] = arg[o + c] == (int32_t)(taps[t] + c) ? dout[o + c] : 0.0f;
      }
}

/* ---------------------------------------------------------------- softmax cross-entropy */

void softmax_xent_forward(float *probs, float *losses, const float *logits, const uint8_t *targets,
                          int B, int V) {
  for (int b = 0; b < B; b++) {
    const float *z = logits + (long)b * V;
    float *p = probs + (long)b * V;
    float zmax = z[0];
    for (int v = 1; v < V; v++) zmax = z[v] > zmax ? z[v] : zmax;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += p[v] = expf(z[v] - zmax);
    for (int v = 0; v < V; v++) p[v] = (float)(p[v] / sum);
    // -log softmax computed from the logits, not from p: exact even when p[target] underflows
    losses[b] = (float)(log(sum) - (z[targets[b]] - zmax));
  }
}

void softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *targets, int B, int V,
                           float scale) {
  for (int b = 0; b < B; b++)
    for (int v = 0; v < V; v++) {
      float indicator = v == targets[b] ? 1.0f : 0.0f;
      dlogits[(long)b * V + v] = (probs[(long)b * V + v] - indicator) * scale;
    }
}
