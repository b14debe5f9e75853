// The shared-memory FIFO as a ring of bytes (src/transport/shm.c): messages of any size follow
// each other in the ring, each from a cache line, the one that would cross the ring's end from
// its beginning, and both ends must place every message alike. Small FIFOs (3 slots of 12 KiB,
// a 36 KiB ring) make the ring wrap many times within a test, at every offset the sizes below
// produce: messages that go inline or to their header's hot place (up to 2 KiB; no ring room
// taken) between ring messages of a few KiB (not a multiple of a line), just under and just over
// a slot's third, whole slots. Every call's buffers are
// checked element by element against the closed form (harness.h), so a message placed where
// the other end does not look for it, or overwritten while still read, fails the case.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness.h"

namespace {

using th::Case;
using th::Coll;
using th::Mode;
using th::RankCtx;

th::Options small_fifos(const std::string &algo, const char *nslots = "3") {
  th::Options o;
  o.env = {{"TUTTI_SHM_NSLOTS", nslots},
           {"TUTTI_SHM_SLOT_BYTES", "12288"},
           {"TUTTI_CMA", "0"}, /* heap buffers through the FIFOs, not peer reads */
           {"TUTTI_ALGO", algo}};
  return o;
}

// Counts (elements) whose messages land at every kind of offset: with int8 and 3 ranks the
// ring's pieces are count / 3 bytes, with float32 four times that, capped by the 12 KiB slot.
const size_t kCounts[] = {1, 13, 100, 1000, 3071, 3073, 4097, 7777, 30000, 65537};

void sizes_up_and_down(RankCtx &ctx, Coll coll) {
  std::vector<size_t> order(std::begin(kCounts), std::end(kCounts));
  order.insert(order.end(), std::rbegin(kCounts), std::rend(kCounts));
  int k = 0;
  for (ncclDataType_t t : {ncclInt8, ncclFloat32})
    for (size_t count : order) {
      Case c;
      c.coll = coll;
      c.type = t;
      c.count = coll == Coll::kAllGather ? count / (size_t)ctx.nranks + 1 : count;
      c.in_place = (k++ % 2) == 1;
      if (!th::run_case(ctx, c)) return;
    }
}

TEST(ShmRing, AllReduceOfEverySizeWrapsTheRingExactly) {
  th::run_ranks_ok(
      Mode::kProcs, 3, [](RankCtx &ctx) { sizes_up_and_down(ctx, Coll::kAllReduce); },
      small_fifos("allreduce:ring"), "3 ranks, ring all-reduce, 3 x 12 KiB FIFOs");
}

TEST(ShmRing, AllGatherAndReduceScatterWrapTheRingExactly) {
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [](RankCtx &ctx) {
        sizes_up_and_down(ctx, Coll::kAllGather);
        sizes_up_and_down(ctx, Coll::kReduceScatter);
      },
      small_fifos("ring"), "3 ranks, ring all-gather and reduce-scatter, 3 x 12 KiB FIFOs");
}

// The same with 8 headers whose receivers hold back the releases of up to 3 inline or hot
// messages (TUTTI_SHM_RELEASE_BATCH, set: also where the 3 ranks outnumber the CPUs and waiting
// senders sleep until a release wakes them).
TEST(ShmRing, HeldReleasesWrapTheRingExactly) {
  th::Options o = small_fifos("ring", "8");
  o.env.push_back({"TUTTI_SHM_RELEASE_BATCH", "4"});
  th::run_ranks_ok(
      Mode::kProcs, 3,
      [](RankCtx &ctx) {
        sizes_up_and_down(ctx, Coll::kAllReduce);
        sizes_up_and_down(ctx, Coll::kAllGather);
      },
      o, "3 ranks, ring all-reduce and all-gather, 8 x 12 KiB FIFOs, releases held back");
}

// Ranks as threads share one process: the same FIFOs, with ends in one address space.
TEST(ShmRing, ThreadsWrapTheRingExactly) {
  th::Options o = small_fifos("allreduce:ring");
  for (const auto &e : o.env) setenv(e.first.c_str(), e.second.c_str(), 1);
  th::run_ranks_ok(
      Mode::kThreads, 3, [](RankCtx &ctx) { sizes_up_and_down(ctx, Coll::kAllReduce); },
      th::Options(), "3 ranks as threads, ring all-reduce, 3 x 12 KiB FIFOs");
  for (const auto &e : o.env) unsetenv(e.first.c_str());
}

// With more ranks than the machine's CPUs (5 on CI's 2), waiting ranks sleep on the FIFO's
// words (shm_wait): a sender finding the ring full sleeps until the receiver releases a message.
TEST(ShmRing, SleepingSendersWakeWhenTheRingFrees) {
  th::run_ranks_ok(
      Mode::kProcs, 5, [](RankCtx &ctx) { sizes_up_and_down(ctx, Coll::kAllReduce); },
      small_fifos("allreduce:ring"), "5 ranks, ring all-reduce, 3 x 12 KiB FIFOs");
}

