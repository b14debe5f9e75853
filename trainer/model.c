/* The MLP and the CNN: parameter layout, initialization, forward and backward. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "layers.h"
#include "rng.h"
#include "tensor_mem.h"

#define MLP_H1 512
#define MLP_H2 256
#define CNN_C1 32
#define CNN_C2 64
#define CNN_K 5
#define CNN_FC 512
#define CNN_FLAT (7 * 7 * CNN_C2) /* 3136 */

int model_parse(const char *name, model_kind_t *kind) {
  if (strcmp(name, "mlp") == 0) return *kind = MODEL_MLP, 0;
  if (strcmp(name, "cnn") == 0) return *kind = MODEL_CNN, 0;
  return -1;
}

const char *model_name(model_kind_t kind) {
  return kind == MODEL_MLP ? "mlp" : "cnn";
}

/* ---------------------------------------------------------------- layout */

/* fc1's weight gradient is computed in blocks of MLP_FC1_BLOCK units, see mlp_fc1_backward. */
#define MLP_FC1_BLOCK 64

typedef struct {
  const char *name;
  size_t count;
  int fan_in;
  int blocks; /* backward finalizes the gradient in this many blocks of rows (0: whole) */
} tensor_spec_t;

static const tensor_spec_t mlp_tensors[] = {
    {"fc1.weight", (size_t)MLP_H1 *DATA_PIXELS, DATA_PIXELS, MLP_H1 / MLP_FC1_BLOCK},
    {"fc1.bias", MLP_H1, DATA_PIXELS},
    {"fc2.weight", (size_t)MLP_H2 *MLP_H1, MLP_H1},
    {"fc2.bias", MLP_H2, MLP_H1},
    {"fc3.weight", (size_t)DATA_CLASSES *MLP_H2, MLP_H2},
    {"fc3.bias", DATA_CLASSES, MLP_H2},
};

static const tensor_spec_t cnn_tensors[] = {
    {"conv1.weight", CNN_C1 *CNN_K *CNN_K, CNN_K *CNN_K},
    {"conv1.bias", CNN_C1, CNN_K *CNN_K},
    {"conv2.weight", CNN_C2 *CNN_K *CNN_K *CNN_C1, CNN_K *CNN_K *CNN_C1},
    {"conv2.bias", CNN_C2, CNN_K *CNN_K *CNN_C1},
    {"fc1.weight", (size_t)CNN_FC *CNN_FLAT, CNN_FLAT},
    {"fc1.bias", CNN_FC, CNN_FLAT},
    {"fc2.weight", DATA_CLASSES *CNN_FC, CNN_FC},
    {"fc2.bias", DATA_CLASSES, CNN_FC},
};

/* Lays the tensors out back to back and points the named views of params and grads at them. */
static void layout_params(model_t *m, const tensor_spec_t *spec, int n) {
  float **pviews = (float **)&m->p, **gviews = (float **)&m->g; /* views in tensor order */
  size_t off = 0;
  m->ntensors = n;
  for (int t = 0; t < n; t++) {
    int blocks = spec[t].blocks > 0 ? spec[t].blocks : 1;
    m->tensors[t] = (param_tensor_t){spec[t].name, off, spec[t].count, spec[t].fan_in, blocks};
    off += spec[t].count;
  }
  m->nparams = off;
  m->params = tensor_alloc(off * sizeof(float));
  m->grads = tensor_alloc(off * sizeof(float));
  for (int t = 0; m->params && m->grads && t < n; t++) {
    pviews[t] = m->params + m->tensors[t].offset;
    gviews[t] = m->grads + m->tensors[t].offset;
  }
}

/* Carves `count` elements of `size` bytes off *cursor (64-byte aligned); NULL base: sizing. */
static void *carve(char **cursor, size_t count, size_t size) {
  void *p = *cursor;
  *cursor += (count * size + 63) & ~(size_t)63;
  return p;
}

static void carve_mlp(model_t *m, char **c, long B) {
  mlp_acts_t *a = &m->a.mlp;
  a->h1 = carve(c, B * MLP_H1, 4), a->h2 = carve(c, B * MLP_H2, 4);
  a->mask1 = carve(c, B * MLP_H1, 4), a->mask2 = carve(c, B * MLP_H2, 4);
  a->dh1 = carve(c, B * MLP_H1, 4), a->dh2 = carve(c, B * MLP_H2, 4);
}

