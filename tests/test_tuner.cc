// The tuner (src/algos/tuner.c): NCCL_ALGO parsing and the cost model's choices, checked
// against the formulas in tuner.c's opening comment with a fixed model.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "algos/tuner.h"

namespace {

uint32_t bit(algo_t a) {
  return 1u << a;
}

TEST(TunerParse, ListExcludePerCollectiveAndCase) {
  uint32_t m[COLL_NUM];
  ASSERT_EQ(tuner_parse_algo(nullptr, m), 0);
  for (int c = 0; c < COLL_NUM; c++) EXPECT_EQ(m[c], TUNER_ALL_ALGOS);
  ASSERT_EQ(tuner_parse_algo("Ring,TREE", m), 0);
  for (int c = 0; c < COLL_NUM; c++) EXPECT_EQ(m[c], bit(ALGO_RING) | bit(ALGO_TREE));
  ASSERT_EQ(tuner_parse_algo("^tree", m), 0);
  for (int c = 0; c < COLL_NUM; c++) EXPECT_EQ(m[c], TUNER_ALL_ALGOS & ~bit(ALGO_TREE));
  ASSERT_EQ(tuner_parse_algo("allreduce:tree;Broadcast:ring, chain", m), 0);
  EXPECT_EQ(m[COLL_ALLREDUCE], bit(ALGO_TREE));
  EXPECT_EQ(m[COLL_BROADCAST], bit(ALGO_RING) | bit(ALGO_CHAIN));
  EXPECT_EQ(m[COLL_REDUCE], TUNER_ALL_ALGOS);
  ASSERT_EQ(tuner_parse_algo("allreduce:^rd,rhd ; allgather:rhd", m), 0);
  EXPECT_EQ(m[COLL_ALLREDUCE], TUNER_ALL_ALGOS & ~(bit(ALGO_RD) | bit(ALGO_RHD)));
  EXPECT_EQ(m[COLL_ALLGATHER], bit(ALGO_RHD));
  // NCCL-only names are known (ignored), not errors.
  ASSERT_EQ(tuner_parse_algo("NVLS,Ring,CollnetDirect", m), 0);
  EXPECT_EQ(m[COLL_ALLREDUCE], bit(ALGO_RING));
}

TEST(TunerParse, BadTokensAreReportedAndIgnored) {
  uint32_t m[COLL_NUM];
  EXPECT_EQ(tuner_parse_algo("ring,bogus", m), -1);
  EXPECT_EQ(m[COLL_ALLREDUCE], bit(ALGO_RING));
  EXPECT_EQ(tuner_parse_algo("allreduse:tree", m), -1);  // bad collective: the entry is dropped
  EXPECT_EQ(m[COLL_ALLREDUCE], TUNER_ALL_ALGOS);
}

// Every TUTTI_TUNER_* variable sets its field of the model, and a value that is not a positive
// number leaves the default.
TEST(TunerModel, ReadsEveryVariableFromTheEnvironment) {
  const char *const vars[] = {
      "SHM_LAT_US",       "SHM_GBPS",       "NET_LAT_US", "NET_GBPS",         "MSG_CPU_US",
      "SHM_MSG_CPU_US",   "PEER_LAT_US",    "PEER_GBPS",  "PEER_READ_LAT_US", "PEER_READ_GBPS",
      "PEER_PUSH_LAT_US", "PEER_PUSH_GBPS", "RDV_LAT_US", "RDV_GBPS",         "CODEC_NS"};
  const int nvars = (int)(sizeof(vars) / sizeof(vars[0]));
  tuner_model_t dflt, m;
  tuner_model_from_env(&dflt);
  auto fields = [](tuner_model_t &x) {
    return std::vector<double *>{&x.shm.lat_us,     &x.shm.gbps,         &x.net.lat_us,
                                 &x.net.gbps,       &x.msg_cpu_us,       &x.shm_msg_cpu_us,
                                 &x.peer.lat_us,    &x.peer.gbps,        &x.peer_read.lat_us,
                                 &x.peer_read.gbps, &x.peer_push.lat_us, &x.peer_push.gbps,
                                 &x.rdv.lat_us,     &x.rdv.gbps,         &x.codec_ns};
  };
  ASSERT_EQ(fields(m).size(), (size_t)nvars);
  for (int i = 0; i < nvars; i++) {
    std::string var = std::string("TUTTI_TUNER_") + vars[i];
    double value = 1000.0 + i;  // no default is 1000 + i
    setenv(var.c_str(), std::to_string(value).c_str(), 1);
    tuner_model_from_env(&m);
    for (int j = 0; j < nvars; j++)
      EXPECT_EQ(*fields(m)[j], j == i ? value : *fields(dflt)[j]) << var << ", field " << j;
    setenv(var.c_str(), "-3", 1);
    tuner_model_from_env(&m);
    EXPECT_EQ(*fields(m)[i], *fields(dflt)[i]) << var << "=-3 is not positive";
    setenv(var.c_str(), "fast", 1);
    tuner_model_from_env(&m);
    EXPECT_EQ(*fields(m)[i], *fields(dflt)[i]) << var << "=fast is not a number";
    unsetenv(var.c_str());
  }
}

tuner_model_t model() {
  return {{2.0, 10.0}, {20.0, 1.0}};
}  // shm 2 us 10 GB/s, net 20 us 1 GB/s

tuner_topo_t one_host(int n) {
  tuner_topo_t t{};
  t.nranks = n, t.nhosts = 1, t.local_size = n, t.hier_ok = 0;
  t.slot_bytes = 131072, t.chunk_bytes = 524288, t.scratch_bytes = 16384,
  t.oneshot_max_bytes = 16384;
  return t;
}

TEST(TunerModel, EstimatesFollowTheFormulas) {
  tuner_model_t m = model();
  tuner_topo_t t = one_host(8);
  double S = 1e6, b = 10e3;  // bytes per microsecond
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RING, 1000000),
                   14 * 2.0 + 2.0 * 7 / 8 * S / b);
  // tree: R = ceil(S/2 / 131072) = 4 rounds of a slot per tree (the chunk for 2(D+1) = 8 rounds
  // is below a slot), 1.5 x 8 hops per round, each a + 131072 / b
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_TREE, 1000000),
                   1.5 * 8 * 4 * (2.0 + 131072 / b));
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RHD, 1000000),
                   6 * 2.0 + 1.5 * (2.0 * 7 / 8) * S / b);  // 1.5: unfused exchange (XCHG)
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RD, 1000000),
                   3 * 2.0 + 1.5 * 3 * S / b);
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_ONESHOT, 1000000), 0);  // > one slot
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_HIER, 1000), 0);        // one host
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLGATHER, ALGO_TREE, 1000), 0);
  tuner_topo_t five = one_host(5);  // rhd: p2 = 4, one fold
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &five, COLL_ALLREDUCE, ALGO_RHD, 1000000),
                   6 * 2.0 + 1.5 * (1.5 + 2) * S / b);
  EXPECT_LT(tuner_estimate_us(&m, &five, COLL_ALLGATHER, ALGO_RHD, 1000), 0);  // not a power of two
}

