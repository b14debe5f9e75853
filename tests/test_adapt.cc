// The measured choices (src/adapt.h) of forked ranks: the FIFOs against cma on heap buffers,
// direct against push for all-gathers on buffers the peers map, the FIFOs against direct for
// all-to-alls there. It keeps the faster candidate
// (one held back by TUTTI_TEST_PEER_DELAY_US loses), every rank makes the same choices in the
// same order, results stay exact while the algorithm changes from call to call, and it stays
// out of calls whose bits could depend on the algorithm, of all-reduces on buffers the peers
// can map, and of TUTTI_ADAPT=0. And plain against streaming stores (NtMeasure).
#include <gtest/gtest.h>
#include <stdint.h>
#include <stdlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "comm.h"
#include "forked_ranks.h"
#include "log_capture.h"  // first: sets the logging variables before anything reads them
#include "nccl.h"

namespace {

const char *const kDecided = "measured (slowest rank)";

// `calls` all-reduces of `count` int32 (or float) elements, in place or not; every result
// checked exactly: element i of rank r's input is r + i % 1000 (+ 0.5 as float), so the sum is
// n (i % 1000) + n (n - 1) / 2 (+ n / 2), exact in both types.
int run_calls(int rank, int n, ncclComm_t comm, size_t count, int calls, bool as_float,
              bool in_place, bool memalloc = false) {
  size_t bytes = count * 4;
  void *s = nullptr, *r = nullptr;
  if (memalloc) {
    CHILD_CHECK(ncclMemAlloc(&s, bytes) == ncclSuccess && ncclMemAlloc(&r, bytes) == ncclSuccess,
                40, "ncclMemAlloc");
  } else {
    s = malloc(bytes), r = malloc(bytes);
  }
  for (int c = 0; c < calls; c++) {
    for (size_t i = 0; i < count; i++) {
      if (as_float)
        static_cast<float *>(s)[i] = (float)(rank + (int)(i % 1000)) + 0.5f;
      else
        static_cast<int32_t *>(s)[i] = rank + (int32_t)(i % 1000);
    }
    void *dst = in_place ? s : r;
    CHILD_CHECK(ncclAllReduce(s, dst, count, as_float ? ncclFloat32 : ncclInt32, ncclSum, comm,
                              nullptr) == ncclSuccess,
                41, "call %d: %s", c, ncclGetLastError(comm));
    for (size_t i = 0; i < count; i++) {
      double want = (double)n * (double)(i % 1000) + n * (n - 1) / 2.0 + (as_float ? n / 2.0 : 0);
      double got = as_float ? static_cast<float *>(dst)[i] : static_cast<int32_t *>(dst)[i];
      CHILD_CHECK(got == want, 42, "call %d element %zu: %g, want %g", c, i, got, want);
    }
  }
  if (memalloc) {
    ncclMemFree(s), ncclMemFree(r);
  } else {
    free(s), free(r);
  }
  return 0;
}

// `calls` all-gathers of `count` int32 per rank on ncclMemAlloc buffers (memory the peers map),
// in place or not; every result checked exactly: element i of rank r's block is
// r * 1000003 + i % 1000 + call.
int run_gathers(int rank, int n, ncclComm_t comm, size_t count, int calls, bool in_place) {
  void *s = nullptr, *r = nullptr;
  CHILD_CHECK(ncclMemAlloc(&r, count * n * 4) == ncclSuccess, 40, "ncclMemAlloc");
  if (!in_place) CHILD_CHECK(ncclMemAlloc(&s, count * 4) == ncclSuccess, 40, "ncclMemAlloc");
  int32_t *out = static_cast<int32_t *>(r);
  int32_t *in = in_place ? out + (size_t)rank * count : static_cast<int32_t *>(s);
  for (int c = 0; c < calls; c++) {
    for (size_t i = 0; i < count; i++) in[i] = rank * 1000003 + (int32_t)(i % 1000) + c;
    CHILD_CHECK(ncclAllGather(in, out, count, ncclInt32, comm, nullptr) == ncclSuccess, 41,
                "call %d: %s", c, ncclGetLastError(comm));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++) {
        int32_t want = q * 1000003 + (int32_t)(i % 1000) + c;
        CHILD_CHECK(out[(size_t)q * count + i] == want, 42,
                    "call %d block %d element %zu: %d, want %d", c, q, i,
                    out[(size_t)q * count + i], want);
      }
  }
  ncclMemFree(r);
  if (s) ncclMemFree(s);
  return 0;
}

