/* AVX2 and AVX-512 reduction kernels, compiled with per-function target attributes (the library
 * itself is built without -march) and installed by reduce.c after a CPU check.
 *
 * Each kernel walks its buffers in register-sized chunks of bytes and applies a "step" to each
 * pair of chunks x (from a) and y (from b; x itself when b is NULL):
 *
 *   step = [widen to fp32] -> [x * scale] -> [x OP y] -> [/ divisor] -> [round to the type]
 *
 * in exactly the order of the scalar kernels of reduce.c, so results are bitwise identical.
 * AVX-512 handles the tail with a byte mask (loads of masked-off bytes read zeros, which no
 * op traps on); AVX2 runs the scalar kernel on the last partial chunk.
 *
 * Coverage (other entries keep the scalar, or for AVX-512 the AVX2, kernel):
 *   fp32, fp64, fp16, bf16  every op, premul and postdiv
 *   int32, uint32           every op, premul (no vector integer division: postdiv is scalar)
 *   int64, uint64           AVX-512: sum/max/min; prod and premul with AVX-512DQ only
 *                           AVX2: sum/max/min, no premul
 *   int8, uint8             sum/max/min, no premul
 *   fp8                     scalar
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "reduce_impl.h"

/* Bit i of a mask covers base op i, or variant i. */
#define OPS_ALL 0xfu
#define OPS_NO_PROD ((1u << ncclSum) | (1u << ncclMax) | (1u << ncclMin))
#define VARIANTS_ALL 0xfu
#define VARIANTS_PLAIN (1u << REDUCE_VARIANT(0, 0))
#define VARIANTS_PRE (VARIANTS_PLAIN | (1u << REDUCE_VARIANT(1, 0)))

static void table_set(reduce_table_t *table, ncclDataType_t type, unsigned ops, unsigned variants,
                      reduce_kernel_t fn) {
  for (int op = 0; op < REDUCE_NUM_BASE_OPS; op++) {
    for (int v = 0; v < REDUCE_NUM_VARIANTS; v++) {
      if ((ops >> op & 1) && (variants >> v & 1)) table->fn[type][op][v] = fn;
    }
  }
}

#if defined(__x86_64__)
#include <immintrin.h>

#define SIMD_INLINE static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2,f16c")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw")))
#define TARGET_AVX512DQ __attribute__((target("avx512f,avx512bw,avx512dq")))

/* Round-to-nearest-even immediate of vcvtps2ph. */
#define CVT_RNE _MM_FROUND_TO_NEAREST_INT

/* Defines kernel `name`: per-call constants in `ctx`, then a switch that folds the op into
 * one chunk loop per op. LOOP(STEP) is the ISA's chunk loop; STEP(x, y, ctx, op, sgn). */
#define SIMD_KERNEL(name, TARGET, CTX_T, CTX_INIT, LOOP, STEP, SGN, ESZ, TYPE) \
  TARGET static void name(void *dst, const void *a, const void *b, size_t n,   \
                          const reduce_args_t *args) {                         \
    CTX_T ctx;                                                                 \
    CTX_INIT(&ctx, args, b != NULL);                                           \
    const size_t nbytes = n * (ESZ);                                           \
    size_t off = 0;                                                            \
    switch (args->base) {                                                      \
      case ncclSum:                                                            \
        LOOP(STEP(x, y, &ctx, ncclSum, SGN));                                  \
        break;                                                                 \
      case ncclProd:                                                           \
        LOOP(STEP(x, y, &ctx, ncclProd, SGN));                                 \
        break;                                                                 \
      case ncclMax:                                                            \
        LOOP(STEP(x, y, &ctx, ncclMax, SGN));                                  \
        break;                                                                 \
      default:                                                                 \
        LOOP(STEP(x, y, &ctx, ncclMin, SGN));                                  \
    }                                                                          \
    reduce_scalar_tail(TYPE, dst, a, b, off / (ESZ), n, args);                 \
  }

/* ======================= AVX2 ======================= */

