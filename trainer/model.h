/* The two models of the reference trainer, llm.c style: all parameters carved out of one
 * allocation (so are their gradients, with the same layout), all activations out of another,
 * and a forward/backward pair per model written out layer by layer.
 *
 *   mlp  784 -> 512 -> ReLU -> 256 -> ReLU -> 10                          535,818 parameters
 *   cnn  conv5x5 1->32, maxpool2, ReLU -> conv5x5 32->64, maxpool2, ReLU
 *        -> 3136 -> 512 -> ReLU -> 10                                     1,663,370 parameters
 * with optional dropout after each hidden ReLU of the fully connected layers (--dropout).
 */
#ifndef TRAINER_MODEL_H_
#define TRAINER_MODEL_H_

#include <stddef.h>
#include <stdint.h>

typedef enum { MODEL_MLP = 0, MODEL_CNN = 1 } model_kind_t;

#define MODEL_MAX_TENSORS 8

typedef struct {
  const char *name;
  size_t offset, count; /* in floats, into params and grads */
  int fan_in;           /* inputs per output, for the initialization */
  int blocks;           /* backward finalizes the gradient in this many equal blocks of rows */
} param_tensor_t;

typedef struct { /* views into params (or grads) */
  float *fc1w;   /* (512, 784) */
  float *fc1b;   /* (512) */
  float *fc2w;   /* (256, 512) */
  float *fc2b;   /* (256) */
  float *fc3w;   /* (10, 256) */
  float *fc3b;   /* (10) */
} mlp_params_t;

typedef struct {
  float *h1, *h2;       /* (B, 512), (B, 256), after ReLU (and dropout when training) */
  float *mask1, *mask2; /* dropout masks, same shapes */
  float *dh1, *dh2;
} mlp_acts_t;

typedef struct {
  float *conv1w; /* (32, 5, 5, 1) */
  float *conv1b; /* (32) */
  float *conv2w; /* (64, 5, 5, 32) */
  float *conv2b; /* (64) */
  float *fc1w;   /* (512, 3136) */
  float *fc1b;   /* (512) */
  float *fc2w;   /* (10, 512) */
  float *fc2b;   /* (10) */
} cnn_params_t;

typedef struct {
  float *cols, *dcols; /* scratch: one tile's im2col and its gradient (see conv2d_forward) */
  float *c1;           /* (B, 28, 28, 32) conv1 */
  float *p1;           /* (B, 14, 14, 32) maxpool + ReLU */
  int32_t *arg1;       /* (B, 14, 14, 32) */
  float *c2;           /* (B, 14, 14, 64) conv2 */
  float *p2;           /* (B, 7, 7, 64) maxpool + ReLU = (B, 3136) flattened in NHWC order */
  int32_t *arg2;       /* (B, 7, 7, 64) */
  float *f1;           /* (B, 512) fc1 + ReLU (+ dropout when training) */
  float *mask1;        /* (B, 512) dropout mask */
  float *dc1, *dp1, *dc2, *dp2, *df1;
} cnn_acts_t;

/* Called by backward once the gradients of params[offset, offset + count) are final for this
 * micro-step (a whole tensor, or a block of rows of one computed in pieces, see mlp_backward);
 * the data-parallel layer starts a bucket's reduction when all of it is in. */
typedef void (*grad_ready_fn)(void *ctx, size_t offset, size_t count);
/* Called by forward before a layer reads params[offset, offset + count): the data-parallel
 * layer waits there for that range's all-gather when the optimizer is sharded. */
typedef void (*params_needed_fn)(void *ctx, size_t offset, size_t count);

typedef struct model {
  model_kind_t kind;
  int max_batch;
  int ntensors;
  param_tensor_t tensors[MODEL_MAX_TENSORS]; /* in forward order */
  size_t nparams;
  float *params; /* (nparams) every tensor, in forward order */
  float *grads;  /* (nparams) same layout */
  union {
    mlp_params_t mlp;
    cnn_params_t cnn;
  } p, g;
  union {
    mlp_acts_t mlp;
    cnn_acts_t cnn;
  } a;
  float dropout;        /* probability of dropping a hidden unit while training */
  const uint64_t *keys; /* (B) per-sample dropout keys for the next forward; NULL: evaluation */
  const float *x;       /* (B, 784) the input of the last forward */
  int batch;            /* its B */
  /* Set by the data-parallel layer for one backward: backward leaves the gradients of the first
   * layer (model_first_linear) alone, the data-parallel layer computes them from the layer's
   * input and output gradient (sufficient factors, see ddp.h). */
  int defer_first;
  float *logits;  /* (B, 10) */
  float *probs;   /* (B, 10) */
  float *losses;  /* (B) */
  float *dlogits; /* (B, 10) */
  void *act_arena;
  int grads_stale; /* the next backward overwrites grads (model_forget_grad) */
  grad_ready_fn on_grad;
  params_needed_fn on_params;
  void *on_grad_ctx; /* context of both hooks */
} model_t;

int model_parse(const char *name, model_kind_t *kind);
const char *model_name(model_kind_t kind);

/* Allocates parameters, gradients and activations for batches of up to max_batch. */
int model_create(model_t *m, model_kind_t kind, int max_batch);
void model_free(model_t *m);

/* PyTorch's default initialization: weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
 * tensor t drawn from the stream (seed, RNG_INIT, t). */
void model_init_params(model_t *m, uint64_t seed);

/* x (B, 784) normalized images, y (B) labels -> logits, probs, losses (B). */
void model_forward(model_t *m, const float *x, const uint8_t *y, int B);
/* Accumulates into grads the gradient of scale * sum(losses); call after model_forward. */
void model_backward(model_t *m, const uint8_t *y, int B, float scale);
void model_zero_grad(model_t *m);
/* Like model_zero_grad for the next backward, without the memset: that backward overwrites the
 * gradients instead of adding to them (PyTorch's zero_grad(set_to_none=True)). */
void model_forget_grad(model_t *m);

/* Returns 1 if the first layer is a linear layer (the MLP's fc1: tensors 0 and 1, weight then
 * bias) and gives its sizes and where backward leaves the gradient at its output, dout
 * (B, out), before computing the layer's own gradients; 0 otherwise (the CNN). */
int model_first_linear(const model_t *m, int *in, int *out, const float **dout);

/* Sum of losses and number of correct predictions of the last forward. */
void model_score(const model_t *m, const uint8_t *y, int B, double *loss_sum, int *correct);

#endif /* TRAINER_MODEL_H_ */
