// Gradient compression without a network (src/compress/): every codec's round trip within its
// stated bound, wire headers and payloads checked on receipt (every field, every malformed
// payload rejected), topk's selection, error feedback over many steps with a bounded residual,
// the spec parser and the wire-byte counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

extern "C" {
#include "compress/compress.h"
}

namespace {

// Inputs spanning magnitudes 2^-20 .. 2^20 with both signs, zeros, and fp16's subnormal range.
std::vector<float> varied_input(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-20, 20), sign(0, 1);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++) {
    x[i] = std::ldexp(mant(gen), expo(gen)) * (sign(gen) ? -1.0f : 1.0f);
    if (i % 97 == 0) x[i] = 0.0f;
  }
  return x;
}

std::vector<float> round_trip(const compress_codec_t *codec, const std::vector<float> &x) {
  std::vector<uint8_t> buf(codec->payload_bytes(x.size()));
  codec->encode(x.data(), x.size(), 1.0f, buf.data());
  EXPECT_EQ(codec->check(buf.data(), x.size()), nullptr);
  std::vector<float> y(x.size()), acc(x.size(), 1.0f);
  codec->decode(buf.data(), x.size(), y.data());
  codec->decode_add(buf.data(), x.size(), acc.data());
  for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(acc[i], 1.0f + y[i]) << "decode_add at " << i;
  return y;
}