// On 8 ranks with only tree and ring allowed: the tree, one round up to 2 slots (12 hops of
// a + (S/2)/b), beats the ring (14 a + 1.75 S/b) while 12 (2 + S/2e4) < 28 + 1.75 S/1e4, i.e.
// S < 4 / 4.25e-4 = 9412 bytes.
TEST(TunerModel, TreeFlipsToRingAtTheCrossover) {
  tuner_model_t m = model();
  tuner_topo_t t = one_host(8);
  uint32_t mask = bit(ALGO_RING) | bit(ALGO_TREE);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 8, mask, 0).algo, ALGO_TREE);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 9300, mask, 0).algo, ALGO_TREE);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 9500, mask, 0).algo, ALGO_RING);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 64 << 20, mask, 0).algo, ALGO_RING);
  // Everything allowed, with x = S/b in us: oneshot (1 hop) while 7 * 8 B is tiny; then rd
  // (6 + 4.5x; oneshot no longer fits above 16 KiB) until rhd (12 + 2.625x) at x = 3.2 and the
  // ring (28 + 1.75x) from x = 18.3; the tree (12 (2 + x/2) while S/2 fits a slot) never wins.
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 8, TUNER_ALL_ALGOS, 0).algo, ALGO_ONESHOT);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 16385, TUNER_ALL_ALGOS, 0).algo, ALGO_RD);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 31000, TUNER_ALL_ALGOS, 0).algo, ALGO_RD);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 33000, TUNER_ALL_ALGOS, 0).algo, ALGO_RHD);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 63000, TUNER_ALL_ALGOS, 0).algo, ALGO_RHD);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 180000, TUNER_ALL_ALGOS, 0).algo, ALGO_RHD);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 186000, TUNER_ALL_ALGOS, 0).algo, ALGO_RING);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 481000, TUNER_ALL_ALGOS, 0).algo, ALGO_RING);
  // Broadcast: tree (4 a + 2S/b) until 3 a = S/b, i.e. S = 60000 bytes; then the chain.
  EXPECT_EQ(tuner_choose(&m, &t, COLL_BROADCAST, 59000, TUNER_ALL_ALGOS, 0).algo, ALGO_TREE);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_BROADCAST, 61000, TUNER_ALL_ALGOS, 0).algo, ALGO_CHAIN);
}

