/* Fashion-MNIST in IDX format (big-endian header, then bytes), gzip-compressed, read with zlib.
 *
 *   images: magic 0x00000803, n, 28, 28, then n*28*28 pixels
 *   labels: magic 0x00000801, n, then n labels in [0, 10)
 */
#include "data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "rng.h"

/* Per-pixel normalization with the training set's mean and standard deviation. */
#define DATA_MEAN 0.2860f
#define DATA_STD 0.3530f

static int data_error(const char *path, const char *what) {
  fprintf(stderr,
          "tutti-train: %s: %s\n"
          "  Fashion-MNIST comes from Debian's dataset-fashion-mnist package:\n"
          "    sudo apt-get install dataset-fashion-mnist   (or scripts/install-deps.sh)\n"
          "  or point --data at a folder holding train-images-idx3-ubyte.gz,\n"
          "  train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz\n",
          path, what);
  return -1;
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads one IDX file: checks the magic and the dimensions, returns the payload (n * item). */
static uint8_t *idx_read(const char *path, uint32_t magic, int ndims, uint32_t *n) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    data_error(path, "cannot open");
    return NULL;
  }
  unsigned char hdr[16];
  int hlen = 4 * (1 + ndims);
  uint8_t *buf = NULL;
  if (gzread(f, hdr, hlen) != hlen || be32(hdr) != magic) {
    data_error(path, "not an IDX file of the expected kind (bad header): corrupt download?");
    goto fail;
  }
  *n = be32(hdr + 4);
  size_t item = ndims == 3 ? (size_t)be32(hdr + 8) * be32(hdr + 12) : 1;
  if (*n == 0 || *n > 1000000 || item != (ndims == 3 ? DATA_PIXELS : 1)) {
    data_error(path, "unexpected dimensions (want N x 28 x 28 images or N labels)");
    goto fail;
  }
  size_t bytes = (size_t)*n * item;
  buf = malloc(bytes);
  char extra;
  if (!buf || gzread(f, buf, (unsigned)bytes) != (int)bytes || gzread(f, &extra, 1) != 0) {
    int err;
    const char *msg = gzerror(f, &err);
    data_error(path, err ? msg : "truncated file or trailing data: corrupt download?");
    goto fail;
  }
  gzclose(f);
  return buf;
fail:
  free(buf);
  gzclose(f);
  return NULL;
}

int data_load(const char *dir, const char *split, dataset_t *ds) {
  char ipath[4096], lpath[4096];
  snprintf(ipath, sizeof(ipath), "%s/%s-images-idx3-ubyte.gz", dir, split);
  snprintf(lpath, sizeof(lpath), "%s/%s-labels-idx1-ubyte.gz", dir, split);
  memset(ds, 0, sizeof(*ds));
  uint32_t ni = 0, nl = 0;
  ds->images = idx_read(ipath, 0x00000803u, 3, &ni);
  if (!ds->images) return -1;
  ds->labels = idx_read(lpath, 0x00000801u, 1, &nl);
  if (!ds->labels) goto fail;
  if (ni != nl) {
    data_error(lpath, "image and label counts differ");
    goto fail;
  }
  for (uint32_t i = 0; i < nl; i++)
    if (ds->labels[i] >= DATA_CLASSES) {
      data_error(lpath, "label outside [0, 10): corrupt file?");
      goto fail;
    }
  ds->n = (int)ni;
  return 0;
fail:
  data_free(ds);
  return -1;
}

void data_free(dataset_t *ds) {
  free(ds->images);
  free(ds->labels);
  memset(ds, 0, sizeof(*ds));
}

static const char *const augment_names[] = {"none", "flip", "flip+shift"};

int augment_parse(const char *s, augment_t *out) {
  for (int i = 0; i < 3; i++)
    if (strcmp(s, augment_names[i]) == 0) {
      *out = (augment_t)i;
      return 0;
    }
  return -1;
}

const char *augment_name(augment_t a) {
  return augment_names[a];
}

