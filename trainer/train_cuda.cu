// tutti-train --device cuda: the MLP and the CNN of model.c trained on a GPU (built with the
// CUDA variant only). The same models, initialization (model_init_params), sampler, augmentation,
// learning-rate schedule and update rules (optim.c's constants from optim_begin_step, the
// element-wise update in a kernel) as on the host; the layers are cuBLAS GEMMs and small kernels,
// and the gradients are all-reduced on the device: one ncclAllReduce of the whole gradient on
// the training stream, which tutti runs through its stream path (and, for ranks of one host,
// cuda_p2p: kernels reading the peers' gradients in place).
//
//   mlp  x (B, 784) -> fc1 (512) -> ReLU -> fc2 (256) -> ReLU -> fc3 (10) -> softmax + NLL
//   cnn  x (B, 28, 28, 1) -> conv5x5 (32) -> maxpool2 + ReLU -> conv5x5 (64) -> maxpool2 + ReLU
//        -> fc1 (512) -> ReLU -> fc2 (10) -> softmax + NLL                  (NHWC, as model.c)
//
// Row-major tensors through column-major cuBLAS: Y (B, O) = X (B, I) W^T, W (O, I), is the
// column-major product Y^T = W^T' X^T, i.e. gemm(T, N, O, B, I) on the stored arrays.
// A convolution is that linear layer applied to the rows of its im2col matrix: cols
// (B*H*W, K*K*C) times W^T, W (OC, K, K, C) = (OC, K*K*C) as model.c stores it; its input
// gradient is col2im of dY W. im2col, col2im and pooling + ReLU are one thread per element
// calling the maps of cnn_index.h (cnn_kernels.cuh), which test_cnn_index checks on the host
// against layers.c, and tests/gpu/test_cnn_kernels on a GPU.
// What is not supported here (refused with a message): --accum > 1, --dropout, --compress,
// checkpoints, --dump, --log, --profile.
// This file has been compiled but has not run on a GPU (docs/gpu.md).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vector>

extern "C" {
#include "data.h"
#include "model.h"
#include "optim.h"
#include "options.h"
#include "train_cuda.h"
}
#include "cnn_kernels.cuh"
#include "tutti.h"

namespace {

#define CU(call)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "tutti-train: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)
#define BLAS(call)                                                            \
  do {                                                                        \
    cublasStatus_t s_ = (call);                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                        \
      fprintf(stderr, "tutti-train: %s failed: status %d\n", #call, (int)s_); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)
#define NCCL(call)                                                                       \
  do {                                                                                   \
    ncclResult_t r_ = (call);                                                            \
    if (r_ != ncclSuccess) {                                                             \
      fprintf(stderr, "tutti-train: %s failed: %s: %s\n", #call, ncclGetErrorString(r_), \
              ncclGetLastError(NULL));                                                   \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

constexpr int kThreads = 256;
int blocks(size_t n) {
  return (int)((n + kThreads - 1) / kThreads);
}

// h (B, O) += b; then ReLU when relu.
__global__ void bias_act(float *h, const float *b, int B, int O, int relu) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)B * O) return;
  float v = h[i] + b[i % O];
  h[i] = relu && v < 0.0f ? 0.0f : v;
}

// Per sample: softmax of logits (B, 10), loss = -log p[y], dlogits = (p - onehot(y)) * scale.
__global__ void softmax_xent(const float *logits, const uint8_t *y, int B, float scale,
                             float *losses, float *dlogits) {
  int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= B) return;
  const float *z = logits + (size_t)s * DATA_CLASSES;
  float mx = z[0], sum = 0.0f;
  for (int c = 1; c < DATA_CLASSES; c++) mx = fmaxf(mx, z[c]);
  for (int c = 0; c < DATA_CLASSES; c++) sum += expf(z[c] - mx);
  losses[s] = logf(sum) - (z[y[s]] - mx);
  for (int c = 0; c < DATA_CLASSES; c++)
    dlogits[(size_t)s * DATA_CLASSES + c] =
        (expf(z[c] - mx) / sum - (c == y[s] ? 1.0f : 0.0f)) * scale;
}

// dh *= (h > 0): the ReLU's backward, h its output.
__global__ void relu_back(float *dh, const float *h, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && h[i] <= 0.0f) dh[i] = 0.0f;
}

