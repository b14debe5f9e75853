/* Checkpoints: everything a run needs to continue bit for bit, written atomically.
 *
 * Layout (little-endian, as this machine):
 *   magic "TUTTICK1" | ckpt_state_t | params (n floats) | optimizer arrays (nopt x n floats)
 *   | crc32 of all of the above
 * Randomness is counter-based (rng.h), so (epoch, step) is the whole sampler and RNG state. */
#ifndef TRAINER_CHECKPOINT_H_
#define TRAINER_CHECKPOINT_H_

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char config[512];      /* the settings that shape the trajectory; must match to resume */
  int64_t epoch;         /* epoch in progress, 0-based */
  int64_t step_in_epoch; /* optimizer steps already done in that epoch */
  int64_t global_step;   /* optimizer steps done in all */
  int64_t adam_t;        /* AdamW's bias-correction step count */
  uint64_t nparams;
  int32_t nopt; /* optimizer state arrays */
  int32_t pad;
  double train_sums[3]; /* loss sum, correct, samples of the epoch so far, over all ranks */
  double elapsed_s;     /* training time before this checkpoint */
} ckpt_state_t;

/* Writes path.tmp.<pid>, fsyncs it, renames it over path, fsyncs the folder. 0 or -1. */
int ckpt_save(const char *path, const ckpt_state_t *st, const float *params, float *const *opt,
              int nopt);
/* Reads path into st, params (st->nparams after the call must equal n) and opt.
 * Returns 0, 1 when path does not exist, -1 (with a message) when it is unusable. */
int ckpt_load(const char *path, ckpt_state_t *st, float *params, size_t n, float **opt, int nopt);

#endif /* TRAINER_CHECKPOINT_H_ */
