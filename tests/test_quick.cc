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

// Phases of 10 calls each, per rank: how many take the quick way. A call alone does once its
// plan is the cached one: outside a group or the only call of one, repeated or on other buffers
// of the same size; the first call of another count or placement plans anew, and a group of two
// calls is run by the group. Sums exact throughout.
TEST(Quick, CallsAloneWithTheCachedPlanTakeIt) {
  enum { ALONE, GROUP_OF_ONE, GROUP_OF_TWO };
  struct phase {
    size_t count;
    int how;
    bool in_place, other_buffers; /* other_buffers: every other call on a second pair */
    uint64_t quick;               /* all-reduces of the phase on the quick way */
  };
  static const phase phases[] = {
      {6, ALONE, false, false, 9},        {6, GROUP_OF_ONE, false, false, 10},
      {6, GROUP_OF_TWO, false, false, 0}, {6, ALONE, false, true, 10},
      {9, ALONE, true, false, 9},         {9, GROUP_OF_TWO, true, false, 0}};
  const int n = 2;
  auto codes = forked(
      n, [](int) {},
      [](int rank, ncclComm_t comm) {
        std::vector<int64_t> send[2] = {std::vector<int64_t>(16), std::vector<int64_t>(16)};
        std::vector<int64_t> recv[2] = {std::vector<int64_t>(16), std::vector<int64_t>(16)};
        int k = 0;
        for (const phase &ph : phases) {
          uint64_t before = quick_calls(comm);
          for (int j = 0; j < 10; j++, k++) {
            int first = ph.other_buffers ? j % 2 : 0, calls = ph.how == GROUP_OF_TWO ? 2 : 1;
            if (ph.how != ALONE) ncclGroupStart();
            ncclResult_t res = ncclSuccess;
            for (int b = first; b < first + calls && res == ncclSuccess; b++) {
              int64_t *s = send[b % 2].data(), *r = ph.in_place ? s : recv[b % 2].data();
              for (size_t i = 0; i < ph.count; i++) s[i] = value(k + b, rank, i);
              res = ncclAllReduce(s, r, ph.count, ncclInt64, ncclSum, comm, nullptr);
            }
            if (ph.how != ALONE) res = res == ncclSuccess ? ncclGroupEnd() : res;
            CHILD_CHECK(res == ncclSuccess, 30, "call %d: %s", k, ncclGetLastError(comm));
            for (int b = first; b < first + calls; b++) {
              const int64_t *r = ph.in_place ? send[b % 2].data() : recv[b % 2].data();
              for (size_t i = 0; i < ph.count; i++)
                CHILD_CHECK(r[i] == sum(k + b, n, i), 31,
                            "call %d buffer %d element %zu: %lld, want %lld", k, b, i,
                            (long long)r[i], (long long)sum(k + b, n, i));
            }
          }
          uint64_t quick = quick_calls(comm) - before;
          CHILD_CHECK(quick == ph.quick, 32, "calls %d-%d: %llu on the quick way, want %llu",
                      k - 10, k - 1, (unsigned long long)quick, (unsigned long long)ph.quick);
        }
        return 0;
      });
  expect_all_ok(codes);
}

// Rank 1 runs its all-reduce in a group with a send to itself and the receive of it (no
// message between ranks), so the group runs it in the engine's loop.
ncclResult_t all_reduce_in_a_group(void *buf, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                   ncclComm_t comm) {
  static int64_t mine = 7, back;
  back = 0;
  ncclGroupStart();
  ncclResult_t res = ncclAllReduce(buf, buf, count, type, op, comm, nullptr);
  if (res == ncclSuccess) res = ncclSend(&mine, 1, ncclInt64, 1, comm, nullptr);
  if (res == ncclSuccess) res = ncclRecv(&back, 1, ncclInt64, 1, comm, nullptr);
  ncclResult_t end = ncclGroupEnd();
  if (res == ncclSuccess && end == ncclSuccess && back != mine) return ncclInternalError;
  return res != ncclSuccess ? res : end;
}

// Three ranks in place (rank 2 keeps its input in scratch before the fold overwrites it): rank 1
// runs each all-reduce in the engine's loop (all_reduce_in_a_group) while ranks 0 and 2 take the
// quick way; the messages must be the same for the sums to come out. An average of floats whose
// sum is exact in binary (halves) checks the division on the last step too.
TEST(Quick, ARankInAGroupAndRanksOnTheQuickWayAgree) {
  const int n = 3;
  auto codes = forked(
      n, [](int) {},
      [](int rank, ncclComm_t comm) {
        const size_t count = 5;
        std::vector<int64_t> buf(count);
        std::vector<float> fbuf(count);
        auto run = [&](void *b, ncclDataType_t type, ncclRedOp_t op) {
          return rank == 1 ? all_reduce_in_a_group(b, count, type, op, comm)
                           : ncclAllReduce(b, b, count, type, op, comm, nullptr);
        };
        uint64_t base = quick_calls(comm);
        for (int k = 0; k < 50; k++) {
          for (size_t i = 0; i < count; i++) buf[i] = value(k, rank, i);
          ncclResult_t res = run(buf.data(), ncclInt64, ncclSum);
          CHILD_CHECK(res == ncclSuccess, 42, "call %d: %s", k, ncclGetLastError(comm));
          for (size_t i = 0; i < count; i++)
            CHILD_CHECK(buf[i] == sum(k, n, i), 43, "call %d element %zu: %lld, want %lld", k, i,
                        (long long)buf[i], (long long)sum(k, n, i));
        }
        for (int k = 0; k < 50; k++) {
          for (size_t i = 0; i < count; i++) fbuf[i] = 1.5f * (float)(rank * 8 + k + (int)i);
          ncclResult_t res = run(fbuf.data(), ncclFloat32, ncclAvg);
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
