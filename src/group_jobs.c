/* Deferred blocking calls of a group: ncclCommInitRank and ncclCommSplit made between
 * ncclGroupStart and ncclGroupEnd return at once and run at the outermost ncclGroupEnd, all at
 * the same time (one thread each, or in the caller when there is one), so that a thread that
 * creates several ranks of one communicator in a group (NCCL's one-thread, many-devices init)
 * does not wait in the first for ranks it has not created yet. The list is per thread, as the
 * group is. A job runs with the device context that was current in the caller when it was
 * deferred (NCCL's communicator takes the current device of its ncclCommInitRank), so that the
 * rank's device is known to its init (cuda_p2p, the small-call path) in whatever thread runs it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "device.h"
#include "group.h"

typedef struct group_job {
  ncclResult_t (*run)(void *);
  void (*drop)(void *);
  void *arg;
  ncclResult_t res;
  char err[512];
  const device_ops_t *dev; /* the caller had a device context when it deferred the job: */
  void *ctx;               /* that context */
} group_job_t;

static TUTTI_TLS group_job_t *jobs;
static TUTTI_TLS size_t njobs, jobs_cap;

ncclResult_t group_defer(ncclResult_t (*run)(void *), void (*drop)(void *), void *arg) {
  if (njobs == jobs_cap) {
    size_t cap = jobs_cap ? 2 * jobs_cap : 8;
    group_job_t *p = realloc(jobs, cap * sizeof(*p));
    if (!p) {
      drop(arg);
      return TUTTI_ERR(ncclSystemError, "out of memory");
    }
    jobs = p, jobs_cap = cap;
  }
  const device_ops_t *dev = device_current();
  jobs[njobs++] = (group_job_t){
      .run = run, .drop = drop, .arg = arg, .dev = dev, .ctx = dev ? dev->current_ctx() : NULL};
  return ncclSuccess;
}

static void *group_job_thread(void *p) {
  group_job_t *j = p;
  tutti_clear_error();
  int switched;
  void *saved = device_switch(j->dev, j->ctx, &switched); /* the caller's, for the last job */
  j->res = j->run(j->arg);
  if (switched) j->dev->bind(saved);
  if (j->res != ncclSuccess) snprintf(j->err, sizeof(j->err), "%s", tutti_last_error());
  return NULL;
}

/* Starts a thread per job (the last one runs in the caller) and waits for all of them. */
static void group_jobs_run_all(group_job_t *js, size_t n) {
  pthread_t *threads = calloc(n, sizeof(pthread_t));
  char *started = calloc(n, 1);
  for (size_t i = 0; i + 1 < n; i++) {
    if (!threads || !started || pthread_create(&threads[i], NULL, group_job_thread, &js[i]) != 0) {
      js[i].drop(js[i].arg); /* cannot run: the ranks waiting for it time out with an error */
      js[i].res = ncclSystemError;
      snprintf(js[i].err, sizeof(js[i].err), "cannot start a thread for a deferred call");
      continue;
    }
    started[i] = 1;
  }
  group_job_thread(&js[n - 1]);
  for (size_t i = 0; i + 1 < n; i++)
    if (started && started[i]) pthread_join(threads[i], NULL);
  free(threads);
  free(started);
}

ncclResult_t group_jobs_run(int run) {
  group_job_t *js = jobs;
  size_t n = njobs;
  jobs = NULL, njobs = 0, jobs_cap = 0; /* a job may open groups of its own in this thread */
  ncclResult_t res = ncclSuccess;
  if (!run) {
    for (size_t i = 0; i < n; i++) js[i].drop(js[i].arg);
  } else if (n > 0) {
    group_jobs_run_all(js, n);
    for (size_t i = 0; i < n && res == ncclSuccess; i++)
      if (js[i].res != ncclSuccess)
        res = TUTTI_ERR(js[i].res, "ncclGroupEnd: deferred call %zu of %zu failed: %s", i + 1, n,
                        js[i].err);
  }
  free(js);
  return res;
}
