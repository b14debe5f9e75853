// End-to-end tests of the collectives through the public API, on ranks that are processes
// (fork + ncclCommInitRank) and threads (ncclCommInitAll), with closed-form expected values
// (see harness.h: every partial result is exact in the datatype, so every byte is checked).
//
// This file builds two programs:
//   test_collectives_quick   (label "quick")  every collective on a few sizes, every op, NULL
//                            buffers off the root, groups, several communicators at once,
//                            adversarial send/recv, split, fp8 saturation, determinism
//   test_collectives_matrix  (label "slow", built with TUTTI_COLL_MATRIX)
//     Sweep:      each collective with one representative (datatype, op) at nranks
//                 {1,2,3,4,5,8} x counts {0,1,7,1023,1048577} x in place / out of place
//     TypesOps:   each collective x every datatype x every op (PreMulSum included) at nranks
//                 {2,3} x counts {0,1,7,1023,20001} x in place / out of place
//     ManyRanks:  the reducing collectives x every op x 4 datatypes at nranks {5,8}
//   Each builds one communicator per (mode, nranks) and runs all of its calls on it. NCCL has no
//   in-place all-to-all; AlltoAllInPlaceIsRightOrRefused covers what tutti does with one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "harness.h"

namespace {

using th::Case;
using th::CaseRun;
using th::Coll;
using th::Mode;
using th::Op;
using th::RankCtx;

const Mode kModes[] = {Mode::kProcs, Mode::kThreads};

// One representative (datatype, op) per collective: between them every element size, a 2-byte
// float computed in fp32, signed and unsigned integers.
struct Rep {
  Coll coll;
  ncclDataType_t type;
  Op op;
};
const Rep kReps[] = {
    {Coll::kAllReduce, ncclFloat32, Op::kSum},      {Coll::kBroadcast, ncclUint8, Op::kSum},
    {Coll::kReduce, ncclInt32, Op::kSum},           {Coll::kAllGather, ncclFloat16, Op::kSum},
    {Coll::kReduceScatter, ncclBfloat16, Op::kSum}, {Coll::kAlltoAll, ncclInt32, Op::kSum},
    {Coll::kGather, ncclFloat64, Op::kSum},         {Coll::kScatter, ncclInt8, Op::kSum},
};

// Runs `cases` in order on ctx.comm; stops only if the communicator broke (a later call would
// wait for peers that gave up). Returns the number of cases run.
size_t run_cases(RankCtx &ctx, const std::vector<Case> &cases) {
  size_t done = 0;
  for (const Case &c : cases) {
    bool broken = false;
    th::run_case(ctx, c, &broken);
    done++;
    if (broken) break;
  }
  return done;
}

// Every count x in place / out of place of one (coll, type, op); the root and the buffers'
// misalignment change from call to call. NCCL defines no in-place all-to-all: that one has its
// own test.
std::vector<Case> sweep_cases(Coll coll, ncclDataType_t type, Op op, int nranks,
                              const std::vector<size_t> &counts, int *seq) {
  std::vector<Case> cases;
  for (size_t count : counts) {
    for (int in_place = 0; in_place < 2; in_place++) {
      if (in_place && coll == Coll::kAlltoAll) continue;  // see AlltoAllInPlace
      Case c;
      c.coll = coll, c.type = type, c.op = op, c.count = count, c.in_place = in_place;
      c.root = (*seq) % nranks;
      c.align = static_cast<size_t>(*seq) % 3;
      (*seq)++;
      cases.push_back(c);
    }
  }
  return cases;
}

#ifndef TUTTI_COLL_MATRIX

// ---------------------------------------------------------------- quick

// The harness's own codecs against known bit patterns (the expected values depend on them).
// Rounded cases are ties that must go to the even code.
TEST(Codecs, KnownBitPatterns) {
  struct Known {
    ncclDataType_t type;
    double value;
    uint32_t bits;
    bool exact;
  } known[] = {
      {ncclFloat16, 1.0, 0x3c00, true},      {ncclFloat16, -2.0, 0xc000, true},
      {ncclFloat16, 65504, 0x7bff, true},    {ncclFloat16, 0x1p-24, 0x0001, true},
      {ncclFloat16, 2049, 0x6800, false},    {ncclFloat16, 2051, 0x6802, false},
      {ncclFloat16, 1e300, 0x7c00, false},   {ncclBfloat16, 1.0, 0x3f80, true},
      {ncclBfloat16, 257, 0x4380, false},    {ncclBfloat16, 259, 0x4382, false},
      {ncclBfloat16, -1e300, 0xff80, false}, {ncclFloat8e4m3, 1.0, 0x38, true},
      {ncclFloat8e4m3, -3.0, 0xc4, true},    {ncclFloat8e4m3, 448, 0x7e, true},
      {ncclFloat8e4m3, 0x1p-9, 0x01, true},  {ncclFloat8e4m3, 17, 0x58, false},
      {ncclFloat8e4m3, 1e300, 0x7e, false},  {ncclFloat8e5m2, 1.0, 0x3c, true},
      {ncclFloat8e5m2, 57344, 0x7b, true},   {ncclFloat8e5m2, 0x1p-16, 0x01, true},
      {ncclFloat8e5m2, 9, 0x48, false},      {ncclFloat8e5m2, 11, 0x4a, false},
      {ncclFloat8e5m2, 1e300, 0x7b, false},
  };
  for (const Known &k : known) {
    uint32_t bits = 0;
    th::encode_float(k.type, k.value, &bits);
    EXPECT_EQ(bits, k.bits) << th::type_info(k.type).name << " " << k.value;
    if (k.exact) {
      EXPECT_EQ(th::decode_float(k.type, &bits), k.value) << th::type_info(k.type).name;
    }
  }
  // Integers wrap to the type's width.
  int64_t v = 0;
  th::encode_int(ncclUint8, 300, &v);
  EXPECT_EQ(v, 44);
  EXPECT_EQ(th::decode_int(ncclInt8, &v), 44);
  th::encode_int(ncclInt8, -1, &v);
  EXPECT_EQ(th::decode_int(ncclUint8, &v), 255);
  EXPECT_EQ(th::decode_int(ncclInt8, &v), -1);
}

class EveryCollective : public ::testing::TestWithParam<Mode> {};

// Each collective with its representative type on 1, 2 and 3 ranks, small and mid sizes (the
// mid size goes through the ring / FIFO pipelining, the small ones through one slot).
TEST_P(EveryCollective, SmallAndMidSizes) {
  const std::vector<size_t> counts = {0, 1, 7, 1023, 70001};
  for (int n : {1, 2, 3}) {
    th::run_ranks_ok(
        GetParam(), n,
        [&](RankCtx &ctx) {
          int seq = 0;
          for (const Rep &rep : kReps)
            run_cases(ctx, sweep_cases(rep.coll, rep.type, rep.op, n, counts, &seq));
        },
        th::Options(), "every collective, nranks " + std::to_string(n));
  }
}

// Every op of the reducing collectives on 3 ranks in a few types (the full type x op matrix
// is in test_collectives_matrix).
TEST_P(EveryCollective, EveryOpThreeRanks) {
  th::run_ranks_ok(GetParam(), 3, [&](RankCtx &ctx) {
    int seq = 0;
    for (Coll coll : {Coll::kAllReduce, Coll::kReduce, Coll::kReduceScatter})
      for (ncclDataType_t t : {ncclInt32, ncclFloat32, ncclFloat16, ncclFloat8e4m3})
        for (Op op : th::kAllOps) run_cases(ctx, sweep_cases(coll, t, op, 3, {1, 1023}, &seq));
  });
}

// NCCL lets non-roots pass NULL for the buffer they do not use.
TEST_P(EveryCollective, NonRootsMayPassNullBuffers) {
  th::run_ranks_ok(GetParam(), 3, [](RankCtx &ctx) {
    const int root = 1;
    const size_t k = 1000;
    bool is_root = ctx.rank == root;
    std::vector<int32_t> one(k), all(3 * k), out(3 * k, -1);
    for (size_t j = 0; j < k; j++) one[j] = static_cast<int32_t>(j * 10 + ctx.rank);
    // Reduce: recvbuff NULL off the root.
    NCCL_OK(ctx, ncclReduce(one.data(), is_root ? out.data() : nullptr, k, ncclInt32, ncclSum, root,
                            ctx.comm, nullptr));
    for (size_t j = 0; j < k && is_root; j++)
      RCHECK(ctx, out[j] == static_cast<int32_t>(30 * j + 3), "reduce out[%zu] = %d", j, out[j]);
    // Broadcast: sendbuff NULL off the root.
    std::vector<int32_t> got(k, -1);
    NCCL_OK(ctx, ncclBroadcast(is_root ? one.data() : nullptr, got.data(), k, ncclInt32, root,
                               ctx.comm, nullptr));
    for (size_t j = 0; j < k; j++)
      RCHECK(ctx, got[j] == static_cast<int32_t>(j * 10 + root), "broadcast got[%zu] = %d", j,
             got[j]);
    // Gather: recvbuff NULL off the root; Scatter: sendbuff NULL off the root.
    NCCL_OK(ctx, ncclGather(one.data(), is_root ? all.data() : nullptr, k, ncclInt32, root,
                            ctx.comm, nullptr));
    for (size_t i = 0; i < 3 * k && is_root; i++)
      RCHECK(ctx, all[i] == static_cast<int32_t>((i % k) * 10 + i / k), "gather all[%zu] = %d", i,
             all[i]);
    if (is_root)
      for (size_t i = 0; i < 3 * k; i++) all[i] = static_cast<int32_t>(i * 3);
    NCCL_OK(ctx, ncclScatter(is_root ? all.data() : nullptr, got.data(), k, ncclInt32, root,
                             ctx.comm, nullptr));
    for (size_t j = 0; j < k; j++)
      RCHECK(ctx, got[j] == static_cast<int32_t>((ctx.rank * k + j) * 3), "scatter got[%zu] = %d",
             j, got[j]);
  });
}

// PreMulSum with ncclScalarDevice: the scalar is read through the pointer when the collective
// runs, not when the op is created.
TEST_P(EveryCollective, PreMulSumScalarIsReadAtCallTime) {
  th::run_ranks_ok(GetParam(), 2, [](RankCtx &ctx) {
    int32_t scalar = 5;
    ncclRedOp_t op;
    NCCL_OK(ctx, ncclRedOpCreatePreMulSum(&op, &scalar, ncclInt32, ncclScalarDevice, ctx.comm));
    scalar = 7;
    int32_t in[3] = {1, 2, -3}, out[3] = {0, 0, 0};
    for (int32_t &v : in) v += ctx.rank;
    NCCL_OK(ctx, ncclAllReduce(in, out, 3, ncclInt32, op, ctx.comm, nullptr));
    NCCL_OK(ctx, ncclRedOpDestroy(op, ctx.comm));
    const int32_t expect[3] = {7 * 3, 7 * 5, 7 * -5};
    for (int j = 0; j < 3; j++)
      RCHECK(ctx, out[j] == expect[j], "out[%d] = %d, expected %d", j, out[j], expect[j]);
  });
}

// Several collectives and a ring of sends in one group: all complete, all correct.
TEST_P(EveryCollective, GroupOfSeveralCollectives) {
  th::run_ranks_ok(GetParam(), 4, [](RankCtx &ctx) {
    const Case cases[] = {
        {Coll::kAllReduce, ncclFloat32, Op::kSum, 1000, false, 0, 0},
        {Coll::kBroadcast, ncclInt32, Op::kSum, 5000, false, 1, 0},
        {Coll::kAllGather, ncclInt8, Op::kSum, 777, true, 0, 1},
        {Coll::kReduceScatter, ncclInt64, Op::kMax, 300, false, 0, 0},
        {Coll::kAllReduce, ncclFloat64, Op::kAvg, 200000, true, 0, 0},
        {Coll::kAlltoAll, ncclFloat16, Op::kSum, 100, false, 0, 0},
        {Coll::kReduce, ncclUint8, Op::kPreMulSum, 99, false, 3, 0},
        // Two more PreMulSum ops alive at once, and in-place one-shot all-reduces sharing the
        // communicator's scratch space.
        {Coll::kAllReduce, ncclFloat32, Op::kPreMulSum, 3000, true, 0, 0},
        {Coll::kReduceScatter, ncclInt64, Op::kPreMulSum, 40, false, 0, 0},
        {Coll::kAllReduce, ncclInt32, Op::kSum, 500, true, 0, 0},
        {Coll::kAllReduce, ncclBfloat16, Op::kAvg, 700, true, 0, 1},
    };
    std::vector<std::unique_ptr<CaseRun>> runs;
    for (const Case &c : cases) runs.emplace_back(new CaseRun(ctx, c));
    const size_t k = 50000;
    int next = (ctx.rank + 1) % ctx.nranks, prev = (ctx.rank + ctx.nranks - 1) % ctx.nranks;
    std::vector<uint32_t> s(k), r(k, 0);
    for (size_t j = 0; j < k; j++) s[j] = static_cast<uint32_t>(j * 31 + ctx.rank);
    NCCL_OK(ctx, ncclGroupStart());
    for (auto &run : runs) run->issue();
    ncclSend(s.data(), k, ncclUint32, next, ctx.comm, nullptr);
    ncclRecv(r.data(), k, ncclUint32, prev, ctx.comm, nullptr);
    NCCL_OK(ctx, ncclGroupEnd());
    for (auto &run : runs) run->verify();
    for (size_t j = 0; j < k; j++)
      RCHECK(ctx, r[j] == static_cast<uint32_t>(j * 31 + prev), "recv[%zu] = %u", j, r[j]);
  });
}

// Repeats, in processes and in threads: a ring exchange in a group, a gather to rank 1 and an
// all-to-all of a few elements, 20 times each, so that the cached point-to-point plans
// (src/plan_p2p.c) run on the quick way.
TEST_P(EveryCollective, RepeatedSmallPointToPointCalls) {
  th::run_ranks_ok(GetParam(), 3, [](RankCtx &ctx) {
    int n = ctx.nranks, r = ctx.rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    auto val = [](int k, int rank, int peer, int j) {
      return k * 1000 + rank * 100 + peer * 10 + j;
    };
    std::vector<int32_t> s(3 * n), d(3 * n);
    for (int k = 0; k < 60; k++) {
      int what = k / 20;
      for (int j = 0; j < 3 * n; j++) s[j] = val(k, r, j / 3, j % 3);
      std::fill(d.begin(), d.end(), -1);
      if (what == 0) {
        NCCL_OK(ctx, ncclGroupStart());
        ncclRecv(d.data(), 3, ncclInt32, prev, ctx.comm, nullptr);
        ncclSend(s.data() + 3 * next, 3, ncclInt32, next, ctx.comm, nullptr);
        NCCL_OK(ctx, ncclGroupEnd());
        for (int j = 0; j < 3; j++)
          RCHECK(ctx, d[j] == val(k, prev, r, j), "call %d: recv[%d] = %d", k, j, d[j]);
      } else if (what == 1) {
        NCCL_OK(ctx, ncclGather(s.data() + 3, d.data(), 3, ncclInt32, 1, ctx.comm, nullptr));
        for (int j = 0; r == 1 && j < 3 * n; j++)
          RCHECK(ctx, d[j] == val(k, j / 3, 1, j % 3), "call %d: gather[%d] = %d", k, j, d[j]);
      } else {
        NCCL_OK(ctx, ncclAlltoAll(s.data(), d.data(), 3, ncclInt32, ctx.comm, nullptr));
        for (int j = 0; j < 3 * n; j++)
          RCHECK(ctx, d[j] == val(k, j / 3, r, j % 3), "call %d: all-to-all[%d] = %d", k, j, d[j]);
      }
    }
  });
}

// Every rank first posts receives from everyone, then sends to everyone, 8 MiB each (many times
// a FIFO): a group must complete whatever the order.
TEST_P(EveryCollective, SendRecvAdversarialOrderDoesNotDeadlock) {
  const int n = 4;
  const size_t base = 8u << 20;  // bytes
  th::Options opt;
  opt.timeout_s = 90;
  th::run_ranks_ok(
      GetParam(), n,
      [&](RankCtx &ctx) {
        int r = ctx.rank;
        auto count_of = [&](int src, int dst) {
          return base / 4 + static_cast<size_t>(src * 7 + dst);
        };
        std::vector<std::vector<uint32_t>> out(n), in(n);
        for (int p = 0; p < n; p++) {
          if (p == r) continue;
          out[p].resize(count_of(r, p));
          for (size_t j = 0; j < out[p].size(); j++)
            out[p][j] = static_cast<uint32_t>(j * 2654435761u) ^ (r << 24 | p << 16);
          in[p].assign(count_of(p, r), 0xdeadbeef);
        }
        NCCL_OK(ctx, ncclGroupStart());
        for (int k = 1; k < n; k++) {  // receives first, in descending peer order
          int p = (r - k + n) % n;
          ncclRecv(in[p].data(), in[p].size(), ncclUint32, p, ctx.comm, nullptr);
        }
        for (int k = 1; k < n; k++) {
          int p = (r + k) % n;
          ncclSend(out[p].data(), out[p].size(), ncclUint32, p, ctx.comm, nullptr);
        }
        NCCL_OK(ctx, ncclGroupEnd());
        for (int p = 0; p < n; p++) {
          if (p == r) continue;
          for (size_t j = 0; j < in[p].size(); j++) {
            uint32_t e = static_cast<uint32_t>(j * 2654435761u) ^ (p << 24 | r << 16);
            RCHECK(ctx, in[p][j] == e, "from rank %d: [%zu] = 0x%x, expected 0x%x", p, j, in[p][j],
                   e);
          }
        }
      },
      opt);
}

// ncclCommSplit: even/odd colors, keys reversed, one rank with NCCL_SPLIT_NOCOLOR; then
// collectives on the new communicators and on the parent.
TEST_P(EveryCollective, SplitEvenOddReversedKeysThenCollective) {
  const int n = 6;
  th::run_ranks_ok(GetParam(), n, [&](RankCtx &ctx) {
    int r = ctx.rank;
    int color = r == 5 ? NCCL_SPLIT_NOCOLOR : r % 2;
    ncclComm_t sub = reinterpret_cast<ncclComm_t>(0x1);
    NCCL_OK(ctx, ncclCommSplit(ctx.comm, color, -r, &sub, nullptr));
    if (color == NCCL_SPLIT_NOCOLOR) {
      RCHECK(ctx, sub == nullptr, "NCCL_SPLIT_NOCOLOR rank got a communicator");
    } else {
      // color 0: parent ranks 4, 2, 0; color 1: 3, 1 (5 left).
      std::vector<int> members = color == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{3, 1};
      int count = -1, me = -1;
      RCHECK(ctx, sub != nullptr, "no communicator from ncclCommSplit");
      NCCL_OK(ctx, ncclCommCount(sub, &count));
      NCCL_OK(ctx, ncclCommUserRank(sub, &me));
      int expect_me =
          static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
      RCHECK(ctx, count == static_cast<int>(members.size()), "split count %d", count);
      RCHECK(ctx, me == expect_me, "split rank %d, expected %d", me, expect_me);
      std::vector<int32_t> parents(members.size(), -1);
      int32_t mine = r;
      NCCL_OK(ctx, ncclAllGather(&mine, parents.data(), 1, ncclInt32, sub, nullptr));
      for (size_t i = 0; i < members.size(); i++)
        RCHECK(ctx, parents[i] == members[i], "new rank %zu is parent rank %d, expected %d", i,
               parents[i], members[i]);
      RankCtx sctx;
      sctx.rank = me, sctx.nranks = count, sctx.mode = ctx.mode, sctx.comm = sub;
      int seq = 0;
      run_cases(sctx, sweep_cases(Coll::kAllReduce, ncclFloat32, Op::kSum, count, {1, 1023, 100000},
                                  &seq));
      run_cases(sctx, sweep_cases(Coll::kReduce, ncclInt64, Op::kMin, count, {5}, &seq));
      for (const std::string &m : sctx.messages) ctx.fail("on the split comm: %s", m.c_str());
      NCCL_OK(ctx, ncclCommDestroy(sub));
    }
    int seq = 0;
    run_cases(ctx, sweep_cases(Coll::kAllReduce, ncclInt32, Op::kMax, n, {1000}, &seq));
  });
}

// Sums past the largest finite value: fp8 saturates to it, float16 and bfloat16 go to infinity
// (all partial sums are past it, so the order of the combines does not matter).
TEST_P(EveryCollective, Fp8SaturatesHalfOverflowsToInfinity) {
  struct Big {
    ncclDataType_t type;
    double value;  // exact in the type
  } bigs[] = {{ncclFloat8e4m3, 384},    {ncclFloat8e4m3, -384}, {ncclFloat8e5m2, 49152},
              {ncclFloat8e5m2, -49152}, {ncclFloat16, 40000},   {ncclBfloat16, 3.0e38}};
  th::run_ranks_ok(GetParam(), 3, [&](RankCtx &ctx) {
    for (const Big &b : bigs) {
      for (size_t count : {1, 20001}) {  // one-shot and ring
        size_t es = th::type_info(b.type).size;
        std::vector<uint8_t> in(count * es), out(count * es, 0), want(es);
        for (size_t j = 0; j < count; j++) th::encode_float(b.type, b.value, &in[j * es]);
        th::encode_float(b.type, b.value > 0 ? 1e300 : -1e300, want.data());
        NCCL_OK(ctx,
                ncclAllReduce(in.data(), out.data(), count, b.type, ncclSum, ctx.comm, nullptr));
        for (size_t j = 0; j < count; j++) {
          RCHECK(ctx, memcmp(&out[j * es], want.data(), es) == 0,
                 "%s sum of 3 x %g, count %zu: [%zu] = %s, expected %s", th::type_info(b.type).name,
                 b.value, count, j, th::format_elem(b.type, &out[j * es]).c_str(),
                 th::format_elem(b.type, want.data()).c_str());
        }
      }
    }
  });
}

// NCCL defines no in-place layout for all-to-all, but tutti's ncclAlltoAll accepts
// sendbuff == recvbuff as "in place" (enqueue.c, check_overlap). Either answer is fine: refuse
// it with ncclInvalidArgument and leave the buffer alone, or deliver the right blocks.
TEST_P(EveryCollective, AlltoAllInPlaceIsRightOrRefused) {
  for (int n : {2, 3}) {
    th::run_ranks_ok(
        GetParam(), n,
        [&](RankCtx &ctx) {
          // The corruption depends on timing (a block arriving before the own block to that peer
          // left), so the large size runs a few times.
          for (size_t count : {1, 1023, 1048577, 1048577, 1048577}) {
            CaseRun run(ctx, Case{Coll::kAlltoAll, ncclInt32, Op::kSum, count, true, 0, 0});
            if (run.issue() == ncclSuccess)
              run.verify();
            else
              run.verify_rejected();
          }
        },
        th::Options(), "in-place all-to-all, nranks " + std::to_string(n));
  }
}

INSTANTIATE_TEST_SUITE_P(, EveryCollective, ::testing::ValuesIn(kModes),
                         [](const ::testing::TestParamInfo<Mode> &i) {
                           return std::string(i.param == Mode::kProcs ? "Procs" : "Threads");
                         });

// Two communicators at once in one process: each child process drives one from each of two
// threads, and (threads mode) two ncclCommInitAll sets run from two threads.
TEST(SeveralComms, TwoCommsPerProcessFromTwoThreads) {
  th::Options opt;
  opt.extra_ids = 1;
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [](RankCtx &ctx) {
        RankCtx other = ctx;
        other.messages.clear();
        NCCL_OK(ctx, ncclCommInitRank(&other.comm, ctx.nranks, ctx.extra_ids[0], ctx.rank));
        std::thread t([&] {
          int seq = 0;
          for (int i = 0; i < 5; i++)
            run_cases(other, sweep_cases(Coll::kAllReduce, ncclInt32, Op::kSum, 3, {1, 5000, 70000},
                                         &seq));
        });
        int seq = 0;
        for (int i = 0; i < 5; i++)
          run_cases(
              ctx, sweep_cases(Coll::kAllGather, ncclFloat32, Op::kSum, 3, {1, 3000, 60000}, &seq));
        t.join();
        NCCL_OK(ctx, ncclCommDestroy(other.comm));
        for (const std::string &m : other.messages) ctx.fail("second comm: %s", m.c_str());
      },
      opt);
}

