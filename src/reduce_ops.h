/* The element-wise arithmetic of every reduction, in one header compiled by the C compiler
 * (host kernels, src/reduce.c) and by nvcc (device kernels, src/cuda/reduce_kernels.cu), so the
 * host tests exercise the functions the GPU kernels run.
 *
 * One element of a reduction, for every datatype:
 *
 *   v = load(a[i])                  fp16/bf16/fp8 widened to fp32, integers to 64 bits
 *   if pre:  v = v * scale          (integers: wrapping multiply)
 *   if b:    v = v OP load(b[i])    (max and min: see "max and min of floats" below)
 *   if post: v = v / divisor        (integers: truncates toward zero)
 *   dst[i] = store(v)               (one rounding to the output type, nearest even)
 *
 * Both compilers must keep a*s + b as two roundings: reduce.c turns FP contraction off, nvcc
 * compiles with --fmad=false (CMakeLists.txt), and neither uses fast-math division.
 * Only plain C that both compilers accept lives here: no tables in memory (a device cannot read
 * the host's), bit casts by memcpy, format constants built in registers.
 *
 * Max and min of floats are commutative and associative, so every algorithm, whatever order it
 * combines the ranks' values in, gives the same bits:
 *   a NaN loses to a number (IEEE 754-2008 maxNum/minNum, CUDA's fmaxf, NCCL's float max);
 *   -0 < +0: max(-0, +0) = +0 and min(-0, +0) = -0 (the AND, or the OR, of the two codes:
 *   equal values of any other kind have equal codes);
 *   two NaNs give the OR of their codes (still a NaN, the same whichever comes first).
 * The vector kernels (reduce_simd.c) implement the same function with compares and blends.
 */
#ifndef TUTTI_REDUCE_OPS_H_
#define TUTTI_REDUCE_OPS_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tutti.h"

#if defined(__CUDACC__)
#define RO_FN static __host__ __device__ __forceinline__
#else
#define RO_FN static inline __attribute__((always_inline))
#endif

/* Everything one element needs, decoded once per call from reduce_op_t and the flags
 * (reduce.c: args_decode). Plain data, so it is passed to a device kernel by value. */
typedef struct reduce_args {
  ncclRedOp_t base; /* ncclSum .. ncclMin */
  int pre;          /* apply scale to a[i] */
  int post;         /* divide the result */
  float scale_f32;  /* scale for fp32, fp16, bf16 and fp8 (computed in fp32) */
  double scale_f64;
  uint64_t scale_int; /* integer scale, sign-extended; products wrap modulo the width */
  float div_f32;
  double div_f64;
  int64_t div_int; /* >= 1 */
} reduce_args_t;

/* ---- bit casts ---- */

RO_FN uint32_t ro_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

RO_FN float ro_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- small float formats: fp16, fp8 e4m3 (OCP "fn"), fp8 e5m2 ---- */

/* Layout of an IEEE-like format of at most 16 bits, for the shared conversion code. */
typedef struct minifloat {
  int mbits;          /* mantissa bits */
  int bias;           /* exponent bias */
  uint32_t sign_bit;  /* 0x8000 or 0x80 */
  uint32_t max_code;  /* magnitude bits of the largest finite value */
  uint32_t over_code; /* what a finite overflow becomes: inf, or max_code when saturating */
  uint32_t inf_code;  /* what +-inf becomes (max_code when the format has no infinity) */
  uint32_t nan_code;  /* magnitude bits of the NaN we produce */
  float sub_unit;     /* value of the smallest subnormal, 2^(1 - bias - mbits) */
} minifloat_t;

RO_FN minifloat_t ro_fmt_half(void) {
  minifloat_t m = {10, 15, 0x8000, 0x7bff, 0x7c00, 0x7c00, 0x7e00, 0x1p-24f};
  return m;
}

RO_FN minifloat_t ro_fmt_e4m3(void) {
  minifloat_t m = {3, 7, 0x80, 0x7e, 0x7e, 0x7e, 0x7f, 0x1p-9f};
  return m;
}

RO_FN minifloat_t ro_fmt_e5m2(void) {
  minifloat_t m = {2, 15, 0x80, 0x7b, 0x7b, 0x7c, 0x7f, 0x1p-16f};
  return m;
}

