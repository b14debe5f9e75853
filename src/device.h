/* The device-memory interface: the few operations the stream path (proxy.c) needs from a GPU.
 *
 * Two implementations sit behind it:
 *   device_cuda.c  the CUDA driver, loaded at run time (cuda_driver.c): pinned host words the
 *                  GPU writes and waits on (cuStreamWriteValue32 / cuStreamWaitValue32), copies
 *                  on a private non-blocking stream, pinned staging memory;
 *   device_emu.c   a host implementation for protocol tests (TUTTI_DEVICE_EMULATION=1): "device"
 *                  memory is a reserved address range the host cannot touch (PROT_NONE, its
 *                  bytes live elsewhere), a "stream" is a thread running its queue in order.
 * The protocol (stream ordering, group launch, staging, abort, async errors) is the same code
 * in both cases; only these calls differ. Tests through device_emu.c are protocol tests, not
 * GPU tests.
 *
 * Return values: 0 on success, else the implementation's error code (CUresult for CUDA).
 */
#ifndef TUTTI_DEVICE_H_
#define TUTTI_DEVICE_H_

#include <stddef.h>
#include <stdint.h>

#include "cuda_driver.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DEVICE_ID_BYTES 16
#define DEVICE_IPC_BYTES 64 /* sizeof(CUipcMemHandle) */

struct reduce_op;

typedef struct device_ops {
  const char *name;
  mem_kind_t (*mem_kind)(const void *p);
  /* The calling thread's device context (CUcontext), to be made current in the proxy thread
   * with bind; NULL when the caller has none. bind(NULL) leaves the thread without one. */
  void *(*current_ctx)(void);
  int (*bind)(void *ctx);
  /* The ordinal of the calling thread's current device (CUDA: cuCtxGetDevice), -1 when the
   * thread has no context. */
  int (*ordinal)(void);
  /* A context of device `ordinal` for bind (CUDA: its primary context, as cudaSetDevice makes
   * current, retained for the life of the process); NULL when there is no such device. */
  void *(*device_ctx)(int ordinal);
  /* Pinned host memory, zeroed, that the device may read and write (flags, staging). */
  int (*host_alloc)(void **p, size_t bytes);
  void (*host_free)(void *p);
  /* Enqueued on `stream`: sets *word = value once the work queued before it is done (with a
   * system-wide memory fence first). */
  int (*stream_write)(void *stream, volatile uint32_t *word, uint32_t value);
  /* Enqueued on `stream`: the work queued after it starts once (int32_t)(*word - value) >= 0. */
  int (*stream_wait)(void *stream, volatile uint32_t *word, uint32_t value);
  /* 1 when `stream` is being captured into a CUDA graph (the stream path refuses it). */
  int (*stream_capturing)(void *stream);
  /* The proxy's own copy queue: created and used by the proxy thread only (after bind). */
  int (*copy_queue_create)(void **q);
  void (*copy_queue_destroy)(void *q);
  /* Copies bytes (device or host memory, either way) on the copy queue and waits for it. */
  int (*copy)(void *q, void *dst, const void *src, size_t bytes);
  /* Text for an error code of this implementation. */
  const char *(*error_string)(int rc);

  /* ---- peer memory between ranks of one host (transport/cuda_p2p.c) ---- */
  /* The identity of the calling thread's device (16 bytes, a UUID for CUDA); nonzero when there
   * is none or the device cannot take part in peer memory (no kernel library, see reduce). */
  int (*device_id)(unsigned char id[DEVICE_ID_BYTES]);
  /* 1 when this process's device `mine` can read and write device memory of `theirs` (the same
   * device, or peer access between the two); 0 otherwise. */
  int (*can_reach)(const unsigned char mine[DEVICE_ID_BYTES],
                   const unsigned char theirs[DEVICE_ID_BYTES]);
  /* A handle another process of this host opens (ipc_open) to reach the allocation holding
   * [p, p + bytes); *offset is p's offset in that allocation (CUDA: cuIpcGetMemHandle of
   * cuMemGetAddressRange's base). Nonzero when the memory cannot be shared that way. */
  int (*ipc_export)(const void *p, size_t bytes, unsigned char h[DEVICE_IPC_BYTES], size_t *offset);
  /* Opens another process's handle: *base is the allocation's start in this process (device
   * memory here, usable by copy and reduce). ipc_close releases it. */
  int (*ipc_open)(const unsigned char h[DEVICE_IPC_BYTES], void **base);
  void (*ipc_close)(void *base);
  /* Device memory for the proxy's scratch. */
  int (*dev_alloc)(void **p, size_t bytes);
  void (*dev_free)(void *p);
  /* dst[i] = post(pre(a[i]) OP b[i]) for count elements of device memory (any of them opened
   * from a peer; dst may alias a or b), run on the copy queue and waited for. CUDA: the kernel
   * of libtutti_cuda.so (src/cuda/), the element-wise functions of reduce_ops.h. */
  int (*reduce)(void *q, void *dst, const void *a, const void *b, size_t count,
                const struct reduce_op *op, int flags);
  /* copy's twin for small pieces: the device's threads copy with loads and stores (a kernel on
   * the copy queue, waited for), where launching the copy engine costs more than the copy. */
  int (*copy_ldst)(void *q, void *dst, const void *src, size_t bytes);

  /* ---- the small-call path (small.c): everything on the caller's stream ---- */
  /* Makes host memory [p, p + bytes) (a shared mapping other processes map too) reachable by
   * the device (CUDA: cuMemHostRegister, PORTABLE | DEVICEMAP); *dev is the address kernels
   * use. stream_write / stream_wait take its host addresses. host_unregister undoes it. */
  int (*host_register)(void *p, size_t bytes, void **dev);
  void (*host_unregister)(void *p);
  /* Enqueued on `stream`: copies `bytes` with loads and stores of the device's threads (a
   * kernel, no copy engine), unless *skip != 0 when it runs. dst, src and skip are
   * device-reachable addresses (device memory or registered host memory). */
  int (*stream_copy)(void *stream, void *dst, const void *src, size_t bytes,
                     const volatile uint32_t *skip);
  /* Enqueued on `stream`: dst = in[0] OP in[1] OP ... OP in[n-1], folded left to right with
   * the element functions of reduce_ops.h (REDUCE_POST on the last step: Avg), for count
   * elements, unless *skip != 0 when it runs (then nothing is written). 2 <= n <= 8. */
  int (*stream_reduce_n)(void *stream, void *dst, const void *const *in, int n, size_t count,
                         const struct reduce_op *op, const volatile uint32_t *skip);

  /* ---- single-rank communicators (group.c): a call is a copy on the caller's stream ---- */
  /* Enqueued on `stream`: copies `bytes` of device memory from src to dst (CUDA: cuMemcpyAsync,
   * the copy engine). */
  int (*stream_memcpy)(void *stream, void *dst, const void *src, size_t bytes);
} device_ops_t;