// db (O) = column sums of dy (rows, O): block o sums column o, each thread a strided share of
// the rows (conv1 has B*28*28 of them), then a tree in shared memory. Launch with O blocks of
// kThreads threads.
__global__ void bias_grad(const float *dy, long rows, int O, float *db) {
  __shared__ float part[kThreads];
  int o = blockIdx.x;
  float acc = 0.0f;
  for (long s = threadIdx.x; s < rows; s += blockDim.x) acc += dy[s * O + o];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[o] = part[0];
}

// optim.c's update rules, element by element, with the step's constants from optim_begin_step.
__global__ void sgd_step(float *p, const float *g, float *buf, size_t n, float mu, float wd,
                         float lr) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i] + wd * p[i];
  buf[i] = mu * buf[i] + gi;
  p[i] -= lr * buf[i];
}

__global__ void adamw_step(float *p, const float *g, float *m, float *v, size_t n, float b1,
                           float b2, float eps, float step, float decay, float inv_bc2) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  m[i] = b1 * m[i] + (1.0f - b1) * g[i];
  v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
  p[i] = p[i] * decay - step * m[i] / (sqrtf(v[i]) * inv_bc2 + eps);
}

struct Layer {  // one fully connected layer: W (out, in), b (out), offsets into params/grads
  int in, out;
  size_t w, b;
};

// The MLP's activations and their gradients.
struct Mlp {
  float *h1, *h2;    // (B, 512), (B, 256) after ReLU
  float *dh1, *dh2;  // same shapes
};

// The CNN's activations (NHWC) and their gradients.
struct Cnn {
  float *cols1;                        // (B*28*28, 25) conv1's im2col, kept for its weight gradient
  float *c1;                           // (B, 28, 28, 32) conv1
  float *p1;                           // (B, 14, 14, 32) maxpool + ReLU
  int32_t *arg1;                       // (B, 14, 14, 32) the winning taps (indices into c1)
  float *cols2;                        // (B*14*14, 800) conv2's im2col
  float *c2;                           // (B, 14, 14, 64) conv2
  float *p2;                           // (B, 7, 7, 64) maxpool + ReLU = (B, 3136) fc1's input
  int32_t *arg2;                       // (B, 7, 7, 64)
  float *f1;                           // (B, 512) fc1 + ReLU
  float *dcols2;                       // (B*14*14, 800)
  float *dc1, *dp1, *dc2, *dp2, *df1;  // gradients, shaped as c1, p1, c2, p2, f1
};

struct Gpu {
  cudaStream_t stream;
  cublasHandle_t blas;
  ncclComm_t comm = nullptr;
  int rank = 0, world = 1, batch;
  model_kind_t kind;
  Layer fc[3];    // mlp: fc1, fc2, fc3; cnn: fc1, fc2
  Layer conv[2];  // cnn: conv1 (in 25, out 32), conv2 (in 800, out 64) over im2col rows
  size_t nparams;
  float *params, *grads, *m, *v;         // (nparams) each, model.c's layout; v for adamw only
  float *x, *logits, *dlogits, *losses;  // (B, 784), (B, 10), (B, 10), (B)
  uint8_t *y;
  Mlp mlp;
  Cnn cnn;
};

// y (B, out) = x (B, in) W^T + b, ReLU when relu.
void fc_forward(Gpu &g, const Layer &l, const float *x, float *y, int B, int relu) {
  const float one = 1.0f, zero = 0.0f;
  BLAS(cublasSgemm(g.blas, CUBLAS_OP_T, CUBLAS_OP_N, l.out, B, l.in, &one, g.params + l.w, l.in, x,
                   l.in, &zero, y, l.out));
  bias_act<<<blocks((size_t)B * l.out), kThreads, 0, g.stream>>>(y, g.params + l.b, B, l.out, relu);
}

// From dy (B, out): dW = dy^T x, db = sums of dy, and dx = dy W when dx is wanted.
void fc_backward(Gpu &g, const Layer &l, const float *x, const float *dy, float *dx, int B) {
  const float one = 1.0f, zero = 0.0f;
  BLAS(cublasSgemm(g.blas, CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, B, &one, x, l.in, dy, l.out,
                   &zero, g.grads + l.w, l.in));
  bias_grad<<<l.out, kThreads, 0, g.stream>>>(dy, B, l.out, g.grads + l.b);
  if (dx)
    BLAS(cublasSgemm(g.blas, CUBLAS_OP_N, CUBLAS_OP_N, l.in, B, l.out, &one, g.params + l.w, l.in,
                     dy, l.out, &zero, dx, l.in));
}

