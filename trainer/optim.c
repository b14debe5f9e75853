/* SGD with momentum and weight decay, AdamW, and warmup + cosine decay.
 *
 * Update rules are PyTorch's (torch.optim.SGD with dampening 0, torch.optim.AdamW), so a run
 * here and in PyTorch follow the same trajectory up to rounding. Weight decay applies to every
 * tensor, biases included, as PyTorch does by default. */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h" /* TRAINER_SIMD */

int optim_parse(const char *name, optim_kind_t *kind) {
  if (strcmp(name, "sgd") == 0) return *kind = OPT_SGD, 0;
  if (strcmp(name, "adamw") == 0) return *kind = OPT_ADAMW, 0;
  return -1;
}

const char *optim_name(optim_kind_t kind) {
  return kind == OPT_SGD ? "sgd" : "adamw";
}

int optim_create(optim_t *o, optim_kind_t kind, size_t n) {
  memset(o, 0, sizeof(*o));
  o->kind = kind, o->n = n;
  o->momentum = 0.9f, o->beta1 = 0.9f, o->beta2 = 0.999f, o->eps = 1e-8f;
  o->m = calloc(n, sizeof(float));
  if (kind == OPT_ADAMW) o->v = calloc(n, sizeof(float));
  if (!o->m || (kind == OPT_ADAMW && !o->v)) return optim_free(o), -1;
  return 0;
}

void optim_free(optim_t *o) {
  free(o->m);
  free(o->v);
  o->m = o->v = NULL;
}

int optim_state_arrays(const optim_t *o, float **arrays) {
  arrays[0] = o->m;
  arrays[1] = o->v;
  return o->kind == OPT_ADAMW ? 2 : 1;
}

/* g' = g + wd * p;  buf = momentum * buf + g';  p -= lr * buf   (buf starts at g' in PyTorch;
 * starting from zero gives the same first value). */
TRAINER_SIMD static void sgd_update(optim_t *o, float *p, const float *g, size_t lo, size_t hi) {
  float mu = o->momentum, wd = o->weight_decay, lr = o->lr;
  float *buf = o->m;
  for (size_t i = lo; i < hi; i++) {
    float gi = g[i] + wd * p[i];
    buf[i] = mu * buf[i] + gi;
    p[i] -= lr * buf[i];
  }
}

/* p *= 1 - lr * wd;  m, v = moving averages of g, g^2;
 * p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)   (PyTorch's form, with the
 * division by sqrt(1 - beta2^t) done as a multiplication by its inverse: one division per
 * element instead of two, which is what bounds this loop). */
TRAINER_SIMD static void adamw_update(optim_t *o, float *p, const float *g, size_t lo, size_t hi) {
  float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
  float step = o->step_size, decay = o->decay, inv_bc2 = o->inv_bc2_sqrt;
  float *m = o->m, *v = o->v;
  for (size_t i = lo; i < hi; i++) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] = p[i] * decay - step * m[i] / (sqrtf(v[i]) * inv_bc2 + eps);
  }
}

void optim_begin_step(optim_t *o, float lr) {
  o->lr = lr;
  if (o->kind != OPT_ADAMW) return;
  o->t++;
  float bc1 = 1.0f - powf(o->beta1, (float)o->t);
  o->step_size = lr / bc1, o->decay = 1.0f - lr * o->weight_decay;
  o->inv_bc2_sqrt = 1.0f / sqrtf(1.0f - powf(o->beta2, (float)o->t));
}

void optim_update(optim_t *o, float *params, const float *grads, size_t lo, size_t hi) {
  if (o->kind == OPT_SGD)
    sgd_update(o, params, grads, lo, hi);
  else
    adamw_update(o, params, grads, lo, hi);
}

void optim_step(optim_t *o, float *params, const float *grads, float lr) {
  optim_begin_step(o, lr);
  optim_update(o, params, grads, 0, o->n);
}

float lr_at(int64_t step, int64_t total, int64_t warmup, float lr, float final_frac) {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  int64_t span = total - warmup;
  if (span <= 1) return lr;
  double progress = (double)(step - warmup) / (double)(span - 1); /* 0 .. 1 at the last step */
  double cosine = 0.5 * (1.0 + cos(M_PI * progress));
  return (float)(lr * (final_frac + (1.0 - final_frac) * cosine));
}