/* The device in use: the emulation when TUTTI_DEVICE_EMULATION=1, else the CUDA driver when it
 * is usable (libcuda loads, cuInit succeeds, the entry points exist), else NULL (host only). */
const device_ops_t *device_get(void);
/* The device in use when the calling thread has a current device context (CUDA: a context
 * current on the thread, as cudaSetDevice or any CUDA runtime call makes one), else NULL. Loads
 * no driver the process has not loaded already. */
const device_ops_t *device_current(void);
/* Makes ctx the calling thread's context where d is a device and it is not already; returns
 * the context the thread had, to give back with d->bind once *switched says it changed. */
void *device_switch(const device_ops_t *d, void *ctx, int *switched);
/* What the device says `p` is; host memory when there is no device. */
mem_kind_t device_mem_kind(const void *p);

extern const device_ops_t device_cuda_ops;
extern const device_ops_t device_emu_ops;
/* device_cuda.c: 0 when the driver's entry points the stream path needs are all there, else
 * why not (in `why`). */
int device_cuda_usable(char *why, size_t len);
/* The i-th driver entry point device_cuda.c uses, NULL past the last (for tests). */
const char *device_cuda_symbol(size_t i);

/* ---- device_emu.c: what protocol tests use to play the application's part ---- */

/* "Device" memory of the emulation: an address range the host cannot touch (any access is a
 * SIGSEGV), backed by host bytes reached through device_emu_view. Zero-filled. */
void *device_emu_alloc(size_t bytes);
void device_emu_free(void *p);
/* The host bytes behind emulated device memory p (p inside an allocation), or NULL. */
void *device_emu_view(const void *p);
/* Gives the calling thread a current device context (on = 1) or none (0, the default), as
 * cudaSetDevice would: current_ctx answers accordingly, and the device's identity (device_id)
 * is known only on a thread with a context, as cuCtxGetDevice's (TUTTI_DEVICE_EMULATION_CONTEXT=0
 * answers it on any thread). */
void device_emu_set_context(int on);
/* Streams: a thread each, running what is queued on it in order. */
void *device_emu_stream_create(void);
void device_emu_stream_destroy(void *stream);
/* Queues fn(arg) on the stream (the application's "kernel"). */
void device_emu_stream_call(void *stream, void (*fn)(void *), void *arg);
/* Marks the stream as being captured into a graph (stream_capturing answers 1) or not. */
void device_emu_stream_set_capturing(void *stream, int on);
/* Waits until everything queued so far on the stream ran (at most timeout_ms): 0, or -1 on
 * timeout. */
int device_emu_stream_sync(void *stream, int64_t timeout_ms);
/* What the emulation did in this process since the start, for tests that must show which path
 * ran: handles opened from other processes, reductions and copies between two pieces of device
 * memory (the peer path), copies between device and host memory (staging), copies and
 * reductions run on a stream (the small-call path). */
typedef struct device_emu_counts {
  uint64_t ipc_opens, dev_reduces, dev_copies, staging_copies;
  uint64_t stream_copies, stream_reduces; /* run on a stream (the small-call path) */
  uint64_t ldst_copies;                   /* copy_ldst between device memory (the peer path) */
  uint64_t stream_memcpys;                /* stream_memcpy (single-rank communicators) */
} device_emu_counts_t;
device_emu_counts_t device_emu_counts(void);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_DEVICE_H_ */