TEST(TunerModel, HierAcrossHostsAndFallbacks) {
  tuner_model_t m = model();
  tuner_topo_t t = one_host(8);
  t.nhosts = 2, t.local_size = 4, t.hier_ok = 1;
  // 64 MiB: hier = 6 a_shm + 1.5 S/b_shm + 2 a_net + (S/4)/b_net, far below the flat ring on
  // the network (14 a_net + 1.75 S/b_net).
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 64 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_HIER);
  // Small sizes across hosts: one-shot pays one network latency per peer (7 a_net = 140 us +
  // 56 bytes); recursive doubling folds each host into one rank (2 shm hops, 1.5 x 2 x 3 x 8
  // bytes) and runs log2(2) = 1 step across (20 us + 8 bytes): rd beats it.
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_ONESHOT, 8), 140.0 + 56 / 1e3);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RD, 8),
                   2 * 2.0 + 72 / 10e3 + 20.0 + 8 / 1e3);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 8, bit(ALGO_ONESHOT) | bit(ALGO_RD), 0).algo,
            ALGO_RD);
  // 1 MiB with 4 ranks per host: rhd's bytes share the NIC 4 ways, so it loses to hier.
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 1 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_HIER);
  // A mask that implements nothing for the collective: the tuner says so (ALGO_NUM, no
  // estimate); the planner then chooses among all (plan.c), which is rhd here.
  tuner_choice_t none = tuner_choose(&m, &t, COLL_ALLGATHER, 1 << 20, bit(ALGO_TREE), 0);
  EXPECT_EQ(none.algo, ALGO_NUM);
  EXPECT_LT(none.us, 0);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLGATHER, 1 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_RHD);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLTOALL, 1 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_P2P);
  // Trees get at least 2(D+1) rounds per call, never less than a slot per chunk.
  tuner_topo_t h = one_host(8);
  EXPECT_EQ(tuner_choose(&m, &h, COLL_ALLREDUCE, 4 << 20, bit(ALGO_TREE), 0).chunk_bytes, 262144u);
  EXPECT_EQ(tuner_choose(&m, &h, COLL_ALLREDUCE, 300000, bit(ALGO_TREE), 0).chunk_bytes, 131072u);
  EXPECT_EQ(tuner_choose(&m, &h, COLL_ALLREDUCE, 64 << 20, bit(ALGO_RING), 0).chunk_bytes, 524288u);
}

