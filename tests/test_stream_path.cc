// Protocol tests of the stream path (proxy.c) through the host emulation of the device
// (device_emu.c, TUTTI_DEVICE_EMULATION=1). These are NOT GPU tests: no CUDA call runs. They
// check the protocol the GPU path shares with them: a call with device buffers or a stream
// returns at once, starts after the work queued before it on its stream, later work waits for
// it; groups launch together; staging copies every device byte (the emulated device memory is
// PROT_NONE to the host, so a stray host access by the engine is a SIGSEGV); abort and async
// errors while operations are in flight; PreMulSum scalars in device memory read at run time.
// Ranks are threads (ncclCommInitAll, one thread driving all ranks in a group, as NCCL allows)
// and, in one test, forked processes over shm.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "device.h"
#include "emu_context.h"
#include "forked_ranks.h"
#include "nccl.h"

namespace {

// Before anything reads the setting (it is read once per process).
const int emulation_on = setenv("TUTTI_DEVICE_EMULATION", "1", 1);
// These tests are about the proxy (and the paths it runs): the small-call path, which takes small
// all-reduces off it, is off here and tested in test_small_path.cc.
const int small_off = setenv("TUTTI_SMALL_BYTES", "0", 1);

struct DevBuf {  // emulated device memory, reached through its host view
  void *d = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t b) : d(device_emu_alloc(b)), bytes(b) {}
  ~DevBuf() { device_emu_free(d); }
  template <typename T>
  T *host() {
    return static_cast<T *>(device_emu_view(d));
  }
};

