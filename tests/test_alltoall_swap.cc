// The in-place all-to-all through the FIFOs (src/algos/p2p.c, FIFO_SWAP steps run by
// src/engine.c lane_swap / quick_swap): each rank sends its block for a peer and receives the
// peer's block into the same place, piece by piece, with no copy of the input. Checked exactly
// here with forked ranks on the shm FIFOs (the p2p algorithm forced): blocks of one piece (the
// quick way), of the rendezvous size (both ends settle a header for pieces), of many pieces, and
// none; ranks that differ in placement; more ranks than CPUs; groups where the blocks swap (two
// in-place all-to-alls) and where they cannot (a receive in a lane of its own: the input is
// copied); tcp, which sends from memory (copied too); and counts that differ and a peer that
// dies, errors rather than a hang or a wrong block.
#include <gtest/gtest.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vector>

#include "forked_ranks.h"
#include "nccl.h"

namespace {

// Rank r's element i of the block it sends to rank p at call k.
int32_t value(int k, int r, int p, size_t i) {
  return k * 1000000 + r * 100000 + p * 10000 + (int32_t)(i % 10000);
}

void p2p(int) {
  setenv("TUTTI_ALGO", "alltoall:p2p", 1);
}

void p2p_tcp(int) {
  setenv("TUTTI_ALGO", "alltoall:p2p", 1);
  setenv("TUTTI_SHM_DISABLE", "1", 1);
}

// Fills rank's input of call k into `in` (count elements per block).
void fill(std::vector<int32_t> &in, int k, int rank, int n, size_t count) {
  in.assign(count * (size_t)n, -1);
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++) in[(size_t)p * count + i] = value(k, rank, p, i);
}

// 0 when out holds call k's result on rank of n, else the CHILD_CHECK code.
int check(const std::vector<int32_t> &out, int k, int rank, int n, size_t count) {
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++)
      CHILD_CHECK(out[(size_t)p * count + i] == value(k, p, rank, i), 21,
                  "call %d count %zu block %d element %zu: %d, want %d", k, count, p, i,
                  out[(size_t)p * count + i], value(k, p, rank, i));
  return 0;
}

// Calls of every count in counts, three each; in place on the ranks that in_place(rank) says.
int sweep(ncclComm_t comm, int rank, int n, const std::vector<size_t> &counts,
          bool (*in_place)(int)) {
  std::vector<int32_t> a, b;
  int k = 0;
  for (size_t count : counts)
    for (int j = 0; j < 3; j++, k++) {
      fill(a, k, rank, n, count);
      bool ip = in_place(rank);
      b.assign(a.size(), -1);
      ncclResult_t res =
          ncclAlltoAll(a.data(), ip ? a.data() : b.data(), count, ncclInt32, comm, nullptr);
      CHILD_CHECK(res == ncclSuccess, 20, "call %d count %zu: %s", k, count,
                  ncclGetLastError(comm));
      int rc = check(ip ? a : b, k, rank, n, count);
      if (rc) return rc;
    }
  return 0;
}

bool every_rank(int) {
  return true;
}
bool rank_zero(int rank) {
  return rank == 0;
}

// 4-byte elements: 2048 a block is 8 KiB (one piece, the quick way), 4096 the rendezvous size
// (16 KiB, TUTTI_SHM_RDV_MIN: a header each way first), 5000 just past it, 300007 many pieces.
const std::vector<size_t> kCounts = {0, 1, 7, 2048, 4096, 5000, 300007};

TEST(AlltoAllSwap, InPlaceBlocksOfEverySizeAreExact) {
  for (int n : {2, 3}) {
    SCOPED_TRACE(n);
    expect_all_ok(forked(n, p2p, [n](int rank, ncclComm_t comm) {
      return sweep(comm, rank, n, kCounts, every_rank);
    }));
  }
}

// Rank 0 swaps, the others send and receive in lanes of their own (a STEP_WHOLE send and store
// by rendezvous where large): the wire is the same.
TEST(AlltoAllSwap, RanksThatDifferInPlacementAreExact) {
  for (int n : {2, 3}) {
    SCOPED_TRACE(n);
    expect_all_ok(forked(n, p2p, [n](int rank, ncclComm_t comm) {
      return sweep(comm, rank, n, kCounts, rank_zero);
    }));
  }
}

// Four ranks on this machine's CPUs (two in CI): the ranks yield while they wait.
TEST(AlltoAllSwap, MoreRanksThanCpusAreExact) {
  const int n = 4;
  expect_all_ok(forked(n, p2p, [](int rank, ncclComm_t comm) {
    return sweep(comm, rank, n, {7, 5000, 70001}, every_rank);
  }));
}

// Tcp sends from the user's memory, so its in-place all-to-all sends from a copy: exact too.
TEST(AlltoAllSwap, OverTcpTheInputIsCopiedAndExact) {
  const int n = 2;
  expect_all_ok(forked(n, p2p_tcp, [](int rank, ncclComm_t comm) {
    return sweep(comm, rank, n, {7, 5000, 300007}, every_rank);
  }));
}

