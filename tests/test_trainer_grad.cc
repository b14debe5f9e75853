// Finite-difference gradient checks of every layer of the reference trainer (trainer/layers.h:
// linear, ReLU, dropout, conv2d, max-pool, softmax cross-entropy) and of both models end to end,
// with and without dropout (trainer/model.h).
//
// Each layer check takes a random input, a random upstream gradient R and the scalar
// L = sum(out * R); backward with dout = R must give dL/d(everything), which we compare with
// central differences (L(x + eps) - L(x - eps)) / 2 eps, computed in double from the float
// outputs. As llm.c's test does, each check prints the first values and the max difference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "layers.h"
#include "model.h"
}

namespace {

using Vec = std::vector<float>;

Vec random_vec(size_t n, std::mt19937 &gen, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (auto &x : v) x = u(gen);
  return v;
}

// Inputs kept away from 0 so that ReLU's kink is never within eps of a probe.
Vec away_from_zero(size_t n, std::mt19937 &gen) {
  Vec v = random_vec(n, gen, 0.1f, 1.0f);
  std::bernoulli_distribution sign(0.5);
  for (auto &x : v) x = sign(gen) ? -x : x;
  return v;
}

double dot(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += (double)a[i] * b[i];
  return s;
}

// Compares an analytic gradient with central differences of loss() over the coordinates of
// `x` (all of them, or those listed); prints the first values and the max error.
// Error of a coordinate: |analytic - numeric| / max(floor, |numeric|).
//   Where the bounds come from (u = 2^-24): L = sum(out * R) is linear in each coordinate for
// linear, conv and dropout, and (away from the kinks, which the inputs keep clear of) for ReLU
// and max-pool, so central differences have no truncation error, at any step eps that stays
// clear of a kink; only rounding remains. The two probes differ only in the k outputs that read
// the probed coordinate (the others are the same bits), each a float dot product of K terms
// with sum|terms| <= S, off by at most gamma_K S, so the numeric derivative is off by at most
// k gamma_K S / eps (|R| <= 1). Linear and conv have no kink: they are probed with eps = 0.5,
// which divides the rounding by 50 against a step of 1e-2. Linear (k = OUT = 5, K = IN + 1 = 8,
// S <= 8): 3.8e-5. ReLU, dropout and max-pool copy or scale one value (k = 1, K = 1), eps 1e-2:
// 1e-5. Conv's worst case (conv2's shape: k = 25 OC = 100, K = 25 C = 800, S <= 801) is no
// useful bound; rounding errors of random sign add like a random walk, u sqrt(k K) s with s the
// typical partial sum (~ sqrt(K) / 3 = 9.4 for uniform inputs): 1.6e-4 / (2 eps) = 1.6e-4,
// a sixth of the bound 1e-3. A wrong gradient (a missing term, a transposed index) is off by
// O(1).
void check_grad(const char *name, Vec &x, const Vec &analytic, const std::function<double()> &loss,
                float eps, double tol, std::vector<size_t> coords = {}, double floor = 1.0) {
  ASSERT_EQ(x.size(), analytic.size());
  if (coords.empty())
    for (size_t i = 0; i < x.size(); i++) coords.push_back(i);
  double max_err = 0;
  std::string first;
  for (size_t k = 0; k < coords.size(); k++) {
    size_t i = coords[k];
    float saved = x[i];
    x[i] = saved + eps;
    double up = loss();
    x[i] = saved - eps;
    double down = loss();
    x[i] = saved;
    double numeric = (up - down) / (2.0 * eps);
    double err = std::fabs(analytic[i] - numeric) / std::max(floor, std::fabs(numeric));
    max_err = std::max(max_err, err);
    if (k < 3) {
      char buf[96];
      snprintf(buf, sizeof(buf), " %+.6f/%+.6f", analytic[i], numeric);
      first += buf;
    }
  }
  printf("  %-14s %5zu coords, analytic/numeric:%s ... max error %.2e\n", name, coords.size(),
         first.c_str(), max_err);
  EXPECT_LE(max_err, tol) << name;
}

// ---------------------------------------------------------------- layers

TEST(TrainerGradCheck, Linear) {
  const int B = 3, IN = 7, OUT = 5;
  std::mt19937 gen(1);
  Vec x = random_vec(B * IN, gen), w = random_vec(OUT * IN, gen), b = random_vec(OUT, gen);
  Vec R = random_vec(B * OUT, gen), out(B * OUT);
  auto loss = [&] {
    linear_forward(out.data(), x.data(), w.data(), b.data(), B, IN, OUT);
    return dot(out, R);
  };
  Vec dx(B * IN), dw(OUT * IN, 0.0f), db(OUT, 0.0f);
  loss();
  linear_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), B, IN, OUT, 1);
  check_grad("linear dinp", x, dx, loss, 0.5f, 1e-3);  // eps and bound: see check_grad
  check_grad("linear dw", w, dw, loss, 0.5f, 1e-3);
  check_grad("linear db", b, db, loss, 0.5f, 1e-3);
}

