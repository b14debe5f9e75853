/* Bulk copies for the engine. Large results are written to the user's buffer with
 * non-temporal (streaming) stores: the buffer is not read for ownership first and does not
 * evict the FIFO slots from the cache, which matters once a collective is larger than the
 * caches (TUTTI_NT_THRESHOLD, bytes per call). Below that, plain memcpy keeps data cached. */
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

static int probe_avx2(void) {
  return __builtin_cpu_supports("avx2") ? 1 : 0;
}

static int have_avx2(void) {
  static int v = -1;
  return tutti_cached_flag(&v, probe_avx2);
}
#endif

void copy_stream(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= 4096 && have_avx2()) {
    stream_copy_avx2(dst, src, bytes);
    return;
  }
#endif
  memcpy(dst, src, bytes);
}
