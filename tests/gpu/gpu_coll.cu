// Collectives on device buffers, run on a GPU by tests/gpu/run.sh (never in CI: it needs one).
//
//   tutti-run -n N -- gpu_coll check    every collective x datatype x size with exact values,
//                                       stream ordering (kernels before and after), device
//                                       PreMulSum scalar, ncclMemAlloc's device memory, graph
//                                       capture refused, abort in flight
//   tutti-run -n N -- gpu_coll bench    all-reduce busbw at 256 MiB and 8 B latency (rank 0
//                                       prints "RESULT name value")
//   gpu_coll threads N                  N ranks as threads of one process (ncclCommInitAll)
//   gpu_coll threads-bench N            the 8 B latency with N ranks as threads (one context)
// All ranks use GPU 0 (several ranks on one GPU: NCCL refuses that, tutti allows it).
// Inputs are small integers (j % 13 + rank + 1), exact in every datatype checked, so every
// comparison is exact. Exit status: 0 all right, 1 a check failed, 2 setup failed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tutti.h"

namespace {

int g_failures = 0;
int g_rank = 0;

#define FAIL(...)                              \
  do {                                         \
    fprintf(stderr, "rank %d: FAIL ", g_rank); \
    fprintf(stderr, __VA_ARGS__);              \
    fprintf(stderr, "\n");                     \
    g_failures++;                              \
  } while (0)
#define CUDA_OK(x)                                                              \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      fprintf(stderr, "rank %d: %s: %s\n", g_rank, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)
#define NCCL_OK(comm, x)                                                       \
  do {                                                                         \
    ncclResult_t r_ = (x);                                                     \
    if (r_ != ncclSuccess)                                                     \
      FAIL("%s: %s (%s)", #x, ncclGetErrorString(r_), ncclGetLastError(comm)); \
  } while (0)

template <typename T>
T from_int(int v) {
  return (T)v;
}
template <>
__half from_int<__half>(int v) {
  return __float2half((float)v);
}
template <>
__nv_bfloat16 from_int<__nv_bfloat16>(int v) {
  return __float2bfloat16((float)v);
}
template <typename T>
long to_int(T v) {
  return (long)v;
}
template <>
long to_int<__half>(__half v) {
  return (long)__half2float(v);
}
template <>
long to_int<__nv_bfloat16>(__nv_bfloat16 v) {
  return (long)__bfloat162float(v);
}

int in(int rank, size_t j) {
  return (int)(j % 13) + rank + 1;
}

struct Rank {
  ncclComm_t comm;
  int rank, n;
  cudaStream_t stream;
};

template <typename T>
struct Bufs {
  T *send = nullptr, *recv = nullptr;
  size_t elems;
  explicit Bufs(size_t e) : elems(e) {
    CUDA_OK(cudaMalloc(&send, e * sizeof(T) + 1));
    CUDA_OK(cudaMalloc(&recv, e * sizeof(T) + 1));
  }
  ~Bufs() { cudaFree(send), cudaFree(recv); }
  void put(T *dst, const std::vector<T> &h) {
    CUDA_OK(cudaMemcpy(dst, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> get(const T *src, size_t count) {
    std::vector<T> h(count);
    CUDA_OK(cudaMemcpy(h.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// Runs one call on the rank's stream, waits for the stream, and compares recvbuff[0..count)
// with want(j).
// GPU_COLL_VERBOSE set: every call is named (with the time since the first) before it is made,
// so the output of a run that hangs ends at the call that did.
void announce(const Rank &R, const char *what) {
  static const bool verbose = getenv("GPU_COLL_VERBOSE") != nullptr;
  static const auto t0 = std::chrono::steady_clock::now();
  if (!verbose) return;
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  fprintf(stderr, "rank %d: %.1f ms: %s\n", R.rank, ms, what);
}

template <typename T, typename Call, typename Want>
void expect(Rank &R, Bufs<T> &b, const char *what, size_t count, Call call, Want want,
            const T *from = nullptr) {
  announce(R, what);
  NCCL_OK(R.comm, call());
  CUDA_OK(cudaStreamSynchronize(R.stream));
  std::vector<T> got = b.get(from ? from : b.recv, count);
  for (size_t j = 0; j < count; j++)
    if (to_int(got[j]) != want(j)) {
      FAIL("%s: element %zu is %ld, expected %ld", what, j, to_int(got[j]), (long)want(j));
      return;
    }
}

template <typename T>
void check_type(Rank &R, ncclDataType_t dt, const char *tname, size_t k) {
  const int n = R.n, me = R.rank;
  Bufs<T> b(k * n);
  std::vector<T> mine(k * n), zero(k * n, from_int<T>(0));
  for (size_t j = 0; j < k * n; j++) mine[j] = from_int<T>(in(me, j));
  auto sum = [&](size_t j) {
    long t = 0;
    for (int q = 0; q < n; q++) t += in(q, j);
    return t;
  };
  char what[96];
  cudaStream_t s = R.stream;
  ncclComm_t c = R.comm;
#define WHAT(name) (snprintf(what, sizeof what, "%s %s count %zu", name, tname, k), what)
  b.put(b.send, mine), b.put(b.recv, zero);
  expect(
      R, b, WHAT("allreduce sum"), k,
      [&] { return ncclAllReduce(b.send, b.recv, k, dt, ncclSum, c, s); }, sum);
  expect(
      R, b, WHAT("allreduce max"), k,
      [&] { return ncclAllReduce(b.send, b.recv, k, dt, ncclMax, c, s); },
      [&](size_t j) { return (long)in(n - 1, j); });
  expect(
      R, b, WHAT("allreduce in place"), k,
      [&] { return ncclAllReduce(b.send, b.send, k, dt, ncclSum, c, s); }, sum, b.send);
  b.put(b.send, mine), b.put(b.recv, zero);
  expect(
      R, b, WHAT("reduce"), me == n - 1 ? k : 0,
      [&] { return ncclReduce(b.send, b.recv, k, dt, ncclSum, n - 1, c, s); }, sum);
  expect(
      R, b, WHAT("broadcast"), k, [&] { return ncclBroadcast(b.send, b.recv, k, dt, 0, c, s); },
      [&](size_t j) { return (long)in(0, j); });
  expect(
      R, b, WHAT("allgather"), k * n, [&] { return ncclAllGather(b.send, b.recv, k, dt, c, s); },
      [&](size_t j) { return (long)in((int)(j / k), j % k); });
  expect(
      R, b, WHAT("reducescatter"), k,
      [&] { return ncclReduceScatter(b.send, b.recv, k, dt, ncclSum, c, s); },
      [&](size_t j) { return sum(me * k + j); });
  expect(
      R, b, WHAT("alltoall"), k * n, [&] { return ncclAlltoAll(b.send, b.recv, k, dt, c, s); },
      [&](size_t j) { return (long)in((int)(j / k), me * k + j % k); });
  b.put(b.send, mine);  // in place: each pair of ranks swaps its blocks (direct on cuda_p2p)
  expect(
      R, b, WHAT("alltoall in place"), k * n,
      [&] { return ncclAlltoAll(b.send, b.send, k, dt, c, s); },
      [&](size_t j) { return (long)in((int)(j / k), me * k + j % k); }, b.send);
  b.put(b.send, mine);
  expect(
      R, b, WHAT("gather"), me == 0 ? k * n : 0,
      [&] { return ncclGather(b.send, b.recv, k, dt, 0, c, s); },
      [&](size_t j) { return (long)in((int)(j / k), j % k); });
  expect(
      R, b, WHAT("scatter"), k, [&] { return ncclScatter(b.send, b.recv, k, dt, 0, c, s); },
      [&](size_t j) { return (long)in(0, me * k + j); });
  expect(
      R, b, WHAT("send/recv ring"), k,
      [&] {
        ncclGroupStart();
        ncclSend(b.send, k, dt, (me + 1) % n, c, s);
        ncclRecv(b.recv, k, dt, (me + n - 1) % n, c, s);
        return ncclGroupEnd();
      },
      [&](size_t j) { return (long)in((me + n - 1) % n, j); });
#undef WHAT
}

__global__ void spin_kernel(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
__global__ void fill_kernel(int *p, size_t n, int rank) {
  for (size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
    p[j] = (int)(j % 13) + rank + 1;
}
__global__ void copy_kernel(int *dst, const int *src, size_t n) {
  for (size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
    dst[j] = src[j];
}

long long cycles_for_ms(double ms) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  return (long long)(ms * khz);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Compares k ints of device memory with the all-reduce (sum) of every rank's inputs; FAIL names
// the first element that differs.
void expect_sums(Rank &R, const int *dev, size_t k, const char *what) {
  std::vector<int> h(k);
  CUDA_OK(cudaMemcpy(h.data(), dev, k * 4, cudaMemcpyDeviceToHost));
  for (size_t j = 0; j < k; j++) {
    long want = 0;
    for (int q = 0; q < R.n; q++) want += in(q, j);
    if (h[j] != want) {
      FAIL("%s: element %zu is %d, expected %ld", what, j, h[j], want);
      return;
    }
  }
}

// A kernel fills sendbuff after 300 ms; the all-reduce must return before that and read what it
// wrote; a kernel after it copies recvbuff and must see the result.
void check_stream_order(Rank &R) {
  const size_t k = 1 << 20;
  int *send, *recv, *after;
  CUDA_OK(cudaMalloc(&send, k * 4));
  CUDA_OK(cudaMalloc(&recv, k * 4));
  CUDA_OK(cudaMalloc(&after, k * 4));
  CUDA_OK(cudaMemset(send, 0, k * 4));
  CUDA_OK(cudaMemset(recv, 0, k * 4));
  spin_kernel<<<1, 1, 0, R.stream>>>(cycles_for_ms(300));
  fill_kernel<<<256, 256, 0, R.stream>>>(send, k, R.rank);
  auto t0 = std::chrono::steady_clock::now();
  NCCL_OK(R.comm, ncclAllReduce(send, recv, k, ncclInt32, ncclSum, R.comm, R.stream));
  double call_ms = ms_since(t0);
  copy_kernel<<<256, 256, 0, R.stream>>>(after, recv, k);
  CUDA_OK(cudaStreamSynchronize(R.stream));
  if (call_ms > 100)
    FAIL("stream order: ncclAllReduce took %.1f ms: it waited for the stream", call_ms);
  expect_sums(R, after, k, "stream order: after the call");
  printf("rank %d: stream order ok (call returned in %.2f ms)\n", R.rank, call_ms);
  cudaFree(send), cudaFree(recv), cudaFree(after);
}

// ncclMemAlloc on a thread with a current context gives device memory (as NCCL's does), which an
// all-reduce on it uses as any device buffer (in place, through CUDA IPC between processes).
void check_mem_alloc(Rank &R) {
  const size_t k = (1 << 20) + 5;
  int *buf = nullptr;
  NCCL_OK(R.comm, ncclMemAlloc((void **)&buf, k * 4));
  if (!buf) return;
  cudaPointerAttributes a;
  CUDA_OK(cudaPointerGetAttributes(&a, buf));
  if (a.type != cudaMemoryTypeDevice) {
    FAIL("ncclMemAlloc: memory type %d, not device memory", (int)a.type);
  } else {
    fill_kernel<<<256, 256, 0, R.stream>>>(buf, k, R.rank);
    NCCL_OK(R.comm, ncclAllReduce(buf, buf, k, ncclInt32, ncclSum, R.comm, R.stream));
    CUDA_OK(cudaStreamSynchronize(R.stream));
    expect_sums(R, buf, k, "ncclMemAlloc buffer");
  }
  NCCL_OK(R.comm, ncclMemFree(buf));
  printf("rank %d: ncclMemAlloc gives device memory: %s\n", R.rank,
         a.type == cudaMemoryTypeDevice ? "ok" : "no");
}

// PreMulSum with the scalar in device memory, written by a kernel queued before the call.
void check_device_scalar(Rank &R) {
  const size_t k = 1000;
  float *scalar, *buf;
  CUDA_OK(cudaMalloc(&scalar, 4));
  CUDA_OK(cudaMalloc(&buf, k * 4));
  std::vector<float> h(k);
  for (size_t j = 0; j < k; j++) h[j] = (float)in(R.rank, j);
  CUDA_OK(cudaMemcpy(buf, h.data(), k * 4, cudaMemcpyHostToDevice));
  float one = 1.0f, three = 3.0f;
  CUDA_OK(cudaMemcpy(scalar, &one, 4, cudaMemcpyHostToDevice));
  ncclRedOp_t op;
  NCCL_OK(R.comm, ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarDevice, R.comm));
  spin_kernel<<<1, 1, 0, R.stream>>>(cycles_for_ms(50));
  CUDA_OK(cudaMemcpyAsync(scalar, &three, 4, cudaMemcpyHostToDevice, R.stream));
  NCCL_OK(R.comm, ncclAllReduce(buf, buf, k, ncclFloat32, op, R.comm, R.stream));
  CUDA_OK(cudaStreamSynchronize(R.stream));
  CUDA_OK(cudaMemcpy(h.data(), buf, k * 4, cudaMemcpyDeviceToHost));
  for (size_t j = 0; j < k; j++) {
    float want = 0;
    for (int q = 0; q < R.n; q++) want += 3.0f * (float)in(q, j);  // exact: small integers
    if (h[j] != want) {
      FAIL("device PreMulSum scalar: element %zu is %g, expected %g", j, h[j], want);
      break;
    }
  }
  ncclRedOpDestroy(op, R.comm);
  cudaFree(scalar), cudaFree(buf);
}

// Capture is refused with a message, and the communicator stays usable.
void check_capture_refused(Rank &R) {
  float *buf;
  CUDA_OK(cudaMalloc(&buf, 4096));
  cudaStream_t cs;
  CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed));
  ncclResult_t r = ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, R.comm, cs);
  std::string msg = ncclGetLastError(R.comm);
  cudaGraph_t g;
  CUDA_OK(cudaStreamEndCapture(cs, &g));
  cudaGraphDestroy(g);
  if (r != ncclInvalidUsage || msg.find("graph capture") == std::string::npos)
    FAIL("graph capture: got %s (%s), expected ncclInvalidUsage naming graph capture",
         ncclGetErrorString(r), msg.c_str());
  cudaStreamDestroy(cs);
  cudaFree(buf);
}

// Abort while the all-reduce waits behind a 2 s kernel: it returns at once, the stream is
// released, recvbuff keeps its sentinel.
void check_abort_in_flight(Rank &R) {
  const size_t k = 4096;
  int *send, *recv;
  CUDA_OK(cudaMalloc(&send, k * 4));
  CUDA_OK(cudaMalloc(&recv, k * 4));
  CUDA_OK(cudaMemset(send, 1, k * 4));
  CUDA_OK(cudaMemset(recv, 0x7f, k * 4));
  spin_kernel<<<1, 1, 0, R.stream>>>(cycles_for_ms(2000));
  NCCL_OK(R.comm, ncclAllReduce(send, recv, k, ncclInt32, ncclSum, R.comm, R.stream));
  auto t0 = std::chrono::steady_clock::now();
  ncclResult_t r = ncclCommAbort(R.comm);
  double abort_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  cudaError_t e = cudaStreamSynchronize(R.stream);
  double sync_ms = ms_since(t0);
  if (r != ncclSuccess) FAIL("abort in flight: ncclCommAbort returned %s", ncclGetErrorString(r));
  if (abort_ms > 1000) FAIL("abort in flight: ncclCommAbort took %.0f ms", abort_ms);
  if (e != cudaSuccess || sync_ms > 5000)
    FAIL("abort in flight: stream not released (%s, %.0f ms)", cudaGetErrorString(e), sync_ms);
  std::vector<int> h(k);
  CUDA_OK(cudaMemcpy(h.data(), recv, k * 4, cudaMemcpyDeviceToHost));
  for (size_t j = 0; j < k; j++)
    if (h[j] != 0x7f7f7f7f) {
      FAIL("abort in flight: recvbuff written (element %zu = %d)", j, h[j]);
      break;
    }
  printf("rank %d: abort in flight ok (abort %.1f ms, stream released %.1f ms later)\n", R.rank,
         abort_ms, sync_ms);
  cudaFree(send), cudaFree(recv);
}

void check_all_types(Rank &R) {
  for (size_t k : {(size_t)1, (size_t)1003, (size_t)(1 << 20) + 3}) {
    check_type<int32_t>(R, ncclInt32, "int32", k);
    check_type<float>(R, ncclFloat32, "float32", k);
  }
  check_type<int8_t>(R, ncclInt8, "int8", 1003);
  check_type<uint8_t>(R, ncclUint8, "uint8", 1003);
  check_type<uint32_t>(R, ncclUint32, "uint32", 1003);
  check_type<int64_t>(R, ncclInt64, "int64", 1003);
  check_type<uint64_t>(R, ncclUint64, "uint64", 1003);
  check_type<double>(R, ncclFloat64, "float64", 1003);
  check_type<__half>(R, ncclFloat16, "float16", 1003);
  check_type<__nv_bfloat16>(R, ncclBfloat16, "bfloat16", 1003);
}

// Timed on the stream with events: median of `iters` calls per sample, 5 samples. *host_us:
// the median time the calls took to return (enqueueing only): near the stream's figure, the
// calls are bound by the host's enqueueing, not by the GPU.
double time_allreduce_us(Rank &R, void *buf, size_t count, int iters, double *host_us) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  std::vector<double> us, host;
  for (int s = 0; s < 6; s++) {
    cudaEventRecord(a, R.stream);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++)
      NCCL_OK(R.comm, ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, R.comm, R.stream));
    double enq_ms = ms_since(t0);
    cudaEventRecord(b, R.stream);
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (s > 0) us.push_back(ms * 1000.0 / iters), host.push_back(enq_ms * 1000.0 / iters);
  }
  std::sort(us.begin(), us.end()), std::sort(host.begin(), host.end());
  *host_us = host[host.size() / 2];
  return us[us.size() / 2];
}

void bench(Rank &R) {
  const size_t big = (size_t)256 << 20;
  void *buf;
  CUDA_OK(cudaMalloc(&buf, big));
  CUDA_OK(cudaMemset(buf, 0, big));
  double host_big, host_small;
  double us_big = time_allreduce_us(R, buf, big / 4, 2, &host_big);
  double us_small = time_allreduce_us(R, buf, 2, 200, &host_small);
  double algbw = big / (us_big * 1e-6) / 1e9;
  double busbw = algbw * 2.0 * (R.n - 1) / R.n;
  const char *tag = getenv("GPU_COLL_TAG");  // names a variant's results (run.sh: "staged")
  std::string sfx = tag && *tag ? std::string("_") + tag : std::string();
  if (R.rank == 0) {
    printf("RESULT allreduce_256MiB_us%s %.1f\n", sfx.c_str(), us_big);
    printf("RESULT allreduce_256MiB_busbw_GBps%s %.2f\n", sfx.c_str(), busbw);
    printf("RESULT allreduce_8B_latency_us%s %.2f\n", sfx.c_str(), us_small);
    printf("RESULT allreduce_8B_host_enqueue_us%s %.2f\n", sfx.c_str(), host_small);
  }
  cudaFree(buf);
}

int run_process_mode(const std::string &mode) {
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(nullptr));  // the context exists before the communicator
  Rank R;
  if (tuttiCommInitFromEnv(&R.comm) != ncclSuccess) {
    fprintf(stderr, "tuttiCommInitFromEnv failed\n");
    return 2;
  }
  ncclCommUserRank(R.comm, &R.rank), ncclCommCount(R.comm, &R.n);
  g_rank = R.rank;
  CUDA_OK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
  if (mode == "bench") {
    bench(R);
    ncclCommDestroy(R.comm);
  } else {
    check_all_types(R);
    announce(R, "stream order"), check_stream_order(R);
    announce(R, "ncclMemAlloc"), check_mem_alloc(R);
    announce(R, "device scalar"), check_device_scalar(R);
    announce(R, "capture refused"), check_capture_refused(R);
    announce(R, "abort in flight"), check_abort_in_flight(R);  // last: the comm is gone after it
  }
  printf("rank %d of %d: %s: %s (%d failures)\n", R.rank, R.n, mode.c_str(),
         g_failures ? "FAILED" : "ok", g_failures);
  return g_failures ? 1 : 0;
}

// N ranks as threads: one communicator each from ncclCommInitAll, one stream each, driven by
// one thread through groups (all-reduce and all-gather checked).
int run_threads_mode(int n) {
  CUDA_OK(cudaSetDevice(0));
  std::vector<ncclComm_t> comms(n);
  std::vector<int> dev(n, 0);
  if (ncclCommInitAll(comms.data(), n, dev.data()) != ncclSuccess) return 2;
  const size_t k = 100003;
  std::vector<cudaStream_t> st(n);
  std::vector<int *> send(n), recv(n);
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&send[i], k * 4));
    CUDA_OK(cudaMalloc(&recv[i], k * n * 4));
    fill_kernel<<<64, 256, 0, st[i]>>>(send[i], k, i);
  }
  ncclGroupStart();
  for (int i = 0; i < n; i++)
    ncclAllReduce(send[i], recv[i], k, ncclInt32, ncclSum, comms[i], st[i]);
  if (ncclGroupEnd() != ncclSuccess)
    FAIL("threads: all-reduce group: %s", ncclGetLastError(nullptr));
  std::vector<int> h(k * n);
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaStreamSynchronize(st[i]));
    CUDA_OK(cudaMemcpy(h.data(), recv[i], k * 4, cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < k; j++) {
      long want = 0;
      for (int q = 0; q < n; q++) want += in(q, j);
      if (h[j] != want) {
        FAIL("threads: all-reduce rank %d element %zu is %d, expected %ld", i, j, h[j], want);
        break;
      }
    }
  }
  ncclGroupStart();
  for (int i = 0; i < n; i++) ncclAllGather(send[i], recv[i], k, ncclInt32, comms[i], st[i]);
  if (ncclGroupEnd() != ncclSuccess)
    FAIL("threads: all-gather group: %s", ncclGetLastError(nullptr));
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaStreamSynchronize(st[i]));
    CUDA_OK(cudaMemcpy(h.data(), recv[i], k * n * 4, cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < k * n; j++)
      if (h[j] != in((int)(j / k), j % k)) {
        FAIL("threads: all-gather rank %d element %zu is %d", i, j, h[j]);
        break;
      }
  }
  for (int i = 0; i < n; i++) ncclCommDestroy(comms[i]), cudaFree(send[i]), cudaFree(recv[i]);
  printf("threads %d: %s (%d failures)\n", n, g_failures ? "FAILED" : "ok", g_failures);
  return g_failures ? 1 : 0;
}