TEST(TrainerGradCheck, LinearBackwardAccumulatesParameterGradients) {
  const int B = 2, IN = 3, OUT = 2;
  std::mt19937 gen(2);
  Vec x = random_vec(B * IN, gen), w = random_vec(OUT * IN, gen), R = random_vec(B * OUT, gen);
  Vec once(OUT * IN, 0.0f), twice(OUT * IN, 0.0f), db(OUT, 0.0f);
  linear_backward(nullptr, once.data(), db.data(), R.data(), x.data(), w.data(), B, IN, OUT, 1);
  for (int k = 0; k < 2; k++)
    linear_backward(nullptr, twice.data(), db.data(), R.data(), x.data(), w.data(), B, IN, OUT, 1);
  for (size_t i = 0; i < once.size(); i++) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  // accumulate = 0 overwrites whatever was there: the same values as from zeros
  Vec over(OUT * IN, 1e3f), db_once(OUT, 0.0f), db_over(OUT, -1e3f);
  linear_backward(nullptr, once.data(), db_once.data(), R.data(), x.data(), w.data(), B, IN, OUT,
                  0);
  linear_backward(nullptr, over.data(), db_over.data(), R.data(), x.data(), w.data(), B, IN, OUT,
                  0);
  for (size_t i = 0; i < once.size(); i++) EXPECT_EQ(over[i], once[i]) << i;
  for (int i = 0; i < OUT; i++) EXPECT_EQ(db_over[i], db_once[i]) << i;
}

// The gradient of [w | b] from the sufficient factors (dout, inp) of K samples, any range of
// that layout (cut inside rows, whole rows, into the bias), equals linear_backward's over the
// same K samples, times the scale; entries outside the range are not touched.
TEST(TrainerGradCheck, LinearGradientFromFactors) {
  const int K = 6, IN = 7, OUT = 5, N = OUT * IN + OUT;
  std::mt19937 gen(3);
  Vec x = random_vec(K * IN, gen), w = random_vec(OUT * IN, gen), R = random_vec(K * OUT, gen);
  Vec ref(N);
  linear_backward(nullptr, ref.data(), ref.data() + OUT * IN, R.data(), x.data(), w.data(), K, IN,
                  OUT, 0);
  const size_t ranges[][2] = {{0, (size_t)N}, {3, 5}, {3, 30}, {7, 21}, {20, 38}, {35, 40}};
  for (const auto &r : ranges) {
    Vec g(N, 123.0f);
    linear_grad_from_factors(g.data(), R.data(), x.data(), K, IN, OUT, r[0], r[1], 0.5f);
    for (size_t i = 0; i < (size_t)N; i++) {
      bool in = i >= r[0] && i < r[1];
      // both sum the same K products (|x|, |R| <= 1), maybe in another order: each within
      // gamma_K K of the exact sum, so within 2 gamma_K K * 0.5 = K^2 u (2.1e-6) of each other
      EXPECT_NEAR(g[i], in ? 0.5f * ref[i] : 123.0f, K * K * std::ldexp(1.0, -24))
          << "range " << r[0] << ".." << r[1] << ", entry " << i;
    }
  }
}

