/* copy_alias: what the distance between two buffers' page offsets does to a copy, for memcpy and
 * for the engine's copy_bytes (src/copy.c) in the same run:
 *
 *   copy_alias [-b 4K] [-e 4M] [-f 4] [-t 0.05]
 *
 * Per size and per distance (the destination's page offset minus the source's: 0, 16, 32, 64,
 * 4080 bytes), microseconds per copy, the fastest of a few rounds of -t seconds each, both
 * buffers warm in the cache where they fit. glibc's memcpy moves mid sizes with `rep movsb`,
 * which some CPUs (AMD Zen 3) run many times slower at distances of 1-31 bytes: 16 is where a
 * heap block from malloc sits against a page-aligned FIFO slot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "copy.h"

/* A size argument ("64K"); exits on a malformed one. */
static size_t size_arg(const char *s) {
  size_t v = 0;
  if (bench_parse_bytes(s, &v) != 0) {
    fprintf(stderr, "copy_alias: bad size %s\n", s);
    exit(2);
  }
  return v;
}

/* Microseconds per copy: the fastest of 5 rounds of about `secs` each. */
static double time_copy(int use_memcpy, char *dst, const char *src, size_t n, double secs) {
  double best = 1e30;
  for (int round = 0; round < 5; round++) {
    long iters = 0;
    double t0 = bench_now(), t;
    do {
      if (use_memcpy)
        memcpy(dst, src, n);
      else
        copy_bytes(dst, src, n);
      __asm__ volatile("" : : "r"(dst) : "memory"); /* keep every copy */
      iters++;
    } while ((t = bench_now() - t0) < secs);
    if (t / (double)iters < best) best = t / (double)iters;
  }
  return best * 1e6;
}

int main(int argc, char **argv) {
  size_t lo = 4096, hi = 4 << 20;
  int factor = 4;
  double secs = 0.05;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b"))
      lo = size_arg(argv[i + 1]);
    else if (!strcmp(argv[i], "-e"))
      hi = size_arg(argv[i + 1]);
    else if (!strcmp(argv[i], "-f"))
      factor = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-t"))
      secs = atof(argv[i + 1]);
    else {
      fprintf(stderr, "usage: copy_alias [-b size] [-e size] [-f factor] [-t seconds]\n");
      return 2;
    }
  }
  if (lo == 0 || hi < lo || factor < 2 || secs <= 0) {
    fprintf(stderr, "copy_alias: bad -b, -e, -f or -t\n");
    return 2;
  }
  static const size_t ahead[] = {0, 16, 32, 64, 4080};
  char *src = NULL, *dst = NULL;
  if (posix_memalign((void **)&src, 4096, hi + 8192) ||
      posix_memalign((void **)&dst, 4096, hi + 8192)) {
    fprintf(stderr, "copy_alias: out of memory\n");
    return 1;
  }
  memset(src, 1, hi + 8192);
  memset(dst, 2, hi + 8192);
  printf("%10s %6s %12s %12s %8s\n", "bytes", "ahead", "memcpy us", "copy_bytes", "ratio");
  for (size_t n = lo; n <= hi; n *= (size_t)factor)
    for (size_t k = 0; k < sizeof(ahead) / sizeof(*ahead); k++) {
      double m = time_copy(1, dst + 4096 + ahead[k], src + 4096, n, secs);
      double c = time_copy(0, dst + 4096 + ahead[k], src + 4096, n, secs);
      printf("%10zu %6zu %12.2f %12.2f %8.2f\n", n, ahead[k], m, c, m / c);
    }
  free(src);
  free(dst);
  return 0;
}
