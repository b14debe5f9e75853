// tutti-sim's model against closed forms, and its fast (symmetry) method against the full
// event simulation. Uniform links with no reduce cost and no per-piece overhead make the
// simulated times exact sums of latencies and transfer times; tolerances are relative 1e-9:
// the simulator adds at most ~2^17 terms (131,070 hops at 65,536 ranks) in double, each addition
// within u = 2^-53 relative, so the sum is within 2^17 * 2^-53 = 1.5e-11 of the closed form's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim/sim.h"

namespace {

const double kA = 10e-6;   // latency of every link (s)
const double kTol = 1e-9;  // relative

// n ranks on one kind of link: nodes x 1 (network) or 1 x n (shared memory), bandwidth bw.
sim_cluster_t uniform(int n, bool network, double bw) {
  sim_cluster_t c;
  sim_cluster_defaults(&c);
  c.nodes = network ? n : 1;
  c.ppn = network ? 1 : n;
  c.intra_bw = c.inter_bw = bw;
  c.intra_lat = c.inter_lat = kA;
  c.reduce_bw = 0;
  c.overhead = 0;
  return c;
}

double run(const sim_cluster_t &c, coll_t coll, int algo, size_t bytes, sim_method_t m = SIM_AUTO,
           sim_result_t *out = nullptr) {
  sim_result_t r;
  int rc = sim_run(&c, coll, algo, bytes, 4, m, 40000000, &r);
  EXPECT_EQ(rc, 0) << r.msg;
  if (out) *out = r;
  return r.time;
}

void expect_rel(double got, double want) {
  EXPECT_NEAR(got, want, want * kTol);
}

// Ring all-reduce, one piece per step: 2(n-1) hops of a + (S/n)/B.
TEST(Sim, RingAllReduceClosedForm) {
  for (int n : {2, 3, 4, 8}) {
    for (bool net : {false, true}) {
      double bw = 1e9;
      size_t bytes = 4096 * (size_t)n;  // 1024 floats per segment: one piece
      sim_cluster_t c = uniform(n, net, bw);
      expect_rel(run(c, COLL_ALLREDUCE, ALGO_RING, bytes), 2.0 * (n - 1) * (kA + 4096 / bw));
    }
  }
}

// Two ranks, a chain broadcast of 4 slots over shared memory. A FIFO of 8 slots lets the sender
// stream: 4 s/B + a. A FIFO of 2 slots makes it wait for credits (a piece's slot comes back a
// after its consumption): sends at 0, s/B, s/B + 2a, 2s/B + 2a; the last arrives s/B + a later.
TEST(Sim, TwoRankStreamAndBackPressure) {
  sim_cluster_t c = uniform(2, false, 0);
  double sb = 4e-6;  // s/B for one slot
  c.intra_bw = (double)c.slot_intra / sb;
  size_t bytes = 4 * c.slot_intra;
  expect_rel(run(c, COLL_BROADCAST, ALGO_CHAIN, bytes), 4 * sb + kA);
  c.fifo_intra = 2;
  expect_rel(run(c, COLL_BROADCAST, ALGO_CHAIN, bytes), 2 * sb + 2 * kA + sb + kA);
}

// Chain broadcast over the network, K pieces pipelined over n-1 hops:
// (n-1)(a + s/B) + (K-1) s/B.
TEST(Sim, ChainPipelineClosedForm) {
  int n = 5, k = 4;
  sim_cluster_t c = uniform(n, true, 1e9);
  double sb = (double)c.slot_inter / 1e9;
  expect_rel(run(c, COLL_BROADCAST, ALGO_CHAIN, k * c.slot_inter),
             (n - 1) * (kA + sb) + (k - 1) * sb);
}

// A token bucket on the NICs (tc tbf) starts empty and fills at the rate while its NIC idles;
// a piece then goes out burst/R sooner ((x - tokens)/R). A 2-rank chain never idles the root's
// NIC: the plain-rate time. In a 3-rank chain the relay's NIC idles until the first piece
// arrives (longer than burst/R): the last piece is burst/R earlier.
TEST(Sim, TokenBucket) {
  int k = 4;
  double burst = 256 * 1024;
  for (int n : {2, 3}) {
    sim_cluster_t c = uniform(n, true, 1e9);
    double plain = run(c, COLL_BROADCAST, ALGO_CHAIN, k * c.slot_inter);
    c.inter_burst = (size_t)burst, c.inter_peak_bw = 10e9;
    expect_rel(run(c, COLL_BROADCAST, ALGO_CHAIN, k * c.slot_inter),
               n == 2 ? plain : plain - burst / 1e9);
  }
}

// Tree broadcast on a full binary tree of 7 ranks (depth 2), one piece, every rank on its own
// node: a rank sends to its two children one after the other on its NIC, so the last leaf
// (second child of the second child) gets the piece after 2 latencies and 4 transfers.
TEST(Sim, TreeBroadcastDepthLatency) {
  sim_cluster_t c = uniform(7, true, 1e9);
  double sb = 4000 / 1e9;
  expect_rel(run(c, COLL_BROADCAST, ALGO_TREE, 4000), 2 * kA + 4 * sb);
  sim_cluster_t c3 = uniform(3, true, 1e9);  // depth 1: the root's second child
  expect_rel(run(c3, COLL_BROADCAST, ALGO_TREE, 4000), kA + 2 * sb);
}

// Link kinds: an all-gather ring on 2 nodes x 2 ranks crosses the network only at ranks 1 -> 2
// and 3 -> 0. With equal links it takes the time of 4 nodes x 1 rank, 3(a + s/B); with free
// shared memory only the two network hops count.
TEST(Sim, NetworkHopsOnlyWhereTheRingCrossesNodes) {
  sim_cluster_t flat = uniform(4, true, 1e9), two = flat;
  two.nodes = 2, two.ppn = 2;
  two.intra_bw = 1e9;
  size_t bytes = 4 * 4096;
  double t_flat = run(flat, COLL_ALLGATHER, ALGO_RING, bytes);
  expect_rel(run(two, COLL_ALLGATHER, ALGO_RING, bytes), t_flat);
  expect_rel(t_flat, 3 * (kA + 4096 / 1e9));
  two.intra_bw = 1e12, two.intra_lat = 0;
  // the slowest path: rank 3's block goes 3 -> 0 (network), 0 -> 1 (shm), 1 -> 2 (network)
  expect_rel(run(two, COLL_ALLGATHER, ALGO_RING, bytes), 2 * (kA + 4096 / 1e9) + 4096 / 1e12);
}

// The fast method (one representative per class) gives the full simulation's times.
TEST(Sim, FastMethodMatchesFull) {
  struct Case {
    int nodes, ppn, algo;
    size_t bytes;
    const char *kind;
  };
  const Case cases[] = {
      {16, 4, ALGO_RING, 1 << 20, "shift/4"},  {32, 8, ALGO_RING, 4 << 20, "shift/8"},
      {128, 8, ALGO_RING, 1 << 20, "shift/8"}, {16, 4, ALGO_HIER, 4 << 20, "shift/4"},
      {32, 8, ALGO_HIER, 1 << 20, "shift/8"},  {16, 4, ALGO_RD, 4096, "xor/4"},
      {64, 4, ALGO_RHD, 1 << 20, "xor/4"}};
  for (const Case &k : cases) {
    sim_cluster_t c;
    sim_cluster_defaults(&c);
    c.nodes = k.nodes, c.ppn = k.ppn;
    c.reduce_bw = 40e9 / 8, c.overhead = 1e-6;
    sim_result_t fast, full;
    double tf = run(c, COLL_ALLREDUCE, k.algo, k.bytes, SIM_FAST, &fast);
    double tu = run(c, COLL_ALLREDUCE, k.algo, k.bytes, SIM_FULL, &full);
    SCOPED_TRACE(testing::Message() << algo_name((algo_t)k.algo) << " " << k.nodes << "x" << k.ppn);
    EXPECT_STREQ(fast.method, k.kind);
    EXPECT_STREQ(full.method, "full");
    EXPECT_EQ(fast.simulated, k.ppn);
    EXPECT_EQ(full.simulated, k.nodes * k.ppn);
    expect_rel(tf, tu);
  }
}

// The same for the multi-channel ring (one NIC per local rank, so its channels leave through
// different NICs), Bruck's all-gather and reduce-scatter (flat: shift by a node) and with one
// rank per node (shift by one rank: a single representative).
TEST(Sim, FastMethodMatchesFullMultiRingAndBruck) {
  struct Case {
    int nodes, ppn, algo;
    coll_t coll;
    size_t bytes;
    const char *kind;
  };
  const Case cases[] = {{16, 4, ALGO_MRING, COLL_ALLREDUCE, 4 << 20, "shift/4"},
                        {8, 8, ALGO_MRING, COLL_ALLREDUCE, 16 << 20, "shift/8"},
                        {16, 4, ALGO_BRUCK, COLL_ALLGATHER, 1 << 20, "shift/4"},
                        {24, 1, ALGO_BRUCK, COLL_ALLGATHER, 3 << 20, "shift/1"},
                        {16, 4, ALGO_BRUCK, COLL_REDUCESCATTER, 4 << 20, "shift/4"},
                        {24, 1, ALGO_BRUCK, COLL_REDUCESCATTER, 3 << 20, "shift/1"}};
  for (const Case &k : cases) {
    sim_cluster_t c;
    sim_cluster_defaults(&c);
    c.nodes = k.nodes, c.ppn = k.ppn, c.nics = k.ppn;
    c.reduce_bw = 40e9 / 8, c.overhead = 1e-6;
    sim_result_t fast, full;
    SCOPED_TRACE(testing::Message() << algo_name((algo_t)k.algo) << " " << coll_name(k.coll) << " "
                                    << k.nodes << "x" << k.ppn);
    double tf = run(c, k.coll, k.algo, k.bytes, SIM_FAST, &fast);
    double tu = run(c, k.coll, k.algo, k.bytes, SIM_FULL, &full);
    EXPECT_STREQ(fast.method, k.kind);
    EXPECT_STREQ(full.method, "full");
    EXPECT_EQ(fast.simulated, k.ppn);
    expect_rel(tf, tu);
  }
}

// Channels spread the ring's network bytes over the NICs: 8 x 8 ranks at 64 MiB, network 10x
// slower than shared memory, one NIC per local rank: the multi-channel ring beats the ring by
// more than 4x (each NIC carries 1/8 of the ring's bytes; the network latency every lock-step
// step waits for keeps it from 8x: 5.3x), and with a single NIC it gains nothing.
TEST(Sim, MultiRingUsesEveryNic) {
  sim_cluster_t c;
  sim_cluster_defaults(&c);
  c.nodes = 8, c.ppn = 8, c.nics = 8;
  c.inter_bw = 100e9 / 8, c.intra_bw = 1000e9 / 8;
  double ring = run(c, COLL_ALLREDUCE, ALGO_RING, 64 << 20);
  double mring = run(c, COLL_ALLREDUCE, ALGO_MRING, 64 << 20);
  EXPECT_LT(mring * 4, ring);
  c.nics = 1;
  double ring1 = run(c, COLL_ALLREDUCE, ALGO_RING, 64 << 20);
  double mring1 = run(c, COLL_ALLREDUCE, ALGO_MRING, 64 << 20);
  EXPECT_GT(mring1, 0.95 * ring1);
}

// The CPU model: 4 nodes x 2 ranks on one machine of 2 CPUs, 10 us of CPU per message and
// 1 us links. The ring with 2 floats on 8 ranks has 2 messages in flight: its 14 steps cost
// 10 us each (a message's CPU time bounds a hop from below); with 8 floats all 8 ranks send in
// each step, which waits for 4 messages' CPU time (40 us). rd folds each node into one rank
// (4 messages at once: 20 us), runs 2 steps between the 4 leaders (20 us each) and unfolds
// (20 us). With 8 CPUs every message gets a CPU at once (10 us per hop); without the model the
// hops cost the latency (1 us) and the transfer (8 B at 1e12 B/s).
TEST(Sim, CpuModelSharedMachine) {
  sim_cluster_t c = uniform(4, true, 1e12);
  c.ppn = 2, c.intra_bw = 1e12, c.intra_lat = kA / 10, c.inter_lat = kA / 10;
  c.cpus = 2, c.machine_nodes = 4, c.msg_cpu = 10e-6;
  expect_rel(run(c, COLL_ALLREDUCE, ALGO_RING, 8), 14 * 10e-6);
  expect_rel(run(c, COLL_ALLREDUCE, ALGO_RING, 32), 14 * 40e-6);
  expect_rel(run(c, COLL_ALLREDUCE, ALGO_RD, 8), 4 * 20e-6);
  // pieces through shm at 2 us of CPU: the fold and the unfold 4 us each, the 2 steps across
  // nodes still 20 us
  c.intra_msg_cpu = 2e-6;
  expect_rel(run(c, COLL_ALLREDUCE, ALGO_RD, 8), 2 * 4e-6 + 2 * 20e-6);
  c.intra_msg_cpu = -1;
  c.cpus = 8;
  expect_rel(run(c, COLL_ALLREDUCE, ALGO_RD, 8), 4 * 10e-6);
  c.cpus = 0;
  expect_rel(run(c, COLL_ALLREDUCE, ALGO_RD, 8), 4 * (1e-6 + 8 / 1e12));  // 4 hops of 8 B
  // the fast method keeps whole machines together: 16 nodes of 2 on machines of 4 nodes
  c.nodes = 16, c.cpus = 2;
  sim_result_t fast, full;
  double tf = run(c, COLL_ALLREDUCE, ALGO_RING, 1 << 16, SIM_FAST, &fast);
  double tu = run(c, COLL_ALLREDUCE, ALGO_RING, 1 << 16, SIM_FULL, &full);
  EXPECT_STREQ(fast.method, "shift/8");
  expect_rel(tf, tu);
}

// A schedule without the symmetry (the tree) is refused by the fast method and simulated in
// full by the automatic one.
TEST(Sim, FastMethodOnlyWhereTheSymmetryHolds) {
  sim_cluster_t c;
  sim_cluster_defaults(&c);
  c.nodes = 8, c.ppn = 2;
  sim_result_t r;
  EXPECT_EQ(sim_run(&c, COLL_ALLREDUCE, ALGO_TREE, 1 << 20, 4, SIM_FAST, 40000000, &r), -1);
  EXPECT_STRNE(r.msg, "");
  run(c, COLL_ALLREDUCE, ALGO_TREE, 1 << 20, SIM_AUTO, &r);
  EXPECT_STREQ(r.method, "full");
}

// The rounds method (rounds.c) on the double binary tree, which has no symmetry: a few rounds
// simulated with every rank, the others added as the period found, gives the full simulation's
// time bit for bit (both keep every time an exact multiple of des.c's quantum, so the period
// shifts times exactly). Cases: the 400 Gbit/s fabric with 8 NICs and engine time per piece;
// the default cluster with reduce cost; one rank per node (the window grows to 18 rounds with
// one piece per chunk; 16 x 2 on one NIC repeats every 2 rounds).
TEST(Sim, TreeRoundsMatchFull) {
  struct Case {
    int nodes, ppn, nics, coll;
    size_t bytes;
    bool fabric;
  };
  const Case cases[] = {{8, 8, 8, COLL_ALLREDUCE, 64 << 20, true},
                        {16, 2, 1, COLL_ALLREDUCE, 64 << 20, false},
                        {32, 1, 1, COLL_ALLREDUCE, 256 << 20, true}};
  for (const Case &k : cases) {
    sim_cluster_t c;
    sim_cluster_defaults(&c);
    c.nodes = k.nodes, c.ppn = k.ppn, c.nics = k.nics;
    if (k.fabric)
      c.inter_bw = 400e9 / 8, c.inter_lat = 5e-6, c.intra_bw = 1000e9 / 8, c.intra_lat = 1e-6;
    c.overhead = 0.5e-6;
    if (!k.fabric) c.reduce_bw = 40e9 / 8;
    sim_result_t fast, full;
    double tf = run(c, (coll_t)k.coll, ALGO_TREE, k.bytes, SIM_FAST, &fast);
    double tu = run(c, (coll_t)k.coll, ALGO_TREE, k.bytes, SIM_FULL, &full);
    SCOPED_TRACE(testing::Message() << k.nodes << "x" << k.ppn << " coll " << k.coll);
    EXPECT_EQ(std::string(fast.method).rfind("rounds/", 0), 0u) << fast.method;
    EXPECT_STREQ(full.method, "full");
    EXPECT_LT(fast.steps, full.steps / 2);
    EXPECT_EQ(tf, tu);
  }
}

// nccl-tests' bus factors and the oneshot limit (the tuner runs oneshot only up to 16 KiB).
TEST(Sim, ConventionsAndApplicability) {
  EXPECT_DOUBLE_EQ(sim_bus_factor(COLL_ALLREDUCE, 8), 14.0 / 8);
  EXPECT_DOUBLE_EQ(sim_bus_factor(COLL_ALLGATHER, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(sim_bus_factor(COLL_BROADCAST, 8), 1.0);
  EXPECT_EQ(sim_count_for(COLL_ALLGATHER, 8192, 4, 8), 256u);
  EXPECT_EQ(sim_count_for(COLL_ALLREDUCE, 8192, 4, 8), 2048u);
  sim_cluster_t c;
  sim_cluster_defaults(&c);
  c.nodes = 2;
  sim_result_t r;
  EXPECT_EQ(sim_run(&c, COLL_ALLREDUCE, ALGO_ONESHOT, 1 << 20, 4, SIM_AUTO, 40000000, &r), -2);
  EXPECT_EQ(sim_run(&c, COLL_ALLGATHER, ALGO_HIER, 1 << 20, 4, SIM_AUTO, 40000000, &r), -2);
}

// The p2p lanes' blocks through shared memory from --rdv-intra go by rendezvous, each in one
// piece, as the library's engine sends them. Two ranks, an all-to-all of two-slot blocks (s/B
// per slot), engine time o per piece: in one piece the send takes o + 2s/B and arrives a later,
// its receive o more: 2o + 2s/B + a. Through the FIFOs (rdv-intra 0) the second piece leaves
// o + s/B after the first and its receive ends 3o + 2s/B + a. The tuner's model knows it too:
// on the default cluster's one node, a 1 MiB gather or scatter goes to the p2p lanes' single
// copy (2 hops of latency), not to direct's handshake (3), while an all-to-all, which takes a
// peer algorithm estimated within 4% of the others (tuner.c: in place it exchanges blocks where
// the lanes copy the input first), goes to direct; without the rendezvous the lanes copy twice
// and direct is the faster.
TEST(Sim, RendezvousBlocksInOnePiece) {
  sim_cluster_t c = uniform(2, false, 0);
  double sb = 4e-6, o = 1e-6;
  c.intra_bw = (double)c.slot_intra / sb;
  c.overhead = o;
  size_t bytes = 2 * 2 * c.slot_intra;  // two ranks' blocks of two slots
  ASSERT_EQ(c.rdv_intra, 16u * 1024);   // TUTTI_SHM_RDV_MIN's default
  expect_rel(run(c, COLL_ALLTOALL, ALGO_P2P, bytes), 2 * o + 2 * sb + kA);
  c.rdv_intra = 0;
  expect_rel(run(c, COLL_ALLTOALL, ALGO_P2P, bytes), 3 * o + 2 * sb + kA);
  sim_cluster_t d;
  sim_cluster_defaults(&d);
  ASSERT_EQ(d.nodes * d.ppn, 2);
  for (coll_t coll : {COLL_GATHER, COLL_ALLTOALL, COLL_SCATTER}) {
    algo_t chosen;
    size_t chunk;
    d.rdv_intra = 16 * 1024;
    ASSERT_EQ(sim_choose(&d, coll, SIM_ALGO_AUTO, 1 << 20, &chosen, &chunk), 0);
    EXPECT_EQ(chosen, coll == COLL_ALLTOALL ? ALGO_DIRECT : ALGO_P2P) << coll_name(coll);
    d.rdv_intra = 0;
    ASSERT_EQ(sim_choose(&d, coll, SIM_ALGO_AUTO, 1 << 20, &chosen, &chunk), 0);
    EXPECT_EQ(chosen, ALGO_DIRECT) << coll_name(coll);
  }
}

// The tuner is asked about the bytes the library asks it about: for gather, scatter and
// all-to-all one rank's block, not nccl-tests' whole buffer. On the default cluster's 2 ranks
// without the rendezvous, a 16 KiB gather has 8 KiB blocks, below TUTTI_DIRECT_MIN_BYTES
// (16 KiB): the FIFOs; a 32 KiB gather's 16 KiB blocks go to direct.
TEST(Sim, TunerSeesTheLibrarysBytes) {
  sim_cluster_t d;
  sim_cluster_defaults(&d);
  d.rdv_intra = 0;
  algo_t chosen;
  size_t chunk;
  for (coll_t coll : {COLL_GATHER, COLL_SCATTER, COLL_ALLTOALL}) {
    ASSERT_EQ(sim_choose(&d, coll, SIM_ALGO_AUTO, 16 * 1024, &chosen, &chunk), 0);
    EXPECT_EQ(chosen, ALGO_P2P) << coll_name(coll);
    ASSERT_EQ(sim_choose(&d, coll, SIM_ALGO_AUTO, 32 * 1024, &chosen, &chunk), 0);
    EXPECT_EQ(chosen, ALGO_DIRECT) << coll_name(coll);
  }
}

// 65,536 ranks (8,192 nodes x 8) through the fast method (8 ranks simulated), on links that are
// all alike (network and shared memory: latency a, bandwidth B) with one 4,096-byte piece per
// segment: the closed form of RingAllReduceClosedForm, 2(n - 1)(a + 4096 / B), holds at any n
// (NetworkHopsOnlyWhereTheRingCrossesNodes: with equal links the node boundaries do not count).
// Then with the default cluster (its own link figures, reduce cost, overhead, slots): at least
// the bandwidth term of the busiest NIC, 2(n-1)/n S / B.
TEST(Sim, RingAt65536Ranks) {
  const int n = 65536;
  sim_cluster_t c = uniform(n, true, 1e9);
  c.nodes = 8192, c.ppn = 8;
  sim_result_t r;
  double t = run(c, COLL_ALLREDUCE, ALGO_RING, 4096 * (size_t)n, SIM_AUTO, &r);
  EXPECT_STREQ(r.method, "shift/8");
  expect_rel(t, 2.0 * (n - 1) * (kA + 4096 / 1e9));
  sim_cluster_defaults(&c);
  c.nodes = 8192, c.ppn = 8;
  t = run(c, COLL_ALLREDUCE, ALGO_RING, 64 << 20, SIM_AUTO, &r);
  EXPECT_STREQ(r.method, "shift/8");
  EXPECT_GT(t, 2.0 * (n - 1) / n * (64 << 20) / c.inter_bw);
}

// The tuner takes the scratch-hungry algorithms at scale, and the simulator agrees they are
// the fastest: 65,536 ranks (8,192 nodes x 8, 8 NICs of 400 Gbit/s), reduce-scatter and
// all-gather of 1 GiB: auto runs rhd (512 MiB of scratch for the reduce-scatter), at least 3x
// faster than the ring (both through the fast method: a few seconds of CPU in all).
TEST(Sim, TunerTakesScratchHungryAlgorithmsAtScale) {
  sim_cluster_t c;
  sim_cluster_defaults(&c);
  c.nodes = 8192, c.ppn = 8, c.nics = 8;
  c.inter_bw = 400e9 / 8, c.inter_lat = 5e-6, c.intra_bw = 1000e9 / 8, c.intra_lat = 1e-6;
  for (coll_t coll : {COLL_REDUCESCATTER, COLL_ALLGATHER}) {
    sim_result_t a, ring;
    ASSERT_EQ(sim_run(&c, coll, SIM_ALGO_AUTO, size_t{1} << 30, 4, SIM_AUTO, 40000000, &a), 0)
        << a.msg;
    ASSERT_EQ(sim_run(&c, coll, ALGO_RING, size_t{1} << 30, 4, SIM_AUTO, 40000000, &ring), 0)
        << ring.msg;
    EXPECT_EQ(a.algo, ALGO_RHD) << coll_name(coll);
    EXPECT_LT(3 * a.time, ring.time) << coll_name(coll);
  }
}

// tutti-sim refuses a full simulation over --max-steps from an estimate (5 ranks' schedules),
// before building the others: one-shot on 8,192 ranks (n^2 messages) with a limit of 4e7.
TEST(Sim, RefusesOversizedFullSimulationFromTheEstimate) {
  sim_cluster_t c = uniform(8192, true, 1e9);
  sim_result_t r;
  EXPECT_EQ(sim_run(&c, COLL_ALLREDUCE, ALGO_ONESHOT, 8192, 4, SIM_AUTO, 40000000, &r), -1);
  const char *at = strstr(r.msg, "the full simulation needs ~");
  ASSERT_NE(at, nullptr) << r.msg;
  EXPECT_GT(strtod(at + strlen("the full simulation needs ~"), nullptr), 1e8) << r.msg;  // ~2n^2
}

// The tuner judged by the simulator (issue 19's grid, reduced; perf/sim_grid.py runs the whole
// one): on a fabric of 400 Gbit/s NICs (5 us), shared memory at 1000 Gbit/s (1 us) and 0.5 us of
// engine time per piece, the algorithm the tuner picks simulates within 10% (the target)
// of the fastest registered algorithm, for 1-64 nodes of 1 or 8 ranks on 1 or 8 NICs. Sizes
// where the grid has explained misses (256 KiB, 64 x 1: the tuner's exchange factor, which the
// simulator's free reductions do not have) are left out; docs/simulator.md lists them.
TEST(Sim, TunerPicksWithinTenPercentOfTheFastest) {
  for (int nodes : {1, 8, 64})
    for (int ppn : {1, 8})
      for (int nics : {1, 8}) {
        if (nodes * ppn == 1 || (nodes == 1 && nics > 1)) continue;
        sim_cluster_t c;
        sim_cluster_defaults(&c);
        c.nodes = nodes, c.ppn = ppn, c.nics = nics;
        c.inter_bw = 400e9 / 8, c.inter_lat = 5e-6, c.intra_bw = 1000e9 / 8, c.intra_lat = 1e-6;
        c.overhead = 0.5e-6;
        for (size_t bytes : {size_t{8}, size_t{4096}, size_t{32} << 10, size_t{256} << 10,
                             size_t{2} << 20, size_t{16} << 20}) {
          double best = -1;
          int best_algo = -1;
          sim_result_t r;
          for (int a = 0; a < ALGO_NUM; a++)
            if (sim_run(&c, COLL_ALLREDUCE, a, bytes, 4, SIM_AUTO, 40000000, &r) == 0 &&
                (best < 0 || r.time < best))
              best = r.time, best_algo = a;
          ASSERT_GT(best, 0);
          ASSERT_EQ(sim_run(&c, COLL_ALLREDUCE, SIM_ALGO_AUTO, bytes, 4, SIM_AUTO, 40000000, &r), 0)
              << r.msg;
          EXPECT_LE(r.time, 1.10 * best)
              << nodes << " x " << ppn << ", " << nics << " NIC(s), " << bytes << " B: tuner "
              << algo_name(r.algo) << " " << r.time * 1e6 << " us, fastest "
              << algo_name((algo_t)best_algo) << " " << best * 1e6 << " us";
        }
      }
}

}  // namespace
