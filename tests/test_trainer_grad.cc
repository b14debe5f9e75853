// Finite-difference gradient checks of every layer of the reference trainer (trainer/layers.h)
// and of both models end to end (trainer/model.h).
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
  linear_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), B, IN, OUT);
  check_grad("linear dinp", x, dx, loss, 1e-2f, 1e-3);
  check_grad("linear dw", w, dw, loss, 1e-2f, 1e-3);
  check_grad("linear db", b, db, loss, 1e-2f, 1e-3);
}

TEST(TrainerGradCheck, LinearBackwardAccumulatesParameterGradients) {
  const int B = 2, IN = 3, OUT = 2;
  std::mt19937 gen(2);
  Vec x = random_vec(B * IN, gen), w = random_vec(OUT * IN, gen), R = random_vec(B * OUT, gen);
  Vec once(OUT * IN, 0.0f), twice(OUT * IN, 0.0f), db(OUT, 0.0f);
  linear_backward(nullptr, once.data(), db.data(), R.data(), x.data(), w.data(), B, IN, OUT);
  for (int k = 0; k < 2; k++)
    linear_backward(nullptr, twice.data(), db.data(), R.data(), x.data(), w.data(), B, IN, OUT);
  for (size_t i = 0; i < once.size(); i++) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
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

void conv_check(conv_shape_t s, unsigned seed) {
  std::mt19937 gen(seed);
  size_t nin = (size_t)s.B * s.H * s.W * s.C, nout = (size_t)s.B * s.H * s.W * s.OC;
  size_t kkc = (size_t)s.K * s.K * s.C;
  Vec x = random_vec(nin, gen), w = random_vec(s.OC * kkc, gen), b = random_vec(s.OC, gen);
  Vec R = random_vec(nout, gen), out(nout), cols(nout / s.OC * kkc), dcols(cols.size());
  auto loss = [&] {
    conv2d_forward(out.data(), cols.data(), x.data(), w.data(), b.data(), s);
    return dot(out, R);
  };
  Vec dx(nin), dw(w.size(), 0.0f), db(s.OC, 0.0f);
  loss();
  conv2d_backward(dx.data(), dw.data(), db.data(), dcols.data(), R.data(), cols.data(), w.data(), s);
  check_grad("conv2d dinp", x, dx, loss, 1e-2f, 1e-3);
  check_grad("conv2d dw", w, dw, loss, 1e-2f, 1e-3);
  check_grad("conv2d db", b, db, loss, 1e-2f, 1e-3);
}

TEST(TrainerGradCheck, Conv2dK3) { conv_check(conv_shape_t{2, 5, 6, 3, 4, 3}, 4); }
TEST(TrainerGradCheck, Conv2dK5SingleChannel) { conv_check(conv_shape_t{2, 7, 7, 1, 3, 5}, 5); }

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
  for (int b = 0; b < B; b++) {  // probabilities sum to one, losses are -log p[target]
    double s = 0;
    for (int v = 0; v < V; v++) s += probs[b * V + v];
    EXPECT_NEAR(s, 1.0, 1e-6);
    EXPECT_NEAR(losses[b], -std::log(probs[b * V + y[b]]), 1e-5);
  }
}

// ---------------------------------------------------------------- models end to end

// Hash of every piecewise decision of the last forward: which ReLUs are on, which input won
// each max-pool window. Between two points with the same decisions the model is smooth, so a
// central difference whose two ends agree with the centre is free of kinks.
uint64_t decisions(const model_t &m, int B) {
  uint64_t h = 1469598103934665603ull;
  auto mix_signs = [&](const float *v, long n) {
    for (long i = 0; i < n; i++) h = (h ^ (uint64_t)(v[i] > 0.0f)) * 1099511628211ull;
  };
  auto mix_args = [&](const int32_t *v, long n) {
    for (long i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)v[i]) * 1099511628211ull;
  };
  if (m.kind == MODEL_MLP) {
    mix_signs(m.a.mlp.h1, B * 512L), mix_signs(m.a.mlp.h2, B * 256L);
  } else {
    mix_signs(m.a.cnn.c1, B * 28L * 28 * 32), mix_signs(m.a.cnn.c2, B * 14L * 14 * 64);
    mix_signs(m.a.cnn.f1, B * 512L);
    mix_args(m.a.cnn.arg1, B * 14L * 14 * 32), mix_args(m.a.cnn.arg2, B * 7L * 7 * 64);
  }
  return h;
}

