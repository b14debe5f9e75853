/* bf16 and fp16 codecs: each element cast to 16 bits, round to nearest even.
 *
 * Payload: count little-endian uint16 values. Every bit pattern is a value, so the only check
 * on receipt is the length (done by the caller from the header). Bound, per element:
 * |decode(encode(x)) - x| <= 2^-8 |x| for bf16 (8 significant bits), 2^-11 |x| for fp16 in its
 * normal range (|x| >= 2^-14; below it the absolute error is at most 2^-25), and x beyond
 * 65504 becomes infinity in fp16: the caller scales by 1 / nranks before the cast for ncclAvg,
 * so an average only overflows where an input did.
 */
#include <string.h>

#include "compress/compress.h"
#include "reduce.h"

static size_t cast_payload_bytes(size_t count) {
  return 2 * count;
}

static const char *cast_check(const uint8_t *in, size_t count) {
  return NULL;
}

static inline uint16_t load_u16(const uint8_t *p, size_t i) {
  uint16_t v;
  memcpy(&v, p + 2 * i, 2); /* little-endian hosts only (checked in compress_wire.c) */
  return v;
}

static inline void store_u16(uint8_t *p, size_t i, uint16_t v) {
  memcpy(p + 2 * i, &v, 2);
}

/* bf16: the top half of the fp32 bits after rounding (NaN kept quiet, as tutti_float_to_bf16). */
static inline uint16_t bf16_from(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static inline float bf16_to(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static void bf16_encode(const float *x, size_t count, uint8_t *out) {
  for (size_t i = 0; i < count; i++) store_u16(out, i, bf16_from(x[i]));
}

static void bf16_decode(const uint8_t *in, size_t count, float *out) {
  for (size_t i = 0; i < count; i++) out[i] = bf16_to(load_u16(in, i));
}

static void bf16_decode_add(const uint8_t *in, size_t count, float *acc) {
  for (size_t i = 0; i < count; i++) acc[i] += bf16_to(load_u16(in, i));
}

static void fp16_encode(const float *x, size_t count, uint8_t *out) {
  for (size_t i = 0; i < count; i++) store_u16(out, i, tutti_float_to_half(x[i]));
}

static void fp16_decode(const uint8_t *in, size_t count, float *out) {
  for (size_t i = 0; i < count; i++) out[i] = tutti_half_to_float(load_u16(in, i));
}

static void fp16_decode_add(const uint8_t *in, size_t count, float *acc) {
  for (size_t i = 0; i < count; i++) acc[i] += tutti_half_to_float(load_u16(in, i));
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
