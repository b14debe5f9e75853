/* Reduction kernels on host memory: conversions, scalar kernels and ISA dispatch.
 *
 * Every call decodes its reduce_op_t once into reduce_args_t (scale and divisor in the compute
 * type, effective pre/post flags), then runs one kernel from the table of the current ISA:
 *
 *   table[isa][datatype][base op][variant]      variant = pre | post << 1
 *
 * The scalar table is complete and is the reference: the AVX2 and AVX-512 tables
 * (reduce_simd.c) start as copies of it and replace the entries they vectorise, with the same
 * order of operations, so every ISA gives bitwise identical results. The scalar kernels are loops
 * over the element functions of reduce_ops.h, which the CUDA kernels (src/cuda/) run as well:
 *
 *   v = load(a[i]) (fp16/bf16/fp8 widened to fp32)
 *   if pre:  v = v * scale          (integers: wrapping multiply)
 *   if b:    v = v OP load(b[i])    (max, min: order-free, as reduce_ops.h defines them)
 *   if post: v = v / divisor        (integers: truncates toward zero)
 *   dst[i] = store(v)               (one rounding to the output type, nearest even)
 *
 * No FMA contraction anywhere (the pragma below), so a*s + b is two roundings on every ISA.
 * The ISA is picked once (pthread_once) from the CPU; TUTTI_REDUCE_ISA caps it.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "reduce.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "core.h"
#include "reduce_impl.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#define REDUCE_INLINE static inline __attribute__((always_inline))

/* ---- conversions (the arithmetic itself is in reduce_ops.h, shared with the GPU kernels) ---- */

float tutti_half_to_float(uint16_t h) {
  return ro_half_to_float(h);
}
uint16_t tutti_float_to_half(float f) {
  return ro_float_to_half(f);
}
float tutti_bf16_to_float(uint16_t b) {
  return ro_bf16_to_float(b);
}
uint16_t tutti_float_to_bf16(float f) {
  return ro_float_to_bf16(f);
}
float tutti_fp8e4m3_to_float(uint8_t v) {
  return ro_fp8e4m3_to_float(v);
}
uint8_t tutti_float_to_fp8e4m3(float f) {
  return ro_float_to_fp8e4m3(f);
}
float tutti_fp8e5m2_to_float(uint8_t v) {
  return ro_fp8e5m2_to_float(v);
}
uint8_t tutti_float_to_fp8e5m2(float f) {
  return ro_float_to_fp8e5m2(f);
}

/* ---- types ---- */

/* The one table of element sizes; tuttiTypeSize (tutti.h) is how the rest of the library and
 * its users read it. */
static const size_t type_sizes[ncclNumTypes] = {
    [ncclInt8] = 1,    [ncclUint8] = 1,    [ncclInt32] = 4,      [ncclUint32] = 4,
    [ncclInt64] = 8,   [ncclUint64] = 8,   [ncclFloat16] = 2,    [ncclFloat32] = 4,
    [ncclFloat64] = 8, [ncclBfloat16] = 2, [ncclFloat8e4m3] = 1, [ncclFloat8e5m2] = 1,
};

API size_t tuttiTypeSize(ncclDataType_t type) {
  return (unsigned)type < ncclNumTypes ? type_sizes[type] : 0;
}

/* ---- scalar kernels: types computed in fp32 (fp32, fp16, bf16, fp8) ---- */

/* fp8 has 256 codes: loads read a table filled when the library is loaded (a constructor, so
 * every path sees it filled) from the exact conversions above, 1 KiB each, which stays in L1. */
static float fp8_table[2][256]; /* [0] e4m3, [1] e5m2 */

__attribute__((constructor)) static void fp8_tables_fill(void) {
  for (int v = 0; v < 256; v++) {
    fp8_table[0][v] = tutti_fp8e4m3_to_float((uint8_t)v);
    fp8_table[1][v] = tutti_fp8e5m2_to_float((uint8_t)v);
  }
}

/* Loads: fp8 from the tables, every other type through reduce_ops.h. */
REDUCE_INLINE float f32_load(const void *p, size_t i, ncclDataType_t type) {
  switch (type) {
    case ncclFloat8e4m3:
      return fp8_table[0][((const uint8_t *)p)[i]];
    case ncclFloat8e5m2:
      return fp8_table[1][((const uint8_t *)p)[i]];
    default:
      return ro_f32_load(p, i, type);
  }
}