// A stream "kernel" that blocks until the test opens the gate. A test that stops early (a
// failed assertion) with the gate closed still ends: the gate opens as it goes out of scope and
// waits (at most a minute) until every stream it held got past it, so that the communicators'
// destruction behind it does not wait for a gate nobody opens.
struct Gate {
  std::atomic<int> open{0}, held{0}, passed{0};
  void hold(void *stream) {
    held++;
    device_emu_stream_call(stream, wait, this);
  }
  static void wait(void *arg) {
    auto *g = static_cast<Gate *>(arg);
    while (!g->open.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    g->passed++;
  }
  ~Gate() {
    open = 1;
    for (int i = 0; i < 60000 && passed.load() < held.load(); i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

struct Ranks {
  int n;
  std::vector<ncclComm_t> comms;
  std::vector<void *> streams;
  explicit Ranks(int nranks) : n(nranks), comms(nranks), streams(nranks) {
    EXPECT_EQ(emulation_on, 0);
    EXPECT_EQ(small_off, 0);
    EXPECT_EQ(init_all_on_device(comms.data(), n), ncclSuccess);
    for (auto &s : streams) s = device_emu_stream_create();
  }
  ~Ranks() {
    for (auto c : comms) ncclCommDestroy(c);
    for (auto s : streams) device_emu_stream_destroy(s);
  }
  void sync() {
    for (auto s : streams) ASSERT_EQ(device_emu_stream_sync(s, 60000), 0) << "stream stuck";
  }
  cudaStream_t st(int r) { return static_cast<cudaStream_t>(streams[r]); }
};

// Inputs j*7 + rank + 1 (exact in int32), as Gloo's tests do.
int32_t in(int rank, size_t j) {
  return (int32_t)(j * 7 + rank + 1);
}

void fill(DevBuf &b, int rank, size_t count) {
  for (size_t j = 0; j < count; j++) b.host<int32_t>()[j] = in(rank, j);
}

// Every collective with device buffers on 3 ranks, exact values, out of place and in place.
TEST(StreamPathProtocol, EveryCollectiveOnDeviceBuffersIsExact) {
  const int n = 3;
  const size_t k = 1003;  // not a multiple of anything
  Ranks R(n);
  std::vector<DevBuf *> s, r;
  for (int i = 0; i < n; i++)
    s.push_back(new DevBuf(k * n * 4)), r.push_back(new DevBuf(k * n * 4));
  auto sum = [&](size_t j) {
    int32_t t = 0;
    for (int q = 0; q < n; q++) t += in(q, j);
    return t;
  };
  auto run = [&](const char *what, auto &&call) {
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int i = 0; i < n; i++) ASSERT_EQ(call(i), ncclSuccess) << what << " rank " << i;
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << what;
    R.sync();
  };
  for (int i = 0; i < n; i++) fill(*s[i], i, k * n);
  run("allreduce", [&](int i) {
    return ncclAllReduce(s[i]->d, r[i]->d, k, ncclInt32, ncclSum, R.comms[i], R.st(i));
  });
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) ASSERT_EQ(r[i]->host<int32_t>()[j], sum(j)) << "allreduce " << j;
  run("allreduce in place", [&](int i) {
    return ncclAllReduce(s[i]->d, s[i]->d, k, ncclInt32, ncclSum, R.comms[i], R.st(i));
  });
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) ASSERT_EQ(s[i]->host<int32_t>()[j], sum(j)) << "in place";
  for (int i = 0; i < n; i++) fill(*s[i], i, k * n), memset(r[i]->host<char>(), 0, k * n * 4);
  run("reduce", [&](int i) {
    return ncclReduce(s[i]->d, r[i]->d, k, ncclInt32, ncclMax, 1, R.comms[i], R.st(i));
  });
  for (size_t j = 0; j < k; j++) ASSERT_EQ(r[1]->host<int32_t>()[j], in(n - 1, j)) << "reduce max";
  for (size_t j = 0; j < k; j++) ASSERT_EQ(r[0]->host<int32_t>()[j], 0) << "non-root written";
  run("broadcast",
      [&](int i) { return ncclBroadcast(s[i]->d, r[i]->d, k, ncclInt32, 2, R.comms[i], R.st(i)); });
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) ASSERT_EQ(r[i]->host<int32_t>()[j], in(2, j)) << "broadcast";
  run("allgather",
      [&](int i) { return ncclAllGather(s[i]->d, r[i]->d, k, ncclInt32, R.comms[i], R.st(i)); });
  for (int i = 0; i < n; i++)
    for (int q = 0; q < n; q++)
      for (size_t j = 0; j < k; j++)
        ASSERT_EQ(r[i]->host<int32_t>()[q * k + j], in(q, j)) << "allgather";
  run("allgather in place", [&](int i) {  // sendbuff = recvbuff + rank * k
    memcpy(r[i]->host<int32_t>() + i * k, s[i]->host<int32_t>(), k * 4);
    return ncclAllGather((char *)r[i]->d + i * k * 4, r[i]->d, k, ncclInt32, R.comms[i], R.st(i));
  });
  for (int i = 0; i < n; i++)
    for (int q = 0; q < n; q++)
      for (size_t j = 0; j < k; j++)
        ASSERT_EQ(r[i]->host<int32_t>()[q * k + j], in(q, j)) << "allgather in place";
  run("reducescatter", [&](int i) {
    return ncclReduceScatter(s[i]->d, r[i]->d, k, ncclInt32, ncclSum, R.comms[i], R.st(i));
  });
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++)
      ASSERT_EQ(r[i]->host<int32_t>()[j], sum(i * k + j)) << "reducescatter";
  run("alltoall",
      [&](int i) { return ncclAlltoAll(s[i]->d, r[i]->d, k, ncclInt32, R.comms[i], R.st(i)); });
  for (int i = 0; i < n; i++)
    for (int q = 0; q < n; q++)
      for (size_t j = 0; j < k; j++)
        ASSERT_EQ(r[i]->host<int32_t>()[q * k + j], in(q, i * k + j)) << "alltoall";
  run("send/recv ring", [&](int i) {
    ncclResult_t a = ncclSend(s[i]->d, k, ncclInt32, (i + 1) % n, R.comms[i], R.st(i));
    ncclResult_t b = ncclRecv(r[i]->d, k, ncclInt32, (i + n - 1) % n, R.comms[i], R.st(i));
    return a != ncclSuccess ? a : b;
  });
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++)
      ASSERT_EQ(r[i]->host<int32_t>()[j], in((i + n - 1) % n, j)) << "send/recv";
  for (auto *b : s) delete b;
  for (auto *b : r) delete b;
}