static void carve_cnn(model_t *m, char **c, long B) {
  cnn_acts_t *a = &m->a.cnn;
  conv_shape_t s1 = {(int)B, 28, 28, 1, CNN_C1, CNN_K},
               s2 = {(int)B, 14, 14, CNN_C1, CNN_C2, CNN_K};
  long scratch = conv2d_scratch_floats(s1) > conv2d_scratch_floats(s2) ? conv2d_scratch_floats(s1)
                                                                       : conv2d_scratch_floats(s2);
  a->cols = carve(c, scratch, 4);
  a->dcols = carve(c, scratch, 4);
  a->c1 = carve(c, B * 28 * 28 * CNN_C1, 4);
  a->p1 = carve(c, B * 14 * 14 * CNN_C1, 4);
  a->arg1 = carve(c, B * 14 * 14 * CNN_C1, 4);
  a->c2 = carve(c, B * 14 * 14 * CNN_C2, 4);
  a->p2 = carve(c, B * CNN_FLAT, 4);
  a->arg2 = carve(c, B * CNN_FLAT, 4);
  a->f1 = carve(c, B * CNN_FC, 4);
  a->mask1 = carve(c, B * CNN_FC, 4);
  a->dc1 = carve(c, B * 28 * 28 * CNN_C1, 4);
  a->dp1 = carve(c, B * 14 * 14 * CNN_C1, 4);
  a->dc2 = carve(c, B * 14 * 14 * CNN_C2, 4);
  a->dp2 = carve(c, B * CNN_FLAT, 4);
  a->df1 = carve(c, B * CNN_FC, 4);
}

static void carve_acts(model_t *m, char **c) {
  long B = m->max_batch;
  if (m->kind == MODEL_MLP)
    carve_mlp(m, c, B);
  else
    carve_cnn(m, c, B);
  m->logits = carve(c, B * DATA_CLASSES, 4);
  m->probs = carve(c, B * DATA_CLASSES, 4);
  m->losses = carve(c, B, 4);
  m->dlogits = carve(c, B * DATA_CLASSES, 4);
}

int model_create(model_t *m, model_kind_t kind, int max_batch) {
  memset(m, 0, sizeof(*m));
  m->kind = kind, m->max_batch = max_batch;
  if (kind == MODEL_MLP)
    layout_params(m, mlp_tensors, 6);
  else
    layout_params(m, cnn_tensors, 8);
  char *cursor = NULL; /* first pass: size the arena */
  carve_acts(m, &cursor);
  size_t bytes = (size_t)cursor;
  m->act_arena = tensor_alloc(bytes);
  cursor = m->act_arena;
  if (!m->params || !m->grads || !m->act_arena) return model_free(m), -1;
  carve_acts(m, &cursor);
  return 0;
}

void model_free(model_t *m) {
  tensor_free(m->params);
  tensor_free(m->grads);
  tensor_free(m->act_arena);
  memset(m, 0, sizeof(*m));
}

void model_init_params(model_t *m, uint64_t seed) {
  for (int t = 0; t < m->ntensors; t++) {
    const param_tensor_t *pt = &m->tensors[t];
    rng_t r = {rng_key(seed, RNG_INIT, (uint64_t)t, 0)};
    float bound = 1.0f / sqrtf((float)pt->fan_in);
    for (size_t i = 0; i < pt->count; i++)
      m->params[pt->offset + i] = (2.0f * rng_uniform(&r) - 1.0f) * bound;
  }
}

void model_zero_grad(model_t *m) {
  memset(m->grads, 0, m->nparams * sizeof(float));
  m->grads_stale = 0;
}

/* Floats from the start of tensor first to the end of tensor first + n - 1. */
static size_t tensors_span(const model_t *m, int first, int n) {
  const param_tensor_t *last = &m->tensors[first + n - 1];
  return last->offset + last->count - m->tensors[first].offset;
}

/* Tells the data-parallel layer that tensors [first, first + n) have their final gradient. */
static void grads_ready(model_t *m, int first, int n) {
  if (m->on_grad) m->on_grad(m->on_grad_ctx, m->tensors[first].offset, tensors_span(m, first, n));
}

/* Waits (sharded optimizer) until tensors [first, first + n) hold this step's parameters. */
static void params_needed(model_t *m, int first, int n) {
  if (m->on_params)
    m->on_params(m->on_grad_ctx, m->tensors[first].offset, tensors_span(m, first, n));
}

/* The same for rows [r0, r1) of weight tensor t, rows of `cols` floats. */
static void rows_ready(model_t *m, int t, int r0, int r1, int cols) {
  if (m->on_grad)
    m->on_grad(m->on_grad_ctx, m->tensors[t].offset + (size_t)r0 * cols, (size_t)(r1 - r0) * cols);
}

/* Dropout of layer `layer` on h (B, n), in place, when training with dropout. */
static void maybe_dropout(model_t *m, float *h, float *mask, int B, int n, int layer) {
  if (m->keys && m->dropout > 0.0f)
    dropout_forward(h, mask, h, B, n, m->dropout, m->keys, (uint64_t)layer << 48);
}