typedef struct v256_ctx {
  int pre, post, has_b;
  __m256 scale_ps, div_ps;
  __m256d scale_pd, div_pd;
  __m256i scale_i32;
} v256_ctx_t;

TARGET_AVX2 SIMD_INLINE void v256_ctx_init(v256_ctx_t *c, const reduce_args_t *args, int has_b) {
  c->pre = args->pre;
  c->post = args->post;
  c->has_b = has_b;
  c->scale_ps = _mm256_set1_ps(args->scale_f32);
  c->div_ps = _mm256_set1_ps(args->div_f32);
  c->scale_pd = _mm256_set1_pd(args->scale_f64);
  c->div_pd = _mm256_set1_pd(args->div_f64);
  c->scale_i32 = _mm256_set1_epi32((int)(uint32_t)args->scale_int);
}

/* Full 32-byte chunks; `off` ends at the first byte left for the scalar tail. */
#define V256_LOOP(STEP)                                                               \
  for (; off + 32 <= nbytes; off += 32) {                                             \
    __m256i x = _mm256_loadu_si256((const __m256i *)((const char *)a + off));         \
    __m256i y = b ? _mm256_loadu_si256((const __m256i *)((const char *)b + off)) : x; \
    _mm256_storeu_si256((__m256i *)((char *)dst + off), STEP);                        \
  }

/* Max (max = 1) or min as reduce_ops.h defines them (NaN loses, -0 < +0, two NaNs OR'd):
 * vmaxps/vminps return y where either is a NaN or both are equal, which the blends correct. */
TARGET_AVX2 SIMD_INLINE __m256 v256_maxmin_ps(__m256 x, __m256 y, int max) {
  __m256 r = max ? _mm256_max_ps(x, y) : _mm256_min_ps(x, y);
  __m256 either = _mm256_or_ps(x, y);
  r = _mm256_blendv_ps(r, max ? _mm256_and_ps(x, y) : either, _mm256_cmp_ps(x, y, _CMP_EQ_OQ));
  __m256 xnan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q), ynan = _mm256_cmp_ps(y, y, _CMP_UNORD_Q);
  r = _mm256_blendv_ps(r, x, ynan);
  return _mm256_blendv_ps(r, either, _mm256_and_ps(xnan, ynan));
}

TARGET_AVX2 SIMD_INLINE __m256d v256_maxmin_pd(__m256d x, __m256d y, int max) {
  __m256d r = max ? _mm256_max_pd(x, y) : _mm256_min_pd(x, y);
  __m256d either = _mm256_or_pd(x, y);
  r = _mm256_blendv_pd(r, max ? _mm256_and_pd(x, y) : either, _mm256_cmp_pd(x, y, _CMP_EQ_OQ));
  __m256d xnan = _mm256_cmp_pd(x, x, _CMP_UNORD_Q), ynan = _mm256_cmp_pd(y, y, _CMP_UNORD_Q);
  r = _mm256_blendv_pd(r, x, ynan);
  return _mm256_blendv_pd(r, either, _mm256_and_pd(xnan, ynan));
}

TARGET_AVX2 SIMD_INLINE __m256 v256_calc_ps(__m256 x, __m256 y, const v256_ctx_t *c, int op) {
  if (c->pre) x = _mm256_mul_ps(x, c->scale_ps);
  if (c->has_b) {
    if (op == ncclSum) x = _mm256_add_ps(x, y);
    if (op == ncclProd) x = _mm256_mul_ps(x, y);
    if (op == ncclMax || op == ncclMin) x = v256_maxmin_ps(x, y, op == ncclMax);
  }
  if (c->post) x = _mm256_div_ps(x, c->div_ps);
  return x;
}

TARGET_AVX2 SIMD_INLINE __m256i v256_step_f32(__m256i x, __m256i y, const v256_ctx_t *c, int op,
                                              int sgn) {
  return _mm256_castps_si256(v256_calc_ps(_mm256_castsi256_ps(x), _mm256_castsi256_ps(y), c, op));
}