// The call returns while the work before it on the stream still runs; the operation reads
// what that work wrote; the work queued after it sees its result.
// A single-rank communicator's calls on device buffers are copies enqueued on the stream (no
// proxy, no staging): each collective's recvbuff equals sendbuff, written only when the stream
// gets there; in place writes nothing; send/recv to self (the proxy's) still right beside them.
TEST(StreamPathProtocol, SingleRankCallsAreCopiesOnTheStream) {
  const size_t k = 1003;
  Ranks R(1);
  ncclComm_t c = R.comms[0];
  cudaStream_t st = R.st(0);
  DevBuf s(k * 4), inplace(k * 4), sr(k * 4);
  std::vector<DevBuf *> r;
  for (int i = 0; i < 9; i++) r.push_back(new DevBuf(k * 4));
  fill(s, 0, k), fill(inplace, 0, k);
  device_emu_counts_t before = device_emu_counts();
  Gate gate;
  gate.hold(R.streams[0]);
  ASSERT_EQ(ncclAllReduce(s.d, r[0]->d, k, ncclInt32, ncclSum, c, st), ncclSuccess);
  ASSERT_EQ(ncclBroadcast(s.d, r[1]->d, k, ncclInt32, 0, c, st), ncclSuccess);
  ASSERT_EQ(ncclReduce(s.d, r[2]->d, k, ncclInt32, ncclMax, 0, c, st), ncclSuccess);
  ASSERT_EQ(ncclAllGather(s.d, r[3]->d, k, ncclInt32, c, st), ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(s.d, r[4]->d, k, ncclInt32, ncclAvg, c, st), ncclSuccess);
  ASSERT_EQ(ncclAlltoAll(s.d, r[5]->d, k, ncclInt32, c, st), ncclSuccess);
  ASSERT_EQ(ncclGather(s.d, r[6]->d, k, ncclInt32, 0, c, st), ncclSuccess);
  ASSERT_EQ(ncclScatter(s.d, r[7]->d, k, ncclInt32, 0, c, st), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(inplace.d, inplace.d, k, ncclInt32, ncclProd, c, st), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(s.d, k, ncclInt32, 0, c, st), ncclSuccess);
  ASSERT_EQ(ncclRecv(sr.d, k, ncclInt32, 0, c, st), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(s.d, r[8]->d, k, ncclInt32, ncclMin, c, st), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);  // a copy behind two calls for the proxy
  for (int i = 0; i < 9; i++)
    ASSERT_EQ(r[i]->host<int32_t>()[0], 0) << "call " << i << " ran before its stream got there";
  gate.open = 1;
  R.sync();
  for (int i = 0; i < 9; i++)
    for (size_t j = 0; j < k; j++) ASSERT_EQ(r[i]->host<int32_t>()[j], in(0, j)) << "call " << i;
  for (size_t j = 0; j < k; j++) {
    ASSERT_EQ(inplace.host<int32_t>()[j], in(0, j)) << "in place";
    ASSERT_EQ(sr.host<int32_t>()[j], in(0, j)) << "send/recv to self";
  }
  device_emu_counts_t after = device_emu_counts();
  EXPECT_EQ(after.stream_memcpys - before.stream_memcpys, 9u);  // none for in place
  for (DevBuf *b : r) delete b;
}

