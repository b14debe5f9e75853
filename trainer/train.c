/* tutti-train: data-parallel training of an MLP or a CNN on Fashion-MNIST over tutti.
 *
 *   tutti-run -n 2 build/bin/tutti-train --model cnn --epochs 10
 *
 * One process per rank. Each optimizer step, every rank:
 *   1. takes its shard of the step's G = ranks x batch x accum samples (data.h's sampler),
 *   2. runs forward + backward on each micro-batch; on the last one, backward hands finished
 *      gradient buckets to the communication thread, which averages them across ranks while
 *      backward goes on (ddp.h),
 *   3. waits for the last bucket and applies the same optimizer update as every other rank, so
 *      the parameters stay identical everywhere without ever being sent again.
 * Rank 0 prints a line per epoch, writes the CSV log and the checkpoints.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data.h"
#include "ddp.h"
#include "model.h"
#include "optim.h"
#include "options.h"
#include "rng.h"
#include "tensor_mem.h"
#include "train_cuda.h"
#include "tutti.h"

/* Where a step's time goes on the main thread (--profile): data = zeroing the gradients,
 * sampling and the batch copy; wait = blocked on communication (a bucket not yet averaged,
 * the last bucket run on this thread, a layer's parameters not yet all-gathered). */
enum { PH_DATA, PH_FORWARD, PH_BACKWARD, PH_WAIT, PH_OPTIM, PHASES };
static const char *const phase_names[PHASES] = {"data", "forward", "backward", "wait", "optim"};

typedef struct {
  options_t opt;
  ncclComm_t comm;
  int rank, world;
  dataset_t train, test;
  model_t model;
  optim_t optim;
  ddp_t *ddp;
  sampler_t sampler;
  float *x;       /* (batch, 784) */
  uint8_t *y;     /* (batch) */
  int *idx;       /* (batch) */
  uint64_t *keys; /* (batch) dropout keys of the samples */
  int global_batch, steps_per_epoch;
  int64_t total_steps, warmup_steps;
  float lr; /* peak learning rate after the scaling rule */
  /* where we are */
  int64_t epoch, step_in_epoch, global_step;
  double sums[3];                  /* this rank's loss sum, correct, samples of the epoch so far */
  double elapsed_s;                /* training time of earlier runs (resume) */
  int64_t run_step0, steady_step0; /* first step of this run; of the steady-state measurement */
  double steady_t0, steady_cpu0;   /* when this run completed BENCH_SKIP_STEPS steps */
  double phase_s[PHASES], mark_s;  /* main-thread seconds per phase since steady_t0 */
  double mark_wait_s;              /* ddp's wait time at mark_s */
  double steady_comm[3];           /* ddp_times at steady_t0 */
  FILE *log, *trace;
  /* progress lines (--log-every): state at the last line */
  double prog_t, prog_comm, prog_loss, prog_samples;
  int64_t prog_step;
} trainer_t;

static double clock_s(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) {
  return clock_s(CLOCK_MONOTONIC);
}

/* OpenBLAS 0.3.21 (Debian 12) does not know CPUs newer than it, such as Emerald Rapids, and
 * falls back to its Prescott (SSE3) kernels: 5-7x slower sgemm. Its core is chosen when the
 * library loads, before main, so when that happened on a CPU with AVX2 or AVX-512 we set
 * OPENBLAS_CORETYPE and run ourselves again. An explicit OPENBLAS_CORETYPE is left alone. */
char *openblas_get_corename(void);

static void blas_pick_kernels(char **argv) {
  if (getenv("OPENBLAS_CORETYPE") || strcmp(openblas_get_corename(), "Prescott") != 0) return;
  __builtin_cpu_init();
  const char *core = NULL;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    core = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    core = "Haswell";
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv); /* returns only on failure: then run with Prescott */
  unsetenv("OPENBLAS_CORETYPE");
}

/* The steady-state figure of the final line leaves out the first steps (page faults of the
 * first touch of every buffer, caches). */
