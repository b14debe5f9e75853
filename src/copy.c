/* Bulk copies for the engine.
 *
 * copy_bytes: glibc's memcpy moves mid sizes (from ~2 KiB up to a share of the last-level cache)
 * with `rep movsb`, and on AMD Zen 3 that runs 15-20x slower when dst - src is 1..31 modulo
 * 4096 (measured: 16 KiB in 7.9 us instead of 0.4; the loads cannot be told apart from the
 * stores to the same page offset just before them, "4K aliasing"). That is exactly a heap buffer
 * from malloc (16 bytes past a page) receiving from a page-aligned FIFO slot, or the one-shot's
 * in-place copy into a malloc'd scratch. A loop of unaligned vector loads and stores takes the
 * same 16 KiB in 0.5 us there (perf/copy_alias measures both), so copy_bytes uses one
 * when the page offsets are 1-63 bytes apart, and memcpy elsewhere (where it is as fast or
 * faster).
 *
 * Large results are written to the user's buffer with
 * non-temporal (streaming) stores: the buffer is not read for ownership first and does not
 * evict the FIFO slots from the cache, which matters once a collective is larger than the
 * caches (TUTTI_NT_THRESHOLD and the cache, per call: plan.c). Below that, plain memcpy keeps
 * data cached.
 * copy_stream_multi writes one source to several destinations (a push into every rank's buffer),
 * two at a time, loading each line of the source once per pair: out of place, 2 ranks each
 * pushing 128 MiB into both receive buffers at once, that took 11-17 ms where two copies of 64 KiB
 * pieces took 12-27, and the all-gather of 256 MiB ran 1.21x as fast (docs/perf-issue20-2.md).
 * copy_bytes_multi does the same with plain stores, for pushes that stay in the cache: one pass
 * over a 64 KiB piece into two destinations took 18.5 us per 512 KiB where two copies of each
 * piece took 24.5 (Zen 5 guest; the second pass reads the piece again from L2). */
#include "copy.h"

#include <string.h>

#include "core.h"

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static void stream_copy_avx2(char *dst, const char *src, size_t n) {
  size_t head = (64 - ((uintptr_t)dst & 63)) & 63;
  if (head > n) head = n;
  memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m256i a = _mm256_loadu_si256((const __m256i *)src);
    __m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));
    _mm256_stream_si256((__m256i *)dst, a);
    _mm256_stream_si256((__m256i *)(dst + 32), b);
  }
  memcpy(dst, src, n);
  _mm_sfence();
}

/* stream_copy_avx2 into two destinations whose addresses agree modulo 64: every 64-byte line of
 * src is loaded once and stored to both, one fence at the end. */
__attribute__((target("avx2"))) static void stream_copy2_avx2(char *d0, char *d1, const char *src,
                                                              size_t n) {
  size_t head = (64 - ((uintptr_t)d0 & 63)) & 63;
  if (head > n) head = n;
  memcpy(d0, src, head);
  memcpy(d1, src, head);
  d0 += head, d1 += head, src += head, n -= head;
  for (; n >= 64; n -= 64, d0 += 64, d1 += 64, src += 64) {
    __m256i a = _mm256_loadu_si256((const __m256i *)src);
    __m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));
    _mm256_stream_si256((__m256i *)d0, a);
    _mm256_stream_si256((__m256i *)(d0 + 32), b);
    _mm256_stream_si256((__m256i *)d1, a);
    _mm256_stream_si256((__m256i *)(d1 + 32), b);
  }
  memcpy(d0, src, n);
  memcpy(d1, src, n);
  _mm_sfence();
}

/* Plain stores into two destinations: every 128 bytes of src loaded once and stored to both
 * (unaligned, so any two addresses), memcpy for the tail. */
