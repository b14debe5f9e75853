/* The fuzz targets' common interface (docs/hardening.md, "Fuzzing").
 *
 * Every fuzz_<name>.c defines LLVMFuzzerTestOneInput (one input: any bytes, never a crash, a
 * hang or a leak) and fuzz_seeds (well-formed inputs made by the library's own encoders or
 * structs, the starting corpus). Built with clang and -DTUTTI_FUZZ=ON a target links libFuzzer;
 * every build also links each target with fuzz_replay.c, which writes the seeds
 * (--write-seeds DIR) or runs the target over files and folders (ctest's fuzz_replay_* tests).
 */
#ifndef TUTTI_FUZZ_H_
#define TUTTI_FUZZ_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* put(arg, name, bytes, len) stores one seed under `name`. */
typedef void (*fuzz_put_fn)(void *arg, const char *name, const void *bytes, size_t len);
void fuzz_seeds(fuzz_put_fn put, void *arg);

/* WARN lines on every refused input would cost more than the parsing: the targets run with
 * TUTTI_DEBUG=NONE (set before the library reads it). */
static inline void fuzz_quiet(void) {
  static int done;
  if (!done) setenv("TUTTI_DEBUG", "NONE", 1), done = 1;
}

/* Reads the input from the front: the fuzzer's bytes as a stream of choices. */
typedef struct fuzz_in {
  const uint8_t *p;
  size_t left;
} fuzz_in_t;

static inline uint32_t fuzz_take(fuzz_in_t *in, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes && in->left; i++, in->p++, in->left--) v |= (uint32_t)*in->p << 8 * i;
  return v;
}

#ifdef __cplusplus
}
#endif
#endif
