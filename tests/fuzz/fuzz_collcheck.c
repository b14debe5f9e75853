/* Fuzz target: TUTTI_CHECK_COLL's comparison of the records every rank sent
 * (src/collcheck.c, rec_compare). The records come from the peers over the engine's exchange;
 * their counts, collective codes and ops are the peers' word and must only be printed, never
 * used to index.
 *
 * Input: [u8 ranks][u8 rank], then nranks records of sizeof(collcheck_rec_t) bytes. collcheck.c
 * is compiled into this file so that its static comparison runs as the library runs it. */
#include <stdlib.h>
#include <string.h>

#include "../../src/collcheck.c"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  fuzz_in_t in = {data, size};
  struct ncclComm comm = {.nranks = 1 + (int)(fuzz_take(&in, 1) % 8)};
  comm.rank = (int)(fuzz_take(&in, 1) % (uint32_t)comm.nranks);
  collcheck_rec_t *all = calloc((size_t)comm.nranks, sizeof(*all));
  memcpy(all, in.p, TUTTI_MIN(in.left, (size_t)comm.nranks * sizeof(*all)));
  int malformed = 0;
  for (int p = 0; p < comm.nranks; p++) malformed |= all[p].ncalls < 0;
  ncclResult_t res = rec_compare(&comm, all);
  free(all);
  /* the oracle: a record with a negative count of calls is refused as malformed (once it was
   * used to index the calls: an out-of-bounds read found by this target) */
  if (malformed && (res == ncclSuccess || !strstr(tutti_last_error(), "malformed record"))) abort();
  return 0;
}

/* ---- seeds: records as rec_fill makes them, equal and differing ---- */

static collcheck_rec_t seed_rec(int rank, uint64_t count, int ncalls) {
  collcheck_rec_t r = {.seq = 5, .rank = rank, .ncalls = ncalls, .hash = 0xcbf29ce484222325ull};
  for (int i = 0; i < ncalls; i++) {
    collcheck_call_t c = {.coll = COLL_ALLREDUCE,
                          .type = ncclFloat32,
                          .op = ncclSum,
                          .root = -1,
                          .count = count + (uint64_t)i};
    if (i < COLLCHECK_CALLS) r.calls[i] = c;
    const unsigned char *b = (const unsigned char *)&c;
    for (size_t k = 0; k < sizeof(c); k++) r.hash = (r.hash ^ b[k]) * 0x100000001b3ull;
  }
  return r;
}

void fuzz_seeds(fuzz_put_fn put, void *arg) {
  uint8_t buf[2 + 4 * sizeof(collcheck_rec_t)];
  for (int variant = 0; variant < 3; variant++) {
    buf[0] = 3, buf[1] = 1; /* 4 ranks, this is rank 1 */
    for (int r = 0; r < 4; r++) {
      uint64_t count = variant == 1 && r == 2 ? 200 : 100;
      int ncalls = variant == 2 && r == 3 ? 6 : 2;
      collcheck_rec_t rec = seed_rec(r, count, ncalls);
      memcpy(buf + 2 + r * sizeof(rec), &rec, sizeof(rec));
    }
    static const char *const names[] = {"equal", "count-differs", "ncalls-differs"};
    put(arg, names[variant], buf, sizeof(buf));
  }
  /* regression: rank 0 claims -3 calls, rank 1 two (the difference indexed calls[-3]) */
  buf[0] = 1, buf[1] = 0;
  collcheck_rec_t bad = seed_rec(0, 100, 2), good = seed_rec(1, 100, 2);
  bad.ncalls = -3, bad.hash = 1;
  memcpy(buf + 2, &bad, sizeof(bad));
  memcpy(buf + 2 + sizeof(bad), &good, sizeof(good));
  put(arg, "regress-negative-ncalls", buf, 2 + 2 * sizeof(bad));
}
