// Exchanges in place (src/group.c, copy_in_place_sends): a group that sends from memory it also
// receives into. NCCL leaves it undefined; here each such send goes from a copy made before the
// group runs, so every receiver gets what the buffer held at the call, at every size: through
// the FIFO, past its capacity (1 MiB) and by rendezvous (from TUTTI_SHM_RDV_MIN, 16 KiB), the
// first time (planned) and on repeats (the cached group). Results checked exactly.
#include <gtest/gtest.h>
#include <stdint.h>

#include <vector>

#include "forked_ranks.h"
#include "nccl.h"

namespace {

// Rank r's element i at call k.
int32_t value(int k, int r, size_t i) {
  return k * 1000003 + r * 100000 + (int32_t)(i % 99991);
}

const size_t kCounts[] = {1, 1000, 5000, 300000}; /* 4 B to 1.2 MiB */

// Ranks shift one buffer around a ring: each sends it to the next rank and receives the
// previous rank's into it. Two ranks swap it (the send first in the group), three pass it on
// (the receive first).
class P2pInPlace : public ::testing::TestWithParam<int> {};

TEST_P(P2pInPlace, RanksShiftOneBufferAroundARing) {
  const int n = GetParam();
  auto codes = forked(
      n, [](int) {},
      [n](int rank, ncclComm_t comm) {
        int next = (rank + 1) % n, prev = (rank + n - 1) % n, k = 0;
        for (size_t count : kCounts) {
          std::vector<int32_t> buf(count);
          for (int rep = 0; rep < 3; rep++, k++) {
            for (size_t i = 0; i < count; i++) buf[i] = value(k, rank, i);
            ncclGroupStart();
            if (n == 2) ncclSend(buf.data(), count, ncclInt32, next, comm, nullptr);
            ncclRecv(buf.data(), count, ncclInt32, prev, comm, nullptr);
            if (n > 2) ncclSend(buf.data(), count, ncclInt32, next, comm, nullptr);
            CHILD_CHECK(ncclGroupEnd() == ncclSuccess, 20, "call %d: %s", k,
                        ncclGetLastError(comm));
            for (size_t i = 0; i < count; i++)
              CHILD_CHECK(buf[i] == value(k, prev, i), 21,
                          "count %zu call %d element %zu: %d, want %d", count, k, i, buf[i],
                          value(k, prev, i));
          }
        }
        return 0;
      });
  expect_all_ok(codes);
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2pInPlace, ::testing::Values(2, 3));

// Buffers that overlap in part: each rank sends [0, count) and receives the peer's into
// [count / 2, count / 2 + count); the first half keeps its own values.
TEST(P2pInPlaceInPart, BuffersThatOverlapInPart) {
  auto codes = forked(
      2, [](int) {},
      [](int rank, ncclComm_t comm) {
        int peer = 1 - rank, k = 0;
        for (size_t count : kCounts) {
          size_t half = count / 2;
          std::vector<int32_t> buf(half + count);
          for (int rep = 0; rep < 2; rep++, k++) {
            for (size_t i = 0; i < buf.size(); i++) buf[i] = value(k, rank, i);
            ncclGroupStart();
            ncclSend(buf.data(), count, ncclInt32, peer, comm, nullptr);
            ncclRecv(buf.data() + half, count, ncclInt32, peer, comm, nullptr);
            CHILD_CHECK(ncclGroupEnd() == ncclSuccess, 40, "call %d: %s", k,
                        ncclGetLastError(comm));
            for (size_t i = 0; i < buf.size(); i++) {
              int32_t want = i < half ? value(k, rank, i) : value(k, peer, i - half);
              CHILD_CHECK(buf[i] == want, 41, "count %zu call %d element %zu: %d, want %d", count,
                          k, i, buf[i], want);
            }
          }
        }
        return 0;
      });
  expect_all_ok(codes);
}

}  // namespace