TARGET_AVX2 SIMD_INLINE __m256i v256_step_f64(__m256i x, __m256i y, const v256_ctx_t *c, int op,
                                              int sgn) {
  __m256d vx = _mm256_castsi256_pd(x), vy = _mm256_castsi256_pd(y);
  if (c->pre) vx = _mm256_mul_pd(vx, c->scale_pd);
  if (c->has_b) {
    if (op == ncclSum) vx = _mm256_add_pd(vx, vy);
    if (op == ncclProd) vx = _mm256_mul_pd(vx, vy);
    if (op == ncclMax || op == ncclMin) vx = v256_maxmin_pd(vx, vy, op == ncclMax);
  }
  if (c->post) vx = _mm256_div_pd(vx, c->div_pd);
  return _mm256_castpd_si256(vx);
}

/* 16 halves -> two fp32 vectors -> 16 halves, rounded once (vcvtps2ph, nearest even). */
TARGET_AVX2 SIMD_INLINE __m256i v256_step_f16(__m256i x, __m256i y, const v256_ctx_t *c, int op,
                                              int sgn) {
  __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(x));
  __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(x, 1));
  __m256 ylo = _mm256_cvtph_ps(_mm256_castsi256_si128(y));
  __m256 yhi = _mm256_cvtph_ps(_mm256_extracti128_si256(y, 1));
  lo = v256_calc_ps(lo, ylo, c, op);
  hi = v256_calc_ps(hi, yhi, c, op);
  __m256i r = _mm256_castsi128_si256(_mm256_cvtps_ph(lo, CVT_RNE));
  return _mm256_inserti128_si256(r, _mm256_cvtps_ph(hi, CVT_RNE), 1);
}

/* fp32 bits -> bf16 in the low half of each 32-bit lane: + 0x7fff + lsb, NaN made quiet. */
TARGET_AVX2 SIMD_INLINE __m256i v256_round_bf16(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  r = _mm256_srli_epi32(r, 16);
  __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, nan, is_nan);
}