TEST(TrainerGradCheck, Relu) {
  const int n = 40;
  std::mt19937 gen(3);
  Vec x = away_from_zero(n, gen), R = random_vec(n, gen), out(n), dx(n);
  auto loss = [&] {
    relu_forward(out.data(), x.data(), n);
    return dot(out, R);
  };
  loss();
  relu_backward(dx.data(), R.data(), out.data(), n);
  check_grad("relu dinp", x, dx, loss, 1e-2f, 1e-3);
}

TEST(TrainerGradCheck, Dropout) {
  const int B = 3, n = 50;
  const float p = 0.3f;
  std::mt19937 gen(9);
  Vec x = random_vec(B * n, gen), R = random_vec(B * n, gen), out(B * n), mask(B * n), dx(B * n);
  uint64_t keys[B] = {11, 12, 13};
  auto loss = [&] {
    dropout_forward(out.data(), mask.data(), x.data(), B, n, p, keys, 7);
    return dot(out, R);
  };
  loss();
  dropout_backward(dx.data(), R.data(), mask.data(), B * n);
  check_grad("dropout dinp", x, dx, loss, 1e-2f, 1e-3);
  int dropped = 0;
  for (float v : mask) {
    EXPECT_TRUE(v == 0.0f || v == 1.0f / (1.0f - p));
    dropped += v == 0.0f;
  }
  printf("  dropout: %d of %d units dropped at p = %.1f\n", dropped, B * n, p);
  EXPECT_GT(dropped, 0.15 * B * n);
  EXPECT_LT(dropped, 0.45 * B * n);
}

// probes: 0 checks every coordinate, else that many random ones per tensor.
void conv_check(conv_shape_t s, unsigned seed, size_t probes = 0) {
  std::mt19937 gen(seed);
  size_t nin = (size_t)s.B * s.H * s.W * s.C, nout = (size_t)s.B * s.H * s.W * s.OC;
  size_t kkc = (size_t)s.K * s.K * s.C;
  Vec x = random_vec(nin, gen), w = random_vec(s.OC * kkc, gen), b = random_vec(s.OC, gen);
  Vec R = random_vec(nout, gen), out(nout);
  Vec cols(conv2d_scratch_floats(s)), dcols(cols.size());
  auto loss = [&] {
    conv2d_forward(out.data(), cols.data(), x.data(), w.data(), b.data(), s);
    return dot(out, R);
  };
  Vec dx(nin), dw(w.size(), 0.0f), db(s.OC, 0.0f);
  loss();
  conv2d_backward(dx.data(), dw.data(), db.data(), cols.data(), dcols.data(), R.data(), x.data(),
                  w.data(), s, 1);
  // accumulate = 0 over garbage gives the values accumulated from zeros, every tile included
  Vec dw_over(w.size(), 1e3f), db_over(s.OC, -1e3f);
  conv2d_backward(nullptr, dw_over.data(), db_over.data(), cols.data(), dcols.data(), R.data(),
                  x.data(), w.data(), s, 0);
  for (size_t i = 0; i < dw.size(); i++) ASSERT_EQ(dw_over[i], dw[i]) << "dw " << i;
  for (int i = 0; i < s.OC; i++) ASSERT_EQ(db_over[i], db[i]) << "db " << i;
  auto pick = [&](size_t n) {
    std::vector<size_t> c;
    std::uniform_int_distribution<size_t> u(0, n - 1);
    for (size_t k = 0; probes && k < probes; k++) c.push_back(u(gen));
    return c;
  };
  printf("  conv2d B=%d %dx%dx%d -> %d, K=%d: tiles of %d image(s)\n", s.B, s.H, s.W, s.C, s.OC,
         s.K, conv2d_tile_images(s));
  check_grad("conv2d dinp", x, dx, loss, 0.5f, 1e-3, pick(x.size()));  // see check_grad
  check_grad("conv2d dw", w, dw, loss, 0.5f, 1e-3, pick(w.size()));
  check_grad("conv2d db", b, db, loss, 0.5f, 1e-3);
}