// The multi-channel ring (mring.c): on one host it is the ring and costs what the ring does
// (the ring wins the tie); across 8 hosts of 8 ranks with 8 NICs its 8 channels share the
// ring's 2(n-1)/n S bytes out over the NICs (1/8 each) while 7/8 of each rank's bytes go
// through shared memory at the same time: each of its 2(n-1) steps per round takes the longer of
// its network hop (every rank is some channel's entry) and its copies. With one NIC all
// channels leave through it: no gain, only those latencies.
TEST(TunerModel, MultiRingSpreadsTheRingOverTheNics) {
  tuner_model_t m = model();
  tuner_topo_t t = one_host(8);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_MRING, 1000000),
                   tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RING, 1000000));
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 1 << 20, bit(ALGO_RING) | bit(ALGO_MRING), 0).algo,
            ALGO_RING);
  t = one_host(64);
  t.nhosts = 8, t.local_size = 8, t.hier_ok = 1, t.host_blocks = 1, t.nics = 8;
  // one round (S / 8 / 64 = 2 chunk / 8 = 131072 bytes per channel and step), 126 steps, each
  // the network hop (20 us + 131072 B at 1 GB/s) or the 7 copies (7 x 131072 B at 10 GB/s)
  double S = 64 << 20, q = 131072;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_MRING, S),
                   126 * std::max(20.0 + q / 1e3, 7 * q / 10e3));
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_MRING, S),
            0.2 * tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RING, S));
  t.nics = 1;
  EXPECT_GT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_MRING, S),
            tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RING, S));
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, S, bit(ALGO_RING) | bit(ALGO_MRING), 0).algo,
            ALGO_RING);
  // FIFOs of fewer pieces than the channels may leave waiting in one (hosts of 8: 7 messages
  // of 2 chunk / 8 = one slot each; a chunk of one slot and 2 in the FIFO): not a candidate.
  t.nics = 8, t.chunk_bytes = t.slot_bytes;
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_MRING, S), 0);
}

// Bruck (bruck.c): ceil(log2 n) hops + (n-1)/n S (x 1.5 for the reduce-scatter's separate
// reduction) + the block copies (S in and out, S/n more for the all-gather's own block) at
// shared-memory speed; scratch S, so above the communicator's scratch only when forced. On 5
// ranks, where halving-doubling cannot run, it beats the ring at small sizes.
TEST(TunerModel, BruckLogStepsForAnyRankCount) {
  tuner_model_t m = model();
  tuner_topo_t t = one_host(5);
  double S = 10000, b = 10e3;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLGATHER, ALGO_BRUCK, S),
                   3 * 2.0 + 4.0 / 5 * S / b + (S + S / 5) / b);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_REDUCESCATTER, ALGO_BRUCK, S),
                   3 * 2.0 + 1.5 * 4.0 / 5 * S / b + S / b);
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLGATHER, ALGO_BRUCK, 20000), 0);  // scratch
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_BRUCK, S), 0);
  t.nranks = t.local_size = 33;
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLGATHER, 3300, TUNER_ALL_ALGOS, 0).algo, ALGO_BRUCK);
}

// The scratch-hungry algorithms are weighed up to the scratch a call may use (the communicator's
// grows on demand up to TUTTI_SCRATCH_MAX_BYTES, TUNER_SCRATCH_MAX_BYTES by default): at 65,536
// ranks (8,192 hosts x 8 in blocks, 8 NICs) rhd's reduce-scatter of 1 GiB needs 512 MiB, Bruck's
// all-gather on 50,000 ranks of one per host 256 MiB; both are the tuner's choice there, well
// ahead of the ring's 2(n - 1)... n - 1 latencies. With the scratch of old (the chunk) they are
// not candidates and the ring runs.
TEST(TunerModel, ScratchHungryAlgorithmsWithinTheScratchLimit) {
  tuner_model_t m = {{1.0, 125.0}, {5.0, 50.0}, 0, 0, {}, {}, 0.5};
  tuner_topo_t t = one_host(65536);
  t.nhosts = 8192, t.local_size = 8, t.hier_ok = 1, t.host_blocks = 1, t.nics = 8;
  t.scratch_bytes = TUNER_SCRATCH_MAX_BYTES;
  const size_t gib = size_t{1} << 30;
  double rhd = tuner_estimate_us(&m, &t, COLL_REDUCESCATTER, ALGO_RHD, gib);
  double ring = tuner_estimate_us(&m, &t, COLL_REDUCESCATTER, ALGO_RING, gib);
  ASSERT_GT(rhd, 0);
  EXPECT_LT(2 * rhd, ring);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_REDUCESCATTER, gib, TUNER_ALL_ALGOS, 0).algo, ALGO_RHD);
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_REDUCESCATTER, ALGO_RHD, 4 * gib), 0);  // 2 GiB > 1
  t.scratch_bytes = t.chunk_bytes;
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_REDUCESCATTER, ALGO_RHD, gib), 0);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_REDUCESCATTER, gib, TUNER_ALL_ALGOS, 0).algo, ALGO_RING);
  t.may_alloc = 1;  // forced (TUTTI_ALGO): a temporary per call
  EXPECT_GT(tuner_estimate_us(&m, &t, COLL_REDUCESCATTER, ALGO_RHD, gib), 0);

  tuner_topo_t u = one_host(50000);
  u.nhosts = 50000, u.local_size = 1, u.hier_ok = 1, u.host_blocks = 1;
  u.scratch_bytes = TUNER_SCRATCH_MAX_BYTES;
  EXPECT_EQ(tuner_choose(&m, &u, COLL_ALLGATHER, 256 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_BRUCK);
  u.scratch_bytes = u.chunk_bytes;
  EXPECT_EQ(tuner_choose(&m, &u, COLL_ALLGATHER, 256 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_RING);
}

// Across hosts an exchange waits for the partner's chunk before it sends its next one
// (rhd.c, exchange()), so every chunk of a step pays the network's latency: with chunks of
// 512 KiB, rd on 4 hosts x 1 rank at 4 MiB pays 2 steps x 8 chunks, rhd 2 x (4 + 2) for its
// halving steps of 2 and 1 MiB and their doubling mirror. Below a chunk, one latency per step.
TEST(TunerModel, ExchangesPayALatencyPerChunkAcrossHosts) {
  tuner_model_t m = model();
  tuner_topo_t t = one_host(4);
  t.nhosts = 4, t.local_size = 1, t.host_blocks = 1, t.chunk_bytes = 524288;
  double S = 4 << 20;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RD, S),
                   16 * 20.0 + 1.5 * 2 * S / 1e3);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RHD, S),
                   12 * 20.0 + 1.5 * 2 * 0.75 * S / 1e3);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RD, 8),
                   2 * 20.0 + 1.5 * 2 * 8 / 1e3);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RHD, 8),
                   4 * 20.0 + 1.5 * 2 * 0.75 * 8 / 1e3);
  // 2 hosts x 2 ranks in blocks: one halving step (2 MiB, 4 chunks) crosses, and its mirror;
  // the other stays inside the host (2 shm latencies); the NIC carries both ranks' bytes
  t.nhosts = 2, t.local_size = 2;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RHD, S),
                   2 * 2.0 + 1.5 * 2 * 0.25 * S / 10e3 + 8 * 20.0 + 2 * 2 * 0.5 * S / 1e3);
}

