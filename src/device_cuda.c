/* The device-memory interface (device.h) on the CUDA driver, loaded at run time.
 *
 * The driver's entry points are looked up by name in the library cuda_driver.c opened (no CUDA
 * header is needed, so the host-only build has the stream path too), with the driver's ABI:
 *   cuCtxGetCurrent(CUcontext *)                  cuCtxSetCurrent(CUcontext)
 *   cuMemHostAlloc(void **, size_t, unsigned)     cuMemFreeHost(void *)
 *   cuMemHostGetDevicePointer_v2(CUdeviceptr *, void *, unsigned)
 *   cuStreamWriteValue32_v2(CUstream, CUdeviceptr, uint32_t, unsigned)
 *   cuStreamWaitValue32_v2(CUstream, CUdeviceptr, uint32_t, unsigned)
 *   cuStreamIsCapturing(CUstream, CUstreamCaptureStatus *)
 *   cuStreamCreate(CUstream *, unsigned)          cuStreamDestroy_v2(CUstream)
 *   cuMemcpyAsync(CUdeviceptr, CUdeviceptr, size_t, CUstream)
 *   cuStreamSynchronize(CUstream)                 cuGetErrorString(CUresult, const char **)
 * and for peer memory between processes of one host (transport/cuda_p2p.c):
 *   cuCtxGetDevice(CUdevice *)                    cuDeviceGetUuid_v2(CUuuid *, CUdevice)
 *   cuDevicePrimaryCtxRetain(CUcontext *, CUdevice)  (ranks that ncclCommInitAll makes)
 *   cuDeviceGetCount(int *)                       cuDeviceGet(CUdevice *, int)
 *   cuDeviceCanAccessPeer(int *, CUdevice, CUdevice)
 *   cuMemGetAddressRange_v2(CUdeviceptr *, size_t *, CUdeviceptr)
 *   cuIpcGetMemHandle(CUipcMemHandle *, CUdeviceptr)
 *   cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned)  (the handle by value)
 *   cuIpcCloseMemHandle(CUdeviceptr)
 *   cuMemAlloc_v2(CUdeviceptr *, size_t)          cuMemFree_v2(CUdeviceptr)
 * and for the small-call path (small.c), shared host memory the device reaches:
 *   cuMemHostRegister_v2(void *, size_t, unsigned) cuMemHostUnregister(void *)
 * Reductions on device memory run the kernels of libtutti_cuda.so (src/cuda/), opened with
 * dlopen on first use (TUTTI_CUDA_KERNELS_LIB, else libtutti_cuda.so.0 next to this library,
 * else on the library path) and checked against TUTTI_CUDA_ABI_VERSION; without it a rank
 * has no device id, so peer memory is off on every rank (the proxy stages instead).
 * The _v2 stream memory operations are always available since CUDA 12 (the first ones needed
 * a driver option). Words the GPU writes and waits on live in pinned, device-mapped host memory
 * (CU_MEMHOSTALLOC_DEVICEMAP | PORTABLE), so the proxy thread reads and writes them with plain
 * atomic loads and stores.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "cuda/tutti_cuda.h"
#include "device.h"
#include "reduce_impl.h"

typedef unsigned long long cu_ptr_t; /* CUdeviceptr */

enum {
  CU_MEMHOSTALLOC_PORTABLE = 0x01,
  CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
  CU_MEMHOSTREGISTER_PORTABLE = 0x01,
  CU_MEMHOSTREGISTER_DEVICEMAP = 0x02,
  CU_STREAM_NON_BLOCKING = 0x1,
  CU_STREAM_WAIT_VALUE_GEQ = 0x0,
  CU_STREAM_WRITE_VALUE_DEFAULT = 0x0,
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1,
  CU_ERROR_LAUNCH_FAILED = 719,
  CU_ERROR_NOT_FOUND = 500,
};

typedef struct cu_ipc_handle { /* CUipcMemHandle */
  unsigned char reserved[DEVICE_IPC_BYTES];
} cu_ipc_handle_t;

