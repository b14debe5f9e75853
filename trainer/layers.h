/* Layers of the reference trainer: forward/backward pairs on plain float arrays.
 *
 * Conventions (as llm.c's train_gpt2.c):
 *   - shapes are in the comments, row-major, batch first; images are NHWC (B, H, W, C);
 *   - backward *accumulates* into parameter gradients (dw += ...) when `accumulate` is set, so
 *     gradient accumulation over micro-batches is just "do not zero between micro-steps", and
 *     overwrites them (dw = ...) when it is 0: the first micro-step of an optimizer step needs
 *     no zeroing beforehand (sgemm with beta = 0). Input gradients are always overwritten
 *     (dinp = ...); dinp may be NULL where nobody needs it (the first layer);
 *   - matrix products go through cblas_sgemm (OpenBLAS on the CPU). A GPU build provides the
 *     same functions over device pointers (cuBLAS + kernels) behind this header.
 */
#ifndef TRAINER_LAYERS_H_
#define TRAINER_LAYERS_H_

#include <stddef.h>
#include <stdint.h>

/* Hot loops are compiled for AVX-512, AVX2 and baseline x86-64, the best chosen when the program
 * loads (GCC function multi-versioning), so one binary runs everywhere and vectorizes where it
 * can. The trainer is built with -ffp-contract=off: no clone fuses a multiply-add the others do
 * not, and the results are the same bits on every ISA. Not under TSan: the clones' resolvers run
 * while the loader relocates the program, before TSan's runtime is ready (as in compress.h). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define TRAINER_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRAINER_SIMD
#endif

/* out (B, OUT) = inp (B, IN) . w^T + b, with w (OUT, IN) and b (OUT) as PyTorch's nn.Linear. */
void linear_forward(float *out, const float *inp, const float *w, const float *b, int B, int IN,
                    int OUT);
void linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, int B, int IN, int OUT, int accumulate);
/* linear_backward in pieces, for a layer whose gradient is communicated block by block (see
 * mlp_backward): the weight gradient of output units [u0, u1) only (rows u0..u1-1 of dw), and
 * the bias gradient. Same shapes and pointers as linear_backward. */
void linear_backward_weight_units(float *dw, const float *dout, const float *inp, int B, int IN,
                                  int OUT, int u0, int u1, int accumulate);
void linear_backward_bias(float *db, const float *dout, int B, int OUT, int accumulate);

/* The gradient of a linear layer's parameters laid out as [w (OUT, IN) | b (OUT)], entries
 * [lo, hi) of that layout only, from its sufficient factors gathered from all ranks: dout
 * (K, OUT) and inp (K, IN), K = ranks x B: g = scale x (dout^T inp | column sums of dout).
 * Overwrites g[lo, hi); g points at the layer's weight gradient. */
void linear_grad_from_factors(float *g, const float *dout, const float *inp, int K, int IN, int OUT,
                              size_t lo, size_t hi, float scale);

/* out = max(inp, 0), in place allowed. Backward uses the output: out > 0 iff inp > 0. */
void relu_forward(float *out, const float *inp, long n);
void relu_backward(float *dinp, const float *dout, const float *out, long n);

/* Inverted dropout over rows of n units: out = inp * mask, mask = 0 with probability p, else
 * 1 / (1 - p), drawn from the stream keys[b] ^ salt for row b (salt tells layers apart).
 * mask (B, n) is kept for backward; in place allowed. */
void dropout_forward(float *out, float *mask, const float *inp, int B, int n, float p,
                     const uint64_t *keys, uint64_t salt);
void dropout_backward(float *dinp, const float *dout, const float *mask, long n);

/* 2-D convolution, stride 1, "same" zero padding (K odd, pad K/2), via im2col + sgemm.
 *   inp (B, H, W, C), w (OC, K, K, C), b (OC), out (B, H, W, OC)
 * The batch goes through in tiles of conv2d_tile_images(s) images: cols and dcols are scratch
 * of conv2d_scratch_floats(s) floats each, holding one tile's unfolded input (tile*H*W, K*K*C)
 * and its gradient. Backward unfolds inp again rather than keeping the whole batch's. */
#ifndef CONV_TILE_BYTES
#define CONV_TILE_BYTES (768 * 1024)
#endif
typedef struct {
  int B, H, W, C, OC, K;
} conv_shape_t;
int conv2d_tile_images(conv_shape_t s);
long conv2d_scratch_floats(conv_shape_t s);
void conv2d_forward(float *out, float *cols, const float *inp, const float *w, const float *b,
                    conv_shape_t s);
/* dinp may be NULL (then dcols is not touched). */
void conv2d_backward(float *dinp, float *dw, float *db, float *cols, float *dcols,
                     const float *dout, const float *inp, const float *w, conv_shape_t s,
                     int accumulate);

/* The unfolding under conv2d (used for C > 1; exported for test_cnn_index, which checks the GPU
 * trainer's element-wise maps of cnn_index.h against them): cols (B*H*W, K*K*C), row
 * (b, y, x) the K x K x C window centred on (y, x), zeros outside the image; col2im is its
 * adjoint, dinp (B, H, W, C) = the sum of every window's gradient at its place (overwritten). */
void conv2d_im2col(float *cols, const float *inp, conv_shape_t s);
void conv2d_col2im(float *dinp, const float *dcols, conv_shape_t s);

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
