// GPU tests (need a GPU; run by tests/gpu/run.sh, not by ctest): the CUDA reduction kernels of
// libtutti_cuda.so against the host kernels of reduce.c, bit for bit, for every datatype x op x
// (premul, postdiv) x (one or two operands), on aligned buffers (16-byte vector path plus tail)
// and on buffers one element off alignment (element path only). Both run the element functions
// of reduce_ops.h with the same order of operations and no FMA, so results must be identical.
// Float inputs are finite (x86 and the GPU propagate NaN payloads differently).
// Also: a device pointer given to a collective is refused with a message naming the buffer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/tutti_cuda.h"
#include "cuda_driver.h"
#include "device.h"
#include "nccl.h"
#include "reduce.h"
#include "reduce_impl.h"

namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                 ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                 ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

// n elements of `type`: random bits for integers, finite values in [-8, 8) for floats.
std::vector<unsigned char> random_elems(ncclDataType_t type, size_t n, std::mt19937_64 &rng) {
  size_t es = tuttiTypeSize(type);
  std::vector<unsigned char> out(n * es);
  std::uniform_real_distribution<double> u(-8.0, 8.0);
  for (size_t i = 0; i < n; i++) {
    unsigned char *p = &out[i * es];
    double d = u(rng);
    float f = (float)d;
    uint64_t bits = rng();
    switch (type) {
      case ncclFloat16: {
        uint16_t h = tutti_float_to_half(f);
        memcpy(p, &h, 2);
        break;
      }
      case ncclBfloat16: {
        uint16_t h = tutti_float_to_bf16(f);
        memcpy(p, &h, 2);
        break;
      }
      case ncclFloat8e4m3:
        *p = tutti_float_to_fp8e4m3(f);
        break;
      case ncclFloat8e5m2:
        *p = tutti_float_to_fp8e5m2(f);
        break;
      case ncclFloat32:
        memcpy(p, &f, 4);
        break;
      case ncclFloat64:
        memcpy(p, &d, 8);
        break;
      default:
        memcpy(p, &bits, es);
    }
  }
  return out;
}

struct Case {
  ncclDataType_t type;
  ncclRedOp_t base;
  int premul, postdiv, two_operands;
  size_t count, offset;  // offset in elements from a 256-byte aligned allocation
};

const size_t kMaxCount = 1 << 20 | 7;

// One type's inputs (two operands of kMaxCount + 1 elements, drawn once: a case reads a prefix)
// and three device buffers of the largest size, allocated once: the cases differ in type, op,
// variant, count and alignment, and drawing or allocating per case cost most of the test's time.
struct Inputs {
  std::vector<unsigned char> a, b;
};
struct DevBufs {
  unsigned char *a = nullptr, *b = nullptr, *d = nullptr;
  ~DevBufs() { cudaFree(a), cudaFree(b), cudaFree(d); }
};