REDUCE_INLINE void f32_loop(void *dst, const void *a, const void *b, size_t n,
                            const reduce_args_t *args, ncclRedOp_t base, ncclDataType_t type) {
  for (size_t i = 0; i < n; i++) {
    float bv = b ? f32_load(b, i, type) : 0.0f;
    ro_f32_store(dst, i, type, ro_f32_elem(args, base, f32_load(a, i, type), b != NULL, bv));
  }
}

/* One function per type; the switch picks a loop (f32_loop, int_loop) with the op folded in. */
#define REDUCE_KERNEL(name, loop, type)                                                            \
  static void name(void *dst, const void *a, const void *b, size_t n, const reduce_args_t *args) { \
    switch (args->base) {                                                                          \
      case ncclSum:                                                                                \
        loop(dst, a, b, n, args, ncclSum, type);                                                   \
        break;                                                                                     \
      case ncclProd:                                                                               \
        loop(dst, a, b, n, args, ncclProd, type);                                                  \
        break;                                                                                     \
      case ncclMax:                                                                                \
        loop(dst, a, b, n, args, ncclMax, type);                                                   \
        break;                                                                                     \
      default:                                                                                     \
        loop(dst, a, b, n, args, ncclMin, type);                                                   \
    }                                                                                              \
  }
#define REDUCE_F32_KERNEL(name, type) REDUCE_KERNEL(name, f32_loop, type)

REDUCE_F32_KERNEL(scalar_f32, ncclFloat32)
REDUCE_F32_KERNEL(scalar_f16, ncclFloat16)
REDUCE_F32_KERNEL(scalar_bf16, ncclBfloat16)
REDUCE_F32_KERNEL(scalar_e4m3, ncclFloat8e4m3)
REDUCE_F32_KERNEL(scalar_e5m2, ncclFloat8e5m2)

/* ---- scalar kernel: fp64 ---- */

REDUCE_INLINE void f64_loop(double *dst, const double *a, const double *b, size_t n,
                            const reduce_args_t *args, ncclRedOp_t base) {
  for (size_t i = 0; i < n; i++) dst[i] = ro_f64_elem(args, base, a[i], b != NULL, b ? b[i] : 0);
}

static void scalar_f64(void *dst, const void *a, const void *b, size_t n,
                       const reduce_args_t *args) {
  switch (args->base) {
    case ncclSum:
      f64_loop(dst, a, b, n, args, ncclSum);
      break;
    case ncclProd:
      f64_loop(dst, a, b, n, args, ncclProd);
      break;
    case ncclMax:
      f64_loop(dst, a, b, n, args, ncclMax);
      break;
    default:
      f64_loop(dst, a, b, n, args, ncclMin);
  }
}

/* ---- scalar kernels: integers, computed in 64 bits and wrapped to the type's width ---- */

REDUCE_INLINE void int_loop(void *dst, const void *a, const void *b, size_t n,
                            const reduce_args_t *args, ncclRedOp_t base, ncclDataType_t type) {
  for (size_t i = 0; i < n; i++) {
    uint64_t bv = b ? ro_int_load(b, i, type) : 0;
    ro_int_store(dst, i, type,
                 ro_int_elem(args, base, type, ro_int_load(a, i, type), b != NULL, bv));
  }
}

#define REDUCE_INT_KERNEL(name, type) REDUCE_KERNEL(name, int_loop, type)

REDUCE_INT_KERNEL(scalar_i8, ncclInt8)
REDUCE_INT_KERNEL(scalar_u8, ncclUint8)
REDUCE_INT_KERNEL(scalar_i32, ncclInt32)
REDUCE_INT_KERNEL(scalar_u32, ncclUint32)
REDUCE_INT_KERNEL(scalar_i64, ncclInt64)
REDUCE_INT_KERNEL(scalar_u64, ncclUint64)

