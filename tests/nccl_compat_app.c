/* A program written for NCCL, linked against libnccl.so.2 (tutti's build of it): runs a
 * 2-rank all-reduce on threads and checks the sum. Exit 0 on success. */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>

static ncclComm_t comms[2];
static float in[2][1000], out[2][1000];

static void *rank_main(void *arg) {
  int r = (int)(long)arg;
  for (int i = 0; i < 1000; i++) in[r][i] = (float)(i + r);
  return (void *)(long)ncclAllReduce(in[r], out[r], 1000, ncclFloat, ncclSum, comms[r], NULL);
}

int main(void) {
  if (ncclCommInitAll(comms, 2, NULL) != ncclSuccess) return 1;
  pthread_t t[2];
  for (long r = 0; r < 2; r++) pthread_create(&t[r], NULL, rank_main, (void *)r);
  long bad = 0;
  for (int r = 0; r < 2; r++) {
    void *res;
    pthread_join(t[r], &res);
    bad += (long)res != 0;
  }
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 1000; i++) bad += out[r][i] != (float)(2 * i + 1);
  for (int r = 0; r < 2; r++) ncclCommDestroy(comms[r]);
  printf("nccl_compat_app: %ld wrong\n", bad);
  return bad != 0;
}
