// The engine's bulk copies (src/copy.c): copy_bytes and copy_stream give exactly the source's
// bytes and touch nothing around the destination, at every distance between the two buffers'
// page offsets that decides copy_bytes' path (memcpy, or the vector loop where the destination's
// offset is 1-63 bytes past the source's) and at sizes around the loop widths and thresholds.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "copy.h"

namespace {

const size_t kSizes[] = {0, 1, 63, 64, 65, 127, 128, 129, 1023, 1024, 1025, 4096 + 17, 65536 + 5};
// dst page offset minus src page offset, modulo 4096 (src sits 256 bytes into its page)
const size_t kAhead[] = {0, 1, 15, 16, 17, 31, 32, 48, 63, 64, 65, 128, 2048, 4032, 4080, 4095};

struct Pages {  // page-aligned block with room for a guard page on both sides of a copy
  explicit Pages(size_t bytes) : size(bytes) {
    if (posix_memalign(reinterpret_cast<void **>(&p), 4096, bytes) != 0) p = nullptr;
  }
  ~Pages() { free(p); }
  uint8_t *p = nullptr;
  size_t size;
};

void check_copy(void (*copy)(void *, const void *, size_t), const char *name) {
  const size_t span = 65536 + 3 * 4096;
  Pages src(span), dst(span);
  ASSERT_NE(src.p, nullptr);
  ASSERT_NE(dst.p, nullptr);
  for (size_t i = 0; i < span; i++) src.p[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t ahead : kAhead)
    for (size_t n : kSizes) {
      const uint8_t *s = src.p + 4096 + 256;
      uint8_t *d = dst.p + 4096 + ((256 + ahead) & 4095);
      memset(dst.p, 0xA5, span);
      copy(d, s, n);
      ASSERT_EQ(memcmp(d, s, n), 0)
          << name << ": " << n << " bytes, dst " << ahead << " bytes past src's page offset";
      for (uint8_t *g = dst.p; g < d; g++) ASSERT_EQ(*g, 0xA5) << name << ": wrote before dst";
      for (uint8_t *g = d + n; g < dst.p + span; g++)
        ASSERT_EQ(*g, 0xA5) << name << ": wrote past dst + " << n;
    }
}

TEST(Copy, CopyBytesIsExactAtEveryPageOffsetDistance) {
  check_copy(copy_bytes, "copy_bytes");
}

TEST(Copy, CopyStreamIsExactAtEveryPageOffsetDistance) {
  check_copy(copy_stream, "copy_stream");
}

// The path copy_bytes takes, so that the exactness test above covers the vector loop too.
TEST(Copy, VectorLoopWhereTheDestinationIsJustPastTheSourcesPageOffset) {
  alignas(4096) static uint8_t a[3 * 4096], b[3 * 4096];
#if defined(__x86_64__)
  EXPECT_EQ(copy_uses_vector(b + 16, a, 16384), 1);        // malloc's heap block, slot at 0
  EXPECT_EQ(copy_uses_vector(b + 4096 + 1, a, 4096), 1);   // 1 byte past
  EXPECT_EQ(copy_uses_vector(b + 63, a + 4096, 1024), 1);  // 63 past, at the size threshold
#else
  EXPECT_EQ(copy_uses_vector(b + 16, a, 16384), 0);
#endif
  EXPECT_EQ(copy_uses_vector(b, a, 16384), 0);       // same page offset
  EXPECT_EQ(copy_uses_vector(b + 64, a, 16384), 0);  // far enough
  EXPECT_EQ(copy_uses_vector(b, a + 16, 16384), 0);  // destination behind the source
  EXPECT_EQ(copy_uses_vector(b + 16, a, 1023), 0);   // below rep movsb's sizes
}

}  // namespace
