// CRC32C (src/crc32c.c): the check value of the standard (RFC 3720's "123456789"), the
// SSE 4.2 path against the table path on every length and alignment up to 300 bytes, and
// continuation over any split point.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "crc32c.h"

TEST(Crc32c, CheckValues) {
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c_portable(0, "123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c(0, "", 0), 0u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff);
  EXPECT_EQ(crc32c(0, zeros.data(), 32), 0x8a9136aau);  // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(crc32c(0, ones.data(), 32), 0x62a8ab43u);   // 32 bytes of 0xff
}

TEST(Crc32c, HardwareAndTableAgreeAndContinue) {
  std::vector<unsigned char> buf(320);
  uint32_t x = 12345;
  for (auto &b : buf) b = (unsigned char)((x = x * 1103515245u + 12345u) >> 24);
  for (size_t off = 0; off < 8; off++)
    for (size_t len = 0; len + off <= 300; len++) {
      uint32_t whole = crc32c(0, buf.data() + off, len);
      ASSERT_EQ(whole, crc32c_portable(0, buf.data() + off, len)) << off << " " << len;
      size_t cut = len / 3;
      EXPECT_EQ(crc32c(crc32c(0, buf.data() + off, cut), buf.data() + off + cut, len - cut), whole)
          << off << " " << len;
    }
}

TEST(Crc32c, EverySingleBitFlipChangesIt) {
  std::vector<unsigned char> buf(4096, 0x5a);
  uint32_t good = crc32c(0, buf.data(), buf.size());
  for (size_t bit = 0; bit < buf.size() * 8; bit += 97) {
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    EXPECT_NE(crc32c(0, buf.data(), buf.size()), good) << bit;
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
}
