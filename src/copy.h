/* Bulk copies for the engine (see copy.c). */
#ifndef TUTTI_COPY_H_
#define TUTTI_COPY_H_
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
/* memcpy for the engine's data: a vector loop where the destination's page offset is 1-63
 * bytes past the source's (copy.c says why), memcpy otherwise. No overlap, as memcpy. */
void copy_bytes(void *dst, const void *src, size_t bytes);
/* 1 where copy_bytes takes its vector loop for these arguments, 0 where it calls memcpy. */
int copy_uses_vector(const void *dst, const void *src, size_t bytes);
/* memcpy with streaming stores (falls back to copy_bytes where unsupported). */
void copy_stream(void *dst, const void *src, size_t bytes);
/* copy_stream of src into each of dst[0..k): two destinations per load of each source line where
 * their addresses agree modulo 64 (copy.c). */
void copy_stream_multi(char *const *dst, int k, const void *src, size_t bytes);
/* copy_bytes of src into each of dst[0..k): two destinations per load of each source line, plain
 * stores (copy.c). */
void copy_bytes_multi(char *const *dst, int k, const void *src, size_t bytes);
#ifdef __cplusplus
}
#endif
#endif
