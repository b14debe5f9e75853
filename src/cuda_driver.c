/* The CUDA driver, loaded at run time (see cuda_driver.h).
 *
 * Only two driver entry points are needed, declared here with the driver's ABI (cuda.h is not
 * needed to build this file, so the host-only build detects device pointers too):
 *   CUresult cuInit(unsigned flags)
 *   CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
 * cuPointerGetAttribute fails (CUDA_ERROR_INVALID_VALUE) on memory the driver does not know,
 * which is how ordinary host memory answers.
 */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "core.h"

enum {
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, /* CUmemorytype */
  CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,  /* unsigned int (bool) */
  CU_MEMORYTYPE_DEVICE = 2,
};

typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_pointer_get_attribute_fn)(void *, int, unsigned long long);

static struct {
  pthread_once_t once;
  cu_pointer_get_attribute_fn get_attr; /* NULL: no usable driver */
  void *lib;                            /* the driver, open while usable */
  char state[256];
} drv = {.once = PTHREAD_ONCE_INIT};

/* The driver library: TUTTI_CUDA_DRIVER_LIB, else libcuda.so.1. */
static const char *drv_name(void) {
  const char *name = tutti_getenv("CUDA_DRIVER_LIB");
  return name ? name : "libcuda.so.1";
}

static void drv_load(void) {
  const char *name = drv_name();
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(drv.state, sizeof drv.state, "%s not loadable: %s", name, dlerror());
  } else {
    cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
    cu_pointer_get_attribute_fn get =
        (cu_pointer_get_attribute_fn)dlsym(lib, "cuPointerGetAttribute");
    int rc = init && get ? init(0) : -1;
    if (rc == 0) {
      drv.get_attr = get;
      drv.lib = lib;
      snprintf(drv.state, sizeof drv.state, "ready");
    } else if (rc == -1) {
      snprintf(drv.state, sizeof drv.state, "%s lacks cuInit or cuPointerGetAttribute", name);
    } else {
      snprintf(drv.state, sizeof drv.state, "cuInit failed (CUDA error %d)", rc);
    }
    /* The library stays open when usable: get_attr points into it. */
    if (!drv.get_attr) dlclose(lib);
  }
  INFO(SUB_INIT, "CUDA driver: %s%s", drv.state,
       drv.get_attr ? "" : "; every buffer is host memory");
}

int cuda_driver_ready(void) {
  pthread_once(&drv.once, drv_load);
  return drv.get_attr != NULL;
}

const char *cuda_driver_state(void) {
  pthread_once(&drv.once, drv_load);
  return drv.state;
}

mem_kind_t cuda_driver_mem_kind(const void *p) {
  pthread_once(&drv.once, drv_load);
  if (!drv.get_attr || !p) return MEM_KIND_HOST;
  unsigned long long ptr = (unsigned long long)(uintptr_t)p;
  unsigned int type = 0, managed = 0;
  if (drv.get_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) != 0) return MEM_KIND_HOST;
  if (drv.get_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr) == 0 && managed)
    return MEM_KIND_HOST; /* managed memory is readable by the host */
  return type == CU_MEMORYTYPE_DEVICE ? MEM_KIND_DEVICE : MEM_KIND_HOST;
}

void *cuda_driver_symbol(const char *name) {
  pthread_once(&drv.once, drv_load);
  return drv.lib ? dlsym(drv.lib, name) : NULL;
}

int cuda_driver_in_process(void) {
  void *lib = dlopen(drv_name(), RTLD_LAZY | RTLD_NOLOAD);
  if (lib) dlclose(lib);
  return lib != NULL;
}