TARGET_AVX2 SIMD_INLINE __m256 v256_widen_bf16(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

TARGET_AVX2 SIMD_INLINE __m256i v256_step_bf16(__m256i x, __m256i y, const v256_ctx_t *c, int op,
                                               int sgn) {
  __m256 lo = v256_widen_bf16(_mm256_castsi256_si128(x));
  __m256 hi = v256_widen_bf16(_mm256_extracti128_si256(x, 1));
  lo = v256_calc_ps(lo, v256_widen_bf16(_mm256_castsi256_si128(y)), c, op);
  hi = v256_calc_ps(hi, v256_widen_bf16(_mm256_extracti128_si256(y, 1)), c, op);
  /* Lanes hold values <= 0xffff, so the unsigned-saturating pack is exact; it interleaves
   * 128-bit halves, which the permute puts back in order. */
  __m256i packed = _mm256_packus_epi32(v256_round_bf16(lo), v256_round_bf16(hi));
  return _mm256_permute4x64_epi64(packed, 0xd8);
}

TARGET_AVX2 SIMD_INLINE __m256i v256_step_i32(__m256i x, __m256i y, const v256_ctx_t *c, int op,
                                              int sgn) {
  if (c->pre) x = _mm256_mullo_epi32(x, c->scale_i32);
  if (!c->has_b) return x;
  if (op == ncclSum) return _mm256_add_epi32(x, y);
  if (op == ncclProd) return _mm256_mullo_epi32(x, y);
  if (op == ncclMax) return sgn ? _mm256_max_epi32(x, y) : _mm256_max_epu32(x, y);
  return sgn ? _mm256_min_epi32(x, y) : _mm256_min_epu32(x, y);
}

TARGET_AVX2 SIMD_INLINE __m256i v256_step_i8(__m256i x, __m256i y, const v256_ctx_t *c, int op,
                                             int sgn) {
  if (!c->has_b) return x;
  if (op == ncclSum) return _mm256_add_epi8(x, y);
  if (op == ncclMax) return sgn ? _mm256_max_epi8(x, y) : _mm256_max_epu8(x, y);
  return sgn ? _mm256_min_epi8(x, y) : _mm256_min_epu8(x, y);
}

/* AVX2 has no 64-bit max/min: compare (unsigned by flipping the sign bits) and blend. */
TARGET_AVX2 SIMD_INLINE __m256i v256_step_i64(__m256i x, __m256i y, const v256_ctx_t *c, int op,
                                              int sgn) {
  if (!c->has_b) return x;
  if (op == ncclSum) return _mm256_add_epi64(x, y);
  __m256i flip = _mm256_set1_epi64x(sgn ? 0 : INT64_MIN);
  __m256i x_gt_y = _mm256_cmpgt_epi64(_mm256_xor_si256(x, flip), _mm256_xor_si256(y, flip));
  if (op == ncclMax) return _mm256_blendv_epi8(y, x, x_gt_y);
  __m256i y_gt_x = _mm256_cmpgt_epi64(_mm256_xor_si256(y, flip), _mm256_xor_si256(x, flip));
  return _mm256_blendv_epi8(y, x, y_gt_x);
}

#define V256_KERNEL(name, STEP, SGN, ESZ, TYPE) \
  SIMD_KERNEL(name, TARGET_AVX2, v256_ctx_t, v256_ctx_init, V256_LOOP, STEP, SGN, ESZ, TYPE)

V256_KERNEL(avx2_f32, v256_step_f32, 0, 4, ncclFloat32)
V256_KERNEL(avx2_f64, v256_step_f64, 0, 8, ncclFloat64)
V256_KERNEL(avx2_f16, v256_step_f16, 0, 2, ncclFloat16)
V256_KERNEL(avx2_bf16, v256_step_bf16, 0, 2, ncclBfloat16)
V256_KERNEL(avx2_i32, v256_step_i32, 1, 4, ncclInt32)
V256_KERNEL(avx2_u32, v256_step_i32, 0, 4, ncclUint32)
V256_KERNEL(avx2_i64, v256_step_i64, 1, 8, ncclInt64)
V256_KERNEL(avx2_u64, v256_step_i64, 0, 8, ncclUint64)
V256_KERNEL(avx2_i8, v256_step_i8, 1, 1, ncclInt8)
V256_KERNEL(avx2_u8, v256_step_i8, 0, 1, ncclUint8)

void reduce_simd_fill_avx2(reduce_table_t *table) {
  table_set(table, ncclFloat32, OPS_ALL, VARIANTS_ALL, avx2_f32);
  table_set(table, ncclFloat64, OPS_ALL, VARIANTS_ALL, avx2_f64);
  table_set(table, ncclFloat16, OPS_ALL, VARIANTS_ALL, avx2_f16);
  table_set(table, ncclBfloat16, OPS_ALL, VARIANTS_ALL, avx2_bf16);
  table_set(table, ncclInt32, OPS_ALL, VARIANTS_PRE, avx2_i32);
  table_set(table, ncclUint32, OPS_ALL, VARIANTS_PRE, avx2_u32);
  table_set(table, ncclInt64, OPS_NO_PROD, VARIANTS_PLAIN, avx2_i64);
  table_set(table, ncclUint64, OPS_NO_PROD, VARIANTS_PLAIN, avx2_u64);
  table_set(table, ncclInt8, OPS_NO_PROD, VARIANTS_PLAIN, avx2_i8);
  table_set(table, ncclUint8, OPS_NO_PROD, VARIANTS_PLAIN, avx2_u8);
}

/* ======================= AVX-512 ======================= */

typedef struct v512_ctx {
  int pre, post, has_b;
  __m512 scale_ps, div_ps;
  __m512d scale_pd, div_pd;
  __m512i scale_i32, scale_i64;
} v512_ctx_t;

TARGET_AVX512 SIMD_INLINE void v512_ctx_init(v512_ctx_t *c, const reduce_args_t *args, int has_b) {
  c->pre = args->pre;
  c->post = args->post;
  c->has_b = has_b;
  c->scale_ps = _mm512_set1_ps(args->scale_f32);
  c->div_ps = _mm512_set1_ps(args->div_f32);
  c->scale_pd = _mm512_set1_pd(args->scale_f64);
  c->div_pd = _mm512_set1_pd(args->div_f64);
  c->scale_i32 = _mm512_set1_epi32((int)(uint32_t)args->scale_int);
  c->scale_i64 = _mm512_set1_epi64((long long)args->scale_int);
}

TARGET_AVX512 SIMD_INLINE __mmask64 v512_mask(size_t left) {
  return left >= 64 ? ~0ull : (1ull << left) - 1;
}

/* Every chunk, the last one masked down to the bytes left; `off` ends at nbytes. */
#define V512_LOOP(STEP)                                                    \
  for (; off < nbytes; off += 64) {                                        \
    __mmask64 m = v512_mask(nbytes - off);                                 \
    __m512i x = _mm512_maskz_loadu_epi8(m, (const char *)a + off);         \
    __m512i y = b ? _mm512_maskz_loadu_epi8(m, (const char *)b + off) : x; \
    _mm512_mask_storeu_epi8((char *)dst + off, m, STEP);                   \
  }

/* v256_maxmin_ps with masks. */
TARGET_AVX512 SIMD_INLINE __m512 v512_maxmin_ps(__m512 x, __m512 y, int max) {
  __m512i r = _mm512_castps_si512(max ? _mm512_max_ps(x, y) : _mm512_min_ps(x, y));
  __m512i xi = _mm512_castps_si512(x), yi = _mm512_castps_si512(y);
  __m512i either = _mm512_or_si512(xi, yi);
  __mmask16 xnan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
            ynan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, y, _CMP_EQ_OQ),
                            max ? _mm512_and_si512(xi, yi) : either);
  r = _mm512_mask_mov_epi32(r, ynan, xi);
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, xnan & ynan, either));
}