// The decisions each rank logged, in order.
std::vector<std::vector<std::string>> decisions_per_rank(int n) {
  return log_capture::tails_per_rank(n, kDecided);
}

// Before a forked rank starts: cma held back 20 ms per peer step on rank 1 (the FIFOs win).
void hold_back_cma(int) {
  setenv("TUTTI_TEST_PEER_DELAY_US", "20000", 1);
  setenv("TUTTI_TEST_PEER_DELAY_RANK", "1", 1);
}

// cma held back 20 ms per peer step on rank 1: the first decision (after 8 calls of the
// model's cma, one FIFO call, one cma call) keeps the FIFOs, on both ranks, and so do the later
// ones; 256 KiB in place and out of place.
TEST(Adapt, KeepsTheFasterCandidate) {
  log_capture::clear();
  auto codes = forked(2, hold_back_cma, [](int rank, ncclComm_t comm) {
    int rc = run_calls(rank, 2, comm, 65536, 40, false, false);
    return rc ? rc : run_calls(rank, 2, comm, 65536, 40, true, true);
  });
  expect_all_ok(codes);
  auto d = decisions_per_rank(2);
  for (const auto &mine : d) {
    ASSERT_GE(mine.size(), 2u) << "two decisions at least";
    for (const std::string &kept : mine) EXPECT_EQ(kept.find("cma"), std::string::npos) << kept;
  }
  EXPECT_EQ(d[0], d[1]) << "the ranks decided differently";
}

// Ranks may differ in placement (NCCL's in place is each rank's own pointers): with cma held
// back (the FIFOs kept, the model's cma not), rank 0 calls in place throughout and rank 1 moves
// from in place to out of place after 30 calls. Every call succeeds with exact results, and both
// ranks decide alike. (With a bucket per placement, rank 1 started over on the model's cma while
// rank 0 ran the FIFOs: the next call failed as a mismatch on both.)
TEST(Adapt, RanksThatDifferInPlacementStillChooseAlike) {
  log_capture::clear();
  auto codes = forked(2, hold_back_cma, [](int rank, ncclComm_t comm) {
    int rc = run_calls(rank, 2, comm, 65536, 30, false, true);
    return rc ? rc : run_calls(rank, 2, comm, 65536, 30, false, rank == 0);
  });
  expect_all_ok(codes);
  auto d = decisions_per_rank(2);
  ASSERT_GE(d[0].size(), 2u) << "logs in " << log_capture::g_dir;
  EXPECT_EQ(d[0], d[1]) << "the ranks decided differently";
}

// A size not measured yet follows a neighbour's recent decision: after 256 KiB chose the FIFOs
// (cma held back on rank 1), 1 MiB (two powers of two up) runs the FIFOs from its first call
// instead of the model's cma for the 8 calls before its own first measurement.
TEST(Adapt, ANewSizeFollowsItsNeighbour) {
  log_capture::clear();
  auto codes = forked(2, hold_back_cma, [](int rank, ncclComm_t comm) {
    int rc = run_calls(rank, 2, comm, 65536, 40, false, false);
    return rc ? rc : run_calls(rank, 2, comm, 262144, 6, false, false);
  });
  expect_all_ok(codes);
  int large = 0, large_cma = 0;
  for (const std::string &line : log_capture::lines()) {
    if (line.find("opCount") == std::string::npos ||
        line.find(" count 262144 ") == std::string::npos)
      continue;
    large++;
    if (line.find("algo cma") != std::string::npos) large_cma++;
  }
  EXPECT_EQ(large, 2 * 6) << "the 1 MiB calls' lines (logs in " << log_capture::g_dir << ")";
  EXPECT_EQ(large_cma, 0) << "1 MiB ran cma before measuring it";
}

