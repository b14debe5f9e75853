/* memlimit: prints the memory traffic of the calls named on stdin, per byte of busbw (the
 * model and the columns: memlimit.h). */
#include "memlimit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void) {
  fprintf(stderr,
          "usage: memlimit --coll C --nranks N [--esize BYTES] < lines \"COUNT IN_PLACE ALGO\"\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *coll = NULL;
  int n = 0;
  long esize = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--coll") == 0)
      coll = argv[i + 1];
    else if (strcmp(argv[i], "--nranks") == 0)
      n = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--esize") == 0)
      esize = atol(argv[i + 1]);
    else
      usage();
  }
  int c = coll ? coll_parse(coll) : -1;
  if (c < 0 || n < 1 || n > 4096 || esize < 1 || esize > 64 || argc % 2 == 0) usage();
  char line[256], name[64];
  while (fgets(line, sizeof line, stdin)) {
    size_t count;
    int in_place;
    if (sscanf(line, "%zu %d %63s", &count, &in_place, name) != 3) continue;
    algo_t a = algo_by_name(name);
    memlimit_traffic_t t;
    if (a == ALGO_NUM ||
        memlimit_traffic((coll_t)c, a, n, count, in_place, (size_t)esize, &t) != 0) {
      fprintf(stderr, "memlimit: cannot build %s %s count %zu\n", coll, name, count);
      continue;
    }
    double factor, bytes = memlimit_bus_bytes((coll_t)c, count, n, (size_t)esize, &factor);
    double bus = bytes * factor;
    printf("%zu %d %s %.0f %.0f %.0f %.0f %.4f\n", count, in_place, algo_name(a), bytes, bus,
           t.read, t.written, bus > 0 ? (t.read + t.written) / 2 / bus : 0.0);
  }
  return 0;
}