TEST(SeveralComms, TwoInitAllSetsAtOnce) {
  th::RunResult a, b;
  std::thread ta([&] {
    a = th::run_ranks(Mode::kThreads, 3, [](RankCtx &ctx) {
      int seq = 0;
      for (int i = 0; i < 5; i++)
        run_cases(ctx,
                  sweep_cases(Coll::kAllReduce, ncclFloat64, Op::kMax, 3, {1, 9000, 50000}, &seq));
    });
  });
  std::thread tb([&] {
    b = th::run_ranks(Mode::kThreads, 2, [](RankCtx &ctx) {
      int seq = 0;
      for (int i = 0; i < 5; i++)
        run_cases(ctx, sweep_cases(Coll::kReduceScatter, ncclUint32, Op::kSum, 2, {1, 9000, 50000},
                                   &seq));
    });
  });
  ta.join();
  tb.join();
  th::expect_ranks_ok(a, "set A (3 ranks)");
  th::expect_ranks_ok(b, "set B (2 ranks)");
}

// One thread drives all ranks of an ncclCommInitAll set inside one group (NCCL's single-process
// multi-device pattern).
TEST(SeveralComms, OneThreadDrivesAllRanksInAGroup) {
  const int n = 3;
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<RankCtx> ctxs(n);
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kBroadcast, Coll::kAlltoAll}) {
    for (size_t count : {1, 4000, 100000}) {
      std::vector<std::unique_ptr<CaseRun>> runs;
      for (int r = 0; r < n; r++) {
        ctxs[r].rank = r, ctxs[r].nranks = n, ctxs[r].comm = comms[r],
        ctxs[r].mode = Mode::kThreads;
        runs.emplace_back(
            new CaseRun(ctxs[r], Case{coll, ncclFloat32, Op::kSum, count, false, 2, 0}));
      }
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (auto &run : runs) run->issue();
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
      for (auto &run : runs) run->verify();
    }
  }
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(ctxs[r].failures, 0)
        << "rank " << r << ": " << (ctxs[r].messages.empty() ? "" : ctxs[r].messages[0]);
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  }
}

