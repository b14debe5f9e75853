// The engine's bulk copies (src/copy.c): copy_bytes, copy_stream and the two multi-destination
// copies (copy_stream_multi, copy_bytes_multi) give
// exactly the source's bytes and touch nothing around the destination, at every distance between
// the two buffers' page offsets that decides copy_bytes' path (memcpy, or the vector loop where the
// destination's offset is 1-63 bytes past the source's) and at sizes around the loop widths and
// thresholds.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
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

// A multi-destination copy into 1-3 destinations whose offsets within a cache line agree or differ
// (copy_stream_multi pairs only the first, copy_bytes_multi both), each in its own page block
// with guards around it.
void check_multi(void (*copy)(char *const *, int, const void *, size_t), const char *name) {
  const size_t span = 65536 + 3 * 4096;
  Pages src(span), d0(span), d1(span), d2(span);
  Pages *dsts[3] = {&d0, &d1, &d2};
  ASSERT_NE(src.p, nullptr);
  for (Pages *d : dsts) {
    ASSERT_NE(d->p, nullptr);
  }
  for (size_t i = 0; i < span; i++) src.p[i] = static_cast<uint8_t>(i * 13 + 5);
  // each destination's offset into its page, per layout
  const size_t offsets[][3] = {{256, 256, 256}, {16, 16, 16}, {0, 16, 0}, {16, 16, 48}, {1, 65, 1}};
  for (int k = 1; k <= 3; k++)
    for (const auto &off : offsets)
      for (size_t n : kSizes) {
        const uint8_t *s = src.p + 4096 + 256;
        char *to[3];
        for (int j = 0; j < 3; j++) {
          memset(dsts[j]->p, 0xA5, span);
          to[j] = reinterpret_cast<char *>(dsts[j]->p + 4096 + off[j]);
        }
        copy(to, k, s, n);
        for (int j = 0; j < 3; j++) {
          const uint8_t *d = reinterpret_cast<uint8_t *>(to[j]), *p = dsts[j]->p;
          const std::string what = std::string(name) + ": " + std::to_string(k) +
                                   " destinations, " + std::to_string(n) + " bytes, destination " +
                                   std::to_string(j) + " at offset " + std::to_string(off[j]);
          if (j < k) {
            ASSERT_EQ(memcmp(d, s, n), 0) << what;
          }
          const uint8_t *from = j < k ? d : p + span, *to_end = j < k ? d + n : p + span;
          for (const uint8_t *g = p; g < from; g++) ASSERT_EQ(*g, 0xA5) << what << ": wrote before";
          for (const uint8_t *g = to_end; g < p + span; g++)
            ASSERT_EQ(*g, 0xA5) << what << ": wrote past";
        }
      }
}

TEST(Copy, CopyStreamMultiIsExactInEveryDestination) {
  check_multi(copy_stream_multi, "copy_stream_multi");
}

TEST(Copy, CopyBytesMultiIsExactInEveryDestination) {
  check_multi(copy_bytes_multi, "copy_bytes_multi");
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
