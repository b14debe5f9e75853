/* proxy_cpus: what the proxy thread's CPUs do to the stream path when the caller is bound to one
 * CPU and waits for its streams by spinning, as CUDA's synchronize calls do by default
 * (TUTTI_PROXY_CPUS, docs/gpu.md "The proxy thread's CPUs"):
 *
 *   proxy_cpus [-n calls] [-b bytes] [-r rounds]
 *
 * Two ranks are threads of this process on the host emulation of the device (device_emu.c, an
 * internal API: no GPU is needed, none is used). The streams' worker threads are made before
 * the binding, so they keep every CPU, as a GPU's work needs none; then the calling thread is
 * bound to its first CPU, and per round one communicator pair runs `calls` all-reduces of
 * `bytes` on device buffers through the proxy (the small-call path off), waiting for both
 * streams by spinning on a word a stream call sets. The rounds alternate TUTTI_PROXY_CPUS=inherit
 * (the proxy on the bound CPU) and auto (off it), and the program prints per setting the median
 * microseconds per call and their ratio. Results are checked (exact int32 sums).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "device.h"
#include "tutti.h"

static volatile int stream_reached;

static void mark(void *arg) {
  (void)arg;
  __atomic_store_n(&stream_reached, 1, __ATOMIC_RELEASE);
}

/* Waits for the stream by spinning on a word (no yield, no sleep); 0 on success. */
static int spin_wait(void *stream) {
  __atomic_store_n(&stream_reached, 0, __ATOMIC_RELAXED);
  device_emu_stream_call(stream, mark, NULL);
  double t0 = bench_now();
  while (!__atomic_load_n(&stream_reached, __ATOMIC_ACQUIRE))
    if (bench_now() - t0 > 60) return 1;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One round: microseconds per call, or a negative value on a failure (printed). */
static double round_us(const char *setting, void *const *streams, int calls, size_t count) {
  setenv("TUTTI_PROXY_CPUS", setting, 1);
  ncclComm_t comms[2];
  int devs[2] = {0, 0};
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) {
    fprintf(stderr, "proxy_cpus: ncclCommInitAll: %s\n", ncclGetLastError(NULL));
    return -1;
  }
  void *send[2], *recv[2];
  for (int r = 0; r < 2; r++) {
    send[r] = device_emu_alloc(count * 4), recv[r] = device_emu_alloc(count * 4);
    int32_t *s = device_emu_view(send[r]);
    for (size_t j = 0; j < count; j++) s[j] = (int32_t)(j % 1000 + r + 1);
  }
  double t0 = 0, us = -1;
  int bad = 0;
  for (int i = -1; i < calls && !bad; i++) { /* call -1 starts the proxies, untimed */
    if (i == 0) t0 = bench_now();
    bad |= ncclGroupStart() != ncclSuccess;
    for (int r = 0; r < 2; r++)
      bad |= ncclAllReduce(send[r], recv[r], count, ncclInt32, ncclSum, comms[r],
                           (cudaStream_t)streams[r]) != ncclSuccess;
    bad |= ncclGroupEnd() != ncclSuccess;
    for (int r = 0; r < 2 && !bad; r++) bad |= spin_wait(streams[r]);
  }
  if (!bad) us = (bench_now() - t0) / calls * 1e6;
  for (int r = 0; r < 2 && !bad; r++) {
    const int32_t *v = device_emu_view(recv[r]);
    for (size_t j = 0; j < count; j++) bad |= v[j] != (int32_t)(2 * (j % 1000) + 3);
  }
  if (bad)
    fprintf(stderr, "proxy_cpus: %s: a call failed or summed wrong: %s\n", setting,
            ncclGetLastError(NULL));
  for (int r = 0; r < 2; r++) {
    ncclCommDestroy(comms[r]);
    device_emu_free(send[r]), device_emu_free(recv[r]);
  }
  return bad ? -1 : us;
}

int main(int argc, char **argv) {
  int calls = 200, rounds = 5;
  size_t bytes = 64 << 10;
  for (int c; (c = getopt(argc, argv, "n:b:r:")) != -1;) {
    if (c == 'n') {
      calls = atoi(optarg);
    } else if (c == 'b') {
      if (bench_parse_bytes(optarg, &bytes) != 0) bytes = 0;
    } else if (c == 'r') {
      rounds = atoi(optarg);
    } else {
      fprintf(stderr, "usage: proxy_cpus [-n calls] [-b bytes] [-r rounds]\n");
      return 2;
    }
  }
  if (calls < 1 || rounds < 1 || rounds > 100 || bytes < 4) {
    fprintf(stderr, "proxy_cpus: -n and -r must be positive (-r at most 100), -b at least 4\n");
    return 2;
  }
  setenv("TUTTI_DEVICE_EMULATION", "1", 1);
  setenv("TUTTI_SMALL_BYTES", "0", 1); /* every call through the proxy */
  void *streams[2] = {device_emu_stream_create(), device_emu_stream_create()};
  device_emu_set_context(1);
  cpu_set_t all, one;
  sched_getaffinity(0, sizeof all, &all);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &all)) cpu++;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) {
    perror("proxy_cpus: sched_setaffinity");
    return 2;
  }
  printf(
      "# 2 ranks as threads, caller bound to CPU %d of %d usable, %d calls of %zu bytes per "
      "round, %d rounds per setting\n",
      cpu, CPU_COUNT(&all), calls, bytes, rounds);
  static const char *const settings[2] = {"inherit", "auto"};
  double us[2][100];
  for (int k = 0; k < rounds; k++)
    for (int s = 0; s < 2; s++) {
      int which = (k % 2) ? 1 - s : s; /* alternate which setting goes first */
      us[which][k] = round_us(settings[which], streams, calls, bytes / 4);
      if (us[which][k] < 0) return 1;
    }
  double med[2];
  for (int s = 0; s < 2; s++) {
    qsort(us[s], (size_t)rounds, sizeof(double), cmp_double);
    med[s] = us[s][rounds / 2];
    printf("TUTTI_PROXY_CPUS=%-8s %10.1f us per call (median of %d rounds)\n", settings[s], med[s],
           rounds);
  }
  printf("inherit / auto: %.2f\n", med[0] / med[1]);
  for (int r = 0; r < 2; r++) device_emu_stream_destroy(streams[r]);
  return 0;
}
