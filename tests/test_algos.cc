// The tree, halving-doubling, recursive-doubling, direct, cma and (in a ring order) ring
// schedules (src/algos/tree.c, rhd.c, direct.c, cma.c, ring.c) run by the reference interpreter of
// steps (src/algos/interp.c), as the engine runs them: steps cut into pieces of one slot, bounded
// FIFOs (two chunks each, the least the engine guarantees), a sender blocks on a full FIFO, a
// piece of the wrong size is an error. So a schedule that could deadlock, read a buffer it does
// not own, or apply PreMulSum / Avg twice fails here. Values are int64: PRE multiplies a rank's
// own input by 3, POST adds 2^40 (so "exactly once" is visible), the results are closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "algos/interp.h"
#include "algos/registry.h"

namespace {

const int64_t kPre = 3, kPost = int64_t(1) << 40;

struct View {  // a buffer: base offset into a storage vector (in place views share one)
  std::vector<int64_t> *v = nullptr;
  size_t base = 0;
  int64_t &at(size_t i) { return v->at(base + i); }
};

struct Rank {
  std::vector<int64_t> send_store, recv_store, scratch;
  View buf[4];
  sched_t s{};
};

// Runs every rank to completion on the reference interpreter (src/algos/interp.c) with pieces
// of `slot` elements and FIFOs of `depth` pieces; returns "" or what went wrong.
std::string run(size_t slot, size_t depth, std::vector<Rank> &ranks, bool plain) {
  std::vector<interp_rank_t> ir(ranks.size());
  for (size_t r = 0; r < ranks.size(); r++) {
    for (int b = 0; b < 4; b++) {
      View &v = ranks[r].buf[b];
      ir[r].buf[b] = v.v && v.base <= v.v->size() ? v.v->data() + v.base : nullptr;
      ir[r].len[b] = ir[r].buf[b] ? v.v->size() - v.base : 0;
    }
    ir[r].lanes = &ranks[r].s, ir[r].nlanes = 1;
  }
  interp_opts_t o = {slot, depth, plain ? 1 : kPre, kPost};
  char err[200];
  return interp_run(ir.data(), (int)ir.size(), &o, err, sizeof err) == 0 ? "" : err;
}

int64_t input(int rank, size_t j) {
  return (int64_t)j * 1000 + rank + 1;
}
int64_t pre_sum(int n, size_t j, int64_t pre = kPre) {  // sum over ranks of PRE(input)
  return pre * ((int64_t)j * 1000 * n + (int64_t)n * (n + 1) / 2);
}

struct Setup {
  coll_t coll;
  algo_t algo;
  int n, root;
  size_t count, chunk;
  bool in_place;
  const int *hosts = nullptr;  // host_of_rank for sched_build (nullptr: none)
  bool exchange = false;       // sched_args_t.exchange (an all-to-all on peer steps)
  bool mixed = false;          // the even ranks in place, the odd ones not (in_place ignored)
  bool plain = false;          // an algorithm without PreMulSum (ALGO_NEEDS_PLAIN_OP): no PRE
  const int *ring = nullptr;   // ring order (position -> rank) for sched_args_t (nullptr: none)
  std::vector<size_t> slots;   // slot sizes to run with (empty: 1, chunk/2, chunk)
};

// Buffers per NCCL's layout for the collective (sizes: non-roots get none where NCCL allows NULL).
bool in_place_at(const Setup &u, int r) {
  return u.mixed ? r % 2 == 0 : u.in_place;
}

void layout(const Setup &u, int r, Rank &rk) {
  size_t c = u.count, n = (size_t)u.n, ns = c, nr = c;
  bool root = r == u.root;
  bool gathers = u.coll == COLL_ALLGATHER || u.coll == COLL_GATHER;
  bool scatters = u.coll == COLL_REDUCESCATTER || u.coll == COLL_SCATTER;
  if (u.coll == COLL_ALLGATHER || u.coll == COLL_ALLTOALL || (u.coll == COLL_GATHER && root))
    nr = c * n;
  if (u.coll == COLL_REDUCESCATTER || u.coll == COLL_ALLTOALL || (u.coll == COLL_SCATTER && root))
    ns = c * n;
  if ((u.coll == COLL_BROADCAST || u.coll == COLL_SCATTER) && !root) ns = 0;
  if ((u.coll == COLL_REDUCE || u.coll == COLL_GATHER) && !root) nr = 0;
  size_t in_elem = scatters ? ns : (gathers ? nr : std::max(ns, nr));
  if (in_place_at(u, r) && ns && nr) {
    rk.send_store.assign(in_elem, -7);
    size_t so = gathers ? (size_t)r * c : 0, ro = scatters ? (size_t)r * c : 0;
    rk.buf[BUF_SEND] = {&rk.send_store, so};
    rk.buf[BUF_RECV] = {&rk.send_store, ro};
  } else {
    rk.send_store.assign(ns, -7);
    rk.recv_store.assign(nr, -7);
    rk.buf[BUF_SEND] = {&rk.send_store, 0};
    rk.buf[BUF_RECV] = {&rk.recv_store, 0};
  }
  for (size_t j = 0; j < ns; j++) rk.buf[BUF_SEND].at(j) = input(r, j);
}

std::vector<Rank> build(const Setup &u, int *rc) {
  std::vector<Rank> ranks(u.n);
  *rc = 0;
  std::vector<int> pos(u.n);
  for (int i = 0; u.ring && i < u.n; i++) pos[u.ring[i]] = i;
  for (int r = 0; r < u.n; r++) {
    sched_args_t a = {u.coll, r, u.n, u.root, u.count, u.chunk, in_place_at(u, r)};
    a.premul = !u.plain;  // PRE scales by kPre: a PreMulSum
    a.exchange = u.exchange;
    if (u.ring) a.ring = u.ring, a.ring_pos = pos.data();
    layout(u, r, ranks[r]);
    ranks[r].scratch.assign(sched_scratch_elems(u.algo, &a), -9);
    ranks[r].buf[BUF_SCRATCH] = {&ranks[r].scratch, 0};
    int x = sched_build(u.algo, &a, u.hosts, &ranks[r].s, nullptr);
    if (x != 0) *rc = x;
  }
  return ranks;
}

std::string name(const Setup &u) {
  return std::string(algo_name(u.algo)) + " " + coll_name(u.coll) + " n=" + std::to_string(u.n) +
         " count=" + std::to_string(u.count) + " chunk=" + std::to_string(u.chunk) +
         " root=" + std::to_string(u.root) +
         (u.mixed      ? " mixed"
          : u.in_place ? " in place"
                       : "") +
         (u.exchange ? " exchange" : "");
}

// Expected output element j on rank r (reducing collectives: PRE on every input, POST once).
int64_t expected(const Setup &u, int r, size_t j) {
  switch (u.coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
      return pre_sum(u.n, j, u.plain ? 1 : kPre) + kPost;
    case COLL_REDUCESCATTER:
      return pre_sum(u.n, (size_t)r * u.count + j, u.plain ? 1 : kPre) + kPost;
    case COLL_ALLGATHER:
    case COLL_GATHER:
      return input((int)(j / u.count), j % u.count);
    case COLL_SCATTER:
      return input(u.root, (size_t)r * u.count + j);
    case COLL_ALLTOALL:  // block q of the result: rank q's block r
      return input((int)(j / u.count), (size_t)r * u.count + j % u.count);
    default:
      return input(u.root, j);  // broadcast
  }
}

void check_one(const Setup &u) {
  SCOPED_TRACE(name(u) + (u.plain ? " plain" : " premul"));
  int rc;
  std::vector<Rank> ranks = build(u, &rc);
  ASSERT_EQ(rc, 0);
  std::vector<size_t> slots = u.slots;
  if (slots.empty()) slots = {(size_t)1, std::max<size_t>(u.chunk / 2, 1), u.chunk};
  for (size_t slot : slots) {
    if (u.chunk % slot) continue;
    for (int r = 0; r < u.n; r++) layout(u, r, ranks[r]);  // fresh buffers
    ASSERT_EQ(run(slot, 2 * (u.chunk / slot), ranks, u.plain), "") << "slot " << slot;
    for (int r = 0; r < u.n; r++) {
      if ((u.coll == COLL_REDUCE || u.coll == COLL_GATHER) && r != u.root) continue;
      bool blocks = u.coll == COLL_ALLGATHER || u.coll == COLL_GATHER || u.coll == COLL_ALLTOALL;
      size_t outs = blocks ? u.count * u.n : u.count;
      for (size_t j = 0; j < outs; j++)
        ASSERT_EQ(ranks[r].buf[BUF_RECV].at(j), expected(u, r, j)) << "rank " << r << " elem " << j;
    }
  }
  for (auto &rk : ranks) sched_free(&rk.s);
}

// As a PreMulSum (PRE scales each input by kPre) and, for the reductions, as a plain operator
// too (sched_args_t.premul 0: builders may then skip copies that only a scaling needs).
void check(const Setup &u) {
  check_one(u);
  bool reduces = u.coll == COLL_ALLREDUCE || u.coll == COLL_REDUCE || u.coll == COLL_REDUCESCATTER;
  if (!u.plain && reduces) {
    Setup plain = u;
    plain.plain = true;
    check_one(plain);
  }
}

const size_t kCounts[] = {0, 1, 2, 5, 7, 13, 64, 1023};
const size_t kChunks[] = {1, 4, 16, 100000};

// One-shot: every send fits the FIFO (the tuner's condition: the slot holds the whole count).
TEST(Algos, AllReduceOneshot) {
  for (int n = 1; n <= 8; n++)
    for (size_t c : {(size_t)0, (size_t)1, (size_t)2, (size_t)5, (size_t)13, (size_t)64})
      for (bool ip : {false, true}) {
        size_t slot = std::max<size_t>(c, 1);
        ::Setup u{COLL_ALLREDUCE, ALGO_ONESHOT, n, 0, c, slot, ip};
        u.slots = {slot};
        check(u);
      }
}

TEST(Algos, AllReduceTreeRhdRd) {
  for (algo_t algo : {ALGO_TREE, ALGO_RHD, ALGO_RD})
    for (int n = 1; n <= 8; n++)
      for (size_t c : kCounts)
        for (size_t chunk : kChunks)
          for (bool ip : {false, true}) check({COLL_ALLREDUCE, algo, n, 0, c, chunk, ip});
}

// Direct reads the other ranks' buffers in place, cma by copy and pushes its all-reduce results
// (peer steps, STEP_PUSH), push does the same on mapped buffers: direct and cma every collective
// (push: all-reduce and all-gather), any number of ranks, the first and the last rank as the
// root, in place or not, the same closed forms without PreMulSum. An all-to-all in place, and
// one where only the even ranks are, exchanges blocks pairwise (sched_args_t.exchange, as the
// planner sets it); out of place it pulls them, or exchanges them too.
TEST(Algos, DirectCmaAndPushPeerSteps) {
  int built = 0;
  for (algo_t algo : {ALGO_DIRECT, ALGO_CMA, ALGO_PUSH})
    for (int coll = 0; coll < COLL_SEND; coll++)
      for (int n = 1; n <= 8 && algo_implements(algo, (coll_t)coll); n++)
        for (int root : {0, n - 1})
          for (size_t c : kCounts)
            for (int placement = 0; placement < 4; placement++) {
              // 0 out of place, 1 in place; all-to-all: 2 out of place exchanging, 3 mixed
              if (placement >= 2 && coll != COLL_ALLTOALL) continue;
              ::Setup u{(coll_t)coll, algo, n, root, c, 4, placement == 1};
              u.exchange = coll == COLL_ALLTOALL && placement > 0;
              u.mixed = placement == 3;
              u.plain = true;
              check(u);
              built++;
            }
  // direct and cma: 8 collectives, push 2; 8 rank counts, 2 roots, 8 counts, 2 placements (but
  // all-to-all's 4)
  EXPECT_EQ(built, (8 + 8 + 2) * 8 * 2 * 8 * 2 + 2 * 8 * 2 * 8 * 2);
}

// rd across hosts folds each host into its first rank: hosts in blocks, interleaved, uneven,
// a number of hosts that is not a power of two, one rank per host (flat rd) and one host.
TEST(Algos, RdAcrossHosts) {
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1, 2, 2, 3, 3},
                                                 {0, 1, 0, 1, 0, 1},
                                                 {0, 0, 0, 1, 2, 2},
                                                 {0, 0, 1, 1, 2, 2, 3, 3, 4, 4},
                                                 {0, 1, 2, 3, 4},
                                                 {0, 0, 0, 0},
                                                 {7, 7, 3}};
  for (const auto &h : layouts)
    for (size_t c : kCounts)
      for (size_t chunk : {(size_t)1, (size_t)16, (size_t)100000})
        for (bool ip : {false, true}) {
          ::Setup u{COLL_ALLREDUCE, ALGO_RD, (int)h.size(), 0, c, chunk, ip};
          u.hosts = h.data();
          check(u);
        }
  // 4 hosts of 2: the leaders send 2 exchanges across hosts, the others 1 message each way
  int hosts[8] = {0, 0, 1, 1, 2, 2, 3, 3};
  for (int r = 0; r < 8; r++) {
    sched_args_t a = {COLL_ALLREDUCE, r, 8, 0, 2, 1024, 0};
    sched_t s{};
    ASSERT_EQ(sched_build(ALGO_RD, &a, hosts, &s, nullptr), 0);
    EXPECT_EQ(s.n, r % 2 ? 2u : 6u) << r;  // recv + 2 x (send + recv) + send; send + recv
    sched_free(&s);
  }
}

