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
 * The _v2 stream memory operations are always available since CUDA 12 (the first ones needed
 * a driver option). Words the GPU writes and waits on live in pinned, device-mapped host memory
 * (CU_MEMHOSTALLOC_DEVICEMAP | PORTABLE), so the proxy thread reads and writes them with plain
 * atomic loads and stores.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "device.h"

typedef unsigned long long cu_ptr_t; /* CUdeviceptr */

enum {
  CU_MEMHOSTALLOC_PORTABLE = 0x01,
  CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
  CU_STREAM_NON_BLOCKING = 0x1,
  CU_STREAM_WAIT_VALUE_GEQ = 0x0,
  CU_STREAM_WRITE_VALUE_DEFAULT = 0x0,
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
};

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
  return ctx ? cu.ctx_set(ctx) : 0;
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

const device_ops_t device_cuda_ops = {
    .name = "cuda",
    .mem_kind = cuda_driver_mem_kind,
    .current_ctx = cuda_current_ctx,
    .bind = cuda_bind,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stream_write = cuda_stream_write,
    .stream_wait = cuda_stream_wait,
    .stream_capturing = cuda_stream_capturing,
    .copy_queue_create = cuda_copy_queue_create,
    .copy_queue_destroy = cuda_copy_queue_destroy,
    .copy = cuda_copy,
    .error_string = cuda_error_string,
};
