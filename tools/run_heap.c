/* tutti-run --heap: whether the ranks run with the shared heap (libtutti-heap.so preloaded, so
 * their large malloc blocks are memory the other ranks can map; src/heap/shared_heap.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

#ifndef TUTTI_RUN_HEAP_DEFAULT
#define TUTTI_RUN_HEAP_DEFAULT "shared"
#endif
#ifndef TUTTI_RUN_LIBDIR
#define TUTTI_RUN_LIBDIR "/usr/local/lib"
#endif
#define HEAP_LIB "libtutti-heap.so"

int parse_heap(const char *v) {
  if (strcmp(v, "shared") == 0) return RUN_HEAP_SHARED;
  if (strcmp(v, "private") == 0) return RUN_HEAP_PRIVATE;
  usage_error("--heap takes shared or private, not '%s'", v);
}

/* The library next to this tutti-run (dir/../lib, the build tree's layout and an install's),
 * else in the install's library folder; 0 when neither has it. */
static int find_heap_lib(const char *dir, char *path, size_t len) {
  snprintf(path, len, "%s/../lib/%s", dir, HEAP_LIB);
  if (access(path, R_OK) == 0) return 1;
  snprintf(path, len, "%s/%s", TUTTI_RUN_LIBDIR, HEAP_LIB);
  return access(path, R_OK) == 0;
}

void prepare_heap(run_options_t *o) {
  if (!o->heap_set) {
    const char *v = getenv("TUTTI_RUN_HEAP");
    o->heap = parse_heap(v && *v ? v : TUTTI_RUN_HEAP_DEFAULT);
  }
  if (o->heap != RUN_HEAP_SHARED) return;
  char exe[PATH_MAX], lib[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  const char *dir = n > 0 ? dirname(exe) : "?";
  if (!find_heap_lib(dir, lib, sizeof lib)) {
    if (o->heap_set) /* asked for by name: an error, not a silent downgrade */
      usage_error("--heap shared: %s is in neither %s/../lib nor %s", HEAP_LIB, dir,
                  TUTTI_RUN_LIBDIR);
    fprintf(stderr,
            "tutti-run: %s is in neither %s/../lib nor %s: the ranks run with the private "
            "heap (collectives read heap buffers by copy)\n",
            HEAP_LIB, dir, TUTTI_RUN_LIBDIR);
    o->heap = RUN_HEAP_PRIVATE;
    return;
  }
  char real[PATH_MAX];
  const char *use = realpath(lib, real) ? real : lib;
  const char *old = getenv("LD_PRELOAD");
  size_t len = strlen(use) + (old ? strlen(old) : 0) + 2;
  char *v = malloc(len);
  if (!v) die("out of memory");
  snprintf(v, len, "%s%s%s", use, old && *old ? ":" : "", old && *old ? old : "");
  if (setenv("LD_PRELOAD", v, 1) != 0) die("setenv LD_PRELOAD: %s", strerror(errno));
  free(v);
}