// The ring in any order (the communicator's topology order, sched_args_t.ring): all-reduce,
// reduce-scatter and all-gather keep NCCL's layouts (blocks belong to ranks, not positions), and
// each rank sends only to the rank after it in the order.
TEST(Algos, RingFollowsTheRingOrder) {
  const std::vector<std::vector<int>> orders = {{1, 0},         {0, 2, 1},    {2, 1, 0},
                                                {0, 2, 1, 3},   {3, 1, 0, 2}, {0, 2, 4, 1, 3, 5},
                                                {4, 0, 3, 1, 2}};
  for (const auto &o : orders)
    for (coll_t coll : {COLL_ALLREDUCE, COLL_REDUCESCATTER, COLL_ALLGATHER})
      for (size_t c : kCounts)
        for (size_t chunk : {(size_t)1, (size_t)4, (size_t)100000})
          for (bool ip : {false, true}) {
            ::Setup u{coll, ALGO_RING, (int)o.size(), 0, c, chunk, ip};
            u.ring = o.data();
            check(u);
          }
  const int order[] = {0, 2, 4, 1, 3, 5}, next[] = {2, 3, 4, 5, 1, 0};
  std::vector<int> pos(6);
  for (int i = 0; i < 6; i++) pos[order[i]] = i;
  for (int r = 0; r < 6; r++) {
    sched_args_t a = {COLL_ALLREDUCE, r, 6, 0, 60, 4, 0};
    a.ring = order, a.ring_pos = pos.data();
    sched_t s{};
    ASSERT_EQ(sched_build(ALGO_RING, &a, nullptr, &s, nullptr), 0);
    for (size_t i = 0; i < s.n; i++) {
      if (s.steps[i].send_peer >= 0) {
        EXPECT_EQ(s.steps[i].send_peer, next[r]) << r;
      }
      if (s.steps[i].recv_peer >= 0) {
        EXPECT_EQ(next[s.steps[i].recv_peer], r) << r;
      }
    }
    sched_free(&s);
  }
}