TEST(TrainerGradCheck, Conv2dK3) {
  conv_check(conv_shape_t{2, 5, 6, 3, 4, 3}, 4);
}
TEST(TrainerGradCheck, Conv2dK5SingleChannel) {
  conv_check(conv_shape_t{2, 7, 7, 1, 3, 5}, 5);
}
// conv1's direct path with its 32 output channels: rows of 9 pixels are two blocks of four
// and a remainder pixel
TEST(TrainerGradCheck, Conv2dK5SingleChannel32Outputs) {
  conv_check(conv_shape_t{2, 8, 9, 1, 32, 5}, 7, 80);
}
// conv2's shape: one image per tile, so three tiles
TEST(TrainerGradCheck, Conv2dTiled) {
  conv_check(conv_shape_t{3, 14, 14, 32, 4, 5}, 6, 60);
}

TEST(TrainerGradCheck, MaxPool2) {
  const int B = 2, H = 4, W = 6, C = 3, n = B * H * W * C, nout = n / 4;
  std::mt19937 gen(6);
  Vec x(n);
  // distinct values at least 0.05 apart, shuffled: no tie can flip within eps
  for (int i = 0; i < n; i++) x[i] = 0.05f * (float)(i - n / 2);
  std::shuffle(x.begin(), x.end(), gen);
  Vec R = random_vec(nout, gen), out(nout), dx(n);
  std::vector<int32_t> arg(nout);
  auto loss = [&] {
    maxpool2_forward(out.data(), arg.data(), x.data(), B, H, W, C);
    return dot(out, R);
  };
  loss();
  maxpool2_backward(dx.data(), R.data(), arg.data(), B, H, W, C);
  check_grad("maxpool2 dinp", x, dx, loss, 1e-2f, 1e-3);
}

TEST(TrainerGradCheck, SoftmaxCrossEntropy) {
  const int B = 4, V = 10;
  std::mt19937 gen(8);
  Vec z = random_vec(B * V, gen, -3.0f, 3.0f), probs(B * V), losses(B), dz(B * V);
  uint8_t y[B] = {0, 9, 3, 3};
  const float scale = 1.0f / B;
  auto loss = [&] {
    softmax_xent_forward(probs.data(), losses.data(), z.data(), y, B, V);
    double s = 0;
    for (float l : losses) s += l;
    return s * scale;
  };
  loss();
  softmax_xent_backward(dz.data(), probs.data(), y, B, V, scale);
  check_grad("xent dlogits", z, dz, loss, 1e-3f, 2e-3);
  // Probabilities sum to one, losses are -log p[target]. Each float probability is exp (within
  // an ulp) over a float sum of V exps (gamma_V) rounded once more by the division: relative
  // error <= (V + 3) u = 7.7e-7 < 1e-6, so their sum is within 1e-6 of 1 and -log p within
  // 1e-6 (plus the loss's own rounding, u * 10) of the loss: bound 1e-5.
  for (int b = 0; b < B; b++) {
    double s = 0;
    for (int v = 0; v < V; v++) s += probs[b * V + v];
    EXPECT_NEAR(s, 1.0, 1e-6);
    EXPECT_NEAR(losses[b], -std::log(probs[b * V + y[b]]), 1e-5);
  }
}

// ---------------------------------------------------------------- models end to end

// A naive double-precision reference of both models' forward pass, straight from the layer
// definitions (nested loops, no im2col, no BLAS). It checks the float forward, and its loss is
// precise enough for central differences with a step of 1e-5, small enough that a probe almost
// never crosses a ReLU or max-pool decision; probes that do are detected and skipped.
struct Reference {
  const model_t &m;
  int B;
  uint64_t decisions = 0;  // hash of every ReLU sign and max-pool winner of the last forward
  std::vector<double> logits;