static void maybe_dropout_backward(model_t *m, float *dh, const float *mask, long n) {
  if (m->keys && m->dropout > 0.0f) dropout_backward(dh, dh, mask, n);
}

/* ---------------------------------------------------------------- mlp */

/* fc1's weight gradient is computed in blocks of MLP_FC1_BLOCK units. It is three quarters of
 * the model (1.6 MB) and the last gradient backward produces: whole, its reduction could only
 * start once backward is over. In blocks (last units first, the order of the gradient
 * buckets), each block is handed to the data-parallel layer while the next one is computed, so
 * that a bucket holding the first blocks is reduced behind the rest of backward. The blocks
 * are the same sgemm cut along its output rows, which gives the same bits as one piece (checked
 * against it). Forward is not cut the same way: a block's product without its bias rounds
 * differently at different batch sizes, and N ranks x batch b must match 1 rank x batch N*b. */
static void mlp_fc1_backward(model_t *m, int B, int acc) {
  mlp_params_t *g = &m->g.mlp;
  const float *dh1 = m->a.mlp.dh1;
  linear_backward_bias(g->fc1b, dh1, B, MLP_H1, acc);
  grads_ready(m, 1, 1);
  for (int u1 = MLP_H1; u1 > 0; u1 -= MLP_FC1_BLOCK) {
    linear_backward_weight_units(g->fc1w, dh1, m->x, B, DATA_PIXELS, MLP_H1, u1 - MLP_FC1_BLOCK, u1,
                                 acc);
    rows_ready(m, 0, u1 - MLP_FC1_BLOCK, u1, DATA_PIXELS);
  }
}

static void mlp_forward(model_t *m, const float *x, int B) {
  mlp_params_t *p = &m->p.mlp;
  mlp_acts_t *a = &m->a.mlp;
  params_needed(m, 0, 2);
  linear_forward(a->h1, x, p->fc1w, p->fc1b, B, DATA_PIXELS, MLP_H1);  // (B, 512)
  relu_forward(a->h1, a->h1, (long)B * MLP_H1);
  maybe_dropout(m, a->h1, a->mask1, B, MLP_H1, 1);
  params_needed(m, 2, 2);
  linear_forward(a->h2, a->h1, p->fc2w, p->fc2b, B, MLP_H1, MLP_H2);  // (B, 256)
  relu_forward(a->h2, a->h2, (long)B * MLP_H2);
  maybe_dropout(m, a->h2, a->mask2, B, MLP_H2, 2);
  params_needed(m, 4, 2);
  linear_forward(m->logits, a->h2, p->fc3w, p->fc3b, B, MLP_H2, DATA_CLASSES);  // (B, 10)
}

/* Backward produces tensors in reverse order: fc3 (4, 5), fc2 (2, 3), fc1 (1, then 0 in
 * blocks). A unit that dropout zeroed is 0 in h, so relu_backward's "h > 0" covers both masks
 * once dropout's scale is applied. */
static void mlp_backward(model_t *m, int B, int acc) {
  mlp_params_t *p = &m->p.mlp, *g = &m->g.mlp;
  mlp_acts_t *a = &m->a.mlp;
  linear_backward(a->dh2, g->fc3w, g->fc3b, m->dlogits, a->h2, p->fc3w, B, MLP_H2, DATA_CLASSES,
                  acc);
  grads_ready(m, 4, 2);
  maybe_dropout_backward(m, a->dh2, a->mask2, (long)B * MLP_H2);
  relu_backward(a->dh2, a->dh2, a->h2, (long)B * MLP_H2);
  linear_backward(a->dh1, g->fc2w, g->fc2b, a->dh2, a->h1, p->fc2w, B, MLP_H1, MLP_H2, acc);
  grads_ready(m, 2, 2);
  maybe_dropout_backward(m, a->dh1, a->mask1, (long)B * MLP_H1);
  relu_backward(a->dh1, a->dh1, a->h1, (long)B * MLP_H1);
  if (!m->defer_first) mlp_fc1_backward(m, B, acc);
}

/* ---------------------------------------------------------------- cnn */

/* Each block is conv -> maxpool -> ReLU: the same values as conv -> ReLU -> maxpool (ReLU is
 * monotonic, so it commutes with max), with the ReLU on a 4x smaller tensor. */
