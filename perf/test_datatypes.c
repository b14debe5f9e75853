/* Checks the benchmarks' own datatype conversions (datatypes.c), since every #wrong that
 * all_reduce_perf reports for fp16 / bf16 / fp8 rests on them:
 *   fp16: every bit pattern decodes like the compiler's _Float16 and encodes back; float
 *         samples round like the compiler's conversion (when the compiler has _Float16);
 *   bf16: float samples round like the bit-level round-to-nearest-even reference;
 *   fp8:  every bit pattern round-trips, 448 / 57344 are the largest finite values and
 *         larger values saturate to them.
 * Prints the first mismatches and exits 1 if there is any.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "datatypes.h"

#define SAMPLE_STRIDE 4099u /* ~1M float samples over all 2^32 patterns */

static int failures;

static void expect_bits(const char *what, double in, unsigned got, unsigned want) {
  if (got == want) return;
  if (failures++ < 10) printf("%s(%.9g): got 0x%x, want 0x%x\n", what, in, got, want);
}

static unsigned encode(const perf_type_t *t, double v) {
  uint16_t out = 0; /* little endian: an 8-bit type writes the low byte */
  t->set(&out, 0, v);
  return t->size == 1 ? (unsigned)(out & 0xff) : out;
}

static double decode(const perf_type_t *t, unsigned bits) {
  uint16_t in = (uint16_t)bits;
  return t->get(&in, 0);
}

static float float_of(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

static void test_half(void) {
  const perf_type_t *h = perf_type_by_name("half");
  for (unsigned b = 0; b < 65536; b++) {
    double d = decode(h, b);
    if (!isnan(d)) expect_bits("half round trip", d, encode(h, d), b);
#ifdef __FLT16_MAX__
    uint16_t bits = (uint16_t)b;
    _Float16 ref;
    memcpy(&ref, &bits, sizeof(ref));
    if (!isnan(d) && d != (double)ref) expect_bits("half decode", d, 0, b);
#endif
  }
#ifdef __FLT16_MAX__
  for (uint64_t u = 0; u < (1ull << 32); u += SAMPLE_STRIDE) {
    float f = float_of((uint32_t)u);
    if (isnan(f)) continue;
    _Float16 ref = (_Float16)f;
    uint16_t want;
    memcpy(&want, &ref, sizeof(want));
    expect_bits("half encode", f, encode(h, f), want);
  }
#endif
}

static void test_bf16(void) {
  const perf_type_t *bf = perf_type_by_name("bfloat16");
  for (uint64_t u = 0; u < (1ull << 32); u += SAMPLE_STRIDE) {
    float f = float_of((uint32_t)u);
    if (isnan(f)) continue;
    uint32_t bits = (uint32_t)u;
    unsigned want = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16; /* round to nearest even */
    expect_bits("bf16 encode", f, encode(bf, f), want);
  }
}

static void test_fp8(const char *name, double max_finite, unsigned max_bits) {
  const perf_type_t *t = perf_type_by_name(name);
  for (unsigned b = 0; b < 256; b++) {
    double d = decode(t, b);
    if (!isnan(d) && !isinf(d)) expect_bits(name, d, encode(t, d), b);
  }
  expect_bits(name, max_finite, encode(t, max_finite), max_bits);
  expect_bits(name, 2 * max_finite, encode(t, 2 * max_finite), max_bits); /* saturates */
  expect_bits(name, -2 * max_finite, encode(t, -2 * max_finite), 0x80 | max_bits);
  if (decode(t, max_bits) != max_finite) expect_bits(name, max_finite, 0, max_bits);
}

int main(void) {
  test_half();
  test_bf16();
  test_fp8("f8e4m3", 448.0, 0x7e);
  test_fp8("f8e5m2", 57344.0, 0x7b);
  printf("perf datatypes: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
