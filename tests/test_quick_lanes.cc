// The quick way for point-to-point algorithms (src/plan_p2p.c; src/engine.c engine_run_quick over
// several lanes): a gather, scatter or all-to-all of the p2p algorithm that repeats its
// communicator's cached plan, and a group of sends and receives that repeats the last such group,
// run their cached lanes, one per peer and direction, without planning them again; where each
// lane's steps move one piece below the rendezvous size, on the quick way. These tests count the
// calls it ran (comm->calls_quick), check every result exactly, and check that a count that differs
// and a dead peer are errors, not hangs.
#include <gtest/gtest.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "comm.h"
#include "forked_ranks.h"
#include "nccl.h"

namespace {

uint64_t quick_calls(ncclComm_t c) {
  return c->calls_quick;
}

// Rank r's element i of the block it sends to rank p at call k.
int32_t value(int k, int r, int p, size_t i) {
  return k * 100000 + r * 1000 + p * 100 + (int32_t)i;
}

void p2p_algorithms(int) {
  setenv("TUTTI_ALGO", "gather:p2p;scatter:p2p;alltoall:p2p", 1);
}

enum kind { GATHER, SCATTER, ALLTOALL };

// One call of kind on rank `rank` of n: fills the input for call k, runs it, checks the output
// exactly. 0, or the CHILD_CHECK code.
int run_one(ncclComm_t comm, int rank, int n, kind what, int root, size_t count, bool in_place,
            int k, std::vector<int32_t> &send, std::vector<int32_t> &recv) {
  size_t total = count * (size_t)n;
  send.assign(total, -1), recv.assign(total, -1);
  ncclResult_t res;
  if (what == GATHER) {
    int32_t *in = in_place && rank == root ? recv.data() + (size_t)rank * count : send.data();
    for (size_t i = 0; i < count; i++) in[i] = value(k, rank, root, i);
    res = ncclGather(in, recv.data(), count, ncclInt32, root, comm, nullptr);
  } else if (what == SCATTER) {
    int32_t *out = in_place && rank == root ? send.data() + (size_t)rank * count : recv.data();
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++) send[(size_t)p * count + i] = value(k, rank, p, i);
    res = ncclScatter(send.data(), out, count, ncclInt32, root, comm, nullptr);
  } else {
    int32_t *out = in_place ? send.data() : recv.data();
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++) send[(size_t)p * count + i] = value(k, rank, p, i);
    res = ncclAlltoAll(send.data(), out, count, ncclInt32, comm, nullptr);
  }
  CHILD_CHECK(res == ncclSuccess, 20, "call %d: %s", k, ncclGetLastError(comm));
  if (what == GATHER && rank == root) {
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++)
        CHILD_CHECK(recv[(size_t)p * count + i] == value(k, p, root, i), 21,
                    "gather call %d block %d element %zu: %d, want %d", k, p, i,
                    recv[(size_t)p * count + i], value(k, p, root, i));
  } else if (what == SCATTER) {
    const int32_t *out =
        in_place && rank == root ? send.data() + (size_t)rank * count : recv.data();
    for (size_t i = 0; i < count; i++)
      CHILD_CHECK(out[i] == value(k, root, rank, i), 22, "scatter call %d element %zu: %d, want %d",
                  k, i, out[i], value(k, root, rank, i));
  } else if (what == ALLTOALL) {
    const int32_t *out = in_place ? send.data() : recv.data();
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++)
        CHILD_CHECK(out[(size_t)p * count + i] == value(k, p, rank, i), 23,
                    "all-to-all call %d block %d element %zu: %d, want %d", k, p, i,
                    out[(size_t)p * count + i], value(k, p, rank, i));
  }
  return 0;
}

struct phase {
  kind what;
  int root;
  size_t count; /* elements per block */
  bool in_place;
  bool alternate; /* every other call the other of gather and scatter: the key never repeats */
  uint64_t quick; /* calls of the 10 on the quick way, per rank */
};