// The multi-channel ring (mring.c) with hosts in blocks, uneven hosts, hosts not together in
// the ring order, one rank per host and one host (the last three: one channel, the ring). Its C
// channels share the links inside a host; each moves q = 2 chunk / C elements per step when every
// host has C ranks (chunk / C otherwise), and its FIFOs then hold C - 1 (C + 1) messages: run
// with the slots for which that fits the interpreter's bounded FIFOs (2 chunks), which deadlock
// on more.
TEST(Algos, MultiRingAllReduce) {
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1},
                                                 {0, 0, 0, 1, 1, 1},
                                                 {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2},
                                                 {0, 0, 0, 1, 1},
                                                 {0, 1, 0, 1},
                                                 {0, 1, 2},
                                                 {0, 0, 0},
                                                 std::vector<int>(16, 0),
                                                 {5, 5, 5, 5, 5, 5, 5, 5, 9, 9, 9, 9, 9, 9, 9, 9},
                                                 {0, 0, 1, 1, 1, 2, 2, 2, 2}};
  for (const auto &h : layouts) {
    int C = 1;  // the smallest host's ranks when hosts are apart in rank order, at most 8
    std::map<int, int> per;
    for (int x : h) per[x]++;
    bool blocks = true;
    for (size_t i = 1; i < h.size(); i++)
      if (h[i] != h[i - 1] && per[h[i]] != (int)std::count(h.begin() + i, h.end(), h[i]))
        blocks = false;
    int most = 0;
    if (per.size() > 1 && blocks) {
      C = 8;
      for (auto &kv : per) C = std::min(C, kv.second), most = std::max(most, kv.second);
    }
    for (size_t c : kCounts)
      for (size_t chunk : {(size_t)1, (size_t)4, (size_t)16, (size_t)100000})
        for (bool ip : {false, true}) {
          ::Setup u{COLL_ALLREDUCE, ALGO_MRING, (int)h.size(), 0, c, chunk, ip};
          u.hosts = h.data();
          size_t ch = std::min<size_t>(C, chunk), q = chunk, waiting = 2;
          if (ch > 1) {
            q = (most == (int)ch ? 2 : 1) * chunk / ch;
            waiting = most == (int)ch ? ch - 1 : ch + 1;
          }
          for (size_t slot : {(size_t)1, std::max<size_t>(chunk / 2, 1), chunk})
            if (chunk % slot == 0 && waiting * ((q + slot - 1) / slot) <= 2 * (chunk / slot))
              u.slots.push_back(slot);
          check(u);
        }
  }
}

