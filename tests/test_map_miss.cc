// Calls whose buffers cannot all be mapped (src/plan.c, map_excluded): after a handshake that
// said so, the next 63 calls of the same collective, count and type skip the algorithms that
// map (push, direct) and their handshake, and the 64th tries again; a try that misses again
// skips twice as many (127, 255, ... up to 1023). Heap all-reduces of 64 KiB (push's size, below
// cma's) on forked ranks: the handshake runs on calls 1, 65 and 193 only; a switch to
// ncclMemAlloc buffers is taken up at the next try; ranks that differ in placing
// the result (in place on one, out of place on the other) still choose alike; every result is
// exact. And the other way round: buffers every rank can map skip reading by copy. And a
// handshake whose ranks planned different algorithms fails on every rank.
#include <gtest/gtest.h>
#include <stdint.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "forked_ranks.h"
#include "log_capture.h"  // first: sets the logging variables before anything reads them
#include "nccl.h"

namespace {

const size_t kCount = 16384;  // int32: 64 KiB, from TUTTI_PUSH_MIN_BYTES, below CMA_MIN_BYTES
const char *const kHandshake = "peer-memory handshake with every rank";
const char *const kPushLine = "push, the peers' buffers mapped";

// `calls` int32 sum all-reduces on s -> r (r == s: in place); element i of rank r's input is
// r + i % 1000 + c (call c), the sum n (i % 1000 + c) + n (n - 1) / 2, checked exactly.
int run_calls(int rank, int n, ncclComm_t comm, int32_t *s, int32_t *r, int calls) {
  for (int c = 0; c < calls; c++) {
    for (size_t i = 0; i < kCount; i++) s[i] = rank + (int32_t)(i % 1000) + c;
    CHILD_CHECK(ncclAllReduce(s, r, kCount, ncclInt32, ncclSum, comm, nullptr) == ncclSuccess, 41,
                "call %d: %s", c, ncclGetLastError(comm));
    for (size_t i = 0; i < kCount; i++) {
      int32_t want = n * ((int32_t)(i % 1000) + c) + n * (n - 1) / 2;
      CHILD_CHECK(r[i] == want, 42, "call %d element %zu: %d, want %d", c, i, r[i], want);
    }
  }
  return 0;
}

// Lines with `needle` each rank logged.
std::vector<int> per_rank(int n, const char *needle) {
  std::vector<int> out(n);
  for (const std::string &line : log_capture::lines()) {
    int rank = log_capture::rank_of(line);
    if (line.find(needle) != std::string::npos && rank >= 0 && rank < n) out[rank]++;
  }
  return out;
}

TEST(MapMiss, HeapCallsSkipTheHandshakeBetweenTries) {
  log_capture::clear();
  auto codes = forked(
      2, [](int) { setenv("TUTTI_ADAPT", "0", 1); },
      [](int rank, ncclComm_t comm) {
        std::vector<int32_t> s(kCount), r(kCount);
        return run_calls(rank, 2, comm, s.data(), r.data(), 200);
      });
  expect_all_ok(codes);
  EXPECT_EQ(per_rank(2, kHandshake), std::vector<int>({3, 3})) << "calls 1, 65 and 193";
  EXPECT_EQ(log_capture::count(kPushLine), 0);
}

// 70 heap calls (handshakes at 1 and 65, which skips the next 127), then ncclMemAlloc buffers of
// the same size: calls 71-192 still skip, call 193 tries, maps, and every call after it runs
// push. Then heap buffers again: the mapped calls started the key over, so call 211 misses and
// skips 63 calls (not 255), and call 275 tries again. (TUTTI_ADAPT=0 in
// every test here: where the measured choice covers a heap call, adapt.h, it runs the FIFOs or
// cma by its own schedule of probes, and the mapped buffers are found at its next probe.)
TEST(MapMiss, MappableBuffersAreTakenUpAtTheNextTry) {
  log_capture::clear();
  auto codes = forked(
      2, [](int) { setenv("TUTTI_ADAPT", "0", 1); },
      [](int rank, ncclComm_t comm) {
        std::vector<int32_t> s(kCount), r(kCount);
        int rc = run_calls(rank, 2, comm, s.data(), r.data(), 70);
        void *ms = nullptr, *mr = nullptr;
        CHILD_CHECK(ncclMemAlloc(&ms, kCount * 4) == ncclSuccess &&
                        ncclMemAlloc(&mr, kCount * 4) == ncclSuccess,
                    43, "ncclMemAlloc");
        if (!rc)
          rc =
              run_calls(rank, 2, comm, static_cast<int32_t *>(ms), static_cast<int32_t *>(mr), 140);
        ncclMemFree(ms), ncclMemFree(mr);
        if (!rc) rc = run_calls(rank, 2, comm, s.data(), r.data(), 70);
        return rc;
      });
  expect_all_ok(codes);
  // handshakes: calls 1 and 65 (heap), 193-210 (18 ncclMemAlloc calls that map), 211 and 275
  EXPECT_EQ(per_rank(2, kHandshake), std::vector<int>({22, 22}));
  EXPECT_EQ(per_rank(2, kPushLine), std::vector<int>({18, 18}));
}

// Rank 0 in place, rank 1 out of place, 3 ranks with rank 2 alternating: the skip is keyed by
// what every rank shares, so they all skip and try on the same calls (a rank that tried alone
// would wait for a handshake nobody sends).
TEST(MapMiss, RanksThatPlaceResultsDifferentlyStillAgree) {
  log_capture::clear();
  auto codes = forked(
      3, [](int) { setenv("TUTTI_ADAPT", "0", 1); },
      [](int rank, ncclComm_t comm) {
        std::vector<int32_t> s(kCount), r(kCount);
        for (int c = 0; c < 150; c++) {
          bool in_place = rank == 0 || (rank == 2 && c % 2);
          int rc = run_calls(rank, 3, comm, s.data(), in_place ? s.data() : r.data(), 1);
          if (rc) return rc;
        }
        return 0;
      });
  expect_all_ok(codes);
  EXPECT_EQ(per_rank(3, kHandshake), std::vector<int>({2, 2, 2})) << "calls 1 and 65 (then 193)";
}

// The other way round: reduce-scatters of 256 KiB on ncclMemAlloc buffers with direct held to
// 1 MiB and up (TUTTI_DIRECT_MIN_BYTES): the model takes cma, whose handshake finds buffers
// every rank can map, and the call goes to the FIFOs; the next 63 calls of the key go there
// without a handshake (then 127). Every rank's block is exact.
TEST(MapMiss, MappedBuffersSkipReadingByCopyBetweenTries) {
  log_capture::clear();
  auto codes = forked(
      2,
      [](int) {
        setenv("TUTTI_ADAPT", "0", 1);
        setenv("TUTTI_DIRECT_MIN_BYTES", "1M", 1);
      },
      [](int rank, ncclComm_t comm) {
        const size_t count = 32768;  // per rank: 128 KiB of int32, 256 KiB sent
        void *s = nullptr, *r = nullptr;
        CHILD_CHECK(ncclMemAlloc(&s, 2 * count * 4) == ncclSuccess &&
                        ncclMemAlloc(&r, count * 4) == ncclSuccess,
                    43, "ncclMemAlloc");
        auto *in = static_cast<int32_t *>(s), *out = static_cast<int32_t *>(r);
        for (int c = 0; c < 200; c++) {
          for (size_t i = 0; i < 2 * count; i++) in[i] = rank + (int32_t)(i % 1000) + c;
          CHILD_CHECK(
              ncclReduceScatter(s, r, count, ncclInt32, ncclSum, comm, nullptr) == ncclSuccess, 44,
              "call %d: %s", c, ncclGetLastError(comm));
          for (size_t i = 0; i < count; i++) {
            size_t g = (size_t)rank * count + i;
            int32_t want = 2 * ((int32_t)(g % 1000) + c) + 1;
            CHILD_CHECK(out[i] == want, 45, "call %d element %zu: %d, want %d", c, i, out[i], want);
          }
        }
        ncclMemFree(s), ncclMemFree(r);
        return 0;
      });
  expect_all_ok(codes);
  EXPECT_EQ(per_rank(2, kHandshake), std::vector<int>({3, 3})) << "calls 1, 65 and 193";
  EXPECT_EQ(log_capture::count("cma, the peers' buffers read by copy"), 0);
}

// Every rank plans alike; the handshake checks it (engine_peer.c, decide): with rank 1 saying it
// planned another algorithm (TUTTI_TEST_HANDSHAKE_SKEW_RANK, as a planning bug would), the
// first call fails on both ranks with ncclInternalError and a message naming both algorithms,
// on buffers the peers map (an all-gather, direct) and on heap buffers read by copy (an
// all-reduce of 64 KiB, push). Before the check, ranks that disagreed there wrote wrong results.
TEST(MapMiss, RanksThatPlannedDifferentAlgorithmsFailTheCall) {
  for (bool mapped : {true, false}) {
    SCOPED_TRACE(mapped ? "mapped" : "heap");
    auto codes = forked(
        2,
        [mapped](int) {
          setenv("TUTTI_TEST_HANDSHAKE_SKEW_RANK", "1", 1);
          setenv("TUTTI_ADAPT", "0", 1);
          if (mapped) setenv("TUTTI_MEM_ALLOC", "shared", 1);
        },
        [mapped](int rank, ncclComm_t comm) {
          void *s = nullptr, *r = nullptr;
          if (mapped) {
            CHILD_CHECK(ncclMemAlloc(&s, kCount * 4) == ncclSuccess &&
                            ncclMemAlloc(&r, 2 * kCount * 4) == ncclSuccess,
                        43, "ncclMemAlloc");
          } else {
            s = calloc(kCount, 4), r = calloc(kCount, 4);
          }
          ncclResult_t rc = mapped ? ncclAllGather(s, r, kCount, ncclInt32, comm, nullptr)
                                   : ncclAllReduce(s, r, kCount, ncclInt32, ncclSum, comm, nullptr);
          std::string msg = ncclGetLastError(comm);
          CHILD_CHECK(rc == ncclInternalError, 44, "rank %d: %s (%s)", rank, ncclGetErrorString(rc),
                      msg.c_str());
          CHILD_CHECK(msg.find("planned different algorithms") != std::string::npos &&
                          msg.find(mapped ? "direct on rank" : "push on rank") != std::string::npos,
                      45, "rank %d: %s", rank, msg.c_str());
          if (mapped) {
            ncclMemFree(s), ncclMemFree(r);
          } else {
            free(s), free(r);
          }
          return 0;
        });
    expect_all_ok(codes);
  }
}

}  // namespace