// Float sums of random inputs (not exact): every rank gets bitwise the same result, run after
// run (two runs as processes, one as threads), and the result is the sum to within rounding.
const int kPrintCases = 5;
struct Fingerprints {
  uint64_t hash[3][8][kPrintCases];  // [run][rank][case]; in memory shared with the children
};

void determinism_body(RankCtx &ctx, uint64_t (*hash)[kPrintCases]) {
  int slot = 0;
  for (ncclDataType_t t : {ncclFloat32, ncclBfloat16}) {
    for (size_t count : {1000, 300001}) {  // one-shot and ring all-reduce
      size_t es = th::type_info(t).size;
      std::vector<uint8_t> in(count * es), out(count * es, 0);
      std::vector<double> ref(count, 0.0);
      for (int p = 0; p < ctx.nranks; p++) {
        for (size_t j = 0; j < count; j++) {
          uint64_t h = (j + 1) * 0x9e3779b97f4a7c15ull ^
                       (static_cast<uint64_t>(p + 1) * 0xc2b2ae3d27d4eb4full);
          h ^= h >> 29;
          double v = (static_cast<double>(h % 2000001) - 1000000.0) / 999983.0;  // in [-1, 1]
          uint8_t enc[4];
          th::encode_float(t, v, enc);
          ref[j] += th::decode_float(t, enc);
          if (p == ctx.rank) memcpy(&in[j * es], enc, es);
        }
      }
      NCCL_OK(ctx, ncclAllReduce(in.data(), out.data(), count, t, ncclSum, ctx.comm, nullptr));
      // n - 1 additions whose results are <= n in magnitude (inputs in [-1, 1]), each rounded
      // by at most u n (u = 2^-24 for fp32; 2^-8 for bf16, whose partial sums are stored as
      // bf16 between hops): (n - 1) n u, below the bound 2 n^2 u.
      double eps = t == ncclFloat32 ? 0x1p-24 : 0x1p-8, bound = ctx.nranks * ctx.nranks * eps * 2;
      for (size_t j = 0; j < count; j++) {
        double got = th::decode_float(t, &out[j * es]);
        RCHECK(ctx, std::fabs(got - ref[j]) <= bound, "%s count %zu: [%zu] = %.9g, sum is %.9g",
               th::type_info(t).name, count, j, got, ref[j]);
      }
      hash[ctx.rank][slot++] = th::hash_bytes(out.data(), out.size());
    }
  }
  const size_t k = 40001;  // reduce-scatter of the same kind
  std::vector<float> in(k * ctx.nranks), out(k);
  for (size_t i = 0; i < in.size(); i++)
    in[i] = static_cast<float>(std::sin(i * 0.37 + ctx.rank * 1.3));
  NCCL_OK(ctx,
          ncclReduceScatter(in.data(), out.data(), k, ncclFloat32, ncclSum, ctx.comm, nullptr));
  // The sum of the n ranks' floats (each |x| <= 1) at this rank's block, exact in double; the
  // library's n - 1 float additions each round by at most u |partial sum| <= u n (u = 2^-24).
  const double bound = (ctx.nranks - 1) * ctx.nranks * 0x1p-24;
  for (size_t j = 0; j < k; j++) {
    size_t i = ctx.rank * k + j;
    double want = 0;
    for (int p = 0; p < ctx.nranks; p++) want += static_cast<float>(std::sin(i * 0.37 + p * 1.3));
    RCHECK(ctx, std::fabs(out[j] - want) <= bound, "reduce-scatter: [%zu] = %.9g, sum is %.9g", j,
           out[j], want);
  }
  hash[ctx.rank][slot++] = th::hash_bytes(out.data(), k * 4);
}

