// The call cache (src/enqueue.c): a thread's repeated call on a communicator without a device
// is validated in full once; a repeat checks the communicator's handle and state again and
// reuses the validated call. These tests count the full validations (comm->calls_checked) and
// check that a repeat still reads its buffers, still fails on a finalized or destroyed
// communicator, and is validated again for a communicator that only shares an address with the
// one cached (its serial differs).
#include <gtest/gtest.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "comm.h"
#include "forked_ranks.h"
#include "nccl.h"

namespace {

uint64_t checked(ncclComm_t c) {
  return __atomic_load_n(&c->calls_checked, __ATOMIC_RELAXED);
}

ncclResult_t all_reduce(std::vector<float> &send, std::vector<float> &recv, ncclRedOp_t op,
                        ncclComm_t c) {
  return ncclAllReduce(send.data(), recv.data(), send.size(), ncclFloat32, op, c, nullptr);
}

// A 1-rank communicator on which the all-reduce of send into recv ran `times` times (the call
// then cached); nullptr, with the failure recorded, if a step failed.
ncclComm_t with_cached_call(std::vector<float> &send, std::vector<float> &recv, ncclRedOp_t op,
                            int times) {
  ncclComm_t c = nullptr;
  if (ncclCommInitAll(&c, 1, nullptr) != ncclSuccess) {
    ADD_FAILURE() << ncclGetLastError(nullptr);
    return nullptr;
  }
  for (int k = 0; k < times; k++) {
    if (all_reduce(send, recv, op, c) != ncclSuccess) {
      ADD_FAILURE() << "call " << k << ": " << ncclGetLastError(c);
      return nullptr;
    }
  }
  return c;
}

// One rank: a call repeated is validated once; a call with another argument is validated, and
// so is the first call again after two others (the cache holds two calls).
TEST(CallCache, ARepeatIsValidatedOnceAnotherCallAgain) {
  ncclComm_t c;
  ASSERT_EQ(ncclCommInitAll(&c, 1, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<int32_t> send(8), recv(8), other(8);
  uint64_t base = checked(c);
  for (int k = 0; k < 4; k++) {
    for (int i = 0; i < 8; i++) send[i] = 10 * k + i;
    ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), 8, ncclInt32, ncclSum, c, nullptr),
              ncclSuccess)
        << ncclGetLastError(c);
    for (int i = 0; i < 8; i++) ASSERT_EQ(recv[i], 10 * k + i) << "call " << k << " element " << i;
  }
  EXPECT_EQ(checked(c) - base, 1u);
  ASSERT_EQ(ncclAllReduce(send.data(), other.data(), 8, ncclInt32, ncclSum, c, nullptr),
            ncclSuccess);
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), 8, ncclInt32, ncclMax, c, nullptr),
            ncclSuccess);
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), 8, ncclInt32, ncclSum, c, nullptr),
            ncclSuccess);
  EXPECT_EQ(checked(c) - base, 4u);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// One rank: two calls in turn (a send and a receive, here two all-reduces) are validated once