// The namespace test bed: 4 hosts x 2 ranks in blocks on one machine of 2 CPUs, 9 us of CPU
// per message across hosts, 1 us through shm. Hops in which every rank sends across hosts cost
// 8 x 9 / 2 = 36 us of CPU each when that is more than latency + bytes / bandwidth: the tree's
// 1.5 x 8 hops (one round) 432 us; half of the ring's hops stay inside a host: 7 of 36 us and 7
// of 8 x 1 / 2 = 4 us (14 x 20 us). rd folds each host into one rank (2 shm hops in which half the
// ranks send: 4 us of CPU each, or latency + bytes), then 2 steps between the 4 leaders (18 us of
// CPU each), with one rank's bytes per NIC: it wins small sizes. rhd keeps its last halving step
// (first doubling step) inside the host. With 8 CPUs: latencies again.
TEST(TunerModel, MessageCpuOnASharedMachine) {
  tuner_model_t m = {{1.0, 1.0}, {13.0, 0.06}, 9.0, 1.0};
  tuner_topo_t t = one_host(8);
  t.nhosts = 4, t.local_size = 2, t.hier_ok = 1, t.host_blocks = 1;
  t.machine_ranks = 8, t.ncpu = 2;
  double S = 1024;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RD, 8), 2 * 2 + 2 * 18);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RD, 1024),
                   2 * 1 + 3 * S / 1000 + 2 * 13 + 2 * S / 60);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RHD, 1024), 2 * 4 + 4 * 36);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RING, 1024), 14 * 20);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_TREE, 1024), 1.5 * 8 * 36);
  // 64 MiB: the ring is a pipeline whose 14 steps each take the NIC's transfer of S/8 (one
  // flow out of each host); the latencies and CPU times of its pieces pass meanwhile
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RING, 64 << 20),
                   14 * (64 << 20) / 8 / 60.0);
  // oneshot: 7 messages per rank, 6 of them across hosts
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_ONESHOT, 8),
                   7 * 8 * (6.0 / 7 * 9 + 1.0 / 7 * 1) / 2);
  for (size_t bytes : {8, 64, 1024, 2048})
    EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, bytes, TUNER_ALL_ALGOS, 0).algo, ALGO_RD);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 64 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_HIER);
  t.ncpu = 8;
  // the ring's 14 steps at 1 KiB: a piece of S/8 over the average hop, half of them across
  // hosts, half inside (longer than the NIC's S/8 / 60 and the 5 us of CPU)
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RING, 1024),
                   7 * (13 + S / 8 / 60) + 7 * (1 + S / 8 / 1000));
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RD, 1024),
                   2 * 1 + 3 * S / 1000 + 2 * 13 + 2 * S / 60);
  t.host_blocks = 0;  // placement unknown: rhd's steps all at the network's cost, x on all bytes
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_RHD, 1024),
                   6 * 13 + 2 * 1.5 * 1.75 * S / 60);
}

