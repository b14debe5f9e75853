// Reduction kernels (src/reduce.c, src/reduce_simd.c): every ISA the CPU runs x every datatype
// x op x premul/postdiv flags x size, against closed-form answers computed here.
//
// Inputs are small integers (and, after Avg by 4, quarters) so every expected value is exact in
// every type, fp8 e5m2 included; the expected value is computed in double (or int64) with the
// documented order of operations, post(pre(a) OP b), and encoded with this file's own codecs.
// The ISA tests are parameterized and skip the ISAs the CPU lacks (per /proc/cpuinfo; an ISA
// the CPU has but the library refuses is a failure).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "reduce.h"
#include "reduce_codec.h"

namespace {

const char *const kIsas[] = {"scalar", "avx2", "avx512"};
const size_t kCounts[] = {0, 1, 7, 15, 16, 17, 63, 64, 65, 1000, 4099};
const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin};
const std::string g_initial_isa = reduce_isa_name();  // before any test forces one

// ---- codecs (reduce_codec.h) ----

using reduce_codec::decode;
using reduce_codec::kTypes;
using reduce_codec::TypeInfo;

// Code of an exactly representable value, found by decoding every code once.
uint32_t encode_exact_minifloat(ncclDataType_t t, double v) {
  static std::map<int, std::map<double, uint32_t>> tables;
  std::map<double, uint32_t> &table = tables[t];
  size_t size = t == ncclFloat16 || t == ncclBfloat16 ? 2 : 1;
  if (table.empty()) {
    for (uint32_t c = (1u << (8 * size)) - 1;; c--) {  // descending: +0 overwrites -0
      double d = decode(t, &c);
      if (!std::isnan(d)) table[d] = c;
      if (c == 0) break;
    }
  }
  if (v == 0 && std::signbit(v)) return size == 2 ? 0x8000 : 0x80;
  auto it = table.find(v);
  EXPECT_NE(it, table.end()) << "value " << v << " not exact in type " << t;
  return it == table.end() ? 0 : it->second;
}

void encode(ncclDataType_t t, double v, void *p) {
  switch (t) {
    case ncclInt8:
      *(int8_t *)p = (int8_t)v;
      break;
    case ncclUint8:
      *(uint8_t *)p = (uint8_t)v;
      break;
    case ncclInt32:
      *(int32_t *)p = (int32_t)v;
      break;
    case ncclUint32:
      *(uint32_t *)p = (uint32_t)v;
      break;
    case ncclInt64:
      *(int64_t *)p = (int64_t)v;
      break;
    case ncclUint64:
      *(uint64_t *)p = (uint64_t)v;
      break;
    case ncclFloat32:
      *(float *)p = (float)v;
      break;
    case ncclFloat64:
      *(double *)p = v;
      break;
    case ncclFloat16:
    case ncclBfloat16: {
      uint16_t c = (uint16_t)encode_exact_minifloat(t, v);
      memcpy(p, &c, 2);
      break;
    }
    default: {
      uint8_t c = (uint8_t)encode_exact_minifloat(t, v);
      memcpy(p, &c, 1);
    }
  }
}

// ---- closed-form inputs and expected values ----

// Small values per op so pre(a) OP b, divided by 4, is exact even in fp8 e5m2.
void make_inputs(const TypeInfo &ti, ncclRedOp_t op, size_t i, double *a, double *b) {
  int sub = ti.is_signed ? 1 : 0;
  switch (op) {
    case ncclSum:
      *a = (double)(i % 3) - sub;  // {-1, 0, 1}
      *b = (double)((i * 7 + 1) % 3);
      break;
    case ncclProd: {
      const double vals[] = {1, 2, ti.is_signed ? -1.0 : 1.0};
      *a = vals[i % 3];
      *b = vals[(i * 5 + 1) % 3];
      break;
    }
    default:  // max, min: [-3, 3] or [0, 6]
      *a = (double)((i * 5) % 7) - 3 * sub;
      *b = (double)((i * 3 + 2) % 7) - 3 * sub;
  }
}

struct Flags {
  bool premul, postdiv;  // in reduce_op_t
  int flags;             // REDUCE_PRE | REDUCE_POST given to the call
};

