// Pointer kind per call without a GPU: the CUDA driver is loaded at run time, and when it is
// missing (dlopen fails) or unusable (the toolkit's stub libcuda, whose cuInit fails) every
// buffer is host memory and collectives on host buffers run as in a build without CUDA.
// Each case runs in a forked child, because the driver is loaded once per process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cuda_driver.h"
#include "device.h"
#include "in_child.h"
#include "nccl.h"

namespace {

// 1-rank all-reduce (sum) of host buffers, in place and out of place; 0 when both are right.
int host_allreduce_ok() {
  ncclComm_t comm;
  if (ncclCommInitAll(&comm, 1, nullptr) != ncclSuccess) return 1;
  std::vector<int> send(1000), recv(1000, -1);
  for (int i = 0; i < 1000; i++) send[i] = 3 * i + 1;
  int bad = ncclAllReduce(send.data(), recv.data(), 1000, ncclInt32, ncclSum, comm, nullptr);
  bad |= ncclAllReduce(send.data(), send.data(), 1000, ncclInt32, ncclSum, comm, nullptr);
  for (int i = 0; i < 1000; i++) bad |= recv[i] != 3 * i + 1 || send[i] != 3 * i + 1;
  // Without a device (no driver, or one without a GPU) a stream cannot exist: refused by name,
  // nothing written.
  if (!device_get()) {
    std::vector<int> untouched(1000, -7);
    bad |= ncclAllReduce(send.data(), untouched.data(), 1000, ncclInt32, ncclSum, comm,
                         (cudaStream_t)0x10) != ncclInvalidArgument;
    bad |= std::string(ncclGetLastError(comm)).find("stream must be NULL") == std::string::npos;
    for (int v : untouched) bad |= v != -7;
  }
  // Pinned-looking but ordinary memory from malloc: host as well.
  void *m = malloc(64);
  bad |= cuda_driver_mem_kind(m) != MEM_KIND_HOST;
  free(m);
  ncclCommDestroy(comm);
  return bad;
}

// Runs `driver_lib` (nullptr: the default libcuda.so.1) in a child; the child exits 0 when the
// driver state starts with `state_prefix` and host collectives are right.
void expect_host_path(const char *driver_lib, const std::string &state_prefix) {
  int code = exit_code_in_child([&] {
    if (driver_lib) setenv("TUTTI_CUDA_DRIVER_LIB", driver_lib, 1);
    std::string state = cuda_driver_state();
    if (state.rfind(state_prefix, 0) != 0) {
      fprintf(stderr, "driver state '%s', expected '%s...'\n", state.c_str(), state_prefix.c_str());
      return 2;
    }
    return host_allreduce_ok();
  });
  EXPECT_EQ(code, 0) << "2: wrong driver state, 1: host collective failed, -1: no exit";
}

TEST(CudaDriver, MissingDriverLibraryMeansHostMemory) {
  expect_host_path("/nonexistent/libcuda.so.1", "/nonexistent/libcuda.so.1 not loadable");
}

#ifdef TUTTI_CUDA_STUB_LIBCUDA
// Every driver entry point the stream path looks up exists, under that name, in the toolkit's
// libcuda (the stub exports the real driver's symbols), so a real driver will have them.
TEST(CudaDriver, StreamPathEntryPointsExistInTheDriver) {
  void *lib = dlopen(TUTTI_CUDA_STUB_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  size_t i = 0;
  for (const char *name; (name = device_cuda_symbol(i)); i++)
    EXPECT_NE(dlsym(lib, name), nullptr) << name;
  EXPECT_GE(i, 13u);
  dlclose(lib);
}

// The toolkit's stub libcuda loads but cuInit fails: the same host path.
TEST(CudaDriver, StubDriverMeansHostMemory) {
  expect_host_path(TUTTI_CUDA_STUB_LIBCUDA, "cuInit failed");
}
#endif

// Whatever this machine has (no driver here and in CI; a real one on a GPU machine), host
// buffers are host memory and the collective is right.
TEST(CudaDriver, HostBuffersUnaffectedWithTheDefaultDriver) {
  expect_host_path(nullptr, "");
}

// In a child as well: the driver this loads would be the one the next tests' children inherit.
TEST(CudaDriver, NullIsHostMemory) {
  EXPECT_EQ(
      exit_code_in_child([] { return cuda_driver_mem_kind(nullptr) == MEM_KIND_HOST ? 0 : 1; }), 0)
      << "NULL was not host memory";
}

}  // namespace
