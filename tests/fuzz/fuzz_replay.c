/* The fuzz targets' main outside libFuzzer:
 *   fuzz_X --write-seeds DIR     writes the target's seeds into DIR (created)
 *   fuzz_X PATH...               runs the target once per file (folders: every file in them)
 * Exits 0 when every input ran (a bug shows as a sanitizer report or a crash), 1 on a usage or
 * I/O error, and also 1 when no input was found (a corpus that vanished must not pass). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path, long *ran) {
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno)), -1;
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0, k;
  do {
    if (len == cap && !(buf = realloc(buf, cap = cap ? 2 * cap : 4096))) return fclose(f), -1;
    k = fread(buf + len, 1, cap - len, f);
    len += k;
  } while (k > 0);
  fclose(f);
  /* A copy of exactly len bytes, so that a read past the input is an ASan report. */
  uint8_t *exact = malloc(len ? len : 1);
  if (len) memcpy(exact, buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  (*ran)++;
  return 0;
}

static int run_path(const char *path, long *ran) {
  struct stat s;
  if (stat(path, &s) != 0)
    return fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno)), -1;
  if (!S_ISDIR(s.st_mode)) return run_file(path, ran);
  DIR *d = opendir(path);
  if (!d) return -1;
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char sub[4096];
    snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
    rc = run_path(sub, ran);
  }
  closedir(d);
  return rc;
}

static void put_file(void *arg, const char *name, const void *bytes, size_t len) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", (const char *)arg, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, len, f) != len) {
    fprintf(stderr, "fuzz_replay: cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
    if (mkdir(argv[2], 0755) != 0 && errno != EEXIST)
      return fprintf(stderr, "fuzz_replay: mkdir %s: %s\n", argv[2], strerror(errno)), 1;
    fuzz_seeds(put_file, argv[2]);
    return 0;
  }
  if (argc < 2) return fprintf(stderr, "usage: %s --write-seeds DIR | PATH...\n", argv[0]), 1;
  long ran = 0;
  for (int i = 1; i < argc; i++)
    if (run_path(argv[i], &ran) != 0) return 1;
  printf("fuzz_replay: %ld inputs ran\n", ran);
  return ran > 0 ? 0 : 1;
}