// Direct (peer memory) on one host: peer latency + 2(n-1)/n S / b_peer for the all-reduce,
// (n-1)/n S / b_peer for all-gather and reduce-scatter, the rooted collectives and all-to-all by
// what their busiest rank reads; only where every pair of ranks has peer memory and from
// TUTTI_DIRECT_MIN_BYTES on.
TEST(TunerModel, DirectWherePeerMemoryAndLargeEnough) {
  tuner_model_t m = model();
  m.peer = {10.0, 20.0};
  tuner_topo_t t = one_host(2);
  t.peer_min_bytes = 256 * 1024;
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_DIRECT, 1 << 20), 0);  // no peer memory
  t.peer_mem = 1;
  double S = 1 << 20;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_DIRECT, 1 << 20),
                   10.0 + S / 20e3);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLGATHER, ALGO_DIRECT, 1 << 20),
                   10.0 + 0.5 * S / 20e3);
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_DIRECT, 128 * 1024), 0);  // too small
  // 4 ranks, the rest of the collectives: the busiest rank reads S (broadcast, scatter: each
  // non-root its block of the root's buffer), (n-1) S (gather: the root; all-to-all: every
  // rank) or (n-1)/n S (reduce: every rank its segment of the others' buffers)
  tuner_topo_t t4 = one_host(4);
  t4.peer_mem = 1, t4.peer_min_bytes = t.peer_min_bytes;
  for (coll_t c : {COLL_BROADCAST, COLL_SCATTER})
    EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t4, c, ALGO_DIRECT, 1 << 20), 10.0 + S / 20e3);
  for (coll_t c : {COLL_GATHER, COLL_ALLTOALL})
    EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t4, c, ALGO_DIRECT, 1 << 20), 10.0 + 3 * S / 20e3);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t4, COLL_REDUCE, ALGO_DIRECT, 1 << 20),
                   10.0 + 0.75 * S / 20e3);
  EXPECT_LT(tuner_estimate_us(&m, &t4, COLL_BROADCAST, ALGO_DIRECT, 128 * 1024), 0);  // too small
  // 1 MiB: ring 2 a + S / b_shm = 4 + 104.9 us against direct's 10 + 52.4 us
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 1 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_DIRECT);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_REDUCESCATTER, 1 << 20, TUNER_ALL_ALGOS, 0).algo,
            ALGO_DIRECT);
  EXPECT_NE(tuner_choose(&m, &t, COLL_ALLREDUCE, 128 * 1024, TUNER_ALL_ALGOS, 0).algo, ALGO_DIRECT);
  t.nhosts = 2;  // across hosts: never
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_DIRECT, 1 << 20), 0);
}