// 3 ranks, int32 sums of 96 KiB (the model's FIFOs; cma probed), 300 calls: every result exact
// while the algorithm changes, and every rank logs the same decisions in the same order.
TEST(Adapt, EveryRankMakesTheSameChoices) {
  log_capture::clear();
  auto codes = forked(
      3, [](int) {},
      [](int rank, ncclComm_t comm) { return run_calls(rank, 3, comm, 24576, 300, false, false); });
  expect_all_ok(codes);
  auto d = decisions_per_rank(3);
  EXPECT_GE(d[0].size(), 3u) << "rank 0's decisions (logs in " << log_capture::g_dir << ")";
  EXPECT_EQ(d[0], d[1]);
  EXPECT_EQ(d[0], d[2]);
}

// Where the algorithm could change the bits (a float sum over 3 ranks), with TUTTI_ADAPT=0, and
// on buffers the peers map (ncclMemAlloc, shared memory: the direct algorithm), nothing is
// measured: the model chooses.
TEST(Adapt, StaysOutWhereItMustNot) {
  log_capture::clear();
  auto codes = forked(
      3, [](int) {},
      [](int rank, ncclComm_t comm) { return run_calls(rank, 3, comm, 65536, 40, true, false); });
  expect_all_ok(codes);
  EXPECT_EQ(log_capture::count(kDecided), 0) << "float sums over 3 ranks";

  log_capture::clear();
  codes = forked(
      2, [](int) { setenv("TUTTI_ADAPT", "0", 1); },
      [](int rank, ncclComm_t comm) { return run_calls(rank, 2, comm, 65536, 40, false, false); });
  expect_all_ok(codes);
  EXPECT_EQ(log_capture::count(kDecided), 0) << "TUTTI_ADAPT=0";
  EXPECT_EQ(log_capture::count("cma, the peers' buffers read by copy"), 2 * 40)
      << "the model's cma for every call of 256 KiB";

  log_capture::clear();
  codes = forked(
      2, [](int) { setenv("TUTTI_MEM_ALLOC", "shared", 1); },
      [](int rank, ncclComm_t comm) {
        return run_calls(rank, 2, comm, 65536, 40, false, false, true);
      });
  expect_all_ok(codes);
  EXPECT_EQ(log_capture::count(kDecided), 0) << "mapped buffers";
  EXPECT_EQ(log_capture::count("be mapped: the model chooses for this size from now on"), 2);
  EXPECT_EQ(log_capture::count("push, the peers' buffers mapped"), 2 * 40)
      << "the model's push for every call of 256 KiB";
}

// All-gathers on mapped buffers (ncclMemAlloc, shared memory), 2 ranks: with push held back 20
// ms per call on rank 1, every decision keeps direct, at 1 MiB where the model says push
// (TUTTI_PUSH_GATHER_MIN_BYTES), out of place and in place; with direct held back, every
// decision keeps push at 256 KiB, where the model says direct. Both ranks decide alike, and
// every result is exact while the algorithm changes.
TEST(Adapt, MappedAllGathersKeepTheFasterOfDirectAndPush) {
  for (const char *slow : {"push", "direct"}) {
    SCOPED_TRACE(std::string(slow) + " held back");
    log_capture::clear();
    auto codes = forked(
        2,
        [slow](int) {
          setenv("TUTTI_MEM_ALLOC", "shared", 1);
          setenv("TUTTI_TEST_PEER_DELAY_US", "20000", 1);
          setenv("TUTTI_TEST_PEER_DELAY_RANK", "1", 1);
          setenv("TUTTI_TEST_PEER_DELAY_ALGO", slow, 1);
        },
        [slow](int rank, ncclComm_t comm) {
          size_t count = std::string(slow) == "push" ? 131072 : 32768;  // per rank: 1 MiB, 256 KiB
          int rc = run_gathers(rank, 2, comm, count, 30, false);
          return rc ? rc : run_gathers(rank, 2, comm, count, 30, true);
        });
    expect_all_ok(codes);
    auto d = decisions_per_rank(2);
    const char *kept =
        std::string(slow) == "push" ? ": direct for the next" : ": push for the next";
    for (const auto &mine : d) {
      ASSERT_GE(mine.size(), 2u) << "two decisions at least (logs in " << log_capture::g_dir << ")";
      for (const std::string &line : mine)
        EXPECT_NE(("x: " + line).find(kept), std::string::npos) << line;
    }
    EXPECT_EQ(d[0], d[1]) << "the ranks decided differently";
  }
}

