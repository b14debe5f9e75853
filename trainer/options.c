/* Command-line options of tutti-train, their defaults and the learning-rate scaling rule. */
#include "options.h"

#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tutti.h"

static const char usage_text[] =
    "usage: tutti-train [options]      (one process per rank: tutti-run -n N, mpirun, torchrun "
    "env)\n"
    "  --model mlp|cnn        model (mlp)\n"
    "  --device cpu|cuda      where to train (cpu); cuda: the model on a GPU with cuBLAS, the\n"
    "                         gradients all-reduced on the device (CUDA builds only)\n"
    "  --epochs N             epochs (10)\n"
    "  --batch B              per-rank micro-batch; global batch = B x ranks x accum (64)\n"
    "  --accum N              gradient accumulation micro-steps per optimizer step (1)\n"
    "  --optim adamw|sgd      optimizer (adamw)\n"
    "  --lr X                 learning rate at the reference global batch\n"
    "                         (adamw 1e-3, sgd 0.05)\n"
    "  --lr-ref-batch R       reference global batch of --lr (128)\n"
    "  --lr-scaling auto|linear|sqrt|none\n"
    "                         lr = X x (global/R) [linear] or x sqrt(global/R) [sqrt];\n"
    "                         auto: linear for sgd, sqrt for adamw (auto)\n"
    "  --momentum M           sgd momentum (0.9)\n"
    "  --wd W                 weight decay (adamw 0.05 decoupled, sgd 5e-4 L2)\n"
    "  --warmup-epochs E      linear warmup length, then cosine decay (0.5)\n"
    "  --final-lr-frac F      the cosine ends at lr x F (0)\n"
    "  --augment none|flip|flip+shift   training augmentation (cnn: flip+shift, mlp: flip)\n"
    "  --dropout P            dropout after the hidden fully connected ReLUs (0)\n"
    "  --seed S               seed of init, shuffling and augmentation (1)\n"
    "  --bucket-mb MB         gradient bucket size; the first bucket is capped at 1 MiB (25)\n"
    "  --no-shard-optim       every rank updates all parameters (PyTorch DDP's way) instead of\n"
    "                         its 1/ranks share followed by an all-gather (ZeRO-1)\n"
    "  --no-factor-grads      sharded MLP: reduce-scatter fc1's gradient instead of gathering\n"
    "                         its sufficient factors (input and output gradient of the layer)\n"
    "  --threads T            OpenBLAS threads per rank (1)\n"
    "  --data DIR             Fashion-MNIST folder (" DATA_DEFAULT_DIR
    ")\n"
    "  --checkpoint FILE      write FILE (atomically) after each epoch and when stopping\n"
    "  --checkpoint-every N   also every N optimizer steps\n"
    "  --resume               continue from --checkpoint FILE if it exists\n"
    "  --max-steps N          stop after N optimizer steps in all (checkpoint written)\n"
    "  --log-every N          progress line every N steps (steps/s, loss, comm share, ETA);\n"
    "                         0: off; default: one every 5 s, so only long epochs print\n"
    "  --log FILE.csv         one CSV row per epoch (rank 0)\n"
    "  --no-eval              skip the test-set evaluation (benchmarks)\n"
    "  --profile              at the end, each rank prints its ms per step by phase (data,\n"
    "                         forward, backward, wait for communication, optimizer)\n"
    "  --train-limit N, --test-limit N   use the first N images only (tests)\n"
    "  --dump PREFIX          write PREFIX.rank<r>.params (final parameters, raw float32) and\n"
    "                         PREFIX.rank<r>.trace (a hash of the parameters after every step)\n"
    "  --compress none|bf16|fp16|int8|topk:F|powersgd:R\n"
    "                         gradient compression of the bucket all-reduces (none): bf16/fp16\n"
    "                         casts, int8 per 256 elements, the fraction F of largest elements,\n"
    "                         rank-R PowerSGD; all but the casts with error feedback. Implies\n"
    "                         --no-shard-optim and --no-factor-grads (docs/compression.md)\n"
    "  --compress-warmup N    steps before compression is fully on: topk's fraction falls from\n"
    "                         all to F over them (one epoch), powersgd runs exact all-reduces\n"
    "                         (the learning-rate warm-up)\n"
    "  --compress-min-count N tensors of fewer elements are sent exactly, the others compressed\n"
    "                         (topk, powersgd; 65536 = 256 KiB of fp32; 0: compress all)\n"
    "  --blas-info            print the OpenBLAS kernels in use and exit\n";

static void usage(int code) {
  fputs(usage_text, code ? stderr : stdout);
  exit(code);
}

static void bad(const char *opt, const char *val) {
  fprintf(stderr, "tutti-train: bad value '%s' for --%s\n", val, opt);
  usage(2);
}

static long parse_long(const char *opt, const char *s, long lo, long hi) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < lo || v > hi) bad(opt, s);
  return v;
}

static double parse_double(const char *opt, const char *s, double lo, double hi) {
  char *end;
  double v = strtod(s, &end);
  if (*end || !(v >= lo && v <= hi)) bad(opt, s);
  return v;
}

