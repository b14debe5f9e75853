// Protocol tests of cuda_p2p (device buffers as peer memory, transport/cuda_p2p.c) through the
// host emulation of the device (device_emu.c, TUTTI_DEVICE_EMULATION=1). These are NOT GPU
// tests: no CUDA call runs. What they check is the protocol the GPU path shares with them:
// the agreement at setup (every rank reaches every rank's device, or it is off everywhere),
// the handle exchange before each call (exported in one process, opened in another), the
// progress and done words, the order of the reduction and the copies, abort, a rank that
// dies, and the fallback to staging. Emulated device memory is PROT_NONE to the host, so a
// host load or store of a device buffer by the library is a SIGSEGV; the emulation's counters
// say which path ran (handles opened, device reductions and copies, staging copies).
// Ranks are forked processes (the IPC path) or threads of one process (addresses as they are).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "device.h"
#include "emu_context.h"
#include "forked_ranks.h"
#include "nccl.h"

namespace {

const int emulation_on = setenv("TUTTI_DEVICE_EMULATION", "1", 1);
// These tests are about the proxy (and the paths it runs): the small-call path, which takes small
// all-reduces off it, is off here and tested in test_small_path.cc.
const int small_off = setenv("TUTTI_SMALL_BYTES", "0", 1);

struct DevBuf {  // emulated device memory, reached through its host view
  void *d = nullptr;
  explicit DevBuf(size_t b) : d(device_emu_alloc(b)) {}
  ~DevBuf() { device_emu_free(d); }
  int32_t *h() { return static_cast<int32_t *>(device_emu_view(d)); }
};

// Inputs j*7 + rank + 1 (exact in int32), as Gloo's tests do.
int32_t in(int rank, size_t j) {
  return (int32_t)(j * 7 + rank + 1);
}

int32_t sum(int n, size_t j) {
  int32_t t = 0;
  for (int q = 0; q < n; q++) t += in(q, j);
  return t;
}

// All-reduce (out of place, in place, max), reduce-scatter (out of place, in place), all-gather
// (out of place, in place), all-to-all (out of place, in place, mixed), broadcast, reduce, gather
// and scatter on device buffers, exact, in one rank of n; k crosses the reduction's pieces
// (TUTTI_P2P_PIECE_BYTES set small by the caller) unevenly.
int collectives(int rank, ncclComm_t comm, int n, size_t k) {
  void *st = device_emu_stream_create();
  DevBuf s(k * n * 4), r(k * n * 4);
  auto run = [&](ncclResult_t res) {
    return res == ncclSuccess && device_emu_stream_sync(st, 60000) == 0;
  };
  cudaStream_t cs = (cudaStream_t)st;
  CHILD_CHECK(run(ncclAllReduce(s.d, r.d, 0, ncclInt32, ncclSum, comm, cs)), 10, "count 0");
  for (size_t j = 0; j < k * n; j++) s.h()[j] = in(rank, j);
  CHILD_CHECK(run(ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, cs)), 10, "allreduce");
  for (size_t j = 0; j < k; j++) CHILD_CHECK(r.h()[j] == sum(n, j), 11, "allreduce at %zu", j);
  // ncclAvg: the division applied once, by the segment's owner (integer division truncates)
  CHILD_CHECK(run(ncclAllReduce(s.d, r.d, k, ncclInt32, ncclAvg, comm, cs)), 10, "avg");
  for (size_t j = 0; j < k; j++) CHILD_CHECK(r.h()[j] == sum(n, j) / n, 11, "avg at %zu", j);
  CHILD_CHECK(run(ncclAllReduce(s.d, s.d, k, ncclInt32, ncclMax, comm, cs)), 10, "in place");
  for (size_t j = 0; j < k; j++) CHILD_CHECK(s.h()[j] == in(n - 1, j), 11, "max at %zu", j);
  for (size_t j = 0; j < k * n; j++) s.h()[j] = in(rank, j);
  CHILD_CHECK(run(ncclReduceScatter(s.d, r.d, k, ncclInt32, ncclSum, comm, cs)), 10, "rs");
  for (size_t j = 0; j < k; j++)
    CHILD_CHECK(r.h()[j] == sum(n, rank * k + j), 11, "reducescatter at %zu", j);
  int32_t *own = s.h() + rank * k;  // in place: recvbuff = sendbuff + rank * k
  CHILD_CHECK(
      run(ncclReduceScatter(s.d, (char *)s.d + rank * k * 4, k, ncclInt32, ncclSum, comm, cs)), 10,
      "rs in place");
  for (size_t j = 0; j < k; j++)
    CHILD_CHECK(own[j] == sum(n, rank * k + j), 11, "reducescatter in place at %zu", j);
  for (size_t j = 0; j < k; j++) s.h()[j] = in(rank, j);
  CHILD_CHECK(run(ncclAllGather(s.d, r.d, k, ncclInt32, comm, cs)), 10, "allgather");
  for (int q = 0; q < n; q++)
    for (size_t j = 0; j < k; j++)
      CHILD_CHECK(r.h()[q * k + j] == in(q, j), 11, "allgather %d at %zu", q, j);
  memset(r.h(), 0, k * n * 4);
  for (size_t j = 0; j < k; j++) r.h()[rank * k + j] = in(rank, j);
  CHILD_CHECK(run(ncclAllGather((char *)r.d + rank * k * 4, r.d, k, ncclInt32, comm, cs)), 10,
              "allgather in place");
  for (int q = 0; q < n; q++)
    for (size_t j = 0; j < k; j++)
      CHILD_CHECK(r.h()[q * k + j] == in(q, j), 11, "allgather in place %d at %zu", q, j);
  // all-to-all out of place, in place (each pair's blocks exchanged), and with the even ranks in
  // place and the odd ones not (every rank then exchanges)
  for (int mode = 0; mode < 3; mode++) {
    const bool ip = mode == 1 || (mode == 2 && rank % 2 == 0);
    for (size_t j = 0; j < k * n; j++) s.h()[j] = in(rank, j);
    CHILD_CHECK(run(ncclAlltoAll(s.d, ip ? s.d : r.d, k, ncclInt32, comm, cs)), 10, "alltoall %d",
                mode);
    const int32_t *out = ip ? s.h() : r.h();
    for (int q = 0; q < n; q++)
      for (size_t j = 0; j < k; j++)
        CHILD_CHECK(out[q * k + j] == in(q, rank * k + j), 11, "alltoall %d: block %d at %zu", mode,
                    q, j);
  }
  // broadcast (out of place, then in place), reduce, gather, scatter to or from the last rank,
  // the buffers a non-root does not use NULL
  const int root = n - 1;
  const bool is_root = rank == root;
  for (size_t j = 0; j < k * n; j++) s.h()[j] = in(rank, j);
  CHILD_CHECK(run(ncclBroadcast(is_root ? s.d : nullptr, r.d, k, ncclInt32, root, comm, cs)), 10,
              "broadcast");
  for (size_t j = 0; j < k; j++) CHILD_CHECK(r.h()[j] == in(root, j), 11, "broadcast at %zu", j);
  CHILD_CHECK(run(ncclReduce(s.d, is_root ? r.d : nullptr, k, ncclInt32, ncclSum, root, comm, cs)),
              10, "reduce");
  for (size_t j = 0; is_root && j < k; j++)
    CHILD_CHECK(r.h()[j] == sum(n, j), 11, "reduce at %zu", j);
  CHILD_CHECK(run(ncclGather(s.d, is_root ? r.d : nullptr, k, ncclInt32, root, comm, cs)), 10,
              "gather");
  for (int q = 0; is_root && q < n; q++)
    for (size_t j = 0; j < k; j++)
      CHILD_CHECK(r.h()[q * k + j] == in(q, j), 11, "gather %d at %zu", q, j);
  CHILD_CHECK(run(ncclScatter(is_root ? s.d : nullptr, r.d, k, ncclInt32, root, comm, cs)), 10,
              "scatter");
  for (size_t j = 0; j < k; j++)
    CHILD_CHECK(r.h()[j] == in(root, rank * k + j), 11, "scatter at %zu", j);
  CHILD_CHECK(run(ncclBcast(s.d, k, ncclInt32, root, comm, cs)), 10, "broadcast in place");
  for (size_t j = 0; j < k; j++)
    CHILD_CHECK(s.h()[j] == in(root, j), 11, "broadcast in place at %zu", j);
  device_emu_stream_destroy(st);
  return 0;
}