// Push (mapped peer memory, all-reduce and all-gather): its own level, lat + 2(n-1)/n S / b_push
// for the all-reduce from TUTTI_PUSH_MIN_BYTES, lat + (n-1)/n S / b_push for the all-gather from
// TUTTI_PUSH_GATHER_MIN_BYTES; with the defaults' order (push's latency below direct's) it is
// the choice where it runs, direct below that all-gather size, and direct stays the
// reduce-scatter's.
// Reading by copy (cma) from TUTTI_CMA_MIN_BYTES for the collectives that reduce (and the
// all-gather), from TUTTI_CMA_COPY_MIN_BYTES for those that only copy (the size of one block):
// peer-read latency + what the busiest rank reads / b_read; the all-to-all, whose blocks go in
// one system call each as the rendezvous's do, direct's latency + the same bytes / b_rdv.
TEST(TunerModel, CmaFromItsTwoFloors) {
  tuner_model_t m = model();
  m.peer_read = {5.0, 10.0};
  m.peer = {2.0, 30.0};
  m.rdv = {1.0, 20.0};
  tuner_topo_t t = one_host(2);
  t.peer_read = 1, t.peer_read_min_bytes = 256 * 1024, t.peer_read_copy_min_bytes = 128 * 1024;
  const double S = 128 * 1024;
  for (coll_t c : {COLL_BROADCAST, COLL_GATHER, COLL_SCATTER, COLL_ALLTOALL}) {
    double want = c == COLL_ALLTOALL ? 2.0 + S / 20e3 : 5.0 + S / 10e3;
    EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, c, ALGO_CMA, 128 * 1024), want) << coll_name(c);
    EXPECT_LT(tuner_estimate_us(&m, &t, c, ALGO_CMA, 128 * 1024 - 1), 0);
  }
  for (coll_t c : {COLL_ALLREDUCE, COLL_REDUCE, COLL_REDUCESCATTER, COLL_ALLGATHER}) {
    EXPECT_LT(tuner_estimate_us(&m, &t, c, ALGO_CMA, 128 * 1024), 0);
    EXPECT_GT(tuner_estimate_us(&m, &t, c, ALGO_CMA, 256 * 1024), 0);
  }
}

// The p2p lanes' blocks from the rendezvous size (every connection of one host takes them whole,
// one copy by the receiver): rendezvous latency + what the busiest rank copies / b_rdv, the bytes
// direct reads (the root's n-1 blocks in a gather, one block per non-root in a scatter, n-1
// blocks per rank in an all-to-all); below it, on several hosts or without a rendezvous, the
// FIFOs' formula. Direct reads the same bytes after a handshake (peer latency), so on one host
// the rendezvous takes the blocks direct would, also where the machine's CPUs are shared: the
// blocks' notes, like direct's handshake, are not messages of the CPU model.
TEST(TunerModel, P2pBlocksByRendezvous) {
  tuner_model_t m = model();
  m.peer = {3.0, 20.0};
  m.rdv = {1.5, 20.0};
  m.shm_msg_cpu_us = 2.0;
  tuner_topo_t t = one_host(4);
  t.peer_mem = 1, t.peer_min_bytes = 32 * 1024, t.rdv_min_bytes = 16 * 1024;
  const double S = 64 * 1024, b = 20e3;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_GATHER, ALGO_P2P, 64 * 1024), 1.5 + 3 * S / b);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLTOALL, ALGO_P2P, 64 * 1024), 1.5 + 3 * S / b);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_SCATTER, ALGO_P2P, 64 * 1024), 1.5 + S / b);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_SEND, ALGO_P2P, 64 * 1024), 1.5 + S / b);
  // one byte below: through the FIFOs (shm level: 2 us, 10 GB/s)
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_GATHER, ALGO_P2P, 16 * 1024 - 1),
                   2.0 + (16 * 1024 - 1) / 10e3);
  // 2 ranks, a connection without rendezvous: the FIFOs' two copies lose to direct, as before
  tuner_topo_t two_ranks = one_host(2);
  two_ranks.peer_mem = 1, two_ranks.peer_min_bytes = 32 * 1024, two_ranks.rdv_min_bytes = 0;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &two_ranks, COLL_GATHER, ALGO_P2P, 64 * 1024),
                   2.0 + S / 10e3);
  for (coll_t c : {COLL_GATHER, COLL_SCATTER, COLL_ALLTOALL})
    EXPECT_EQ(tuner_choose(&m, &two_ranks, c, 64 * 1024, TUNER_ALL_ALGOS, 0).algo, ALGO_DIRECT);
  two_ranks.rdv_min_bytes = 16 * 1024;
  for (coll_t c : {COLL_GATHER, COLL_SCATTER, COLL_ALLTOALL})
    EXPECT_EQ(tuner_choose(&m, &two_ranks, c, 64 * 1024, TUNER_ALL_ALGOS, 0).algo, ALGO_P2P);
  // 8 ranks on 2 CPUs: 1.5 + 7 S / 20e3, no CPU term (the FIFOs' formula has one: 7 messages x
  // 2 us x 4 = 56 us), below direct's 3 + 7 S / 20e3 (1.06x: beyond the all-to-all's margin)
  tuner_topo_t shared = one_host(8);
  shared.peer_mem = 1, shared.peer_min_bytes = 32 * 1024, shared.rdv_min_bytes = 16 * 1024;
  shared.machine_ranks = 8, shared.ncpu = 2;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &shared, COLL_ALLTOALL, ALGO_P2P, 64 * 1024),
                   1.5 + 7 * S / b);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &shared, COLL_ALLTOALL, ALGO_P2P, 16 * 1024 - 1), 56.0);
  EXPECT_EQ(tuner_choose(&m, &shared, COLL_ALLTOALL, 64 * 1024, TUNER_ALL_ALGOS, 0).algo, ALGO_P2P);
  tuner_topo_t two = t;  // two hosts: no rendezvous counted, the network's formula
  two.nhosts = 2, two.local_size = 2, two.host_blocks = 1;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &two, COLL_SEND, ALGO_P2P, 64 * 1024), 20.0 + S / 1e3);
}

