// Stints of the measured choices' soak (soak_stints.h).
#include "soak_stints.h"

#include <algorithm>
#include <random>

namespace {

using th::Coll;
using th::RankCtx;

// Reductions whose bits do not depend on the algorithm with 2 ranks (so they qualify), and two
// that qualify with no count of ranks (max, min) or none (a bf16 sum over 3 ranks).
struct TypeOp {
  ncclDataType_t type;
  th::Op op;
};
const TypeOp kReductions[] = {{ncclInt32, th::Op::kSum},   {ncclUint8, th::Op::kSum},
                              {ncclInt64, th::Op::kMax},   {ncclFloat32, th::Op::kSum},
                              {ncclFloat32, th::Op::kMin}, {ncclFloat64, th::Op::kSum},
                              {ncclBfloat16, th::Op::kSum}};

// The collectives of the stints: those the measured choice serves, three times as often as each
// rooted one (which it leaves to the model).
const Coll kStintColls[] = {
    Coll::kAllReduce,     Coll::kAllReduce, Coll::kAllReduce,     Coll::kAllGather,
    Coll::kAllGather,     Coll::kAllGather, Coll::kReduceScatter, Coll::kReduceScatter,
    Coll::kReduceScatter, Coll::kAlltoAll,  Coll::kAlltoAll,      Coll::kAlltoAll,
    Coll::kBroadcast,     Coll::kReduce,    Coll::kGather,        Coll::kScatter};

// NCCL's count for `bytes` of the whole call: per-rank blocks for the collectives that have them.
size_t count_of(Coll c, size_t bytes, size_t esize, int nranks) {
  size_t n = bytes / esize;
  bool blocks = c == Coll::kAllGather || c == Coll::kReduceScatter || c == Coll::kAlltoAll ||
                c == Coll::kGather || c == Coll::kScatter;
  return std::max<size_t>(1, blocks ? n / (size_t)nranks : n);
}

}  // namespace

void soak_stints(RankCtx &ctx, uint64_t seed, long calls, int max_log2) {
  std::mt19937_64 rng(seed);
  const int r = ctx.rank, n = ctx.nranks;
  for (long i = 0; i < calls;) {
    th::Case c;
    c.coll = kStintColls[rng() % (sizeof(kStintColls) / sizeof(kStintColls[0]))];
    TypeOp to = kReductions[rng() % (sizeof(kReductions) / sizeof(kReductions[0]))];
    c.type = th::coll_reduces(c.coll) ? to.type : (rng() % 2 ? ncclInt32 : ncclUint8);
    c.op = to.op;
    c.root = (int)(rng() % (uint64_t)n);
    c.align = rng() % 4 == 0 ? 1 : 0;
    int log2 = 16 + (int)(rng() % (uint64_t)(max_log2 - 16 + 1));
    size_t es = c.type == ncclInt64 || c.type == ncclFloat64   ? 8
                : c.type == ncclInt32 || c.type == ncclFloat32 ? 4
                : c.type == ncclBfloat16                       ? 2
                                                               : 1;
    bool rooted = c.coll == Coll::kBroadcast || c.coll == Coll::kReduce ||
                  c.coll == Coll::kGather || c.coll == Coll::kScatter;
    long len = rooted ? 1 + (long)(rng() % 3) : 12 + (long)(rng() % 70);
    bool fixed_count = rng() % 2 == 0;
    size_t fixed = count_of(c.coll, ((size_t)1 << log2) + rng() % ((size_t)1 << log2), es, n);
    // buffers: all ranks the heap, all ncclMemAlloc, or each its own
    uint64_t kind = rng() % 5, kind_bits = rng();
    bool memalloc = kind < 2 ? false : kind < 4 ? true : ((kind_bits >> r) & 1) != 0;
    th::case_buffers_from_memalloc(memalloc);
    for (long k = 0; k < len && i < calls; k++, i++) {
      c.count = fixed_count
                    ? fixed
                    : count_of(c.coll, ((size_t)1 << log2) + rng() % ((size_t)1 << log2), es, n);
      uint64_t place = rng() % 3, place_bits = rng();
      c.in_place = place == 0 ? false : place == 1 ? true : ((place_bits >> r) & 1) != 0;
      bool broken = false;
      if (!th::run_case(ctx, c, &broken)) {
        ctx.fail("call %ld (stint of %ld, %s buffers): %s failed", i, len,
                 memalloc ? "ncclMemAlloc" : "heap", th::describe(c, n).c_str());
        th::case_buffers_from_memalloc(false);
        return;
      }
    }
  }
  th::case_buffers_from_memalloc(false);
}