#define BENCH_SKIP_STEPS 5

#ifndef TUTTI_TRAIN_CUDA /* a build without the CUDA variant has no GPU trainer */
int train_cuda_usable(const options_t *o) {
  (void)o;
  fprintf(stderr,
          "tutti-train: --device cuda needs tutti's CUDA variant (this build has no CUDA "
          "toolkit; train_cuda.cu is not compiled in)\n");
  return 2;
}

int train_cuda_run(const options_t *o, ncclComm_t comm, const dataset_t *train,
                   const dataset_t *test) {
  (void)o, (void)comm, (void)train, (void)test;
  return 2;
}
#endif

static void die(const char *msg) {
  fprintf(stderr, "tutti-train: %s\n", msg);
  exit(1);
}

/* ---------------------------------------------------------------- setup */

/* Under a launcher (tutti-run, mpirun, srun, torchrun-style env) one communicator per process;
 * started by hand, a single process without one. */
static ncclComm_t comm_init(void) {
  static const char *launcher_vars[] = {"TUTTI_RANK", "RANK", "OMPI_COMM_WORLD_RANK",
                                        "SLURM_PROCID"};
  int launched = 0;
  for (int i = 0; i < 4; i++) launched |= getenv(launcher_vars[i]) != NULL;
  if (!launched) return NULL;
  ncclComm_t comm;
  ncclResult_t res = tuttiCommInitFromEnv(&comm);
  if (res != ncclSuccess) {
    fprintf(stderr, "tutti-train: cannot create the communicator: %s: %s\n",
            ncclGetErrorString(res), ncclGetLastError(NULL));
    exit(1);
  }
  return comm;
}

static void load_data(trainer_t *t) {
  if (data_load(t->opt.data_dir, "train", &t->train) ||
      data_load(t->opt.data_dir, "t10k", &t->test))
    exit(1);
  if (t->opt.train_limit && t->opt.train_limit < t->train.n) t->train.n = t->opt.train_limit;
  if (t->opt.test_limit && t->opt.test_limit < t->test.n) t->test.n = t->opt.test_limit;
}

static void setup(trainer_t *t, int argc, char **argv) {
  blas_pick_kernels(argv);
  options_parse(argc, argv, &t->opt);
  const options_t *o = &t->opt;
  if (o->blas_info) {
    printf("%s\n", openblas_get_corename());
    exit(0);
  }
  openblas_set_num_threads(o->threads);
  if (o->device_cuda && train_cuda_usable(o) != 0) exit(2);
  t->comm = comm_init();
  load_data(t);
  if (o->device_cuda) { /* the GPU trainer (train_cuda.cu) from here on */
    int rc = train_cuda_run(o, t->comm, &t->train, &t->test);
    if (t->comm) ncclCommDestroy(t->comm);
    exit(rc);
  }
  tensor_alloc_use(ddp_alloc, ddp_free); /* parameters, gradients, activations: mappable */
  if (model_create(&t->model, o->model, o->batch) ||
      optim_create(&t->optim, o->optim, t->model.nparams))
    die("out of memory");
  t->optim.momentum = o->momentum, t->optim.weight_decay = o->weight_decay;
  t->ddp = ddp_create(t->comm, &t->model, o->bucket_mb, !o->no_shard_optim,
                      !o->no_factor && o->accum == 1, o->compress);
  t->rank = ddp_rank(t->ddp), t->world = ddp_world(t->ddp);
  t->global_batch = o->batch * o->accum * t->world;
  if (sampler_init(&t->sampler, t->train.n, o->seed, t->world, t->rank, o->batch, o->accum))
    die("out of memory");
  t->steps_per_epoch = sampler_steps_per_epoch(&t->sampler);
  if (t->steps_per_epoch == 0) die("the global batch is larger than the training set");
  t->total_steps = (int64_t)o->epochs * t->steps_per_epoch;
  t->warmup_steps = (int64_t)(o->warmup_epochs * t->steps_per_epoch + 0.5);
  int64_t compress_warmup = o->compress_warmup; /* -1: the spec's default */
  if (compress_warmup < 0 && strncmp(o->compress, "topk", 4) == 0)
    compress_warmup = t->steps_per_epoch; /* sparsity warmed up over the first epoch, as Deep
                                             Gradient Compression does */
  else if (compress_warmup < 0 && strncmp(o->compress, "powersgd", 8) == 0)
    compress_warmup = t->warmup_steps; /* on after the lr warm-up (PyTorch advises
                                          start_powerSGD_iter no earlier) */
  if (compress_warmup >= 0 || o->compress_min > 0)
    ddp_compress_tune(t->ddp, compress_warmup, o->compress_min);
  t->lr = options_scaled_lr(o, t->global_batch);
  t->x = tensor_alloc((size_t)o->batch * DATA_PIXELS * sizeof(float)); /* gathered (factors) */
  t->y = malloc((size_t)o->batch);
  t->idx = malloc((size_t)o->batch * sizeof(int));
  t->keys = malloc((size_t)o->batch * sizeof(uint64_t));
  if (!t->x || !t->y || !t->idx || !t->keys) die("out of memory");
  t->model.dropout = o->dropout;
}