// Forked ranks read each other's device buffers through exported handles: every result
// exact, and what ran was the peer path: handles opened, reductions and copies between device
// buffers, and not one staging copy. The copies of 4 KiB pieces are load/store kernels by
// default (TUTTI_P2P_LDST_BYTES, 1 MiB), copy-engine copies with TUTTI_P2P_LDST_BYTES=0.
TEST(CudaP2pProtocol, ForkedRanksReadEachOthersDeviceBuffers) {
  ASSERT_EQ(emulation_on, 0);
  ASSERT_EQ(small_off, 0);
  for (bool engine : {false, true}) {
    for (int n : {2, 3, 5}) {
      auto codes = forked(
          n,
          [engine](int rank) {
            on_device(rank);
            setenv("TUTTI_P2P_PIECE_BYTES", "4096", 1);
            if (engine) setenv("TUTTI_P2P_LDST_BYTES", "0", 1);
          },
          [n, engine](int rank, ncclComm_t comm) {
            device_emu_counts_t c0 = device_emu_counts();
            int rc = collectives(rank, comm, n, 3001);  // 12004 bytes: 3 pieces and a bit
            if (rc) return rc;
            device_emu_counts_t c = device_emu_counts();
            CHILD_CHECK(c.staging_copies == c0.staging_copies, 20, "%llu staging copies",
                        (unsigned long long)(c.staging_copies - c0.staging_copies));
            CHILD_CHECK(c.ipc_opens > c0.ipc_opens, 21, "no handle opened");
            CHILD_CHECK(c.dev_reduces > c0.dev_reduces, 22, "no device reduction");
            uint64_t ce = c.dev_copies - c0.dev_copies, ls = c.ldst_copies - c0.ldst_copies;
            CHILD_CHECK(engine ? ce > 0 && ls == 0 : ls > 0 && ce == 0, 23,
                        "%llu copy-engine and %llu load/store copies", (unsigned long long)ce,
                        (unsigned long long)ls);
            return 0;
          });
      for (int r = 0; r < n; r++)
        EXPECT_EQ(codes[r], 0) << n << " ranks, rank " << r << (engine ? ", copy engine" : "");
    }
  }
}