/* ---------------------------------------------------------------- sampler */

int sampler_init(sampler_t *s, int n, uint64_t seed, int world, int rank, int batch, int accum) {
  memset(s, 0, sizeof(*s));
  s->n = n, s->seed = seed, s->world = world, s->rank = rank;
  s->batch = batch, s->accum = accum, s->epoch = -1;
  s->perm = malloc((size_t)n * sizeof(*s->perm));
  return s->perm ? 0 : -1;
}

void sampler_free(sampler_t *s) {
  free(s->perm);
  s->perm = NULL;
}

int sampler_steps_per_epoch(const sampler_t *s) {
  return s->n / (s->world * s->batch * s->accum);
}

/* Fisher-Yates shuffle from the stream (seed, RNG_SHUFFLE, epoch). */
void sampler_set_epoch(sampler_t *s, int epoch) {
  if (s->epoch == epoch) return;
  rng_t r = {rng_key(s->seed, RNG_SHUFFLE, (uint64_t)epoch, 0)};
  for (int i = 0; i < s->n; i++) s->perm[i] = (uint32_t)i;
  for (int i = s->n - 1; i > 0; i--) {
    uint32_t j = rng_below(&r, (uint32_t)i + 1);
    uint32_t t = s->perm[i];
    s->perm[i] = s->perm[j], s->perm[j] = t;
  }
  s->epoch = epoch;
}

int sampler_index(const sampler_t *s, int step, int micro, int i) {
  size_t G = (size_t)s->world * s->batch * s->accum;
  size_t pos = step * G + ((size_t)micro * s->batch + i) * s->world + s->rank;
  return (int)s->perm[pos];
}

/* ---------------------------------------------------------------- batches */

/* One image -> normalized floats, mirrored left-right if flip, moved by (dy, dx) pixels with
 * background filling the uncovered border. Row by row: the output pixels x whose source
 * column sx = x - dx (mirrored: W - 1 - (x - dx)) is inside the image are x in [dx, W + dx)
 * clipped to the row; the rest are background. */
static void image_to_floats(const uint8_t *img, int flip, int dy, int dx, float *out) {
  static float lut[256];
  static int lut_ready;
  if (!lut_ready) { /* benign race: every thread writes the same values */
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - DATA_MEAN) / DATA_STD;
    lut_ready = 1;
  }
  int lo = dx > 0 ? dx : 0, hi = dx < 0 ? DATA_W + dx : DATA_W;
  for (int y = 0; y < DATA_H; y++) {
    float *o = out + y * DATA_W;
    int sy = y - dy;
    if (sy < 0 || sy >= DATA_H) {
      for (int x = 0; x < DATA_W; x++) o[x] = lut[0];
      continue;
    }
    const uint8_t *row = img + sy * DATA_W;
    for (int x = 0; x < lo; x++) o[x] = lut[0];
    if (flip)
      for (int x = lo; x < hi; x++) o[x] = lut[row[DATA_W - 1 - (x - dx)]];
    else
      for (int x = lo; x < hi; x++) o[x] = lut[row[x - dx]];
    for (int x = hi; x < DATA_W; x++) o[x] = lut[0];
  }
}

void data_gather(const dataset_t *ds, const int *idx, int count, augment_t aug, uint64_t seed,
                 int epoch, float *x, uint8_t *y) {
  for (int i = 0; i < count; i++) {
    int flip = 0, dy = 0, dx = 0;
    if (aug != AUG_NONE) {
      rng_t r = {rng_key(seed, RNG_AUGMENT, (uint64_t)epoch, (uint64_t)idx[i])};
      flip = rng_below(&r, 2);
      if (aug == AUG_FLIP_SHIFT) dy = (int)rng_below(&r, 5) - 2, dx = (int)rng_below(&r, 5) - 2;
    }
    image_to_floats(ds->images + (size_t)idx[i] * DATA_PIXELS, flip, dy, dx,
                    x + (size_t)i * DATA_PIXELS);
    y[i] = ds->labels[idx[i]];
  }
}