static struct {
  int (*ctx_get)(void **);
  int (*ctx_set)(void *);
  int (*host_alloc)(void **, size_t, unsigned);
  int (*host_free)(void *);
  int (*host_devptr)(cu_ptr_t *, void *, unsigned);
  int (*write32)(void *, cu_ptr_t, uint32_t, unsigned);
  int (*wait32)(void *, cu_ptr_t, uint32_t, unsigned);
  int (*capturing)(void *, int *);
  int (*stream_create)(void **, unsigned);
  int (*stream_destroy)(void *);
  int (*memcpy_async)(cu_ptr_t, cu_ptr_t, size_t, void *);
  int (*stream_sync)(void *);
  int (*error_string)(int, const char **);
  int (*ctx_device)(int *);
  int (*uuid)(unsigned char *, int);
  int (*device_count)(int *);
  int (*device_get)(int *, int);
  int (*can_access)(int *, int, int);
  int (*addr_range)(cu_ptr_t *, size_t *, cu_ptr_t);
  int (*ipc_get)(cu_ipc_handle_t *, cu_ptr_t);
  int (*ipc_open)(cu_ptr_t *, cu_ipc_handle_t, unsigned);
  int (*ipc_close)(cu_ptr_t);
  int (*mem_alloc)(cu_ptr_t *, size_t);
  int (*mem_free)(cu_ptr_t);
  int (*host_register)(void *, size_t, unsigned);
  int (*host_unregister)(void *);
  int (*primary_retain)(void **, int);
} cu;

#define CU_SYM(field, name) \
  { (void **)&cu.field, name }

static const struct {
  void **fn;
  const char *name;
} syms[] = {
    CU_SYM(ctx_get, "cuCtxGetCurrent"),
    CU_SYM(ctx_set, "cuCtxSetCurrent"),
    CU_SYM(host_alloc, "cuMemHostAlloc"),
    CU_SYM(host_free, "cuMemFreeHost"),
    CU_SYM(host_devptr, "cuMemHostGetDevicePointer_v2"),
    CU_SYM(write32, "cuStreamWriteValue32_v2"),
    CU_SYM(wait32, "cuStreamWaitValue32_v2"),
    CU_SYM(capturing, "cuStreamIsCapturing"),
    CU_SYM(stream_create, "cuStreamCreate"),
    CU_SYM(stream_destroy, "cuStreamDestroy_v2"),
    CU_SYM(memcpy_async, "cuMemcpyAsync"),
    CU_SYM(stream_sync, "cuStreamSynchronize"),
    CU_SYM(error_string, "cuGetErrorString"),
    CU_SYM(ctx_device, "cuCtxGetDevice"),
    CU_SYM(uuid, "cuDeviceGetUuid_v2"),
    CU_SYM(device_count, "cuDeviceGetCount"),
    CU_SYM(device_get, "cuDeviceGet"),
    CU_SYM(can_access, "cuDeviceCanAccessPeer"),
    CU_SYM(addr_range, "cuMemGetAddressRange_v2"),
    CU_SYM(ipc_get, "cuIpcGetMemHandle"),
    CU_SYM(ipc_open, "cuIpcOpenMemHandle_v2"),
    CU_SYM(ipc_close, "cuIpcCloseMemHandle"),
    CU_SYM(mem_alloc, "cuMemAlloc_v2"),
    CU_SYM(mem_free, "cuMemFree_v2"),
    CU_SYM(host_register, "cuMemHostRegister_v2"),
    CU_SYM(host_unregister, "cuMemHostUnregister"),
    CU_SYM(primary_retain, "cuDevicePrimaryCtxRetain"),
};

const char *device_cuda_symbol(size_t i) {
  return i < sizeof(syms) / sizeof(syms[0]) ? syms[i].name : NULL;
}

int device_cuda_usable(char *why, size_t len) {
  const char *state = cuda_driver_state();
  if (strcmp(state, "ready") != 0) {
    snprintf(why, len, "%s", state);
    return -1;
  }
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    *syms[i].fn = cuda_driver_symbol(syms[i].name);
    if (!*syms[i].fn) {
      snprintf(why, len, "the CUDA driver lacks %s", syms[i].name);
      return -1;
    }
  }
  return 0;
}

static void *cuda_current_ctx(void) {
  void *ctx = NULL;
  return cu.ctx_get(&ctx) == 0 ? ctx : NULL;
}