// Every rank of a host of C ranks leaves it in exactly one channel, so C NICs carry the
// channels' network hops (local rank l on NIC l).
TEST(Algos, MultiRingLeavesEachHostThroughEveryRank) {
  for (int m : {2, 3, 4, 8}) {
    int n = 3 * m;
    std::vector<int> hosts(n);
    for (int r = 0; r < n; r++) hosts[r] = r / m;
    for (int r = 0; r < n; r++) {
      sched_args_t a = {COLL_ALLREDUCE, r, n, 0, (size_t)n * m * 10, 1024, 0};
      sched_t s{};
      ASSERT_EQ(sched_build(ALGO_MRING, &a, hosts.data(), &s, nullptr), 0);
      std::map<int, size_t> out;  // elements sent to each other host's rank
      for (size_t i = 0; i < s.n; i++)
        if (s.steps[i].send_peer >= 0 && hosts[s.steps[i].send_peer] != hosts[r])
          out[s.steps[i].send_peer] += s.steps[i].count;
      ASSERT_EQ(out.size(), 1u) << "m " << m << " rank " << r;
      // to the next host, the ring's 2(n-1)/n of one channel's slice (count / m)
      EXPECT_EQ(hosts[out.begin()->first], (hosts[r] + 1) % 3);
      EXPECT_EQ(out.begin()->second, (size_t)2 * (n - 1) * 10) << "m " << m << " rank " << r;
      sched_free(&s);
    }
  }
}