// `calls` in-place all-to-alls of `count` int32 per peer, on heap buffers (malloc: the peers
// read them by copy) or ncclMemAlloc ones (mapped); every result checked exactly: block q of rank
// r's input is r * 1000003 + q * 1009 + i % 1000 + call, so block q of its result is
// q * 1000003 + r * 1009 + i % 1000 + call.
int run_alltoalls(int rank, int n, ncclComm_t comm, size_t count, int calls, bool memalloc) {
  size_t bytes = count * (size_t)n * 4;
  void *b = nullptr;
  if (memalloc) {
    CHILD_CHECK(ncclMemAlloc(&b, bytes) == ncclSuccess, 40, "ncclMemAlloc");
  } else {
    CHILD_CHECK((b = malloc(bytes)) != nullptr, 40, "malloc");
  }
  int32_t *v = static_cast<int32_t *>(b);
  for (int c = 0; c < calls; c++) {
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++)
        v[(size_t)q * count + i] = rank * 1000003 + q * 1009 + (int32_t)(i % 1000) + c;
    CHILD_CHECK(ncclAlltoAll(v, v, count, ncclInt32, comm, nullptr) == ncclSuccess, 41,
                "call %d: %s", c, ncclGetLastError(comm));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++) {
        int32_t want = q * 1000003 + rank * 1009 + (int32_t)(i % 1000) + c;
        CHILD_CHECK(v[(size_t)q * count + i] == want, 42,
                    "call %d block %d element %zu: %d, want %d", c, q, i, v[(size_t)q * count + i],
                    want);
      }
  }
  if (memalloc) {
    ncclMemFree(b);
  } else {
    free(b);
  }
  return 0;
}

// In-place all-to-alls of 128 KiB, 2 ranks, where the model says the FIFOs: on heap buffers the
// FIFOs are measured against cma, on mapped ones (ncclMemAlloc, shared memory) against direct,
// both of which exchange the blocks. With the exchange held back 20 ms per call on rank 1 every
// decision keeps the FIFOs; left alone, the exchange runs some calls and the FIFOs others; either
// way every result is exact and both ranks decide alike.
TEST(Adapt, InPlaceAllToAllsMeasureTheFifosAgainstTheExchange) {
  for (bool memalloc : {false, true})
    for (bool held : {true, false}) {
      SCOPED_TRACE(std::string(memalloc ? "mapped" : "heap") +
                   (held ? ", exchange held back" : ""));
      log_capture::clear();
      auto codes = forked(
          2,
          [memalloc, held](int) {
            if (memalloc) setenv("TUTTI_MEM_ALLOC", "shared", 1);
            if (!held) return;
            setenv("TUTTI_TEST_PEER_DELAY_US", "20000", 1);
            setenv("TUTTI_TEST_PEER_DELAY_RANK", "1", 1);
          },
          [memalloc](int rank, ncclComm_t comm) {
            return run_alltoalls(rank, 2, comm, 16384, 40, memalloc);
          });
      expect_all_ok(codes);
      auto d = decisions_per_rank(2);
      ASSERT_GE(d[0].size(), 1u) << "logs in " << log_capture::g_dir;
      EXPECT_EQ(d[0], d[1]) << "the ranks decided differently";
      if (held) {
        for (const std::string &kept : d[0])
          EXPECT_EQ(kept.find("the FIFOs for the next"), 0u) << kept;
      }
      if (memalloc) {
        EXPECT_EQ(log_capture::count("be mapped: measuring the FIFOs against direct"), 2);
      }
      const char *exchange = memalloc ? "direct, the peers' buffers mapped; blocks exchanged"
                                      : "cma, the peers' buffers read by copy; blocks exchanged";
      EXPECT_GE(log_capture::count(exchange), 2)
          << "the exchange ran (logs in " << log_capture::g_dir << ")";
    }
}