static void print_setup(const trainer_t *t) {
  const options_t *o = &t->opt;
  const ddp_bucket_t *b;
  int nb = ddp_buckets(t->ddp, &b);
  printf(
      "tutti-train: %s (%zu parameters), %s, %d rank%s x batch %d x accum %d = global batch %d"
      "\n  lr %.3g (--lr %.3g at global batch %d, scaled), warmup %lld steps, cosine to %lld "
      "steps (%d epochs x %d)\n  weight decay %.3g, augment %s, dropout %.2g, seed %llu, "
      "%d bucket%s:",
      model_name(o->model), t->model.nparams, optim_name(o->optim), t->world,
      t->world > 1 ? "s" : "", o->batch, o->accum, t->global_batch, (double)t->lr, (double)o->lr,
      o->lr_ref_batch, (long long)t->warmup_steps, (long long)t->total_steps, o->epochs,
      t->steps_per_epoch, (double)o->weight_decay, augment_name(o->augment), (double)o->dropout,
      (unsigned long long)o->seed, nb, nb > 1 ? "s" : "");
  for (int i = 0; i < nb; i++)
    printf(" [%s..%s %.2f MB]", t->model.tensors[b[i].first_tensor + b[i].ntensors - 1].name,
           t->model.tensors[b[i].first_tensor].name, b[i].count * 4.0 / 1e6);
  printf("%s%s%s%s\n  tutti %s, OpenBLAS %s kernels, %d thread%s per rank\n",
         strcmp(o->compress, "none") ? ", gradients compressed: " : "",
         strcmp(o->compress, "none") ? o->compress : "",
         ddp_sharded(t->ddp) ? ", optimizer sharded" : "",
         ddp_factored(t->ddp) ? ", fc1 gradient from its sufficient factors" : "",
         tuttiVersionString(), openblas_get_corename(), o->threads, o->threads > 1 ? "s" : "");
  fflush(stdout);
}

/* ---------------------------------------------------------------- state: start, resume, save */

/* Rank 0's parameters and optimizer state become everyone's (DDP's initial broadcast). */
static void broadcast_state(trainer_t *t, ckpt_state_t *st) {
  float *arrays[2];
  int n = optim_state_arrays(&t->optim, arrays);
  ddp_broadcast(t->ddp, st, sizeof(*st), ncclUint8, 0);
  ddp_broadcast(t->ddp, t->model.params, t->model.nparams, ncclFloat, 0);
  for (int i = 0; i < n; i++) ddp_broadcast(t->ddp, arrays[i], t->model.nparams, ncclFloat, 0);
}

