/* Layer forward/backward pairs; see layers.h for the conventions. */
#include "layers.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- linear */

void linear_forward(float *out, const float *inp, const float *w, const float *b, int B, int IN,
                    int OUT) {
  for (int r = 0; r < B; r++) memcpy(out + (long)r * OUT, b, (size_t)OUT * sizeof(float));
  // out (B, OUT) += inp (B, IN) . w^T (IN, OUT)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OUT, IN, 1.0f, inp, IN, w, IN, 1.0f, out, OUT);
}

/* db (n) += column sums of d (rows, n). */
static void add_column_sums(float *db, const float *d, long rows, int n) {
  for (long r = 0; r < rows; r++) {
    const float *row = d + r * n;
    for (int j = 0; j < n; j++) db[j] += row[j];
  }
}

void linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, int B, int IN, int OUT) {
  // dw (OUT, IN) += dout^T (OUT, B) . inp (B, IN)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, B, 1.0f, dout, OUT, inp, IN, 1.0f, dw, IN);
  add_column_sums(db, dout, B, OUT);
  // dinp (B, IN) = dout (B, OUT) . w (OUT, IN)
  if (dinp)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f,
                dinp, IN);
}

/* ---------------------------------------------------------------- relu */

void relu_forward(float *out, const float *inp, long n) {
  for (long i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float *dinp, const float *dout, const float *out, long n) {
  for (long i = 0; i < n; i++) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

/* ---------------------------------------------------------------- conv2d */

/* Copies n floats; an inline loop beats memcpy's call for the short runs of im2col. */
static inline void copy_floats(float *restrict dst, const float *restrict src, int n) {
  for (int i = 0; i < n; i++) dst[i] = src[i];
}

/* cols (B*H*W, K*K*C): row (b, y, x) holds the K x K x C window centred on (y, x), zeros
 * where the window leaves the image. NHWC makes each (ky, kx) tap one contiguous C-run. */
static void im2col(float *cols, const float *inp, conv_shape_t s) {
  int P = s.K / 2, C = s.C;
  long kkc = (long)s.K * s.K * C;
  for (int b = 0; b < s.B; b++)
    for (int y = 0; y < s.H; y++)
      for (int x = 0; x < s.W; x++) {
        float *row = cols + (((long)b * s.H + y) * s.W + x) * kkc;
        for (int ky = 0; ky < s.K; ky++) {
          int iy = y + ky - P;
          long first = (((long)b * s.H + iy) * s.W + x - P) * C; /* tap kx = 0, maybe outside */
          for (int kx = 0; kx < s.K; kx++, row += C) {
            int ix = x + kx - P;
            if (iy < 0 || iy >= s.H || ix < 0 || ix >= s.W)
              memset(row, 0, (size_t)C * sizeof(float));
            else
              copy_floats(row, inp + first + (long)kx * C, C);
          }
        }
      }
}

/* The adjoint of im2col: dinp (B, H, W, C) = sum of every window's gradient at its place. */
static void col2im(float *dinp, const float *dcols, conv_shape_t s) {
  int P = s.K / 2, C = s.C;
  memset(dinp, 0, (size_t)s.B * s.H * s.W * C * sizeof(float));
  for (int b = 0; b < s.B; b++)
    for (int y = 0; y < s.H; y++)
      for (int x = 0; x < s.W; x++) {
        const float *row = dcols + (((long)b * s.H + y) * s.W + x) * s.K * s.K * C;
        for (int ky = 0; ky < s.K; ky++) {
          int iy = y + ky - P;
          long first = (((long)b * s.H + iy) * s.W + x - P) * C;
          for (int kx = 0; kx < s.K; kx++, row += C) {
            int ix = x + kx - P;
            if (iy < 0 || iy >= s.H || ix < 0 || ix >= s.W) continue;
            float *d = dinp + first + (long)kx * C;
            for (int c = 0; c < C; c++) d[c] += row[c];
          }
        }
      }
}

void conv2d_forward(float *out, float *cols, const float *inp, const float *w, const float *b,
                    conv_shape_t s) {
  long M = (long)s.B * s.H * s.W;
  int kkc = s.K * s.K * s.C;
  im2col(cols, inp, s);
  for (long r = 0; r < M; r++) memcpy(out + r * s.OC, b, (size_t)s.OC * sizeof(float));
  // out (M, OC) += cols (M, KKC) . w^T (KKC, OC)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, s.OC, kkc, 1.0f, cols, kkc, w, kkc,
              1.0f, out, s.OC);
}

void conv2d_backward(float *dinp, float *dw, float *db, float *dcols, const float *dout,
                     const float *cols, const float *w, conv_shape_t s) {
  long M = (long)s.B * s.H * s.W;
  int kkc = s.K * s.K * s.C;
  // dw (OC, KKC) += dout^T (OC, M) . cols (M, KKC)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.OC, kkc, (int)M, 1.0f, dout, s.OC, cols,
              kkc, 1.0f, dw, kkc);
  add_column_sums(db, dout, M, s.OC);
  if (!dinp) return;
  // dcols (M, KKC) = dout (M, OC) . w (OC, KKC)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, kkc, s.OC, 1.0f, dout, s.OC, w,
              kkc, 0.0f, dcols, kkc);
  col2im(dinp, dcols, s);
}

/* ---------------------------------------------------------------- maxpool 2x2 */

void maxpool2_forward(float *out, int32_t *arg, const float *inp, int B, int H, int W, int C) {
  int OH = H / 2, OW = W / 2;
  for (int b = 0; b < B; b++)
    for (int y = 0; y < OH; y++)
      for (int x = 0; x < OW; x++) {
        long o = (((long)b * OH + y) * OW + x) * C;
        long i00 = (((long)b * H + 2 * y) * W + 2 * x) * C;
        long taps[4] = {i00, i00 + C, i00 + (long)W * C, i00 + (long)W * C + C};
        for (int c = 0; c < C; c++) {
          long best = taps[0] + c;
          for (int t = 1; t < 4; t++)
            if (inp[taps[t] + c] > inp[best]) best = taps[t] + c;
          out[o + c] = inp[best];
          arg[o + c] = (int32_t)best;
        }
      }
}

void maxpool2_backward(float *dinp, const float *dout, const int32_t *arg, int B, int H, int W,
                       int C) {
  long n_out = (long)B * (H / 2) * (W / 2) * C;
  memset(dinp, 0, (size_t)B * H * W * C * sizeof(float));
  for (long o = 0; o < n_out; o++) dinp[arg[o]] = dout[o]; /* windows do not overlap */
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
