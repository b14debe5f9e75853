// The hierarchical all-reduce (src/algos/hier.c) checked without a network, as in
// test_schedule.cc: every rank's steps run in a tiny in-memory interpreter and the results are
// compared with closed forms. Unlike test_schedule.cc the FIFOs here are bounded (two messages
// of at most `chunk` elements per ordered pair, what the engine guarantees: every FIFO holds
// two chunks), so a schedule that could deadlock in the engine deadlocks here too. PRE and
// POST are modelled (x -> 3x on own input, y -> y + 1000000 on the final value), so each must
// be applied exactly once per element. Also checks what crosses hosts.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <vector>

#include "algos/registry.h"

extern "C" {
int hier_allreduce(const sched_args_t *a, const int *host_of_rank, sched_t *s);
int hier_applicable(const int *host_of_rank, int nranks);
}

namespace {

const int64_t kPost = 1000000;
int64_t pre(int64_t x) {
  return 3 * x;
}

struct Rank {
  std::vector<int64_t> send, recv;
  sched_t lane = {};
  size_t cur = 0;
  bool in_place = false;
};

using Fifo = std::deque<std::vector<int64_t>>;
using Fifos = std::map<std::pair<int, int>, Fifo>;

// Runs one step if its input is there and its output has room (2 messages per FIFO).
bool run_step(Rank &rk, int me, const step_t &st, Fifos &fifo) {
  if (st.recv_peer >= 0 && fifo[{st.recv_peer, me}].empty()) return false;
  if (st.send_peer >= 0 && fifo[{me, st.send_peer}].size() >= 2) return false;
  std::vector<int64_t> in;
  if (st.recv_peer >= 0) {
    in = fifo[{st.recv_peer, me}].front();
    fifo[{st.recv_peer, me}].pop_front();
    EXPECT_EQ(in.size(), st.count) << "rank " << me << " got a message of the wrong size";
    if (in.size() != st.count) return true;
  }
  std::vector<int64_t> &sendb = rk.in_place ? rk.recv : rk.send;
  auto buf = [&](int b) -> std::vector<int64_t> * {
    return b == BUF_SEND ? &sendb : b == BUF_RECV ? &rk.recv : nullptr;
  };
  std::vector<int64_t> *src = buf(st.src_buf), *dst = buf(st.dst_buf);
  std::vector<int64_t> out(st.count);
  for (size_t i = 0; i < st.count; i++) {
    int64_t x = src ? (*src)[st.src_off + i] : 0;
    if (st.flags & STEP_PRE) x = pre(x);
    int64_t y = st.recv_peer >= 0 ? ((st.flags & STEP_REDUCE) ? x + in[i] : in[i]) : x;
    if (st.flags & STEP_POST) y += kPost;
    out[i] = y;
  }
  if (st.flags & STEP_STORE)
    for (size_t i = 0; i < st.count; i++) (*dst)[st.dst_off + i] = out[i];
  if (st.send_peer >= 0) fifo[{me, st.send_peer}].push_back(out);
  return true;
}

void run_all(std::vector<Rank> &ranks) {
  Fifos fifo;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < ranks.size(); r++)
      while (ranks[r].cur < ranks[r].lane.n &&
             run_step(ranks[r], (int)r, ranks[r].lane.steps[ranks[r].cur], fifo))
        ranks[r].cur++, progress = true;
  }
  for (size_t r = 0; r < ranks.size(); r++)
    ASSERT_EQ(ranks[r].cur, ranks[r].lane.n) << "rank " << r << " stuck: deadlock";
  for (auto &kv : fifo) ASSERT_TRUE(kv.second.empty()) << "unconsumed message";
}

int64_t input(int rank, size_t j) {
  return (int64_t)j * 1000 + rank + 1;
}