  double p(const float *view, size_t i) const { return view[i]; }
  void note(uint64_t v) { decisions = (decisions ^ v) * 1099511628211ull; }
  double relu(double z) {
    note(z > 0);
    return z > 0 ? z : 0;
  }
  // out (B, O) = relu?(in (B, I) . w^T + b) (* dropout mask (B, O) when given)
  std::vector<double> linear(const std::vector<double> &in, const float *w, const float *b, int I,
                             int O, bool act, const float *mask = nullptr) {
    std::vector<double> out((size_t)B * O);
    for (int n = 0; n < B; n++)
      for (int o = 0; o < O; o++) {
        double z = b[o];
        for (int i = 0; i < I; i++) z += in[(size_t)n * I + i] * (double)w[(size_t)o * I + i];
        z = act ? relu(z) : z;
        out[(size_t)n * O + o] = mask ? z * mask[(size_t)n * O + o] : z;
      }
    return out;
  }
  // NHWC, w (OC, K, K, C), same padding, then ReLU
  std::vector<double> conv(const std::vector<double> &in, const float *w, const float *b, int H,
                           int W, int C, int OC, int K) {
    std::vector<double> out((size_t)B * H * W * OC);
    for (int n = 0; n < B; n++)
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
          double *z = &out[(((size_t)n * H + y) * W + x) * OC];
          for (int o = 0; o < OC; o++) z[o] = b[o];
          for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
              int iy = y + ky - K / 2, ix = x + kx - K / 2;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              const double *v = &in[(((size_t)n * H + iy) * W + ix) * C];
              for (int o = 0; o < OC; o++) {
                const float *wo = w + (((size_t)o * K + ky) * K + kx) * C;
                double s = 0;
                for (int c = 0; c < C; c++) s += v[c] * (double)wo[c];
                z[o] += s;
              }
            }
          for (int o = 0; o < OC; o++) z[o] = relu(z[o]);
        }
    return out;
  }
  std::vector<double> pool(const std::vector<double> &in, int H, int W, int C) {
    std::vector<double> out((size_t)B * (H / 2) * (W / 2) * C);
    for (int n = 0; n < B; n++)
      for (int y = 0; y < H / 2; y++)
        for (int x = 0; x < W / 2; x++)
          for (int c = 0; c < C; c++) {
            int best = 0;
            double v[4];
            for (int t = 0; t < 4; t++) {
              v[t] = in[(((size_t)n * H + 2 * y + t / 2) * W + 2 * x + t % 2) * C + c];
              if (v[t] > v[best]) best = t;
            }
            note((uint64_t)best);
            out[(((size_t)n * (H / 2) + y) * (W / 2) + x) * C + c] = v[best];
          }
    return out;
  }
  // batch-mean cross-entropy; with dropout, the masks the float forward drew (kept in m)
  double loss(const Vec &x, const uint8_t *y) {
    decisions = 1469598103934665603ull;
    std::vector<double> h(x.begin(), x.end());
    bool drop = m.keys && m.dropout > 0;
    if (m.kind == MODEL_MLP) {
      const mlp_params_t &q = m.p.mlp;
      h = linear(h, q.fc1w, q.fc1b, 784, 512, true, drop ? m.a.mlp.mask1 : nullptr);
      h = linear(h, q.fc2w, q.fc2b, 512, 256, true, drop ? m.a.mlp.mask2 : nullptr);
      logits = linear(h, q.fc3w, q.fc3b, 256, 10, false);
    } else {
      const cnn_params_t &q = m.p.cnn;
      h = pool(conv(h, q.conv1w, q.conv1b, 28, 28, 1, 32, 5), 28, 28, 32);
      h = pool(conv(h, q.conv2w, q.conv2b, 14, 14, 32, 64, 5), 14, 14, 64);
      h = linear(h, q.fc1w, q.fc1b, 3136, 512, true, drop ? m.a.cnn.mask1 : nullptr);
      logits = linear(h, q.fc2w, q.fc2b, 512, 10, false);
    }
    double total = 0;
    for (int n = 0; n < B; n++) {
      const double *z = &logits[(size_t)n * 10];
      double zmax = *std::max_element(z, z + 10), sum = 0;
      for (int v = 0; v < 10; v++) sum += std::exp(z[v] - zmax);
      total += std::log(sum) - (z[y[n]] - zmax);
    }
    return total / B;
  }
};

