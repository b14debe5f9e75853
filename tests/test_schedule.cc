// Schedules checked without a network: every rank's step list is executed by the reference
// interpreter of steps (src/algos/interp.c; unbounded FIFOs, whole steps as messages, int64 sums),
// and the results are compared with closed-form values. Also checks the invariants the engine
// relies on.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <vector>

#include "algos/interp.h"
#include "algos/registry.h"

namespace {

struct Rank {
  std::vector<int64_t> send, recv, scratch;
  std::vector<sched_t> lanes;  // lane 0: collective; or p2p lanes
};

// Runs all ranks to completion on the reference interpreter (src/algos/interp.c) with whole
// steps as messages and unbounded FIFOs; fails the test on a deadlock or a bad message.
void run_all(std::vector<Rank> &ranks) {
  std::vector<interp_rank_t> ir(ranks.size());
  for (size_t r = 0; r < ranks.size(); r++) {
    Rank &rk = ranks[r];
    ir[r] = interp_rank_t{{rk.send.data(), rk.recv.data(), nullptr, rk.scratch.data()},
                          {rk.send.size(), rk.recv.size(), 0, rk.scratch.size()},
                          rk.lanes.data(),
                          (int)rk.lanes.size()};
  }
  interp_opts_t o = {0, 0, 1, 0};
  char err[200];
  ASSERT_EQ(interp_run(ir.data(), (int)ir.size(), &o, err, sizeof err), 0) << err;
}

int64_t input(int rank, size_t j) {
  return (int64_t)j * 1000 + rank + 1;
}

std::vector<Rank> make(coll_t coll, int n, size_t count, size_t chunk, int root, bool in_place,
                       size_t send_elems, size_t recv_elems, int lanes,
                       int (*fn)(const sched_args_t *, sched_t *)) {
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; r++) {
    Rank &rk = ranks[r];
    rk.send.resize(send_elems);
    for (size_t j = 0; j < send_elems; j++) rk.send[j] = input(r, j);
    rk.recv.assign(recv_elems, -7);
    rk.scratch.assign(count + 1, 0);
    rk.lanes.assign(lanes, sched_t{});
    sched_args_t a = {coll, r, n, root, count, chunk, in_place};
    EXPECT_EQ(fn(&a, rk.lanes.data()), 0);
  }
  return ranks;
}

void free_all(std::vector<Rank> &ranks) {
  for (auto &rk : ranks)
    for (auto &s : rk.lanes) sched_free(&s);
}

const int kRanks[] = {1, 2, 3, 4, 5, 8};
const size_t kCounts[] = {0, 1, 7, 1023, 4099};

TEST(Schedule, RingAndOneshotAllReduce) {
  for (auto fn : {ring_allreduce, oneshot_allreduce})
    for (int n : kRanks)
      for (size_t c : kCounts)
        for (size_t chunk : {(size_t)1, (size_t)64, (size_t)100000}) {
          auto ranks = make(COLL_ALLREDUCE, n, c, chunk, 0, false, c, c, 1, fn);
          run_all(ranks);
          for (int r = 0; r < n; r++)
            for (size_t j = 0; j < c; j++) {
              int64_t want = (int64_t)j * 1000 * n + (int64_t)n * (n + 1) / 2;
              ASSERT_EQ(ranks[r].recv[j], want)
                  << "n=" << n << " c=" << c << " r=" << r << " j=" << j;
            }
          free_all(ranks);
        }
}

TEST(Schedule, RingMovesAtMostChunkPerStep) {
  for (int n : kRanks) {
    sched_t s = {};
    sched_args_t a = {COLL_ALLREDUCE, n - 1, n, 0, 100003, 257, 0};
    ASSERT_EQ(ring_allreduce(&a, &s), 0);
    for (size_t i = 0; i < s.n; i++)
      if (s.steps[i].recv_peer >= 0 || s.steps[i].send_peer >= 0) {
        ASSERT_LE(s.steps[i].count, 257u);
      }
    // 2(n-1)+1 steps per round (n > 1): send, n-2 reduce-send, reduce-store-send, n-2 fwd, recv.
    if (n > 1) {
      ASSERT_EQ(s.n % (size_t)(2 * n - 1), 0u);
    }
    sched_free(&s);
  }
}

TEST(Schedule, ReduceScatterAndAllGather) {
  for (int n : kRanks)
    for (size_t c : kCounts) {
      auto rs = make(COLL_REDUCESCATTER, n, c, 50, 0, false, c * n, c, 1, ring_reducescatter);
      run_all(rs);
      for (int r = 0; r < n; r++)
        for (size_t j = 0; j < c; j++)
          ASSERT_EQ(rs[r].recv[j], (int64_t)(r * c + j) * 1000 * n + (int64_t)n * (n + 1) / 2);
      free_all(rs);
      auto ag = make(COLL_ALLGATHER, n, c, 50, 0, false, c, c * n, 1, ring_allgather);
      run_all(ag);
      for (int r = 0; r < n; r++)
        for (int q = 0; q < n; q++)
          for (size_t j = 0; j < c; j++) ASSERT_EQ(ag[r].recv[q * c + j], input(q, j));
      free_all(ag);
    }
}

