/* A round of bootstrap requests played to the real root code (bootstrap_verdict.c). */
#ifndef TUTTI_TEST_BOOTSTRAP_VERDICT_H_
#define TUTTI_TEST_BOOTSTRAP_VERDICT_H_
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

#define VERDICT_MAX_RANKS 8
enum {
  VERDICT_SILENT,    /* sends nothing, stays connected (a rank busy elsewhere) */
  VERDICT_ALLGATHER, /* a request of 8 bytes, as bootstrap_allgather sends it */
  VERDICT_ABORT,     /* MSG_ABORT with `reason`, as bootstrap_abort sends it */
  VERDICT_GONE,      /* the connection ends without a word (a killed process) */
  VERDICT_SENT_GONE  /* the request, then the connection ends (killed while waiting) */
};
typedef struct verdict_rank {
  int act;
  int late; /* acts delay_ms after the root started serving, not before */
  const char *reason;
} verdict_rank_t;

/* Runs one round of root_serve (host of rank i: "h<1 + i/2>", pid 1000 + i) whose deadline is
 * deadline_ms after its start; its return (0 the round went through, -1 failed with `msg`);
 * *took_s: how long root_serve took. */
int verdict_run(int nranks, const verdict_rank_t *ranks, int delay_ms, int deadline_ms, char *msg,
                size_t len, double *took_s);

#ifdef __cplusplus
}
#endif
#endif
