/* Datatype table and exact conversions for the benchmarks' checks (see datatypes.h).
 *
 * A narrow float format is described by its exponent and fraction widths and its bias. "ieee"
 * formats (fp16, bf16, fp8 e5m2) reserve the top exponent for inf/NaN; fp8 e4m3 is the "fn"
 * variant: no infinities, only S.1111.111 is NaN, largest finite value 448.
 */
#include "datatypes.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct minifloat {
  int ebits, mbits, bias;
  int ieee;     /* 1: top exponent is inf/NaN; 0: e4m3fn */
  int saturate; /* overflow gives the largest finite value instead of inf */
} minifloat_t;

/* fp8 saturates in the library (see its reduce kernels' contract), fp16 and bf16 overflow to
 * inf; the checks never reach either, but the helpers model what the library may produce. */
static const minifloat_t fmt_half = {5, 10, 15, 1, 0};
static const minifloat_t fmt_bf16 = {8, 7, 127, 1, 0};
static const minifloat_t fmt_e4m3 = {4, 3, 7, 0, 1};
static const minifloat_t fmt_e5m2 = {5, 2, 15, 1, 1};

static unsigned mf_emax(const minifloat_t *f) {
  return (1u << f->ebits) - 1;
}
static unsigned mf_mmask(const minifloat_t *f) {
  return (1u << f->mbits) - 1;
}

static double mf_decode(unsigned bits, const minifloat_t *f) {
  unsigned sign = (bits >> (f->ebits + f->mbits)) & 1u;
  unsigned e = (bits >> f->mbits) & mf_emax(f);
  unsigned m = bits & mf_mmask(f);
  double v;
  if (f->ieee && e == mf_emax(f))
    v = m ? NAN : INFINITY;
  else if (!f->ieee && e == mf_emax(f) && m == mf_mmask(f))
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  else
    v = ldexp((double)(m | (1u << f->mbits)), (int)e - f->bias - f->mbits);
  return sign ? -v : v;
}

/* Largest finite value and its encoding. */
static double mf_max_finite(const minifloat_t *f, unsigned *bits) {
  unsigned e = f->ieee ? mf_emax(f) - 1 : mf_emax(f);
  unsigned m = f->ieee ? mf_mmask(f) : mf_mmask(f) - 1;
  *bits = (e << f->mbits) | m;
  return mf_decode(*bits, f);
}

/* Encodes r, which must already be a representable, finite, non-negative value. */
static unsigned mf_encode_exact(double r, const minifloat_t *f) {
  int emin = 1 - f->bias, e;
  if (r == 0) return 0;
  (void)frexp(r, &e);
  e -= 1;                                                   /* r = 1.f * 2^e */
  if (e < emin) return (unsigned)ldexp(r, f->mbits - emin); /* subnormal */
  unsigned m = (unsigned)ldexp(ldexp(r, -e) - 1.0, f->mbits);
  return ((unsigned)(e + f->bias) << f->mbits) | m;
}

/* Round to nearest even; overflow saturates or gives inf as the format says. */
static unsigned mf_encode(double v, const minifloat_t *f) {
  unsigned sign = signbit(v) ? 1u << (f->ebits + f->mbits) : 0;
  unsigned max_bits;
  double max = mf_max_finite(f, &max_bits);
  if (isnan(v)) return sign | (mf_emax(f) << f->mbits) | mf_mmask(f);
  double a = fabs(v);
  int e = 0;
  if (a != 0) (void)frexp(a, &e);
  e -= 1;
  if (e < 1 - f->bias) e = 1 - f->bias;
  double ulp = ldexp(1.0, e - f->mbits);
  double r = nearbyint(a / ulp) * ulp; /* default rounding mode: to nearest, ties to even */
  if (r > max) {
    int to_inf = f->ieee && (!f->saturate || isinf(v)); /* only inf itself stays inf */
    return sign | (to_inf ? mf_emax(f) << f->mbits : max_bits);
  }
  return sign | mf_encode_exact(r, f);
}

/* ---- element accessors, one pair per C type ---- */

#define PERF_PLAIN_ACCESSORS(tag, ctype)               \
  static double get_##tag(const void *b, size_t i) {   \
    return (double)((const ctype *)b)[i];              \
  }                                                    \
  static void set_##tag(void *b, size_t i, double v) { \
    ((ctype *)b)[i] = (ctype)v;                        \
  }

PERF_PLAIN_ACCESSORS(i8, int8_t)
PERF_PLAIN_ACCESSORS(u8, uint8_t)
PERF_PLAIN_ACCESSORS(i32, int32_t)
PERF_PLAIN_ACCESSORS(u32, uint32_t)
PERF_PLAIN_ACCESSORS(i64, int64_t)
PERF_PLAIN_ACCESSORS(u64, uint64_t)
PERF_PLAIN_ACCESSORS(f32, float)
PERF_PLAIN_ACCESSORS(f64, double)

#define PERF_MINIFLOAT_ACCESSORS(tag, ctype, fmt)      \
  static double get_##tag(const void *b, size_t i) {   \
    return mf_decode(((const ctype *)b)[i], &fmt);     \
  }                                                    \
  static void set_##tag(void *b, size_t i, double v) { \
    ((ctype *)b)[i] = (ctype)mf_encode(v, &fmt);       \
  }

PERF_MINIFLOAT_ACCESSORS(f16, uint16_t, fmt_half)
PERF_MINIFLOAT_ACCESSORS(bf16, uint16_t, fmt_bf16)
PERF_MINIFLOAT_ACCESSORS(e4m3, uint8_t, fmt_e4m3)
PERF_MINIFLOAT_ACCESSORS(e5m2, uint8_t, fmt_e5m2)

/* exact_max: integers are capped at 2^30 (the checks use far smaller values anyway); a float
 * format with p fraction bits holds every integer up to 2^(p+1). */
const perf_type_t perf_types[] = {
    {"int8", ncclInt8, 1, 0, 0, 127, get_i8, set_i8},
    {"uint8", ncclUint8, 1, 0, 0, 255, get_u8, set_u8},
    {"int32", ncclInt32, 4, 0, 0, 1 << 30, get_i32, set_i32},
    {"uint32", ncclUint32, 4, 0, 0, 1 << 30, get_u32, set_u32},
    {"int64", ncclInt64, 8, 0, 0, 1 << 30, get_i64, set_i64},
    {"uint64", ncclUint64, 8, 0, 0, 1 << 30, get_u64, set_u64},
    {"half", ncclFloat16, 2, 1, 10, 2048, get_f16, set_f16},
    {"float", ncclFloat32, 4, 1, 23, 16777216.0, get_f32, set_f32},
    {"double", ncclFloat64, 8, 1, 52, 9007199254740992.0, get_f64, set_f64},
    {"bfloat16", ncclBfloat16, 2, 1, 7, 256, get_bf16, set_bf16},
    {"f8e4m3", ncclFloat8e4m3, 1, 1, 3, 16, get_e4m3, set_e4m3},
    {"f8e5m2", ncclFloat8e5m2, 1, 1, 2, 8, get_e5m2, set_e5m2},
};
const int perf_num_types = (int)(sizeof(perf_types) / sizeof(perf_types[0]));

const perf_type_t *perf_type_by_name(const char *name) {
  for (int i = 0; i < perf_num_types; i++)
    if (strcmp(perf_types[i].name, name) == 0) return &perf_types[i];
  return NULL;
}