void relu_backward(Gpu &g, float *dh, const float *h, size_t n) {
  relu_back<<<blocks(n), kThreads, 0, g.stream>>>(dh, h, n);
}

void mlp_forward(Gpu &g, int B) {
  fc_forward(g, g.fc[0], g.x, g.mlp.h1, B, 1);
  fc_forward(g, g.fc[1], g.mlp.h1, g.mlp.h2, B, 1);
  fc_forward(g, g.fc[2], g.mlp.h2, g.logits, B, 0);
}

void mlp_backward(Gpu &g, int B) {
  Mlp &a = g.mlp;
  fc_backward(g, g.fc[2], a.h2, g.dlogits, a.dh2, B);
  relu_backward(g, a.dh2, a.h2, (size_t)B * 256);
  fc_backward(g, g.fc[1], a.h1, a.dh2, a.dh1, B);
  relu_backward(g, a.dh1, a.h1, (size_t)B * 512);
  fc_backward(g, g.fc[0], g.x, a.dh1, nullptr, B);
}

// y (B*H*W, OC) = im2col(x) W^T + b: the convolution as a linear layer over cols' rows.
void conv_forward(Gpu &g, const Layer &l, conv_shape_t s, const float *x, float *cols, float *y) {
  cnn_im2col(g.stream, cols, x, s);
  fc_forward(g, l, cols, y, s.B * s.H * s.W, 0);
}

// From dy (B*H*W, OC): dW = dy^T cols, db = sums of dy, and dx = col2im(dy W) when wanted.
void conv_backward(Gpu &g, const Layer &l, conv_shape_t s, const float *cols, const float *dy,
                   float *dcols, float *dx) {
  fc_backward(g, l, cols, dy, dx ? dcols : nullptr, s.B * s.H * s.W);
  if (dx) cnn_col2im(g.stream, dx, dcols, s);
}

// y, arg (B, H/2, W/2, C) = ReLU(maxpool2(x (B, H, W, C))).
void pool_forward(Gpu &g, const float *x, float *y, int32_t *arg, int B, int H, int W, int C) {
  cnn_pool_relu(g.stream, y, arg, x, B, H, W, C);
}

void pool_backward(Gpu &g, const float *dy, const float *y, const int32_t *arg, float *dx, int B,
                   int H, int W, int C) {
  cnn_pool_relu_back(g.stream, dx, dy, y, arg, B, H, W, C);
}

conv_shape_t conv1_shape(int B) {
  return conv_shape_t{B, 28, 28, 1, 32, 5};
}
conv_shape_t conv2_shape(int B) {
  return conv_shape_t{B, 14, 14, 32, 64, 5};
}

void cnn_forward(Gpu &g, int B) {
  Cnn &a = g.cnn;
  conv_forward(g, g.conv[0], conv1_shape(B), g.x, a.cols1, a.c1);   // (B, 28, 28, 32)
  pool_forward(g, a.c1, a.p1, a.arg1, B, 28, 28, 32);               // (B, 14, 14, 32)
  conv_forward(g, g.conv[1], conv2_shape(B), a.p1, a.cols2, a.c2);  // (B, 14, 14, 64)
  pool_forward(g, a.c2, a.p2, a.arg2, B, 14, 14, 64);               // (B, 7, 7, 64)
  fc_forward(g, g.fc[0], a.p2, a.f1, B, 1);                         // (B, 512)
  fc_forward(g, g.fc[1], a.f1, g.logits, B, 0);                     // (B, 10)
}

// Tensors in reverse order: fc2, fc1, conv2, conv1 (whose input gradient nobody needs).
void cnn_backward(Gpu &g, int B) {
  Cnn &a = g.cnn;
  fc_backward(g, g.fc[1], a.f1, g.dlogits, a.df1, B);
  relu_backward(g, a.df1, a.f1, (size_t)B * 512);
  fc_backward(g, g.fc[0], a.p2, a.df1, a.dp2, B);
  pool_backward(g, a.dp2, a.p2, a.arg2, a.dc2, B, 14, 14, 64);
  conv_backward(g, g.conv[1], conv2_shape(B), a.cols2, a.dc2, a.dcols2, a.dp1);
  pool_backward(g, a.dp1, a.p1, a.arg1, a.dc1, B, 28, 28, 32);
  conv_backward(g, g.conv[0], conv1_shape(B), a.cols1, a.dc1, nullptr, nullptr);
}

