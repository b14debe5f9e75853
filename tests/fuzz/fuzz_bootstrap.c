/* Fuzz target: what the bootstrap reads from sockets (src/bootstrap.c).
 *
 * The first byte picks a reader, the rest is what arrives on its socket(s):
 *   0  the root's hellos: records of sizeof(hello_t) handed to root_on_hello one by one, as the
 *      acceptor does (job secret, nranks, rank, host, version and settings text)
 *   1  the root's service loop (root_serve): for each rank, [u16 length][bytes] written to that
 *      rank's socket (requests: type, length, payload; MSG_ABORT with a reason), then EOF
 *   2  a rank's reading of the root's reply (recv_reply): status, length, payload
 * bootstrap.c is compiled into this file, so its static readers run as the library runs them;
 * sockets are real (socketpairs), nothing is mocked. */
#include <sys/socket.h>

#include "../../src/bootstrap.c"
#include "fuzz.h"

static const unsigned char fuzz_secret[16] = {0x5e, 0xc7, 0x37, 0x01, 2,  3,  4,  5,
                                              6,    7,    8,    9,    10, 11, 12, 13};

static root_t *root_new(int nranks) {
  root_t *r = calloc(1, sizeof(*r));
  r->listen_fd = -1;
  memcpy(r->id.secret, fuzz_secret, 16);
  r->deadline = tutti_time_ns() + 200ull * 1000000ull;
  if (nranks > 0) {
    r->nranks = nranks;
    r->fds = malloc(sizeof(int) * nranks);
    r->peers = calloc(nranks, sizeof(peer_info_t));
    for (int i = 0; i < nranks; i++) r->fds[i] = -1;
  }
  return r;
}

static void root_free(root_t *r) {
  for (int i = 0; i < r->nranks; i++)
    if (r->fds[i] >= 0) close(r->fds[i]);
  free(r->fds);
  free(r->peers);
  free(r);
}

static void fuzz_hellos(fuzz_in_t *in) {
  root_t *r = root_new(0);
  root_gather_t g = {.r = r, .msg = r->msg, .len = sizeof(r->msg)};
  pthread_mutex_init(&g.lock, NULL);
  pthread_cond_init(&g.cond, NULL);
  while (in->left >= sizeof(hello_t)) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) break;
    const char *why = root_on_hello(&g, sv[0], in->p); /* keeps sv[0] or closes it */
    if (why) close(sv[0]);
    close(sv[1]);
    in->p += sizeof(hello_t), in->left -= sizeof(hello_t);
  }
  pthread_cond_destroy(&g.cond);
  pthread_mutex_destroy(&g.lock);
  root_free(r);
}

static void fuzz_serve(fuzz_in_t *in) {
  int nranks = 1 + (int)fuzz_take(in, 1) % 4, peer[4];
  root_t *r = root_new(nranks);
  for (int i = 0; i < nranks; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) sv[0] = sv[1] = -1;
    r->fds[i] = sv[0], peer[i] = sv[1];
    size_t want = fuzz_take(in, 2), n = TUTTI_MIN(want, in->left); /* TUTTI_MIN evaluates twice */
    if (n && peer[i] >= 0 && write(peer[i], in->p, n) < 0) n = 0;
    in->p += n, in->left -= n;
    if (peer[i] >= 0) shutdown(peer[i], SHUT_WR);
  }
  /* the oracle: a round the root gives up on always says why (once an all-gather too large to
   * allocate ended it without a word) */
  if (root_serve(r, r->msg, sizeof(r->msg)) != 0 && !r->msg[0]) abort();
  for (int i = 0; i < nranks; i++)
    if (peer[i] >= 0) close(peer[i]);
  root_free(r);
}

static void fuzz_reply(fuzz_in_t *in) {
  struct ncclComm comm = {.rank = 0, .nranks = 1};
  struct bootstrap b = {.fd = -1, .deadline = tutti_time_ns() + 1000000000ull};
  comm.bootstrap = &b;
  size_t expect = fuzz_take(in, 2);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  if (in->left && write(sv[1], in->p, in->left) < 0) return;
  shutdown(sv[1], SHUT_WR);
  b.fd = sv[0];
  char *data = malloc(expect ? expect : 1);
  recv_reply(&comm, data, expect);
  free(data);
  close(sv[0]);
  close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  fuzz_in_t in = {data, size};
  switch (fuzz_take(&in, 1) % 3) {
    case 0:
      fuzz_hellos(&in);
      break;
    case 1:
      fuzz_serve(&in);
      break;
    default:
      fuzz_reply(&in);
  }
  return 0;
}