// An all-to-all that keeps the FIFOs probes the exchange every 32 steady calls at most (adapt.c,
// ADAPT_A2A_FIFO_PERIOD: a bucket serves both placements, and in place the FIFOs are the slow
// one). In-place all-to-alls of 128 KiB on mapped buffers, 2 ranks, the exchange held back 20
// ms a call on rank 1: 200 calls decide 6 times (after calls 11, 46, 81, 116, 151 and 186; a
// period growing to 128 and 512 would give 3), every time for the FIFOs, alike on both ranks.
TEST(Adapt, AllToAllsThatKeepTheFifosProbeOften) {
  log_capture::clear();
  auto codes = forked(
      2,
      [](int) {
        setenv("TUTTI_MEM_ALLOC", "shared", 1);
        setenv("TUTTI_TEST_PEER_DELAY_US", "20000", 1);
        setenv("TUTTI_TEST_PEER_DELAY_RANK", "1", 1);
      },
      [](int rank, ncclComm_t comm) { return run_alltoalls(rank, 2, comm, 16384, 200, true); });
  expect_all_ok(codes);
  auto d = decisions_per_rank(2);
  EXPECT_EQ(d[0].size(), 6u) << "logs in " << log_capture::g_dir;
  for (const std::string &kept : d[0]) EXPECT_EQ(kept.find("the FIFOs for the next"), 0u) << kept;
  EXPECT_EQ(d[0], d[1]) << "the ranks decided differently";
}

// Out-of-place all-to-alls of 128 KiB on heap buffers, 2 ranks, cma held back (the FIFOs, the
// model's p2p, kept): a measured call that keeps the model's algorithm runs its cached steps. Of
// 60 calls, the first plans them, the 8 calls of the warm-up (2-8) and every steady call take
// them, and the probes' calls do not: cma twice and the deciding handshake after call 8
// (9-11), the steady period of 32 calls (12-43), and again (44-46). 53 calls a rank, and the
// same decisions on both.
TEST(Adapt, CallsThatKeepTheModelTakeTheCachedSteps) {
  log_capture::clear();
  auto codes = forked(2, hold_back_cma, [](int rank, ncclComm_t comm) {
    const size_t count = 16384;
    std::vector<int32_t> in(count * 2), out(count * 2);
    uint64_t before = comm->calls_cached;
    for (int c = 0; c < 60; c++) {
      for (int q = 0; q < 2; q++)
        for (size_t i = 0; i < count; i++)
          in[(size_t)q * count + i] = rank * 1000003 + q * 1009 + (int32_t)(i % 1000) + c;
      CHILD_CHECK(
          ncclAlltoAll(in.data(), out.data(), count, ncclInt32, comm, nullptr) == ncclSuccess, 41,
          "call %d: %s", c, ncclGetLastError(comm));
      for (int q = 0; q < 2; q++)
        for (size_t i = 0; i < count; i++) {
          int32_t want = q * 1000003 + rank * 1009 + (int32_t)(i % 1000) + c;
          CHILD_CHECK(out[(size_t)q * count + i] == want, 42, "call %d block %d element %zu", c, q,
                      i);
        }
    }
    uint64_t cached = comm->calls_cached - before;
    CHILD_CHECK(cached == 53, 43, "%llu calls from the cached steps, want 53",
                (unsigned long long)cached);
    return 0;
  });
  expect_all_ok(codes);
  auto d = decisions_per_rank(2);
  ASSERT_EQ(d[0].size(), 2u) << "logs in " << log_capture::g_dir;
  EXPECT_EQ(d[0], d[1]);
  for (const std::string &kept : d[0]) EXPECT_EQ(kept.find("the FIFOs for the next"), 0u) << kept;
}

// The stores' decisions each rank logged ("plain stores for the next 16 calls"), in order.
std::vector<std::vector<std::string>> store_decisions(int n) {
  std::vector<std::vector<std::string>> out(n);
  for (const std::string &line : log_capture::lines()) {
    int rank = log_capture::rank_of(line);
    if (line.find("measured on this rank: plain stores") != std::string::npos && rank >= 0 &&
        rank < n)
      out[rank].push_back(line.substr(line.rfind(": ") + 2));
  }
  return out;
}