// Groups: two in-place all-to-alls (both swap, one after the other in the same lanes); one with a
// send and a receive to the next and previous rank (the receive has a lane of its own: the
// all-to-all sends from a copy); one with an out-of-place all-to-all (the same).
TEST(AlltoAllSwap, GroupsAreExactWhetherTheySwapOrCopy) {
  const int n = 3;
  expect_all_ok(forked(n, p2p, [](int rank, ncclComm_t comm) {
    std::vector<int32_t> a, b, c, d;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    for (int k = 0; k < 12; k += 2) {
      size_t ca = k % 4 ? 5000 : 7, cb = 4096;
      fill(a, k, rank, n, ca);
      fill(b, k + 1, rank, n, cb);
      c.assign(cb * n, -1);
      std::vector<int32_t> out(ca, value(k, rank, next, 0)), in(ca, -1);
      ncclGroupStart();
      ncclAlltoAll(a.data(), a.data(), ca, ncclInt32, comm, nullptr);
      int form = (k / 2) % 3;
      if (form == 0) ncclAlltoAll(b.data(), b.data(), cb, ncclInt32, comm, nullptr);
      if (form == 1) {
        ncclSend(out.data(), ca, ncclInt32, next, comm, nullptr);
        ncclRecv(in.data(), ca, ncclInt32, prev, comm, nullptr);
      }
      if (form == 2) ncclAlltoAll(b.data(), c.data(), cb, ncclInt32, comm, nullptr);
      ncclResult_t res = ncclGroupEnd();
      CHILD_CHECK(res == ncclSuccess, 30, "group %d: %s", k, ncclGetLastError(comm));
      int rc = check(a, k, rank, n, ca);
      if (!rc && form != 1) rc = check(form == 0 ? b : c, k + 1, rank, n, cb);
      if (rc) return rc;
      for (size_t i = 0; form == 1 && i < ca; i++)
        CHILD_CHECK(in[i] == value(k, prev, rank, 0), 31, "group %d received %d at %zu, want %d", k,
                    in[i], i, value(k, prev, rank, 0));
    }
    return 0;
  }));
}

// Rank 1 swaps one element more a block than rank 0: both ranks' calls fail with an error that
// says the ranks disagree, for a block of one piece and one past the rendezvous size.
TEST(AlltoAllSwap, CountsThatDifferAreAnErrorOnEveryRank) {
  for (size_t count : {(size_t)4, (size_t)5000}) {
    SCOPED_TRACE(count);
    expect_all_ok(forked(2, p2p, [count](int rank, ncclComm_t comm) {
      std::vector<int32_t> a;
      size_t mine = count + (size_t)rank;
      fill(a, 0, rank, 2, mine);
      ncclResult_t res = ncclAlltoAll(a.data(), a.data(), mine, ncclInt32, comm, nullptr);
      const char *why = ncclGetLastError(comm);
      CHILD_CHECK(res != ncclSuccess, 40, "a call with counts %zu and %zu succeeded", count,
                  count + 1);
      CHILD_CHECK(strstr(why, "bytes") && strstr(why, "rank"), 41,
                  "the error does not say what differed: %s", why);
      ncclCommAbort(comm);
      _exit(0);
    }));
  }
}

// Rank 1's process ends before its fourth call; rank 0's in-place call, which fills the FIFO to
// rank 1 and waits for its pieces, fails naming rank 1: an error, not a hang. One piece (the
// quick way, handed to the engine's loop) and many.
TEST(AlltoAllSwap, ADeadPeerIsAnErrorNamingIt) {
  for (size_t count : {(size_t)7, (size_t)300007}) {
    SCOPED_TRACE(count);
    expect_all_ok(forked(2, p2p, [count](int rank, ncclComm_t comm) {
      std::vector<int32_t> a;
      for (int k = 0; k < 4; k++) {
        if (rank == 1 && k == 3) _exit(0);
        fill(a, k, rank, 2, count);
        ncclResult_t res = ncclAlltoAll(a.data(), a.data(), count, ncclInt32, comm, nullptr);
        const char *why = ncclGetLastError(comm);
        if (k < 3) {
          CHILD_CHECK(res == ncclSuccess, 50, "call %d: %s", k, why);
          int rc = check(a, k, rank, 2, count);
          if (rc) return rc;
          continue;
        }
        CHILD_CHECK(res == ncclRemoteError, 51, "call after rank 1 ended: %d (%s)", (int)res, why);
        CHILD_CHECK(strstr(why, "peer rank 1") != nullptr, 52, "the error does not name rank 1: %s",
                    why);
      }
      ncclCommAbort(comm);
      _exit(0);
    }));
  }
}

}  // namespace