/* Fresh start or --resume: returns with params, optimizer state and position equal on all ranks. */
static void start_state(trainer_t *t) {
  ckpt_state_t st;
  memset(&st, 0, sizeof(st));
  model_init_params(&t->model, t->opt.seed);
  int status = 1; /* 0: resumed, 1: fresh start, -1: unusable checkpoint */
  char config[sizeof(st.config)];
  options_config_string(&t->opt, t->global_batch, config, sizeof(config));
  if (t->rank == 0 && t->opt.resume) {
    float *arrays[2];
    int n = optim_state_arrays(&t->optim, arrays);
    status = ckpt_load(t->opt.checkpoint, &st, t->model.params, t->model.nparams, arrays, n);
    if (status == 0 && strcmp(st.config, config) != 0) {
      fprintf(stderr,
              "tutti-train: %s was written with other settings:\n  it has: %s\n  now:    %s\n",
              t->opt.checkpoint, st.config, config);
      status = -1;
    }
  }
  ddp_broadcast(t->ddp, &status, 1, ncclInt32, 0);
  if (status < 0) exit(1);
  broadcast_state(t, &st);
  t->optim.t = st.adam_t;
  t->epoch = st.epoch, t->step_in_epoch = st.step_in_epoch, t->global_step = st.global_step;
  t->elapsed_s = st.elapsed_s;
  memset(t->sums, 0, sizeof(t->sums));
  if (t->rank == 0) memcpy(t->sums, st.train_sums, sizeof(t->sums)); /* counted once */
  if (status == 0 && t->rank == 0 && t->epoch >= t->opt.epochs)
    printf("resumed from %s: training is complete (%lld steps), nothing left to do\n",
           t->opt.checkpoint, (long long)t->global_step);
  else if (status == 0 && t->rank == 0)
    printf("resumed from %s: epoch %lld, step %lld of the epoch, %lld steps done\n",
           t->opt.checkpoint, (long long)t->epoch + 1, (long long)t->step_in_epoch,
           (long long)t->global_step);
}

/* Collective: folds every rank's partial-epoch sums into rank 0's, then rank 0 writes. */
static void save_checkpoint(trainer_t *t, double elapsed_s) {
  float *state[2];
  ddp_gather_state(t->ddp, state, optim_state_arrays(&t->optim, state));
  ddp_allreduce_sum(t->ddp, t->sums, 3, ncclDouble);
  if (t->rank != 0) {
    memset(t->sums, 0, sizeof(t->sums));
    return;
  }
  ckpt_state_t st;
  memset(&st, 0, sizeof(st));
  options_config_string(&t->opt, t->global_batch, st.config, sizeof(st.config));
  st.epoch = t->epoch, st.step_in_epoch = t->step_in_epoch, st.global_step = t->global_step;
  st.adam_t = t->optim.t, st.nparams = t->model.nparams, st.elapsed_s = elapsed_s;
  memcpy(st.train_sums, t->sums, sizeof(t->sums));
  float *arrays[2];
  st.nopt = optim_state_arrays(&t->optim, arrays);
  if (ckpt_save(t->opt.checkpoint, &st, t->model.params, arrays, st.nopt)) exit(1);
}

/* ---------------------------------------------------------------- test hooks */

/* 64-bit hash of the parameter bytes: equal hashes on all ranks <=> (whp) equal parameters. */
static uint64_t params_hash(const model_t *m) {
  const uint32_t *w = (const uint32_t *)m->params;
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < m->nparams; i++) h = (h ^ w[i]) * 0x100000001b3ull ^ (h >> 29);
  return h;
}

static FILE *open_dump(const trainer_t *t, const char *what, const char *mode) {
  char path[4200];
  snprintf(path, sizeof(path), "%s.rank%d.%s", t->opt.dump_prefix, t->rank, what);
  FILE *f = fopen(path, mode);
  if (!f) die("cannot open a --dump file");
  return f;
}

static void dump_params(const trainer_t *t) {
  FILE *f = open_dump(t, "params", "wb");
  if (fwrite(t->model.params, sizeof(float), t->model.nparams, f) != t->model.nparams) die("dump");
  fclose(f);
}

/* ---------------------------------------------------------------- training */

/* Charges the time since the last mark to phase ph, except the time the main thread spent
 * blocked on communication meanwhile (waiting for a bucket, running one, or waiting for the
 * parameters of a layer in forward), which goes to PH_WAIT. */
static void phase_end(trainer_t *t, int ph) {
  double now = now_s(), comm_s, comm_cpu_s, wait_s;
  ddp_times(t->ddp, &comm_s, &comm_cpu_s, &wait_s);
  double waited = wait_s - t->mark_wait_s;
  t->phase_s[PH_WAIT] += waited;
  t->phase_s[ph] += now - t->mark_s - waited;
  t->mark_s = now, t->mark_wait_s = wait_s;
}

/* One optimizer step: accum micro-batches, gradients averaged over ranks, one update. */
static void train_step(trainer_t *t) {
  const options_t *o = &t->opt;
  model_t *m = &t->model;
  double comm_s, comm_cpu_s; /* the marks: time between steps is charged nowhere */
  ddp_times(t->ddp, &comm_s, &comm_cpu_s, &t->mark_wait_s);
  t->mark_s = now_s();
  model_forget_grad(m); /* the first micro-step's backward overwrites the gradients */
  for (int micro = 0; micro < o->accum; micro++) {
    for (int i = 0; i < o->batch; i++) {
      t->idx[i] = sampler_index(&t->sampler, (int)t->step_in_epoch, micro, i);
      t->keys[i] = rng_key(o->seed, RNG_DROPOUT, (uint64_t)t->epoch, (uint64_t)t->idx[i]);
    }
    data_gather(&t->train, t->idx, o->batch, o->augment, o->seed, (int)t->epoch, t->x, t->y);
    m->keys = t->keys; /* training: dropout on */
    phase_end(t, PH_DATA);
    model_forward(m, t->x, t->y, o->batch);
    double loss;
    int correct;
    model_score(m, t->y, o->batch, &loss, &correct);
    t->sums[0] += loss, t->sums[1] += correct, t->sums[2] += o->batch;
    t->prog_loss += loss, t->prog_samples += o->batch;
    phase_end(t, PH_FORWARD);
    ddp_begin_backward(t->ddp, micro == o->accum - 1); /* communicate on the last one only */
    model_backward(m, t->y, o->batch, 1.0f / (float)(o->batch * o->accum));
    ddp_end_backward(t->ddp); /* its wait and the last bucket go to PH_WAIT */
    phase_end(t, PH_BACKWARD);
  }
  float lr = lr_at(t->global_step, t->total_steps, t->warmup_steps, t->lr, o->final_lr_frac);
  ddp_optimizer_step(t->ddp, &t->optim, lr);
  phase_end(t, PH_OPTIM);
  t->global_step++, t->step_in_epoch++;
  if (t->global_step - t->run_step0 == BENCH_SKIP_STEPS) {
    t->steady_t0 = now_s(), t->steady_step0 = t->global_step;
    t->steady_cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    memset(t->phase_s, 0, sizeof(t->phase_s));
    ddp_times(t->ddp, &t->steady_comm[0], &t->steady_comm[1], &t->steady_comm[2]);
  }
  if (t->trace) ddp_wait_params(t->ddp);
  if (t->trace)
    fprintf(t->trace, "%lld %016llx\n", (long long)t->global_step,
            (unsigned long long)params_hash(m));
}

/* Test loss and accuracy over all ranks: rank r evaluates images r, r + N, r + 2N, ... */
static void evaluate(trainer_t *t, double *loss, double *acc) {
  double sums[3] = {0, 0, 0};
  int B = t->opt.batch;
  t->model.keys = NULL; /* evaluation: no dropout */
  for (int first = t->rank; first < t->test.n; first += B * t->world) {
    int count = 0;
    for (int i = first; i < t->test.n && count < B; i += t->world) t->idx[count++] = i;
    data_gather(&t->test, t->idx, count, AUG_NONE, 0, 0, t->x, t->y);
    model_forward(&t->model, t->x, t->y, count);
    double l;
    int c;
    model_score(&t->model, t->y, count, &l, &c);
    sums[0] += l, sums[1] += c, sums[2] += count;
  }
  ddp_allreduce_sum(t->ddp, sums, 3, ncclDouble);
  *loss = sums[0] / sums[2], *acc = sums[1] / sums[2];
}

typedef struct {
  double train_loss, train_acc, test_loss, test_acc, samples_per_s;
  double compute_s, comm_s, comm_cpu_s, wait_s, epoch_s;
  float lr;      /* at the epoch's last step (the CSV log's column) */
  double lr_avg; /* mean over the epoch's steps (the printed line: the cosine schedule ends at
                  * final_lr_frac * lr, 0 by default, so the last step's value says little) */
  double wire_bytes_per_step; /* --compress: bytes the gradient all-reduces sent per step */
} epoch_stats_t;

static void log_epoch(trainer_t *t, const epoch_stats_t *s) {
  if (t->rank != 0) return;
  printf(
      "epoch %2lld/%d | loss %.4f | train %6.2f%% | test %6.2f%% loss %.4f | lr(avg) %.2e | "
      "%7.0f samples/s | compute %6.1fs comm %5.1fs (cpu %4.1fs, exposed %4.1fs) | %.1fs\n",
      (long long)t->epoch + 1, t->opt.epochs, s->train_loss, 100 * s->train_acc, 100 * s->test_acc,
      s->test_loss, s->lr_avg, s->samples_per_s, s->compute_s, s->comm_s, s->comm_cpu_s, s->wait_s,
      s->epoch_s);
  if (strcmp(t->opt.compress, "none") != 0)
    printf("  compressed (%s): %.3f MB sent per step by each rank\n", t->opt.compress,
           s->wire_bytes_per_step / 1e6);
  fflush(stdout);
  if (!t->log) return;
  fprintf(t->log, "%lld,%lld,%.6f,%.6f,%.6f,%.6f,%.6e,%.1f,%.3f,%.3f,%.3f,%.3f,%.3f\n",
          (long long)t->epoch + 1, (long long)t->global_step, s->train_loss, s->train_acc,
          s->test_loss, s->test_acc, (double)s->lr, s->samples_per_s, s->compute_s, s->comm_s,
          s->comm_cpu_s, s->wait_s, t->elapsed_s);
  fflush(t->log);
}

static void format_eta(double s, char *out, size_t len) {
  long v = (long)(s + 0.5);
  if (v >= 3600)
    snprintf(out, len, "%ldh%02ldm", v / 3600, v / 60 % 60);
  else
    snprintf(out, len, "%ldm%02lds", v / 60, v % 60);
}

/* A progress line on rank 0 every --log-every steps (default: every 5 s): steps/s, this rank's
 * mean training loss, the share of wall time spent communicating, and the time left for the
 * remaining steps at the current rate (evaluation not included). */
static void progress(trainer_t *t) {
  double now = now_s();
  int every = t->opt.log_every;
  int64_t steps = t->global_step - t->prog_step;
  int due = every > 0 ? t->global_step % every == 0 : every < 0 && now - t->prog_t >= 5.0;
  if (t->rank != 0 || !due || steps <= 0 || t->step_in_epoch >= t->steps_per_epoch) return;
  double comm, cpu, wait;
  ddp_times(t->ddp, &comm, &cpu, &wait);
  double dt = now - t->prog_t, rate = steps / dt;
  int64_t end =
      t->opt.max_steps && t->opt.max_steps < t->total_steps ? t->opt.max_steps : t->total_steps;
  char eta[32];
  format_eta((double)(end - t->global_step) / rate, eta, sizeof(eta));
  printf("  epoch %lld/%d step %lld/%d | %.2f steps/s | loss %.4f | comm %.0f%% | ETA %s\n",
         (long long)t->epoch + 1, t->opt.epochs, (long long)t->step_in_epoch, t->steps_per_epoch,
         rate, t->prog_loss / t->prog_samples, 100.0 * (comm - t->prog_comm) / dt, eta);
  fflush(stdout);
  t->prog_t = now, t->prog_comm = comm, t->prog_step = t->global_step;
  t->prog_loss = t->prog_samples = 0;
}

static void progress_reset(trainer_t *t) {
  double cpu, wait;
  ddp_times(t->ddp, &t->prog_comm, &cpu, &wait);
  t->prog_t = now_s(), t->prog_step = t->global_step;
  t->prog_loss = t->prog_samples = 0;
}

static int should_stop(const trainer_t *t) {
  return t->opt.max_steps && t->global_step >= t->opt.max_steps;
}

/* Runs the rest of the current epoch; returns 1 if --max-steps stopped it. */
static int run_epoch(trainer_t *t) {
  epoch_stats_t s = {0};
  double comm0, cpu0, wait0, comm1, cpu1, wait1, t0 = now_s();
  int64_t first_step = t->step_in_epoch;
  uint64_t wire0 = ddp_compressed_bytes(t->ddp);
  ddp_times(t->ddp, &comm0, &cpu0, &wait0);
  sampler_set_epoch(&t->sampler, (int)t->epoch);
  progress_reset(t);
  while (t->step_in_epoch < t->steps_per_epoch) {
    if (should_stop(t)) { /* mid-epoch: a checkpoint to resume from, no epoch line */
      if (t->opt.checkpoint) save_checkpoint(t, t->elapsed_s + now_s() - t0);
      t->elapsed_s += now_s() - t0;
      return 1;
    }
    train_step(t);
    progress(t);
    if (t->opt.checkpoint_every && t->global_step % t->opt.checkpoint_every == 0)
      if (t->opt.checkpoint) save_checkpoint(t, t->elapsed_s + now_s() - t0);
  }
  s.epoch_s = now_s() - t0;
  ddp_times(t->ddp, &comm1, &cpu1, &wait1);
  s.comm_s = comm1 - comm0, s.comm_cpu_s = cpu1 - cpu0, s.wait_s = wait1 - wait0;
  s.compute_s = s.epoch_s - s.wait_s;
  s.samples_per_s = (double)(t->step_in_epoch - first_step) * t->global_batch / s.epoch_s;
  s.wire_bytes_per_step =
      (double)(ddp_compressed_bytes(t->ddp) - wire0) /
      (double)(t->step_in_epoch - first_step > 0 ? t->step_in_epoch - first_step : 1);
  t->elapsed_s += s.epoch_s;
  s.lr = lr_at(t->global_step - 1, t->total_steps, t->warmup_steps, t->lr, t->opt.final_lr_frac);
  int64_t nsteps = t->step_in_epoch - first_step;
  for (int64_t k = t->global_step - nsteps; k < t->global_step; k++)
    s.lr_avg += lr_at(k, t->total_steps, t->warmup_steps, t->lr, t->opt.final_lr_frac);
  s.lr_avg /= nsteps > 0 ? (double)nsteps : 1.0;
  ddp_allreduce_sum(t->ddp, t->sums, 3, ncclDouble);
  s.train_loss = t->sums[0] / t->sums[2], s.train_acc = t->sums[1] / t->sums[2];
  s.test_loss = s.test_acc = NAN;
  if (!t->opt.no_eval) evaluate(t, &s.test_loss, &s.test_acc);
  log_epoch(t, &s);
  t->epoch++, t->step_in_epoch = 0;
  memset(t->sums, 0, sizeof(t->sums));
  if (t->opt.checkpoint) save_checkpoint(t, t->elapsed_s);
  return 0;
}