// ncclMemAlloc allocates device memory where the calling thread has a current device context,
// as NCCL's allocates on the current GPU, and host memory where it has none or TUTTI_MEM_ALLOC
// names a host backing; ncclMemFree frees either, device memory in the context it was taken in
// (here from a thread without one). Forked ranks with a context then run an all-reduce on
// ncclMemAlloc buffers through the peer path, exact, nothing staged.
TEST(CudaP2pProtocol, NcclMemAllocGivesDeviceMemoryWhereTheThreadHasAContext) {
  void *h = nullptr, *d = nullptr, *s = nullptr;
  ASSERT_EQ(ncclMemAlloc(&h, 4000), ncclSuccess);  // no context: host memory, as before
  EXPECT_EQ(device_mem_kind(h), MEM_KIND_HOST);
  EXPECT_EQ(device_emu_view(h), nullptr);
  memset(h, 7, 4000);
  device_emu_set_context(1);
  ASSERT_EQ(ncclMemAlloc(&d, 4000), ncclSuccess);
  EXPECT_EQ(device_mem_kind(d), MEM_KIND_DEVICE);
  ASSERT_NE(device_emu_view(d), nullptr);  // emulated device memory: the host cannot touch d
  setenv("TUTTI_MEM_ALLOC", "shared", 1);
  ASSERT_EQ(ncclMemAlloc(&s, 4000), ncclSuccess);
  unsetenv("TUTTI_MEM_ALLOC");
  EXPECT_EQ(device_mem_kind(s), MEM_KIND_HOST) << "TUTTI_MEM_ALLOC=shared asks for host memory";
  device_emu_set_context(0);
  EXPECT_EQ(ncclMemFree(d), ncclSuccess);
  EXPECT_EQ(device_emu_view(d), nullptr) << "the device memory was not freed";
  EXPECT_EQ(ncclMemFree(d), ncclInvalidArgument);
  EXPECT_EQ(ncclMemFree(s), ncclSuccess);
  EXPECT_EQ(ncclMemFree(h), ncclSuccess);

  const int n = 2;
  const size_t k = 3001;
  auto codes = forked(n, on_device, [](int rank, ncclComm_t comm) {
    void *sd = nullptr, *rd = nullptr;
    CHILD_CHECK(ncclMemAlloc(&sd, k * 4) == ncclSuccess, 60, "ncclMemAlloc send");
    CHILD_CHECK(ncclMemAlloc(&rd, k * 4) == ncclSuccess, 60, "ncclMemAlloc recv");
    auto *sh = static_cast<int32_t *>(device_emu_view(sd));
    auto *rh = static_cast<int32_t *>(device_emu_view(rd));
    CHILD_CHECK(sh && rh, 61, "ncclMemAlloc gave host memory to a thread with a context");
    for (size_t j = 0; j < k; j++) sh[j] = in(rank, j);
    void *st = device_emu_stream_create();
    device_emu_counts_t c0 = device_emu_counts();
    CHILD_CHECK(
        ncclAllReduce(sd, rd, k, ncclInt32, ncclSum, comm, (cudaStream_t)st) == ncclSuccess &&
            device_emu_stream_sync(st, 60000) == 0,
        62, "allreduce");
    for (size_t j = 0; j < k; j++) CHILD_CHECK(rh[j] == sum(n, j), 63, "allreduce at %zu", j);
    device_emu_counts_t c = device_emu_counts();
    CHILD_CHECK(c.ipc_opens > c0.ipc_opens, 64, "no handle opened");
    CHILD_CHECK(c.staging_copies == c0.staging_copies, 65, "staged");
    device_emu_stream_destroy(st);
    CHILD_CHECK(ncclMemFree(sd) == ncclSuccess && ncclMemFree(rd) == ncclSuccess, 66, "free");
    // The destroy that follows runs in a thread without a context: the peer's opened buffer is
    // closed in the context it was opened in (the emulation stops a process that does not).
    device_emu_set_context(0);
    return 0;
  });
  for (int r = 0; r < n; r++) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// One rank that cannot take part turns the peer path off on every rank (agreed at setup):
// TUTTI_P2P_DISABLE on one rank, or one rank on a device the others cannot reach. Every rank
// then stages (no handle opened, no device reduction) and the results are still exact.
TEST(CudaP2pProtocol, OneRankOutStagesOnEveryRank) {
  const char *why[] = {"TUTTI_P2P_DISABLE", "TUTTI_DEVICE_EMULATION_ID"};
  for (const char *var : why) {
    const int n = 3;
    auto codes = forked(
        n,
        [var](int rank) {
          on_device(rank);
          if (rank == 1) setenv(var, "1", 1);
        },
        [](int rank, ncclComm_t comm) {
          device_emu_counts_t c0 = device_emu_counts();
          int rc = collectives(rank, comm, n, 1003);
          if (rc) return rc;
          device_emu_counts_t c = device_emu_counts();
          CHILD_CHECK(c.ipc_opens == c0.ipc_opens, 30, "a handle was opened");
          CHILD_CHECK(c.dev_reduces == c0.dev_reduces, 31, "a device reduction ran");
          CHILD_CHECK(c.staging_copies > c0.staging_copies, 32, "nothing staged");
          return 0;
        });
    for (int r = 0; r < n; r++) EXPECT_EQ(codes[r], 0) << var << " on rank 1; rank " << r;
  }
}

// Ranks as threads of one process use each other's device addresses as they are (no handle
// opened), through device reductions and copies only. One thread creates them, and their init
// runs in threads of their own (ncclCommInitAll, and ncclCommInitRank in a group). The
// emulation, like CUDA, knows a thread's device only through its current context: those threads
// must take the caller's (or their device's), else no rank has a device and every call is
// staged. Without a context in the caller the ranks are host ranks: staged, still exact.
TEST(CudaP2pProtocol, RanksMadeInThreadsTakeTheCallersDevice) {
  const int n = 3;
  const size_t k = 777;
  auto run = [&](const char *how, bool context) {
    device_emu_set_context(context);  // where the ranks are made
    std::vector<ncclComm_t> comms(n);
    if (std::string(how) == "InitAll") {
      std::vector<int> devs(n, 0);  // every rank on the one emulated device
      ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs.data()), ncclSuccess);
    } else {
      ncclUniqueId id;
      ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (int i = 0; i < n; i++) ASSERT_EQ(ncclCommInitRank(&comms[i], n, id, i), ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    }
    // The calls: ranks made with a context run on it whichever thread calls (here one without:
    // the proxies bind the ranks' context, in which the 3 ranks' device scratch is taken); host
    // ranks stage device buffers through a proxy on the caller's context.
    device_emu_set_context(!context);
    std::vector<void *> st(n);
    std::vector<DevBuf *> s, r;
    for (int i = 0; i < n; i++) {
      int dev = -2;
      ASSERT_EQ(ncclCommCuDevice(comms[i], &dev), ncclSuccess);
      EXPECT_EQ(dev, context || std::string(how) == "InitAll" ? 0 : -1) << how << " rank " << i;
      st[i] = device_emu_stream_create();
      s.push_back(new DevBuf(k * 4)), r.push_back(new DevBuf(k * 4));
      for (size_t j = 0; j < k; j++) s[i]->h()[j] = in(i, j);
    }
    device_emu_counts_t c0 = device_emu_counts();
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int i = 0; i < n; i++)
      ASSERT_EQ(
          ncclAllReduce(s[i]->d, r[i]->d, k, ncclInt32, ncclSum, comms[i], (cudaStream_t)st[i]),
          ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    for (int i = 0; i < n; i++) ASSERT_EQ(device_emu_stream_sync(st[i], 60000), 0);
    for (int i = 0; i < n; i++)
      for (size_t j = 0; j < k; j++) ASSERT_EQ(r[i]->h()[j], sum(n, j)) << how << " rank " << i;
    device_emu_counts_t c = device_emu_counts();
    EXPECT_EQ(c.ipc_opens, c0.ipc_opens) << how << ": a handle opened in one process";
    if (context) {
      EXPECT_EQ(c.staging_copies, c0.staging_copies) << how << ": staged, no rank had a device";
      EXPECT_GE(c.dev_reduces - c0.dev_reduces, (uint64_t)n) << how;
    } else {
      EXPECT_GT(c.staging_copies, c0.staging_copies) << how << ": the context check is not on";
      EXPECT_EQ(c.dev_reduces, c0.dev_reduces) << how;
    }
    for (int i = 0; i < n; i++) {
      ncclCommDestroy(comms[i]);
      device_emu_stream_destroy(st[i]);
      delete s[i], delete r[i];
    }
  };
  for (const char *how : {"InitAll", "group"})
    for (bool context : {true, false}) run(how, context);
  device_emu_set_context(0);
  // A device the process does not have: the rank cannot be made, and the call says which.
  device_emu_set_context(1);
  std::vector<ncclComm_t> comms(2);
  std::vector<int> devs = {0, 3};
  EXPECT_EQ(ncclCommInitAll(comms.data(), 2, devs.data()), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("rank 1 is to be on device 3"),
            std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(comms[0], nullptr);
  device_emu_set_context(0);
}

// A rank that dies while its peer waits in a call on device buffers: the survivor's operation
// fails naming the dead rank (ncclCommGetAsyncError), its stream is released, nothing hangs.
TEST(CudaP2pProtocol, RankDyingDuringACallIsReported) {
  const int n = 2;
  auto codes = forked(
      n,
      [](int rank) {
        on_device(rank);
        setenv("TUTTI_TIMEOUT", "30", 1);
      },
      [](int rank, ncclComm_t comm) {
        const size_t k = 4096;
        DevBuf s(k * 4), r(k * 4);
        if (rank == 1) {  // joins the first call, then dies before the second
          void *st = device_emu_stream_create();
          ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, (cudaStream_t)st);
          device_emu_stream_sync(st, 60000);
          kill(getpid(), SIGKILL);
        }
        void *st = device_emu_stream_create();
        cudaStream_t cs = (cudaStream_t)st;
        CHILD_CHECK(ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, cs) == ncclSuccess, 40,
                    "first call");
        CHILD_CHECK(device_emu_stream_sync(st, 60000) == 0, 41, "first call stuck");
        auto t0 = std::chrono::steady_clock::now();
        ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, cs);  // rank 1 is gone
        CHILD_CHECK(device_emu_stream_sync(st, 60000) == 0, 42, "stream not released");
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm, &async);
        CHILD_CHECK(async != ncclSuccess, 43, "no error after the peer died");
        std::string msg = ncclGetLastError(comm);
        CHILD_CHECK(msg.find("rank 1") != std::string::npos, 44, "error names no rank: %s",
                    msg.c_str());
        CHILD_CHECK(secs < 30, 45, "took %.1f s", secs);
        ncclCommAbort(comm);
        device_emu_stream_destroy(st);
        _exit(0);
      });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

// ncclCommAbort while a call on device buffers waits for a peer that never arrives (its stream
// is held by earlier work): the call fails, the stream is released, the receive buffer keeps
// what it had (the peer never published anything for it to copy).
TEST(CudaP2pProtocol, AbortWhileAPeerNeverArrives) {
  const int n = 2;
  auto codes = forked(n, on_device, [](int rank, ncclComm_t comm) {
    const size_t k = 4096;
    DevBuf s(k * 4), r(k * 4);
    if (rank == 1) {  // never calls; waits to be told to go
      sleep(3);
      ncclCommAbort(comm);
      _exit(0);
    }
    void *st = device_emu_stream_create();
    ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, (cudaStream_t)st);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto t0 = std::chrono::steady_clock::now();
    CHILD_CHECK(ncclCommAbort(comm) == ncclSuccess, 50, "abort");
    CHILD_CHECK(device_emu_stream_sync(st, 10000) == 0, 51, "stream not released");
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHILD_CHECK(secs < 5, 52, "abort took %.1f s", secs);
    for (size_t j = 0; j < k; j++) CHILD_CHECK(r.h()[j] == 0, 53, "written at %zu", j);
    device_emu_stream_destroy(st);
    _exit(0);
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