// An all-to-all takes a peer algorithm (in place they exchange blocks; the others copy the input
// first, which the model cannot charge) unless it is estimated more than 1.04x the best other:
// 2 ranks, 64 KiB, p2p by rendezvous 1 + S / 20e3 = 4.28 us against direct's lat + S / 20e3:
// direct at lat 1.1 (1.02x), p2p at lat 1.3 (1.07x); the gather, alike in bytes, takes p2p.
TEST(TunerModel, AllToAllTakesPeerStepsWithinAMargin) {
  tuner_model_t m = model();
  m.rdv = {1.0, 20.0};
  tuner_topo_t t = one_host(2);
  t.peer_mem = 1, t.peer_min_bytes = 16 * 1024, t.rdv_min_bytes = 16 * 1024;
  const double S = 64 * 1024;
  m.peer = {1.1, 20.0};
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLTOALL, ALGO_P2P, 64 * 1024), 1.0 + S / 20e3);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLTOALL, ALGO_DIRECT, 64 * 1024),
                   1.1 + S / 20e3);
  tuner_choice_t ch = tuner_choose(&m, &t, COLL_ALLTOALL, 64 * 1024, TUNER_ALL_ALGOS, 0);
  EXPECT_EQ(ch.algo, ALGO_DIRECT);
  EXPECT_DOUBLE_EQ(ch.us, 1.1 + S / 20e3);  // the estimate, not the compared figure
  EXPECT_EQ(tuner_choose(&m, &t, COLL_GATHER, 64 * 1024, TUNER_ALL_ALGOS, 0).algo, ALGO_P2P);
  m.peer = {1.3, 20.0};
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLTOALL, 64 * 1024, TUNER_ALL_ALGOS, 0).algo, ALGO_P2P);
}

TEST(TunerModel, PushForTheAllReduceOnMappedMemory) {
  tuner_model_t m = model();
  m.peer = {3.0, 20.0};
  m.peer_push = {2.0, 20.0};
  tuner_topo_t t = one_host(4);
  t.peer_mem = 1;
  t.peer_min_bytes = 32 * 1024;
  t.push_min_bytes = 16 * 1024;
  t.push_gather_min_bytes = 8 << 20;
  double S = 1 << 20;
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_PUSH, 1 << 20),
                   2.0 + 1.5 * S / 20e3);
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_PUSH, 8 * 1024), 0);     // too small
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_REDUCESCATTER, ALGO_PUSH, 1 << 20), 0);  // not built
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, 1 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_PUSH);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_REDUCESCATTER, 1 << 20, TUNER_ALL_ALGOS, 0).algo,
            ALGO_DIRECT);
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLGATHER, ALGO_PUSH, 4 << 20), 0);  // too small
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLGATHER, 4 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_DIRECT);
  EXPECT_DOUBLE_EQ(tuner_estimate_us(&m, &t, COLL_ALLGATHER, ALGO_PUSH, 16 << 20),
                   2.0 + 0.75 * 16 * S / 20e3);
  EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLGATHER, 16 << 20, TUNER_ALL_ALGOS, 0).algo, ALGO_PUSH);
  t.peer_mem = 0;  // no peer memory (or TUTTI_DIRECT=0): never
  EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_PUSH, 1 << 20), 0);
}

}  // namespace
