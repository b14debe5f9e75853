/* Which device implementation the stream path uses (device.h), chosen once per process. */
#include "device.h"

#include <pthread.h>

#include "core.h"

/* Protocol tests only: the host emulation of the device (device_emu.c) instead of CUDA. */
TUTTI_PARAM(DeviceEmulation, "DEVICE_EMULATION", 0)

static const device_ops_t *device_in_use;
static pthread_once_t device_once = PTHREAD_ONCE_INIT;

static void device_choose(void) {
  if (tutti_param_DeviceEmulation()) {
    device_in_use = &device_emu_ops;
    INFO(SUB_INIT, "device: host emulation (TUTTI_DEVICE_EMULATION=1, protocol tests only)");
    return;
  }
  char why[256];
  if (device_cuda_usable(why, sizeof why) == 0) {
    device_in_use = &device_cuda_ops;
    INFO(SUB_INIT, "device: CUDA driver; device buffers and streams go through the proxy");
  } else {
    INFO(SUB_INIT, "device: none (%s); host buffers and the NULL stream only", why);
  }
}

const device_ops_t *device_get(void) {
  pthread_once(&device_once, device_choose);
  return device_in_use;
}

mem_kind_t device_mem_kind(const void *p) {
  const device_ops_t *d = device_get();
  return d ? d->mem_kind(p) : MEM_KIND_HOST;
}

const device_ops_t *device_current(void) {
  /* A thread with a current context has the driver loaded; where it is not, stay out of it
   * (loading it and cuInit would cost every host-only process on a GPU machine). */
  if (!tutti_param_DeviceEmulation() && !cuda_driver_in_process()) return NULL;
  const device_ops_t *d = device_get();
  return d && d->current_ctx() ? d : NULL;
}

void *device_switch(const device_ops_t *d, void *ctx, int *switched) {
  void *was = d ? d->current_ctx() : NULL;
  *switched = d && ctx != was;
  if (*switched) d->bind(ctx);
  return was;
}
