// Compressed all-reduces as registry entries (src/algos/compressed.c): listed, never chosen for
// an exact call, chosen by cost for a call with a compressor, and simulated by tutti-sim's
// model (fast == full, a closed form on two nodes).
#include <gtest/gtest.h>

#include <cmath>

#include "algos/tuner.h"
#include "compress/compress.h"
#include "sim/sim.h"

namespace {

const algo_t kLossy[] = {ALGO_CBLOCK, ALGO_CTOPK, ALGO_CPSGD, ALGO_CHIER};

tuttiCompressorConfig_t spec(const char *s) {
  tuttiCompressorConfig_t cfg;
  EXPECT_EQ(tuttiCompressorParse(s, &cfg), ncclSuccess) << s;
  return cfg;
}

// A fixed model: shared memory 1 us, 6 GB/s; network 10 us, 1gbit (0.125 GB/s); 1 ns per
// element and codec pass; no CPU model.
tuner_model_t model() {
  tuner_model_t m = {};
  m.shm = {1.0, 6.0}, m.net = {10.0, 0.125}, m.peer = {10, 10}, m.peer_read = {10, 14};
  m.codec_ns = 1.0;
  return m;
}

tuner_topo_t topo(int hosts, int per_host) {
  tuner_topo_t t = {};
  t.nranks = hosts * per_host, t.nhosts = hosts, t.local_size = per_host;
  t.hier_ok = hosts > 1, t.host_blocks = hosts > 1, t.peer_mem = hosts == 1;
  t.peer_read = hosts == 1, t.slot_bytes = 128 << 10, t.chunk_bytes = 512 << 10;
  t.scratch_bytes = 512 << 10, t.oneshot_max_bytes = 16384;
  t.peer_min_bytes = t.peer_read_min_bytes = 256 << 10;
  return t;
}

TEST(CompressedEntries, Registered) {
  for (algo_t a : kLossy) {
    ASSERT_NE(algo_get(a), nullptr);
    EXPECT_EQ(algo_by_name(algo_name(a)), a);
    EXPECT_TRUE(algo_get(a)->needs & ALGO_LOSSY) << algo_name(a);
    for (int c = 0; c < COLL_NUM; c++)
      EXPECT_EQ(algo_implements(a, (coll_t)c), c == COLL_ALLREDUCE) << algo_name(a);
  }
  int lossy = 0;
  for (int a = 0; a < ALGO_NUM; a++) lossy += (algo_get((algo_t)a)->needs & ALGO_LOSSY) != 0;
  EXPECT_EQ(lossy, 4);
}

// An exact call never gets a compressed entry: not from the whole registry, not when
// TUTTI_ALGO names only them (then nothing applies, and the planner chooses among all), not
// where the network is so slow that their estimates, with a compressor, are far below the
// exact ones. Their builders refuse a call without a compressor.
TEST(CompressedEntries, NeverForAnExactCall) {
  tuner_model_t m = model();
  m.net.gbps = 0.001;
  uint32_t lossy = 0;
  for (algo_t a : kLossy) lossy |= 1u << a;
  for (int hosts : {1, 2, 4})
    for (int per : {1, 2, 8}) {
      if (hosts * per < 2) continue;
      tuner_topo_t t = topo(hosts, per);
      for (size_t bytes = 4; bytes <= (size_t{1} << 30); bytes *= 16) {
        tuner_choice_t all = tuner_choose(&m, &t, COLL_ALLREDUCE, bytes, TUNER_ALL_ALGOS, 0);
        ASSERT_NE(all.algo, ALGO_NUM);
        EXPECT_FALSE(algo_get(all.algo)->needs & ALGO_LOSSY) << algo_name(all.algo);
        EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, bytes, lossy, 0).algo, ALGO_NUM);
        for (algo_t a : kLossy) EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, a, bytes), 0);
      }
    }
  sched_args_t a = {COLL_ALLREDUCE, 0, 4, 0, 1000, 64, 0, 0, nullptr, nullptr, nullptr, nullptr};
  sched_t s = {}, lanes[8] = {};
  for (algo_t e : kLossy) EXPECT_EQ(sched_build(e, &a, nullptr, &s, lanes), -2);
  sched_free(&s);
}

