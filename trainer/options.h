/* tutti-train's command line. */
#ifndef TRAINER_OPTIONS_H_
#define TRAINER_OPTIONS_H_

#include <stdint.h>

#include "data.h"
#include "model.h"
#include "optim.h"

typedef enum { LR_SCALE_AUTO, LR_SCALE_LINEAR, LR_SCALE_SQRT, LR_SCALE_NONE } lr_scaling_t;

typedef struct {
  model_kind_t model;
  optim_kind_t optim;
  int epochs, batch, accum, threads;
  float lr;         /* at the reference global batch; < 0: the optimizer's default */
  int lr_ref_batch; /* global batch at which --lr applies */
  lr_scaling_t lr_scaling;
  float momentum, weight_decay; /* weight_decay < 0: the optimizer's default */
  float warmup_epochs, final_lr_frac;
  float dropout;
  augment_t augment;
  int augment_set;
  uint64_t seed;
  double bucket_mb;
  int no_shard_optim; /* every rank applies the whole update (PyTorch DDP's way) */
  int no_factor;      /* reduce-scatter the MLP's fc1 gradient instead of its sufficient factors */
  const char *compress; /* --compress spec (tuttiCompressorParse); "none": exact all-reduces */
  int compress_warmup;  /* --compress-warmup steps; -1: the trainer's default (topk, powersgd) */
  int compress_min;     /* --compress-min-count: smaller tensors go exactly (topk, powersgd) */
  const char *data_dir;
  const char *checkpoint;
  int resume;
  int checkpoint_every; /* optimizer steps; 0: at the end of each epoch only */
  int64_t max_steps;    /* stop (and checkpoint) after this many steps in all; 0: no limit */
  const char *log_path;
  const char *dump_prefix;
  int no_eval;
  int log_every; /* progress line every N steps; 0: off; -1 (default): every 5 s of an epoch */
  int profile;   /* print where each step's time goes, per rank */
  int blas_info;
  int device_cuda;             /* --device cuda: train on the GPU (train_cuda.cu) */
  int train_limit, test_limit; /* use only the first N images; 0: all */
} options_t;

/* Parses argv into o (defaults first); prints usage and exits on --help or an error. */
void options_parse(int argc, char **argv, options_t *o);
/* The settings that shape the trajectory, as one line: stored in checkpoints, checked on resume. */
void options_config_string(const options_t *o, int global_batch, char *out, int len);
/* The learning rate after the scaling rule, for this global batch. */
float options_scaled_lr(const options_t *o, int global_batch);

#endif /* TRAINER_OPTIONS_H_ */
