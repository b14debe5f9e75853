/* first_touch: what the first access to a page of shared memory costs through a second mapping,
 * the way a rank reaches a peer's buffer in the shared heap's arena or a FIFO segment:
 *
 *   first_touch [-m MiB]
 *
 * One process makes a memfd of -m MiB (default 32), writes every page through its own mapping,
 * then maps it again (as a peer would, from /proc/<pid>/fd) and times, per 4 KiB page:
 *
 *   write_fault_us    the first write through a new mapping (a write fault)
 *   read_fault_us     the first read through a new mapping (a read fault)
 *   populate_us       madvise(MADV_POPULATE_WRITE) over a new mapping, per page
 *   after_populate_us then the first read of each page of that mapping
 *   again_us          a second read of each page of the same mapping
 *
 * On bare metal and ordinary guests the first access after the populate costs about what the
 * second does (tens of ns); on some guests (a hypervisor that shadows the guest's page tables) it
 * still costs microseconds, which is what memreg.c and shm.c pay once, up front
 * (docs/perf-issue20-2.md). One line per figure, "name value"; exit status 2 on a usage or system
 * error.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#define PAGE 4096

static size_t bytes;
static int fd;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static char *map_again(void) {
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    perror("first_touch: mmap");
    exit(2);
  }
  return p;
}

/* Microseconds per page of one pass over p: a read of each page, or a write. */
static double pass(char *p, int write) {
  double t = now_us();
  for (size_t at = 0; at < bytes; at += PAGE) {
    if (write)
      ((volatile char *)p)[at] = 1;
    else
      (void)((volatile const char *)p)[at];
  }
  return (now_us() - t) / (double)(bytes / PAGE);
}

int main(int argc, char **argv) {
  long mib = 32;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) {
      mib = strtol(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: %s [-m MiB]\n", argv[0]);
      return 2;
    }
  }
  if (mib < 1 || mib > 4096) {
    fprintf(stderr, "first_touch: -m %ld is not 1-4096\n", mib);
    return 2;
  }
  bytes = (size_t)mib << 20;
  fd = memfd_create("first_touch", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
    perror("first_touch: memfd");
    return 2;
  }
  memset(map_again(), 7, bytes); /* the owner's pages, all present */
  printf("write_fault_us %.3f\n", pass(map_again(), 1));
  printf("read_fault_us %.3f\n", pass(map_again(), 0));
  char *p = map_again();
  double t = now_us();
  if (madvise(p, bytes, MADV_POPULATE_WRITE) != 0) /* before Linux 5.14: the read faults */
    printf("populate_us unsupported\n");
  else
    printf("populate_us %.3f\n", (now_us() - t) / (double)(bytes / PAGE));
  printf("after_populate_us %.3f\n", pass(p, 0));
  printf("again_us %.3f\n", pass(p, 0));
  return 0;
}