TEST(StreamPathProtocol, OrderedOnTheStreamAndReturnsAtOnce) {
  const int n = 2;
  const size_t k = 4096;
  Ranks R(n);
  DevBuf s0(k * 4), s1(k * 4), r0(k * 4), r1(k * 4);
  DevBuf *s[] = {&s0, &s1}, *r[] = {&r0, &r1};
  Gate gate;
  struct Writer {  // the "kernel" before the collective: writes the inputs
    DevBuf *b;
    int rank;
    size_t k;
  } w[] = {{&s0, 0, k}, {&s1, 1, k}};
  struct Reader {  // the "kernel" after it: copies the result as it sees it
    DevBuf *b;
    std::vector<int32_t> seen;
  } rd[] = {{&r0, {}}, {&r1, {}}};
  for (int i = 0; i < n; i++) {
    gate.hold(R.streams[i]);
    device_emu_stream_call(
        R.streams[i],
        [](void *a) {
          auto *x = static_cast<Writer *>(a);
          fill(*x->b, x->rank, x->k);
        },
        &w[i]);
  }
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(ncclAllReduce(s[i]->d, r[i]->d, k, ncclInt32, ncclSum, R.comms[i], R.st(i)),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < n; i++)
    device_emu_stream_call(
        R.streams[i],
        [](void *a) {
          auto *x = static_cast<Reader *>(a);
          x->seen.assign(x->b->host<int32_t>(), x->b->host<int32_t>() + 4096);
        },
        &rd[i]);
  // The gate is closed: the operation cannot have started, and nothing is in recvbuff.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) ASSERT_EQ(r[i]->host<int32_t>()[j], 0) << "ran before its turn";
  ncclResult_t err;
  ASSERT_EQ(ncclCommGetAsyncError(R.comms[0], &err), ncclSuccess);
  EXPECT_EQ(err, ncclSuccess);  // in flight, no error
  gate.open = 1;
  R.sync();
  EXPECT_LT(ms, 1000.0) << "the call waited for its stream";
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(rd[i].seen.size(), k);
    for (size_t j = 0; j < k; j++)
      ASSERT_EQ(rd[i].seen[j], in(0, j) + in(1, j)) << "rank " << i << " element " << j;
  }
}

// One group, sends on one stream and receives on another: the group starts when both streams
// got there, and both go on after it.
TEST(StreamPathProtocol, GroupOverTwoStreamsLaunchesTogether) {
  const int n = 3;
  const size_t k = 777;
  Ranks R(n);
  std::vector<void *> recv_streams(n);
  for (auto &x : recv_streams) x = device_emu_stream_create();
  std::vector<DevBuf *> s, r;
  for (int i = 0; i < n; i++) s.push_back(new DevBuf(k * 4)), r.push_back(new DevBuf(k * 4));
  for (int i = 0; i < n; i++) fill(*s[i], i, k);
  Gate gate;
  for (int i = 0; i < n; i++) gate.hold(recv_streams[i]);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(ncclSend(s[i]->d, k, ncclInt32, (i + 1) % n, R.comms[i], R.st(i)), ncclSuccess);
    ASSERT_EQ(ncclRecv(r[i]->d, k, ncclInt32, (i + n - 1) % n, R.comms[i],
                       static_cast<cudaStream_t>(recv_streams[i])),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  // The send streams are free, but the group waits for the receive streams' gate.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(device_emu_stream_sync(R.streams[0], 100), -1) << "send stream went on alone";
  for (size_t j = 0; j < k; j++) ASSERT_EQ(r[0]->host<int32_t>()[j], 0);
  gate.open = 1;
  R.sync();
  for (auto x : recv_streams) ASSERT_EQ(device_emu_stream_sync(x, 60000), 0);
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) ASSERT_EQ(r[i]->host<int32_t>()[j], in((i + n - 1) % n, j));
  for (auto x : recv_streams) device_emu_stream_destroy(x);
  for (auto *b : s) delete b;
  for (auto *b : r) delete b;
}