// Whole models: the float forward against the reference, then per parameter tensor the 4
// coordinates with the largest |dL/dp| and 3 random ones: backward's gradient against central
// differences of the reference loss. Errors are relative to max(|numeric|, 1e-4). The numeric
// side is double (rounding ~1e-16 / eps = 1e-11; truncation eps^2 |d3L| / 6 ~ 1e-10), so the
// error is backward's float rounding: a chain of dot products whose lengths add up to the sum of
// the fan-ins, m = 784 + 512 + 256 (MLP) or 25 + 800 + 3136 + 512 (CNN). The worst case m u
// (2.7e-4 for the CNN) has every rounding in the same direction; rounding errors of random sign
// give sqrt(m) u = 4e-6, and the bound 1e-4 is 25 times that.
void model_check(model_kind_t kind, float dropout) {
  const int B = 2;
  model_t m;
  ASSERT_EQ(model_create(&m, kind, B), 0);
  model_init_params(&m, 11);
  uint64_t keys[B] = {21, 22};
  m.dropout = dropout, m.keys = dropout > 0 ? keys : nullptr;
  std::mt19937 gen(12);
  Vec x = random_vec((size_t)B * 784, gen, -0.5f, 2.0f);
  uint8_t y[B] = {1, 7};
  model_forward(&m, x.data(), y, B);  // first: draws the dropout masks the reference reuses
  Reference ref{m, B};
  double ref_loss = ref.loss(x, y);
  uint64_t centre = ref.decisions;
  double max_logit_diff = 0;
  for (int i = 0; i < B * 10; i++)
    max_logit_diff = std::max(max_logit_diff, std::fabs(m.logits[i] - ref.logits[i]));
  printf(
      "  %s forward: logits %+.6f %+.6f ... reference %+.6f %+.6f ..., max diff %.2e, "
      "loss %.6f vs %.6f\n",
      model_name(kind), m.logits[0], m.logits[1], ref.logits[0], ref.logits[1], max_logit_diff,
      (m.losses[0] + m.losses[1]) / 2.0, ref_loss);
  EXPECT_LE(max_logit_diff, 1e-4);
  model_zero_grad(&m);
  model_backward(&m, y, B, 1.0f / B);
  for (int t = 0; t < m.ntensors; t++) {
    const param_tensor_t &pt = m.tensors[t];
    std::vector<size_t> probes(pt.count);
    for (size_t i = 0; i < pt.count; i++) probes[i] = pt.offset + i;
    size_t top = std::min<size_t>(4, pt.count);
    std::partial_sort(probes.begin(), probes.begin() + top, probes.end(), [&](size_t a, size_t b) {
      return std::fabs(m.grads[a]) > std::fabs(m.grads[b]);
    });
    probes.resize(top);
    std::uniform_int_distribution<size_t> pick(pt.offset, pt.offset + pt.count - 1);
    for (int k = 0; k < 3; k++) probes.push_back(pick(gen));
    double max_err = 0;
    int used = 0, skipped = 0;
    for (size_t i : probes) {
      const float saved = m.params[i], eps = 1e-5f * std::max(1.0f, std::fabs(saved));
      m.params[i] = saved + eps;
      double h_up = (double)m.params[i] - saved, up = ref.loss(x, y);
      uint64_t d_up = ref.decisions;
      m.params[i] = saved - eps;
      double h_down = saved - (double)m.params[i], down = ref.loss(x, y);
      uint64_t d_down = ref.decisions;
      m.params[i] = saved;
      if (d_up != centre || d_down != centre) {
        skipped++;
        continue;
      }
      double numeric = (up - down) / (h_up + h_down);  // the float steps, exactly
      double err = std::fabs(m.grads[i] - numeric) / std::max(1e-4, std::fabs(numeric));
      max_err = std::max(max_err, err);
      if (used++ == 0)
        printf("  %s %-13s largest grad %+.7f numeric %+.7f", model_name(kind), pt.name, m.grads[i],
               numeric);
    }
    printf("  %d probes (%d skipped at a kink), max error %.2e\n", used, skipped, max_err);
    EXPECT_GE(used, 5) << pt.name;
    EXPECT_LE(max_err, 1e-4) << pt.name;
  }
  model_free(&m);
}

TEST(TrainerGradCheck, MlpEndToEnd) {
  model_check(MODEL_MLP, 0.0f);
}
TEST(TrainerGradCheck, MlpEndToEndWithDropout) {
  model_check(MODEL_MLP, 0.3f);
}
TEST(TrainerGradCheck, CnnEndToEnd) {
  model_check(MODEL_CNN, 0.0f);
}
TEST(TrainerGradCheck, CnnEndToEndWithDropout) {
  model_check(MODEL_CNN, 0.3f);
}

}  // namespace