void forward(Gpu &g, int B) {
  if (g.kind == MODEL_MLP)
    mlp_forward(g, B);
  else
    cnn_forward(g, B);
}

void backward(Gpu &g, int B, float scale) {
  softmax_xent<<<blocks(B), kThreads, 0, g.stream>>>(g.logits, g.y, B, scale, g.losses, g.dlogits);
  if (g.kind == MODEL_MLP)
    mlp_backward(g, B);
  else
    cnn_backward(g, B);
}

void optimizer(Gpu &g, optim_t *o, float lr) {
  optim_begin_step(o, lr);
  size_t n = g.nparams;
  if (o->kind == OPT_SGD)
    sgd_step<<<blocks(n), kThreads, 0, g.stream>>>(g.params, g.grads, g.m, n, o->momentum,
                                                   o->weight_decay, o->lr);
  else
    adamw_step<<<blocks(n), kThreads, 0, g.stream>>>(g.params, g.grads, g.m, g.v, n, o->beta1,
                                                     o->beta2, o->eps, o->step_size, o->decay,
                                                     o->inv_bc2_sqrt);
  CU(cudaGetLastError());
}

// Loss sum and correct predictions of the last forward (copied back, stream synchronized).
void score(Gpu &g, const uint8_t *y, int B, double *loss, int *correct, int with_losses) {
  std::vector<float> z((size_t)B * DATA_CLASSES), l(B);
  CU(cudaMemcpyAsync(z.data(), g.logits, z.size() * 4, cudaMemcpyDeviceToHost, g.stream));
  if (with_losses)
    CU(cudaMemcpyAsync(l.data(), g.losses, l.size() * 4, cudaMemcpyDeviceToHost, g.stream));
  CU(cudaStreamSynchronize(g.stream));
  for (int s = 0; s < B; s++) {
    const float *zs = &z[(size_t)s * DATA_CLASSES];
    int best = 0;
    float mx = zs[0], sum = 0.0f;
    for (int c = 1; c < DATA_CLASSES; c++)
      if (zs[c] > zs[best]) best = c;
    for (int c = 1; c < DATA_CLASSES; c++) mx = fmaxf(mx, zs[c]);
    for (int c = 0; c < DATA_CLASSES; c++) sum += expf(zs[c] - mx);
    *loss += with_losses ? l[s] : logf(sum) - (zs[y[s]] - mx);
    *correct += best == y[s];
  }
}

// The test set, all of it on every rank.
void evaluate(Gpu &g, const dataset_t *test, double *loss, double *acc) {
  std::vector<float> x((size_t)g.batch * DATA_PIXELS);
  std::vector<uint8_t> y(g.batch);
  std::vector<int> idx(g.batch);
  int correct = 0;
  *loss = 0;
  for (int at = 0; at < test->n; at += g.batch) {
    int B = test->n - at < g.batch ? test->n - at : g.batch;
    for (int i = 0; i < B; i++) idx[i] = at + i;
    data_gather(test, idx.data(), B, AUG_NONE, 0, 0, x.data(), y.data());
    CU(cudaMemcpyAsync(g.x, x.data(), (size_t)B * DATA_PIXELS * 4, cudaMemcpyHostToDevice,
                       g.stream));
    forward(g, B);
    score(g, y.data(), B, loss, &correct, 0);
  }
  *loss /= test->n, *acc = (double)correct / test->n;
}

const char *unsupported(const options_t *o) {
  if (o->accum != 1) return "--accum";
  if (o->dropout > 0) return "--dropout";
  if (strcmp(o->compress, "none") != 0) return "--compress";
  if (o->checkpoint || o->resume) return "--checkpoint / --resume";
  if (o->dump_prefix) return "--dump";
  if (o->log_path) return "--log";
  if (o->profile) return "--profile";
  return nullptr;
}