reduce_op_t make_op(const TypeInfo &ti, ncclRedOp_t base, const Flags &f, double *scale,
                    int *divisor) {
  reduce_op_t op;
  memset(&op, 0, sizeof op);
  op.type = ti.type;
  op.base = base;
  op.premul = f.premul;
  op.postdiv = f.postdiv;
  *scale = ti.is_signed ? -2 : 3;
  *divisor = ti.is_float ? 4 : 3;  // ints: 3 exercises truncation toward zero
  op.divisor = *divisor;
  uint64_t scalar = 0;  // op.scalar is not aligned for 8-byte stores
  encode(ti.type, *scale, &scalar);
  memcpy(op.scalar, &scalar, sizeof op.scalar);
  return op;
}

// post(pre(a) OP b) with b optional, as reduce.h specifies.
double model(const TypeInfo &ti, ncclRedOp_t op, const Flags &f, double scale, int divisor,
             double a, const double *b) {
  double v = a;
  if (f.premul && (f.flags & REDUCE_PRE)) v = v * scale;
  if (b) v = reduce_codec::apply_op(op, v, *b);
  if (f.postdiv && (f.flags & REDUCE_POST)) v = ti.is_float ? v / divisor : std::trunc(v / divisor);
  return v;
}

std::vector<Flags> all_flags() {
  std::vector<Flags> out;
  for (int pm = 0; pm < 2; pm++)
    for (int pd = 0; pd < 2; pd++)
      for (int fl = 0; fl < 4; fl++) out.push_back({pm != 0, pd != 0, fl});
  return out;
}

// Index of the first differing element, or -1.
long first_diff(const std::vector<uint8_t> &x, const std::vector<uint8_t> &y, size_t esize) {
  for (size_t i = 0; i < x.size(); i++) {
    if (x[i] != y[i]) return (long)(i / esize);
  }
  return -1;
}

enum Alias { kOutOfPlace, kDstIsA, kDstIsB };

// Runs one combine (or copy when `copy`) and compares it with the model; returns success.
bool check_one(const TypeInfo &ti, ncclRedOp_t base, const Flags &f, size_t n, Alias alias,
               bool copy) {
  double scale;
  int divisor;
  reduce_op_t op = make_op(ti, base, f, &scale, &divisor);
  size_t es = ti.size;
  std::vector<uint8_t> a(n * es), b(n * es), want(n * es), dst(n * es, 0xcd);
  for (size_t i = 0; i < n; i++) {
    double va, vb;
    make_inputs(ti, base, i, &va, &vb);
    encode(ti.type, va, &a[i * es]);
    encode(ti.type, vb, &b[i * es]);
    encode(ti.type, model(ti, base, f, scale, divisor, va, copy ? nullptr : &vb), &want[i * es]);
  }
  uint8_t *out = alias == kDstIsA ? a.data() : alias == kDstIsB ? b.data() : dst.data();
  if (copy) {
    reduce_copy(&op, out, a.data(), n, f.flags);
  } else {
    reduce_combine(&op, out, a.data(), b.data(), n, f.flags);
  }
  std::vector<uint8_t> got(out, out + n * es);
  long bad = first_diff(got, want, es);
  if (bad < 0) return true;
  ADD_FAILURE() << ti.name << " op=" << base << " premul=" << f.premul << " postdiv=" << f.postdiv
                << " flags=" << f.flags << " n=" << n << " alias=" << alias << " copy=" << copy
                << ": element " << bad << " got " << decode(ti.type, &got[bad * es]) << " want "
                << decode(ti.type, &want[bad * es]);
  return false;
}

class ReduceIsaTest : public ::testing::TestWithParam<const char *> {
 protected:
  void SetUp() override {
    saved_ = reduce_isa_name();
    if (reduce_force_isa(GetParam())) return;
    if (reduce_codec::cpu_runs_isa(GetParam()))  // a skip would leave the ISA untested here
      FAIL() << "/proc/cpuinfo says this CPU runs " << GetParam() << ", the library refuses it";
    GTEST_SKIP() << GetParam() << " not supported by this CPU";
  }
  void TearDown() override { reduce_force_isa(saved_.c_str()); }
  std::string saved_;
};

TEST_P(ReduceIsaTest, CombineEveryTypeOpFlagSize) {
  EXPECT_STREQ(reduce_isa_name(), GetParam());
  int failures = 0;
  for (const TypeInfo &ti : kTypes)
    for (ncclRedOp_t base : kOps)
      for (const Flags &f : all_flags())
        for (size_t n : kCounts)
          for (Alias alias : {kOutOfPlace, kDstIsA, kDstIsB}) {
            if (!check_one(ti, base, f, n, alias, false) && ++failures > 20) FAIL();
          }
}