// Two ranks (one process) whose all-reduce of k int32 waits on each stream behind a closed
// gate; the test ends the communicators itself (abort, destroy), the streams go with this.
struct GatedPair {
  static const int n = 2;
  const size_t k;
  std::vector<ncclComm_t> comms = std::vector<ncclComm_t>(n);
  std::vector<void *> streams = std::vector<void *>(n);
  DevBuf s0, s1, r0, r1;
  DevBuf *s[2] = {&s0, &s1}, *r[2] = {&r0, &r1};
  Gate gate;
  explicit GatedPair(size_t count)
      : k(count), s0(count * 4), s1(count * 4), r0(count * 4), r1(count * 4) {}
  ~GatedPair() {
    gate.open = 1;  // a test that stopped early: the streams' threads end behind it
    for (auto x : streams)
      if (x) device_emu_stream_destroy(x);
  }
  void launch() {
    ASSERT_EQ(init_all_on_device(comms.data(), n), ncclSuccess);
    for (auto &x : streams) x = device_emu_stream_create();
    for (int i = 0; i < n; i++) fill(*s[i], i, k), gate.hold(streams[i]);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int i = 0; i < n; i++)
      ASSERT_EQ(ncclAllReduce(s[i]->d, r[i]->d, k, ncclInt32, ncclSum, comms[i],
                              static_cast<cudaStream_t>(streams[i])),
                ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  }
};

// ncclCommAbort while operations wait on their streams: it returns promptly, the operations
// fail, nothing is written to the receive buffers, and the streams are released.
TEST(StreamPathProtocol, AbortWhileInFlightReleasesTheStreams) {
  GatedPair g(1000);
  ASSERT_NO_FATAL_FAILURE(g.launch());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < g.n; i++) ASSERT_EQ(ncclCommAbort(g.comms[i]), ncclSuccess);
  double s_abort = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s_abort, 5.0);
  g.gate.open = 1;
  for (auto x : g.streams) ASSERT_EQ(device_emu_stream_sync(x, 10000), 0) << "stream not released";
  for (int i = 0; i < g.n; i++)
    for (size_t j = 0; j < g.k; j++) ASSERT_EQ(g.r[i]->host<int32_t>()[j], 0) << "written on error";
}