TEST(Determinism, FloatSumsAreBitwiseIdenticalOnEveryRankAndRun) {
  void *mem = th::shared_alloc(sizeof(Fingerprints));
  ASSERT_NE(mem, nullptr);
  Fingerprints *fp = static_cast<Fingerprints *>(mem);
  for (int n : {3, 5}) {
    memset(fp, 0, sizeof *fp);
    for (int run = 0; run < 3; run++) {
      Mode mode = run == 2 ? Mode::kThreads : Mode::kProcs;
      th::run_ranks_ok(
          mode, n, [&](RankCtx &ctx) { determinism_body(ctx, fp->hash[run]); }, th::Options(),
          "run " + std::to_string(run) + ", nranks " + std::to_string(n));
    }
    for (int c = 0; c < kPrintCases; c++) {
      bool per_rank = c == kPrintCases - 1;  // reduce-scatter: each rank has its own block
      for (int run = 0; run < 3; run++) {
        for (int r = 0; r < n; r++) {
          uint64_t want = fp->hash[0][per_rank ? r : 0][c];
          EXPECT_NE(want, 0u) << "case " << c << " was not fingerprinted";
          EXPECT_EQ(fp->hash[run][r][c], want)
              << "nranks " << n << " case " << c << ": run " << run << " rank " << r
              << " differs from run 0 rank " << (per_rank ? r : 0);
        }
      }
    }
  }
  th::shared_free(mem, sizeof(Fingerprints));
}