TEST_P(ReduceIsaTest, CopyEveryTypeOpFlagSize) {
  int failures = 0;
  for (const TypeInfo &ti : kTypes)
    for (ncclRedOp_t base : kOps)
      for (const Flags &f : all_flags())
        for (size_t n : kCounts)
          for (Alias alias : {kOutOfPlace, kDstIsA}) {
            if (!check_one(ti, base, f, n, alias, true) && ++failures > 20) FAIL();
          }
}

template <typename T>
std::vector<T> combine_vec(ncclDataType_t type, ncclRedOp_t base, std::vector<T> a,
                           std::vector<T> b, int postdiv = 0) {
  reduce_op_t op;
  memset(&op, 0, sizeof op);
  op.type = type;
  op.base = base;
  op.postdiv = postdiv;
  op.divisor = postdiv;
  std::vector<T> out(a.size());
  reduce_combine(&op, out.data(), a.data(), b.data(), a.size(), REDUCE_PRE | REDUCE_POST);
  return out;
}

// Wraparound, signedness of max/min and truncating division, at vector-and-tail sizes.
TEST_P(ReduceIsaTest, IntegerEdgeCases) {
  for (size_t n : {1, 33, 130}) {
    auto i8 = combine_vec<int8_t>(ncclInt8, ncclSum, std::vector<int8_t>(n, 127),
                                  std::vector<int8_t>(n, 1));
    EXPECT_EQ(i8, std::vector<int8_t>(n, -128));
    auto u8 = combine_vec<uint8_t>(ncclUint8, ncclSum, std::vector<uint8_t>(n, 200),
                                   std::vector<uint8_t>(n, 100));
    EXPECT_EQ(u8, std::vector<uint8_t>(n, 44));
    auto u8max = combine_vec<uint8_t>(ncclUint8, ncclMax, std::vector<uint8_t>(n, 200),
                                      std::vector<uint8_t>(n, 100));
    EXPECT_EQ(u8max, std::vector<uint8_t>(n, 200));
    auto i8min = combine_vec<int8_t>(ncclInt8, ncclMin, std::vector<int8_t>(n, -100),
                                     std::vector<int8_t>(n, 100));
    EXPECT_EQ(i8min, std::vector<int8_t>(n, -100));
    auto i32 = combine_vec<int32_t>(ncclInt32, ncclSum, std::vector<int32_t>(n, INT32_MAX),
                                    std::vector<int32_t>(n, 1));
    EXPECT_EQ(i32, std::vector<int32_t>(n, INT32_MIN));
    auto i32p = combine_vec<int32_t>(ncclInt32, ncclProd, std::vector<int32_t>(n, 65536),
                                     std::vector<int32_t>(n, 65537));
    EXPECT_EQ(i32p, std::vector<int32_t>(n, 65536));
    auto u32max = combine_vec<uint32_t>(ncclUint32, ncclMax, std::vector<uint32_t>(n, 0xffffffffu),
                                        std::vector<uint32_t>(n, 1));
    EXPECT_EQ(u32max, std::vector<uint32_t>(n, 0xffffffffu));
    auto i32min = combine_vec<int32_t>(ncclInt32, ncclMin, std::vector<int32_t>(n, -1),
                                       std::vector<int32_t>(n, 1));
    EXPECT_EQ(i32min, std::vector<int32_t>(n, -1));
    auto u64 = combine_vec<uint64_t>(ncclUint64, ncclSum, std::vector<uint64_t>(n, UINT64_MAX),
                                     std::vector<uint64_t>(n, 2));
    EXPECT_EQ(u64, std::vector<uint64_t>(n, 1));
    auto u64max = combine_vec<uint64_t>(ncclUint64, ncclMax, std::vector<uint64_t>(n, UINT64_MAX),
                                        std::vector<uint64_t>(n, 1));
    EXPECT_EQ(u64max, std::vector<uint64_t>(n, UINT64_MAX));
    auto i64min = combine_vec<int64_t>(ncclInt64, ncclMin, std::vector<int64_t>(n, INT64_MIN),
                                       std::vector<int64_t>(n, 1));
    EXPECT_EQ(i64min, std::vector<int64_t>(n, INT64_MIN));
    auto i64p = combine_vec<int64_t>(ncclInt64, ncclProd, std::vector<int64_t>(n, INT64_MAX),
                                     std::vector<int64_t>(n, 2));
    EXPECT_EQ(i64p, std::vector<int64_t>(n, -2));
    auto i32avg = combine_vec<int32_t>(ncclInt32, ncclSum, std::vector<int32_t>(n, -8),
                                       std::vector<int32_t>(n, 1), 2);
    EXPECT_EQ(i32avg, std::vector<int32_t>(n, -3));  // -7 / 2 truncates toward zero
    auto u64avg = combine_vec<uint64_t>(ncclUint64, ncclSum, std::vector<uint64_t>(n, UINT64_MAX),
                                        std::vector<uint64_t>(n, 0), 2);
    EXPECT_EQ(u64avg, std::vector<uint64_t>(n, UINT64_MAX / 2));  // unsigned division
  }
}