// Whole models: the batch-mean loss L; per parameter tensor the 6 coordinates with the largest
// |dL/dp| (where the float loss resolves a difference best) and 4 random ones. Each probe uses
// the largest step (1e-2, 2e-3, 5e-4) whose ends make the same ReLU and max-pool decisions as
// the centre; a probe with none is skipped (counted in the output). Errors are relative to
// max(|numeric|, 1e-3): the float loss resolves differences of ~1e-7.
void model_check(model_kind_t kind) {
  const int B = 3;
  model_t m;
  ASSERT_EQ(model_create(&m, kind, B), 0);
  model_init_params(&m, 11);
  std::mt19937 gen(12);
  // Each image is zero but for a random 8x8 patch: conv activations outside it are the biases
  // (far from ReLU's kink, and pooling ties that move together), so few probes meet a kink.
  Vec x((size_t)B * 784, 0.0f);
  std::uniform_real_distribution<float> pixel(-0.5f, 2.0f);
  for (int b = 0; b < B; b++)
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 8; c++) x[b * 784 + (6 + 4 * b + r) * 28 + 8 + 3 * b + c] = pixel(gen);
  uint8_t y[B] = {1, 7, 4};
  auto loss = [&] {
    model_forward(&m, x.data(), y, B);
    double s = 0;
    for (int b = 0; b < B; b++) s += m.losses[b];
    return s / B;
  };
  loss();
  uint64_t centre = decisions(m, B);
  model_zero_grad(&m);
  model_backward(&m, y, B, 1.0f / B);
  for (int t = 0; t < m.ntensors; t++) {
    const param_tensor_t &pt = m.tensors[t];
    std::vector<size_t> probes(pt.count);
    for (size_t i = 0; i < pt.count; i++) probes[i] = pt.offset + i;
    size_t top = std::min<size_t>(6, pt.count);
    std::partial_sort(probes.begin(), probes.begin() + top, probes.end(), [&](size_t a, size_t b) {
      return std::fabs(m.grads[a]) > std::fabs(m.grads[b]);
    });
    probes.resize(top);
    std::uniform_int_distribution<size_t> pick(pt.offset, pt.offset + pt.count - 1);
    for (int k = 0; k < 4; k++) probes.push_back(pick(gen));
    double max_err = 0;
    int used = 0, skipped = 0;
    for (size_t i : probes) {
      // the largest step whose ends make the same decisions as the centre (kink-free)
      double numeric = 0;
      bool smooth = false;
      for (float eps : {1e-2f, 2e-3f, 5e-4f}) {
        const float saved = m.params[i];
        m.params[i] = saved + eps;
        double up = loss();
        uint64_t d_up = decisions(m, B);
        m.params[i] = saved - eps;
        double down = loss();
        uint64_t d_down = decisions(m, B);
        m.params[i] = saved;
        numeric = (up - down) / (2.0 * eps);
        if ((smooth = d_up == centre && d_down == centre)) break;
      }
      if (!smooth) {
        skipped++;
        continue;
      }
      max_err = std::max(max_err, std::fabs(m.grads[i] - numeric) / std::max(1e-3, std::fabs(numeric)));
      if (used++ == 0)
        printf("  %s %-13s largest grad %+.6f numeric %+.6f", model_name(kind), pt.name,
               m.grads[i], numeric);
    }
    printf("  %2d probes (%d skipped at a kink), max error %.2e\n", used, skipped, max_err);
    EXPECT_GE(used, 5) << pt.name;
    EXPECT_LE(max_err, 1e-2) << pt.name;
  }
  model_free(&m);
}

TEST(TrainerGradCheck, MlpEndToEnd) { model_check(MODEL_MLP); }
TEST(TrainerGradCheck, CnnEndToEnd) { model_check(MODEL_CNN); }

}  // namespace
