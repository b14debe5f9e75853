/* Command-line options of tutti-train, their defaults and the learning-rate scaling rule. */
#include "options.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: tutti-train [options]      (one process per rank: tutti-run -n N, mpirun, torchrun "
    "env)\n"
    "  --model mlp|cnn        model (mlp)\n"
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
    "  --threads T            OpenBLAS threads per rank (1)\n"
    "  --data DIR             Fashion-MNIST folder (" DATA_DEFAULT_DIR
    ")\n"
    "  --checkpoint FILE      write FILE (atomically) after each epoch and when stopping\n"
    "  --checkpoint-every N   also every N optimizer steps\n"
    "  --resume               continue from --checkpoint FILE if it exists\n"
    "  --max-steps N          stop after N optimizer steps in all (checkpoint written)\n"
    "  --log FILE.csv         one CSV row per epoch (rank 0)\n"
    "  --no-eval              skip the test-set evaluation (benchmarks)\n"
    "  --train-limit N, --test-limit N   use the first N images only (tests)\n"
    "  --dump PREFIX          write PREFIX.rank<r>.params (final parameters, raw float32) and\n"
    "                         PREFIX.rank<r>.trace (a hash of the parameters after every step)\n"
    "  --compress             gradient compression (not available yet)\n"
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
  o->seed = 1, o->bucket_mb = 25.0;
  o->data_dir = DATA_DEFAULT_DIR;
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

static const struct option long_options[] = {{"model", 1, 0, 'm'},
                                             {"epochs", 1, 0, 'e'},
                                             {"batch", 1, 0, 'b'},
                                             {"accum", 1, 0, 'a'},
                                             {"optim", 1, 0, 'o'},
                                             {"lr", 1, 0, 'l'},
                                             {"lr-ref-batch", 1, 0, 'R'},
                                             {"lr-scaling", 1, 0, 'S'},
                                             {"momentum", 1, 0, 'M'},
                                             {"wd", 1, 0, 'w'},
                                             {"warmup-epochs", 1, 0, 'W'},
                                             {"final-lr-frac", 1, 0, 'F'},
                                             {"augment", 1, 0, 'A'},
                                             {"seed", 1, 0, 's'},
                                             {"bucket-mb", 1, 0, 'B'},
                                             {"threads", 1, 0, 't'},
                                             {"data", 1, 0, 'd'},
                                             {"checkpoint", 1, 0, 'c'},
                                             {"checkpoint-every", 1, 0, 'C'},
                                             {"resume", 0, 0, 'r'},
                                             {"max-steps", 1, 0, 'x'},
                                             {"log", 1, 0, 'L'},
                                             {"no-eval", 0, 0, 'N'},
                                             {"train-limit", 1, 0, 'T'},
                                             {"test-limit", 1, 0, 'V'},
                                             {"dump", 1, 0, 'D'},
                                             {"compress", 0, 0, 'Z'},
                                             {"dropout", 1, 0, 'P'},
                                             {"blas-info", 0, 0, 'I'},
                                             {"help", 0, 0, 'h'},
                                             {0, 0, 0, 0}};

static void parse_scaling(const char *s, options_t *o) {
  static const char *names[] = {"auto", "linear", "sqrt", "none"};
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) {
      o->lr_scaling = (lr_scaling_t)i;
      return;
    }
  bad("lr-scaling", s);
}

static void parse_one(int c, const char *v, options_t *o) {
  switch (c) {
    case 'm':
      if (model_parse(v, &o->model)) bad("model", v);
      break;
    case 'e':
      o->epochs = (int)parse_long("epochs", v, 1, 100000);
      break;
    case 'b':
      o->batch = (int)parse_long("batch", v, 1, 65536);
      break;
    case 'a':
      o->accum = (int)parse_long("accum", v, 1, 65536);
      break;
    case 'o':
      if (optim_parse(v, &o->optim)) bad("optim", v);
      break;
    case 'l':
      o->lr = (float)parse_double("lr", v, 0, 100);
      break;
    case 'R':
      o->lr_ref_batch = (int)parse_long("lr-ref-batch", v, 1, 1 << 24);
      break;
    case 'S':
      parse_scaling(v, o);
      break;
    case 'M':
      o->momentum = (float)parse_double("momentum", v, 0, 1);
      break;
    case 'w':
      o->weight_decay = (float)parse_double("wd", v, 0, 10);
      break;
    case 'W':
      o->warmup_epochs = (float)parse_double("warmup-epochs", v, 0, 1000);
      break;
    case 'F':
      o->final_lr_frac = (float)parse_double("final-lr-frac", v, 0, 1);
      break;
    case 'A':
      if (augment_parse(v, &o->augment)) bad("augment", v);
      o->augment_set = 1;
      break;
    case 's':
      o->seed = (uint64_t)parse_long("seed", v, 0, 0x7fffffffL);
      break;
    case 'B':
      o->bucket_mb = parse_double("bucket-mb", v, 0, 1 << 20);
      break;
    case 't':
      o->threads = (int)parse_long("threads", v, 1, 1024);
      break;
    case 'd':
      o->data_dir = v;
      break;
    case 'c':
      o->checkpoint = v;
      break;
    case 'C':
      o->checkpoint_every = (int)parse_long("checkpoint-every", v, 0, 1 << 30);
      break;
    case 'r':
      o->resume = 1;
      break;
    case 'x':
      o->max_steps = parse_long("max-steps", v, 1, 1L << 40);
      break;
    case 'L':
      o->log_path = v;
      break;
    case 'N':
      o->no_eval = 1;
      break;
    case 'T':
      o->train_limit = (int)parse_long("train-limit", v, 1, 1 << 30);
      break;
    case 'V':
      o->test_limit = (int)parse_long("test-limit", v, 1, 1 << 30);
      break;
    case 'D':
      o->dump_prefix = v;
      break;
    case 'Z':
      fprintf(stderr, "tutti-train: --compress waits for the gradient-compression API\n");
      exit(2);
    case 'P':
      o->dropout = (float)parse_double("dropout", v, 0, 0.95);
      break;
    case 'I':
      o->blas_info = 1;
      break;
    case 'h':
      usage(0);
      break;
    default:
      usage(2);
  }
}

void options_parse(int argc, char **argv, options_t *o) {
  set_defaults(o);
  int c;
  while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) parse_one(c, optarg, o);
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
           "warmup=%.9g final=%.9g augment=%s dropout=%.9g seed=%llu train_limit=%d",
           model_name(o->model), optim_name(o->optim), o->epochs, global_batch, o->accum,
           (double)options_scaled_lr(o, global_batch), (double)o->weight_decay, (double)o->momentum,
           (double)o->warmup_epochs, (double)o->final_lr_frac, augment_name(o->augment),
           (double)o->dropout, (unsigned long long)o->seed, o->train_limit);
}