// Two different NaN codes of each float type (quiet, with a payload, and negative).
std::vector<uint64_t> nan_codes(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32:
      return {0x7fc00000u, 0xffc12345u};
    case ncclFloat64:
      return {0x7ff8000000000000ull, 0xfff8000000012345ull};
    case ncclFloat16:
      return {0x7e00, 0xfe55};
    case ncclBfloat16:
      return {0x7fc0, 0xffd5};
    case ncclFloat8e4m3:
      return {0x7f, 0xff};
    default:  // e5m2
      return {0x7e, 0xfd};
  }
}

// Float max and min do not depend on the operands' order (reduce_ops.h): every pair of special
// values (+-0, +-1, 2, +-inf where the type has it, two NaNs, the smallest subnormal) both
// ways round, at a size with vector bodies and a tail. Each result is the model's (a NaN only
// where both operands are NaNs), and (a, b) and (b, a) give the same code.
TEST_P(ReduceIsaTest, FloatMaxMinIgnoreOperandOrder) {
  for (const TypeInfo &ti : kTypes) {
    if (!ti.is_float) continue;
    const size_t es = ti.size;
    std::vector<uint64_t> codes;
    std::vector<double> vals = {0.0, -0.0, 1.0, -1.0, 2.0};
    if (ti.type != ncclFloat8e4m3) vals.insert(vals.end(), {INFINITY, -INFINITY});
    for (double v : vals) {
      uint64_t c = 0;
      encode(ti.type, v, &c);
      codes.push_back(c);
    }
    for (uint64_t c : nan_codes(ti.type)) codes.push_back(c);
    codes.push_back(1);  // the smallest positive subnormal
    std::vector<uint8_t> a, b;
    for (size_t r = 0; r < 3; r++)  // repeated: every pair in vector lanes and in a tail
      for (uint64_t x : codes)
        for (uint64_t y : codes) {
          a.insert(a.end(), (const uint8_t *)&x, (const uint8_t *)&x + es);
          b.insert(b.end(), (const uint8_t *)&y, (const uint8_t *)&y + es);
        }
    const size_t n = a.size() / es - 5;
    for (ncclRedOp_t base : {ncclMax, ncclMin}) {
      reduce_op_t op;
      memset(&op, 0, sizeof op);
      op.type = ti.type;
      op.base = base;
      std::vector<uint8_t> ab(n * es), ba(n * es);
      reduce_combine(&op, ab.data(), a.data(), b.data(), n, REDUCE_PRE | REDUCE_POST);
      reduce_combine(&op, ba.data(), b.data(), a.data(), n, REDUCE_PRE | REDUCE_POST);
      for (size_t i = 0; i < n; i++) {
        double x = decode(ti.type, &a[i * es]), y = decode(ti.type, &b[i * es]);
        double got = decode(ti.type, &ab[i * es]),
               want = reduce_codec::max_min(base == ncclMax, x, y);
        ASSERT_EQ(memcmp(&ab[i * es], &ba[i * es], es), 0)
            << ti.name << (base == ncclMax ? " max(" : " min(") << x << ", " << y << "): " << got
            << " one way round, " << decode(ti.type, &ba[i * es]) << " the other";
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << ti.name << " of two NaNs: " << got;
        } else {
          EXPECT_TRUE(got == want && std::signbit(got) == std::signbit(want))
              << ti.name << (base == ncclMax ? " max(" : " min(") << x << ", " << y << ") = " << got
              << ", want " << want;
        }
      }
    }
  }
}

uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

// Random inputs (floats with inf and NaN, every half code, integer bit patterns) against an
// independent reference: test_reduce_random.cc.

INSTANTIATE_TEST_SUITE_P(Isa, ReduceIsaTest, ::testing::ValuesIn(kIsas),
                         [](const ::testing::TestParamInfo<const char *> &info) {
                           return std::string(info.param);
                         });

// ---- dispatch ----

