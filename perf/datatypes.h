/* The datatypes the benchmarks know, with nccl-tests' names, and exact conversions between each
 * element type and double. The fp16 / bf16 / fp8 conversions are written here (round to nearest
 * even; fp8 saturates like the library does) so that the checks never depend on the code they
 * check. */
#ifndef TUTTI_PERF_DATATYPES_H_
#define TUTTI_PERF_DATATYPES_H_

#include <stddef.h>

#include "tutti.h"

typedef struct perf_type {
  const char *name; /* nccl-tests' name: "float", "bfloat16", "f8e4m3", ... */
  ncclDataType_t nccl;
  size_t size; /* bytes per element */
  int is_float;
  int mant_bits;                              /* fraction bits of a floating type; 0 for integers */
  double exact_max;                           /* every integer in [0, exact_max] is representable */
  double (*get)(const void *buf, size_t i);   /* element i as a double, exactly */
  void (*set)(void *buf, size_t i, double v); /* v rounded to nearest even (integers: cast) */
} perf_type_t;

extern const perf_type_t perf_types[];
extern const int perf_num_types;

/* NULL if unknown. */
const perf_type_t *perf_type_by_name(const char *name);

#endif /* TUTTI_PERF_DATATYPES_H_ */