const int kStoreCalls = 24;

// Before a forked rank starts: every out-of-place all-reduce of 1 MiB is one the rule streams,
// on any machine (threshold 1 MiB, a 1-byte cache), and the algorithm stays the ring (the
// FIFOs against cma is not measured as well); `extra` on top ("NAME=VALUE").
void streaming_rule(const char *extra) {
  setenv("TUTTI_NT_THRESHOLD", "1048576", 1);
  setenv("TUTTI_CACHE_BYTES", "1", 1);
  setenv("TUTTI_ALGO", "allreduce:ring", 1);
  if (extra) putenv(const_cast<char *>(extra));
}

// 2 ranks, 24 out-of-place all-reduces of 1 MiB (exact): with streamed calls counted 20 ms
// slower on each rank (TUTTI_TEST_STREAMED_PENALTY_US) every decision keeps plain stores and at
// most 5 calls a rank stream (the rule's 3 before the first probe, one probe later, which loses
// by far and decides alone); with plain calls counted slower every decision keeps streaming
// stores and at most 4 calls a rank store plainly (one probe each time).
TEST(NtMeasure, KeepsTheFasterStores) {
  for (bool streamed_slow : {true, false}) {
    SCOPED_TRACE(streamed_slow ? "streamed calls slower" : "plain calls slower");
    log_capture::clear();
    auto codes = forked(
        2,
        [streamed_slow](int) {
          streaming_rule(streamed_slow ? "TUTTI_TEST_STREAMED_PENALTY_US=20000"
                                       : "TUTTI_TEST_PLAIN_PENALTY_US=20000");
        },
        [](int rank, ncclComm_t comm) {
          return run_calls(rank, 2, comm, 262144, kStoreCalls, false, false);
        });
    expect_all_ok(codes);
    auto d = store_decisions(2);
    const char *kept =
        streamed_slow ? "plain stores for the next" : "streaming stores for the next";
    for (const auto &mine : d) {
      ASSERT_GE(mine.size(), 1u) << "logs in " << log_capture::g_dir;
      for (const std::string &line : mine) EXPECT_EQ(line.find(kept), 0u) << line;
    }
    int streamed = log_capture::calls_saying("ncclAllReduce", "results written with streaming");
    if (streamed_slow)
      EXPECT_LE(streamed, 2 * 5);
    else
      EXPECT_GE(streamed, 2 * (kStoreCalls - 4));
  }
}

// Nothing is measured with TUTTI_NT_MEASURE=0 (every call streams, as the rule says), nor for
// in-place all-reduces (which never stream), nor below the threshold (512 KiB).
TEST(NtMeasure, StaysOutWhereItMustNot) {
  log_capture::clear();
  auto codes = forked(
      2, [](int) { streaming_rule("TUTTI_NT_MEASURE=0"); },
      [](int rank, ncclComm_t comm) {
        return run_calls(rank, 2, comm, 262144, kStoreCalls, false, false);
      });
  expect_all_ok(codes);
  EXPECT_EQ(store_decisions(2), std::vector<std::vector<std::string>>(2)) << "TUTTI_NT_MEASURE=0";
  EXPECT_EQ(log_capture::calls_saying("ncclAllReduce", "results written with streaming"),
            2 * kStoreCalls);

  log_capture::clear();
  codes = forked(
      2, [](int) { streaming_rule(nullptr); },
      [](int rank, ncclComm_t comm) {
        int rc = run_calls(rank, 2, comm, 262144, kStoreCalls, false, true);
        return rc ? rc : run_calls(rank, 2, comm, 131072, kStoreCalls, false, false);
      });
  expect_all_ok(codes);
  EXPECT_EQ(store_decisions(2), std::vector<std::vector<std::string>>(2))
      << "in place, and below the threshold";
  EXPECT_EQ(log_capture::calls_saying("ncclAllReduce", "results written with streaming"), 0);
}

}  // namespace
