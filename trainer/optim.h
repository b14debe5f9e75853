/* Optimizers (PyTorch's update rules, so runs compare with torch.optim) and the schedule. */
#ifndef TRAINER_OPTIM_H_
#define TRAINER_OPTIM_H_

#include <stddef.h>
#include <stdint.h>

typedef enum { OPT_SGD = 0, OPT_ADAMW = 1 } optim_kind_t;

typedef struct {
  optim_kind_t kind;
  float momentum;     /* sgd */
  float beta1, beta2; /* adamw */
  float eps;          /* adamw */
  float weight_decay; /* sgd: L2 added to the gradient; adamw: decoupled */
  size_t n;
  int64_t t; /* adamw: steps taken, for bias correction */
  /* this step's constants, set by optim_begin_step: */
  float lr, step_size, decay, inv_bc2_sqrt;
  float *m; /* (n) sgd: momentum buffer; adamw: first moment */
  float *v; /* (n) adamw: second moment; NULL for sgd */
} optim_t;

int optim_parse(const char *name, optim_kind_t *kind);
const char *optim_name(optim_kind_t kind);

int optim_create(optim_t *o, optim_kind_t kind, size_t n);
void optim_free(optim_t *o);
/* One update of params (n) with grads (n) at learning rate lr. */
void optim_step(optim_t *o, float *params, const float *grads, float lr);
/* The same in pieces, for a sharded optimizer (each rank updates its own ranges of the
 * parameters): optim_begin_step once per step, then optim_update on disjoint ranges [lo, hi)
 * of params, grads and the state, covering whatever this rank owns. The update is elementwise,
 * so the pieces give the same bits as one optim_step. */
void optim_begin_step(optim_t *o, float lr);
void optim_update(optim_t *o, float *params, const float *grads, size_t lo, size_t hi);
/* Floats of state (momentum / moments) to save, broadcast or compare: 1 or 2 arrays of n. */
int optim_state_arrays(const optim_t *o, float **arrays);

/* Learning rate of step `step` (0-based) of `total`: linear warmup from lr/warmup to lr over
 * `warmup` steps, then cosine decay to lr * final_frac at the last step. */
float lr_at(int64_t step, int64_t total, int64_t warmup, float lr, float final_frac);

#endif /* TRAINER_OPTIM_H_ */