#else  // TUTTI_COLL_MATRIX

// ---------------------------------------------------------------- matrix

const Rep &rep_of(Coll c) {
  for (const Rep &r : kReps)
    if (r.coll == c) return r;
  return kReps[0];
}

std::string param_name(Coll c, Mode m) {
  return std::string(th::coll_name(c)) + (m == Mode::kProcs ? "_Procs" : "_Threads");
}

class Matrix : public ::testing::TestWithParam<std::tuple<Coll, Mode>> {};

// Representative (type, op) of the collective at every nranks x count x in place.
TEST_P(Matrix, Sweep) {
  Coll coll = std::get<0>(GetParam());
  Mode mode = std::get<1>(GetParam());
  const Rep &rep = rep_of(coll);
  const std::vector<size_t> counts = {0, 1, 7, 1023, 1048577};
  th::Options opt;
  opt.timeout_s = 240;
  for (int n : {1, 2, 3, 4, 5, 8}) {
    th::run_ranks_ok(
        mode, n,
        [&](RankCtx &ctx) {
          int seq = 0;
          run_cases(ctx, sweep_cases(coll, rep.type, rep.op, n, counts, &seq));
        },
        opt, std::string(th::coll_name(coll)) + " nranks " + std::to_string(n));
  }
}

// Every datatype (x every op for the reducing collectives) at nranks 2 and 3.
TEST_P(Matrix, TypesOps) {
  Coll coll = std::get<0>(GetParam());
  Mode mode = std::get<1>(GetParam());
  const std::vector<size_t> counts = {0, 1, 7, 1023, 20001};  // 20001: ring even for 1-byte types
  for (int n : {2, 3}) {
    th::run_ranks_ok(
        mode, n,
        [&](RankCtx &ctx) {
          int seq = 0;
          for (ncclDataType_t t : th::kAllTypes) {
            if (!th::coll_reduces(coll)) {
              run_cases(ctx, sweep_cases(coll, t, Op::kSum, n, counts, &seq));
              continue;
            }
            for (Op op : th::kAllOps) run_cases(ctx, sweep_cases(coll, t, op, n, counts, &seq));
          }
        },
        th::Options(), std::string(th::coll_name(coll)) + " nranks " + std::to_string(n));
  }
}

