/* Closed-form input patterns of the tutti benchmarks (see pattern.c), used by common.c. The
 * collectives themselves only see perf_fill_blocks() and perf_fill_untouched() (common.h). */
#ifndef TUTTI_PERF_PATTERN_H_
#define TUTTI_PERF_PATTERN_H_

#include "common.h"

/* Every byte of a receive buffer is set to this before a checked call: NaN in every float type,
 * -1 or the maximum in the integer types, never an expected value. */
#define PERF_POISON_BYTE 0xff

/* Chooses the pattern of case c (its type, op and nranks; `reduces`: whether the collective
 * combines ranks' data) and points c->pattern at a new one. */
void pattern_init(perf_case_t *c, int reduces);
void pattern_free(perf_case_t *c);

/* Number of elements among n at got / want that differ: bit for bit, except that avg on
 * floating types allows one unit in the last place (see pattern.c). */
double pattern_count_wrong(const perf_case_t *c, const void *got, const void *want, size_t n);

#endif /* TUTTI_PERF_PATTERN_H_ */
