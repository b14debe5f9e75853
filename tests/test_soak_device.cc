// Protocol soak of the stream path (proxy.c) through the host emulation of the device
// (device_emu.c, TUTTI_DEVICE_EMULATION=1). NOT a GPU test: no CUDA call runs. One thread drives
// 2-4 ranks (ncclCommInitAll on the one emulated device, as a GPU program may), or 3 ranks are
// processes over shm; each rank has its own stream, through random groups of collectives (harness
// cases: any collective, datatype, op, root, count up to 64 Ki elements, each rank its own
// placement) on emulated device memory (which the host cannot touch: a stray host access by the
// engine is a SIGSEGV), one to three groups queued on the streams before the test waits for them.
// Every result is checked element by element, guard bytes included, against its closed form.
// TUTTI_SOAK_DEVICE_GROUPS sets the groups of the slow test (default 3000),
// TUTTI_SOAK_DEVICE_SEED the draws' seed (20261207).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "device.h"
#include "emu_context.h"
#include "harness.h"
#include "in_child.h"

namespace {

using th::CaseRun;
using th::Mode;
using th::RankCtx;

void *emu_alloc(size_t bytes) {
  return device_emu_alloc(bytes);
}
void emu_release(void *p) {
  device_emu_free(p);
}
void *emu_view(void *p) {
  return device_emu_view(p);
}
const th::BufferSource kDeviceMemory = {emu_alloc, emu_release, emu_view};

// In a child (the emulation and the device are set up once per process), with TUTTI_TIMEOUT so
// that a wait that never ends is an error: 0 when every result was exact.
int device_soak(int n, long groups) {
  setenv("TUTTI_DEVICE_EMULATION", "1", 1);
  setenv("TUTTI_TIMEOUT", "60", 1);
  const char *seed = std::getenv("TUTTI_SOAK_DEVICE_SEED");
  std::mt19937_64 rng(seed ? std::strtoull(seed, nullptr, 10) : 20261207);
  std::vector<ncclComm_t> comms(n);
  if (init_all_on_device(comms.data(), n) != ncclSuccess) return 2;
  std::vector<void *> streams(n);
  for (auto &s : streams) s = device_emu_stream_create();
  std::vector<RankCtx> ctx(n);
  for (int r = 0; r < n; r++)
    ctx[r].rank = r, ctx[r].nranks = n, ctx[r].mode = Mode::kThreads, ctx[r].comm = comms[r];
  th::case_buffers_from(&kDeviceMemory);
  int code = 0;
  long calls = 0;
  for (long i = 0; i < groups && !code;) {
    std::vector<std::unique_ptr<CaseRun>> runs;  // every rank's, of every queued group
    int queued = 1 + (int)(rng() % 3);
    for (int q = 0; q < queued && i < groups; q++, i++) {
      int k = 1 + (int)(rng() % 4);
      std::vector<std::mt19937_64> draws(n, std::mt19937_64(rng()));  // alike on every rank
      size_t first = runs.size();
      for (int r = 0; r < n; r++)
        for (int c = 0; c < k; c++) {
          runs.emplace_back(new CaseRun(ctx[r], th::random_case(draws[r], n, 16, r)));
          runs.back()->set_stream(static_cast<cudaStream_t>(streams[r]));
        }
      ncclGroupStart();
      for (size_t j = first; j < runs.size(); j++) runs[j]->issue();
      ncclResult_t rc = ncclGroupEnd();
      if (rc != ncclSuccess) {
        std::fprintf(stderr, "group %ld: ncclGroupEnd: %s (%s)\n", i, ncclGetErrorString(rc),
                     ncclGetLastError(comms[0]));
        code = 3;
        break;
      }
      calls += k;
    }
    for (auto s : streams)
      if (device_emu_stream_sync(s, 60000) != 0) {
        std::fprintf(stderr, "group %ld: a stream did not finish within 60 s\n", i);
        return 5;  // the buffers are still in use: leave them
      }
    for (auto &run : runs)
      if (!run->verify()) code = 4;
  }
  th::case_buffers_from(nullptr);
  for (auto c : comms) ncclCommDestroy(c);
  for (auto s : streams) device_emu_stream_destroy(s);
  device_emu_counts_t k = device_emu_counts();
  if (!code)
    std::fprintf(stderr,
                 "soak: %d ranks on emulated device memory, %ld groups, %ld calls a rank; device "
                 "copies %llu, reductions %llu, load/store copies %llu, staging copies %llu, on "
                 "streams %llu + %llu\n",
                 n, groups, calls, (unsigned long long)k.dev_copies,
                 (unsigned long long)k.dev_reduces, (unsigned long long)k.ldst_copies,
                 (unsigned long long)k.staging_copies, (unsigned long long)k.stream_copies,
                 (unsigned long long)k.stream_reduces);
  // the device paths ran: the peer path between device buffers, or the stream's own copies
  if (!code && k.dev_copies + k.dev_reduces + k.ldst_copies + k.stream_copies == 0) code = 6;
  return code;
}

// Ranks as processes over shm (the emulation's memory handles opened across processes), each
// with its own stream: the same draws, the groups of each rank's own calls.
void device_soak_procs(int n, long groups) {
  th::Options opt;
  opt.timeout_s = 1800;
  opt.env = {{"TUTTI_DEVICE_EMULATION", "1"}, {"TUTTI_TIMEOUT", "60"}};
  opt.before_init = on_device;
  th::run_ranks_ok(
      Mode::kProcs, n,
      [groups](RankCtx &ctx) {
        const char *seed = std::getenv("TUTTI_SOAK_DEVICE_SEED");
        std::mt19937_64 rng(seed ? std::strtoull(seed, nullptr, 10) : 20261207);
        void *stream = device_emu_stream_create();
        th::case_buffers_from(&kDeviceMemory);
        for (long i = 0; i < groups && ctx.ok();) {
          std::vector<std::unique_ptr<CaseRun>> runs;
          int queued = 1 + (int)(rng() % 3);
          for (int q = 0; q < queued && i < groups && ctx.ok(); q++, i++) {
            int k = 1 + (int)(rng() % 4);
            std::mt19937_64 draws(rng());
            size_t first = runs.size();
            for (int c = 0; c < k; c++) {
              runs.emplace_back(new CaseRun(ctx, th::random_case(draws, ctx.nranks, 16, ctx.rank)));
              runs.back()->set_stream(static_cast<cudaStream_t>(stream));
            }
            NCCL_OK(ctx, ncclGroupStart());
            for (size_t j = first; j < runs.size(); j++) runs[j]->issue();
            ncclResult_t rc = ncclGroupEnd();
            RCHECK(ctx, rc == ncclSuccess, "group %ld: %s", i, ncclGetLastError(ctx.comm));
          }
          if (device_emu_stream_sync(stream, 60000) != 0) {
            ctx.fail("group %ld: the stream did not finish within 60 s", i);
            std::_Exit(5);  // the buffers are still in use: leave them
          }
          for (auto &run : runs) run->verify();
        }
        th::case_buffers_from(nullptr);
        device_emu_counts_t k = device_emu_counts();
        RCHECK(ctx, k.ipc_opens > 0, "no handle of another process's device memory was opened");
        device_emu_stream_destroy(stream);
      },
      opt, std::to_string(groups) + " groups on emulated device memory");
}

long groups_from_env(long fallback) {
  const char *env = std::getenv("TUTTI_SOAK_DEVICE_GROUPS");
  return env && std::atol(env) > 0 ? std::atol(env) : fallback;
}

const char *const kCodes =
    "2: init, 3: a group failed, 4: a wrong result, 5: a stream stuck, 6: no device path ran "
    "(stderr says which)";

TEST(SoakDeviceProtocol, ShortThreeRanks) {
  EXPECT_EQ(exit_code_in_child([] { return device_soak(3, 100); }), 0) << kCodes;
}

TEST(SoakDeviceProtocol, ShortThreeRanksAsProcesses) {
  device_soak_procs(3, 100);
}

TEST(SoakDeviceProtocol, ThreeRanksAsProcesses) {
  device_soak_procs(3, groups_from_env(3000));
}

TEST(SoakDeviceProtocol, ThreeRanks) {
  EXPECT_EQ(exit_code_in_child([] { return device_soak(3, groups_from_env(3000)); }), 0) << kCodes;
}

TEST(SoakDeviceProtocol, TwoAndFourRanks) {
  for (int n : {2, 4})
    EXPECT_EQ(exit_code_in_child([n] { return device_soak(n, groups_from_env(3000) / 2); }), 0)
        << n << " ranks; " << kCodes;
}

}  // namespace