TARGET_AVX512 SIMD_INLINE __m512d v512_maxmin_pd(__m512d x, __m512d y, int max) {
  __m512i r = _mm512_castpd_si512(max ? _mm512_max_pd(x, y) : _mm512_min_pd(x, y));
  __m512i xi = _mm512_castpd_si512(x), yi = _mm512_castpd_si512(y);
  __m512i either = _mm512_or_si512(xi, yi);
  __mmask8 xnan = _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q),
           ynan = _mm512_cmp_pd_mask(y, y, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi64(r, _mm512_cmp_pd_mask(x, y, _CMP_EQ_OQ),
                            max ? _mm512_and_si512(xi, yi) : either);
  r = _mm512_mask_mov_epi64(r, ynan, xi);
  return _mm512_castsi512_pd(_mm512_mask_mov_epi64(r, xnan & ynan, either));
}

TARGET_AVX512 SIMD_INLINE __m512 v512_calc_ps(__m512 x, __m512 y, const v512_ctx_t *c, int op) {
  if (c->pre) x = _mm512_mul_ps(x, c->scale_ps);
  if (c->has_b) {
    if (op == ncclSum) x = _mm512_add_ps(x, y);
    if (op == ncclProd) x = _mm512_mul_ps(x, y);
    if (op == ncclMax || op == ncclMin) x = v512_maxmin_ps(x, y, op == ncclMax);
  }
  if (c->post) x = _mm512_div_ps(x, c->div_ps);
  return x;
}

TARGET_AVX512 SIMD_INLINE __m512i v512_step_f32(__m512i x, __m512i y, const v512_ctx_t *c, int op,
                                                int sgn) {
  return _mm512_castps_si512(v512_calc_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(y), c, op));
}

TARGET_AVX512 SIMD_INLINE __m512i v512_step_f64(__m512i x, __m512i y, const v512_ctx_t *c, int op,
                                                int sgn) {
  __m512d vx = _mm512_castsi512_pd(x), vy = _mm512_castsi512_pd(y);
  if (c->pre) vx = _mm512_mul_pd(vx, c->scale_pd);
  if (c->has_b) {
    if (op == ncclSum) vx = _mm512_add_pd(vx, vy);
    if (op == ncclProd) vx = _mm512_mul_pd(vx, vy);
    if (op == ncclMax || op == ncclMin) vx = v512_maxmin_pd(vx, vy, op == ncclMax);
  }
  if (c->post) vx = _mm512_div_pd(vx, c->div_pd);
  return _mm512_castpd_si512(vx);
}

