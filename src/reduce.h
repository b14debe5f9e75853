/* Reduction kernels on host memory: every datatype x op, vectorised with runtime dispatch.
 *
 * The engine calls these on whole chunks. An op is described by reduce_op_t:
 *   base    ncclSum / ncclProd / ncclMax / ncclMin
 *   premul  PreMulSum: the *local* operand is multiplied by `scalar` before it is combined
 *   postdiv Avg: the *final* result is divided by `divisor` (the number of ranks)
 * ncclAvg is expressed as {base = ncclSum, postdiv = 1, divisor = nranks};
 * a PreMulSum op as {base = ncclSum, premul = 1, scalar = bytes of one element}.
 *
 * fp16, bf16 and fp8 (e4m3, e5m2) are computed in fp32 and rounded to nearest even once per
 * kernel call (fp8 conversions saturate to the largest finite value).
 * Integer division truncates toward zero (C semantics); integer sums wrap.
 * dst may alias either input (in-place). Counts are in elements, size_t throughout.
 */
#ifndef TUTTI_REDUCE_H_
#define TUTTI_REDUCE_H_

#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct reduce_op {
  ncclDataType_t type;
  ncclRedOp_t base;        /* ncclSum, ncclProd, ncclMax or ncclMin */
  int premul;              /* 1: apply scalar to the local operand (flag REDUCE_PRE) */
  int postdiv;             /* 1: divide by divisor when REDUCE_POST is given */
  int divisor;             /* number of ranks, for Avg */
  unsigned char scalar[8]; /* one element of `type`, for PreMulSum */
} reduce_op_t;

#define REDUCE_PRE 1  /* first operand is a rank's own input: apply premul */
#define REDUCE_POST 2 /* result is final: apply postdiv */

/* Whether op with these flags changes values (a scale or a division applies). */
static inline int reduce_transforms(const reduce_op_t *op, int flags) {
  return ((flags & REDUCE_PRE) && op->premul) || ((flags & REDUCE_POST) && op->postdiv);
}

/* dst[i] = post(pre(src[i])). Without premul/postdiv this is a memcpy. */
void reduce_copy(const reduce_op_t *op, void *dst, const void *src, size_t count, int flags);
/* dst[i] = post(pre(a[i]) OP b[i]). */
void reduce_combine(const reduce_op_t *op, void *dst, const void *a, const void *b, size_t count,
                    int flags);

/* "avx512", "avx2" or "scalar": the instruction set picked at load time
 * (TUTTI_REDUCE_ISA=scalar|avx2|avx512 forces a lower one). */
const char *reduce_isa_name(void);
/* Forces an ISA for tests; returns 0 when the CPU cannot run it. */
int reduce_force_isa(const char *name);

/* Scalar conversions (exposed for tests and tools), round to nearest even. */
float tutti_half_to_float(uint16_t h);
uint16_t tutti_float_to_half(float f);
float tutti_bf16_to_float(uint16_t b);
uint16_t tutti_float_to_bf16(float f);
float tutti_fp8e4m3_to_float(uint8_t v);
uint8_t tutti_float_to_fp8e4m3(float f);
float tutti_fp8e5m2_to_float(uint8_t v);
uint8_t tutti_float_to_fp8e5m2(float f);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_REDUCE_H_ */
