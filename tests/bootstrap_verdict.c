/* The bootstrap root's verdict on a failed round (test_bootstrap_verdict.cc): bootstrap.c is
 * compiled into this file, as into fuzz_bootstrap, so that its root_serve runs as the library
 * runs it, on real sockets (a socketpair per rank) that the test writes as the ranks would. */
#include "bootstrap_verdict.h"

#include <sys/socket.h>

#include "../src/bootstrap.c"

/* Writes one rank's part of a round to `fd` (the rank's end), as bootstrap.c's client does. */
static void verdict_play(int *fd, const verdict_rank_t *v) {
  request_t q = {.type = MSG_ALLGATHER, .len = 8};
  const char *payload = "payload";
  if (v->act == VERDICT_ABORT)
    q = (request_t){.type = MSG_ABORT, .len = (uint32_t)strlen(v->reason) + 1};
  if (v->act == VERDICT_ABORT) payload = v->reason;
  if (v->act == VERDICT_ALLGATHER || v->act == VERDICT_SENT_GONE || v->act == VERDICT_ABORT) {
    if (send(*fd, &q, sizeof(q), MSG_NOSIGNAL) < 0 || send(*fd, payload, q.len, MSG_NOSIGNAL) < 0)
      return;
  }
  if (v->act == VERDICT_GONE || v->act == VERDICT_SENT_GONE) close(*fd), *fd = -1;
}

typedef struct late_args {
  int nranks, delay_ms, *ends;
  const verdict_rank_t *ranks;
} late_args_t;

static void *verdict_late(void *p) {
  late_args_t *a = p;
  usleep((useconds_t)a->delay_ms * 1000);
  for (int i = 0; i < a->nranks; i++)
    if (a->ranks[i].late) verdict_play(&a->ends[i], &a->ranks[i]);
  return NULL;
}

int verdict_run(int nranks, const verdict_rank_t *ranks, int delay_ms, int deadline_ms, char *msg,
                size_t len, double *took_s) {
  int fds[VERDICT_MAX_RANKS], ends[VERDICT_MAX_RANKS];
  peer_info_t peers[VERDICT_MAX_RANKS];
  if (nranks > VERDICT_MAX_RANKS) return -2;
  memset(peers, 0, sizeof(peers));
  root_t r = {.nranks = nranks, .fds = fds, .peers = peers};
  r.deadline = tutti_time_ns() + (uint64_t)deadline_ms * 1000000ull;
  for (int i = 0; i < nranks; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -2;
    fds[i] = sv[0], ends[i] = sv[1];
    peers[i].pid = 1000 + i;
    snprintf(peers[i].hostname, sizeof(peers[i].hostname), "h%d", 1 + i / 2);
  }
  for (int i = 0; i < nranks; i++)
    if (!ranks[i].late) verdict_play(&ends[i], &ranks[i]);
  late_args_t la = {nranks, delay_ms, ends, ranks};
  pthread_t late;
  if (pthread_create(&late, NULL, verdict_late, &la) != 0) return -2;
  uint64_t t0 = tutti_time_ns();
  msg[0] = '\0';
  int rc = root_serve(&r, msg, len);
  *took_s = (tutti_time_ns() - t0) / 1e9;
  pthread_join(late, NULL);
  for (int i = 0; i < nranks; i++) {
    if (fds[i] >= 0) close(fds[i]);
    if (ends[i] >= 0) close(ends[i]);
  }
  return rc;
}
