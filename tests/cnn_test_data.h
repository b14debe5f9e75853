// Test data for the CNN's element maps, shared by the host check (test_cnn_index.cc) and the
// GPU one (gpu/test_cnn_kernels.cu): floats that make a wrong summation order or a wrong tie
// rule show, and a bitwise comparison.
#ifndef TUTTI_TESTS_CNN_TEST_DATA_H
#define TUTTI_TESTS_CNN_TEST_DATA_H

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

// Floats whose magnitudes spread over 2^-10 .. 2^10, so that a sum in another order rounds
// differently (a check of the summation order can fail).
inline std::vector<float> spread_floats(size_t n, std::mt19937 &gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-10, 10);
  std::vector<float> v(n);
  for (auto &x : v) x = std::ldexp(u(gen), e(gen));
  return v;
}

// Values from {-2, -1, -0, 0, 1, 2}: ties inside pooling windows (the first tap must win, as on
// the host), windows whose maximum is 0, -0 or negative (ReLU's zeros).
inline std::vector<float> tied_floats(size_t n, std::mt19937 &gen) {
  const float values[] = {-2.0f, -1.0f, -0.0f, 0.0f, 1.0f, 2.0f};
  std::uniform_int_distribution<int> pick(0, 5);
  std::vector<float> v(n);
  for (auto &x : v) x = values[pick(gen)];
  return v;
}

// How many of the n floats differ in their bits (0 and -0 differ, NaNs compare by payload).
inline long count_differing_bits(const float *a, const float *b, size_t n) {
  long bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

#endif
