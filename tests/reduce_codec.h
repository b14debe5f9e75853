// The test's own view of the datatypes of test_reduce*.cc, written from the formats' definitions
// (not from src/reduce.c): type table, decoding of every code to double, rounding of a double to
// the nearest code, and which SIMD ISAs this CPU runs (from /proc/cpuinfo, not from the
// library's own detection).
#ifndef TUTTI_TESTS_REDUCE_CODEC_H_
#define TUTTI_TESTS_REDUCE_CODEC_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "tutti.h"

namespace reduce_codec {

struct TypeInfo {
  ncclDataType_t type;
  const char *name;
  size_t size;
  bool is_float;
  bool is_signed;
};

// Indexed by ncclDataType_t.
inline const TypeInfo kTypes[] = {
    {ncclInt8, "int8", 1, false, true},         {ncclUint8, "uint8", 1, false, false},
    {ncclInt32, "int32", 4, false, true},       {ncclUint32, "uint32", 4, false, false},
    {ncclInt64, "int64", 8, false, true},       {ncclUint64, "uint64", 8, false, false},
    {ncclFloat16, "float16", 2, true, true},    {ncclFloat32, "float32", 4, true, true},
    {ncclFloat64, "float64", 8, true, true},    {ncclBfloat16, "bfloat16", 2, true, true},
    {ncclFloat8e4m3, "fp8e4m3", 1, true, true}, {ncclFloat8e5m2, "fp8e5m2", 1, true, true},
};

// Value of an IEEE-like code with `ebits` exponent and `mbits` mantissa bits. e4m3 ("fn") has
// no infinity: only its all-ones code is NaN.
inline double decode_minifloat(uint32_t v, int ebits, int mbits, bool fn_style) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t emax = (1u << ebits) - 1;
  bool neg = (v >> (ebits + mbits)) & 1;
  uint32_t e = (v >> mbits) & emax, m = v & ((1u << mbits) - 1);
  double r;
  if (fn_style && e == emax && m == (1u << mbits) - 1) return NAN;
  if (!fn_style && e == emax) {
    r = m ? NAN : INFINITY;
  } else if (e == 0) {
    r = std::ldexp((double)m, 1 - bias - mbits);
  } else {
    r = std::ldexp(1.0 + std::ldexp((double)m, -mbits), (int)e - bias);
  }
  return neg ? -r : r;
}

inline double decode(ncclDataType_t t, const void *p) {
  uint64_t u = 0;
  memcpy(&u, p, kTypes[t].size);
  switch (t) {
    case ncclInt8:
      return (int8_t)u;
    case ncclUint8:
      return (uint8_t)u;
    case ncclInt32:
      return (int32_t)u;
    case ncclUint32:
      return (uint32_t)u;
    case ncclInt64:
      return (double)(int64_t)u;
    case ncclUint64:
      return (double)u;
    case ncclFloat32: {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    case ncclFloat64: {
      double d;
      memcpy(&d, p, 8);
      return d;
    }
    case ncclFloat16:
      return decode_minifloat((uint32_t)u, 5, 10, false);
    case ncclBfloat16:
      return decode_minifloat((uint32_t)u, 8, 7, false);
    case ncclFloat8e4m3:
      return decode_minifloat((uint32_t)u, 4, 3, true);
    case ncclFloat8e5m2:
      return decode_minifloat((uint32_t)u, 5, 2, false);
    default:
      return NAN;
  }
}

struct MiniFormat {
  int ebits, mbits;
  bool fn_style;   // e4m3fn: no infinity
  bool saturates;  // fp8: a finite overflow (and e4m3's infinity) becomes the largest finite
};

inline MiniFormat mini_format(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16:
      return {5, 10, false, false};
    case ncclBfloat16:
      return {8, 7, false, false};
    case ncclFloat8e4m3:
      return {4, 3, true, true};
    default:
      return {5, 2, false, true};
  }
}

// Code of every non-NaN value of a 1- or 2-byte float type (+0 wins over -0).
inline const std::map<double, uint32_t> &code_table(ncclDataType_t t) {
  static std::map<int, std::map<double, uint32_t>> tables;
  std::map<double, uint32_t> &table = tables[t];
  if (table.empty()) {
    for (uint32_t c = (1u << (8 * kTypes[t].size)) - 1;; c--) {  // descending: +0 overwrites -0
      double d = decode(t, &c);
      if (!std::isnan(d)) table[d] = c;
      if (c == 0) break;
    }
  }
  return table;
}

// Rounds v to the nearest value of the 1- or 2-byte float type t, ties to even, and returns its
// code: the value is a whole number of quanta, the quantum being the spacing of the binade v is
// in (or of the subnormals). Overflow gives infinity (fp16, bf16) or saturates (fp8).
inline uint32_t round_to_code(ncclDataType_t t, double v) {
  const MiniFormat f = mini_format(t);
  const uint32_t sign = 1u << (f.ebits + f.mbits);
  if (std::isnan(v)) return f.fn_style ? (sign - 1) : ((sign - 1) & ~((1u << (f.mbits - 1)) - 1));
  const auto &table = code_table(t);
  auto last = table.rbegin();
  if (std::isinf(last->first)) ++last;
  const double max_finite = last->first;
  const uint32_t neg = std::signbit(v) ? sign : 0;
  double a = std::fabs(v), r;
  if (std::isinf(a)) {
    r = f.fn_style ? max_finite : INFINITY;
  } else {
    const int bias = (1 << (f.ebits - 1)) - 1, emin = 1 - bias;
    int e2;
    std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1): the leading bit is 2^(e2 - 1)
    const int lead = a == 0 ? emin : std::max(e2 - 1, emin);
    const double quantum = std::ldexp(1.0, lead - f.mbits);
    r = std::nearbyint(a / quantum) * quantum;  // a / quantum is exact (a power of two)
    if (r > max_finite) r = f.saturates ? max_finite : INFINITY;
  }
  if (std::isinf(r)) return neg | (((1u << f.ebits) - 1) << f.mbits);
  if (r == 0) return neg;
  return neg | table.at(r);
}

// Whether this CPU runs the ISA the library calls `isa`, from the kernel's CPU flags.
inline bool cpu_runs_isa(const std::string &isa) {
  if (isa == "scalar") return true;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::map<std::string, bool> has;
    for (std::string w; words >> w;) has[w] = true;
    if (isa == "avx2") return has["avx2"] && has["f16c"];
    if (isa == "avx512") return has["avx512f"] && has["avx512bw"];
    return false;
  }
  return false;
}

// Max or min as reduce_ops.h defines them, in double: a NaN loses to a number, -0 < +0, and two
// NaNs give a NaN (callers compare NaN results by NaN-ness only).
inline double max_min(bool max, double x, double y) {
  if (std::isnan(x)) return y;
  if (std::isnan(y)) return x;
  if (x == y) return std::signbit(x) == max ? y : x;  // only zeros of two signs differ
  return (max ? x > y : x < y) ? x : y;
}

// x OP y in double for the ops that combine two values (sum, product, max, min).
inline double apply_op(ncclRedOp_t op, double x, double y) {
  switch (op) {
    case ncclSum:
      return x + y;
    case ncclProd:
      return x * y;
    default:
      return max_min(op == ncclMax, x, y);
  }
}

}  // namespace reduce_codec

#endif  // TUTTI_TESTS_REDUCE_CODEC_H_
