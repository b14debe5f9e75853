/* bf16 and fp16 codecs: each element cast to 16 bits, round to nearest even.
 *
 * Payload: count little-endian uint16 values. Every bit pattern is a value, so the only check
 * on receipt is the length (done by the caller from the header). Bound, per element:
 * |decode(encode(x)) - x| <= 2^-8 |x| for bf16 (8 significant bits), 2^-11 |x| for fp16 in its
 * normal range (|x| >= 2^-14; below it the absolute error is at most 2^-25), and x beyond
 * 65504 becomes infinity in fp16: the caller scales by 1 / nranks before the cast for ncclAvg,
 * so an average only overflows where an input did.
 *
 * fp16 uses the CPU's F16C conversions (vcvtps2ph / vcvtph2ps, round to nearest even) where
 * there are, else tutti_float_to_half / tutti_half_to_float, which give the same bits.
 */
#include <string.h>

#include "compress/compress.h"
#include "reduce.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define CAST_HAVE_F16C 1
#endif

static size_t cast_payload_bytes(size_t count) {
  return 2 * count;
}

static const char *cast_check(const uint8_t *in, size_t count) {
  return NULL;
}

/* bf16: the top half of the fp32 bits after rounding (NaN kept quiet, as tutti_float_to_bf16). */
static inline uint16_t bf16_from(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  uint32_t nan = (bits >> 16) | 0x40u;
  return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

static inline float bf16_to(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* The payload is little-endian uint16 (little-endian hosts only, see compress_wire.c). */
COMPRESS_SIMD static void bf16_encode(const float *x, size_t count, float scale, uint8_t *out) {
  uint16_t *o = (uint16_t *)out; /* payloads start 8-byte aligned (24-byte header) */
  for (size_t i = 0; i < count; i++) o[i] = bf16_from(scale * x[i]);
}

COMPRESS_SIMD static void bf16_decode(const uint8_t *in, size_t count, float *out) {
  const uint16_t *q = (const uint16_t *)in;
  for (size_t i = 0; i < count; i++) out[i] = bf16_to(q[i]);
}

COMPRESS_SIMD static void bf16_decode_add(const uint8_t *in, size_t count, float *acc) {
  const uint16_t *q = (const uint16_t *)in;
  for (size_t i = 0; i < count; i++) acc[i] += bf16_to(q[i]);
}

#ifdef CAST_HAVE_F16C
__attribute__((target("avx,f16c"))) static size_t f16c_encode(const float *x, size_t count,
                                                              float scale, uint16_t *o) {
  size_t i = 0;
  __m256 s = _mm256_set1_ps(scale);
  for (; i + 8 <= count; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), s);
    _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

__attribute__((target("avx,f16c"))) static size_t f16c_decode(const uint16_t *q, size_t count,
                                                              float *out, int add) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q + i)));
    if (add) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  return i;
}

/* F16C from CPUID (leaf 1, ECX): clang's __builtin_cpu_supports does not know "f16c"; AVX from
 * the builtin, which also checks that the OS saves the AVX registers. */
static int probe_f16c(void) {
  unsigned a, b, c = 0, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && __builtin_cpu_supports("avx");
}

static int have_f16c(void) {
  static int have = -1;
  return tutti_cached_flag(&have, probe_f16c);
}
#endif

static void fp16_encode(const float *x, size_t count, float scale, uint8_t *out) {
  uint16_t *o = (uint16_t *)out;
  size_t i = 0;
#ifdef CAST_HAVE_F16C
  if (have_f16c()) i = f16c_encode(x, count, scale, o);
#endif
  for (; i < count; i++) o[i] = tutti_float_to_half(scale * x[i]);
}

static void fp16_decode_into(const uint8_t *in, size_t count, float *out, int add) {
  const uint16_t *q = (const uint16_t *)in;
  size_t i = 0;
#ifdef CAST_HAVE_F16C
  if (have_f16c()) i = f16c_decode(q, count, out, add);
#endif
  for (; i < count; i++) {
    float h = tutti_half_to_float(q[i]);
    out[i] = add ? out[i] + h : h;
  }
}

static void fp16_decode(const uint8_t *in, size_t count, float *out) {
  fp16_decode_into(in, count, out, 0);
}

static void fp16_decode_add(const uint8_t *in, size_t count, float *acc) {
  fp16_decode_into(in, count, acc, 1);
}

const compress_codec_t compress_codec_bf16 = {
    .name = "bf16",
    .kind = tuttiCompressBf16,
    .error_feedback = 0,
    .payload_bytes = cast_payload_bytes,
    .encode = bf16_encode,
    .check = cast_check,
    .decode = bf16_decode,
    .decode_add = bf16_decode_add,
};

const compress_codec_t compress_codec_fp16 = {
    .name = "fp16",
    .kind = tuttiCompressFp16,
    .error_feedback = 0,
    .payload_bytes = cast_payload_bytes,
    .encode = fp16_encode,
    .check = cast_check,
    .decode = fp16_decode,
    .decode_add = fp16_decode_add,
};
