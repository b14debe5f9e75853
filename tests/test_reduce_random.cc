// Reduction kernels on random inputs (random floats with +-inf and NaN, every fp16 / bf16 code,
// random integer bit patterns), on every ISA the CPU runs, against an independent reference:
// the order of operations reduce.h documents, post(pre(a) OP b), computed here in double and
// rounded where the kernels' compute type rounds (fp32 for fp32, fp16, bf16 and fp8; fp64 for
// fp64), then rounded once to the output type by this file's own codec (reduce_codec.h).
//
// Why double gives the compute type's rounding exactly: a product of two fp32 values is exact
// in double, and for +, *, / of fp32 operands, rounding the double result to fp32 gives the
// correctly rounded fp32 result, because double's 53 bits are at least 2 * 24 + 2 (Figueroa,
// "When is double rounding innocuous?", 1995). So every element must match bit for bit, except
// that a NaN result only has to be a NaN (its payload is not specified).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "reduce.h"
#include "reduce_codec.h"

namespace {

using reduce_codec::decode;
using reduce_codec::kTypes;
using reduce_codec::TypeInfo;

const char *const kIsas[] = {"scalar", "avx2", "avx512"};

// One element of a float type: the expected bits, or all ones in `nan` when only NaN-ness counts.
uint64_t ref_float(const TypeInfo &ti, const reduce_op_t &op, int flags, const void *a,
                   const void *b, bool *nan) {
  const bool f64 = ti.type == ncclFloat64;
  auto round = [f64](double v) { return f64 ? v : (double)(float)v; };  // the compute type
  double x = decode(ti.type, a);
  if (op.premul && (flags & REDUCE_PRE)) x = round(x * decode(ti.type, op.scalar));
  if (b) x = round(reduce_codec::apply_op(op.base, x, decode(ti.type, b)));
  if (op.postdiv && (flags & REDUCE_POST)) x = round(x / op.divisor);
  *nan = std::isnan(x);
  uint64_t bits = 0;
  if (f64) {
    memcpy(&bits, &x, 8);
  } else if (ti.type == ncclFloat32) {
    float f = (float)x;
    memcpy(&bits, &f, 4);
  } else {
    bits = reduce_codec::round_to_code(ti.type, x);
  }
  return bits;
}

// One element of an integer type: computed in 64 bits, wrapped to the type's width after every
// operation (reduce.h: sums and products wrap), division truncating toward zero.
uint64_t ref_int(const TypeInfo &ti, const reduce_op_t &op, int flags, const void *a,
                 const void *b) {
  const int bits = 8 * (int)ti.size;
  auto wrap = [&](uint64_t v) {
    if (bits == 64) return v;
    uint64_t low = v & ((1ull << bits) - 1);
    if (ti.is_signed && (low >> (bits - 1))) low |= ~((1ull << bits) - 1);
    return low;
  };
  auto load = [&](const void *p) {
    uint64_t v = 0;
    memcpy(&v, p, ti.size);
    return wrap(v);
  };
  uint64_t x = load(a);
  if (op.premul && (flags & REDUCE_PRE)) x = wrap(x * load(op.scalar));
  if (b) {
    uint64_t y = load(b);
    bool gt = ti.is_signed ? (int64_t)x > (int64_t)y : x > y;
    bool lt = ti.is_signed ? (int64_t)x < (int64_t)y : x < y;
    switch (op.base) {
      case ncclSum:
        x = wrap(x + y);
        break;
      case ncclProd:
        x = wrap(x * y);
        break;
      case ncclMax:
        x = gt ? x : y;
        break;
      default:
        x = lt ? x : y;
    }
  }
  if (op.postdiv && (flags & REDUCE_POST))
    x = ti.is_signed ? (uint64_t)((int64_t)x / op.divisor) : x / (uint64_t)op.divisor;
  return bits == 64 ? x : x & ((1ull << bits) - 1);
}

// Every op x flag combination x combine/copy on (a, b), with premul `scale` (one element's code)
// and postdiv `divisor`, against the reference; returns the number of mismatching calls.
int expect_reference(const char *isa, const TypeInfo &ti, const std::vector<uint8_t> &a,
                     const std::vector<uint8_t> &b, size_t n, const void *scale, int divisor,
                     const std::vector<ncclRedOp_t> &ops = {ncclSum, ncclProd, ncclMax, ncclMin}) {
  int bad_calls = 0;
  const size_t es = ti.size;
  for (ncclRedOp_t base : ops)
    for (int flags = 0; flags < 4; flags++)
      for (bool copy : {false, true}) {
        reduce_op_t op;
        memset(&op, 0, sizeof op);
        op.type = ti.type, op.base = base, op.premul = op.postdiv = 1, op.divisor = divisor;
        memcpy(op.scalar, scale, es);
        std::vector<uint8_t> out(n * es, 0xcd);
        if (copy)
          reduce_copy(&op, out.data(), a.data(), n, flags);
        else
          reduce_combine(&op, out.data(), a.data(), b.data(), n, flags);
        for (size_t i = 0; i < n; i++) {
          const uint8_t *pa = &a[i * es], *pb = copy ? nullptr : &b[i * es], *pg = &out[i * es];
          bool nan = false;
          uint64_t want =
              ti.is_float ? ref_float(ti, op, flags, pa, pb, &nan) : ref_int(ti, op, flags, pa, pb);
          uint64_t got = 0;
          memcpy(&got, pg, es);
          if (nan ? std::isnan(decode(ti.type, pg)) : got == want) continue;
          ADD_FAILURE() << isa << " " << ti.name << " op=" << base << " flags=" << flags
                        << " copy=" << copy << " n=" << n << " [" << i
                        << "]: a=" << decode(ti.type, pa) << " b=" << (pb ? decode(ti.type, pb) : 0)
                        << " scale=" << decode(ti.type, scale) << " got " << decode(ti.type, pg)
                        << " (0x" << std::hex << got << ") want "
                        << (nan ? std::string("NaN") : "0x") << want << std::dec;
          bad_calls++;
          break;
        }
      }
  return bad_calls;
}

std::vector<uint8_t> random_bytes(std::mt19937_64 &rng, size_t nbytes) {
  std::vector<uint8_t> v(nbytes);
  for (auto &x : v) x = (uint8_t)rng();
  return v;
}

// Random values of the type: magnitudes up to 70000 (beyond fp16's range and fp8's), a quarter of
// them scaled by 1e-9 (fp16 / fp8 subnormals and underflow), and with `specials` one in 50 +-inf
// and one in 50 NaN. Each is rounded to the type by the test's codec.
std::vector<uint8_t> random_values(std::mt19937_64 &rng, const TypeInfo &ti, size_t n,
                                   bool specials) {
  std::uniform_real_distribution<double> dist(-70000.0, 70000.0);
  std::vector<uint8_t> out(n * ti.size);
  for (size_t i = 0; i < n; i++) {
    double v = (rng() % 4 == 0) ? dist(rng) * 1e-9 : dist(rng);
    if (specials && rng() % 50 == 0) v = (rng() % 2) ? INFINITY : -INFINITY;
    if (specials && rng() % 50 == 0) v = NAN;
    uint64_t bits = 0;
    if (ti.type == ncclFloat64) {
      memcpy(&bits, &v, 8);
    } else if (ti.type == ncclFloat32) {
      float f = (float)v;
      memcpy(&bits, &f, 4);
    } else {
      bits = reduce_codec::round_to_code(ti.type, v);
    }
    memcpy(&out[i * ti.size], &bits, ti.size);
  }
  return out;
}

class ReduceRandomTest : public ::testing::TestWithParam<const char *> {
 protected:
  void SetUp() override {
    saved_ = reduce_isa_name();
    if (reduce_force_isa(GetParam())) return;
    if (reduce_codec::cpu_runs_isa(GetParam()))
      FAIL() << "/proc/cpuinfo says this CPU runs " << GetParam() << ", the library refuses it";
    GTEST_SKIP() << GetParam() << " not supported by this CPU";
  }
  void TearDown() override { reduce_force_isa(saved_.c_str()); }
  std::string saved_;
};

// Scales that are not exact in any float type (0.3, -1.7) round PreMulSum's product.
TEST_P(ReduceRandomTest, RandomFloatsWithInfAndNanMatchReference) {
  std::mt19937_64 rng(12345);
  for (size_t n : {1, 15, 31, 33, 64, 100, 1000, 4099})
    for (const TypeInfo &ti : kTypes) {
      if (!ti.is_float) continue;
      auto a = random_values(rng, ti, n, true), b = random_values(rng, ti, n, n % 2 == 1);
      for (double s : {0.3, -1.7}) {
        uint64_t bits = 0;
        if (ti.type == ncclFloat64) {
          memcpy(&bits, &s, 8);
        } else if (ti.type == ncclFloat32) {
          float f = (float)s;
          memcpy(&bits, &f, 4);
        } else {
          bits = reduce_codec::round_to_code(ti.type, s);
        }
        ASSERT_EQ(expect_reference(GetParam(), ti, a, b, n, &bits, 3), 0);
      }
    }
}

TEST_P(ReduceRandomTest, RandomIntegersMatchReference) {
  std::mt19937_64 rng(777);
  for (size_t n : {1, 31, 65, 1000, 4099})
    for (const TypeInfo &ti : kTypes) {
      if (ti.is_float) continue;
      auto a = random_bytes(rng, n * ti.size), b = random_bytes(rng, n * ti.size);
      uint64_t scale = rng();
      ASSERT_EQ(expect_reference(GetParam(), ti, a, b, n, &scale, 5), 0);
      ASSERT_EQ(expect_reference(GetParam(), ti, a, b, n, &scale, 3), 0);
    }
}

// All 65536 fp16 and bf16 codes as `a` (NaN included) against random codes as `b`, then every
// code as `b` against random codes as `a`.
TEST_P(ReduceRandomTest, EveryHalfCodeMatchesReference) {
  std::mt19937_64 rng(99);
  for (ncclDataType_t t : {ncclFloat16, ncclBfloat16}) {
    const TypeInfo &ti = kTypes[t];
    const size_t n = 65536;
    std::vector<uint8_t> every(n * 2);
    for (size_t i = 0; i < n; i++) {
      uint16_t x = (uint16_t)i;
      memcpy(&every[i * 2], &x, 2);
    }
    auto other = random_bytes(rng, n * 2);
    uint32_t scale = reduce_codec::round_to_code(t, -1.7);
    ASSERT_EQ(expect_reference(GetParam(), ti, every, other, n, &scale, 7), 0);
    ASSERT_EQ(expect_reference(GetParam(), ti, other, every, n, &scale, 7), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, ReduceRandomTest, ::testing::ValuesIn(kIsas),
                         [](const ::testing::TestParamInfo<const char *> &info) {
                           return std::string(info.param);
                         });

}  // namespace
