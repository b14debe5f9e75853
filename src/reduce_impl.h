/* Private interface between the reduction dispatcher (reduce.c) and its SIMD kernels
 * (reduce_simd.c). Nothing outside these two files includes it.
 *
 * A kernel computes dst[i] = post(pre(a[i]) OP b[i]) for one datatype; b == NULL means "no
 * second operand" (reduce_copy with premul/postdiv), so the result is post(pre(a[i])).
 * Kernels are kept in one table per instruction set, indexed by
 *   [datatype][base op][variant]   variant = REDUCE_VARIANT(pre, post), 0..3
 * The scalar table is complete; a SIMD table starts as a copy of it and overrides the entries
 * its ISA covers, so every lookup gives a kernel with the same bitwise results.
 */
#ifndef TUTTI_REDUCE_IMPL_H_
#define TUTTI_REDUCE_IMPL_H_

#include <stddef.h>
#include <stdint.h>

#include "reduce.h"
#include "reduce_ops.h" /* reduce_args_t and the element-wise arithmetic */

#define REDUCE_NUM_BASE_OPS 4
#define REDUCE_NUM_VARIANTS 4
#define REDUCE_VARIANT(pre, post) ((pre) | ((post) << 1))

typedef void (*reduce_kernel_t)(void *dst, const void *a, const void *b, size_t count,
                                const reduce_args_t *args);

typedef struct reduce_table {
  reduce_kernel_t fn[ncclNumTypes][REDUCE_NUM_BASE_OPS][REDUCE_NUM_VARIANTS];
} reduce_table_t;

#ifdef __cplusplus
extern "C" {
#endif
/* Decodes op and flags into args; returns 0 for a type or op outside the table. */
int reduce_args_decode(const reduce_op_t *op, int flags, reduce_args_t *args);
#ifdef __cplusplus
}
#endif

/* Runs the scalar kernel on elements [from, count) of a call: the tail of a SIMD loop. */
void reduce_scalar_tail(ncclDataType_t type, void *dst, const void *a, const void *b, size_t from,
                        size_t count, const reduce_args_t *args);

/* Overrides the entries of `table` that the ISA implements. `have_dq` says AVX-512DQ is there
 * (64-bit integer multiply). Call only when the CPU supports the ISA. */
void reduce_simd_fill_avx2(reduce_table_t *table);
void reduce_simd_fill_avx512(reduce_table_t *table, int have_dq);

#endif /* TUTTI_REDUCE_IMPL_H_ */