// Bruck all-gather and reduce-scatter on any number of ranks (up to 33 here), any count, chunk,
// in place or not.
TEST(Algos, BruckAllGatherReduceScatter) {
  for (coll_t coll : {COLL_ALLGATHER, COLL_REDUCESCATTER})
    for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 17, 33})
      for (size_t c : {0, 1, 2, 7, 64})
        for (size_t chunk : {(size_t)1, (size_t)4, (size_t)100000})
          for (bool ip : {false, true}) check({coll, ALGO_BRUCK, n, 0, c, chunk, ip});
}

// ceil(log2 n) exchanges (a send and a receive each) and the n block copies, whatever n.
TEST(Algos, BruckStepsAreLogarithmic) {
  for (coll_t coll : {COLL_ALLGATHER, COLL_REDUCESCATTER})
    for (int n : {2, 3, 5, 8, 9, 100, 1000}) {
      int k = 0;
      while ((1 << k) < n) k++;
      for (int r : {0, n / 2, n - 1}) {
        sched_args_t a = {coll, r, n, 0, 4, 1u << 20, 0};
        sched_t s{};
        ASSERT_EQ(sched_build(ALGO_BRUCK, &a, nullptr, &s, nullptr), 0);
        size_t peer = 0, local = 0;
        for (size_t i = 0; i < s.n; i++)
          (s.steps[i].send_peer >= 0 || s.steps[i].recv_peer >= 0 ? peer : local)++;
        EXPECT_EQ(peer, (size_t)(2 * k)) << n;
        EXPECT_EQ(local, (size_t)(coll == COLL_ALLGATHER ? n + 1 : n)) << n;
        sched_free(&s);
      }
    }
}

