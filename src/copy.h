/* Bulk copies for the engine (see copy.c). */
#ifndef TUTTI_COPY_H_
#define TUTTI_COPY_H_
#include <stddef.h>
#include <stdint.h>
/* memcpy with streaming stores (falls back to memcpy where unsupported). */
void copy_stream(void *dst, const void *src, size_t bytes);
#endif