static const reduce_kernel_t scalar_kernels[ncclNumTypes] = {
    [ncclInt8] = scalar_i8,       [ncclUint8] = scalar_u8,        [ncclInt32] = scalar_i32,
    [ncclUint32] = scalar_u32,    [ncclInt64] = scalar_i64,       [ncclUint64] = scalar_u64,
    [ncclFloat16] = scalar_f16,   [ncclFloat32] = scalar_f32,     [ncclFloat64] = scalar_f64,
    [ncclBfloat16] = scalar_bf16, [ncclFloat8e4m3] = scalar_e4m3, [ncclFloat8e5m2] = scalar_e5m2,
};

void reduce_scalar_tail(ncclDataType_t type, void *dst, const void *a, const void *b, size_t from,
                        size_t count, const reduce_args_t *args) {
  if (from >= count) return;
  size_t off = from * tuttiTypeSize(type);
  scalar_kernels[type]((char *)dst + off, (const char *)a + off, b ? (const char *)b + off : NULL,
                       count - from, args);
}

/* ---- ISA selection ---- */

enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_COUNT };

static const char *const isa_names[ISA_COUNT] = {"scalar", "avx2", "avx512"};
static reduce_table_t isa_tables[ISA_COUNT];
static int isa_best = ISA_SCALAR; /* the highest the CPU runs; written once under isa_once */
static atomic_int isa_current = ISA_SCALAR;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* __builtin_cpu_supports has no "f16c" on every compiler; CPUID.1:ECX.F16C[bit 29]. The OS
 * saving YMM state is already implied by the avx2 check. */
static int cpu_has_f16c(void) {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  return (ecx & bit_F16C) != 0;
}

static int isa_detect(int *have_dq) {
  __builtin_cpu_init();
  *have_dq = __builtin_cpu_supports("avx512dq");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && cpu_has_f16c()) return ISA_AVX2;
  return ISA_SCALAR;
}
#else
static int isa_detect(int *have_dq) {
  *have_dq = 0;
  return ISA_SCALAR;
}
#endif

static int isa_lookup(const char *name) {
  for (int i = 0; i < ISA_COUNT; i++) {
    if (name && strcmp(name, isa_names[i]) == 0) return i;
  }
  return -1;
}

static void table_fill_scalar(reduce_table_t *table) {
  for (int t = 0; t < ncclNumTypes; t++) {
    for (int op = 0; op < REDUCE_NUM_BASE_OPS; op++) {
      for (int v = 0; v < REDUCE_NUM_VARIANTS; v++) table->fn[t][op][v] = scalar_kernels[t];
    }
  }
}

/* Builds every table the CPU can run (AVX-512 tables keep AVX2 kernels where they add none),
 * then applies the TUTTI_REDUCE_ISA cap. */
static void isa_init(void) {
  int have_dq = 0;
  isa_best = isa_detect(&have_dq);
  table_fill_scalar(&isa_tables[ISA_SCALAR]);
  isa_tables[ISA_AVX2] = isa_tables[ISA_SCALAR];
  if (isa_best >= ISA_AVX2) reduce_simd_fill_avx2(&isa_tables[ISA_AVX2]);
  isa_tables[ISA_AVX512] = isa_tables[ISA_AVX2];
  if (isa_best >= ISA_AVX512) reduce_simd_fill_avx512(&isa_tables[ISA_AVX512], have_dq);
  int pick = isa_best;
  const char *want = tutti_getenv("REDUCE_ISA");
  int cap = isa_lookup(want);
  if (want && cap < 0)
    WARN("setting REDUCE_ISA=\"%s\" is not scalar, avx2 or avx512; ignored", want);
  if (cap >= 0 && cap < pick) pick = cap;
  atomic_store(&isa_current, pick);
}

static const reduce_table_t *isa_table(void) {
  pthread_once(&isa_once, isa_init);
  return &isa_tables[atomic_load_explicit(&isa_current, memory_order_relaxed)];
}

const char *reduce_isa_name(void) {
  pthread_once(&isa_once, isa_init);
  return isa_names[atomic_load(&isa_current)];
}

int reduce_force_isa(const char *name) {
  pthread_once(&isa_once, isa_init);
  int isa = isa_lookup(name);
  if (isa < 0 || isa > isa_best) return 0;
  atomic_store(&isa_current, isa);
  return 1;
}

