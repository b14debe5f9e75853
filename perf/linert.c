/* linert: the round trip of one cache line between two CPUs, the machine's "state" for small
 * collectives:
 *
 *   linert [-c CPU_A,CPU_B] [-n round_trips]
 *
 * Two processes, pinned to CPU_A and CPU_B (default: the first two CPUs this process may use,
 * where tutti-run and mpirun --bind-to core put ranks 0 and 1), bounce a counter in one shared
 * cache line -n times (default 20000, a few milliseconds) and it prints the mean round trip:
 *
 *   line_rtt_ns 71.3
 *
 * On a virtual machine the two vCPUs may sit on hyperthreads of one core, on two cores of one
 * L3 or on two dies, and the hypervisor moves them within seconds: a round trip of 30, 70 or
 * 320 ns (docs/perf-baseline.md). A small all-reduce costs a line transfer each way, so its
 * time follows that state, for every library alike: compare_allreduce.sh runs this before and
 * after each run to compare libraries within one state. Exit status 2 on a usage or system
 * error.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return sched_setaffinity(0, sizeof(s), &s);
}

/* The first two CPUs of this process's affinity mask into a, b; -1 if there are fewer. */
static int first_two(int *a, int *b) {
  cpu_set_t s;
  if (sched_getaffinity(0, sizeof(s), &s) != 0) return -1;
  *a = *b = -1;
  for (int c = 0; c < CPU_SETSIZE && *b < 0; c++)
    if (CPU_ISSET(c, &s)) *(*a < 0 ? a : b) = c;
  return *b < 0 ? -1 : 0;
}

static void usage(void) {
  fprintf(stderr, "usage: linert [-c CPU_A,CPU_B] [-n round_trips]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int a = -1, b = -1;
  long n = 20000;
  for (int opt; (opt = getopt(argc, argv, "c:n:h")) != -1;) {
    if (opt == 'c' && sscanf(optarg, "%d,%d", &a, &b) == 2 && a >= 0 && b >= 0 && a != b) continue;
    if (opt == 'n' && (n = strtol(optarg, NULL, 10)) > 0) continue;
    usage();
  }
  if (optind != argc) usage();
  if (a < 0 && first_two(&a, &b) != 0) {
    fprintf(stderr, "linert: this process may use fewer than 2 CPUs\n");
    return 2;
  }
  /* the counter alone on its line; the child says on the next one whether it could pin */
  volatile uint64_t *line =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (line == MAP_FAILED) {
    perror("linert: mmap");
    return 2;
  }
  volatile uint64_t *child_state = line + 8; /* 1: pinned, 2: could not pin */
  pid_t pid = fork();
  if (pid < 0) {
    perror("linert: fork");
    return 2;
  }
  if (pid == 0) {
    *child_state = pin(b) == 0 ? 1 : 2;
    for (uint64_t i = 1; i <= (uint64_t)n; i++) {
      while (*line != 2 * i - 1) __builtin_ia32_pause();
      *line = 2 * i;
    }
    _exit(0);
  }
  if (pin(a) != 0) {
    fprintf(stderr, "linert: cannot run on CPU %d\n", a);
    kill(pid, SIGKILL);
    return 2;
  }
  while (*child_state == 0) __builtin_ia32_pause();
  if (*child_state != 1) {
    fprintf(stderr, "linert: cannot run on CPU %d\n", b);
    kill(pid, SIGKILL);
    return 2;
  }
  double t0 = now_ns();
  for (uint64_t i = 1; i <= (uint64_t)n; i++) {
    *line = 2 * i - 1;
    while (*line != 2 * i) __builtin_ia32_pause();
  }
  double rtt = (now_ns() - t0) / (double)n;
  waitpid(pid, NULL, 0);
  printf("line_rtt_ns %.1f\n", rtt);
  return 0;
}