static void set_defaults(options_t *o) {
  memset(o, 0, sizeof(*o));
  o->model = MODEL_MLP, o->optim = OPT_ADAMW;
  o->epochs = 10, o->batch = 64, o->accum = 1, o->threads = 1;
  o->lr = -1.0f, o->lr_ref_batch = 128, o->lr_scaling = LR_SCALE_AUTO;
  o->momentum = 0.9f, o->weight_decay = -1.0f;
  o->warmup_epochs = 0.5f, o->final_lr_frac = 0.0f;
  o->seed = 1, o->bucket_mb = 25.0, o->compress = "none";
  o->compress_warmup = -1, o->compress_min = 65536;
  o->data_dir = DATA_DEFAULT_DIR;
  o->log_every = -1;
}

/* Fills what depends on other options: per-optimizer and per-model defaults. */
static void finish_defaults(options_t *o) {
  if (o->lr < 0) o->lr = o->optim == OPT_ADAMW ? 1e-3f : 0.05f;
  if (o->weight_decay < 0) o->weight_decay = o->optim == OPT_ADAMW ? 0.05f : 5e-4f;
  if (!o->augment_set) o->augment = o->model == MODEL_CNN ? AUG_FLIP_SHIFT : AUG_FLIP;
  if (o->resume && !o->checkpoint) {
    fprintf(stderr, "tutti-train: --resume needs --checkpoint FILE\n");
    usage(2);
  }
}

/* ---------------------------------------------------------------- the option table */

static int parse_model(const char *v, options_t *o) {
  return model_parse(v, &o->model);
}
static int parse_optim(const char *v, options_t *o) {
  return optim_parse(v, &o->optim);
}

static int parse_augment(const char *v, options_t *o) {
  o->augment_set = 1;
  return augment_parse(v, &o->augment);
}

static int parse_scaling(const char *v, options_t *o) {
  static const char *names[] = {"auto", "linear", "sqrt", "none"};
  for (int i = 0; i < 4; i++)
    if (strcmp(v, names[i]) == 0) return o->lr_scaling = (lr_scaling_t)i, 0;
  return -1;
}

static int parse_device(const char *v, options_t *o) {
  if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) return -1;
  o->device_cuda = strcmp(v, "cuda") == 0;
  return 0;
}

static int parse_compress(const char *v, options_t *o) {
  tuttiCompressorConfig_t cfg;
  if (tuttiCompressorParse(v, &cfg) != ncclSuccess) return -1;
  o->compress = v;
  return 0;
}

static int help(const char *v, options_t *o) {
  usage(0);
  return 0;
}

static int version(const char *v, options_t *o) {
  printf("tutti-train (tutti) %s\n", TUTTI_VERSION_STRING);
  exit(0);
}

typedef enum {
  ARG_INT,
  ARG_I64,
  ARG_U64,
  ARG_FLOAT,
  ARG_DOUBLE,
  ARG_STRING,
  ARG_FLAG,
  ARG_CALL,
  ARG_ACTION
} arg_kind_t;

/* One option: where its value goes (a field of options_t) and the range it accepts; ARG_CALL
 * options parse their value themselves, ARG_FLAG and ARG_ACTION take none. */
typedef struct {
  const char *name;
  arg_kind_t kind;
  size_t offset;
  double lo, hi;
  int (*call)(const char *value, options_t *o); /* 0 on success */
} option_spec_t;

#define FIELD(f) offsetof(options_t, f)
static const option_spec_t specs[] = {
    {"model", ARG_CALL, 0, 0, 0, parse_model},
    {"device", ARG_CALL, 0, 0, 0, parse_device},
    {"epochs", ARG_INT, FIELD(epochs), 1, 100000},
    {"batch", ARG_INT, FIELD(batch), 1, 65536},
    {"accum", ARG_INT, FIELD(accum), 1, 65536},
    {"optim", ARG_CALL, 0, 0, 0, parse_optim},
    {"lr", ARG_FLOAT, FIELD(lr), 0, 100},
    {"lr-ref-batch", ARG_INT, FIELD(lr_ref_batch), 1, 1 << 24},
    {"lr-scaling", ARG_CALL, 0, 0, 0, parse_scaling},
    {"momentum", ARG_FLOAT, FIELD(momentum), 0, 1},
    {"wd", ARG_FLOAT, FIELD(weight_decay), 0, 10},
    {"warmup-epochs", ARG_FLOAT, FIELD(warmup_epochs), 0, 1000},
    {"final-lr-frac", ARG_FLOAT, FIELD(final_lr_frac), 0, 1},
    {"augment", ARG_CALL, 0, 0, 0, parse_augment},
    {"dropout", ARG_FLOAT, FIELD(dropout), 0, 0.95},
    {"seed", ARG_U64, FIELD(seed), 0, 0x7fffffff},
    {"bucket-mb", ARG_DOUBLE, FIELD(bucket_mb), 0, 1 << 20},
    {"no-shard-optim", ARG_FLAG, FIELD(no_shard_optim)},
    {"no-factor-grads", ARG_FLAG, FIELD(no_factor)},
    {"threads", ARG_INT, FIELD(threads), 1, 1024},
    {"data", ARG_STRING, FIELD(data_dir)},
    {"checkpoint", ARG_STRING, FIELD(checkpoint)},
    {"checkpoint-every", ARG_INT, FIELD(checkpoint_every), 0, 1 << 30},
    {"resume", ARG_FLAG, FIELD(resume)},
    {"max-steps", ARG_I64, FIELD(max_steps), 1, 1e12},
    {"log-every", ARG_INT, FIELD(log_every), 0, 1 << 30},
    {"log", ARG_STRING, FIELD(log_path)},
    {"no-eval", ARG_FLAG, FIELD(no_eval)},
    {"profile", ARG_FLAG, FIELD(profile)},
    {"train-limit", ARG_INT, FIELD(train_limit), 1, 1 << 30},
    {"test-limit", ARG_INT, FIELD(test_limit), 1, 1 << 30},
    {"dump", ARG_STRING, FIELD(dump_prefix)},
    {"compress", ARG_CALL, 0, 0, 0, parse_compress},
    {"compress-warmup", ARG_INT, FIELD(compress_warmup), 0, 1 << 30},
    {"compress-min-count", ARG_INT, FIELD(compress_min), 0, 1 << 30},
    {"blas-info", ARG_FLAG, FIELD(blas_info)},
    {"help", ARG_ACTION, 0, 0, 0, help},
    {"version", ARG_ACTION, 0, 0, 0, version},
};
#define NSPECS ((int)(sizeof(specs) / sizeof(specs[0])))

