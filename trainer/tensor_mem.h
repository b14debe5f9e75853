/* Where the trainer's big arrays live (tensor_mem.c): parameters, gradients, activations. */
#ifndef TRAINER_TENSOR_MEM_H_
#define TRAINER_TENSOR_MEM_H_

#include <stddef.h>

/* Zeroed, 64-byte aligned memory; NULL when out of memory. */
void *tensor_alloc(size_t bytes);
void tensor_free(void *p);

/* Every later tensor_alloc takes its memory from alloc (zeroed, 64-byte aligned, or NULL) and
 * gives it back through release; NULL, NULL: the heap (the default). */
void tensor_alloc_use(void *(*alloc)(size_t bytes), void (*release)(void *p));

#endif