// With a compressor, only compressed entries apply: the kind's flat one (hierarchical 0), chier
// (1), or the cheaper of the two (2, ",auto"), each estimate the formula of compressed.c.
TEST(CompressedEntries, ChosenByCostWithACompressor) {
  tuner_model_t m = model();
  const size_t count = 16 << 20, bytes = 4 * count;
  tuttiCompressorConfig_t cfg = spec("int8,auto");
  {  // 2 hosts x 2 ranks: flat int8 among 4 ranks over the network against chier
    tuner_topo_t t = topo(2, 2);
    tuner_compress_t v;
    compress_tuner_view(&cfg, count, 4, 2, &v);
    t.compress = &v;
    double S4 = (double)v.flat[0], S2 = (double)v.lead[0], codec = 5.0 * count * 1e-3;
    EXPECT_EQ(v.flat[0], compress_wire_bytes(&cfg, count, 4) / 6);
    // all-to-all: 3 hops, 2 of each rank's 3 messages leave the host, 2 ranks share its NIC:
    // 2 x (2/3) x 3 S; ring all-gather: 3 hops of S
    double flat = 3 * 10.0 + 4 * S4 / 125.0 + 3 * 10.0 + 3 * S4 / 125.0 + codec;
    double hier = 2 * (1.0 + bytes / 6e3) + (2 * 10.0 + 2 * S2 / 125.0) + codec;
    EXPECT_NEAR(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_CBLOCK, bytes), flat, 1e-6 * flat);
    EXPECT_NEAR(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_CHIER, bytes), hier, 1e-6 * hier);
    EXPECT_LT(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_CTOPK, bytes), 0);  // not its kind
    tuner_choice_t ch = tuner_choose(&m, &t, COLL_ALLREDUCE, bytes, TUNER_ALL_ALGOS, 0);
    EXPECT_EQ(ch.algo, hier < flat ? ALGO_CHIER : ALGO_CBLOCK);
    EXPECT_EQ(ch.algo, ALGO_CHIER);  // 6 GB/s inside hosts: halving the network bytes pays
    m.shm.gbps = 0.2;                // a slow host: the host phases cost more than they save
    hier = 2 * (1.0 + bytes / 200.0) + (2 * 10.0 + 2 * S2 / 125.0) + codec;
    EXPECT_GT(hier, flat);
    EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, bytes, TUNER_ALL_ALGOS, 0).algo, ALGO_CBLOCK);
    v.hier = 1;  // forced hierarchical: chier whatever it costs
    EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, bytes, TUNER_ALL_ALGOS, 0).algo, ALGO_CHIER);
    v.hier = 0;
    m.shm.gbps = 6.0;
    EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, bytes, TUNER_ALL_ALGOS, 0).algo, ALGO_CBLOCK);
  }
  {  // one host: chier is exact (its leaders' exchange is empty), cheaper than compressing
    tuner_topo_t t = topo(1, 2);
    tuttiCompressorConfig_t tk = spec("topk:0.01,auto");
    tuner_compress_t v;
    compress_tuner_view(&tk, count, 2, 1, &v);
    t.compress = &v;
    double hier = 2 * (1.0 + bytes / 6e3);
    double flat = 1.0 + (double)v.flat[0] / 6e3 + 4.0 * count * 1e-3;  // one hop of M, codec
    EXPECT_NEAR(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_CHIER, bytes), hier, 1e-6 * hier);
    EXPECT_NEAR(tuner_estimate_us(&m, &t, COLL_ALLREDUCE, ALGO_CTOPK, bytes), flat, 1e-6 * flat);
    EXPECT_EQ(tuner_choose(&m, &t, COLL_ALLREDUCE, bytes, TUNER_ALL_ALGOS, 0).algo,
              hier < flat ? ALGO_CHIER : ALGO_CTOPK);
  }
}