/* 32 halves -> two fp32 vectors -> 32 halves, rounded once (vcvtps2ph, nearest even). */
TARGET_AVX512 SIMD_INLINE __m512i v512_step_f16(__m512i x, __m512i y, const v512_ctx_t *c, int op,
                                                int sgn) {
  __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(x));
  __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
  __m512 ylo = _mm512_cvtph_ps(_mm512_castsi512_si256(y));
  __m512 yhi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(y, 1));
  lo = v512_calc_ps(lo, ylo, c, op);
  hi = v512_calc_ps(hi, yhi, c, op);
  __m512i r = _mm512_castsi256_si512(_mm512_cvtps_ph(lo, CVT_RNE));
  return _mm512_inserti64x4(r, _mm512_cvtps_ph(hi, CVT_RNE), 1);
}

/* fp32 -> bf16 (+ 0x7fff + lsb, NaN made quiet), narrowed to 16 words. */
TARGET_AVX512 SIMD_INLINE __m256i v512_round_bf16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i top = _mm512_srli_epi32(u, 16);
  __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  r = _mm512_srli_epi32(r, 16);
  __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, is_nan, top, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

TARGET_AVX512 SIMD_INLINE __m512 v512_widen_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

TARGET_AVX512 SIMD_INLINE __m512i v512_step_bf16(__m512i x, __m512i y, const v512_ctx_t *c, int op,
                                                 int sgn) {
  __m512 lo = v512_widen_bf16(_mm512_castsi512_si256(x));
  __m512 hi = v512_widen_bf16(_mm512_extracti64x4_epi64(x, 1));
  lo = v512_calc_ps(lo, v512_widen_bf16(_mm512_castsi512_si256(y)), c, op);
  hi = v512_calc_ps(hi, v512_widen_bf16(_mm512_extracti64x4_epi64(y, 1)), c, op);
  __m512i r = _mm512_castsi256_si512(v512_round_bf16(lo));
  return _mm512_inserti64x4(r, v512_round_bf16(hi), 1);
}

TARGET_AVX512 SIMD_INLINE __m512i v512_step_i32(__m512i x, __m512i y, const v512_ctx_t *c, int op,
                                                int sgn) {
  if (c->pre) x = _mm512_mullo_epi32(x, c->scale_i32);
  if (!c->has_b) return x;
  if (op == ncclSum) return _mm512_add_epi32(x, y);
  if (op == ncclProd) return _mm512_mullo_epi32(x, y);
  if (op == ncclMax) return sgn ? _mm512_max_epi32(x, y) : _mm512_max_epu32(x, y);
  return sgn ? _mm512_min_epi32(x, y) : _mm512_min_epu32(x, y);
}

TARGET_AVX512 SIMD_INLINE __m512i v512_step_i8(__m512i x, __m512i y, const v512_ctx_t *c, int op,
                                               int sgn) {
  if (!c->has_b) return x;
  if (op == ncclSum) return _mm512_add_epi8(x, y);
  if (op == ncclMax) return sgn ? _mm512_max_epi8(x, y) : _mm512_max_epu8(x, y);
  return sgn ? _mm512_min_epi8(x, y) : _mm512_min_epu8(x, y);
}

/* Without DQ: sum, max, min (the table never routes prod or premul here). */
TARGET_AVX512 SIMD_INLINE __m512i v512_step_i64(__m512i x, __m512i y, const v512_ctx_t *c, int op,
                                                int sgn) {
  if (!c->has_b) return x;
  if (op == ncclSum) return _mm512_add_epi64(x, y);
  if (op == ncclMax) return sgn ? _mm512_max_epi64(x, y) : _mm512_max_epu64(x, y);
  return sgn ? _mm512_min_epi64(x, y) : _mm512_min_epu64(x, y);
}