// hosts x per_host ranks; host_of_rank as given (blocked or interleaved placement).
void check(const std::vector<int> &host_of_rank, size_t count, size_t chunk, bool in_place) {
  int n = (int)host_of_rank.size();
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; r++) {
    Rank &rk = ranks[r];
    rk.in_place = in_place;
    rk.send.resize(count);
    rk.recv.assign(count, -7);
    for (size_t j = 0; j < count; j++) (in_place ? rk.recv : rk.send)[j] = input(r, j);
    sched_args_t a = {COLL_ALLREDUCE, r, n, 0, count, chunk, in_place};
    ASSERT_EQ(hier_allreduce(&a, host_of_rank.data(), &rk.lane), 0);
    for (size_t i = 0; i < rk.lane.n; i++) {
      const step_t &st = rk.lane.steps[i];
      if (st.recv_peer >= 0 || st.send_peer >= 0) {
        ASSERT_LE(st.count, chunk) << "a step moves more than a chunk";
      }
    }
  }
  run_all(ranks);
  for (int r = 0; r < n; r++)
    for (size_t j = 0; j < count; j++) {
      int64_t want = 3 * ((int64_t)j * 1000 * n + (int64_t)n * (n + 1) / 2) + kPost;
      ASSERT_EQ(ranks[r].recv[j], want) << "n=" << n << " count=" << count << " chunk=" << chunk
                                        << " rank " << r << " element " << j;
    }
  for (auto &rk : ranks) sched_free(&rk.lane);
}

std::vector<int> blocked(int hosts, int per_host) {
  std::vector<int> h;
  for (int i = 0; i < hosts; i++)
    for (int k = 0; k < per_host; k++) h.push_back(i);
  return h;
}

TEST(HierSchedule, ExactOnEveryShape) {
  for (int hosts : {2, 3, 4})
    for (int per_host : {1, 2, 3, 4})
      for (size_t count : {(size_t)0, (size_t)1, (size_t)7, (size_t)1023, (size_t)4099})
        for (size_t chunk : {(size_t)1, (size_t)64, (size_t)100000})
          for (bool in_place : {false, true}) {
            if (chunk == 1 && count > 1023) continue;  // slow and nothing new
            check(blocked(hosts, per_host), count, chunk, in_place);
          }
}

TEST(HierSchedule, RanksOfAHostNeedNotBeContiguous) {
  check({0, 1, 0, 1, 0, 1}, 1001, 50, false);  // round-robin placement
  check({2, 2, 0, 0, 1, 1}, 1001, 50, true);   // hosts named in any order
}

TEST(HierSchedule, OneHostIsTheFlatRing) {
  check({5, 5, 5}, 1000, 64, false);
}

TEST(HierSchedule, Applicability) {
  EXPECT_TRUE(hier_applicable(blocked(2, 2).data(), 4));
  EXPECT_TRUE(hier_applicable(blocked(3, 1).data(), 3));
  EXPECT_FALSE(hier_applicable(blocked(1, 4).data(), 4));  // one host
  std::vector<int> uneven = {0, 0, 1};
  EXPECT_FALSE(hier_applicable(uneven.data(), 3));
}

// Each rank sends 2(H-1)/H of its 1/m block across hosts: the flat ring's host-crossing ranks
// send 2(n-1)/n of everything.
TEST(HierSchedule, CrossHostTrafficIsOneBlockPerRank) {
  int hosts = 3, m = 4, n = hosts * m;
  size_t count = 12000;
  std::vector<int> h = blocked(hosts, m);
  for (int r = 0; r < n; r++) {
    sched_t s = {};
    sched_args_t a = {COLL_ALLREDUCE, r, n, 0, count, 256, 0};
    ASSERT_EQ(hier_allreduce(&a, h.data(), &s), 0);
    size_t cross = 0, local = 0;
    for (size_t i = 0; i < s.n; i++) {
      if (s.steps[i].send_peer < 0) continue;
      (h[s.steps[i].send_peer] != h[r] ? cross : local) += s.steps[i].count;
    }
    EXPECT_EQ(cross, 2 * (size_t)(hosts - 1) * count / m / hosts) << "rank " << r;
    EXPECT_EQ(local, 2 * (size_t)(m - 1) * count / m) << "rank " << r;
    sched_free(&s);
  }
}

}  // namespace
