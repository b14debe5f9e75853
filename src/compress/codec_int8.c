/* int8 codec: blocks of COMPRESS_INT8_BLOCK (256) elements, each with its own fp32 scale.
 *
 * Payload for count elements, nb = ceil(count / 256) blocks:
 *   float32 scale[nb]      little-endian; scale = max |x| of the block / 127, 0 for a zero block
 *   int8    q[count]       q = round-half-away(x * (1 / scale)), in [-127, 127]
 * decode: x' = q * scale. Bound, per element: |x' - x| <= scale (1/2 + 2^-14), about max|x| of
 * its block / 254. Derivation in units of scale: the rounding to an integer 1/2; v = x * (1/s)
 * carries two fp32 roundings, 2^-23 |v| <= 127 * 2^-23 < 2^-16; v + 0.5 rounds by at most
 * half an ulp of 128, 2^-17; s = m / 127 and q * s round by 2^-24 relative each, at most
 * 2 * 127.5 * 2^-24 < 2^-16. Sum: 1/2 + 2^-16 + 2^-17 + 2^-16 < 1/2 + 2^-14.
 * Checked on receipt: every scale finite and >= 0, no q equal to -128. A block with a non-finite
 * element cannot be encoded faithfully: its scale becomes NaN, which the receiver rejects.
 */
#include <math.h>
#include <string.h>

#include "compress/compress.h"

#define B COMPRESS_INT8_BLOCK

static size_t int8_nblocks(size_t count) {
  return (count + B - 1) / B;
}

static size_t int8_payload_bytes(size_t count) {
  return 4 * int8_nblocks(count) + count;
}

/* max |scale * x| / 127 of a block, NaN if the block holds a NaN or an infinity. The maximum is
 * taken on the bits of |v| (for floats that are not NaN their order is the order of the
 * magnitudes), which vectorizes where a float maximum would not. */
COMPRESS_SIMD static float block_scale(const float *x, size_t n, float scale) {
  uint32_t top = 0;
  for (size_t i = 0; i < n; i++) {
    float v = scale * x[i];
    uint32_t bits;
    memcpy(&bits, &v, 4);
    bits &= 0x7fffffffu;
    top = bits > top ? bits : top;
  }
  if (top >= 0x7f800000u) return NAN;
  float m;
  memcpy(&m, &top, 4);
  return m / 127.0f;
}

/* |v| <= 127 (1 + 2^-23) here (|x| <= max, inv = 127 / max, two roundings), so v + 1/2 with
 * v's sign truncates to [-127, 127] without a clamp. */
COMPRESS_SIMD static void int8_encode_block(const float *x, size_t n, float scale, float inv,
                                            int8_t *q) {
  for (size_t i = 0; i < n; i++) {
    float v = (scale * x[i]) * inv;
    q[i] = (int8_t)(int32_t)(v + copysignf(0.5f, v)); /* half away from zero */
  }
}

/* A block whose scale is subnormal: 1 / s overflows to infinity (and 0 * inf is NaN), and s itself
 * is rounded to a few bits, so the quotient is computed directly and clamped to [-127, 127]. */
COMPRESS_SIMD static void int8_encode_block_tiny(const float *x, size_t n, float scale, float s,
                                                 int8_t *q) {
  for (size_t i = 0; i < n; i++) {
    float v = fminf(fmaxf((scale * x[i]) / s, -127.0f), 127.0f);
    q[i] = (int8_t)(int32_t)(v + copysignf(0.5f, v));
  }
}

static void int8_encode(const float *x, size_t count, float scale, uint8_t *out) {
  size_t nb = int8_nblocks(count);
  int8_t *q = (int8_t *)(out + 4 * nb);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * B, n = count - lo < B ? count - lo : B;
    float s = block_scale(x + lo, n, scale);
    memcpy(out + 4 * b, &s, 4);
    if (s > 0 && isfinite(s) && isfinite(1.0f / s))
      int8_encode_block(x + lo, n, scale, 1.0f / s, q + lo);
    else if (s > 0 && isfinite(s))
      int8_encode_block_tiny(x + lo, n, scale, s, q + lo);
    else /* a zero block, or one the receiver rejects for its NaN scale */
      memset(q + lo, 0, n);
  }
}

COMPRESS_SIMD static const char *int8_check(const uint8_t *in, size_t count) {
  size_t nb = int8_nblocks(count);
  for (size_t b = 0; b < nb; b++) {
    float s;
    memcpy(&s, in + 4 * b, 4);
    if (!(s >= 0.0f) || !isfinite(s)) return "int8 block scale is negative or not finite";
  }
  const uint8_t *q = in + 4 * nb;
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) bad += q[i] == 0x80;
  return bad ? "int8 value -128 is outside [-127, 127]" : NULL;
}

COMPRESS_SIMD static void int8_decode(const uint8_t *in, size_t count, float *out) {
  size_t nb = int8_nblocks(count);
  const int8_t *q = (const int8_t *)(in + 4 * nb);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * B, n = count - lo < B ? count - lo : B;
    float s;
    memcpy(&s, in + 4 * b, 4);
    for (size_t i = 0; i < n; i++) out[lo + i] = (float)q[lo + i] * s;
  }
}

COMPRESS_SIMD static void int8_decode_add(const uint8_t *in, size_t count, float *acc) {
  size_t nb = int8_nblocks(count);
  const int8_t *q = (const int8_t *)(in + 4 * nb);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * B, n = count - lo < B ? count - lo : B;
    float s;
    memcpy(&s, in + 4 * b, 4);
    for (size_t i = 0; i < n; i++) acc[lo + i] += (float)q[lo + i] * s;
  }
}

const compress_codec_t compress_codec_int8 = {
    .name = "int8",
    .kind = tuttiCompressInt8,
    .error_feedback = 1,
    .payload_bytes = int8_payload_bytes,
    .encode = int8_encode,
    .check = int8_check,
    .decode = int8_decode,
    .decode_add = int8_decode_add,
};