float *dev_floats(size_t n) {
  float *p = nullptr;
  CU(cudaMalloc(&p, (n ? n : 1) * sizeof(float)));
  CU(cudaMemset(p, 0, (n ? n : 1) * sizeof(float)));
  return p;
}

int32_t *dev_ints(size_t n) {
  int32_t *p = nullptr;
  CU(cudaMalloc(&p, (n ? n : 1) * sizeof(int32_t)));
  return p;
}

// Layer l: weight w (out, in) and bias b, views into m's parameters.
Layer layer_of(const model_t &m, const float *w, const float *b, int in, int out) {
  return Layer{in, out, (size_t)(w - m.params), (size_t)(b - m.params)};
}

void setup_layers(Gpu &g, const model_t &m) {
  if (g.kind == MODEL_MLP) {
    const mlp_params_t &p = m.p.mlp;
    g.fc[0] = layer_of(m, p.fc1w, p.fc1b, DATA_PIXELS, 512);
    g.fc[1] = layer_of(m, p.fc2w, p.fc2b, 512, 256);
    g.fc[2] = layer_of(m, p.fc3w, p.fc3b, 256, DATA_CLASSES);
    return;
  }
  const cnn_params_t &p = m.p.cnn;
  g.conv[0] = layer_of(m, p.conv1w, p.conv1b, 5 * 5 * 1, 32);   // (32, 5, 5, 1)
  g.conv[1] = layer_of(m, p.conv2w, p.conv2b, 5 * 5 * 32, 64);  // (64, 5, 5, 32)
  g.fc[0] = layer_of(m, p.fc1w, p.fc1b, 7 * 7 * 64, 512);
  g.fc[1] = layer_of(m, p.fc2w, p.fc2b, 512, DATA_CLASSES);
}

void setup_acts(Gpu &g, size_t B) {
  if (g.kind == MODEL_MLP) {
    Mlp &a = g.mlp;
    a.h1 = dev_floats(B * 512), a.h2 = dev_floats(B * 256);
    a.dh1 = dev_floats(B * 512), a.dh2 = dev_floats(B * 256);
    return;
  }
  Cnn &a = g.cnn;
  size_t n1 = B * 28 * 28 * 32, n2 = B * 14 * 14 * 32, n3 = B * 14 * 14 * 64, n4 = B * 7 * 7 * 64;
  a.cols1 = dev_floats(B * 28 * 28 * 25), a.cols2 = dev_floats(B * 14 * 14 * 800);
  a.dcols2 = dev_floats(B * 14 * 14 * 800);
  a.c1 = dev_floats(n1), a.p1 = dev_floats(n2), a.arg1 = dev_ints(n2);
  a.c2 = dev_floats(n3), a.p2 = dev_floats(n4), a.arg2 = dev_ints(n4);
  a.f1 = dev_floats(B * 512), a.df1 = dev_floats(B * 512);
  a.dc1 = dev_floats(n1), a.dp1 = dev_floats(n2), a.dc2 = dev_floats(n3), a.dp2 = dev_floats(n4);
}

// Parameters initialized on the host (model.c, the same draws as the host trainer) and copied.
void setup_model(Gpu &g, const options_t *o) {
  model_t m;
  g.kind = o->model;
  if (model_create(&m, o->model, o->batch)) {
    fprintf(stderr, "tutti-train: out of memory\n");
    exit(1);
  }
  model_init_params(&m, o->seed);
  g.nparams = m.nparams;
  setup_layers(g, m);
  g.params = dev_floats(g.nparams), g.grads = dev_floats(g.nparams);
  g.m = dev_floats(g.nparams);
  g.v = o->optim == OPT_ADAMW ? dev_floats(g.nparams) : nullptr;
  CU(cudaMemcpy(g.params, m.params, g.nparams * 4, cudaMemcpyHostToDevice));
  model_free(&m);
  size_t B = (size_t)o->batch;
  g.x = dev_floats(B * DATA_PIXELS);
  g.logits = dev_floats(B * DATA_CLASSES), g.dlogits = dev_floats(B * DATA_CLASSES);
  g.losses = dev_floats(B);
  CU(cudaMalloc(&g.y, B));
  setup_acts(g, B);
}

int local_rank(void) {
  const char *vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "TUTTI_RANK"};
  for (const char *v : vars)
    if (getenv(v)) return atoi(getenv(v));
  return 0;
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

