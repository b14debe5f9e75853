/* Fashion-MNIST: loading, the distributed sampler, and batch assembly with augmentation. */
#ifndef TRAINER_DATA_H_
#define TRAINER_DATA_H_

#include <stddef.h>
#include <stdint.h>

#define DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define DATA_H 28
#define DATA_W 28
#define DATA_PIXELS (DATA_H * DATA_W)
#define DATA_CLASSES 10

typedef struct {
  int n;           /* number of images */
  uint8_t *images; /* (n, 28, 28) row-major, 0 = background */
  uint8_t *labels; /* (n) in [0, 10) */
} dataset_t;

/* Loads "train" (60,000 images) or "t10k" (10,000) from dir/<split>-{images,labels}-idx*-ubyte.gz.
 * Returns 0, or -1 after printing what is wrong and how to install the data. */
int data_load(const char *dir, const char *split, dataset_t *ds);
void data_free(dataset_t *ds);

/* Augmentation of training images; test images are never augmented. */
typedef enum { AUG_NONE = 0, AUG_FLIP = 1, AUG_FLIP_SHIFT = 2 } augment_t;
int augment_parse(const char *s, augment_t *out);
const char *augment_name(augment_t a);

/* Distributed sampler, as PyTorch's DistributedSampler with drop_last, written out.
 *
 * Each epoch is one permutation of [0, n) drawn from (seed, epoch); all ranks compute the same.
 * One optimizer step consumes G = world x batch x accum consecutive positions of it:
 *
 *   position(step, micro, i) = step*G + (micro*batch + i)*world + rank      i in [0, batch)
 *
 * so the shards are disjoint and interleaved, and the union of a step's batches over the ranks
 * is the same G samples whatever the world size (the test "N ranks x b == 1 rank x N*b" relies
 * on it). Remainder policy: an epoch has floor(n / G) steps; the last n mod G positions of the
 * permutation are skipped, so every rank takes the same number of steps and a different
 * handful of samples is left out each epoch. */
typedef struct {
  int n, world, rank, batch, accum;
  uint64_t seed;
  int epoch;      /* whose permutation perm holds; -1: none yet */
  uint32_t *perm; /* (n) */
} sampler_t;

int sampler_init(sampler_t *s, int n, uint64_t seed, int world, int rank, int batch, int accum);
void sampler_free(sampler_t *s);
int sampler_steps_per_epoch(const sampler_t *s);
void sampler_set_epoch(sampler_t *s, int epoch);
/* Dataset index of local sample i of micro-step `micro` of optimizer step `step`. */
int sampler_index(const sampler_t *s, int step, int micro, int i);

/* Writes batch images as normalized floats x (count, 784) and labels y (count). idx[i] selects
 * the image; augmentation (flip, shift) is keyed on (seed, epoch, idx[i]). */
void data_gather(const dataset_t *ds, const int *idx, int count, augment_t aug, uint64_t seed,
                 int epoch, float *x, uint8_t *y);

#endif /* TRAINER_DATA_H_ */
