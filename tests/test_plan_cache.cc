// The plan cache's fast way (plan_one_cached, src/plan.c): a host call outside a group, or alone
// in one, with the key of the communicator's last call (collective, count, element size, root,
// in place) runs the cached steps in place, without the tuner, the builder or a copy of the steps.
// These tests check that every such call still follows its own arguments (buffers, in place or
// not, reduction operator, datatype of the same size, a PreMulSum scalar) with exact results, that
// a change of key and back refills the cache, and that the fast way is the one that ran (it leaves
// the communicator's step list empty, where plan_group fills it).
#include <gtest/gtest.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "comm.h"
#include "forked_ranks.h"
#include "nccl.h"

namespace {

// Element i of rank r's input: (r + 1) * (i % 7 + 1), small integers every type holds exactly.
double input(int r, size_t i) {
  return (double)((r + 1) * (int)(i % 7 + 1));
}

// The exact result of op over n ranks' inputs at element i (premul: PreMulSum with scalar 2).
double expected(ncclRedOp_t op, bool premul, int n, size_t i) {
  double v = (double)(i % 7 + 1), fact = 1;
  for (int r = 1; r <= n; r++) fact *= r;
  if (premul) return 2 * v * n * (n + 1) / 2;
  switch (op) {
    case ncclSum:
      return v * n * (n + 1) / 2;
    case ncclProd: {
      double p = fact;
      for (int r = 0; r < n; r++) p *= v;
      return p;
    }
    case ncclMax:
      return v * n;
    case ncclMin:
      return v;
    default:  // ncclAvg over 3 ranks: 2 v, exact
      return v * (n + 1) / 2;
  }
}

struct Call {
  ncclRedOp_t op;
  bool premul, in_place, other_buffers, as_float, in_group;
};

// One all-reduce of `count` elements as c says, checked exactly; 0 or a code.
int run_call(int rank, ncclComm_t comm, int n, size_t count, const Call &c,
             std::vector<int32_t> *bufs) {
  int32_t *send = bufs[c.other_buffers ? 2 : 0].data(),
          *recv = bufs[c.other_buffers ? 3 : 1].data();
  if (c.in_place) send = recv;
  for (size_t i = 0; i < count; i++) {
    double x = input(rank, i);
    if (c.as_float) {
      float f = (float)x;
      memcpy(&send[i], &f, 4);
    } else {
      send[i] = (int32_t)x;
    }
  }
  if (!c.in_place) memset(recv, 0xff, count * 4);
  ncclDataType_t type = c.as_float ? ncclFloat32 : ncclInt32;
  ncclRedOp_t op = c.op;
  float scalar_f = 2;
  int32_t scalar_i = 2;
  if (c.premul && ncclRedOpCreatePreMulSum(&op, c.as_float ? (void *)&scalar_f : (void *)&scalar_i,
                                           type, ncclScalarHostImmediate, comm) != ncclSuccess)
    return 30;
  if (c.in_group) ncclGroupStart();
  ncclResult_t res = ncclAllReduce(send, recv, count, type, op, comm, nullptr);
  if (c.in_group) res = res == ncclSuccess ? ncclGroupEnd() : (ncclGroupEnd(), res);
  if (c.premul) ncclRedOpDestroy(op, comm);
  CHILD_CHECK(res == ncclSuccess, 31, "all-reduce failed: %s", ncclGetLastError(comm));
  for (size_t i = 0; i < count; i++) {
    double want = expected(c.op, c.premul, n, i), got;
    if (c.as_float) {
      float f;
      memcpy(&f, &recv[i], 4);
      got = f;
    } else {
      got = recv[i];
    }
    CHILD_CHECK(got == want, 32, "count %zu element %zu: %g, not %g (op %d%s%s%s)", count, i, got,
                want, (int)c.op, c.premul ? " premul" : "", c.in_place ? " in place" : "",
                c.as_float ? " float" : " int32");
  }
  return 0;
}

// The calls each count goes through: every argument the cached steps must follow changes from one
// call to the next while the key stays (only in place changes it, and changes it back).
const Call kCalls[] = {
    {ncclSum, false, false, false, false, false}, {ncclSum, false, false, false, false, false},
    {ncclSum, false, false, true, false, false},  {ncclMax, false, false, false, false, false},
    {ncclMin, false, false, true, true, false},   {ncclProd, false, false, false, false, false},
    {ncclAvg, false, false, false, true, false},  {ncclSum, true, false, true, true, false},
    {ncclSum, true, false, false, false, false},  {ncclSum, false, false, false, false, true},
    {ncclMax, false, false, true, true, true},    {ncclSum, false, true, false, false, false},
    {ncclSum, false, true, false, false, false},  {ncclMin, false, true, true, false, false},
    {ncclAvg, false, true, false, true, false},   {ncclSum, true, true, true, true, false},
    {ncclProd, false, true, false, false, true},  {ncclSum, false, false, false, true, false},
};

// 3 ranks (oversubscribed on 2 CPUs: the waits yield), counts from one element to beyond the
// one-shot's range, each count's calls twice over (the second pass starts from a cache another
// count refilled), a count of 0 in between.
TEST(PlanCache, RepeatedCallsFollowTheirOwnArguments) {
  const int n = 3;
  auto codes = forked(
      n, [](int) {},
      [n](int rank, ncclComm_t comm) {
        const size_t counts[] = {1, 16, 1003, 40000};
        std::vector<int32_t> bufs[4];
        for (auto &b : bufs) b.assign(40000, 0);
        for (int pass = 0; pass < 2; pass++) {
          for (size_t count : counts) {
            for (const Call &c : kCalls) {
              int rc = run_call(rank, comm, n, count, c, bufs);
              if (rc) return rc;
            }
            CHILD_CHECK(ncclAllReduce(bufs[0].data(), bufs[1].data(), 0, ncclInt32, ncclSum, comm,
                                      nullptr) == ncclSuccess,
                        33, "count 0: %s", ncclGetLastError(comm));
          }
        }
        return 0;
      });
  for (int r = 0; r < n; r++) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// A call repeated with the key of the last one runs the cached steps in place: it leaves the
// communicator's step list (comm->sched_scratch, which plan_group fills) empty. A new key goes
// through plan_group (the list holds its steps), and the call after it is cached again.
TEST(PlanCache, ARepeatedCallSkipsThePlanner) {
  const int n = 2;
  auto codes = forked(
      n, [](int) {},
      [n](int rank, ncclComm_t comm) {
        std::vector<int32_t> bufs[4];
        for (auto &b : bufs) b.assign(1024, 0);
        const Call sum = {ncclSum, false, false, false, false, false};
        for (size_t count : {(size_t)16, (size_t)1000}) {
          int rc = run_call(rank, comm, n, count, sum, bufs);
          if (rc) return rc;
          CHILD_CHECK(comm->sched_scratch.n > 0, 40, "count %zu: a new key left no steps", count);
          for (int k = 0; k < 3; k++) {
            rc = run_call(rank, comm, n, count, sum, bufs);
            if (rc) return rc;
            CHILD_CHECK(comm->plan.steps_valid, 41, "count %zu: the steps were not cached", count);
            CHILD_CHECK(comm->sched_scratch.n == 0, 42,
                        "count %zu: a repeated call was planned again (%zu steps)", count,
                        comm->sched_scratch.n);
          }
        }
        return 0;
      });
  for (int r = 0; r < n; r++) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace
