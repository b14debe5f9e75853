/* Buckets, the communication thread and its FIFO; see ddp.h. */
#include "ddp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "layers.h"

#define DDP_QUEUE 64

typedef enum {
  JOB_ALLREDUCE,
  JOB_ALLREDUCE_COMPRESSED,
  JOB_REDUCE_SCATTER,
  JOB_ALLGATHER,
  JOB_BROADCAST,
  JOB_STOP
} job_kind_t;

typedef struct {
  job_kind_t kind;
  void *send, *recv;
  size_t count; /* NCCL's count: per rank for reduce-scatter (received) and all-gather (sent) */
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  tuttiCompressor_t compressor; /* JOB_ALLREDUCE_COMPRESSED */
} job_t;

struct ddp {
  ncclComm_t comm;
  int rank, world;
  int shard; /* sharded optimizer (world > 1) */
  model_t *model;
  int nbuckets;
  ddp_bucket_t buckets[DDP_MAX_BUCKETS];
  tuttiCompressor_t compressors[DDP_MAX_BUCKETS]; /* --compress: one per bucket, else NULL */
  const char *compress_spec;
  /* per backward: */
  int sync;
  size_t pending[DDP_MAX_BUCKETS];  /* floats of the bucket still without their final gradient */
  int next_bucket;                  /* buckets are launched in this order, never out of it */
  long gather_job[DDP_MAX_BUCKETS]; /* sharded: FIFO number of the bucket's parameter all-gather
                                       still to wait for; -1: none */
  /* sufficient factors of the first layer (see ddp.h); its parameters are the last bucket */
  int factor;
  int f_in, f_out;         /* the layer's sizes */
  const float *f_dout;     /* (B, f_out) the model's gradient at the layer's output */
  float *f_x, *f_dout_all; /* (ranks x max_batch, f_in), (ranks x max_batch, f_out) gathered */
  /* the FIFO, guarded by lock: */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  job_t queue[DDP_QUEUE];
  long submitted, completed;
  ncclResult_t error;
  char error_msg[512];
  double comm_s, comm_cpu_s, wait_s;
};

static double clock_s(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) {
  return clock_s(CLOCK_MONOTONIC);
}

static ncclResult_t run_job(ddp_t *d, const job_t *j) {
  switch (j->kind) {
    case JOB_ALLREDUCE:
      return ncclAllReduce(j->send, j->recv, j->count, j->type, j->op, d->comm, NULL);
    case JOB_ALLREDUCE_COMPRESSED:
      return tuttiAllReduceCompressed(j->send, j->recv, j->count, j->type, j->op, j->compressor,
                                      d->comm, NULL);
    case JOB_REDUCE_SCATTER:
      return ncclReduceScatter(j->send, j->recv, j->count, j->type, j->op, d->comm, NULL);
    case JOB_ALLGATHER:
      return ncclAllGather(j->send, j->recv, j->count, j->type, d->comm, NULL);
    default:
      return ncclBroadcast(j->send, j->recv, j->count, j->type, j->root, d->comm, NULL);
  }
}

/* The communication thread: runs jobs in FIFO order; after an error it only drains. */
static void *comm_main(void *arg) {
  ddp_t *d = arg;
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (d->completed == d->submitted) pthread_cond_wait(&d->changed, &d->lock);
    job_t job = d->queue[d->completed % DDP_QUEUE];
    if (job.kind == JOB_STOP) break;
    int failed = d->error != ncclSuccess;
    pthread_mutex_unlock(&d->lock);
    double t0 = now_s(), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    ncclResult_t res = failed ? ncclSuccess : run_job(d, &job);
    double dt = now_s() - t0, dc = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    pthread_mutex_lock(&d->lock);
    d->comm_s += dt, d->comm_cpu_s += dc;
    if (res != ncclSuccess && d->error == ncclSuccess) {
      d->error = res;
      snprintf(d->error_msg, sizeof(d->error_msg), "%s", ncclGetLastError(d->comm));
    }
    d->completed++;
    pthread_cond_broadcast(&d->changed);
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

/* Queues a job; returns its number in the FIFO (it is done once completed > that number). */
static long submit_job(ddp_t *d, job_t job) {
  pthread_mutex_lock(&d->lock);
  while (d->submitted - d->completed == DDP_QUEUE) pthread_cond_wait(&d->changed, &d->lock);
  d->queue[d->submitted % DDP_QUEUE] = job;
  long n = d->submitted++;
  pthread_cond_broadcast(&d->changed);
  pthread_mutex_unlock(&d->lock);
  return n;
}

static void submit(ddp_t *d, job_t job) {
  submit_job(d, job);
}

/* Waits until the first `count` jobs are done (only the main thread submits, so it may read
 * d->submitted unlocked); a failed collective ends the program with NCCL's message. */
static void wait_done(ddp_t *d, long count) {
  double t0 = now_s();
  pthread_mutex_lock(&d->lock);
  while (d->completed < count) pthread_cond_wait(&d->changed, &d->lock);
  ncclResult_t err = d->error;
  d->wait_s += now_s() - t0;
  pthread_mutex_unlock(&d->lock);
  if (err != ncclSuccess) {
    fprintf(stderr, "tutti-train: rank %d: collective failed: %s: %s\n", d->rank,
            ncclGetErrorString(err), d->error_msg);
    exit(1);
  }
}

static void wait_all(ddp_t *d) {
  wait_done(d, d->submitted);
}

/* Runs a collective on the calling (main) thread, once the FIFO is empty: the communicator is
 * used by one thread at a time, and the mutex taken by wait_all orders this use after the
 * communication thread's. Its time counts as communication, all of it exposed. */
static void run_now(ddp_t *d, job_t job) {
  wait_all(d);
  double t0 = now_s(), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  ncclResult_t res = run_job(d, &job);
  double dt = now_s() - t0, dc = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
  pthread_mutex_lock(&d->lock);
  d->comm_s += dt, d->comm_cpu_s += dc, d->wait_s += dt;
  pthread_mutex_unlock(&d->lock);
  if (res != ncclSuccess) {
    fprintf(stderr, "tutti-train: rank %d: collective failed: %s: %s\n", d->rank,
            ncclGetErrorString(res), ncclGetLastError(d->comm));
    exit(1);
  }
}

/* Walks the gradient in backward order (last tensor first; a tensor that backward finalizes in
 * blocks, block by block), closing a bucket once it holds cap bytes: DDP_FIRST_BUCKET_BYTES
 * for the first bucket, bucket_bytes for the others. A bucket is never closed inside a block,
 * so each is one contiguous range of the arena that some point of backward completes. With
 * sufficient factors, the first layer's two tensors are left out, and then form the last
 * bucket on their own. */
static void make_buckets(ddp_t *d, size_t bucket_bytes) {
  const model_t *m = d->model;
  size_t cap = bucket_bytes < DDP_FIRST_BUCKET_BYTES ? bucket_bytes : DDP_FIRST_BUCKET_BYTES;
  int lowest = d->factor ? 2 : 0; /* the first tensor in size-capped buckets */
  int open_tensor = -1;           /* the tensor the open bucket started with; -1: none open */
  d->nbuckets = 0;
  for (int t = m->ntensors - 1; t >= lowest; t--) {
    const param_tensor_t *pt = &m->tensors[t];
    size_t block = pt->count / (size_t)pt->blocks;
    for (int k = pt->blocks - 1; k >= 0; k--) {
      if (d->nbuckets == DDP_MAX_BUCKETS - 1) {
        fprintf(stderr, "tutti-train: internal error: more than %d gradient blocks\n",
                DDP_MAX_BUCKETS - 1);
        exit(1);
      }
      if (open_tensor < 0) d->buckets[d->nbuckets] = (ddp_bucket_t){0}, open_tensor = t;
      ddp_bucket_t *b = &d->buckets[d->nbuckets];
      b->offset = pt->offset + (size_t)k * block;
      b->count += k == pt->blocks - 1 ? pt->count - (size_t)k * block : block;
      b->first_tensor = t, b->ntensors = open_tensor - t + 1; /* [t, t + ntensors) */
      if (b->count * sizeof(float) >= cap || (t == lowest && k == 0))
        d->nbuckets++, open_tensor = -1, cap = bucket_bytes;
    }
  }
  if (d->factor) /* the first layer, weight then bias */
    d->buckets[d->nbuckets++] = (ddp_bucket_t){0, m->tensors[1].offset + m->tensors[1].count, 0, 2};
  for (int b = 0; b < d->nbuckets; b++) d->buckets[b].slice = d->buckets[b].count / d->world;
}

/* Floats of bucket k inside params[offset, offset + count). */
static size_t bucket_overlap(const ddp_bucket_t *k, size_t offset, size_t count) {
  size_t lo = offset > k->offset ? offset : k->offset;
  size_t hi = offset + count < k->offset + k->count ? offset + count : k->offset + k->count;
  return hi > lo ? hi - lo : 0;
}

/* Averages bucket b's gradients with `run` (submit: on the communication thread; run_now: here):
 * one all-reduce (compressed with the bucket's own compressor under --compress), or (sharded)
 * a reduce-scatter of the slices and an all-reduce of the tail. */
static void average_bucket(ddp_t *d, int b, void (*run)(ddp_t *, job_t)) {
  const ddp_bucket_t *k = &d->buckets[b];
  float *g = d->model->grads + k->offset;
  if (d->compressors[b]) {
    run(d, (job_t){JOB_ALLREDUCE_COMPRESSED, g, g, k->count, ncclFloat, ncclAvg, 0,
                   d->compressors[b]});
    return;
  }
  size_t sliced = d->shard ? k->slice * (size_t)d->world : 0;
  if (sliced)
    run(d, (job_t){JOB_REDUCE_SCATTER, g, g + d->rank * k->slice, k->slice, ncclFloat, ncclAvg});
  if (sliced < k->count)
    run(d, (job_t){JOB_ALLREDUCE, g + sliced, g + sliced, k->count - sliced, ncclFloat, ncclAvg});
}

/* Sufficient factors: the first layer's gradient, [w | b] of the last bucket, computed for
 * this rank's slice and the tail (what a reduce-scatter and the all-reduce of the tail would
 * have left averaged here) from every rank's input (gathered during backward) and output
 * gradient (gathered now). The bucket backward completed just before is held back until the
 * output gradients are gathered, and reduced while this rank computes. */
static void factored_gradient(ddp_t *d) {
  const ddp_bucket_t *k = &d->buckets[d->nbuckets - 1];
  int B = d->model->batch, K = B * d->world;
  size_t own = d->rank * k->slice, tail = k->slice * (size_t)d->world;
  long job = submit_job(
      d, (job_t){JOB_ALLGATHER, (void *)d->f_dout, d->f_dout_all, (size_t)B * d->f_out, ncclFloat});
  if (d->nbuckets > 1) average_bucket(d, d->nbuckets - 2, submit);
  wait_done(d, job + 1);
  float *g = d->model->grads + k->offset, scale = 1.0f / (float)d->world; /* the average */
  linear_grad_from_factors(g, d->f_dout_all, d->f_x, K, d->f_in, d->f_out, own, own + k->slice,
                           scale);
  linear_grad_from_factors(g, d->f_dout_all, d->f_x, K, d->f_in, d->f_out, tail, k->count, scale);
  wait_all(d);
}

static void on_grad_ready(void *ctx, size_t offset, size_t count) {
  ddp_t *d = ctx;
  if (!d->sync) return;
  for (int b = d->next_bucket; b < d->nbuckets; b++)
    d->pending[b] -= bucket_overlap(&d->buckets[b], offset, count);
  /* the last bucket (with sufficient factors, the last two) is left to ddp_end_backward */
  int held = d->model->defer_first ? 2 : 1;
  while (d->next_bucket < d->nbuckets && d->pending[d->next_bucket] == 0) {
    int b = d->next_bucket++;
    if (d->world > 1 && b < d->nbuckets - held) average_bucket(d, b, submit);
  }
}

/* Forward is about to read params[offset, offset + count): the all-gathers of the buckets
 * holding them must be done. */
static void on_params_needed(void *ctx, size_t offset, size_t count) {
  ddp_t *d = ctx;
  for (int b = 0; b < d->nbuckets; b++) {
    if (d->gather_job[b] < 0 || !bucket_overlap(&d->buckets[b], offset, count)) continue;
    wait_done(d, d->gather_job[b] + 1);
    d->gather_job[b] = -1;
  }
}

/* Memory from ncclMemAlloc, which the other ranks of the host map: tutti's all-reduce,
 * reduce-scatter and all-gather then read the peers' buffers in place (when every rank's
 * buffers of the call are such memory) instead of copying through shared-memory FIFOs.
 * A 64-byte header says where a block came from; the heap when ncclMemAlloc fails. */
#define DDP_ALLOC_HEADER 64
void *ddp_alloc(size_t bytes) {
  size_t total = (bytes + 2 * DDP_ALLOC_HEADER - 1) / DDP_ALLOC_HEADER * DDP_ALLOC_HEADER;
  void *p = NULL;
  int shared = ncclMemAlloc(&p, total) == ncclSuccess; /* zeroed pages */
  if (!shared && (p = aligned_alloc(DDP_ALLOC_HEADER, total)) != NULL) memset(p, 0, total);
  if (!p) return NULL;
  *(int *)p = shared;
  return (char *)p + DDP_ALLOC_HEADER;
}

void ddp_free(void *p) {
  if (!p) return;
  char *h = (char *)p - DDP_ALLOC_HEADER;
  if (*(int *)h)
    ncclMemFree(h);
  else
    free(h);
}

/* Sufficient factors when asked for, sharded and the model's first layer is linear. */
static void factor_setup(ddp_t *d, int factor) {
  const model_t *m = d->model;
  d->factor = factor && d->shard && model_first_linear(m, &d->f_in, &d->f_out, &d->f_dout);
  if (!d->factor) return;
  size_t rows = (size_t)d->world * m->max_batch;
  d->f_x = ddp_alloc(rows * d->f_in * sizeof(float));
  d->f_dout_all = ddp_alloc(rows * d->f_out * sizeof(float));
  if (!d->f_x || !d->f_dout_all) {
    fprintf(stderr, "tutti-train: out of memory\n");
    exit(1);
  }
}

/* Tells bucket b's compressor its tensors (the part of each inside the bucket, whole rows):
 * a weight is rows of fan_in elements (fc: (out, in); conv: (out, k, k, in)), a bias one row. */
static ncclResult_t compress_layout(ddp_t *d, int b) {
  const ddp_bucket_t *k = &d->buckets[b];
  size_t counts[MODEL_MAX_TENSORS], rows[MODEL_MAX_TENSORS];
  int n = 0;
  for (int t = k->first_tensor; t < k->first_tensor + k->ntensors; t++) {
    const param_tensor_t *pt = &d->model->tensors[t];
    size_t in = bucket_overlap(k, pt->offset, pt->count);
    if (!in) continue;
    int bias = strstr(pt->name, ".bias") != NULL;
    counts[n] = in, rows[n] = bias ? in : (size_t)pt->fan_in;
    n++;
  }
  return tuttiCompressorSetLayout(d->compressors[b], n, counts, rows);
}

/* One compressor per bucket (each owns its bucket's error-feedback residual); warmup < 0: the
 * spec's default warm-up; tensors under min_count elements are sent exactly (topk, powersgd). */
static void compress_setup(ddp_t *d, const char *spec, int64_t warmup, int min_count) {
  tuttiCompressorConfig_t cfg;
  d->compress_spec = spec;
  if (d->world == 1 || !spec || tuttiCompressorParse(spec, &cfg) != ncclSuccess ||
      cfg.kind == tuttiCompressNone)
    return;
  if (warmup >= 0) cfg.warmupSteps = warmup > 1 << 30 ? 1 << 30 : (int)warmup;
  cfg.minCompressCount = min_count;
  for (int b = 0; b < d->nbuckets; b++)
    if (tuttiCompressorCreate(&d->compressors[b], &cfg, d->buckets[b].count, ncclFloat) !=
            ncclSuccess ||
        compress_layout(d, b) != ncclSuccess) {
      fprintf(stderr, "tutti-train: --compress %s: %s\n", spec, ncclGetLastError(NULL));
      exit(1);
    }
}

ddp_t *ddp_create(ncclComm_t comm, model_t *m, double bucket_mb, int shard, int factor,
                  const char *compress) {
  ddp_t *d = calloc(1, sizeof(*d));
  if (!d) exit(1);
  d->comm = comm, d->model = m, d->world = 1;
  if (comm && (ncclCommUserRank(comm, &d->rank) != ncclSuccess ||
               ncclCommCount(comm, &d->world) != ncclSuccess)) {
    fprintf(stderr, "tutti-train: cannot query the communicator\n");
    exit(1);
  }
  int compressed = compress && strcmp(compress, "none") != 0;
  d->shard = shard && d->world > 1 && !compressed; /* compression all-reduces whole buckets */
  factor_setup(d, factor && !compressed);
  size_t bucket_bytes = bucket_mb > 0 ? (size_t)(bucket_mb * 1024 * 1024) : 1;
  make_buckets(d, bucket_bytes);
  compress_setup(d, compress, -1, 0);
  pthread_mutex_init(&d->lock, NULL);
  pthread_cond_init(&d->changed, NULL);
  if (d->world > 1) {
    if (pthread_create(&d->thread, NULL, comm_main, d) != 0) {
      fprintf(stderr, "tutti-train: cannot start the communication thread\n");
      exit(1);
    }
    d->thread_started = 1;
  }
  for (int b = 0; b < DDP_MAX_BUCKETS; b++) d->gather_job[b] = -1;
  m->on_grad = on_grad_ready, m->on_params = on_params_needed, m->on_grad_ctx = d;
  return d;
}

void ddp_destroy(ddp_t *d) {
  if (!d) return;
  if (d->thread_started) {
    submit(d, (job_t){.kind = JOB_STOP});
    pthread_join(d->thread, NULL);
  }
  pthread_mutex_destroy(&d->lock);
  pthread_cond_destroy(&d->changed);
  d->model->on_grad = NULL, d->model->on_params = NULL, d->model->defer_first = 0;
  ddp_free(d->f_x);
  ddp_free(d->f_dout_all);
  for (int b = 0; b < d->nbuckets; b++) tuttiCompressorDestroy(d->compressors[b]);
  free(d);
}

int ddp_rank(const ddp_t *d) {
  return d->rank;
}
int ddp_world(const ddp_t *d) {
  return d->world;
}

int ddp_buckets(const ddp_t *d, const ddp_bucket_t **buckets) {
  *buckets = d->buckets;
  return d->nbuckets;
}

int ddp_sharded(const ddp_t *d) {
  return d->shard;
}

int ddp_factored(const ddp_t *d) {
  return d->factor;
}

void ddp_compress_tune(ddp_t *d, int64_t steps, int min_count) {
  for (int b = 0; b < d->nbuckets; b++) {
    tuttiCompressorDestroy(d->compressors[b]);
    d->compressors[b] = NULL;
  }
  compress_setup(d, d->compress_spec, steps, min_count);
}

uint64_t ddp_compressed_bytes(const ddp_t *d) {
  uint64_t total = 0, bytes;
  for (int b = 0; b < d->nbuckets; b++)
    if (d->compressors[b] && tuttiCompressorBytesSent(d->compressors[b], &bytes) == ncclSuccess)
      total += bytes;
  return total;
}

void ddp_broadcast(ddp_t *d, void *buf, size_t count, ncclDataType_t type, int root) {
  if (d->world > 1) run_now(d, (job_t){JOB_BROADCAST, buf, buf, count, type, ncclSum, root});
}

void ddp_allreduce_sum(ddp_t *d, void *buf, size_t count, ncclDataType_t type) {
  if (d->world > 1) run_now(d, (job_t){JOB_ALLREDUCE, buf, buf, count, type, ncclSum});
}

void ddp_begin_backward(ddp_t *d, int sync) {
  d->sync = sync;
  d->next_bucket = 0;
  for (int b = 0; b < d->nbuckets; b++) d->pending[b] = d->buckets[b].count;
  d->model->defer_first = d->factor && sync;
  if (!d->model->defer_first) return;
  /* the first layer's gradient arrives as factors, not through on_grad_ready; its input is
   * gathered behind the rest of backward */
  d->pending[d->nbuckets - 1] = 0;
  submit(d, (job_t){JOB_ALLGATHER, (void *)d->model->x, d->f_x, (size_t)d->model->batch * d->f_in,
                    ncclFloat});
}

void ddp_end_backward(ddp_t *d) {
  if (d->sync && d->next_bucket != d->nbuckets) {
    fprintf(stderr, "tutti-train: internal error: backward left buckets unlaunched\n");
    exit(1);
  }
  if (d->sync && d->world > 1 && d->model->defer_first)
    factored_gradient(d);
  else if (d->sync && d->world > 1)
    average_bucket(d, d->nbuckets - 1, run_now);
  d->sync = 0, d->model->defer_first = 0;
}

/* The all-gather of bucket b's slices of `a` (nparams floats), in place. */
static job_t gather_job(const ddp_t *d, int b, float *a) {
  const ddp_bucket_t *k = &d->buckets[b];
  return (job_t){JOB_ALLGATHER, a + k->offset + d->rank * k->slice, a + k->offset, k->slice,
                 ncclFloat};
}

/* Sharded: every rank's slices of `a` to everyone, now. */
static void gather_slices(ddp_t *d, float *a) {
  for (int b = 0; b < d->nbuckets; b++)
    if (d->buckets[b].slice) run_now(d, gather_job(d, b, a));
}

/* Sharded: each rank updates its slice of every bucket, then the parameters are all-gathered
 * on the communication thread in the order the next forward reads them (the last bucket, which
 * holds the first layers, first): a bucket's all-gather starts as soon as its slice is updated,
 * while the main thread updates the next one and then goes on with the next step's batch and
 * first layers; on_params_needed waits for each bucket before its first use. */
void ddp_optimizer_step(ddp_t *d, optim_t *o, float lr) {
  float *p = d->model->params, *g = d->model->grads;
  optim_begin_step(o, lr);
  if (!d->shard) {
    optim_update(o, p, g, 0, o->n);
    return;
  }
  for (int b = d->nbuckets - 1; b >= 0; b--) {
    const ddp_bucket_t *k = &d->buckets[b];
    size_t own = k->offset + d->rank * k->slice, tail = k->offset + k->slice * (size_t)d->world;
    optim_update(o, p, g, own, own + k->slice);
    optim_update(o, p, g, tail, k->offset + k->count); /* every rank: averaged whole */
    if (k->slice) d->gather_job[b] = submit_job(d, gather_job(d, b, p));
  }
}

void ddp_wait_params(ddp_t *d) {
  if (d->world == 1) return;
  wait_all(d);
  for (int b = 0; b < d->nbuckets; b++) d->gather_job[b] = -1;
}

void ddp_gather_state(ddp_t *d, float **arrays, int n) {
  for (int i = 0; d->shard && i < n; i++) gather_slices(d, arrays[i]);
}

void ddp_times(const ddp_t *d, double *comm_s, double *comm_cpu_s, double *wait_s) {
  pthread_mutex_lock((pthread_mutex_t *)&d->lock);
  *comm_s = d->comm_s, *comm_cpu_s = d->comm_cpu_s, *wait_s = d->wait_s;
  pthread_mutex_unlock((pthread_mutex_t *)&d->lock);
}