int isa_rank(const std::string &name) {
  for (int i = 0; i < 3; i++) {
    if (name == kIsas[i]) return i;
  }
  return -1;
}

TEST(ReduceDispatch, NamesAndForcing) {
  std::string saved = reduce_isa_name();
  EXPECT_GE(isa_rank(saved), 0);
  EXPECT_EQ(reduce_force_isa("bogus"), 0);
  EXPECT_EQ(reduce_force_isa(nullptr), 0);
  EXPECT_EQ(reduce_isa_name(), saved);
  ASSERT_EQ(reduce_force_isa("scalar"), 1);
  EXPECT_STREQ(reduce_isa_name(), "scalar");
  reduce_force_isa(saved.c_str());
  EXPECT_EQ(reduce_isa_name(), saved);
}

// Run the binary with TUTTI_REDUCE_ISA=scalar (or avx2) to check the cap: the ISA picked at
// load time is the cap, or the best the CPU runs when that is lower.
TEST(ReduceDispatch, EnvCapsInitialIsa) {
  const char *cap = getenv("TUTTI_REDUCE_ISA");
  if (!cap || isa_rank(cap) < 0) {
    // The cap is read once per process: run this test again in a child with the cap set.
    char self[4096] = {0};
    ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
    for (const char *isa : {"scalar", "avx2"}) {
      std::string cmd = std::string("TUTTI_REDUCE_ISA=") + isa + " " + self +
                        " --gtest_filter=ReduceDispatch.EnvCapsInitialIsa >/dev/null";
      EXPECT_EQ(system(cmd.c_str()), 0) << "with TUTTI_REDUCE_ISA=" << isa;
    }
    return;
  }
  std::string saved = reduce_isa_name();
  int best = 0;
  for (int i = 0; i < 3; i++) {
    if (reduce_force_isa(kIsas[i])) best = i;
  }
  reduce_force_isa(saved.c_str());
  EXPECT_EQ(isa_rank(g_initial_isa), std::min(best, isa_rank(cap)));
}

TEST(ReduceDispatch, PlainCopyIsMemcpyAndInvalidIsNoop) {
  reduce_op_t op;
  memset(&op, 0, sizeof op);
  op.type = ncclFloat32;
  op.base = ncclSum;
  op.premul = 1;  // not applied: REDUCE_PRE not given
  op.divisor = 0;
  std::vector<uint32_t> src = {0x7fc00001u, 0xffffffffu, 0x80000000u, 0x3f800000u};
  std::vector<uint32_t> dst(4, 0);
  reduce_copy(&op, dst.data(), src.data(), 4, REDUCE_POST);
  EXPECT_EQ(dst, src);
  reduce_copy(&op, src.data(), src.data(), 4, 0);  // in place
  EXPECT_EQ(dst, src);
  op.base = ncclAvg;  // not a base op: nothing is written
  std::vector<uint32_t> untouched(4, 7);
  reduce_combine(&op, untouched.data(), src.data(), src.data(), 4, 0);
  EXPECT_EQ(untouched, std::vector<uint32_t>(4, 7));
}

// ---- conversions ----