// each, however many times they alternate; each still reads its buffers as they are.
TEST(CallCache, TwoCallsInTurnAreValidatedOnceEach) {
  ncclComm_t c;
  ASSERT_EQ(ncclCommInitAll(&c, 1, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<int32_t> send(8), recv(8), other(8);
  uint64_t base = checked(c);
  for (int k = 0; k < 10; k++) {
    for (int i = 0; i < 8; i++) send[i] = 10 * k + i;
    std::vector<int32_t> &out = k % 2 ? other : recv;
    ASSERT_EQ(ncclAllReduce(send.data(), out.data(), 8, ncclInt32, ncclSum, c, nullptr),
              ncclSuccess)
        << ncclGetLastError(c);
    for (int i = 0; i < 8; i++) ASSERT_EQ(out[i], 10 * k + i) << "call " << k << " element " << i;
  }
  EXPECT_EQ(checked(c) - base, 2u);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A communicator created where a cached one lived has another serial: the same call is
// validated for it in full. (Which address a new communicator gets is the allocator's choice;
// the serial is what a new one at the same address would differ in.)
TEST(CallCache, AnotherSerialAtTheSameAddressIsValidatedAgain) {
  std::vector<float> send(4, 1.5f), recv(4, 0.0f);
  ncclComm_t c = with_cached_call(send, recv, ncclAvg, 2);
  ASSERT_NE(c, nullptr);
  uint64_t base = checked(c);
  c->serial += 1000;
  ASSERT_EQ(all_reduce(send, recv, ncclAvg, c), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(checked(c) - base, 1u);
  for (float v : recv) EXPECT_EQ(v, 1.5f);
  ASSERT_EQ(all_reduce(send, recv, ncclAvg, c), ncclSuccess);
  EXPECT_EQ(checked(c) - base, 1u);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A repeat on a finalized communicator fails as the first call would, naming why.
TEST(CallCache, ARepeatOnAFinalizedCommunicatorIsRefused) {
  std::vector<float> send(4, 2.0f), recv(4, 0.0f);
  ncclComm_t c = with_cached_call(send, recv, ncclSum, 2);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(ncclCommFinalize(c), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(all_reduce(send, recv, ncclSum, c), ncclInvalidUsage);
  EXPECT_NE(strstr(ncclGetLastError(c), "finalized"), nullptr) << ncclGetLastError(c);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A repeat on a destroyed communicator is refused as a first call is.
TEST(CallCache, ARepeatOnADestroyedCommunicatorIsRefused) {
  std::vector<float> send(4, 3.0f), recv(4, 0.0f);
  ncclComm_t c = with_cached_call(send, recv, ncclSum, 3);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(ncclCommDestroy(c), ncclSuccess);
  EXPECT_EQ(all_reduce(send, recv, ncclSum, c), ncclInvalidArgument);
  EXPECT_NE(strstr(ncclGetLastError(nullptr), "not a live communicator"), nullptr)
      << ncclGetLastError(nullptr);
}

// Two ranks as processes: 100 all-reduces in blocks of 10, out of place, in place and out of
// place into another buffer in turn, each summing what its buffers hold at that call; the cache
// holds two calls and the block before last has replaced the one that comes back, so each rank
// validates in full the first call of each block only: 10 of the 100.
TEST(CallCache, RepeatsBetweenProcessesSumTheirBuffersAsTheyAre) {
  const int n = 2;
  auto codes = forked(
      n, [](int) {},
      [](int rank, ncclComm_t comm) {
        const size_t count = 6;
        std::vector<int64_t> send(count), recv(count), inplace(count), other(count);
        uint64_t base = checked(comm);
        for (int k = 0; k < 100; k++) {
          int kind = (k / 10) % 3; /* 0 out of place, 1 in place, 2 into other */
          int64_t *s = kind == 1 ? inplace.data() : send.data();
          int64_t *r = kind == 0 ? recv.data() : kind == 1 ? inplace.data() : other.data();
          for (size_t i = 0; i < count; i++) s[i] = (int64_t)(k * 100 + rank * 10 + (int)i);
          CHILD_CHECK(ncclAllReduce(s, r, count, ncclInt64, ncclSum, comm, nullptr) == ncclSuccess,
                      30, "call %d: %s", k, ncclGetLastError(comm));
          for (size_t i = 0; i < count; i++) {
            int64_t want = 2 * (k * 100 + (int64_t)i) + 10;
            CHILD_CHECK(r[i] == want, 31, "call %d element %zu: %lld, want %lld", k, i,
                        (long long)r[i], (long long)want);
          }
        }
        uint64_t full = checked(comm) - base;
        CHILD_CHECK(full == 10, 32, "%llu calls validated in full, want 10 (one per block)",
                    (unsigned long long)full);
        return 0;
      });
  for (int r = 0; r < n; r++) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace
