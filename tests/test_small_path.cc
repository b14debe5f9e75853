// Protocol tests of the small-call path (src/small.c: small all-reduces on device buffers run
// on the caller's stream, one-shot through shared host memory) through the host emulation of
// the device (device_emu.c, TUTTI_DEVICE_EMULATION=1). These are NOT GPU tests: no CUDA call
// runs. They check the protocol the GPU path shares with them: the agreement at setup, the
// two slots per rank reused call after call while ranks run ahead of each other, the arrival
// words, the rank-order fold, the two phases of a group (ranks as threads sharing a stream),
// the limits (size, TUTTI_SMALL_BYTES, TUTTI_ALGO), abort, and a peer that dies. The
// emulation's counters say what ran: copies and reductions on the stream (this path), and no
// staging copy, device-to-device reduction or handle opened (the proxy's paths).
#include <gtest/gtest.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

struct DevBuf {  // emulated device memory, reached through its host view
  void *d = nullptr;
  explicit DevBuf(size_t b) : d(device_emu_alloc(b)) {}
  ~DevBuf() { device_emu_free(d); }
  template <typename T>
  T *h() {
    return static_cast<T *>(device_emu_view(d));
  }
};

// Inputs of call `it`: j*7 + rank + 1 + it (exact in int32), as Gloo's tests do.
int32_t in(int rank, size_t j, int it) {
  return (int32_t)(j * 7 + rank + 1 + it);
}

int32_t sum(int n, size_t j, int it) {
  int32_t t = 0;
  for (int q = 0; q < n; q++) t += in(q, j, it);
  return t;
}

// The application's "kernels" on the stream: fill the send buffer for call `it`, and check
// the receive buffer after it (counting wrong elements), so that many calls are queued with
// no host synchronisation between them and fast ranks run ahead of slow ones.
struct Fill {
  DevBuf *buf;
  size_t k;
  int rank, it;
};
struct Check {
  DevBuf *buf;
  size_t k;
  int n, it;
  std::atomic<long> *wrong;
};

void fill_fn(void *arg) {
  Fill *f = static_cast<Fill *>(arg);
  for (size_t j = 0; j < f->k; j++) f->buf->h<int32_t>()[j] = in(f->rank, j, f->it);
  delete f;
}

void check_fn(void *arg) {
  Check *c = static_cast<Check *>(arg);
  for (size_t j = 0; j < c->k; j++)
    if (c->buf->h<int32_t>()[j] != sum(c->n, j, c->it)) c->wrong->fetch_add(1);
  delete c;
}

// `calls` all-reduces of k int32 queued back to back on one stream (alternately out of place
// and in place), each checked on the stream; then max, avg and a float sum checked once: bit
// for bit when the call takes the small path (rank_order), else within the bound below.
int run_calls(int rank, ncclComm_t comm, int n, size_t k, int calls, bool rank_order = true) {
  void *st = device_emu_stream_create();
  cudaStream_t cs = (cudaStream_t)st;
  DevBuf s(k * 4), r(k * 4);
  std::atomic<long> wrong{0};
  for (int it = 0; it < calls; it++) {
    DevBuf *out = it % 2 ? &s : &r;  // odd calls in place
    device_emu_stream_call(st, fill_fn, new Fill{&s, k, rank, it});
    CHILD_CHECK(ncclAllReduce(s.d, out->d, k, ncclInt32, ncclSum, comm, cs) == ncclSuccess, 10,
                "call %d", it);
    device_emu_stream_call(st, check_fn, new Check{out, k, n, it, &wrong});
  }
  CHILD_CHECK(device_emu_stream_sync(st, 60000) == 0, 11, "stream stuck");
  CHILD_CHECK(wrong.load() == 0, 12, "%ld wrong elements over %d calls", wrong.load(), calls);
  for (size_t j = 0; j < k; j++) s.h<int32_t>()[j] = in(rank, j, 0);
  CHILD_CHECK(ncclAllReduce(s.d, r.d, k, ncclInt32, ncclMax, comm, cs) == ncclSuccess, 13, "max");
  CHILD_CHECK(device_emu_stream_sync(st, 60000) == 0, 11, "stream stuck");
  for (size_t j = 0; j < k; j++)
    CHILD_CHECK(r.h<int32_t>()[j] == in(n - 1, j, 0), 14, "max %zu", j);
  CHILD_CHECK(ncclAllReduce(s.d, r.d, k, ncclInt32, ncclAvg, comm, cs) == ncclSuccess, 13, "avg");
  CHILD_CHECK(device_emu_stream_sync(st, 60000) == 0, 11, "stream stuck");
  // ncclAvg on integers: the sum, divided once at the end (truncating)
  for (size_t j = 0; j < k; j++)
    CHILD_CHECK(r.h<int32_t>()[j] == sum(n, j, 0) / n, 15, "avg %zu", j);
  // Floats: the small path folds x0 + x1 + ... + x(n-1) left to right in IEEE single
  // precision, so its result equals that same fold computed here, bit for bit. Other paths add
  // in other orders: all inputs are positive, so every partial sum is at most the total S and
  // each of the n - 1 roundings is at most 2^-24 S; both results lie within (n - 1) 2^-24 S of
  // the exact sum, so they differ by at most 2 (n - 1) 2^-24 S.
  auto x = [](int q, size_t j) { return (float)((j % 97) * 0.37 + q * 1.1 + 0.01); };
  for (size_t j = 0; j < k; j++) s.h<float>()[j] = x(rank, j);
  CHILD_CHECK(ncclAllReduce(s.d, r.d, k, ncclFloat32, ncclSum, comm, cs) == ncclSuccess, 13, "f32");
  CHILD_CHECK(device_emu_stream_sync(st, 60000) == 0, 11, "stream stuck");
  for (size_t j = 0; j < k; j++) {
    float want = x(0, j);
    for (int q = 1; q < n; q++) want = want + x(q, j);
    float got = r.h<float>()[j];
    if (rank_order)
      CHILD_CHECK(memcmp(&got, &want, 4) == 0, 16, "f32 at %zu: %a vs %a", j, (double)got,
                  (double)want);
    else
      CHILD_CHECK(fabs((double)got - want) <= 2.0 * (n - 1) * ldexp(1.0, -24) * want, 16,
                  "f32 at %zu: %a vs %a", j, (double)got, (double)want);
  }
  device_emu_stream_destroy(st);
  return 0;
}

// What the counters must say after `calls` + 3 all-reduces on the small path: one stream copy
// and one stream reduction each, and nothing through the proxy's paths.
int small_path_ran(int rank, const device_emu_counts_t &c0, int calls) {
  device_emu_counts_t c = device_emu_counts();
  uint64_t want = (uint64_t)calls + 3;
  CHILD_CHECK(c.stream_reduces - c0.stream_reduces == want, 20, "%llu stream reductions, not %llu",
              (unsigned long long)(c.stream_reduces - c0.stream_reduces), (unsigned long long)want);
  CHILD_CHECK(c.stream_copies - c0.stream_copies == want, 21, "%llu stream copies",
              (unsigned long long)(c.stream_copies - c0.stream_copies));
  CHILD_CHECK(c.staging_copies == c0.staging_copies && c.dev_reduces == c0.dev_reduces &&
                  c.ipc_opens == c0.ipc_opens,
              22, "the proxy ran something");
  return 0;
}

// Forked ranks (2, 3, 5 and the most, 8): 60 calls each queued with no synchronisation, counts
// 1, 1003 and the limit (16384 int32 = 64 KiB), all exact, all on the small path.
TEST(SmallPath, ForkedRanksExactCallAfterCall) {
  ASSERT_EQ(emulation_on, 0);
  for (int n : {2, 3, 5, 8}) {
    for (size_t k : {(size_t)1, (size_t)1003, (size_t)16384}) {
      if (n == 8 && k != 1003) continue;  // 8 ranks on 2 CPUs: one size is enough
      auto codes = forked(n, on_device, [n, k](int rank, ncclComm_t comm) {
        device_emu_counts_t c0 = device_emu_counts();
        int rc = run_calls(rank, comm, n, k, 60);
        return rc ? rc : small_path_ran(rank, c0, 60);
      });
      for (int r = 0; r < n; r++)
        EXPECT_EQ(codes[r], 0) << n << " ranks, k " << k << ", rank " << r;
    }
  }
}

// Above the limit, with TUTTI_SMALL_BYTES=0 on one rank, or with TUTTI_ALGO not allowing
// oneshot, the calls go to the proxy (exact still), on every rank.
TEST(SmallPath, LimitsSendCallsToTheProxy) {
  struct Case {
    const char *what, *var, *value;
    size_t k;
  } cases[] = {{"above the limit", nullptr, nullptr, 16385},
               {"TUTTI_SMALL_BYTES=0 on rank 1", "TUTTI_SMALL_BYTES", "0", 1003},
               {"TUTTI_ALGO=ring", "TUTTI_ALGO", "ring", 1003}};
  for (const Case &cs : cases) {
    const int n = 3;
    auto codes = forked(
        n,
        [&cs](int rank) {
          on_device(rank);
          if (cs.var && (rank == 1 || strcmp(cs.var, "TUTTI_ALGO") == 0))
            setenv(cs.var, cs.value, 1);
        },
        [&cs](int rank, ncclComm_t comm) {
          device_emu_counts_t c0 = device_emu_counts();
          int rc = run_calls(rank, comm, n, cs.k, 4, false);
          if (rc) return rc;
          device_emu_counts_t c = device_emu_counts();
          CHILD_CHECK(c.stream_reduces == c0.stream_reduces, 30, "the small path ran");
          CHILD_CHECK(c.staging_copies > c0.staging_copies || c.dev_reduces > c0.dev_reduces, 31,
                      "the proxy ran nothing");
          return 0;
        });
    for (int r = 0; r < n; r++) EXPECT_EQ(codes[r], 0) << cs.what << "; rank " << r;
  }
}

// Ranks as threads of one process, one thread driving all of them in groups, every rank's
// calls on ONE shared stream: the two phases (every arrival before any wait) keep the ranks
// from waiting on each other's queued work. Two all-reduces per communicator per group: the
// first takes the small path, the second goes to the proxy.
TEST(SmallPath, ThreadRanksSharingAStreamInGroups) {
  const int n = 3;
  const size_t k = 777;
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(init_all_on_device(comms.data(), n), ncclSuccess);
  void *st = device_emu_stream_create();
  std::vector<DevBuf *> s, r, r2;
  for (int i = 0; i < n; i++)
    s.push_back(new DevBuf(k * 4)), r.push_back(new DevBuf(k * 4)), r2.push_back(new DevBuf(k * 4));
  device_emu_counts_t c0 = device_emu_counts();
  for (int it = 0; it < 20; it++) {
    for (int i = 0; i < n; i++)
      for (size_t j = 0; j < k; j++) s[i]->h<int32_t>()[j] = in(i, j, it);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int i = 0; i < n; i++) {
      ASSERT_EQ(ncclAllReduce(s[i]->d, r[i]->d, k, ncclInt32, ncclSum, comms[i], (cudaStream_t)st),
                ncclSuccess);
      ASSERT_EQ(ncclAllReduce(s[i]->d, r2[i]->d, k, ncclInt32, ncclMax, comms[i], (cudaStream_t)st),
                ncclSuccess);
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    ASSERT_EQ(device_emu_stream_sync(st, 60000), 0) << "call " << it;
    for (int i = 0; i < n; i++)
      for (size_t j = 0; j < k; j++) {
        ASSERT_EQ(r[i]->h<int32_t>()[j], sum(n, j, it)) << "rank " << i << " call " << it;
        ASSERT_EQ(r2[i]->h<int32_t>()[j], in(n - 1, j, it)) << "rank " << i << " call " << it;
      }
  }
  device_emu_counts_t c = device_emu_counts();
  EXPECT_EQ(c.stream_reduces - c0.stream_reduces, (uint64_t)(20 * n)) << "one small call each";
  EXPECT_GT(c.dev_reduces + c.staging_copies, c0.dev_reduces + c0.staging_copies)
      << "the second calls went to the proxy";
  for (int i = 0; i < n; i++) {
    EXPECT_EQ(ncclCommDestroy(comms[i]), ncclSuccess);
    delete s[i], delete r[i], delete r2[i];
  }
  device_emu_stream_destroy(st);
}

// ncclCommAbort while a small call waits for a peer that never calls: the abort returns within
// seconds, the stream is released, and the receive buffer is not written (the reduction is
// skipped).
TEST(SmallPath, AbortWhileAPeerNeverArrives) {
  auto codes = forked(2, on_device, [](int rank, ncclComm_t comm) {
    const size_t k = 256;
    DevBuf s(k * 4), r(k * 4);
    if (rank == 1) {  // never calls
      sleep(3);
      ncclCommAbort(comm);
      _exit(0);
    }
    for (size_t j = 0; j < k; j++) s.h<int32_t>()[j] = 5, r.h<int32_t>()[j] = -1;
    void *st = device_emu_stream_create();
    device_emu_counts_t c0 = device_emu_counts();
    ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, (cudaStream_t)st);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHILD_CHECK(device_emu_stream_sync(st, 0) != 0, 50, "the call did not wait for rank 1");
    auto t0 = std::chrono::steady_clock::now();
    CHILD_CHECK(ncclCommAbort(comm) == ncclSuccess, 51, "abort");
    CHILD_CHECK(device_emu_stream_sync(st, 10000) == 0, 52, "stream not released");
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHILD_CHECK(secs < 5, 53, "abort took %.1f s", secs);
    CHILD_CHECK(device_emu_counts().stream_copies == c0.stream_copies + 1, 54,
                "not the small path");
    for (size_t j = 0; j < k; j++) CHILD_CHECK(r.h<int32_t>()[j] == -1, 55, "written at %zu", j);
    device_emu_stream_destroy(st);
    _exit(0);
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// A peer that dies while this rank's small call waits for it: ncclCommGetAsyncError names it,
// the stream is released, the receive buffer is not written.
TEST(SmallPath, PeerDyingWhileACallWaitsIsReported) {
  auto codes = forked(2, on_device, [](int rank, ncclComm_t comm) {
    const size_t k = 256;
    DevBuf s(k * 4), r(k * 4);
    void *st = device_emu_stream_create();
    cudaStream_t cs = (cudaStream_t)st;
    CHILD_CHECK(ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, cs) == ncclSuccess, 60,
                "first call");
    CHILD_CHECK(device_emu_stream_sync(st, 60000) == 0, 61, "first call stuck");
    if (rank == 1) kill(getpid(), SIGKILL);
    for (size_t j = 0; j < k; j++) r.h<int32_t>()[j] = -1;
    ncclAllReduce(s.d, r.d, k, ncclInt32, ncclSum, comm, cs);  // rank 1 is gone
    ncclResult_t async = ncclSuccess;
    for (int i = 0; i < 200 && async == ncclSuccess; i++) {  // a watchdog's polling
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ncclCommGetAsyncError(comm, &async);
    }
    CHILD_CHECK(async == ncclRemoteError, 62, "async error %d", (int)async);
    std::string msg = ncclGetLastError(comm);
    CHILD_CHECK(msg.find("rank 1") != std::string::npos, 63, "names no rank: %s", msg.c_str());
    CHILD_CHECK(device_emu_stream_sync(st, 10000) == 0, 64, "stream not released");
    for (size_t j = 0; j < k; j++) CHILD_CHECK(r.h<int32_t>()[j] == -1, 65, "written at %zu", j);
    ncclCommAbort(comm);
    device_emu_stream_destroy(st);
    _exit(0);
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

}  // namespace