static void cnn_forward(model_t *m, const float *x, int B) {
  cnn_params_t *p = &m->p.cnn;
  cnn_acts_t *a = &m->a.cnn;
  conv_shape_t s1 = {B, 28, 28, 1, CNN_C1, CNN_K}, s2 = {B, 14, 14, CNN_C1, CNN_C2, CNN_K};
  params_needed(m, 0, 2);
  conv2d_forward(a->c1, a->cols, x, p->conv1w, p->conv1b, s1);  // (B, 28, 28, 32)
  maxpool2_forward(a->p1, a->arg1, a->c1, B, 28, 28, CNN_C1);   // (B, 14, 14, 32)
  relu_forward(a->p1, a->p1, (long)B * 14 * 14 * CNN_C1);
  params_needed(m, 2, 2);
  conv2d_forward(a->c2, a->cols, a->p1, p->conv2w, p->conv2b, s2);  // (B, 14, 14, 64)
  maxpool2_forward(a->p2, a->arg2, a->c2, B, 14, 14, CNN_C2);       // (B, 7, 7, 64)
  relu_forward(a->p2, a->p2, (long)B * CNN_FLAT);
  params_needed(m, 4, 2);
  linear_forward(a->f1, a->p2, p->fc1w, p->fc1b, B, CNN_FLAT, CNN_FC);  // (B, 512)
  relu_forward(a->f1, a->f1, (long)B * CNN_FC);
  maybe_dropout(m, a->f1, a->mask1, B, CNN_FC, 1);
  params_needed(m, 6, 2);
  linear_forward(m->logits, a->f1, p->fc2w, p->fc2b, B, CNN_FC, DATA_CLASSES);  // (B, 10)
}

/* Backward produces tensors in reverse order: fc2 (6, 7), fc1 (4, 5), conv2 (2, 3), conv1. */
static void cnn_backward(model_t *m, int B, int acc) {
  cnn_params_t *p = &m->p.cnn, *g = &m->g.cnn;
  cnn_acts_t *a = &m->a.cnn;
  conv_shape_t s1 = {B, 28, 28, 1, CNN_C1, CNN_K}, s2 = {B, 14, 14, CNN_C1, CNN_C2, CNN_K};
  linear_backward(a->df1, g->fc2w, g->fc2b, m->dlogits, a->f1, p->fc2w, B, CNN_FC, DATA_CLASSES,
                  acc);
  grads_ready(m, 6, 2);
  maybe_dropout_backward(m, a->df1, a->mask1, (long)B * CNN_FC);
  relu_backward(a->df1, a->df1, a->f1, (long)B * CNN_FC);
  linear_backward(a->dp2, g->fc1w, g->fc1b, a->df1, a->p2, p->fc1w, B, CNN_FLAT, CNN_FC, acc);
  grads_ready(m, 4, 2);
  relu_backward(a->dp2, a->dp2, a->p2, (long)B * CNN_FLAT);
  maxpool2_backward(a->dc2, a->dp2, a->arg2, B, 14, 14, CNN_C2);
  conv2d_backward(a->dp1, g->conv2w, g->conv2b, a->cols, a->dcols, a->dc2, a->p1, p->conv2w, s2,
                  acc);
  grads_ready(m, 2, 2);
  relu_backward(a->dp1, a->dp1, a->p1, (long)B * 14 * 14 * CNN_C1);
  maxpool2_backward(a->dc1, a->dp1, a->arg1, B, 28, 28, CNN_C1);
  conv2d_backward(NULL, g->conv1w, g->conv1b, a->cols, NULL, a->dc1, m->x, p->conv1w, s1, acc);
  grads_ready(m, 0, 2);
}

/* ---------------------------------------------------------------- both */

void model_forward(model_t *m, const float *x, const uint8_t *y, int B) {
  m->x = x, m->batch = B;
  if (m->kind == MODEL_MLP)
    mlp_forward(m, x, B);
  else
    cnn_forward(m, x, B);
  softmax_xent_forward(m->probs, m->losses, m->logits, y, B, DATA_CLASSES);
}

void model_backward(model_t *m, const uint8_t *y, int B, float scale) {
  int acc = !m->grads_stale; /* stale: overwrite instead of adding (see model_forget_grad) */
  softmax_xent_backward(m->dlogits, m->probs, y, B, DATA_CLASSES, scale);
  if (m->kind == MODEL_MLP)
    mlp_backward(m, B, acc);
  else
    cnn_backward(m, B, acc);
  m->grads_stale = 0;
}

int model_first_linear(const model_t *m, int *in, int *out, const float **dout) {
  if (m->kind != MODEL_MLP) return 0;
  *in = DATA_PIXELS, *out = MLP_H1, *dout = m->a.mlp.dh1;
  return 1;
}

void model_forget_grad(model_t *m) {
  m->grads_stale = 1;
}

void model_score(const model_t *m, const uint8_t *y, int B, double *loss_sum, int *correct) {
  double loss = 0.0;
  int ok = 0;
  for (int b = 0; b < B; b++) {
    const float *z = m->logits + (long)b * DATA_CLASSES;
    int best = 0;
    for (int v = 1; v < DATA_CLASSES; v++) best = z[v] > z[best] ? v : best;
    ok += best == y[b];
    loss += m->losses[b];
  }
  *loss_sum = loss, *correct = ok;
}