TEST(Schedule, ChainBroadcastAndReduce) {
  for (int n : kRanks)
    for (int root = 0; root < n; root += (n > 2 ? n - 2 : 1))
      for (size_t c : kCounts) {
        auto b = make(COLL_BROADCAST, n, c, 50, root, false, c, c, 1, chain_broadcast);
        run_all(b);
        for (int r = 0; r < n; r++)
          for (size_t j = 0; j < c; j++) ASSERT_EQ(b[r].recv[j], input(root, j));
        free_all(b);
        auto red = make(COLL_REDUCE, n, c, 50, root, false, c, c, 1, chain_reduce);
        run_all(red);
        for (size_t j = 0; j < c; j++)
          ASSERT_EQ(red[root].recv[j], (int64_t)j * 1000 * n + (int64_t)n * (n + 1) / 2);
        free_all(red);
      }
}

// An in-place all-to-all of FIFO_SWAP steps (sched_args_t.swap, as the planner sets it), on every
// rank or only on the even ones (the odd ones out of place, sending and receiving in lanes of
// their own), through FIFOs of one piece of 1, 3 or 64 elements: no deadlock, and every block
// where it belongs. (The interpreter runs a lane's sends before its receives, so the order
// within the step is the engine's to keep: test_alltoall_swap.cc checks that.)
TEST(Schedule, InPlaceAllToAllSwapsThroughFifosOfOnePiece) {
  for (int n : kRanks)
    for (size_t c : kCounts)
      for (size_t slot : {(size_t)1, (size_t)3, (size_t)64})
        for (bool mixed : {false, true}) {
          std::vector<Rank> ranks(n);
          std::vector<interp_rank_t> ir(n);
          for (int r = 0; r < n; r++) {
            Rank &rk = ranks[r];
            bool in_place = !mixed || r % 2 == 0;
            rk.send.resize(c * n);
            for (size_t j = 0; j < c * n; j++) rk.send[j] = input(r, j);
            rk.recv = in_place ? rk.send : std::vector<int64_t>(c * n, -7);
            rk.lanes.assign(2 * n, sched_t{});
            sched_args_t a = {COLL_ALLTOALL, r, n, 0, c, 50, in_place};
            a.swap = in_place;
            ASSERT_EQ(p2p_alltoall(&a, rk.lanes.data()), 0);
            int64_t *in = in_place ? rk.recv.data() : rk.send.data();
            ir[r] = interp_rank_t{{in, rk.recv.data(), nullptr, nullptr},
                                  {c * n, c * n, 0, 0},
                                  rk.lanes.data(),
                                  (int)rk.lanes.size()};
          }
          interp_opts_t o = {slot, 1, 1, 0};
          char err[200];
          ASSERT_EQ(interp_run(ir.data(), n, &o, err, sizeof err), 0)
              << err << " n=" << n << " c=" << c << " slot=" << slot << " mixed=" << mixed;
          for (int r = 0; r < n; r++)
            for (int p = 0; p < n; p++)
              for (size_t j = 0; j < c; j++)
                ASSERT_EQ(ranks[r].recv[p * c + j], input(p, r * c + j))
                    << "n=" << n << " c=" << c << " slot=" << slot << " mixed=" << mixed
                    << " r=" << r << " p=" << p << " j=" << j;
          free_all(ranks);
        }
}

TEST(Schedule, PointToPointCollectives) {
  for (int n : kRanks)
    for (size_t c : kCounts) {
      auto a2a = make(COLL_ALLTOALL, n, c, 50, 0, false, c * n, c * n, 2 * n, p2p_alltoall);
      run_all(a2a);
      for (int r = 0; r < n; r++)
        for (int p = 0; p < n; p++)
          for (size_t j = 0; j < c; j++) ASSERT_EQ(a2a[r].recv[p * c + j], input(p, r * c + j));
      free_all(a2a);
      int root = n - 1;
      auto g = make(COLL_GATHER, n, c, 50, root, false, c, c * n, 2 * n, p2p_gather);
      run_all(g);
      for (int p = 0; p < n; p++)
        for (size_t j = 0; j < c; j++) ASSERT_EQ(g[root].recv[p * c + j], input(p, j));
      free_all(g);
      auto s = make(COLL_SCATTER, n, c, 50, root, false, c * n, c, 2 * n, p2p_scatter);
      run_all(s);
      for (int r = 0; r < n; r++)
        for (size_t j = 0; j < c; j++) ASSERT_EQ(s[r].recv[j], input(root, r * c + j));
      free_all(s);
      // broadcast: every rank the root's buffer; in place the root copies nothing (its send
      // buffer is its receive buffer, apart here: it keeps -7)
      for (bool ip : {false, true}) {
        auto b = make(COLL_BROADCAST, n, c, 50, root, ip, c, c, 2 * n, p2p_broadcast);
        run_all(b);
        for (int r = 0; r < n; r++)
          for (size_t j = 0; j < c; j++)
            ASSERT_EQ(b[r].recv[j], ip && r == root ? -7 : input(root, j)) << r << " " << j;
        free_all(b);
      }
    }
}

TEST(Schedule, BlockStartCoversBeyond2e31) {
  size_t count = (1ull << 33) + 7;
  for (int n : kRanks) {
    ASSERT_EQ(block_start(count, n, 0), 0u);
    ASSERT_EQ(block_start(count, n, n), count);
    for (int k = 0; k < n; k++) {
      size_t len = block_start(count, n, k + 1) - block_start(count, n, k);
      ASSERT_TRUE(len == count / n || len == count / n + 1);
    }
  }
}

}  // namespace
