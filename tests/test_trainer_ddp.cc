// End-to-end tests of tutti-train's data parallelism, with real processes: each test runs the
// trainer binary (TUTTI_TRAIN_PATH) under the tutti-run launcher (TUTTI_RUN_PATH) and compares
// what the ranks dump with --dump PREFIX:
//   PREFIX.rank<r>.params  the final parameters, raw float32
//   PREFIX.rank<r>.trace   "step hash" after every optimizer step, hash of the parameter bytes
//
// 1. Same parameters on every rank after every step: all ranks' traces are identical, line by
//    line, and the final parameters are identical byte for byte.
// 2. N ranks x per-rank batch b for k steps == 1 rank x batch N*b: the sampler gives the union
//    of the ranks' batches to the single rank, so only float summation order differs. Asserted:
//    per tensor, max|a - b| / max|b - init| (the difference relative to the updates themselves:
//    parameters start equal, so only the updates can differ) <= the bound derived at
//    update_bound() below.
// 3. Resume == uninterrupted, bit for bit: a run stopped by --max-steps (mid-epoch) and resumed
//    from its checkpoint ends with the same bytes and the same per-step trace.
// Tests named TrainerDdpQuick* use the MLP on a slice of the data (seconds each); TrainerDdpSlow*
// use the CNN.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "data.h"
#include "model.h"
}

#ifndef TUTTI_RUN_PATH
#error "build with -DTUTTI_RUN_PATH and -DTUTTI_TRAIN_PATH"
#endif