static void open_logs(trainer_t *t) {
  if (t->opt.dump_prefix) t->trace = open_dump(t, "trace", t->opt.resume ? "a" : "w");
  if (t->rank != 0 || !t->opt.log_path) return;
  FILE *probe = fopen(t->opt.log_path, "r");
  int fresh = !probe || !t->opt.resume || (fgetc(probe) == EOF);
  if (probe) fclose(probe);
  t->log = fopen(t->opt.log_path, fresh ? "w" : "a");
  if (!t->log) die("cannot open --log file");
  if (fresh)
    fprintf(t->log,
            "epoch,step,train_loss,train_acc,test_loss,test_acc,lr,samples_per_s,"
            "compute_s,comm_s,comm_cpu_s,comm_exposed_s,elapsed_s\n");
}

/* --profile: every rank prints its steady-state milliseconds per step, phase by phase, and
 * its communication thread's time inside collectives (wall clock and CPU). */
static void print_profile(const trainer_t *t, double comm_s, double comm_cpu_s) {
  double steps = (double)(t->global_step - t->steady_step0);
  if (t->steady_t0 <= 0 || steps <= 0) return;
  char line[512];
  int n =
      snprintf(line, sizeof(line), "profile rank %d, ms per step over %.0f steps:", t->rank, steps);
  for (int p = 0; p < PHASES; p++)
    n += snprintf(line + n, sizeof(line) - (size_t)n, " %s %.3f", phase_names[p],
                  1e3 * t->phase_s[p] / steps);
  snprintf(line + n, sizeof(line) - (size_t)n, " | in collectives %.3f (cpu %.3f)\n",
           1e3 * (comm_s - t->steady_comm[0]) / steps,
           1e3 * (comm_cpu_s - t->steady_comm[1]) / steps);
  fputs(line, stdout);
  fflush(stdout);
}

static void finish(trainer_t *t, double run_s, int64_t steps_run) {
  double comm_s, comm_cpu_s, wait_s, end = now_s();
  ddp_times(t->ddp, &comm_s, &comm_cpu_s, &wait_s);
  if (t->rank == 0) {
    printf(
        "%s after %lld steps: %.0f samples/s over this run (%lld steps, %.1fs; comm %.1fs, "
        "of it CPU %.1fs, exposed %.1fs)",
        should_stop(t) ? "stopped" : "done", (long long)t->global_step,
        steps_run * (double)t->global_batch / run_s, (long long)steps_run, run_s, comm_s,
        comm_cpu_s, wait_s);
    if (t->steady_t0 > 0 && t->global_step > t->steady_step0) {
      double samples = (double)(t->global_step - t->steady_step0) * t->global_batch;
      double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - t->steady_cpu0; /* all our threads */
      printf(", %.0f samples/s after the first %d steps (%.0f samples per CPU-second per rank)",
             samples / (end - t->steady_t0), BENCH_SKIP_STEPS, samples / t->world / cpu);
    }
    printf("\n");
  }
  if (t->opt.profile) print_profile(t, comm_s, comm_cpu_s);
  ddp_wait_params(t->ddp);
  if (t->opt.dump_prefix) dump_params(t);
  if (t->trace) fclose(t->trace);
  if (t->log) fclose(t->log);
  ddp_destroy(t->ddp);
  if (t->comm) ncclCommDestroy(t->comm);
  sampler_free(&t->sampler);
  optim_free(&t->optim);
  model_free(&t->model);
  data_free(&t->train);
  data_free(&t->test);
  tensor_free(t->x), free(t->y), free(t->idx), free(t->keys);
}

int main(int argc, char **argv) {
  static trainer_t t;
  setvbuf(stdout, NULL, _IOLBF, 0); /* a run stopped by a time limit keeps the epochs it printed */
  setup(&t, argc, argv);
  if (t.rank == 0) print_setup(&t);
  start_state(&t);
  open_logs(&t);
  double t0 = now_s();
  int64_t step0 = t.run_step0 = t.global_step;
  while (t.epoch < t.opt.epochs && !should_stop(&t))
    if (run_epoch(&t)) break;
  finish(&t, now_s() - t0, t.global_step - step0);
  return 0;
}