// A short message past TUTTI_SHM_RING_WINDOW bytes starts over at the ring's beginning when
// the ring is empty (the header's SHM_RESTART bit tells the receiver where it is); here a 4 KiB
// window, so that most ring messages up to 32 KiB meet the choice, with the ring sometimes
// empty (one message at a time) and sometimes not (the ring all-reduce's pipeline).
TEST(ShmRing, ShortMessagesStartTheRingOverWhenItIsEmpty) {
  th::Options o = small_fifos("allreduce:ring");
  o.env.push_back({"TUTTI_SHM_RING_WINDOW", "4096"});
  th::run_ranks_ok(
      Mode::kProcs, 3, [](RankCtx &ctx) { sizes_up_and_down(ctx, Coll::kAllReduce); }, o,
      "3 ranks, ring all-reduce, 3 x 12 KiB FIFOs, 4 KiB window");
  th::Options two = small_fifos("allreduce:oneshot");
  two.env.push_back({"TUTTI_SHM_RING_WINDOW", "4096"});
  th::run_ranks_ok(
      Mode::kProcs, 2, [](RankCtx &ctx) { sizes_up_and_down(ctx, Coll::kAllReduce); }, two,
      "2 ranks, one-shot all-reduce, 3 x 12 KiB FIFOs, 4 KiB window");
}

// Rank 0 sends back to back while rank 1 sleeps before its first receives, so that the sender
// runs ahead as far as the FIFO lets it: runs of messages for the hot places (241 B-2 KiB), runs
// of inline ones longer than the FIFO, ring messages, and the three kinds mixed. Each message's
// bytes depend on its number and position, checked one by one: a header, hot place or ring room
// reused before the receiver read it fails the case. With 3 headers every message is released
// as it is taken; with 8 the receiver holds the releases of up to 3 inline or hot ones back
// (TUTTI_SHM_RELEASE_BATCH 4), publishing them with the next ring message, the fourth, or
// when it waits.
void run_ahead(RankCtx &ctx);

TEST(ShmRing, SendersRunAheadOnlyAsFarAsTheFifoAllows) {
  th::run_ranks_ok(Mode::kProcs, 2, run_ahead, small_fifos("ring"),
                   "2 ranks, sends running ahead, 3 x 12 KiB FIFOs");
}

TEST(ShmRing, SendersRunAheadOnlyAsFarAsHeldReleasesAllow) {
  th::Options o = small_fifos("ring", "8");
  o.env.push_back({"TUTTI_SHM_RELEASE_BATCH", "4"});
  th::run_ranks_ok(Mode::kProcs, 2, run_ahead, o,
                   "2 ranks, sends running ahead, 8 x 12 KiB FIFOs, releases held back");
}

// Both ranks send 7 inline messages to each other and then take the other's 7, round after
// round (each call alone: the FIFO holds them until the peer takes them). From the second round
// on a rank finds only 5 headers free where the peer holds back the release of the 3 it took
// last: it can send its sixth only once the peer, itself waiting for room, publishes them
// (shm_release_held). A receiver that held them on would leave both ranks waiting until the
// timeout, which then fails the case naming the peer.
TEST(ShmRing, RanksWaitingForRoomPublishTheReleasesTheyHold) {
  th::Options o;
  o.env = {{"TUTTI_SHM_NSLOTS", "8"}, {"TUTTI_SHM_RELEASE_BATCH", "4"}, {"TUTTI_TIMEOUT", "20"}};
  th::run_ranks_ok(
      Mode::kProcs, 2,
      [](RankCtx &ctx) {
        int peer = 1 - ctx.rank;
        uint32_t out = 0, in = 0;
        for (uint32_t round = 0; round < 50; round++) {
          for (uint32_t m = 0; m < 7; m++) {
            out = (uint32_t)ctx.rank << 24 | round << 8 | m;
            NCCL_OK(ctx, ncclSend(&out, 1, ncclUint32, peer, ctx.comm, nullptr));
          }
          for (uint32_t m = 0; m < 7; m++) {
            NCCL_OK(ctx, ncclRecv(&in, 1, ncclUint32, peer, ctx.comm, nullptr));
            uint32_t want = (uint32_t)peer << 24 | round << 8 | m;
            RCHECK(ctx, in == want, "round %u message %u: got %#x, not %#x", round, m, in, want);
          }
        }
      },
      o, "2 ranks, 7 sends then 7 receives each, 50 rounds, releases held back");
}

void run_ahead(RankCtx &ctx) {
  std::vector<size_t> sizes;
  for (int i = 0; i < 9; i++) sizes.push_back(241 + (size_t)i * 225);        // hot
  for (int i = 0; i < 80; i++) sizes.push_back(1 + (size_t)(i * 37) % 240);  // inline
  for (int i = 0; i < 5; i++) sizes.push_back(3000 + (size_t)i * 2300);      // ring
  const size_t mixed[] = {8, 240, 241, 2048, 5000};
  for (int i = 0; i < 60; i++) sizes.push_back(mixed[i % 5]);
  auto byte = [](size_t msg, size_t j) { return (uint8_t)(msg * 31 + j * 7 + 1); };
  std::vector<uint8_t> buf(12288);
  for (size_t m = 0; m < sizes.size(); m++) {
    if (ctx.rank == 0) {
      for (size_t j = 0; j < sizes[m]; j++) buf[j] = byte(m, j);
      NCCL_OK(ctx, ncclSend(buf.data(), sizes[m], ncclUint8, 1, ctx.comm, nullptr));
      continue;
    }
    if (m < 100) usleep(2000);  // the sender runs ahead as far as the FIFO lets it
    std::fill(buf.begin(), buf.end(), 0);
    NCCL_OK(ctx, ncclRecv(buf.data(), sizes[m], ncclUint8, 0, ctx.comm, nullptr));
    for (size_t j = 0; j < sizes[m]; j++)
      RCHECK(ctx, buf[j] == byte(m, j), "message %zu (%zu bytes): byte %zu is %u, not %u", m,
             sizes[m], j, buf[j], byte(m, j));
  }
}

}  // namespace