namespace {

struct RunResult {
  int status;
  std::string output;
};

RunResult run(const std::string &cmd) {
  RunResult r{-1, ""};
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// ranks == 0: the trainer alone, without a launcher.
std::string trainer(int ranks, const std::string &args) {
  std::string t = std::string(TUTTI_TRAIN_PATH) + " " + args;
  if (ranks == 0) return t;
  return std::string(TUTTI_RUN_PATH) + " -n " + std::to_string(ranks) + " --timeout 900 " + t;
}

std::vector<float> read_floats(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

std::vector<std::string> read_lines(const std::string &path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  return lines;
}

class TrainerDdp : public ::testing::Test {
 public:
  void SetUp() override {
    std::string probe = std::string(DATA_DEFAULT_DIR) + "/train-images-idx3-ubyte.gz";
    if (access(probe.c_str(), R_OK) != 0) GTEST_SKIP() << "dataset-fashion-mnist not installed";
    char tmpl[] = "/tmp/tutti-train-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) run("rm -rf '" + dir_ + "'");
  }
  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  // Runs and expects success; returns the output.
  std::string train(int ranks, const std::string &args) {
    RunResult r = run(trainer(ranks, args));
    EXPECT_EQ(r.status, 0) << trainer(ranks, args) << "\n" << r.output;
    return r.output;
  }

  std::string dir_;
};

// Every rank's trace is rank 0's, and every rank's final parameters are rank 0's bytes.
void expect_ranks_identical(const std::string &prefix, int ranks, size_t steps) {
  auto trace0 = read_lines(prefix + ".rank0.trace");
  auto params0 = read_floats(prefix + ".rank0.params");
  ASSERT_EQ(trace0.size(), steps);
  ASSERT_FALSE(params0.empty());
  for (int r = 1; r < ranks; r++) {
    std::string rr = ".rank" + std::to_string(r);
    auto trace = read_lines(prefix + rr + ".trace");
    ASSERT_EQ(trace.size(), trace0.size()) << "rank " << r;
    for (size_t s = 0; s < trace.size(); s++)
      ASSERT_EQ(trace[s], trace0[s]) << "rank " << r << " differs from rank 0 after step " << s + 1;
    auto params = read_floats(prefix + rr + ".params");
    ASSERT_EQ(params.size(), params0.size());
    EXPECT_EQ(memcmp(params.data(), params0.data(), params.size() * sizeof(float)), 0)
        << "rank " << r;
  }
  printf("  %d ranks: identical parameter hashes after each of %zu steps, identical final bytes\n",
         ranks, steps);
}

// Bound on max|a - b| / max|b - init| per tensor, from the arithmetic (u = 2^-24, float32's
// unit roundoff). The two runs add the same products in another order: each rank sums its own
// micro-batches and the all-reduce adds the ranks' sums, where the single rank sums the whole
// batch inside one sgemm; and OpenBLAS may pick other kernels (other FMA groupings of the same
// dot products) for a batch of b rows than for one of N*b rows, so even a sample's activations
// may differ in the last bits. Every value a gradient element depends on is a chain of such sums:
// the batch sum (B = global batch terms) and, through forward and backward, one dot product per
// layer, of length the layer's fan-in (784 + 512 + 256 for the MLP; C*k*k or the flattened width
// for the CNN). Recursive summation of n terms in any order is within gamma_n * sum|terms| of the
// exact sum (gamma_n = n*u / (1 - n*u), Higham, Accuracy and Stability, 4.2), so the two runs'
// gradients differ by at most 2 * gamma_m * sum|terms|, m = B + sum of fan-ins (1576-1600 for the
// MLP: 2 * gamma_m = 1.9e-4; bound 1.2e-2).
//   sum|terms| / |sum| is the condition number kappa of the sum. The step is linear in the
// gradient for SGD (momentum averages steps), and for AdamW m / sqrt(v) moves by at most twice
// the gradient's relative change, so the difference relative to the update is at most
// 2 * (2 * gamma_m) * kappa after any number of steps (each step's difference is relative to that
// step's update; the parameters' influence on the next gradient is a second-order term at these
// learning rates). kappa has no a-priori limit (AdamW's step is sign(g) where g is near 0), so
// the bound allows kappa = 32 at worst-case rounding (every addition off by a full u, in the same
// direction); elements that cancel further are covered by rounding's typical size, sqrt(m) * u
// rather than m * u (a factor sqrt(1580) = 40 for the MLP). A bug in the data parallelism (a rank's
// gradient missing or counted twice, another sample, another dropout mask, a micro-batch lost)
// changes the update by O(1), 80x above the bound for the MLP.
double update_bound(const model_t &m, int global_batch) {
  const double u = std::ldexp(1.0, -24), kappa = 32;
  double n = global_batch;
  for (int t = 0; t + 1 < m.ntensors; t += 2)  // (weight, bias) pairs: fan-in = weights / biases
    n += (double)m.tensors[t].count / m.tensors[t + 1].count;
  double gamma = n * u / (1 - n * u);
  return 2 * (2 * gamma) * kappa;
}

// Compares a (N ranks) with b (1 rank), tensor by tensor; prints the measures and returns the
// largest difference relative to the updates (see update_bound).
double compare_params(model_kind_t kind, uint64_t seed, int global_batch,
                      const std::vector<float> &a, const std::vector<float> &b, double *bound) {
  model_t m;
  EXPECT_EQ(model_create(&m, kind, 1), 0);
  model_init_params(&m, seed);
  EXPECT_EQ(a.size(), m.nparams);
  EXPECT_EQ(b.size(), m.nparams);
  *bound = update_bound(m, global_batch);
  if (a.size() != m.nparams || b.size() != m.nparams) return model_free(&m), 1.0;
  double worst = 0;
  for (int t = 0; t < m.ntensors; t++) {
    const param_tensor_t &pt = m.tensors[t];
    double max_b = 0, max_diff = 0, max_update = 0;
    for (size_t i = pt.offset; i < pt.offset + pt.count; i++) {
      max_diff = std::max(max_diff, std::fabs((double)a[i] - b[i]));
      max_b = std::max(max_b, std::fabs((double)b[i]));
      max_update = std::max(max_update, std::fabs((double)b[i] - m.params[i]));
    }
    double upd = max_update > 0 ? max_diff / max_update : (max_diff > 0 ? 1.0 : 0.0);
    printf("  %-13s max|a-b| %.3e  max|b| %.3e | max|update| %.3e  rel %.3e\n", pt.name, max_diff,
           max_b, max_update, upd);
    worst = std::max(worst, upd);
  }
  printf("  max difference relative to the updates %.3e, bound %.3e\n", worst, *bound);
  model_free(&m);
  return worst;
}

struct EquivCase {
  const char *model;
  const char *optim;
  int ranks, batch, accum, steps;
  const char *extra;  // more options for both runs
};

// N ranks x batch b x accum a for k steps vs 1 rank x batch N*b*a.
void run_equivalence(TrainerDdp *t, const std::string &dir, const EquivCase &c) {
  const int global = c.ranks * c.batch * c.accum;
  std::string common = std::string("--model ") + c.model + " --optim " + c.optim +
                       " --epochs 2 --train-limit 4096 --test-limit 200 --seed 5 --max-steps " +
                       std::to_string(c.steps) + " --lr-ref-batch " + std::to_string(global) + " " +
                       c.extra;
  printf("  %d ranks x batch %d x accum %d vs 1 rank x batch %d, %s %s %s, %d steps\n", c.ranks,
         c.batch, c.accum, global, c.model, c.optim, c.extra, c.steps);
  std::string many = dir + "/many", one = dir + "/one";
  char args[256];
  snprintf(args, sizeof(args), " --batch %d --accum %d --dump %s", c.batch, c.accum, many.c_str());
  t->train(c.ranks, common + args);
  snprintf(args, sizeof(args), " --batch %d --dump %s", global, one.c_str());
  t->train(0, common + args);
  ASSERT_FALSE(::testing::Test::HasFailure()) << "a trainer run failed";
  expect_ranks_identical(many, c.ranks, c.steps);
  auto a = read_floats(many + ".rank0.params"), b = read_floats(one + ".rank0.params");
  model_kind_t kind;
  ASSERT_EQ(model_parse(c.model, &kind), 0);
  double bound = 0, worst = compare_params(kind, 5, global, a, b, &bound);
  EXPECT_LE(worst, bound);
}

// ---------------------------------------------------------------- quick (MLP)

using TrainerDdpQuick = TrainerDdp;
using TrainerDdpSlow = TrainerDdp;

TEST_F(TrainerDdpQuick, SameParametersOnEveryRankAfterEveryStep) {
  train(3,
        "--model mlp --epochs 1 --batch 8 --train-limit 960 --test-limit 300 --dump " + path("p"));
  expect_ranks_identical(path("p"), 3, 960 / 24);
}

// --compress: each bucket's all-reduce compressed (int8, error feedback), every rank still holds
// the same parameters after every step (the compressed all-reduce gives every rank the same
// bits), and the log gives the bytes sent per step: int8 is 1 + 4/256 bytes per element
// against fp32's 4, plus a 24-byte header per block and slot padding (< 0.2% here), of the
// 2 (R-1)/R x 4 x 535,818 bytes an exact all-reduce sends per step.
TEST_F(TrainerDdpQuick, CompressedGradientsSameOnEveryRankAndBytesLogged) {
  std::string out = train(2,
                          "--model mlp --epochs 1 --batch 16 --train-limit 512 --test-limit "
                          "100 --compress int8 --dump " +
                              path("p"));
  expect_ranks_identical(path("p"), 2, 512 / 32);
  EXPECT_NE(out.find("gradients compressed: int8"), std::string::npos) << out;
  size_t at = out.find("compressed (int8): ");
  ASSERT_NE(at, std::string::npos) << out;
  double mb = atof(out.c_str() + at + strlen("compressed (int8): "));
  double exact_mb = 4.0 * 535818 / 1e6;  // 2 (R-1)/R = 1 with 2 ranks
  // the log prints MB with 3 decimals: +-0.0005
  EXPECT_GE(mb, exact_mb * (1 + 4.0 / 256) / 4 - 0.0005) << out;
  EXPECT_LE(mb, exact_mb * (1 + 4.0 / 256) / 4 * 1.002 + 0.0005) << out;
  RunResult bad = run(trainer(2, "--model mlp --epochs 1 --compress zip"));
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("bad value 'zip' for --compress"), std::string::npos) << bad.output;
}

// --compress powersgd:2 with --compress-warmup 0: each bucket tells its compressor its tensors,
// so every weight is its own matrix and biases go exactly. MLP buckets (backward order, the
// first closed at 1 MiB): [fc3.b 10, fc3.w 10x256, fc2.b 256, fc2.w 256x512, fc1.b 512, the last
// 192 rows of fc1.w (x784)] and [the first 320 rows of fc1.w]. Per step, with 2 ranks a ring
// all-reduce of n floats sends 4n bytes: bucket 1 all-reduces the P of its three matrices
// (2 x (10 + 256 + 192)) with its biases (10 + 256 + 512), then their Q (2 x (256 + 512 +
// 784)); bucket 2 P (2 x 320) then Q (2 x 784): 4 x (1694 + 3104 + 640 + 1568) = 28,024 bytes,
// printed as 0.028 MB (the whole buckets as two square matrices would send 16,560: 0.017).
// That is with --compress-min-count 0; the default (65,536) sends fc3.w (2,560 elements)
// exactly with the biases: bucket 1's first all-reduce is then 2 x (256 + 192) + 778 + 2,560,
// its second 2 x (512 + 784), bucket 2 as before: 4 x (4234 + 2592 + 640 + 1568) = 36,136
// bytes, 0.036 MB.
TEST_F(TrainerDdpQuick, PowerSgdCompressesEachWeightOnItsOwn) {
  const std::string args =
      "--model mlp --epochs 1 --batch 16 --train-limit 512 --test-limit 100 --compress "
      "powersgd:2 --compress-warmup 0 ";
  std::string out = train(2, args + "--compress-min-count 0 --dump " + path("p"));
  expect_ranks_identical(path("p"), 2, 512 / 32);
  EXPECT_NE(out.find("compressed (powersgd:2): 0.028 MB sent per step"), std::string::npos) << out;
  std::string dflt = train(2, args + "--dump " + path("q"));
  expect_ranks_identical(path("q"), 2, 512 / 32);
  EXPECT_NE(dflt.find("compressed (powersgd:2): 0.036 MB sent per step"), std::string::npos)
      << dflt;
}

TEST_F(TrainerDdpQuick, TwoRanksEqualOneRankWithTwiceTheBatchAdamW) {
  run_equivalence(this, dir_, {"mlp", "adamw", 2, 16, 1, 10, ""});
}

TEST_F(TrainerDdpQuick, ThreeRanksEqualOneRankWithThreeTimesTheBatchSgd) {
  run_equivalence(this, dir_, {"mlp", "sgd", 3, 8, 1, 10, "--augment flip+shift"});
}

TEST_F(TrainerDdpQuick, AccumulationAndRanksEqualOneBigBatchWithDropout) {
  run_equivalence(this, dir_, {"mlp", "adamw", 2, 8, 3, 8, "--dropout 0.3"});
}

// The sharded optimizer (the default) with buckets whose length is not a multiple of 3. With
// fc1's gradient from its sufficient factors (the default): MLP buckets of 133,898 floats
// (fc3, fc2: tail of 2 floats all-reduced whole next to the reduce-scatter of the slices) and
// 401,920 (fc1, computed from the gathered factors for each rank's slice, which ends inside a
// row of fc1.weight, and the tail of 1).
TEST_F(TrainerDdpQuick, ShardedOptimizerWithTailsEqualsOneRank) {
  run_equivalence(this, dir_, {"mlp", "adamw", 3, 8, 1, 10, "--bucket-mb 0.1"});
}

// The same with fc1's gradient reduce-scattered in its blocks of 64 units: buckets of 133,898,
// 50,688 (fc1.bias and the last block) and 7 x 50,176 floats, tails of 2, 0 and 1.
TEST_F(TrainerDdpQuick, ShardedOptimizerWithTailsNoFactorsEqualsOneRank) {
  run_equivalence(this, dir_, {"mlp", "adamw", 3, 8, 1, 10, "--bucket-mb 0.1 --no-factor-grads"});
}

// On 2 ranks a reduce-scatter and an all-reduce add the same two numbers, so the sharded
// optimizer must give the replicated one's bytes after every step. (Not with fc1's gradient
// from its sufficient factors, where one sgemm sums both ranks' samples: that path is checked
// against 1 rank above.)
TEST_F(TrainerDdpQuick, ShardedOptimizerEqualsReplicatedBitForBit) {
  std::string args =
      "--model mlp --epochs 1 --batch 16 --train-limit 1024 --test-limit 100 "
      "--bucket-mb 0.5 --no-factor-grads --dump ";
  std::string out = train(2, args + path("sharded"));
  EXPECT_NE(out.find("optimizer sharded"), std::string::npos) << out;
  out = train(2, args + path("replicated") + " --no-shard-optim");
  EXPECT_EQ(out.find("optimizer sharded"), std::string::npos) << out;
  expect_ranks_identical(path("sharded"), 2, 1024 / 32);
  expect_ranks_identical(path("replicated"), 2, 1024 / 32);
  EXPECT_EQ(read_lines(path("sharded.rank0.trace")), read_lines(path("replicated.rank0.trace")));
  auto a = read_floats(path("sharded.rank0.params")),
       b = read_floats(path("replicated.rank0.params"));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// Uninterrupted 2 epochs vs stopped mid-epoch 2 (--max-steps) and resumed.
void run_resume(TrainerDdp *t, const std::string &dir, const std::string &args, int ranks,
                int steps, int stop_at) {
  std::string full = dir + "/full", parts = dir + "/parts", ck = dir + "/ck";
  t->train(ranks, args + " --dump " + full);
  std::string out1 = t->train(ranks, args + " --checkpoint " + ck + " --max-steps " +
                                         std::to_string(stop_at) + " --dump " + parts);
  EXPECT_NE(out1.find("stopped after " + std::to_string(stop_at) + " steps"), std::string::npos)
      << out1;
  std::string out2 = t->train(ranks, args + " --checkpoint " + ck + " --resume --dump " + parts);
  EXPECT_NE(out2.find("resumed from"), std::string::npos) << out2;
  expect_ranks_identical(full, ranks, steps);
  expect_ranks_identical(parts, ranks, steps);
  EXPECT_EQ(read_lines(full + ".rank0.trace"), read_lines(parts + ".rank0.trace"));
  auto a = read_floats(full + ".rank0.params"), b = read_floats(parts + ".rank0.params");
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); i++) differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  printf("  stopped at step %d of %d and resumed: %zu of %zu parameters differ in any bit\n",
         stop_at, steps, differ, a.size());
  EXPECT_EQ(differ, 0u);
}

TEST_F(TrainerDdpQuick, ResumeEqualsUninterruptedBitForBit) {
  // 1024 images / (2 ranks x 16) = 32 steps per epoch; stop in the middle of epoch 2
  run_resume(this, dir_,
             "--model mlp --epochs 2 --batch 16 --train-limit 1024 --test-limit 200 --seed 3 "
             "--dropout 0.2",
             2, 64, 45);
}

TEST_F(TrainerDdpQuick, ResumeRefusesOtherSettingsAndCorruptFiles) {
  std::string ck = path("ck"), base =
                                   "--model mlp --epochs 2 --batch 16 --train-limit 512 "
                                   "--test-limit 100 --checkpoint " +
                                   ck;
  train(2, base + " --max-steps 5");
  RunResult other = run(trainer(2, base + " --resume --lr 0.5"));
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("other settings"), std::string::npos) << other.output;
  {  // flip one byte in the middle of the parameters
    std::fstream f(ck, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096);
    char c;
    f.get(c);
    f.seekp(4096);
    f.put(static_cast<char>(c ^ 0x40));
  }
  RunResult corrupt = run(trainer(2, base + " --resume"));
  EXPECT_NE(corrupt.status, 0);
  EXPECT_NE(corrupt.output.find("checksum"), std::string::npos) << corrupt.output;
}