// One rank aborts while the other's operation runs: the survivor's error shows in
// ncclCommGetAsyncError (within the communicator timeout) and its stream is released.
TEST(StreamPathProtocol, PeerAbortBecomesAnAsyncError) {
  const int n = 2;
  const size_t k = 1000;
  setenv("TUTTI_TIMEOUT", "20", 1);
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(init_all_on_device(comms.data(), n), ncclSuccess);
  unsetenv("TUTTI_TIMEOUT");
  void *st = device_emu_stream_create();
  DevBuf s1(k * 4), r1(k * 4);
  fill(s1, 1, k);
  ASSERT_EQ(ncclAllReduce(s1.d, r1.d, k, ncclInt32, ncclSum, comms[1], (cudaStream_t)st),
            ncclSuccess);  // rank 0 never joins: it aborts
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ncclResult_t err = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(comms[1], &err), ncclSuccess);
  EXPECT_EQ(err, ncclSuccess) << "in flight";
  ASSERT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  auto t0 = std::chrono::steady_clock::now();
  while (err == ncclSuccess && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    ASSERT_EQ(ncclCommGetAsyncError(comms[1], &err), ncclSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_NE(err, ncclSuccess) << "the survivor never saw its peer go";
  EXPECT_EQ(device_emu_stream_sync(st, 10000), 0) << "stream not released";
  for (size_t j = 0; j < k; j++) ASSERT_EQ(r1.host<int32_t>()[j], 0) << "written on error";
  EXPECT_EQ(ncclCommDestroy(comms[1]), ncclSuccess);
  device_emu_stream_destroy(st);
}

// A synchronous call (host buffers, NULL stream) does not overtake the stream operations of
// its communicator; a stream with host buffers takes the stream path too.
TEST(StreamPathProtocol, SynchronousCallWaitsForQueuedStreamWork) {
  const int n = 2;
  const size_t k = 512;
  Ranks R(n);
  DevBuf s0(k * 4), s1(k * 4), r0(k * 4), r1(k * 4);
  DevBuf *s[] = {&s0, &s1}, *r[] = {&r0, &r1};
  Gate gate;
  for (int i = 0; i < n; i++) fill(*s[i], i, k), gate.hold(R.streams[i]);
  std::vector<std::vector<int32_t>> hs(n, std::vector<int32_t>(k)), hr(n, std::vector<int32_t>(k));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++) {
    for (size_t j = 0; j < k; j++) hs[i][j] = 3 * (int32_t)j - i;
    ASSERT_EQ(ncclAllReduce(s[i]->d, r[i]->d, k, ncclInt32, ncclSum, R.comms[i], R.st(i)),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    gate.open = 1;
  });
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(ncclAllReduce(hs[i].data(), hr[i].data(), k, ncclInt32, ncclSum, R.comms[i], nullptr),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);  // runs after the stream operations
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) {
      ASSERT_EQ(r[i]->host<int32_t>()[j], in(0, j) + in(1, j)) << "stream op not done first";
      ASSERT_EQ(hr[i][j], 6 * (int32_t)j - 1);
    }
  opener.join();
  // Host buffers on a stream: ordered on it, like device buffers.
  Gate gate2;
  for (int i = 0; i < n; i++) gate2.hold(R.streams[i]);
  for (auto &v : hr) std::fill(v.begin(), v.end(), 0);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(ncclAllReduce(hs[i].data(), hr[i].data(), k, ncclInt32, ncclSum, R.comms[i], R.st(i)),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(hr[0][1], 0) << "host buffers on a stream ran before the stream got there";
  gate2.open = 1;
  R.sync();
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) ASSERT_EQ(hr[i][j], 6 * (int32_t)j - 1);
}

// A PreMulSum scalar in device memory is read when the operation runs (NCCL reads it in the
// kernel): a value written by the work queued before the call counts. NULL stream here.
TEST(StreamPathProtocol, DeviceScalarReadWhenTheOperationRuns) {
  const int n = 2;
  const size_t k = 300;
  Ranks R(n);
  DevBuf s0(k * 4), s1(k * 4), r0(k * 4), r1(k * 4), sc0(4), sc1(4);
  DevBuf *s[] = {&s0, &s1}, *r[] = {&r0, &r1}, *sc[] = {&sc0, &sc1};
  std::vector<ncclRedOp_t> ops(n);
  for (int i = 0; i < n; i++) {
    fill(*s[i], i, k);
    sc[i]->host<int32_t>()[0] = 1;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&ops[i], sc[i]->d, ncclInt32, ncclScalarDevice, R.comms[i]),
              ncclSuccess);
  }
  Gate gate;
  gate.hold(nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(ncclAllReduce(s[i]->d, r[i]->d, k, ncclInt32, ops[i], R.comms[i], nullptr),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < n; i++) sc[i]->host<int32_t>()[0] = 5;  // before the stream gets there
  gate.open = 1;
  ASSERT_EQ(device_emu_stream_sync(nullptr, 60000), 0);
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++) ASSERT_EQ(r[i]->host<int32_t>()[j], 5 * (in(0, j) + in(1, j)));
  for (int i = 0; i < n; i++) ncclRedOpDestroy(ops[i], R.comms[i]);
}