TEST(CompressCodec, Bf16WithinHalfAnUlp) {
  // bf16 keeps 8 significant bits; round to nearest: |y - x| <= half an ulp = 2^-8 * 2^e,
  // 2^e <= |x|, so <= 2^-8 |x| (the inputs stay in bf16's normal range).
  auto x = varied_input(10007, 1);
  auto y = round_trip(&compress_codec_bf16, x);
  for (size_t i = 0; i < x.size(); i++)
    ASSERT_LE(std::fabs(y[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << "at " << i;
  EXPECT_EQ(compress_codec_bf16.payload_bytes(x.size()), 2 * x.size());
}

TEST(CompressCodec, Fp16WithinHalfAnUlpAndSubnormalStep) {
  // fp16 keeps 11 significant bits down to 2^-14: |y - x| <= 2^-11 |x|; below 2^-14 the step is
  // 2^-24, so |y - x| <= 2^-25. Inputs above 65504 become infinity (documented; the caller
  // scales averages before the cast), so this input stays within 2^15.
  auto x = varied_input(10007, 2);
  for (auto &v : x) v = std::ldexp(v, -6);  // 2^-26 .. 2^15
  auto y = round_trip(&compress_codec_fp16, x);
  for (size_t i = 0; i < x.size(); i++) {
    float bound = std::max(std::ldexp(std::fabs(x[i]), -11), std::ldexp(1.0f, -25));
    ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "at " << i << " x " << x[i];
  }
  std::vector<float> big = {70000.0f, -70000.0f};
  auto yb = round_trip(&compress_codec_fp16, big);
  EXPECT_TRUE(std::isinf(yb[0]) && yb[0] > 0 && std::isinf(yb[1]) && yb[1] < 0);
}

TEST(CompressCodec, Int8WithinHalfAStepOfItsBlock) {
  // Per element: |y - x| <= s (1/2 + 2^-14), s = max |x| of its 256-element block / 127 (the
  // derivation is in codec_int8.c). Sizes around the block edge, blocks of very different
  // magnitudes side by side.
  for (size_t n : {1u, 255u, 256u, 257u, 1000u, 4099u}) {
    auto x = varied_input(n, 3 + (unsigned)n);
    auto y = round_trip(&compress_codec_int8, x);
    for (size_t lo = 0; lo < n; lo += COMPRESS_INT8_BLOCK) {
      size_t hi = std::min(n, lo + COMPRESS_INT8_BLOCK);
      float m = 0;
      for (size_t i = lo; i < hi; i++) m = std::max(m, std::fabs(x[i]));
      float s = m / 127.0f;
      for (size_t i = lo; i < hi; i++)
        ASSERT_LE(std::fabs(y[i] - x[i]), s * (0.5f + std::ldexp(1.0f, -14)))
            << "n " << n << " at " << i;
    }
    EXPECT_EQ(compress_codec_int8.payload_bytes(n), n + 4 * ((n + 255) / 256));
  }
}

TEST(CompressCodec, Int8RejectsMalformedPayloads) {
  std::vector<float> x = varied_input(600, 4);
  std::vector<uint8_t> buf(compress_codec_int8.payload_bytes(600));
  compress_codec_int8.encode(x.data(), 600, 1.0f, buf.data());
  ASSERT_EQ(compress_codec_int8.check(buf.data(), 600), nullptr);
  auto bad_scale = [&](float s) {
    auto b = buf;
    memcpy(b.data() + 4, &s, 4);  // the second block's scale
    return compress_codec_int8.check(b.data(), 600);
  };
  EXPECT_NE(bad_scale(-1.0f), nullptr);
  EXPECT_NE(bad_scale(NAN), nullptr);
  EXPECT_NE(bad_scale(INFINITY), nullptr);
  auto b = buf;
  b[4 * 3 + 599] = 0x80;  // the last value -128
  const char *why = compress_codec_int8.check(b.data(), 600);
  ASSERT_NE(why, nullptr);
  EXPECT_NE(strstr(why, "-128"), nullptr) << why;
  // A NaN input makes its block's scale NaN, which the receiver rejects.
  x[300] = NAN;
  compress_codec_int8.encode(x.data(), 600, 1.0f, buf.data());
  EXPECT_NE(compress_codec_int8.check(buf.data(), 600), nullptr);
}

TEST(CompressWire, HeaderRoundTripsAndEveryFieldIsChecked) {
  compress_header_t want = {COMPRESS_MAGIC, tuttiCompressInt8, COMPRESS_PHASE_SCATTER, 0, 3, 77,
                            12345};
  uint8_t buf[COMPRESS_HEADER_BYTES];
  compress_header_write(buf, &want);
  compress_header_t got;
  compress_header_read(buf, &got);
  EXPECT_EQ(compress_header_check(&got, &want), nullptr);
  // Fixed layout (docs/compression.md): magic "TTC1" first, the count in the last 8 bytes.
  EXPECT_EQ(memcmp(buf, "TTC1", 4), 0);
  uint64_t count;
  memcpy(&count, buf + 16, 8);
  EXPECT_EQ(count, 12345u);
  for (int field = 0; field < 7; field++) {
    compress_header_t h = want;
    switch (field) {
      case 0:
        h.magic ^= 1;
        break;
      case 1:
        h.kind = tuttiCompressBf16;
        break;
      case 2:
        h.phase = COMPRESS_PHASE_GATHER;
        break;
      case 3:
        h.reserved = 1;
        break;
      case 4:
        h.block = 2;
        break;
      case 5:
        h.step = 78;
        break;
      default:
        h.count = 12344;
        break;
    }
    compress_header_write(buf, &h);
    compress_header_read(buf, &got);
    EXPECT_NE(compress_header_check(&got, &want), nullptr) << "field " << field;
  }
}

TEST(CompressTopk, PicksTheLargestMagnitudesInIndexOrder) {
  // 40 elements far above the rest (distinct 2^-7 buckets), placed at scattered indices.
  size_t n = 5000, k = compress_topk_k(n, 0.008f);
  ASSERT_EQ(k, 40u);
  std::vector<float> v(n);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (auto &e : v) e = small(gen);
  std::vector<uint32_t> big;
  for (uint32_t j = 0; j < 40; j++) big.push_back(j * 123 + 7);
  for (size_t j = 0; j < big.size(); j++) v[big[j]] = (j % 2 ? -1.0f : 1.0f) * (100.0f + j);
  std::vector<uint8_t> out(k * COMPRESS_TOPK_PAIR_BYTES);
  std::vector<float> left = v;
  compress_topk_take(left.data(), n, k, nullptr, 0, out.data());
  ASSERT_EQ(compress_topk_check(out.data(), k, n), nullptr);
  for (size_t j = 0; j < k; j++) {
    uint32_t idx;
    float val;
    memcpy(&idx, &out[8 * j], 4);
    memcpy(&val, &out[8 * j + 4], 4);
    EXPECT_EQ(idx, big[j]);
    EXPECT_EQ(val, v[big[j]]);
  }
  std::vector<float> acc(n, 0.0f);
  compress_topk_decode_add(out.data(), k, acc.data());
  for (size_t j = 0; j < k; j++) EXPECT_EQ(acc[big[j]], v[big[j]]);
  // what was taken is zero in v, the rest unchanged (the residual)
  for (size_t i = 0; i < n; i++) EXPECT_EQ(left[i], acc[i] != 0.0f ? 0.0f : v[i]) << i;
}

TEST(CompressTopk, TakesEverySpanWholeAndTheLargestOutside) {
  // Two spans of tiny values (every element taken whatever its size) around and among 10 big
  // elements outside them; the spans' elements must not count against k and the big ones in a
  // span must not be picked twice.
  size_t n = 3000, k = 10;
  std::vector<compress_span_t> spans = {{0, 50}, {1000, 300}, {2990, 10}};
  std::vector<float> v(n);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (auto &e : v) e = small(gen);
  for (const auto &s : spans)
    for (size_t i = s.off; i < s.off + s.count; i++) v[i] = 1e-3f * v[i];
  v[1100] = 1e6f;  // inside a span: taken as a span element, not one of the k
  std::vector<uint32_t> big;
  for (uint32_t j = 0; j < k; j++) big.push_back(j < 5 ? 60 + 97 * j : 1400 + 151 * j);
  for (size_t j = 0; j < k; j++) v[big[j]] = (j % 2 ? -1.0f : 1.0f) * (100.0f + j);
  size_t total = k + 50 + 300 + 10;
  std::vector<uint8_t> out(total * COMPRESS_TOPK_PAIR_BYTES);
  std::vector<float> left = v;
  compress_topk_take(left.data(), n, k, spans.data(), (int)spans.size(), out.data());
  ASSERT_EQ(compress_topk_check(out.data(), total, n), nullptr);  // increasing, in bounds
  std::vector<int> want(n, 0);
  for (const auto &s : spans)
    for (size_t i = s.off; i < s.off + s.count; i++) want[i] = 1;
  for (uint32_t b : big) want[b] = 1;
  std::vector<float> acc(n, 0.0f);
  compress_topk_decode_add(out.data(), total, acc.data());
  for (size_t i = 0; i < n; i++) {
    EXPECT_EQ(acc[i], want[i] ? v[i] : 0.0f) << i;   // sent: exactly its value
    EXPECT_EQ(left[i], want[i] ? 0.0f : v[i]) << i;  // the residual keeps the rest bit for bit
  }
}

TEST(CompressCodec, EncodeScalesBeforeTheCast) {
  // encode(x, s) is encode(s * x, 1): the product rounds to fp32 first, for every codec.
  auto x = varied_input(1000, 9);
  std::vector<float> sx(x.size());
  for (size_t i = 0; i < x.size(); i++) sx[i] = 0.25f * x[i];
  for (const compress_codec_t *c :
       {&compress_codec_bf16, &compress_codec_fp16, &compress_codec_int8}) {
    std::vector<uint8_t> a(c->payload_bytes(x.size())), b(a.size());
    c->encode(x.data(), x.size(), 0.25f, a.data());
    c->encode(sx.data(), x.size(), 1.0f, b.data());
    EXPECT_EQ(a, b) << c->name;
  }
}

TEST(CompressTopk, RejectsIndicesOutOfRangeOrOutOfOrder) {
  std::vector<uint8_t> pairs(3 * 8, 0);
  uint32_t idx[3] = {1, 5, 9};
  for (int j = 0; j < 3; j++) memcpy(&pairs[8 * j], &idx[j], 4);
  EXPECT_EQ(compress_topk_check(pairs.data(), 3, 10), nullptr);
  EXPECT_NE(compress_topk_check(pairs.data(), 3, 9), nullptr);  // 9 beyond a buffer of 9
  uint32_t dup = 5;
  memcpy(&pairs[16], &dup, 4);
  EXPECT_NE(compress_topk_check(pairs.data(), 3, 10), nullptr);  // 1, 5, 5
  uint32_t down = 0;
  memcpy(&pairs[8], &down, 4);
  EXPECT_NE(compress_topk_check(pairs.data(), 3, 10), nullptr);  // 1, 0, ...
}

// Error feedback, sender side, over many steps: each step sends decode(encode(g + e)) and keeps
// e = (g + e) - sent. Then sum(sent) = sum(g) - e_T exactly up to fp32 rounding, so the gap
// stays within one step's bound, however many steps. The input is built so that without error
// feedback the gap grows with the steps: every block holds one element of magnitude 1 and the
// rest 1/1000, which int8 rounds to 0 (step 1/127) every time.
TEST(CompressFeedback, Int8SumOfSentTracksSumOfGradients) {
  const size_t n = 1024, steps = 400;
  std::vector<float> e(n, 0.0f), v(n), sent(n);
  std::vector<double> sum_g(n, 0.0), sum_sent(n, 0.0), sum_plain(n, 0.0);
  std::vector<uint8_t> buf(compress_codec_int8.payload_bytes(n));
  std::mt19937 gen(6);
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  for (size_t t = 0; t < steps; t++) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; i++) g[i] = i % 256 == 0 ? u(gen) : 1e-3f * u(gen);
    for (size_t i = 0; i < n; i++) v[i] = g[i] + e[i];
    compress_codec_int8.encode(v.data(), n, 1.0f, buf.data());
    compress_codec_int8.decode(buf.data(), n, sent.data());
    for (size_t i = 0; i < n; i++) e[i] = v[i] - sent[i];
    compress_codec_int8.encode(g.data(), n, 1.0f, buf.data());  // without feedback
    std::vector<float> plain(n);
    compress_codec_int8.decode(buf.data(), n, plain.data());
    for (size_t i = 0; i < n; i++)
      sum_g[i] += g[i], sum_sent[i] += sent[i], sum_plain[i] += plain[i];
  }
  // |e_T| <= s (1/2 + 2^-14) with s <= max|v| / 127 and max|v| <= 1 + max|e| < 1.01; each
  // step's fp32 rounding of v and e adds at most 2 ulp(1.01) = 2^-22, over 400 steps < 1e-4.
  double bound = 1.01 / 127 * (0.5 + std::ldexp(1.0, -14)) + 400 * std::ldexp(1.0, -22);
  double worst = 0, worst_plain = 0;
  for (size_t i = 0; i < n; i++) {
    worst = std::max(worst, std::fabs(sum_sent[i] - sum_g[i]));
    worst_plain = std::max(worst_plain, std::fabs(sum_plain[i] - sum_g[i]));
  }
  EXPECT_LE(worst, bound);
  EXPECT_GT(worst_plain, 0.2);  // 400 steps x 1e-3 x 0.5..1 lost: the test can tell
}

TEST(CompressWire, WireBytesAreTheMessagesSent) {
  tuttiCompressorConfig_t c;
  size_t bytes = 0;
  ASSERT_EQ(tuttiCompressorParse("bf16", &c), ncclSuccess);
  ASSERT_EQ(tuttiCompressedWireBytes(&c, 1000, 2, &bytes), ncclSuccess);
  EXPECT_EQ(bytes, 2u * (24 + 2 * 500));  // 2 slots of header + 500 bf16
  ASSERT_EQ(tuttiCompressorParse("int8", &c), ncclSuccess);
  ASSERT_EQ(tuttiCompressedWireBytes(&c, 1000, 4, &bytes), ncclSuccess);
  EXPECT_EQ(bytes, 6u * 280);  // 24 + 4 (one scale) + 250, rounded up to 8
  ASSERT_EQ(tuttiCompressorParse("topk:0.01", &c), ncclSuccess);
  ASSERT_EQ(tuttiCompressedWireBytes(&c, 1000, 3, &bytes), ncclSuccess);
  EXPECT_EQ(bytes, 2u * (24 + 8 * 10));  // all-gather: R-1 messages of 10 pairs
  ASSERT_EQ(tuttiCompressorParse("powersgd:2", &c), ncclSuccess);
  ASSERT_EQ(tuttiCompressedWireBytes(&c, 1000, 2, &bytes), ncclSuccess);
  // 32 x 32 matrix: P and Q of 64 floats each, a ring all-reduce of each: 2 x 32 floats
  EXPECT_EQ(bytes, 2u * (2 * 1 * 32 * 4));
  ASSERT_EQ(tuttiCompressorParse("none", &c), ncclSuccess);
  ASSERT_EQ(tuttiCompressedWireBytes(&c, 1000, 2, &bytes), ncclSuccess);
  EXPECT_EQ(bytes, 4000u);
  ASSERT_EQ(tuttiCompressedWireBytes(&c, 1000, 1, &bytes), ncclSuccess);
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(tuttiCompressedWireBytes(&c, 1000, 0, &bytes), ncclInvalidArgument);
}

TEST(CompressWire, ParserAcceptsTheTrainerSpecsAndNamesBadOnes) {
  tuttiCompressorConfig_t c;
  ASSERT_EQ(tuttiCompressorParse("topk:0.05", &c), ncclSuccess);
  EXPECT_EQ(c.kind, tuttiCompressTopk);
  EXPECT_FLOAT_EQ(c.topkFraction, 0.05f);
  ASSERT_EQ(tuttiCompressorParse("powersgd:4,hier", &c), ncclSuccess);
  EXPECT_EQ(c.kind, tuttiCompressPowerSgd);
  EXPECT_EQ(c.powerSgdRank, 4);
  EXPECT_EQ(c.hierarchical, 1);
  EXPECT_EQ(tuttiCompressorParse("zip", &c), ncclInvalidArgument);
  EXPECT_NE(strstr(ncclGetLastError(nullptr), "unknown compressor 'zip'"), nullptr);
  EXPECT_EQ(tuttiCompressorParse("topk:2", &c), ncclInvalidArgument);
  EXPECT_NE(strstr(ncclGetLastError(nullptr), "topk fraction"), nullptr);
  EXPECT_EQ(tuttiCompressorParse("bf16:3", &c), ncclInvalidArgument);
  EXPECT_EQ(tuttiCompressorParse("powersgd:0", &c), ncclInvalidArgument);
  EXPECT_EQ(tuttiCompressorParse(nullptr, &c), ncclInvalidArgument);
}

}  // namespace