// --log-every N: a progress line every N steps inside an epoch (not at its last step, where the
// epoch line follows), from rank 0 only; the epoch line shows the mean lr of the epoch, which
// is above 0 even in the last epoch of a cosine schedule that ends at 0.
TEST_F(TrainerDdpQuick, LogEveryPrintsProgressAndTheEpochsMeanLr) {
  // 1024 images / (2 ranks x 16) = 32 steps per epoch: lines at steps 8, 16 and 24 of each.
  RunResult r = run(trainer(2,
                            "--model mlp --epochs 2 --batch 16 --train-limit 1024 "
                            "--test-limit 100 --log-every 8"));
  ASSERT_EQ(r.status, 0) << r.output;
  std::regex line(
      R"(  epoch [12]/2 step (8|16|24)/32 \| [0-9.]+ steps/s \| loss [0-9.]+ \| comm [0-9]+% \| ETA [0-9]+m[0-9]+s)");
  auto begin = std::sregex_iterator(r.output.begin(), r.output.end(), line);
  EXPECT_EQ(std::distance(begin, std::sregex_iterator()), 6) << r.output;
  std::smatch last;
  ASSERT_TRUE(
      std::regex_search(r.output, last, std::regex(R"(epoch  2/2 .*lr\(avg\) ([0-9.e+-]+))")))
      << r.output;
  EXPECT_GT(std::stod(last[1]), 0.0) << r.output;
}

