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
TRAINER_SIMD static void sgd_step(optim_t *o, float *p, const float *g, float lr) {
  float mu = o->momentum, wd = o->weight_decay;
  for (size_t i = 0; i < o->n; i++) {
    float gi = g[i] + wd * p[i];
    o->m[i] = mu * o->m[i] + gi;
    p[i] -= lr * o->m[i];
  }
}

/* p *= 1 - lr * wd;  m, v = moving averages of g, g^2;
 * p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)   (PyTorch's form). */
TRAINER_SIMD static void adamw_step(optim_t *o, float *p, const float *g, float lr) {
  o->t++;
  float b1 = o->beta1, b2 = o->beta2;
  float bc1 = 1.0f - powf(b1, (float)o->t), bc2_sqrt = sqrtf(1.0f - powf(b2, (float)o->t));
  float step = lr / bc1, decay = 1.0f - lr * o->weight_decay;
  for (size_t i = 0; i < o->n; i++) {
    o->m[i] = b1 * o->m[i] + (1.0f - b1) * g[i];
    o->v[i] = b2 * o->v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] = p[i] * decay - step * o->m[i] / (sqrtf(o->v[i]) / bc2_sqrt + o->eps);
  }
}

void optim_step(optim_t *o, float *params, const float *grads, float lr) {
  if (o->kind == OPT_SGD)
    sgd_step(o, params, grads, lr);
  else
    adamw_step(o, params, grads, lr);
}

float lr_at(int64_t step, int64_t total, int64_t warmup, float lr, float final_frac) {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  int64_t span = total - warmup;
  if (span <= 1) return lr;
  double progress = (double)(step - warmup) / (double)(span - 1); /* 0 .. 1 at the last step */
  double cosine = 0.5 * (1.0 + cos(M_PI * progress));
  return (float)(lr * (final_frac + (1.0 - final_frac) * cosine));
}