TARGET_AVX512DQ SIMD_INLINE __m512i v512_step_i64_dq(__m512i x, __m512i y, const v512_ctx_t *c,
                                                     int op, int sgn) {
  if (c->pre) x = _mm512_mullo_epi64(x, c->scale_i64);
  if (c->has_b && op == ncclProd) return _mm512_mullo_epi64(x, y);
  return v512_step_i64(x, y, c, op, sgn);
}

#define V512_KERNEL(name, TARGET, STEP, SGN, ESZ, TYPE) \
  SIMD_KERNEL(name, TARGET, v512_ctx_t, v512_ctx_init, V512_LOOP, STEP, SGN, ESZ, TYPE)

V512_KERNEL(avx512_f32, TARGET_AVX512, v512_step_f32, 0, 4, ncclFloat32)
V512_KERNEL(avx512_f64, TARGET_AVX512, v512_step_f64, 0, 8, ncclFloat64)
V512_KERNEL(avx512_f16, TARGET_AVX512, v512_step_f16, 0, 2, ncclFloat16)
V512_KERNEL(avx512_bf16, TARGET_AVX512, v512_step_bf16, 0, 2, ncclBfloat16)
V512_KERNEL(avx512_i32, TARGET_AVX512, v512_step_i32, 1, 4, ncclInt32)
V512_KERNEL(avx512_u32, TARGET_AVX512, v512_step_i32, 0, 4, ncclUint32)
V512_KERNEL(avx512_i64, TARGET_AVX512, v512_step_i64, 1, 8, ncclInt64)
V512_KERNEL(avx512_u64, TARGET_AVX512, v512_step_i64, 0, 8, ncclUint64)
V512_KERNEL(avx512_i64_dq, TARGET_AVX512DQ, v512_step_i64_dq, 1, 8, ncclInt64)
V512_KERNEL(avx512_u64_dq, TARGET_AVX512DQ, v512_step_i64_dq, 0, 8, ncclUint64)
V512_KERNEL(avx512_i8, TARGET_AVX512, v512_step_i8, 1, 1, ncclInt8)
V512_KERNEL(avx512_u8, TARGET_AVX512, v512_step_i8, 0, 1, ncclUint8)

void reduce_simd_fill_avx512(reduce_table_t *table, int have_dq) {
  table_set(table, ncclFloat32, OPS_ALL, VARIANTS_ALL, avx512_f32);
  table_set(table, ncclFloat64, OPS_ALL, VARIANTS_ALL, avx512_f64);
  table_set(table, ncclFloat16, OPS_ALL, VARIANTS_ALL, avx512_f16);
  table_set(table, ncclBfloat16, OPS_ALL, VARIANTS_ALL, avx512_bf16);
  table_set(table, ncclInt32, OPS_ALL, VARIANTS_PRE, avx512_i32);
  table_set(table, ncclUint32, OPS_ALL, VARIANTS_PRE, avx512_u32);
  if (have_dq) {
    table_set(table, ncclInt64, OPS_ALL, VARIANTS_PRE, avx512_i64_dq);
    table_set(table, ncclUint64, OPS_ALL, VARIANTS_PRE, avx512_u64_dq);
  } else {
    table_set(table, ncclInt64, OPS_NO_PROD, VARIANTS_PLAIN, avx512_i64);
    table_set(table, ncclUint64, OPS_NO_PROD, VARIANTS_PLAIN, avx512_u64);
  }
  table_set(table, ncclInt8, OPS_NO_PROD, VARIANTS_PLAIN, avx512_i8);
  table_set(table, ncclUint8, OPS_NO_PROD, VARIANTS_PLAIN, avx512_u8);
}

#else /* not x86-64: reduce.c never picks a SIMD ISA, the tables stay scalar */

void reduce_simd_fill_avx2(reduce_table_t *table) {
  (void)table_set;
}
void reduce_simd_fill_avx512(reduce_table_t *table, int have_dq) {}

#endif