sim_cluster_t cluster(int nodes, int ppn) {
  sim_cluster_t c;
  sim_cluster_defaults(&c);
  c.nodes = nodes, c.ppn = ppn;
  c.reduce_bw = 40e9 / 8, c.overhead = 1e-6;
  return c;
}

double sim(const sim_cluster_t &c, int algo, size_t bytes, sim_method_t how, sim_result_t *r) {
  int rc = sim_run(&c, COLL_ALLREDUCE, algo, bytes, 4, how, 40000000, r);
  EXPECT_EQ(rc, 0) << r->msg;
  return r->time;
}

// Every compressed entry simulates; where the fast method applies it gives the full one's time.
TEST(CompressedEntries, SimulatedFastEqualsFull) {
  struct Case {
    const char *spec;
    algo_t algo;
  };
  const Case cases[] = {{"int8", ALGO_CBLOCK},          {"bf16", ALGO_CBLOCK},
                        {"topk:0.01", ALGO_CTOPK},      {"powersgd:2", ALGO_CPSGD},
                        {"int8,hier", ALGO_CHIER},      {"topk:0.01,hier", ALGO_CHIER},
                        {"powersgd:4,hier", ALGO_CHIER}};
  const size_t bytes = 4 << 20;
  for (const Case &k : cases)
    for (int nodes : {2, 8})
      for (int ppn : {1, 4}) {
        SCOPED_TRACE(testing::Message() << k.spec << " " << nodes << "x" << ppn);
        sim_cluster_t c = cluster(nodes, ppn);
        tuttiCompressorConfig_t cfg = spec(k.spec);
        tuner_compress_t v;
        compress_tuner_view(&cfg, bytes / 4, nodes * ppn, nodes, &v);
        c.compress = &v;
        sim_result_t fast, full;
        double tf = sim(c, k.algo, bytes, SIM_AUTO, &fast);
        double tu = sim(c, k.algo, bytes, SIM_FULL, &full);
        EXPECT_EQ(fast.algo, k.algo);
        EXPECT_STREQ(full.method, "full");
        EXPECT_NEAR(tf, tu, 1e-9 * tu) << fast.method;
        sim_result_t r;  // an exact algorithm does not run a call with a compressor
        EXPECT_EQ(sim_run(&c, COLL_ALLREDUCE, ALGO_RING, bytes, 4, SIM_AUTO, 40000000, &r), -2);
      }
}

// Two nodes x 1 rank, topk: one message of M bytes each way (one piece when M fits a slot),
// plus the codec's passes x count x codec_ns: a + ceil(M / 4) 4 / B + 4 n ns.
TEST(CompressedEntries, SimulatedTopkClosedForm) {
  sim_cluster_t c = cluster(2, 1);
  c.reduce_bw = 0, c.overhead = 0, c.inter_lat = 10e-6, c.inter_bw = 125e6;
  const size_t count = 1 << 20;
  tuttiCompressorConfig_t cfg = spec("topk:0.01");
  tuner_compress_t v;
  compress_tuner_view(&cfg, count, 2, 2, &v);
  c.compress = &v;
  size_t M = 24 + 8 * compress_topk_k(count, 0.01f);
  ASSERT_EQ(v.flat[0], M);
  ASSERT_LE(M, c.slot_inter);
  sim_result_t r;
  double want = 10e-6 + (double)((M + 3) / 4 * 4) / 125e6 + 4.0 * count * 1e-9;
  EXPECT_NEAR(sim(c, ALGO_CTOPK, 4 * count, SIM_FULL, &r), want, 1e-9 * want);
  // auto with a compressor: a compressed entry, by the tuner's estimate
  EXPECT_EQ(sim_run(&c, COLL_ALLREDUCE, SIM_ALGO_AUTO, 4 * count, 4, SIM_AUTO, 40000000, &r), 0);
  EXPECT_EQ(r.algo, ALGO_CTOPK);  // flat and chier tie on one rank per node: the earlier entry
}

}  // namespace