/* mant >> shift, rounded to nearest even; shift >= 1. */
RO_FN uint32_t ro_round_shift_rne(uint32_t mant, unsigned shift) {
  if (shift >= 32) return 0;
  uint32_t q = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return q;
}

/* Magnitude bits of |f| in `fmt`, for finite f. */
RO_FN uint32_t ro_minifloat_from_finite(uint32_t abs_bits, minifloat_t fmt) {
  if (abs_bits < 0x00800000) return 0; /* fp32 subnormals are below every format's range */
  int exp = (int)(abs_bits >> 23) - 127 + fmt.bias;
  unsigned shift = (unsigned)(23 - fmt.mbits);
  uint32_t code;
  if (exp >= 1) { /* normal: rounding may carry into the exponent, which is right */
    code = ro_round_shift_rne(((uint32_t)exp << 23) | (abs_bits & 0x7fffff), shift);
  } else { /* subnormal in the target: shift the explicit mantissa further right */
    code = ro_round_shift_rne((abs_bits & 0x7fffff) | 0x800000, shift + (unsigned)(1 - exp));
  }
  return code > fmt.max_code ? fmt.over_code : code;
}

RO_FN uint32_t ro_minifloat_from_float(float f, minifloat_t fmt) {
  uint32_t bits = ro_f32_bits(f);
  uint32_t sign = (bits >> 31) ? fmt.sign_bit : 0;
  uint32_t abs_bits = bits & 0x7fffffff;
  if (abs_bits > 0x7f800000) return sign | fmt.nan_code;
  if (abs_bits == 0x7f800000) return sign | fmt.inf_code;
  return sign | ro_minifloat_from_finite(abs_bits, fmt);
}

/* Finite values only (callers handle inf and NaN codes first). */
RO_FN float ro_minifloat_to_float(uint32_t v, minifloat_t fmt) {
  uint32_t mag = v & (fmt.sign_bit - 1);
  uint32_t exp = mag >> fmt.mbits;
  uint32_t frac = mag & ((1u << fmt.mbits) - 1);
  float r;
  if (exp == 0) {
    r = (float)frac * fmt.sub_unit;
  } else {
    r = ro_f32_from_bits(((exp - (uint32_t)fmt.bias + 127) << 23) | (frac << (23 - fmt.mbits)));
  }
  return (v & fmt.sign_bit) ? -r : r;
}

/* NaN or inf of a format whose all-ones exponent is special (fp16, e5m2): quiet NaN keeps the
 * payload, as vcvtph2ps does. */
RO_FN float ro_ieee_special_to_float(uint32_t v, minifloat_t fmt) {
  uint32_t sign = (v & fmt.sign_bit) ? 0x80000000u : 0;
  uint32_t frac = v & ((1u << fmt.mbits) - 1);
  if (frac == 0) return ro_f32_from_bits(sign | 0x7f800000);
  return ro_f32_from_bits(sign | 0x7fc00000 | (frac << (23 - fmt.mbits)));
}

RO_FN float ro_half_to_float(uint16_t h) {
  if ((h & 0x7c00) == 0x7c00) return ro_ieee_special_to_float(h, ro_fmt_half());
  return ro_minifloat_to_float(h, ro_fmt_half());
}

/* NaN keeps the top of its payload and is made quiet, as vcvtps2ph does. */
RO_FN uint16_t ro_float_to_half(float f) {
  uint32_t bits = ro_f32_bits(f);
  if ((bits & 0x7fffffff) > 0x7f800000) {
    return (uint16_t)(((bits >> 16) & 0x8000) | 0x7e00 | ((bits >> 13) & 0x3ff));
  }
  return (uint16_t)ro_minifloat_from_float(f, ro_fmt_half());
}

RO_FN float ro_bf16_to_float(uint16_t b) {
  return ro_f32_from_bits((uint32_t)b << 16);
}