int run_phases(ncclComm_t comm, int rank, int n, const phase *phases, size_t nphases) {
  std::vector<int32_t> send, recv;
  int k = 0;
  for (size_t f = 0; f < nphases; f++) {
    const phase &ph = phases[f];
    uint64_t before = quick_calls(comm);
    for (int j = 0; j < 10; j++, k++) {
      kind what = ph.alternate && j % 2 ? (ph.what == GATHER ? SCATTER : GATHER) : ph.what;
      int rc = run_one(comm, rank, n, what, ph.root, ph.count, ph.in_place, k, send, recv);
      if (rc) return rc;
    }
    uint64_t quick = quick_calls(comm) - before;
    CHILD_CHECK(quick == ph.quick, 24, "phase %zu: %llu calls on the quick way, want %llu", f,
                (unsigned long long)quick, (unsigned long long)ph.quick);
  }
  return 0;
}

// Three ranks, small blocks: every call but the first of each key takes the quick way, on every
// rank (a gather's senders too: their plan is one send lane), whatever the root, an in-place
// all-to-all too (its blocks swapped through the FIFOs, no copy); calls whose key changes every
// time do not.
TEST(QuickLanes, RepeatedSmallCallsTakeIt) {
  static const phase phases[] = {
      {GATHER, 0, 3, false, false, 9},  {GATHER, 2, 3, false, false, 9},
      {SCATTER, 1, 5, false, false, 9}, {ALLTOALL, 0, 2, false, false, 9},
      {ALLTOALL, 0, 2, true, false, 9}, {GATHER, 1, 4, true, false, 9},
      {SCATTER, 2, 4, true, false, 9},  {GATHER, 0, 6, false, true, 0},
      {GATHER, 0, 3, false, false, 9}};
  const int n = 3;
  auto codes = forked(n, p2p_algorithms, [](int rank, ncclComm_t comm) {
    return run_phases(comm, rank, n, phases, sizeof(phases) / sizeof(phases[0]));
  });
  expect_all_ok(codes);
}

// Two ranks, blocks around the rendezvous size (TUTTI_SHM_RDV_MIN, 16 KiB): 8 KiB blocks go on
// the quick way; 20 KiB and 1 MiB blocks (rendezvous; pieces of the FIFO's slots) run their
// cached lanes in the engine's loop. Exact throughout.
TEST(QuickLanes, LargeBlocksRunTheirLanesInTheEngine) {
  static const phase phases[] = {
      {ALLTOALL, 0, 2048, false, false, 9},   {ALLTOALL, 0, 5120, false, false, 0},
      {GATHER, 1, 5120, false, false, 0},     {SCATTER, 0, 262144, false, false, 0},
      {ALLTOALL, 0, 262144, false, false, 0}, {SCATTER, 0, 2048, false, false, 9}};
  const int n = 2;
  auto codes = forked(n, p2p_algorithms, [](int rank, ncclComm_t comm) {
    return run_phases(comm, rank, n, phases, sizeof(phases) / sizeof(phases[0]));
  });
  expect_all_ok(codes);
}

// ---- groups of sends and receives ----

// Rank r's element i of what it sends to rank p at call k (as value(), another range).
int32_t sent(int k, int r, int p, size_t i) {
  return 2000000000 - value(k, r, p, i);
}

enum exchange { RING, ALTERNATE, ROTATE, ONE_WAY, WITH_SELF, AROUND_AN_ALLREDUCE };

