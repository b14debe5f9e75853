/* Layers of the reference trainer: forward/backward pairs on plain float arrays.
 *
 * Conventions (as llm.c's train_gpt2.c):
 *   - shapes are in the comments, row-major, batch first; images are NHWC (B, H, W, C);
 *   - backward *accumulates* into parameter gradients (dw += ...), so gradient accumulation
 *     over micro-batches is just "do not zero between micro-steps", and *overwrites* input
 *     gradients (dinp = ...); dinp may be NULL where nobody needs it (the first layer);
 *   - matrix products go through cblas_sgemm (OpenBLAS on the CPU). A GPU build provides the
 *     same functions over device pointers (cuBLAS + kernels) behind this header.
 */
#ifndef TRAINER_LAYERS_H_
#define TRAINER_LAYERS_H_

#include <stdint.h>

/* out (B, OUT) = inp (B, IN) . w^T + b, with w (OUT, IN) and b (OUT) as PyTorch's nn.Linear. */
void linear_forward(float *out, const float *inp, const float *w, const float *b, int B, int IN,
                    int OUT);
void linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, int B, int IN, int OUT);

/* out = max(inp, 0), in place allowed. Backward uses the output: out > 0 iff inp > 0. */
void relu_forward(float *out, const float *inp, long n);
void relu_backward(float *dinp, const float *dout, const float *out, long n);

/* 2-D convolution, stride 1, "same" zero padding (K odd, pad K/2), via im2col + one sgemm.
 *   inp (B, H, W, C), w (OC, K, K, C), b (OC), out (B, H, W, OC)
 *   cols (B*H*W, K*K*C): the unfolded input, kept from forward for backward. */
typedef struct {
  int B, H, W, C, OC, K;
} conv_shape_t;
void conv2d_forward(float *out, float *cols, const float *inp, const float *w, const float *b,
                    conv_shape_t s);
/* dcols is scratch of the size of cols; dinp may be NULL (then dcols is not needed). */
void conv2d_backward(float *dinp, float *dw, float *db, float *dcols, const float *dout,
                     const float *cols, const float *w, conv_shape_t s);

/* 2x2 max pooling, stride 2: inp (B, H, W, C) -> out (B, H/2, W/2, C); H and W even.
 * arg (B, H/2, W/2, C) remembers which input won (index into inp) for backward. */
void maxpool2_forward(float *out, int32_t *arg, const float *inp, int B, int H, int W, int C);
void maxpool2_backward(float *dinp, const float *dout, const int32_t *arg, int B, int H, int W,
                       int C);

/* Softmax cross-entropy over V classes: probs (B, V) = softmax(logits), losses (B) = -log
 * probs[target]. Backward: dlogits = (probs - onehot(target)) * scale, where scale is
 * 1 / (samples in the optimizer step on this rank) so gradients are means. */
void softmax_xent_forward(float *probs, float *losses, const float *logits, const uint8_t *targets,
                          int B, int V);
void softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *targets, int B, int V,
                           float scale);

#endif /* TRAINER_LAYERS_H_ */
