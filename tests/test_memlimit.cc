// perf/memlimit's traffic count (memlimit_count.c) against closed forms worked out by hand from
// the algorithms' pictures (src/algos/ring.c, cma.c), for several rank counts. Sizes are
// multiples of n x 4 bytes, so every block is whole and the counts are exact integers.
#include <gtest/gtest.h>

#include "perf/memlimit.h"

namespace {

memlimit_traffic_t traffic(coll_t c, const char *algo, int n, size_t count, int in_place = 0) {
  memlimit_traffic_t t{};
  EXPECT_EQ(memlimit_traffic(c, algo_by_name(algo), n, count, in_place, 4, &t), 0) << algo;
  return t;
}

// Ring all-reduce, b = S/n bytes per block: the reduce-scatter's first step sends (read b, write
// b), its n-2 middle steps receive, reduce and send (read 2b, write b), its last step reduces,
// stores and starts the all-gather (read 2b, write 2b), then n-2 steps receive, store and send
// (read b, write 2b) and the last one receives and stores (read b, write b): (3n-2) b each way,
// so (3n-2) / (2(n-1)) memcpy bytes per busbw byte (busbytes = S x 2(n-1)/n).
TEST(MemLimit, RingAllReduce) {
  for (int n = 2; n <= 8; n++) {
    size_t count = 240 * (size_t)n, b = count * 4 / (size_t)n;
    memlimit_traffic_t t = traffic(COLL_ALLREDUCE, "ring", n, count);
    EXPECT_EQ(t.read, (double)((3 * n - 2) * b)) << n;
    EXPECT_EQ(t.written, (double)((3 * n - 2) * b)) << n;
    double factor, bytes = memlimit_bus_bytes(COLL_ALLREDUCE, count, n, 4, &factor);
    EXPECT_EQ(bytes, count * 4.0);
    EXPECT_DOUBLE_EQ((t.read + t.written) / 2 / (bytes * factor), (3.0 * n - 2) / (2.0 * (n - 1)));
  }
}

// cma all-reduce: each rank reduces its segment (S/n) read from all n ranks (S) and writes the
// result into every rank's receive buffer (S): n / (2(n-1)) per busbw byte, 1.0 for 2 ranks.
TEST(MemLimit, CmaAllReduce) {
  for (int n = 2; n <= 8; n++) {
    size_t count = 240 * (size_t)n, s = count * 4;
    memlimit_traffic_t t = traffic(COLL_ALLREDUCE, "cma", n, count);
    EXPECT_EQ(t.read, (double)s) << n;
    EXPECT_EQ(t.written, (double)s) << n;
  }
}

// cma all-gather, out of place: a rank copies its own block (read b, write b) and reads each
// peer's block into place (read b, write b): n b each way, 2.0 bytes per busbw byte for 2 ranks
// (busbytes = S (n-1)/n with S = n b).
TEST(MemLimit, CmaAllGather) {
  for (int n = 2; n <= 6; n++) {
    size_t count = 240, b = count * 4;
    memlimit_traffic_t t = traffic(COLL_ALLGATHER, "cma", n, count);
    EXPECT_EQ(t.read, (double)(n * b)) << n;
    EXPECT_EQ(t.written, (double)(n * b)) << n;
    double factor, bytes = memlimit_bus_bytes(COLL_ALLGATHER, count, n, 4, &factor);
    EXPECT_EQ(bytes, (double)(n * b));
    EXPECT_DOUBLE_EQ(factor, (n - 1.0) / n);
  }
}

// In place the own block already sits where it belongs (sendbuff = recvbuff + rank x count), so
// the engine copies nothing for it: (n-1) b each way.
TEST(MemLimit, CmaAllGatherInPlaceSkipsTheOwnBlock) {
  for (int n = 2; n <= 6; n++) {
    size_t count = 240, b = count * 4;
    memlimit_traffic_t t = traffic(COLL_ALLGATHER, "cma", n, count, 1);
    EXPECT_EQ(t.read, (double)((n - 1) * b)) << n;
    EXPECT_EQ(t.written, (double)((n - 1) * b)) << n;
  }
}

// push all-gather: a rank reads its own block once and writes it into every rank's receive
// buffer (n b), or into every other rank's in place, where its own copy is already there ((n-1)
// b): 1.5 and 1.0 bytes per busbw byte for 2 ranks.
TEST(MemLimit, PushAllGatherSkipsTheOwnCopyInPlace) {
  for (int n = 2; n <= 6; n++) {
    size_t count = 240, b = count * 4;
    memlimit_traffic_t out = traffic(COLL_ALLGATHER, "push", n, count);
    EXPECT_EQ(out.read, (double)b) << n;
    EXPECT_EQ(out.written, (double)(n * b)) << n;
    memlimit_traffic_t in = traffic(COLL_ALLGATHER, "push", n, count, 1);
    EXPECT_EQ(in.read, (double)b) << n;
    EXPECT_EQ(in.written, (double)((n - 1) * b)) << n;
  }
}

TEST(MemLimit, UnbuildableCallsFail) {
  memlimit_traffic_t t{};
  EXPECT_NE(memlimit_traffic(COLL_ALLREDUCE, ALGO_NUM, 2, 100, 0, 4, &t), 0);
}

}  // namespace