extern "C" int train_cuda_usable(const options_t *o) {
  if (const char *what = unsupported(o)) {
    fprintf(stderr, "tutti-train: --device cuda does not support %s yet\n", what);
    return 2;
  }
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    fprintf(stderr, "tutti-train: --device cuda: no usable CUDA device (%s)\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 2;
  }
  return 0;
}

extern "C" int train_cuda_run(const options_t *o, ncclComm_t comm, const dataset_t *train,
                              const dataset_t *test) {
  int ndev = 0;
  CU(cudaGetDeviceCount(&ndev));
  Gpu g;
  g.batch = o->batch, g.comm = comm;
  CU(cudaSetDevice(local_rank() % ndev));  // several ranks on one GPU are allowed
  if (comm) ncclCommUserRank(comm, &g.rank), ncclCommCount(comm, &g.world);
  CU(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  BLAS(cublasCreate(&g.blas));
  BLAS(cublasSetStream(g.blas, g.stream));
  setup_model(g, o);
  optim_t opt;
  if (optim_create(&opt, o->optim, 1)) return 1;  // the step's constants only; state on the GPU
  opt.momentum = o->momentum, opt.weight_decay = o->weight_decay;
  sampler_t s;
  if (sampler_init(&s, train->n, o->seed, g.world, g.rank, o->batch, 1)) return 1;
  int steps = sampler_steps_per_epoch(&s), global_batch = o->batch * g.world;
  if (steps == 0)
    return fprintf(stderr, "tutti-train: the global batch is larger than the training set\n"), 1;
  int64_t total = (int64_t)o->epochs * steps, warmup = (int64_t)(o->warmup_epochs * steps + 0.5);
  float lr0 = options_scaled_lr(o, global_batch);
  std::vector<float> x((size_t)o->batch * DATA_PIXELS);
  std::vector<uint8_t> y(o->batch);
  std::vector<int> idx(o->batch);
  if (g.rank == 0)
    printf(
        "tutti-train --device cuda: %s, %zu parameters, %d rank(s) x batch %d, %s, lr %.3g, "
        "gradients all-reduced on the device (ncclAllReduce on the training stream)\n",
        model_name(o->model), g.nparams, g.world, o->batch, optim_name(o->optim), lr0);
  for (int epoch = 0; epoch < o->epochs; epoch++) {
    sampler_set_epoch(&s, epoch);
    double t0 = now_s(), sums[3] = {0, 0, 0};  // loss, correct, samples
    for (int step = 0; step < steps; step++) {
      for (int i = 0; i < o->batch; i++) idx[i] = sampler_index(&s, step, 0, i);
      data_gather(train, idx.data(), o->batch, o->augment, o->seed, epoch, x.data(), y.data());
      CU(cudaMemcpyAsync(g.x, x.data(), x.size() * 4, cudaMemcpyHostToDevice, g.stream));
      CU(cudaMemcpyAsync(g.y, y.data(), y.size(), cudaMemcpyHostToDevice, g.stream));
      forward(g, o->batch);
      backward(g, o->batch, 1.0f / (float)global_batch);  // the mean over the global batch
      if (comm)
        NCCL(ncclAllReduce(g.grads, g.grads, g.nparams, ncclFloat32, ncclSum, comm, g.stream));
      optimizer(g, &opt,
                lr_at((int64_t)epoch * steps + step, total, warmup, lr0, o->final_lr_frac));
      int correct = 0;
      score(g, y.data(), o->batch, &sums[0], &correct, 1);
      sums[1] += correct, sums[2] += o->batch;
    }
    double secs = now_s() - t0, test_loss = NAN, test_acc = NAN;
    if (!o->no_eval) evaluate(g, test, &test_loss, &test_acc);
    if (g.rank == 0)
      printf(
          "epoch %2d/%d | loss %.4f | train %6.2f%% (rank 0's samples) | test %6.2f%% loss %.4f "
          "| %7.0f samples/s | %.1fs (cuda)\n",
          epoch + 1, o->epochs, sums[0] / sums[2], 100 * sums[1] / sums[2], 100 * test_acc,
          test_loss, steps * (double)global_batch / secs, secs);
    fflush(stdout);
  }
  sampler_free(&s);
  optim_free(&opt);
  cublasDestroy(g.blas);
  cudaStreamDestroy(g.stream);
  return 0;
}