TEST(ReduceConvert, Bf16RoundsToNearestEven) {
  EXPECT_EQ(tutti_float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(tutti_float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(tutti_float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -9)), 0x3f81);  // above tie
  EXPECT_EQ(tutti_float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even, up
  EXPECT_EQ(tutti_float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(tutti_float_to_bf16(3.4e38f), 0x7f80);  // rounds past the largest finite
  EXPECT_EQ(tutti_float_to_bf16(INFINITY), 0x7f80);
  uint16_t nan = tutti_float_to_bf16(NAN);
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x7f, 0);
  float low_payload_nan;
  uint32_t bits = 0x7f800001u;  // payload only in bits truncated away: must stay NaN
  memcpy(&low_payload_nan, &bits, 4);
  EXPECT_TRUE(std::isnan(tutti_bf16_to_float(tutti_float_to_bf16(low_payload_nan))));
  for (uint32_t c = 0; c < 65536; c++) {
    float f = tutti_bf16_to_float((uint16_t)c);
    EXPECT_EQ(f32_bits(f), c << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(tutti_float_to_bf16(f), c);
    }
  }
}

TEST(ReduceConvert, HalfRoundTripAndRounding) {
  for (uint32_t c = 0; c < 65536; c++) {
    double want = decode(ncclFloat16, &c);
    float f = tutti_half_to_float((uint16_t)c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_TRUE(std::isnan(tutti_half_to_float(tutti_float_to_half(f)))) << c;
    } else {
      EXPECT_EQ((double)f, want) << c;
      EXPECT_EQ(std::signbit(f), std::signbit(want)) << c;
      EXPECT_EQ(tutti_float_to_half(f), c) << c;
    }
  }
  EXPECT_EQ(tutti_float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(tutti_float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even, up
  EXPECT_EQ(tutti_float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(tutti_float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(tutti_float_to_half(65520.0f), 0x7c00);  // overflow -> inf
  EXPECT_EQ(tutti_float_to_half(-1e6f), 0xfc00);
  EXPECT_EQ(tutti_float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(tutti_float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(tutti_float_to_half(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp -> up
  EXPECT_EQ(tutti_float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(tutti_float_to_half(1e-30f), 0x0000);
  EXPECT_EQ(tutti_float_to_half(NAN) & 0x7e00, 0x7e00);
}

TEST(ReduceConvert, Fp8E4m3SaturatesAndRoundTrips) {
  EXPECT_EQ(tutti_float_to_fp8e4m3(1.0f), 0x38);
  EXPECT_EQ(tutti_float_to_fp8e4m3(448.0f), 0x7e);
  EXPECT_EQ(tutti_float_to_fp8e4m3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(tutti_float_to_fp8e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(tutti_float_to_fp8e4m3(INFINITY), 0x7e);  // no infinity in e4m3fn
  EXPECT_EQ(tutti_float_to_fp8e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(tutti_float_to_fp8e4m3(17.0f), 0x58);  // tie between 16 and 18 -> 16 (even)
  EXPECT_EQ(tutti_float_to_fp8e4m3(19.0f), 0x5a);  // tie between 18 and 20 -> 20 (even)
  EXPECT_EQ(tutti_float_to_fp8e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(tutti_float_to_fp8e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie -> even (zero)
  EXPECT_EQ(tutti_fp8e4m3_to_float(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(tutti_fp8e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(tutti_fp8e4m3_to_float(0xff)));
  for (uint32_t c = 0; c < 256; c++) {
    double want = decode(ncclFloat8e4m3, &c);
    if (std::isnan(want)) continue;
    EXPECT_EQ((double)tutti_fp8e4m3_to_float((uint8_t)c), want) << c;
    EXPECT_EQ(tutti_float_to_fp8e4m3(tutti_fp8e4m3_to_float((uint8_t)c)), c) << c;
  }
}

TEST(ReduceConvert, Fp8E5m2SaturatesAndRoundTrips) {
  EXPECT_EQ(tutti_float_to_fp8e5m2(1.0f), 0x3c);
  EXPECT_EQ(tutti_float_to_fp8e5m2(57344.0f), 0x7b);
  EXPECT_EQ(tutti_float_to_fp8e5m2(1e6f), 0x7b);  // finite overflow saturates
  EXPECT_EQ(tutti_float_to_fp8e5m2(-1e6f), 0xfb);
  EXPECT_EQ(tutti_float_to_fp8e5m2(INFINITY), 0x7c);  // infinity stays infinity
  EXPECT_TRUE(std::isnan(tutti_fp8e5m2_to_float(tutti_float_to_fp8e5m2(NAN))));
  EXPECT_EQ(tutti_float_to_fp8e5m2(9.0f), 0x48);  // tie between 8 and 10 -> 8 (even)
  EXPECT_EQ(tutti_float_to_fp8e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_TRUE(std::isinf(tutti_fp8e5m2_to_float(0xfc)));
  for (uint32_t c = 0; c < 256; c++) {
    double want = decode(ncclFloat8e5m2, &c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(tutti_fp8e5m2_to_float((uint8_t)c))) << c;
      continue;
    }
    EXPECT_EQ((double)tutti_fp8e5m2_to_float((uint8_t)c), want) << c;
    EXPECT_EQ(tutti_float_to_fp8e5m2(tutti_fp8e5m2_to_float((uint8_t)c)), c) << c;
  }
}

// fp8 arithmetic rounds once from fp32 and saturates: 300 + 300 in e4m3 is 448.
TEST(ReduceConvert, Fp8CombineSaturates) {
  reduce_op_t op;
  memset(&op, 0, sizeof op);
  op.type = ncclFloat8e4m3;
  op.base = ncclSum;
  uint8_t a = tutti_float_to_fp8e4m3(288.0f), b = a, out = 0;
  reduce_combine(&op, &out, &a, &b, 1, 0);
  EXPECT_EQ(out, 0x7e);
}

}  // namespace