INSTANTIATE_TEST_SUITE_P(, Matrix,
                         ::testing::Combine(::testing::ValuesIn(th::kAllColls),
                                            ::testing::ValuesIn(kModes)),
                         [](const ::testing::TestParamInfo<std::tuple<Coll, Mode>> &i) {
                           return param_name(std::get<0>(i.param), std::get<1>(i.param));
                         });

// Every op of the reducing collectives on longer rings and chains, a few types.
class ManyRanks : public ::testing::TestWithParam<std::tuple<Coll, Mode>> {};

TEST_P(ManyRanks, EveryOp) {
  Coll coll = std::get<0>(GetParam());
  Mode mode = std::get<1>(GetParam());
  for (int n : {5, 8}) {
    th::run_ranks_ok(
        mode, n,
        [&](RankCtx &ctx) {
          int seq = 0;
          for (ncclDataType_t t : {ncclFloat32, ncclInt8, ncclBfloat16, ncclUint64})
            for (Op op : th::kAllOps)
              run_cases(ctx, sweep_cases(coll, t, op, n, {1, 1023, 20001}, &seq));
        },
        th::Options(), std::string(th::coll_name(coll)) + " nranks " + std::to_string(n));
  }
}

INSTANTIATE_TEST_SUITE_P(, ManyRanks,
                         ::testing::Combine(::testing::Values(Coll::kAllReduce, Coll::kReduce,
                                                              Coll::kReduceScatter),
                                            ::testing::ValuesIn(kModes)),
                         [](const ::testing::TestParamInfo<std::tuple<Coll, Mode>> &i) {
                           return param_name(std::get<0>(i.param), std::get<1>(i.param));
                         });

#endif  // TUTTI_COLL_MATRIX

}  // namespace