// A stream being captured into a CUDA graph is refused by name (the hand-off to the proxy
// happens at call time); the communicator stays usable. So are more than 4 streams in one
// group on one communicator.
TEST(StreamPathProtocol, CaptureAndTooManyStreamsAreRefused) {
  Ranks R(1);
  DevBuf b(4096);
  fill(b, 0, 1024);
  device_emu_stream_set_capturing(R.streams[0], 1);
  EXPECT_EQ(ncclAllReduce(b.d, b.d, 1024, ncclInt32, ncclSum, R.comms[0], R.st(0)),
            ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(R.comms[0])).find("graph capture"), std::string::npos)
      << ncclGetLastError(R.comms[0]);
  device_emu_stream_set_capturing(R.streams[0], 0);
  ASSERT_EQ(ncclAllReduce(b.d, b.d, 1024, ncclInt32, ncclSum, R.comms[0], R.st(0)), ncclSuccess);
  R.sync();
  for (size_t j = 0; j < 1024; j++) ASSERT_EQ(b.host<int32_t>()[j], in(0, j));
  // A group of one communicator on 5 streams (2 ranks: a single rank's calls skip the proxy).
  Ranks R2(2);
  DevBuf b2(4096);
  std::vector<void *> extra(5);
  for (auto &x : extra) x = device_emu_stream_create();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++)
    for (auto x : extra)
      ASSERT_EQ(ncclAllReduce((i ? b2 : b).d, (i ? b2 : b).d, 8, ncclInt32, ncclSum, R2.comms[i],
                              (cudaStream_t)x),
                ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(R2.comms[0])).find("more than 4 streams"),
            std::string::npos)
      << ncclGetLastError(R2.comms[0]);
  for (auto x : extra) device_emu_stream_destroy(x);
  for (int i = 0; i < 2; i++) {
    ncclResult_t err;
    ASSERT_EQ(ncclCommGetAsyncError(R2.comms[i], &err), ncclSuccess);
    EXPECT_EQ(err, ncclSuccess);
  }
}

// ncclCommDestroy with an operation still waiting for its stream runs it first.
TEST(StreamPathProtocol, DestroyRunsQueuedOperationsFirst) {
  GatedPair g(2000);
  ASSERT_NO_FATAL_FAILURE(g.launch());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    g.gate.open = 1;
  });
  std::vector<std::thread> destroyers;  // both ranks at once: each waits for the other's item
  std::vector<ncclResult_t> res(g.n, ncclInternalError);
  for (int i = 0; i < g.n; i++)
    destroyers.emplace_back([&, i] { res[i] = ncclCommDestroy(g.comms[i]); });
  for (auto &t : destroyers) t.join();
  opener.join();
  for (int i = 0; i < g.n; i++) EXPECT_EQ(res[i], ncclSuccess);
  for (auto x : g.streams) ASSERT_EQ(device_emu_stream_sync(x, 10000), 0);
  for (int i = 0; i < g.n; i++)
    for (size_t j = 0; j < g.k; j++) ASSERT_EQ(g.r[i]->host<int32_t>()[j], in(0, j) + in(1, j));
}

// Ranks as processes over shm: each process has its own emulated device and proxy.
TEST(StreamPathProtocol, ForkedRanksOverShm) {
  const int n = 2;
  const size_t k = 100003;
  auto codes = forked(n, on_device, [&](int rank, ncclComm_t comm) {
    void *st = device_emu_stream_create();
    DevBuf s(k * 4), r(k * n * 4);
    fill(s, rank, k);
    int bad = ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, (cudaStream_t)st) != 0;
    bad |= device_emu_stream_sync(st, 60000) != 0;
    for (size_t j = 0; j < k && !bad; j++) bad |= r.host<int32_t>()[j] != in(0, j) + in(1, j);
    bad |= ncclAllGather(s.d, r.d, k, ncclInt32, comm, (cudaStream_t)st) != 0;
    bad |= device_emu_stream_sync(st, 60000) != 0;
    for (int q = 0; q < n; q++)
      for (size_t j = 0; j < k && !bad; j++) bad |= r.host<int32_t>()[q * k + j] != in(q, j);
    device_emu_stream_destroy(st);
    return bad ? 1 : 0;
  });
  for (int code : codes) EXPECT_EQ(code, 0) << "1: wrong values, 90: init failed, 91: destroy";
}

}  // namespace