TEST_F(TrainerDdpQuick, MissingDataSaysHowToInstallIt) {
  RunResult r = run(trainer(0, "--data " + path("nowhere")));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("dataset-fashion-mnist"), std::string::npos) << r.output;
}

TEST_F(TrainerDdpQuick, CorruptDataIsAClearError) {
  std::string d = path("data");
  run("mkdir -p " + d + " && cp " DATA_DEFAULT_DIR "/* " + d +
      " && head -c 100000 " DATA_DEFAULT_DIR "/train-images-idx3-ubyte.gz > " + d +
      "/train-images-idx3-ubyte.gz");
  RunResult r = run(trainer(0, "--data " + d));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("train-images-idx3-ubyte.gz"), std::string::npos) << r.output;
}

// --device cuda where there is no GPU (this machine, CI): a clear refusal, exit status 2, before
// any work, for both models. The CUDA variant says there is no usable device (or names an
// option the GPU trainer lacks); the host-only build says it has no GPU trainer. On a machine
// with a GPU, tests/gpu/run.sh trains with --device cuda instead.
TEST_F(TrainerDdpQuick, DeviceCudaIsRefusedWithoutAGpu) {
  if (access("/dev/nvidia0", F_OK) == 0)
    GTEST_SKIP() << "a GPU is present: tests/gpu/run.sh trains";
#ifdef TUTTI_TRAIN_CUDA_BUILT
  const char *want = "--device cuda: no usable CUDA device";
  RunResult accum = run(trainer(0, "--device cuda --model cnn --accum 2 --epochs 1"));
  EXPECT_EQ(accum.status, 2) << accum.output;
  EXPECT_NE(accum.output.find("does not support --accum"), std::string::npos) << accum.output;
#else
  const char *want = "--device cuda needs tutti's CUDA variant";
#endif
  for (const char *model : {"mlp", "cnn"}) {
    RunResult r = run(trainer(2, std::string("--device cuda --epochs 1 --model ") + model));
    EXPECT_EQ(r.status, 2) << model << ": " << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << model << ": " << r.output;
    EXPECT_EQ(r.output.find("epoch"), std::string::npos) << "it trained: " << r.output;
  }
}

// ---------------------------------------------------------------- slow (CNN)

TEST_F(TrainerDdpSlow, CnnTwoRanksEqualOneRankWithTwiceTheBatch) {
  run_equivalence(this, dir_, {"cnn", "adamw", 2, 16, 1, 6, ""});
}

TEST_F(TrainerDdpSlow, CnnThreeRanksWithAccumulationEqualOneRankSgd) {
  run_equivalence(this, dir_, {"cnn", "sgd", 3, 4, 2, 6, "--dropout 0.2"});
}

TEST_F(TrainerDdpSlow, CnnResumeEqualsUninterruptedBitForBit) {
  // 512 images / (2 ranks x 8 x accum 2) = 16 steps per epoch; small buckets: 3 all-reduces
  run_resume(this, dir_,
             "--model cnn --optim sgd --epochs 2 --batch 8 --accum 2 --bucket-mb 0.1 "
             "--train-limit 512 --test-limit 100 --seed 9",
             2, 32, 21);
}

}  // namespace