/* Round to nearest even by adding 0x7fff + lsb; NaN is truncated and made quiet. */
RO_FN uint16_t ro_float_to_bf16(float f) {
  uint32_t bits = ro_f32_bits(f);
  if ((bits & 0x7fffffff) > 0x7f800000) return (uint16_t)((bits >> 16) | 0x40);
  return (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

RO_FN float ro_fp8e4m3_to_float(uint8_t v) {
  if ((v & 0x7f) == 0x7f) return ro_f32_from_bits((v & 0x80 ? 0x80000000u : 0) | 0x7fc00000);
  return ro_minifloat_to_float(v, ro_fmt_e4m3());
}

RO_FN uint8_t ro_float_to_fp8e4m3(float f) {
  return (uint8_t)ro_minifloat_from_float(f, ro_fmt_e4m3());
}

RO_FN float ro_fp8e5m2_to_float(uint8_t v) {
  if ((v & 0x7c) == 0x7c) return ro_ieee_special_to_float(v, ro_fmt_e5m2());
  return ro_minifloat_to_float(v, ro_fmt_e5m2());
}

RO_FN uint8_t ro_float_to_fp8e5m2(float f) {
  return (uint8_t)ro_minifloat_from_float(f, ro_fmt_e5m2());
}

/* ---- types computed in fp32: fp32, fp16, bf16, fp8 ---- */

RO_FN float ro_f32_load(const void *p, size_t i, ncclDataType_t type) {
  switch (type) {
    case ncclFloat16:
      return ro_half_to_float(((const uint16_t *)p)[i]);
    case ncclBfloat16:
      return ro_bf16_to_float(((const uint16_t *)p)[i]);
    case ncclFloat8e4m3:
      return ro_fp8e4m3_to_float(((const uint8_t *)p)[i]);
    case ncclFloat8e5m2:
      return ro_fp8e5m2_to_float(((const uint8_t *)p)[i]);
    default:
      return ((const float *)p)[i];
  }
}

RO_FN void ro_f32_store(void *p, size_t i, ncclDataType_t type, float v) {
  switch (type) {
    case ncclFloat16:
      ((uint16_t *)p)[i] = ro_float_to_half(v);
      break;
    case ncclBfloat16:
      ((uint16_t *)p)[i] = ro_float_to_bf16(v);
      break;
    case ncclFloat8e4m3:
      ((uint8_t *)p)[i] = ro_float_to_fp8e4m3(v);
      break;
    case ncclFloat8e5m2:
      ((uint8_t *)p)[i] = ro_float_to_fp8e5m2(v);
      break;
    default:
      ((float *)p)[i] = v;
  }
}

/* Max (max = 1) or min of two floats, as the header comment defines them. */
RO_FN float ro_f32_maxmin(float x, float y, int max) {
  uint32_t xb = ro_f32_bits(x), yb = ro_f32_bits(y);
  if (x != x || y != y) return x == x ? x : y == y ? y : ro_f32_from_bits(xb | yb);
  if (x == y) return ro_f32_from_bits(max ? xb & yb : xb | yb);
  return (max ? x > y : x < y) ? x : y;
}

RO_FN float ro_f32_op(ncclRedOp_t base, float x, float y) {
  switch (base) {
    case ncclSum:
      return x + y;
    case ncclProd:
      return x * y;
    case ncclMax:
      return ro_f32_maxmin(x, y, 1);
    default:
      return ro_f32_maxmin(x, y, 0);
  }
}

/* One element: post(pre(a) OP b), b used when has_b. */
RO_FN float ro_f32_elem(const reduce_args_t *args, ncclRedOp_t base, float a, int has_b, float b) {
  float v = a;
  if (args->pre) v = v * args->scale_f32;
  if (has_b) v = ro_f32_op(base, v, b);
  if (args->post) v = v / args->div_f32;
  return v;
}

/* ---- fp64 ---- */

RO_FN uint64_t ro_f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

RO_FN double ro_f64_from_bits(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* ro_f32_maxmin for fp64. */
RO_FN double ro_f64_maxmin(double x, double y, int max) {
  uint64_t xb = ro_f64_bits(x), yb = ro_f64_bits(y);
  if (x != x || y != y) return x == x ? x : y == y ? y : ro_f64_from_bits(xb | yb);
  if (x == y) return ro_f64_from_bits(max ? xb & yb : xb | yb);
  return (max ? x > y : x < y) ? x : y;
}

RO_FN double ro_f64_op(ncclRedOp_t base, double x, double y) {
  switch (base) {
    case ncclSum:
      return x + y;
    case ncclProd:
      return x * y;
    case ncclMax:
      return ro_f64_maxmin(x, y, 1);
    default:
      return ro_f64_maxmin(x, y, 0);
  }
}

RO_FN double ro_f64_elem(const reduce_args_t *args, ncclRedOp_t base, double a, int has_b,
                         double b) {
  double v = a;
  if (args->pre) v = v * args->scale_f64;
  if (has_b) v = ro_f64_op(base, v, b);
  if (args->post) v = v / args->div_f64;
  return v;
}

/* ---- integers, computed in 64 bits and wrapped to the type's width ---- */

RO_FN int ro_int_is_signed(ncclDataType_t type) {
  return type == ncclInt8 || type == ncclInt32 || type == ncclInt64;
}

/* Sign- or zero-extends the low bits of v that fit the type. */
RO_FN uint64_t ro_int_wrap(uint64_t v, ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return (uint64_t)(int64_t)(int8_t)v;
    case ncclUint8:
      return (uint8_t)v;
    case ncclInt32:
      return (uint64_t)(int64_t)(int32_t)v;
    case ncclUint32:
      return (uint32_t)v;
    default:
      return v;
  }
}

RO_FN uint64_t ro_int_load(const void *p, size_t i, ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return (uint64_t)(int64_t)((const int8_t *)p)[i];
    case ncclUint8:
      return ((const uint8_t *)p)[i];
    case ncclInt32:
      return (uint64_t)(int64_t)((const int32_t *)p)[i];
    case ncclUint32:
      return ((const uint32_t *)p)[i];
    default:
      return ((const uint64_t *)p)[i];
  }
}

RO_FN void ro_int_store(void *p, size_t i, ncclDataType_t type, uint64_t v) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      ((uint8_t *)p)[i] = (uint8_t)v;
      break;
    case ncclInt32:
    case ncclUint32:
      ((uint32_t *)p)[i] = (uint32_t)v;
      break;
    default:
      ((uint64_t *)p)[i] = v;
  }
}