/* ---- entry points ---- */

/* Loads op->scalar (one element of the type) as an fp32, fp64 or 64-bit integer scale. The
 * bytes are copied first: op->scalar is not aligned for 8-byte loads. */
static void args_decode_scale(const reduce_op_t *op, reduce_args_t *args) {
  uint64_t s[1];
  memcpy(s, op->scalar, sizeof s);
  if (op->type == ncclFloat64) {
    memcpy(&args->scale_f64, s, sizeof(double));
  } else if (op->type == ncclFloat32 || op->type == ncclFloat16 || op->type == ncclBfloat16 ||
             op->type == ncclFloat8e4m3 || op->type == ncclFloat8e5m2) {
    args->scale_f32 = ro_f32_load(s, 0, op->type);
  } else {
    args->scale_int = ro_int_load(s, 0, op->type);
  }
}

/* Returns 0 for a type or op outside the table. */
int reduce_args_decode(const reduce_op_t *op, int flags, reduce_args_t *args) {
  if ((unsigned)op->type >= ncclNumTypes || (unsigned)op->base >= REDUCE_NUM_BASE_OPS) return 0;
  memset(args, 0, sizeof *args);
  args->base = op->base;
  args->pre = op->premul && (flags & REDUCE_PRE);
  args->post = op->postdiv && (flags & REDUCE_POST);
  if (args->pre) args_decode_scale(op, args);
  int64_t div = op->divisor >= 1 ? op->divisor : 1;
  args->div_int = div;
  args->div_f32 = (float)div;
  args->div_f64 = (double)div;
  return 1;
}

/* Fewer bytes than one AVX2 vector take the scalar kernel: a vector kernel would set up its
 * constants and then run the same scalar loop on them (AVX2's tail), or one masked step whose
 * bits the ISA tests hold equal to it (AVX-512). A small all-reduce's folds are this size. */
#define REDUCE_TINY_BYTES 32

static reduce_kernel_t kernel_for(const reduce_args_t *args, ncclDataType_t type, size_t count) {
  if (count * type_sizes[type] < REDUCE_TINY_BYTES) return scalar_kernels[type]; /* every op */
  return isa_table()->fn[type][args->base][REDUCE_VARIANT(args->pre, args->post)];
}

/* The arguments of a reduction that neither scales nor divides, per base op: what
 * reduce_args_decode gives then, without building them per call. */
static const reduce_args_t plain_args[REDUCE_NUM_BASE_OPS] = {
    [ncclSum] = {.base = ncclSum, .div_int = 1, .div_f32 = 1.0f, .div_f64 = 1.0},
    [ncclProd] = {.base = ncclProd, .div_int = 1, .div_f32 = 1.0f, .div_f64 = 1.0},
    [ncclMax] = {.base = ncclMax, .div_int = 1, .div_f32 = 1.0f, .div_f64 = 1.0},
    [ncclMin] = {.base = ncclMin, .div_int = 1, .div_f32 = 1.0f, .div_f64 = 1.0},
};

void reduce_copy(const reduce_op_t *op, void *dst, const void *src, size_t count, int flags) {
  reduce_args_t args;
  if (count == 0 || (unsigned)op->type >= ncclNumTypes || (unsigned)op->base >= REDUCE_NUM_BASE_OPS)
    return;
  if (!reduce_transforms(op, flags)) {
    if (dst != src) copy_bytes(dst, src, count * type_sizes[op->type]); /* a plain copy */
    return;
  }
  if (!reduce_args_decode(op, flags, &args)) return;
  kernel_for(&args, op->type, count)(dst, src, NULL, count, &args);
}

void reduce_combine(const reduce_op_t *op, void *dst, const void *a, const void *b, size_t count,
                    int flags) {
  reduce_args_t args;
  if (count == 0 || (unsigned)op->type >= ncclNumTypes || (unsigned)op->base >= REDUCE_NUM_BASE_OPS)
    return;
  const reduce_args_t *use = &plain_args[op->base];
  if (reduce_transforms(op, flags)) {
    reduce_args_decode(op, flags, &args);
    use = &args;
  }
  kernel_for(use, op->type, count)(dst, a, b, count, use);
}
