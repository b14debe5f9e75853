/* Checkpoint files; see checkpoint.h. */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static const char ckpt_magic[8] = {'T', 'U', 'T', 'T', 'I', 'C', 'K', '1'};

/* fwrite that also folds the bytes into the running crc. */
static int put(FILE *f, uLong *crc, const void *p, size_t bytes) {
  *crc = crc32(*crc, p, (uInt)bytes);
  return fwrite(p, 1, bytes, f) == bytes ? 0 : -1;
}

static int get(FILE *f, uLong *crc, void *p, size_t bytes) {
  if (fread(p, 1, bytes, f) != bytes) return -1;
  *crc = crc32(*crc, p, (uInt)bytes);
  return 0;
}

static int fsync_dir_of(const char *path) {
  char *copy = strdup(path);
  if (!copy) return -1;
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
  free(copy);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

int ckpt_save(const char *path, const ckpt_state_t *st, const float *params, float *const *opt,
              int nopt) {
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) goto fail;
  uLong crc = crc32(0, NULL, 0);
  size_t bytes = st->nparams * sizeof(float);
  int bad = put(f, &crc, ckpt_magic, sizeof(ckpt_magic)) || put(f, &crc, st, sizeof(*st)) ||
            put(f, &crc, params, bytes);
  for (int i = 0; i < nopt && !bad; i++) bad = put(f, &crc, opt[i], bytes);
  uint32_t crc32v = (uint32_t)crc;
  bad = bad || fwrite(&crc32v, sizeof(crc32v), 1, f) != 1 || fflush(f) != 0 || fsync(fileno(f));
  if (fclose(f) != 0 || bad) goto fail;
  if (rename(tmp, path) != 0) goto fail;
  fsync_dir_of(path); /* best effort: the rename itself is atomic */
  return 0;
fail:
  fprintf(stderr, "tutti-train: cannot write checkpoint %s: %s\n", path, strerror(errno));
  unlink(tmp);
  return -1;
}

static int load_error(FILE *f, const char *path, const char *what) {
  fprintf(stderr, "tutti-train: checkpoint %s: %s\n", path, what);
  if (f) fclose(f);
  return -1;
}

int ckpt_load(const char *path, ckpt_state_t *st, float *params, size_t n, float **opt, int nopt) {
  FILE *f = fopen(path, "rb");
  if (!f) return errno == ENOENT ? 1 : load_error(NULL, path, strerror(errno));
  uLong crc = crc32(0, NULL, 0);
  char magic[sizeof(ckpt_magic)];
  if (get(f, &crc, magic, sizeof(magic)) || memcmp(magic, ckpt_magic, sizeof(magic)))
    return load_error(f, path, "not a tutti-train checkpoint");
  if (get(f, &crc, st, sizeof(*st))) return load_error(f, path, "truncated header");
  if (st->nparams != n || st->nopt != nopt)
    return load_error(f, path, "written for another model or optimizer");
  int bad = get(f, &crc, params, n * sizeof(float));
  for (int i = 0; i < nopt && !bad; i++) bad = get(f, &crc, opt[i], n * sizeof(float));
  uint32_t stored;
  if (bad || fread(&stored, sizeof(stored), 1, f) != 1) return load_error(f, path, "truncated");
  if (stored != (uint32_t)crc) return load_error(f, path, "checksum mismatch: corrupt file");
  fclose(f);
  return 0;
}