TEST(Algos, TreeReduceAndBroadcastEveryRoot) {
  for (coll_t coll : {COLL_REDUCE, COLL_BROADCAST})
    for (int n = 1; n <= 8; n++)
      for (int root = 0; root < n; root++)
        for (size_t c : {0, 1, 7, 130})
          for (size_t chunk : {1, 8, 100000})
            for (bool ip : {false, true}) check({coll, ALGO_TREE, n, root, c, chunk, ip});
}

TEST(Algos, HalvingReduceScatterAndDoublingAllGather) {
  for (coll_t coll : {COLL_REDUCESCATTER, COLL_ALLGATHER})
    for (int n : {1, 2, 4, 8})
      for (size_t c : kCounts)
        for (size_t chunk : kChunks)
          for (bool ip : {false, true}) check({coll, ALGO_RHD, n, 0, c, chunk, ip});
}

TEST(Algos, HalvingDoublingNeedsPowerOfTwoForScatterAndGather) {
  for (coll_t coll : {COLL_REDUCESCATTER, COLL_ALLGATHER})
    for (int n : {3, 5, 6, 7}) {
      sched_t s{};
      sched_args_t a = {coll, 0, n, 0, 10, 4, 0};
      EXPECT_EQ(sched_build(ALGO_RHD, &a, nullptr, &s, nullptr), -2) << n;
      sched_free(&s);
    }
}

// Latency: steps that talk to a peer (pieces of a whole chunk) grow like log2(n), not n.
TEST(Algos, StepCountsAreLogarithmic) {
  for (int n : {2, 4, 8, 16, 32, 64}) {
    size_t max_tree = 0, max_rd = 0, max_rhd = 0;
    for (int r = 0; r < n; r++) {
      sched_args_t a = {COLL_ALLREDUCE, r, n, 0, (size_t)n, 1u << 20, 0};
      sched_t t{}, d{}, h{};
      ASSERT_EQ(tree_allreduce(&a, &t), 0);
      ASSERT_EQ(rd_allreduce(&a, nullptr, &d), 0);
      ASSERT_EQ(rhd_allreduce(&a, &h), 0);
      max_tree = std::max(max_tree, t.n), max_rd = std::max(max_rd, d.n),
      max_rhd = std::max(max_rhd, h.n);
      sched_free(&t), sched_free(&d), sched_free(&h);
    }
    int k = rhd_log2(n);
    EXPECT_EQ(max_rd, (size_t)(2 * k)) << n;     // send + receive per exchange
    EXPECT_EQ(max_rhd, (size_t)(4 * k)) << n;    // halving then doubling
    EXPECT_EQ(max_tree, n == 2 ? 4u : 6u) << n;  // 2 up + 1 down (+1 send) per tree, one interior
  }
}

}  // namespace