// The 8 B all-reduce latency with N ranks as threads of one process (one CUDA context, so no
// switch between contexts on the GPU), one stream each, one group per call: wall time per call
// over 200 calls, median of 5 samples. Prints RESULT allreduce_8B_latency_us_threads<N>.
int run_threads_bench(int n) {
  CUDA_OK(cudaSetDevice(0));
  std::vector<ncclComm_t> comms(n);
  std::vector<int> dev(n, 0);
  if (ncclCommInitAll(comms.data(), n, dev.data()) != ncclSuccess) return 2;
  std::vector<cudaStream_t> st(n);
  std::vector<float *> buf(n);
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&buf[i], 64));
    CUDA_OK(cudaMemset(buf[i], 0, 64));
  }
  std::vector<double> us, host;
  for (int s = 0; s < 6; s++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 200; it++) {
      ncclGroupStart();
      for (int i = 0; i < n; i++)
        ncclAllReduce(buf[i], buf[i], 2, ncclFloat32, ncclSum, comms[i], st[i]);
      if (ncclGroupEnd() != ncclSuccess) FAIL("threads bench: %s", ncclGetLastError(nullptr));
    }
    double enq_ms = ms_since(t0);
    for (int i = 0; i < n; i++) CUDA_OK(cudaStreamSynchronize(st[i]));
    if (s > 0) us.push_back(ms_since(t0) * 1000.0 / 200), host.push_back(enq_ms * 1000.0 / 200);
  }
  std::sort(us.begin(), us.end()), std::sort(host.begin(), host.end());
  // One thread enqueues every rank's operations: the host figure is n ranks' worth per call.
  printf("RESULT allreduce_8B_latency_us_threads%d %.2f\n", n, us[us.size() / 2]);
  printf("RESULT allreduce_8B_host_enqueue_us_threads%d %.2f\n", n, host[host.size() / 2]);
  for (int i = 0; i < n; i++) ncclCommDestroy(comms[i]), cudaFree(buf[i]);
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
  // line by line: a step the GPU script stops at its time limit keeps what was printed
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "check" || mode == "bench") return run_process_mode(mode);
  if (mode == "threads" && argc > 2) return run_threads_mode(atoi(argv[2]));
  if (mode == "threads-bench" && argc > 2) return run_threads_bench(atoi(argv[2]));
  fprintf(stderr,
          "usage: gpu_coll check|bench (under tutti-run), or gpu_coll threads|threads-bench N\n");
  return 2;
}
