/* The CUDA driver, loaded at run time: which memory a user's pointer is.
 *
 * libtutti.so never links libcuda: the first question opens it with dlopen (TUTTI_CUDA_DRIVER_LIB,
 * default libcuda.so.1) and calls cuInit. No library, no cuInit, or no device: every pointer is
 * host memory, exactly as in a build without CUDA (a device pointer cannot exist without a
 * driver). The answer is per call: the caller asks for every buffer it is given.
 */
#ifndef TUTTI_CUDA_DRIVER_H_
#define TUTTI_CUDA_DRIVER_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MEM_KIND_HOST = 0, MEM_KIND_DEVICE = 1 } mem_kind_t;

/* Host for any pointer the driver does not own as device memory (malloc'ed, pinned or managed
 * memory; anything when there is no driver). */
mem_kind_t cuda_driver_mem_kind(const void *p);
int cuda_driver_ready(void); /* the driver loaded and knows device pointers */
/* "ready", or why the driver is not used ("libcuda.so.1 not loadable: ...", "cuInit failed
 * (CUDA error 34)"), after loading it if not done yet. For logs and tests. */
const char *cuda_driver_state(void);
/* An entry point of the loaded driver (dlsym), NULL when there is no usable driver or no such
 * symbol; for device_cuda.c. */
void *cuda_driver_symbol(const char *name);
/* 1 when the process has the driver library loaded already (nothing is loaded to find out). */
int cuda_driver_in_process(void);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_CUDA_DRIVER_H_ */