static int cuda_bind(void *ctx) {
  return cu.ctx_set(ctx); /* NULL: no context current on this thread */
}

static int cuda_ordinal(void) {
  int dev = -1;
  return cu.ctx_device(&dev) == 0 ? dev : -1;
}

static void *cuda_device_ctx(int ordinal) {
  int dev = 0;
  void *ctx = NULL;
  if (cu.device_get(&dev, ordinal) != 0 || cu.primary_retain(&ctx, dev) != 0) return NULL;
  return ctx;
}

static int cuda_host_alloc(void **p, size_t bytes) {
  *p = NULL;
  int rc =
      cu.host_alloc(p, bytes ? bytes : 1, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  if (rc == 0) memset(*p, 0, bytes);
  return rc;
}

static void cuda_host_free(void *p) {
  if (p) cu.host_free(p);
}

static int cuda_word_ptr(volatile uint32_t *word, cu_ptr_t *d) {
  return cu.host_devptr(d, (void *)(uintptr_t)word, 0);
}

static int cuda_stream_write(void *stream, volatile uint32_t *word, uint32_t value) {
  cu_ptr_t d;
  int rc = cuda_word_ptr(word, &d);
  return rc ? rc : cu.write32(stream, d, value, CU_STREAM_WRITE_VALUE_DEFAULT);
}

static int cuda_stream_wait(void *stream, volatile uint32_t *word, uint32_t value) {
  cu_ptr_t d;
  int rc = cuda_word_ptr(word, &d);
  return rc ? rc : cu.wait32(stream, d, value, CU_STREAM_WAIT_VALUE_GEQ);
}

static int cuda_stream_capturing(void *stream) {
  int status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cu.capturing(stream, &status) != 0) return 0;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Non-blocking: the copies never wait for the legacy default stream, which may itself be
 * waiting (cuStreamWaitValue32) for this very operation. */
static int cuda_copy_queue_create(void **q) {
  return cu.stream_create(q, CU_STREAM_NON_BLOCKING);
}

static void cuda_copy_queue_destroy(void *q) {
  if (q) cu.stream_destroy(q);
}

static int cuda_copy(void *q, void *dst, const void *src, size_t bytes) {
  if (!bytes) return 0;
  int rc = cu.memcpy_async((cu_ptr_t)(uintptr_t)dst, (cu_ptr_t)(uintptr_t)src, bytes, q);
  return rc ? rc : cu.stream_sync(q);
}

static const char *cuda_error_string(int rc) {
  const char *s = NULL;
  if (cu.error_string && cu.error_string(rc, &s) == 0 && s) return s;
  return "unknown CUDA error";
}

/* ---- peer memory ---- */

typedef int (*kernel_reduce_fn)(void *, const void *, const void *, size_t, ncclDataType_t,
                                const reduce_args_t *, void *);
typedef int (*kernel_copy_fn)(void *, const void *, size_t, const unsigned *, void *);
typedef int (*kernel_reduce_n_fn)(void *, const void *const *, int, size_t, ncclDataType_t,
                                  const reduce_args_t *, const reduce_args_t *, const unsigned *,
                                  void *);
static kernel_reduce_fn kernel_reduce;
static kernel_copy_fn kernel_copy;
static kernel_reduce_n_fn kernel_reduce_n;
static char kernel_why[256] = "not loaded";
static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;

/* libtutti_cuda.so.0 in the directory this library was loaded from, or what dlopen finds. */
static void *kernel_lib_open(void) {
  const char *forced = tutti_getenv("CUDA_KERNELS_LIB");
  if (forced) return dlopen(forced, RTLD_NOW | RTLD_LOCAL);
  Dl_info info;
  char path[4096];
  if (dladdr((void *)kernel_lib_open, &info) && info.dli_fname) {
    const char *slash = strrchr(info.dli_fname, '/');
    int dir = slash ? (int)(slash - info.dli_fname) : 0;
    snprintf(path, sizeof(path), "%.*s/libtutti_cuda.so.0", dir, info.dli_fname);
    void *lib = slash ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (lib) return lib;
  }
  return dlopen("libtutti_cuda.so.0", RTLD_NOW | RTLD_LOCAL);
}

static void kernel_lib_load(void) {
  void *lib = kernel_lib_open();
  if (!lib) {
    snprintf(kernel_why, sizeof(kernel_why), "libtutti_cuda.so not loadable: %s", dlerror());
    return;
  }
  int (*abi)(void) = (int (*)(void))dlsym(lib, "tutti_cuda_abi_version");
  kernel_reduce_fn fn = (kernel_reduce_fn)dlsym(lib, "tutti_cuda_reduce");
  kernel_copy_fn copy = (kernel_copy_fn)dlsym(lib, "tutti_cuda_copy");
  kernel_reduce_n_fn reduce_n = (kernel_reduce_n_fn)dlsym(lib, "tutti_cuda_reduce_n");
  if (!abi || !fn || !copy || !reduce_n || abi() != TUTTI_CUDA_ABI_VERSION) {
    snprintf(kernel_why, sizeof(kernel_why), "libtutti_cuda.so: ABI %d, this library needs %d",
             abi ? abi() : -1, TUTTI_CUDA_ABI_VERSION);
    return;
  }
  kernel_reduce = fn, kernel_copy = copy, kernel_reduce_n = reduce_n;
  INFO(SUB_INIT, "device: reduction kernels from libtutti_cuda.so (ABI %d)", abi());
}

static int cuda_device_id(unsigned char id[DEVICE_ID_BYTES]) {
  pthread_once(&kernel_once, kernel_lib_load);
  if (!kernel_reduce) {
    INFO(SUB_INIT, "device: no peer memory (%s)", kernel_why);
    return CU_ERROR_NOT_FOUND;
  }
  int dev = 0;
  int rc = cu.ctx_device(&dev);
  return rc ? rc : cu.uuid(id, dev);
}

/* The ordinal of the device with this UUID in this process, or -1. */
static int cuda_device_by_id(const unsigned char id[DEVICE_ID_BYTES]) {
  int n = 0;
  if (cu.device_count(&n)) return -1;
  for (int i = 0; i < n; i++) {
    int dev = 0;
    unsigned char u[DEVICE_ID_BYTES];
    if (cu.device_get(&dev, i) == 0 && cu.uuid(u, dev) == 0 && !memcmp(u, id, DEVICE_ID_BYTES))
      return dev;
  }
  return -1;
}

static int cuda_can_reach(const unsigned char mine[DEVICE_ID_BYTES],
                          const unsigned char theirs[DEVICE_ID_BYTES]) {
  if (!memcmp(mine, theirs, DEVICE_ID_BYTES)) return 1; /* several ranks on one GPU */
  int a = cuda_device_by_id(mine), b = cuda_device_by_id(theirs), ok = 0;
  if (a < 0 || b < 0) return 0; /* not visible here (CUDA_VISIBLE_DEVICES) */
  return cu.can_access(&ok, a, b) == 0 && ok;
}

static int cuda_ipc_export(const void *p, size_t bytes, unsigned char h[DEVICE_IPC_BYTES],
                           size_t *offset) {
  cu_ptr_t base = 0, ptr = (cu_ptr_t)(uintptr_t)p;
  size_t size = 0;
  int rc = cu.addr_range(&base, &size, ptr);
  if (rc) return rc;
  if (ptr - base + bytes > size) return CU_ERROR_NOT_FOUND; /* spans two allocations */
  cu_ipc_handle_t handle;
  rc = cu.ipc_get(&handle, base);
  if (rc) return rc;
  memcpy(h, handle.reserved, DEVICE_IPC_BYTES);
  *offset = (size_t)(ptr - base);
  return 0;
}

static int cuda_ipc_open(const unsigned char h[DEVICE_IPC_BYTES], void **base) {
  cu_ipc_handle_t handle;
  memcpy(handle.reserved, h, DEVICE_IPC_BYTES);
  cu_ptr_t d = 0;
  int rc = cu.ipc_open(&d, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  *base = rc ? NULL : (void *)(uintptr_t)d;
  return rc;
}

static void cuda_ipc_close(void *base) {
  if (base) cu.ipc_close((cu_ptr_t)(uintptr_t)base);
}

static int cuda_dev_alloc(void **p, size_t bytes) {
  cu_ptr_t d = 0;
  int rc = cu.mem_alloc(&d, bytes ? bytes : 1);
  *p = rc ? NULL : (void *)(uintptr_t)d;
  return rc;
}

static void cuda_dev_free(void *p) {
  if (p) cu.mem_free((cu_ptr_t)(uintptr_t)p);
}

static int cuda_reduce(void *q, void *dst, const void *a, const void *b, size_t count,
                       const reduce_op_t *op, int flags) {
  reduce_args_t args;
  if (!kernel_reduce || !reduce_args_decode(op, flags, &args)) return CU_ERROR_NOT_FOUND;
  if (!count) return 0;
  if (kernel_reduce(dst, a, b, count, op->type, &args, q) != 0) return CU_ERROR_LAUNCH_FAILED;
  return cu.stream_sync(q);
}

static int cuda_copy_ldst(void *q, void *dst, const void *src, size_t bytes) {
  if (!kernel_copy) return CU_ERROR_NOT_FOUND;
  if (!bytes) return 0;
  if (kernel_copy(dst, src, bytes, NULL, q) != 0) return CU_ERROR_LAUNCH_FAILED;
  return cu.stream_sync(q);
}

/* ---- the small-call path ---- */

static int cuda_host_register(void *p, size_t bytes, void **dev) {
  int rc = cu.host_register(p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  cu_ptr_t d = 0;
  if (rc == 0 && (rc = cu.host_devptr(&d, p, 0)) != 0) cu.host_unregister(p);
  *dev = rc ? NULL : (void *)(uintptr_t)d;
  return rc;
}

static void cuda_host_unregister(void *p) {
  if (p) cu.host_unregister(p);
}

static int cuda_stream_copy(void *stream, void *dst, const void *src, size_t bytes,
                            const volatile uint32_t *skip) {
  if (!kernel_copy) return CU_ERROR_NOT_FOUND;
  return kernel_copy(dst, src, bytes, (const unsigned *)skip, stream) ? CU_ERROR_LAUNCH_FAILED : 0;
}

static int cuda_stream_memcpy(void *stream, void *dst, const void *src, size_t bytes) {
  return cu.memcpy_async((cu_ptr_t)(uintptr_t)dst, (cu_ptr_t)(uintptr_t)src, bytes, stream);
}

static int cuda_stream_reduce_n(void *stream, void *dst, const void *const *in, int n, size_t count,
                                const reduce_op_t *op, const volatile uint32_t *skip) {
  reduce_args_t mid, last;
  if (!kernel_reduce_n || !reduce_args_decode(op, 0, &mid) ||
      !reduce_args_decode(op, REDUCE_POST, &last))
    return CU_ERROR_NOT_FOUND;
  int rc =
      kernel_reduce_n(dst, in, n, count, op->type, &mid, &last, (const unsigned *)skip, stream);
  return rc ? CU_ERROR_LAUNCH_FAILED : 0;
}

const device_ops_t device_cuda_ops = {
    .name = "cuda",
    .mem_kind = cuda_driver_mem_kind,
    .current_ctx = cuda_current_ctx,
    .bind = cuda_bind,
    .ordinal = cuda_ordinal,
    .device_ctx = cuda_device_ctx,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stream_write = cuda_stream_write,
    .stream_wait = cuda_stream_wait,
    .stream_capturing = cuda_stream_capturing,
    .copy_queue_create = cuda_copy_queue_create,
    .copy_queue_destroy = cuda_copy_queue_destroy,
    .copy = cuda_copy,
    .error_string = cuda_error_string,
    .device_id = cuda_device_id,
    .can_reach = cuda_can_reach,
    .ipc_export = cuda_ipc_export,
    .ipc_open = cuda_ipc_open,
    .ipc_close = cuda_ipc_close,
    .dev_alloc = cuda_dev_alloc,
    .dev_free = cuda_dev_free,
    .reduce = cuda_reduce,
    .copy_ldst = cuda_copy_ldst,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .stream_copy = cuda_stream_copy,
    .stream_reduce_n = cuda_stream_reduce_n,
    .stream_memcpy = cuda_stream_memcpy,
};