/* ---- seeds: hellos as bootstrap_join writes them, requests as bootstrap_allgather does ---- */

static hello_t seed_hello(int rank, int nranks) {
  hello_t h = {.magic = HELLO_MAGIC, .nranks = nranks};
  memcpy(h.secret, fuzz_secret, 16);
  h.info.rank = rank;
  h.info.pid = 1000 + rank;
  snprintf(h.info.hostname, sizeof(h.info.hostname), "host%d", rank / 2);
  snprintf(h.info.version, sizeof(h.info.version), "%s", TUTTI_VERSION_STRING);
  snprintf(h.info.build, sizeof(h.info.build), "%s", tutti_build_options());
  agreed_settings_format(h.info.settings, sizeof(h.info.settings));
  return h;
}

void fuzz_seeds(fuzz_put_fn put, void *arg) {
  uint8_t buf[1 + 4 * sizeof(hello_t)];
  for (int n = 1; n <= 4; n++) { /* n ranks join, in order */
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
      hello_t h = seed_hello(i, n);
      memcpy(buf + 1 + i * sizeof(h), &h, sizeof(h));
    }
    char name[32];
    snprintf(name, sizeof(name), "hellos-%d", n);
    put(arg, name, buf, 1 + n * sizeof(hello_t));
  }
  /* serve: 2 ranks, an allgather of 8 bytes each, then DONE */
  uint8_t s[128], *p = s;
  *p++ = 1, *p++ = 1;
  for (int i = 0; i < 2; i++) {
    request_t q = {.type = MSG_ALLGATHER, .len = 8}, d = {.type = MSG_DONE, .len = 0};
    uint16_t n = sizeof(q) + 8 + sizeof(d);
    memcpy(p, &n, 2), p += 2;
    memcpy(p, &q, sizeof(q)), p += sizeof(q);
    memset(p, 'a' + i, 8), p += 8;
    memcpy(p, &d, sizeof(d)), p += sizeof(d);
  }
  put(arg, "serve-allgather", s, (size_t)(p - s));
  /* regression: 4 ranks ask for an all-gather of 4 GiB - 1 each */
  p = s;
  *p++ = 1, *p++ = 3;
  for (int i = 0; i < 4; i++) {
    request_t q = {.type = MSG_ALLGATHER, .len = 0xffffffffu};
    uint16_t n = sizeof(q);
    memcpy(p, &n, 2), p += 2;
    memcpy(p, &q, sizeof(q)), p += sizeof(q);
  }
  put(arg, "regress-huge-allgather", s, (size_t)(p - s));
  /* serve: 3 ranks, rank 1 gives up (MSG_ABORT and its reason), rank 2 sends nothing */
  p = s;
  *p++ = 1, *p++ = 2;
  const char why[] = "rank 1: peer rank 2 ended during init";
  request_t rq[2] = {{.type = MSG_ALLGATHER, .len = 8}, {.type = MSG_ABORT, .len = sizeof(why)}};
  for (int i = 0; i < 3; i++) {
    uint16_t n = i == 2 ? 0 : (uint16_t)(sizeof(request_t) + (i == 0 ? 8 : sizeof(why)));
    memcpy(p, &n, 2), p += 2;
    if (i == 2) continue;
    memcpy(p, &rq[i], sizeof(request_t)), p += sizeof(request_t);
    if (i == 0) memset(p, 'a', 8), p += 8;
    if (i == 1) memcpy(p, why, sizeof(why)), p += sizeof(why);
  }
  put(arg, "serve-abort", s, (size_t)(p - s));
  /* replies: a peer table of 16 bytes, and an error with its message */
  p = s;
  *p++ = 2;
  uint16_t expect = 16;
  memcpy(p, &expect, 2), p += 2;
  reply_t ok = {.status = 0, .len = 16};
  memcpy(p, &ok, sizeof(ok)), p += sizeof(ok);
  memset(p, 7, 16), p += 16;
  put(arg, "reply-ok", s, (size_t)(p - s));
  p = s + 3;
  const char msg[] = "version mismatch";
  reply_t bad = {.status = ncclInvalidUsage, .len = sizeof(msg)};
  memcpy(p, &bad, sizeof(bad)), p += sizeof(bad);
  memcpy(p, msg, sizeof(msg)), p += sizeof(msg);
  put(arg, "reply-error", s, (size_t)(p - s));
}