static void parse_one(const option_spec_t *s, const char *v, options_t *o) {
  char *field = (char *)o + s->offset;
  switch (s->kind) {
    case ARG_INT:
      *(int *)field = (int)parse_long(s->name, v, (long)s->lo, (long)s->hi);
      break;
    case ARG_I64:
      *(int64_t *)field = parse_long(s->name, v, (long)s->lo, (long)s->hi);
      break;
    case ARG_U64:
      *(uint64_t *)field = (uint64_t)parse_long(s->name, v, 0, (long)s->hi);
      break;
    case ARG_FLOAT:
      *(float *)field = (float)parse_double(s->name, v, s->lo, s->hi);
      break;
    case ARG_DOUBLE:
      *(double *)field = parse_double(s->name, v, s->lo, s->hi);
      break;
    case ARG_STRING:
      *(const char **)field = v;
      break;
    case ARG_FLAG:
      *(int *)field = 1;
      break;
    case ARG_CALL:
    case ARG_ACTION:
      if (s->call(v, o)) bad(s->name, v);
      break;
  }
}

void options_parse(int argc, char **argv, options_t *o) {
  struct option longopts[NSPECS + 1];
  for (int i = 0; i < NSPECS; i++) {
    int has_arg = specs[i].kind != ARG_FLAG && specs[i].kind != ARG_ACTION;
    longopts[i] = (struct option){specs[i].name, has_arg, NULL, 256 + i};
  }
  longopts[NSPECS] = (struct option){0};
  set_defaults(o);
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    if (c == 'h') usage(0);
    if (c < 256 || c >= 256 + NSPECS) usage(2);
    parse_one(&specs[c - 256], optarg, o);
  }
  if (optind < argc) {
    fprintf(stderr, "tutti-train: unexpected argument '%s'\n", argv[optind]);
    usage(2);
  }
  finish_defaults(o);
}

/* The learning-rate scaling rule. With a global batch G and reference batch R:
 *   linear (Goyal et al. 2017, for SGD):        lr = X * G / R
 *   sqrt   (Hoffer et al. 2017; Adam variants): lr = X * sqrt(G / R)
 * Doubling the ranks doubles G; the rule keeps the per-sample step size comparable. */
float options_scaled_lr(const options_t *o, int global_batch) {
  lr_scaling_t s = o->lr_scaling;
  if (s == LR_SCALE_AUTO) s = o->optim == OPT_SGD ? LR_SCALE_LINEAR : LR_SCALE_SQRT;
  double ratio = (double)global_batch / o->lr_ref_batch;
  if (s == LR_SCALE_LINEAR) return (float)(o->lr * ratio);
  if (s == LR_SCALE_SQRT) return (float)(o->lr * sqrt(ratio));
  return o->lr;
}

void options_config_string(const options_t *o, int global_batch, char *out, int len) {
  snprintf(out, (size_t)len,
           "model=%s optim=%s epochs=%d global_batch=%d accum=%d lr=%.9g wd=%.9g momentum=%.9g "
           "warmup=%.9g final=%.9g augment=%s dropout=%.9g seed=%llu train_limit=%d%s%s",
           model_name(o->model), optim_name(o->optim), o->epochs, global_batch, o->accum,
           (double)options_scaled_lr(o, global_batch), (double)o->weight_decay, (double)o->momentum,
           (double)o->warmup_epochs, (double)o->final_lr_frac, augment_name(o->augment),
           (double)o->dropout, (unsigned long long)o->seed, o->train_limit,
           strcmp(o->compress, "none") ? " compress=" : "",
           strcmp(o->compress, "none") ? o->compress : "");
}