// One step of kind `how` on rank `rank` of n, call k: sends and receives in a group (ONE_WAY:
// rank 0 sends to rank 1 alone, outside any group; the other ranks do nothing), every received
// element checked. 0, or the CHILD_CHECK code.
int exchange_once(ncclComm_t comm, int rank, int n, exchange how, size_t count, int k,
                  std::vector<int32_t> &send, std::vector<int32_t> &recv) {
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  if (how == ALTERNATE) count += k % 2; /* two groups in turn */
  if (how == ROTATE) count += k % 3;    /* three: the key is never one of the last two */
  send.assign(count, 0), recv.assign(count, -1);
  ncclResult_t res = ncclSuccess;
  if (how == ONE_WAY) {
    if (rank > 1) return 0;
    if (rank == 0) {
      for (size_t i = 0; i < count; i++) send[i] = sent(k, 0, 1, i);
      res = ncclSend(send.data(), count, ncclInt32, 1, comm, nullptr);
    } else {
      res = ncclRecv(recv.data(), count, ncclInt32, 0, comm, nullptr);
    }
    CHILD_CHECK(res == ncclSuccess, 50, "call %d: %s", k, ncclGetLastError(comm));
    for (size_t i = 0; rank == 1 && i < count; i++)
      CHILD_CHECK(recv[i] == sent(k, 0, 1, i), 51, "call %d element %zu: %d, want %d", k, i,
                  recv[i], sent(k, 0, 1, i));
    return 0;
  }
  std::vector<int32_t> self(count, -1);
  for (size_t i = 0; i < count; i++) send[i] = sent(k, rank, next, i);
  ncclGroupStart();
  ncclRecv(recv.data(), count, ncclInt32, prev, comm, nullptr);
  ncclSend(send.data(), count, ncclInt32, next, comm, nullptr);
  if (how == WITH_SELF) {
    ncclSend(send.data(), count, ncclInt32, rank, comm, nullptr);
    ncclRecv(self.data(), count, ncclInt32, rank, comm, nullptr);
  }
  res = ncclGroupEnd();
  CHILD_CHECK(res == ncclSuccess, 52, "call %d: %s", k, ncclGetLastError(comm));
  for (size_t i = 0; i < count; i++) {
    CHILD_CHECK(recv[i] == sent(k, prev, rank, i), 53, "call %d element %zu: %d, want %d", k, i,
                recv[i], sent(k, prev, rank, i));
    if (how == WITH_SELF)
      CHILD_CHECK(self[i] == send[i], 54, "call %d own element %zu: %d, want %d", k, i, self[i],
                  send[i]);
  }
  if (how == AROUND_AN_ALLREDUCE) {
    int64_t v = rank + k, s = 0;
    res = ncclAllReduce(&v, &s, 1, ncclInt64, ncclSum, comm, nullptr);
    CHILD_CHECK(res == ncclSuccess && s == (int64_t)n * k + n * (n - 1) / 2, 55,
                "all-reduce after call %d: %lld (%s)", k, (long long)s, ncclGetLastError(comm));
  }
  return 0;
}

// Three ranks in a ring, 10 steps per phase: a group of a receive and a send that repeats one of
// the last two groups runs its cached lanes on the quick way (both calls, 9 groups: 18); so do
// two groups in turn (the first one's count that of the first phase, still kept: 18), and a send
// or a receive alone; three groups in turn, and groups with a send and a receive to self, do
// not; an all-reduce between the groups (its own cache) leaves theirs, so the next phase's first
// group is on the quick way too. Large messages (1 MiB: rendezvous) are not on the quick way.
// Exact throughout.
TEST(QuickLanes, RepeatedGroupsOfSendsAndReceivesTakeIt) {
  struct step {
    exchange how;
    size_t count;
    uint64_t quick[3]; /* per rank: the phase's calls on the quick way, the all-reduces' too */
  };
  static const step phases[] = {
      {RING, 7, {18, 18, 18}},      {RING, 1000, {18, 18, 18}},
      {ALTERNATE, 7, {18, 18, 18}}, {ROTATE, 11, {0, 0, 0}},
      {ONE_WAY, 9, {9, 9, 0}},      {WITH_SELF, 7, {0, 0, 0}},
      {RING, 262144, {0, 0, 0}},    {AROUND_AN_ALLREDUCE, 7, {27, 27, 27}},
      {RING, 7, {20, 20, 20}}}; /* the same group as the last */
  const int n = 3;
  auto codes = forked(n, p2p_algorithms, [](int rank, ncclComm_t comm) {
    std::vector<int32_t> send, recv;
    int k = 0;
    for (size_t f = 0; f < sizeof(phases) / sizeof(phases[0]); f++) {
      const step &ph = phases[f];
      uint64_t before = quick_calls(comm);
      for (int j = 0; j < 10; j++, k++) {
        int rc = exchange_once(comm, rank, n, ph.how, ph.count, k, send, recv);
        if (rc) return rc;
      }
      uint64_t quick = quick_calls(comm) - before;
      CHILD_CHECK(quick == ph.quick[rank], 56, "phase %zu: %llu calls on the quick way, want %llu",
                  f, (unsigned long long)quick, (unsigned long long)ph.quick[rank]);
    }
    return 0;
  });
  expect_all_ok(codes);
}

// ---- failures on the quick way ----

