/* cma_cost: what one process_vm_readv costs (the shm transport's reading by copy, cma.c), next
 * to memcpy from shared memory in the same run:
 *
 *   cma_cost [-b 4K] [-e 64M] [-f 4] [-t 0.2]
 *
 * A child process keeps a heap buffer of the largest size (touched, so its pages exist); the
 * parent reads `size` bytes of it into its own buffer with one process_vm_readv per call, over
 * and over for -t seconds per size, and copies the same size with memcpy out of a shared
 * mapping the child also touched. Per size: microseconds per call, GB/s (1e9 B/s) of each,
 * and the fixed cost per call that the difference implies (the page pinning and the system
 * call, which the engine's pieces pay once per piece and peer). Exit status 2 when the kernel
 * refuses the reads (ptrace rules, see shm.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return (size_t)v;
}

/* Seconds per call of one read of `bytes` (process_vm_readv from pid at remote, or memcpy). */
static double per_call(pid_t pid, const char *remote, char *dst, size_t bytes, double budget) {
  long calls = 0;
  double t0 = now_s(), t;
  do {
    if (pid > 0) {
      struct iovec l = {dst, bytes}, r = {(void *)remote, bytes};
      if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)bytes) {
        fprintf(stderr, "cma_cost: process_vm_readv: %s\n", strerror(errno));
        return -1;
      }
    } else {
      memcpy(dst, remote, bytes);
      __asm__ volatile("" ::"r"(dst) : "memory");
    }
    calls++;
  } while ((t = now_s() - t0) < budget || calls < 3);
  return t / calls;
}

int main(int argc, char **argv) {
  size_t lo = 4096, hi = 64u << 20, f = 4;
  double budget = 0.2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b"))
      lo = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e"))
      hi = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f"))
      f = (size_t)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-t"))
      budget = atof(argv[i + 1]);
    else
      return fprintf(stderr, "usage: cma_cost [-b size] [-e size] [-f n] [-t s]\n"), 2;
  }
  if (lo == 0 || hi < lo || f < 2) return fprintf(stderr, "cma_cost: bad sizes\n"), 2;
  char *heap = malloc(hi), *dst = malloc(hi);
  char *shared = mmap(NULL, hi, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int ready[2];
  if (!heap || !dst || shared == MAP_FAILED || pipe(ready) != 0) return perror("cma_cost"), 2;
  pid_t child = fork();
  if (child == 0) { /* the peer: touch its buffers, then wait to be read */
    memset(heap, 1, hi);
    memset(shared, 1, hi);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c;
  if (read(ready[0], &c, 1) != 1) return perror("cma_cost: child"), 2;
  memset(dst, 0, hi);
  printf("%12s %12s %10s %12s %10s %12s\n", "bytes", "cma us", "cma GB/s", "memcpy us",
         "memcpy GB/s", "cma extra us");
  int rc = 0;
  for (size_t s = lo; s <= hi; s *= f) {
    double cma = per_call(child, heap, dst, s, budget); /* the child's heap: same address */
    double mc = per_call(0, shared, dst, s, budget);
    if (cma < 0) {
      rc = 2;
      break;
    }
    printf("%12zu %12.2f %10.2f %12.2f %10.2f %12.2f\n", s, cma * 1e6, s / cma / 1e9, mc * 1e6,
           s / mc / 1e9, (cma - mc) * 1e6);
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return rc;
}
