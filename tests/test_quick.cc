// The quick way (src/group.c group_quick, src/plan.c plan_quick, src/engine.c engine_run_quick):
// a host call outside any group that repeats its communicator's cached plan, whose steps each
// move one piece through slot FIFOs, runs them without the group's and the engine's general
// loops. These tests count the calls it ran (comm->calls_quick) and check that its results are
// exact, that a rank on it and a rank on the ordinary path (a group) exchange the same messages,
// and that a late peer is waited for and a dead one is an error naming it.
#include <gtest/gtest.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "comm.h"
#include "forked_ranks.h"
#include "nccl.h"

namespace {

uint64_t quick_calls(ncclComm_t c) {
  return c->calls_quick;
}

// Rank r's element i at call k, and the sum of it over n ranks.
int64_t value(int k, int r, size_t i) {
  return (int64_t)k * 1000 + r * 10 + (int64_t)i;
}
int64_t sum(int k, int n, size_t i) {
  return n * ((int64_t)k * 1000 + (int64_t)i) + 10 * (int64_t)n * (n - 1) / 2;
}

// Phases of 10 calls each, per rank: how many take the quick way. A call in a group never does
// (the group runs it), and a repeat after the group still does (the call and its plan are
// still the cached ones); another count plans its first call anew. Sums exact throughout.
TEST(Quick, OnlyRepeatsOutsideGroupsTakeIt) {
  struct phase {
    size_t count;
    bool in_group, in_place;
    uint64_t quick; /* calls of the 10 on the quick way */
  };
  static const phase phases[] = {{6, false, false, 9}, {6, true, false, 0}, {6, false, false, 10},
                                 {9, false, false, 9}, {9, false, true, 9}, {9, true, true, 0}};
  const int n = 2;
  auto codes = forked(
      n, [](int) {},
      [](int rank, ncclComm_t comm) {
        std::vector<int64_t> send(16), recv(16);
        int k = 0;
        for (const phase &ph : phases) {
          uint64_t before = quick_calls(comm);
          for (int j = 0; j < 10; j++, k++) {
            int64_t *r = ph.in_place ? send.data() : recv.data();
            for (size_t i = 0; i < ph.count; i++) send[i] = value(k, rank, i);
            if (ph.in_group) ncclGroupStart();
            ncclResult_t res =
                ncclAllReduce(send.data(), r, ph.count, ncclInt64, ncclSum, comm, nullptr);
            if (ph.in_group) res = res == ncclSuccess ? ncclGroupEnd() : res;
            CHILD_CHECK(res == ncclSuccess, 30, "call %d: %s", k, ncclGetLastError(comm));
            for (size_t i = 0; i < ph.count; i++)
              CHILD_CHECK(r[i] == sum(k, n, i), 31, "call %d element %zu: %lld, want %lld", k, i,
                          (long long)r[i], (long long)sum(k, n, i));
          }
          uint64_t quick = quick_calls(comm) - before;
          CHILD_CHECK(quick == ph.quick, 32, "calls %d-%d: %llu on the quick way, want %llu",
                      k - 10, k - 1, (unsigned long long)quick, (unsigned long long)ph.quick);
        }
        return 0;
      });
  expect_all_ok(codes);
}

// Three ranks in place (rank 2 keeps its input in scratch before the fold overwrites it); rank 1
// wraps every call in a group, so it runs the engine's loop while ranks 0 and 2 run the quick
// way: the messages must be the same for the sums to come out. An average of floats whose sum
// is exact in binary (halves) checks the division on the last step too.
TEST(Quick, ARankInAGroupAndRanksOnTheQuickWayAgree) {
  const int n = 3;
  auto codes = forked(
      n, [](int) {},
      [](int rank, ncclComm_t comm) {
        const size_t count = 5;
        std::vector<int64_t> buf(count);
        std::vector<float> fbuf(count);
        uint64_t base = quick_calls(comm);
        for (int k = 0; k < 50; k++) {
          for (size_t i = 0; i < count; i++) buf[i] = value(k, rank, i);
          if (rank == 1) CHILD_CHECK(ncclGroupStart() == ncclSuccess, 40, "group start");
          ncclResult_t res =
              ncclAllReduce(buf.data(), buf.data(), count, ncclInt64, ncclSum, comm, nullptr);
          if (rank == 1) CHILD_CHECK(ncclGroupEnd() == ncclSuccess, 41, "group end");
          CHILD_CHECK(res == ncclSuccess, 42, "call %d: %s", k, ncclGetLastError(comm));
          for (size_t i = 0; i < count; i++)
            CHILD_CHECK(buf[i] == sum(k, n, i), 43, "call %d element %zu: %lld, want %lld", k, i,
                        (long long)buf[i], (long long)sum(k, n, i));
        }
        for (int k = 0; k < 50; k++) {
          for (size_t i = 0; i < count; i++) fbuf[i] = 1.5f * (float)(rank * 8 + k + (int)i);
          if (rank == 1) CHILD_CHECK(ncclGroupStart() == ncclSuccess, 44, "group start");
          ncclResult_t res =
              ncclAllReduce(fbuf.data(), fbuf.data(), count, ncclFloat32, ncclAvg, comm, nullptr);
          if (rank == 1) CHILD_CHECK(ncclGroupEnd() == ncclSuccess, 45, "group end");
          CHILD_CHECK(res == ncclSuccess, 46, "avg call %d: %s", k, ncclGetLastError(comm));
          for (size_t i = 0; i < count; i++) {
            float want = 1.5f * (float)(8 + k + (int)i); /* (0 + 8 + 16) / 3 = 8 */
            CHILD_CHECK(fbuf[i] == want, 47, "avg call %d element %zu: %g, want %g", k, i,
                        (double)fbuf[i], (double)want);
          }
        }
        uint64_t quick = quick_calls(comm) - base;
        uint64_t want = rank == 1 ? 0 : 98; /* all but the first call of each of the two keys */
        CHILD_CHECK(quick == want, 48, "%llu calls on the quick way, want %llu",
                    (unsigned long long)quick, (unsigned long long)want);
        return 0;
      });
  expect_all_ok(codes);
}

// A peer that comes 200 ms late to a call: the quick way stops polling and the engine waits for
// it; the sum is right and the next calls take the quick way again.
TEST(Quick, ALatePeerIsWaitedFor) {
  const int n = 2;
  auto codes = forked(
      n, [](int) {},
      [](int rank, ncclComm_t comm) {
        const size_t count = 3;
        std::vector<int64_t> send(count), recv(count);
        uint64_t base = quick_calls(comm);
        for (int k = 0; k < 20; k++) {
          if (rank == 1 && k == 10) usleep(200 * 1000);
          for (size_t i = 0; i < count; i++) send[i] = value(k, rank, i);
          CHILD_CHECK(ncclAllReduce(send.data(), recv.data(), count, ncclInt64, ncclSum, comm,
                                    nullptr) == ncclSuccess,
                      50, "call %d: %s", k, ncclGetLastError(comm));
          for (size_t i = 0; i < count; i++)
            CHILD_CHECK(recv[i] == sum(k, n, i), 51, "call %d element %zu: %lld, want %lld", k, i,
                        (long long)recv[i], (long long)sum(k, n, i));
        }
        uint64_t quick = quick_calls(comm) - base;
        CHILD_CHECK(quick == 19, 52, "%llu calls on the quick way, want 19",
                    (unsigned long long)quick);
        return 0;
      });
  expect_all_ok(codes);
}

// A peer whose process ends after 20 calls: the 21st call on the quick way fails on rank 0 with
// an error naming rank 1, not a hang.
TEST(Quick, ADeadPeerIsAnErrorNamingIt) {
  const int n = 2;
  auto codes = forked(
      n, [](int) {},
      [](int rank, ncclComm_t comm) {
        const size_t count = 4;
        std::vector<int64_t> send(count, rank + 1), recv(count);
        for (int k = 0; k < 21; k++) {
          if (rank == 1 && k == 20) _exit(0);
          ncclResult_t res =
              ncclAllReduce(send.data(), recv.data(), count, ncclInt64, ncclSum, comm, nullptr);
          if (k < 20) {
            CHILD_CHECK(res == ncclSuccess, 60, "call %d: %s", k, ncclGetLastError(comm));
            CHILD_CHECK(recv[0] == 3, 61, "call %d: %lld, want 3", k, (long long)recv[0]);
            continue;
          }
          CHILD_CHECK(res == ncclRemoteError, 62, "call %d after the peer ended: %d (%s)", k,
                      (int)res, ncclGetLastError(comm));
          const char *why = ncclGetLastError(comm);
          CHILD_CHECK(strstr(why, "peer rank 1") != nullptr, 63,
                      "the error does not name rank 1: %s", why);
        }
        CHILD_CHECK(quick_calls(comm) >= 19, 64, "%llu calls on the quick way, want 19 or more",
                    (unsigned long long)quick_calls(comm));
        ncclCommAbort(comm);
        _exit(0);
      });
  expect_all_ok(codes);
}

// A repeat whose peer never comes, aborted from another thread after 200 ms: the call returns
// an error that says so, within a few seconds (the engine's loop, which the quick way handed the
// wait to, sees the abort), not a hang.
TEST(Quick, AnAbortReleasesARepeatThatWaits) {
  const int n = 2;
  auto codes = forked(
      n, [](int) {},
      [](int rank, ncclComm_t comm) {
        std::vector<int64_t> send(4, rank + 1), recv(4);
        for (int k = 0; k < 10; k++) {
          CHILD_CHECK(ncclAllReduce(send.data(), recv.data(), 4, ncclInt64, ncclSum, comm,
                                    nullptr) == ncclSuccess,
                      70, "call %d: %s", k, ncclGetLastError(comm));
          CHILD_CHECK(recv[0] == 3, 71, "call %d: %lld, want 3", k, (long long)recv[0]);
        }
        if (rank == 1) { /* never makes call 10; leaves once rank 0 is done with it */
          usleep(1000 * 1000);
          ncclCommAbort(comm);
          _exit(0);
        }
        CHILD_CHECK(quick_calls(comm) == 9, 72, "%llu calls on the quick way, want 9",
                    (unsigned long long)quick_calls(comm));
        std::atomic<int> aborted{-1};
        std::thread aborter([&] {
          usleep(200 * 1000);
          aborted = (int)ncclCommAbort(comm);
        });
        auto t0 = std::chrono::steady_clock::now();
        ncclResult_t res =
            ncclAllReduce(send.data(), recv.data(), 4, ncclInt64, ncclSum, comm, nullptr);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        aborter.join();
        const char *why = ncclGetLastError(nullptr);
        CHILD_CHECK(res != ncclSuccess, 73, "the call the peer never made succeeded");
        CHILD_CHECK(strstr(why, "abort") != nullptr, 74, "the error does not say abort: %s", why);
        CHILD_CHECK(s > 0.15 && s < 3.0, 75, "the call returned after %.2f s", s);
        CHILD_CHECK(aborted == (int)ncclSuccess, 76, "ncclCommAbort returned %d", aborted.load());
        _exit(0);
      });
  expect_all_ok(codes);
}

}  // namespace
