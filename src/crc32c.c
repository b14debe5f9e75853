/* CRC32C, reflected polynomial 0x82f63b78: SSE 4.2's crc32 instruction, 8 bytes at a time,
 * where the CPU has it (picked once), else a table of 8 x 256 entries ("slicing by 8": 8 bytes
 * per step, each byte through its own table). Both give the same bits. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82f63b78u

static uint32_t crc_table[8][256];

static void crc_table_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t len) {
  for (; len >= 8; p += 8, len -= 8) {
    uint64_t w;
    memcpy(&w, p, 8); /* little-endian hosts: the first byte is the low byte */
    w ^= c;
    c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff] ^
        crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^
        crc_table[2][(w >> 40) & 0xff] ^ crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
  }
  for (; len; p++, len--) c = (c >> 8) ^ crc_table[0][(c ^ *p) & 0xff];
  return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p,
                                                         size_t len) {
  uint64_t c64 = c;
  for (; len >= 8; p += 8, len -= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  c = (uint32_t)c64;
  for (; len; p++, len--) c = _mm_crc32_u8(c, *p);
  return c;
}
#define CRC_HAVE_HW 1
#endif

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_use_hw;

static void crc_init(void) {
  crc_table_init();
#ifdef CRC_HAVE_HW
  __builtin_cpu_init();
  crc_use_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t crc32c_portable(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&crc_once, crc_init);
  return ~crc_soft(~crc, buf, len);
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&crc_once, crc_init);
  uint32_t c = ~crc;
#ifdef CRC_HAVE_HW
  if (crc_use_hw) return ~crc_hw(c, buf, len);
#endif
  return ~crc_soft(c, buf, len);
}