__attribute__((target("avx2"))) static void plain_copy2_avx2(char *d0, char *d1, const char *src,
                                                             size_t n) {
  for (; n >= 128; n -= 128, d0 += 128, d1 += 128, src += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)src);
    __m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(src + 64));
    __m256i d = _mm256_loadu_si256((const __m256i *)(src + 96));
    _mm256_storeu_si256((__m256i *)d0, a);
    _mm256_storeu_si256((__m256i *)(d0 + 32), b);
    _mm256_storeu_si256((__m256i *)(d0 + 64), c);
    _mm256_storeu_si256((__m256i *)(d0 + 96), d);
    _mm256_storeu_si256((__m256i *)d1, a);
    _mm256_storeu_si256((__m256i *)(d1 + 32), b);
    _mm256_storeu_si256((__m256i *)(d1 + 64), c);
    _mm256_storeu_si256((__m256i *)(d1 + 96), d);
  }
  memcpy(d0, src, n);
  memcpy(d1, src, n);
}

/* Forward copies of 128 (AVX2) or 64 (SSE2) bytes per iteration, memcpy for the tail. */
__attribute__((target("avx2"))) static void vector_copy_avx2(char *dst, const char *src, size_t n) {
  for (; n >= 128; n -= 128, dst += 128, src += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)src);
    __m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(src + 64));
    __m256i d = _mm256_loadu_si256((const __m256i *)(src + 96));
    _mm256_storeu_si256((__m256i *)dst, a);
    _mm256_storeu_si256((__m256i *)(dst + 32), b);
    _mm256_storeu_si256((__m256i *)(dst + 64), c);
    _mm256_storeu_si256((__m256i *)(dst + 96), d);
  }
  memcpy(dst, src, n);
}

static void vector_copy_sse2(char *dst, const char *src, size_t n) {
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)src);
    __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_storeu_si128((__m128i *)dst, a);
    _mm_storeu_si128((__m128i *)(dst + 16), b);
    _mm_storeu_si128((__m128i *)(dst + 32), c);
    _mm_storeu_si128((__m128i *)(dst + 48), d);
  }
  memcpy(dst, src, n);
}

static int probe_avx2(void) {
  return __builtin_cpu_supports("avx2") ? 1 : 0;
}

static int have_avx2(void) {
  static int v = -1;
  return tutti_cached_flag(&v, probe_avx2);
}
#endif

/* Below this memcpy does not use `rep movsb` (glibc's threshold is 2 KiB and more). */
#define COPY_ALIAS_MIN 1024

int copy_uses_vector(const void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  size_t ahead = ((uintptr_t)dst - (uintptr_t)src) & 4095; /* dst's page offset past src's */
  return bytes >= COPY_ALIAS_MIN && ahead != 0 && ahead < 64;
#else
  (void)dst, (void)src, (void)bytes;
  return 0;
#endif
}

void copy_bytes(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  if (copy_uses_vector(dst, src, bytes)) {
    if (have_avx2())
      vector_copy_avx2(dst, src, bytes);
    else
      vector_copy_sse2(dst, src, bytes);
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

void copy_stream(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= 4096 && have_avx2()) {
    stream_copy_avx2(dst, src, bytes);
    return;
  }
#endif
  copy_bytes(dst, src, bytes);
}

void copy_bytes_multi(char *const *dst, int k, const void *src, size_t bytes) {
  int j = 0;
#if defined(__x86_64__)
  if (bytes >= COPY_ALIAS_MIN && have_avx2())
    for (; j + 1 < k; j += 2) plain_copy2_avx2(dst[j], dst[j + 1], src, bytes);
#endif
  for (; j < k; j++) copy_bytes(dst[j], src, bytes);
}

void copy_stream_multi(char *const *dst, int k, const void *src, size_t bytes) {
  int j = 0;
#if defined(__x86_64__)
  if (bytes >= 4096 && have_avx2())
    for (; j + 1 < k && ((uintptr_t)dst[j] & 63) == ((uintptr_t)dst[j + 1] & 63); j += 2)
      stream_copy2_avx2(dst[j], dst[j + 1], src, bytes);
#endif
  for (; j < k; j++) copy_stream(dst[j], src, bytes);
}