/* x and y are wrapped (extended from the type's width), so 64-bit compares are right. */
RO_FN uint64_t ro_int_op(ncclRedOp_t base, uint64_t x, uint64_t y, int sgn) {
  switch (base) {
    case ncclSum:
      return x + y;
    case ncclProd:
      return x * y;
    case ncclMax:
      if (sgn) return (int64_t)x > (int64_t)y ? x : y;
      return x > y ? x : y;
    default:
      if (sgn) return (int64_t)x < (int64_t)y ? x : y;
      return x < y ? x : y;
  }
}

RO_FN uint64_t ro_int_div(uint64_t v, int64_t div, int sgn) {
  if (sgn) return (uint64_t)((int64_t)v / div);
  return v / (uint64_t)div;
}

RO_FN uint64_t ro_int_elem(const reduce_args_t *args, ncclRedOp_t base, ncclDataType_t type,
                           uint64_t a, int has_b, uint64_t b) {
  const int sgn = ro_int_is_signed(type);
  uint64_t v = a;
  if (args->pre) v = ro_int_wrap(v * args->scale_int, type);
  if (has_b) v = ro_int_wrap(ro_int_op(base, v, b, sgn), type);
  if (args->post) v = ro_int_div(v, args->div_int, sgn);
  return v;
}

/* ---- any type: element i of dst from elements i of a and (when b != NULL) b ---- */

RO_FN int ro_type_is_f32(ncclDataType_t type) {
  return type == ncclFloat32 || type == ncclFloat16 || type == ncclBfloat16 ||
         type == ncclFloat8e4m3 || type == ncclFloat8e5m2;
}

RO_FN void ro_apply(const reduce_args_t *args, ncclRedOp_t base, ncclDataType_t type, void *dst,
                    const void *a, const void *b, size_t i) {
  if (type == ncclFloat64) {
    const double *bd = (const double *)b;
    ((double *)dst)[i] = ro_f64_elem(args, base, ((const double *)a)[i], b != NULL, b ? bd[i] : 0);
  } else if (ro_type_is_f32(type)) {
    float bv = b ? ro_f32_load(b, i, type) : 0.0f;
    ro_f32_store(dst, i, type, ro_f32_elem(args, base, ro_f32_load(a, i, type), b != NULL, bv));
  } else {
    uint64_t bv = b ? ro_int_load(b, i, type) : 0;
    ro_int_store(dst, i, type,
                 ro_int_elem(args, base, type, ro_int_load(a, i, type), b != NULL, bv));
  }
}

#endif /* TUTTI_REDUCE_OPS_H_ */
