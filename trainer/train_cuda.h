/* tutti-train --device cuda (train_cuda.cu): the MLP on a GPU, gradients all-reduced on the
 * device. Built with the CUDA variant only; without it, train.c refuses --device cuda. */
#ifndef TRAINER_TRAIN_CUDA_H_
#define TRAINER_TRAIN_CUDA_H_

#include "data.h"
#include "options.h"
#include "tutti.h"

/* 0 when this process can train with --device cuda and these options; else prints why not
 * (no CUDA device, an option the GPU trainer lacks) and returns 2. */
int train_cuda_usable(const options_t *o);
/* Trains; comm is NULL for a single process. Returns the process's exit status. */
int train_cuda_run(const options_t *o, ncclComm_t comm, const dataset_t *train,
                   const dataset_t *test);

#endif /* TRAINER_TRAIN_CUDA_H_ */