// Runs one case on the GPU and on the host; returns the index of the first differing byte or -1.
long run_case(const Case &c, const Inputs &in, const DevBufs &dev, std::mt19937_64 &rng,
              std::string *why) {
  size_t es = tuttiTypeSize(c.type), bytes = (c.count + c.offset) * es;
  const unsigned char *a = in.a.data(), *b = in.b.data();
  std::vector<unsigned char> scalar = random_elems(c.type, 1, rng);
  reduce_op_t op = {
      .type = c.type, .base = c.base, .premul = c.premul, .postdiv = c.postdiv, .divisor = 3};
  memcpy(op.scalar, scalar.data(), es);
  std::vector<unsigned char> host(bytes, 0), dev_out(bytes, 0);
  size_t off = c.offset * es;
  if (c.two_operands)  // the engine's two calls: combine two operands, or copy one
    reduce_combine(&op, host.data() + off, a + off, b + off, c.count, REDUCE_PRE | REDUCE_POST);
  else
    reduce_copy(&op, host.data() + off, a + off, c.count, REDUCE_PRE | REDUCE_POST);
  reduce_args_t args;
  if (!reduce_args_decode(&op, REDUCE_PRE | REDUCE_POST, &args)) {
    *why = "decode";
    return 0;
  }
  if (cudaMemcpy(dev.a, a, bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(dev.b, b, bytes, cudaMemcpyHostToDevice) || cudaMemset(dev.d, 0, bytes)) {
    *why = "cudaMemcpy / cudaMemset";
    return 0;
  }
  int rc = tutti_cuda_reduce(dev.d + off, dev.a + off, c.two_operands ? dev.b + off : nullptr,
                             c.count, c.type, &args, nullptr);
  cudaError_t sync = cudaDeviceSynchronize();
  cudaMemcpy(dev_out.data(), dev.d, bytes, cudaMemcpyDeviceToHost);
  if (rc || sync) {
    *why = "launch " + std::to_string(rc) + " sync " + std::to_string((int)sync);
    return 0;
  }
  for (size_t i = 0; i < bytes; i++)
    if (host[i] != dev_out[i]) return (long)i;
  return -1;
}

TEST(GpuKernels, EveryTypeOpVariantMatchesTheHostBitForBit) {
  std::mt19937_64 rng(21);
  DevBufs dev;
  const size_t max_bytes = (kMaxCount + 1) * 8;  // the widest type, one element of offset
  CUDA_OK(cudaMalloc(&dev.a, max_bytes));
  CUDA_OK(cudaMalloc(&dev.b, max_bytes));
  CUDA_OK(cudaMalloc(&dev.d, max_bytes));
  int cases = 0;
  for (ncclDataType_t t : kTypes) {
    Inputs in = {random_elems(t, kMaxCount + 1, rng), random_elems(t, kMaxCount + 1, rng)};
    for (int base = 0; base < 4; base++)
      for (int variant = 0; variant < 4; variant++)
        for (int two = 0; two < 2; two++)
          for (size_t offset : {0, 1})
            for (size_t count :
                 {(size_t)1, (size_t)15, (size_t)16, (size_t)17, (size_t)1000, kMaxCount}) {
              Case c = {t, (ncclRedOp_t)base, variant & 1, variant >> 1, two, count, offset};
              std::string why;
              long at = run_case(c, in, dev, rng, &why);
              ASSERT_TRUE(why.empty()) << why;
              ASSERT_EQ(at, -1) << "type " << t << " op " << base << " pre " << c.premul << " post "
                                << c.postdiv << " operands " << 1 + two << " count " << count
                                << " offset " << offset << ": first differing byte " << at;
              cases++;
            }
  }
  printf("gpu kernels: %d cases bit-identical to the host kernels\n", cases);
}

// Mixed kinds on the legacy default stream (NULL): a device sendbuff and a host recvbuff, and
// the reverse, go through the stream path; pinned host memory stays host memory.
TEST(GpuKernels, DeviceAndHostBuffersMixOnTheNullStream) {
  ASSERT_STREQ(cuda_driver_state(), "ready");
  ASSERT_EQ(device_mem_kind(nullptr), MEM_KIND_HOST);
  float *d = nullptr;
  CUDA_OK(cudaMalloc(&d, 4096));
  std::vector<float> h(1024), back(1024);
  for (int i = 0; i < 1024; i++) h[i] = (float)i;
  CUDA_OK(cudaMemcpy(d, h.data(), 4096, cudaMemcpyHostToDevice));
  EXPECT_EQ(device_mem_kind(d), MEM_KIND_DEVICE);
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  std::vector<float> out(1024, -1.0f);
  ASSERT_EQ(ncclAllReduce(d, out.data(), 1024, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  CUDA_OK(cudaDeviceSynchronize());
  for (int i = 0; i < 1024; i++) ASSERT_EQ(out[i], (float)i);
  for (int i = 0; i < 1024; i++) h[i] = 2.0f * (float)i;
  ASSERT_EQ(ncclAllReduce(h.data(), d, 1024, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(back.data(), d, 4096, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 1024; i++) ASSERT_EQ(back[i], 2.0f * (float)i);
  void *pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, 4096));
  EXPECT_EQ(device_mem_kind(pinned), MEM_KIND_HOST);
  EXPECT_EQ(ncclAllReduce(pinned, pinned, 1024, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  cudaFreeHost(pinned);
  cudaFree(d);
  ncclCommDestroy(comm);
}

}  // namespace