// The failure tests' repeated call, on 2 ranks: a gather to rank 0 alone (exchange false), or
// an exchange with the peer in a group; this rank sends `count` elements and receives 4. Calls
// on the quick way: 1 per gather, 2 per exchange.
ncclResult_t failure_call(bool exchange, ncclComm_t comm, int rank, size_t count,
                          std::vector<int32_t> &send, std::vector<int32_t> &recv) {
  if (!exchange) return ncclGather(send.data(), recv.data(), count, ncclInt32, 0, comm, nullptr);
  ncclGroupStart();
  ncclSend(send.data(), count, ncclInt32, 1 - rank, comm, nullptr);
  ncclRecv(recv.data(), 4, ncclInt32, 1 - rank, comm, nullptr);
  return ncclGroupEnd();
}

class QuickLanesFailure : public ::testing::TestWithParam<bool> {};

// Five cached calls, then rank 1 sends 5 elements where rank 0 receives 4: rank 0's call fails
// with an error naming the sizes and the rank (the quick way hands the step to the engine, which
// reports it), not a hang and not a wrong result taken for a right one.
TEST_P(QuickLanesFailure, ADifferentCountIsAnError) {
  bool exchange = GetParam();
  auto codes = forked(2, p2p_algorithms, [exchange](int rank, ncclComm_t comm) {
    std::vector<int32_t> send(8, rank), recv(8, -1);
    for (int k = 0; k < 6; k++) {
      size_t count = rank == 1 && k == 5 ? 5 : 4;
      ncclResult_t res = failure_call(exchange, comm, rank, count, send, recv);
      if (k < 5 || rank == 1) {
        CHILD_CHECK(res == ncclSuccess, 30, "call %d: %s", k, ncclGetLastError(comm));
        continue;
      }
      const char *why = ncclGetLastError(comm);
      CHILD_CHECK(res == ncclInvalidUsage, 31, "call %d: %d (%s), want ncclInvalidUsage", k,
                  (int)res, why);
      CHILD_CHECK(strstr(why, "received 20 bytes from rank 1 where it expected 16") != nullptr, 32,
                  "the error does not name the sizes and the rank: %s", why);
    }
    uint64_t want = exchange ? 8 : 4;
    CHILD_CHECK(quick_calls(comm) >= want, 33, "%llu calls on the quick way, want %llu or more",
                (unsigned long long)quick_calls(comm), (unsigned long long)want);
    ncclCommAbort(comm);
    _exit(0);
  });
  expect_all_ok(codes);
}

// Ten cached calls; rank 1's process ends before the 11th: rank 0's, which the quick way hands
// to the engine's loop while it waits for rank 1, fails with an error naming rank 1, not a hang.
TEST_P(QuickLanesFailure, ADeadPeerIsAnErrorNamingIt) {
  bool exchange = GetParam();
  auto codes = forked(2, p2p_algorithms, [exchange](int rank, ncclComm_t comm) {
    std::vector<int32_t> send(4, rank), recv(8, -1);
    for (int k = 0; k < 11; k++) {
      if (rank == 1 && k == 10) _exit(0);
      ncclResult_t res = failure_call(exchange, comm, rank, 4, send, recv);
      if (k < 10) {
        CHILD_CHECK(res == ncclSuccess, 40, "call %d: %s", k, ncclGetLastError(comm));
        continue;
      }
      const char *why = ncclGetLastError(comm);
      CHILD_CHECK(res == ncclRemoteError, 41, "call %d after rank 1 ended: %d (%s)", k, (int)res,
                  why);
      CHILD_CHECK(strstr(why, "peer rank 1") != nullptr, 42, "the error does not name rank 1: %s",
                  why);
    }
    uint64_t want = exchange ? 18 : 9;
    CHILD_CHECK(quick_calls(comm) >= want, 43, "%llu calls on the quick way, want %llu or more",
                (unsigned long long)quick_calls(comm), (unsigned long long)want);
    ncclCommAbort(comm);
    _exit(0);
  });
  expect_all_ok(codes);
}

INSTANTIATE_TEST_SUITE_P(GatherOrExchange, QuickLanesFailure, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &i) {
                           return std::string(i.param ? "Exchange" : "Gather");
                         });

}  // namespace
