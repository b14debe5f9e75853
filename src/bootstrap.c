/* Bootstrap root thread and client; see bootstrap.h for the protocol. */
#include "bootstrap.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agreed.h"

#define ID_MAGIC "TUTTIid1"
#define HELLO_MAGIC 0x74757474692d6869ull
enum { MSG_ALLGATHER = 1, MSG_DONE = 2, MSG_ABORT = 3 };

typedef struct hello {
  uint64_t magic;
  unsigned char secret[16];
  int32_t nranks;
  peer_info_t info;
} hello_t;

typedef struct reply { /* root -> rank: status, then len bytes (peers, blobs or a message) */
  int32_t status;
  uint32_t len;
} reply_t;

typedef struct request { /* rank -> root */
  int32_t type;
  uint32_t len;
} request_t;

struct bootstrap {
  int fd;
  int heard;         /* the root said init failed, or was lost: its word is in */
  uint64_t init_end; /* TUTTI_INIT_TIMEOUT after this rank's init started */
  uint64_t deadline; /* of every wait for the root (init_end + BOOTSTRAP_REPLY_GRACE_MS) */
  char root[80];     /* the root's address, for messages */
};

struct root_gather;

typedef struct root {
  int listen_fd;
  bootstrap_id_t id;
  int nranks;
  int *fds;           /* [nranks], by rank */
  peer_info_t *peers; /* [nranks] */
  uint64_t deadline;
  int64_t timeout_s;     /* TUTTI_INIT_TIMEOUT when the root started */
  struct root_gather *g; /* hellos: the acceptor's callbacks and the root thread share it */
  struct sock_acceptor *acc;
  char msg[1024]; /* why init failed, for every rank */
} root_t;

/* Read at each use, as TUTTI_TIMEOUT is at each init: a program may set it between its
 * communicators (or between a fork's children), and a process that draws an id may have read it
 * before. */
int64_t bootstrap_init_timeout_ms(void) {
  return tutti_param_fresh("INIT_TIMEOUT", 120) * 1000;
}

void bootstrap_make_id(const sock_addr_t *addr, const unsigned char *secret, ncclUniqueId *id) {
  bootstrap_id_t b;
  memset(id, 0, sizeof(*id));
  memset(&b, 0, sizeof(b));
  memcpy(b.magic, ID_MAGIC, 8);
  b.root = *addr;
  if (secret)
    memcpy(b.secret, secret, 16);
  else if (getrandom(b.secret, 16, 0) != 16) {
    for (int i = 0; i < 16; i++) b.secret[i] = (unsigned char)(rand() ^ (tutti_time_ns() >> i));
  }
  memcpy(id->internal, &b, sizeof(b));
}

void bootstrap_id_set_root_listened(ncclUniqueId *id) {
  bootstrap_id_t b;
  memcpy(&b, id->internal, sizeof(b));
  b.root_listened = 1;
  memcpy(id->internal, &b, sizeof(b));
}

/* ---- root ---- */

/* The rank the root answers at step k of 2 * nranks, -1 for none: the ranks of other processes
 * first, this process's own last, because a rank of this process may return from init once it
 * has its answer and exit, ending the root's thread before the others had theirs (the root lives
 * in rank 0's process; a split's new root in the new rank 0's). */
static int root_answer_order(const root_t *r, int k) {
  int i = k % r->nranks, own = k >= r->nranks;
  return r->fds[i] >= 0 && (r->peers[i].pid == (int32_t)getpid()) == own ? i : -1;
}

/* Tells every rank why init failed, in root_answer_order, each connection's sending side ended
 * and what it had sent dropped, so that closing it later sends no reset that would discard the
 * message on its way. */
static void root_send_error_all(root_t *r, const char *msg) {
  reply_t rep = {.status = ncclInvalidUsage, .len = (uint32_t)strlen(msg) + 1};
  char sink[4096];
  for (int k = 0; k < 2 * r->nranks; k++) {
    int i = root_answer_order(r, k);
    if (i < 0) continue;
    if (sock_send_all(r->fds[i], &rep, sizeof(rep), 1000) == ncclSuccess)
      sock_send_all(r->fds[i], msg, rep.len, 1000);
    shutdown(r->fds[i], SHUT_WR);
    for (int n = 0; n < 64 && recv(r->fds[i], sink, sizeof(sink), MSG_DONTWAIT) > 0; n++) {
    }
  }
}

/* Checks one hello against what the root already has; fills msg on a problem. */
static int root_check_hello(root_t *r, const hello_t *h, char *msg, size_t len) {
  const peer_info_t *in = &h->info;
  if (h->nranks != r->nranks) {
    snprintf(msg, len,
             "rank %d on host %s says nranks=%d but other ranks say %d: every rank must "
             "pass the same nranks",
             in->rank, in->hostname, h->nranks, r->nranks);
    return -1;
  }
  if (in->rank < 0 || in->rank >= r->nranks) {
    snprintf(msg, len, "rank %d (host %s) is out of range [0, %d)", in->rank, in->hostname,
             r->nranks);
    return -1;
  }
  if (r->fds[in->rank] >= 0) {
    const peer_info_t *old = &r->peers[in->rank];
    snprintf(msg, len,
             "rank %d joined twice: from host %s pid %d and from host %s pid %d (check "
             "the launcher's rank numbering)",
             in->rank, old->hostname, old->pid, in->hostname, in->pid);
    return -1;
  }
  for (int i = 0; i < r->nranks; i++) {
    const peer_info_t *o = &r->peers[i];
    if (r->fds[i] < 0) continue;
    if (strcmp(o->version, in->version) != 0 || strcmp(o->build, in->build) != 0) {
      snprintf(msg, len,
               "version mismatch: rank %d on host %s runs tutti %s (%s) but rank %d "
               "on host %s runs tutti %s (%s): install the same tutti build on every host",
               in->rank, in->hostname, in->version, in->build, o->rank, o->hostname, o->version,
               o->build);
      return -1;
    }
    if (agreed_settings_explain(o->settings, o->rank, o->hostname, in->settings, in->rank,
                                in->hostname, msg, len))
      return -1;
    break;
  }
  return 0;
}

static void reply_error(int fd, const char *msg) {
  reply_t rep = {.status = ncclInvalidUsage, .len = (uint32_t)strlen(msg) + 1};
  if (sock_send_all(fd, &rep, sizeof(rep), 1000) == ncclSuccess)
    sock_send_all(fd, msg, rep.len, 1000);
  close(fd);
}

/* Hellos are gathered by an acceptor (socket.c): every joiner is served at once, each must
 * present its whole hello within ROOT_HELLO_MS, and what is dropped (no secret, too slow,
 * closed) is logged with its address, so that idle or trickling connections neither delay the
 * ranks nor hide why an init failed. After a bad hello (version or settings mismatch, duplicate
 * rank, ...) the root keeps answering the ranks still to come with the same error until all
 * nranks arrived or the deadline passed, so every rank learns what to fix. */
#define ROOT_HELLO_MS 5000
#define BOOTSTRAP_MAX_RANKS (1 << 16) /* a peer table of 1<<16 ranks: 44 MiB */

typedef struct root_gather {
  root_t *r;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int joined, arrived, failed, dropped;
  char *msg;
  size_t len;
  char last_drop[160];
} root_gather_t;

static void root_on_drop(void *arg, const sock_addr_t *from, const char *why);

static const char *root_on_hello(void *arg, int fd, const void *bytes) {
  root_gather_t *g = arg;
  root_t *r = g->r;
  hello_t h;
  memcpy(&h, bytes, sizeof(h));
  if (h.magic != HELLO_MAGIC) return "it did not present a tutti hello";
  unsigned char diff = 0; /* compared in constant time */
  for (int i = 0; i < 16; i++) diff |= h.secret[i] ^ r->id.secret[i];
  if (diff) { /* a rank of another job, or a forger */
    sock_addr_t from;
    socklen_t sl = sizeof(from);
    if (getpeername(fd, &from.sa, &sl) != 0) memset(&from, 0, sizeof(from));
    root_on_drop(g, &from, "it presented a different job secret");
    reply_error(fd,
                "the root refused this rank: its job secret differs from the job's (was the "
                "unique id changed on the way, or TUTTI_SECRET set differently on this rank?)");
    return NULL; /* reply_error closed fd */
  }
  h.info.hostname[HOST_NAME_BYTES - 1] = h.info.version[31] = h.info.build[63] = '\0';
  h.info.settings[sizeof(h.info.settings) - 1] = '\0';
  pthread_mutex_lock(&g->lock);
  if (r->nranks == 0) {
    if (h.nranks > BOOTSTRAP_MAX_RANKS) {
      pthread_mutex_unlock(&g->lock);
      snprintf(g->msg, g->len, "rank %d (host %s) says nranks=%d: the bootstrap serves at most %d",
               h.info.rank, h.info.hostname, h.nranks, BOOTSTRAP_MAX_RANKS);
      reply_error(fd, g->msg);
      return NULL; /* reply_error closed fd */
    }
    int n = h.nranks > 0 ? h.nranks : 1;
    r->fds = malloc(sizeof(int) * n);
    r->peers = calloc(n, sizeof(peer_info_t));
    if (!r->fds || !r->peers) {
      pthread_mutex_unlock(&g->lock);
      return "the root is out of memory";
    }
    for (int i = 0; i < n; i++) r->fds[i] = -1;
    r->nranks = n;
  }
  g->arrived++;
  if (g->failed || root_check_hello(r, &h, g->msg, g->len) != 0) {
    g->failed = 1;
    reply_error(fd, g->msg);
  } else {
    r->fds[h.info.rank] = fd;
    r->peers[h.info.rank] = h.info;
    g->joined++;
  }
  pthread_cond_signal(&g->cond);
  pthread_mutex_unlock(&g->lock);
  return NULL;
}

static void root_on_drop(void *arg, const sock_addr_t *from, const char *why) {
  root_gather_t *g = arg;
  char addr[80];
  sock_addr_str(from, addr, sizeof(addr));
  WARN("bootstrap root: dropped a connection from %s: %s", addr, why);
  pthread_mutex_lock(&g->lock);
  g->dropped++;
  snprintf(g->last_drop, sizeof(g->last_drop), "%s: %s", addr, why);
  pthread_mutex_unlock(&g->lock);
}

/* Starts taking hellos (in the caller: ncclGetUniqueId returns with both root threads idle,
 * so a process that forks its ranks right after never forks in the middle of an allocation). */
static ncclResult_t root_gather_start(root_t *r) {
  root_gather_t *g = calloc(1, sizeof(*g));
  if (!g) return TUTTI_ERR(ncclSystemError, "out of memory");
  *g = (root_gather_t){.r = r, .msg = r->msg, .len = sizeof(r->msg)};
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->cond, NULL);
  r->g = g;
  ncclResult_t res = sock_acceptor_start(r->listen_fd, sizeof(hello_t), ROOT_HELLO_MS,
                                         root_on_hello, root_on_drop, g, -1, &r->acc);
  if (res != ncclSuccess) {
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    free(g);
    r->g = NULL;
  }
  return res;
}

/* ": rank 2, rank 5 did not join" (the first 8), for an init that timed out; its length. */
static int root_missing_ranks(const root_t *r, char *out, size_t len) {
  int n = 0, listed = 0;
  for (int i = 0; i < r->nranks && listed < 8 && (size_t)n < len; i++) {
    if (r->fds[i] >= 0) continue;
    int k = snprintf(out + n, len - (size_t)n, "%srank %d", listed ? ", " : ": ", i);
    if (k < 0) break;
    n += k, listed++;
  }
  if (listed && (size_t)n < len) {
    int k = snprintf(out + n, len - (size_t)n, "%s did not join", listed == 8 ? ", ..." : "");
    n += k > 0 ? k : 0;
  }
  return TUTTI_MIN(n, (int)len - 1);
}

/* Waits until every rank presented a hello (or the deadline), then stops the acceptor. */
static int root_gather_hellos(root_t *r) {
  root_gather_t *g = r->g;
  pthread_mutex_lock(&g->lock);
  while ((r->nranks == 0 || g->arrived < r->nranks) && sock_ms_left(r->deadline) > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int wait_ms = TUTTI_MIN(sock_ms_left(r->deadline), 1000);
    ts.tv_sec += wait_ms / 1000, ts.tv_nsec += (long)(wait_ms % 1000) * 1000000l;
    if (ts.tv_nsec >= 1000000000l) ts.tv_sec++, ts.tv_nsec -= 1000000000l;
    pthread_cond_timedwait(&g->cond, &g->lock, &ts);
  }
  pthread_mutex_unlock(&g->lock);
  sock_acceptor_stop(r->acc); /* after this no callback runs: g is ours alone */
  r->acc = NULL;
  int complete = r->nranks > 0 && g->arrived >= r->nranks, failed = g->failed;
  if (!complete && !failed) {
    int n = r->nranks == 0 /* no hello arrived, so the job's size is unknown */
                ? snprintf(r->msg, sizeof(r->msg), "no rank joined within TUTTI_INIT_TIMEOUT=%llds",
                           (long long)r->timeout_s)
                : snprintf(r->msg, sizeof(r->msg),
                           "only %d of %d ranks joined within "
                           "TUTTI_INIT_TIMEOUT=%llds",
                           g->joined, r->nranks, (long long)r->timeout_s);
    n += root_missing_ranks(r, r->msg + n, sizeof(r->msg) - (size_t)n);
    if (g->dropped && n > 0 && (size_t)n < sizeof(r->msg))
      snprintf(r->msg + n, sizeof(r->msg) - (size_t)n,
               " (the root dropped %d connection(s); "
               "the last from %s)",
               g->dropped, g->last_drop);
  }
  pthread_cond_destroy(&g->cond);
  pthread_mutex_destroy(&g->lock);
  free(g);
  r->g = NULL;
  return complete && !failed ? 0 : -1;
}

/* Answers every rank, in root_answer_order; a rank that cannot be answered is named in r->msg
 * (and its connection closed), so that the others learn who left. */
static int root_reply_all(root_t *r, const void *data, uint32_t len) {
  reply_t rep = {.status = 0, .len = len};
  for (int k = 0; k < 2 * r->nranks; k++) {
    int i = root_answer_order(r, k);
    if (i < 0) continue;
    if (sock_send_all(r->fds[i], &rep, sizeof(rep), sock_ms_left(r->deadline)) != ncclSuccess ||
        sock_send_all(r->fds[i], data, len, sock_ms_left(r->deadline)) != ncclSuccess) {
      snprintf(r->msg, sizeof(r->msg), "rank %d (host %s, pid %d) disconnected during init", i,
               r->peers[i].hostname, r->peers[i].pid);
      close(r->fds[i]);
      r->fds[i] = -1;
      return -1;
    }
  }
  return 0;
}

/* A round's requests: every rank's header first, all alike, before any payload is read or any
 * buffer sized by them; a round of more than BOOTSTRAP_MAX_ROUND bytes is refused.
 *
 * The headers are read as they come (poll over every rank), because a round can also end in a
 * failure, and then the root decides what the ranks are told: a rank whose init failed on its
 * own side (a peer's segment gone, a connection refused) sends MSG_ABORT with its reason, and a
 * killed rank's connection ends without a word. Both can happen in one round, and the one that
 * gave up is often a casualty of the one that died (its peer, or its peer's peer), so after the
 * first of them the root waits up to ROOT_VERDICT_GRACE_MS for every other rank's part and names
 * a rank whose connection ended first, else the rank that gave up first with its reason. A
 * killed process's sockets are closed by the kernel before any peer can see it gone, so its end
 * is there to be seen by the time another rank's complaint arrives.
 *
 * A rank still silent at the root's deadline is late, and the round fails; but it gets the same
 * grace to say why. Its own waits end TUTTI_INIT_TIMEOUT after its init started, a little after
 * the root's (the id, and so the root, came first), and its reason (a peer it cannot reach) says
 * where the fault is, where "stalled" would blame the rank that waited for it. */
#define BOOTSTRAP_MAX_ROUND ((uint64_t)1 << 30)
#define ROOT_VERDICT_GRACE_MS 1000
#define BOOTSTRAP_REASON_BYTES 768 /* of a MSG_ABORT's reason that the root keeps */

enum { PART_WAITING, PART_READ, PART_GAVE_UP, PART_GONE };

typedef struct round_part { /* one rank's part in a round of requests */
  int state;
  request_t q;
  uint64_t at; /* when its MSG_ABORT came */
  int late;    /* still waiting at the root's deadline */
  char reason[BOOTSTRAP_REASON_BYTES];
} round_part_t;

/* Reads rank i's header (and a MSG_ABORT's reason); the rank's state after it. */
static int root_read_part(root_t *r, int i, round_part_t *part, uint64_t until) {
  if (sock_recv_all(r->fds[i], &part->q, sizeof(part->q), sock_ms_left(until)) != ncclSuccess)
    return PART_GONE;
  if (part->q.type != MSG_ABORT) return PART_READ;
  size_t n = TUTTI_MIN((size_t)part->q.len, sizeof(part->reason) - 1);
  if (sock_recv_all(r->fds[i], part->reason, n, 1000) != ncclSuccess) n = 0;
  part->reason[n] = '\0';
  part->at = tutti_time_ns();
  return PART_GAVE_UP;
}

/* A rank whose header was read: has its connection ended since (after the request's payload,
 * `skip` bytes, which are read and dropped)? Never blocks. */
static int root_part_ended(int fd, size_t skip) {
  char sink[4096];
  while (skip > 0) {
    ssize_t k = recv(fd, sink, TUTTI_MIN(skip, sizeof(sink)), MSG_DONTWAIT);
    if (k <= 0) return k == 0 || (errno != EAGAIN && errno != EINTR);
    skip -= (size_t)k;
  }
  ssize_t k = recv(fd, sink, 1, MSG_DONTWAIT | MSG_PEEK);
  return k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR);
}

/* Polls the ranks still to be heard until all are, or the deadline (and the late ranks' grace,
 * see above); 1 if one failed. */
static int root_poll_parts(root_t *r, round_part_t *parts, struct pollfd *pf, int *idx) {
  uint64_t until = r->deadline;
  int trouble = 0, overtime = 0;
  for (;;) {
    int k = 0;
    for (int i = 0; i < r->nranks; i++)
      if (parts[i].state == PART_WAITING)
        pf[k] = (struct pollfd){r->fds[i], POLLIN, 0}, idx[k++] = i;
    if (k == 0) return trouble;
    if (sock_ms_left(until) == 0 && !trouble && !overtime) {
      overtime = 1;
      for (int j = 0; j < k; j++) parts[idx[j]].late = 1;
      until = tutti_time_ns() + ROOT_VERDICT_GRACE_MS * 1000000ull;
    }
    int ready = sock_ms_left(until) == 0 ? 0 : poll(pf, (nfds_t)k, sock_ms_left(until));
    if (ready < 0 || (ready == 0 && (trouble || overtime))) return trouble;
    for (int j = 0; j < k; j++) {
      if (!pf[j].revents) continue;
      round_part_t *part = &parts[idx[j]];
      part->state = root_read_part(r, idx[j], part, TUTTI_MAX(until, r->deadline));
      if (part->state != PART_READ && !trouble) {
        trouble = 1;
        uint64_t grace = tutti_time_ns() + ROOT_VERDICT_GRACE_MS * 1000000ull;
        until = TUTTI_MIN(until, grace);
      }
    }
  }
}

/* The round failed: what every rank is told (see above). */
static void root_verdict(root_t *r, round_part_t *parts, char *msg, size_t len) {
  int gone = -1, first = -1;
  for (int i = 0; i < r->nranks; i++) {
    round_part_t *part = &parts[i];
    if (part->state == PART_READ && root_part_ended(r->fds[i], part->q.len))
      part->state = PART_GONE;
    if (part->state == PART_GONE && gone < 0) gone = i;
    if (part->state == PART_GAVE_UP && (first < 0 || part->at < parts[first].at)) first = i;
  }
  if (gone >= 0)
    snprintf(msg, len, "rank %d (host %s, pid %d) disconnected during init", gone,
             r->peers[gone].hostname, r->peers[gone].pid);
  else if (first >= 0)
    snprintf(msg, len, "rank %d (host %s) gave up: %s", first, r->peers[first].hostname,
             parts[first].reason);
  else
    snprintf(msg, len, "a round of init failed without a word from any rank");
}

static int root_headers_agree(root_t *r, const round_part_t *parts, request_t *first, char *msg,
                              size_t len) {
  for (int i = 0; i < r->nranks; i++) {
    if (parts[i].state == PART_WAITING || parts[i].late) {
      snprintf(msg, len, "rank %d (host %s, pid %d) stalled during init", i, r->peers[i].hostname,
               r->peers[i].pid);
      return -1;
    }
    const request_t *q = &parts[i].q;
    if (q->type != parts[0].q.type || q->len != parts[0].q.len) {
      snprintf(msg, len, "ranks disagree during init (rank %d sent %d/%u, rank 0 %d/%u)", i,
               q->type, q->len, parts[0].q.type, parts[0].q.len);
      return -1;
    }
  }
  *first = parts[0].q;
  if (first->type != MSG_ALLGATHER && first->type != MSG_DONE) {
    snprintf(msg, len, "the ranks sent a request of unknown type %d during init", first->type);
    return -1;
  }
  if ((uint64_t)first->len * (uint64_t)r->nranks > BOOTSTRAP_MAX_ROUND) {
    snprintf(msg, len, "the ranks asked for an all-gather of %u bytes x %d ranks (at most %llu)",
             first->len, r->nranks, (unsigned long long)BOOTSTRAP_MAX_ROUND);
    return -1;
  }
  return 0;
}

static int root_read_headers(root_t *r, request_t *first, char *msg, size_t len) {
  round_part_t *parts = calloc((size_t)r->nranks, sizeof(*parts));
  struct pollfd *pf = calloc((size_t)r->nranks, sizeof(*pf));
  int *idx = calloc((size_t)r->nranks, sizeof(int)), rc = -1;
  if (!parts || !pf || !idx) {
    snprintf(msg, len, "the bootstrap root is out of memory");
  } else if (root_poll_parts(r, parts, pf, idx)) {
    root_verdict(r, parts, msg, len);
  } else {
    rc = root_headers_agree(r, parts, first, msg, len);
  }
  free(parts);
  free(pf);
  free(idx);
  return rc;
}

/* Serves allgather rounds until all ranks send DONE. */
static int root_serve(root_t *r, char *msg, size_t len) {
  for (;;) {
    request_t first = {0};
    if (root_read_headers(r, &first, msg, len) != 0) return -1;
    if (first.type == MSG_DONE) { /* answer only now: nobody exits while others still wait */
      for (int i = 0; i < r->nranks; i++)
        if (root_part_ended(r->fds[i], 0)) { /* it stopped waiting for this answer */
          snprintf(msg, len, "rank %d (host %s, pid %d) disconnected during init", i,
                   r->peers[i].hostname, r->peers[i].pid);
          return -1;
        }
      root_reply_all(r, "", 0);
      return 0;
    }
    char *buf = malloc((size_t)first.len * r->nranks + 1);
    if (!buf) {
      snprintf(msg, len, "the bootstrap root is out of memory");
      return -1;
    }
    for (int i = 0; i < r->nranks; i++) {
      if (sock_recv_all(r->fds[i], buf + (size_t)i * first.len, first.len,
                        sock_ms_left(r->deadline)) != ncclSuccess) {
        snprintf(msg, len, "rank %d (host %s) disconnected during init", i, r->peers[i].hostname);
        free(buf);
        return -1;
      }
    }
    int rc = root_reply_all(r, buf, first.len * (uint32_t)r->nranks); /* names who left */
    free(buf);
    if (rc != 0) return -1;
  }
}

/* Closes the ranks' connections so that what was just sent to them arrives: a close with
 * unread bytes, or bytes still coming (a request the root gave up on), sends a reset, and a reset
 * discards the error message still on its way to the rank. So: end the sending sides, then read
 * and drop until each rank closes (it does once it has the answer), for at most 2 s in all. */
static void root_close_all(root_t *r) {
  char sink[4096];
  uint64_t deadline = tutti_time_ns() + 2000ull * 1000000ull;
  for (int i = 0; i < r->nranks; i++)
    if (r->fds[i] >= 0) shutdown(r->fds[i], SHUT_WR);
  for (int i = 0; i < r->nranks; i++) {
    while (r->fds[i] >= 0 && sock_ms_left(deadline) > 0) {
      struct pollfd pf = {.fd = r->fds[i], .events = POLLIN};
      if (poll(&pf, 1, sock_ms_left(deadline)) <= 0) break;
      if (recv(r->fds[i], sink, sizeof(sink), MSG_DONTWAIT) <= 0) break; /* EOF: it closed */
    }
    if (r->fds[i] >= 0) close(r->fds[i]), r->fds[i] = -1;
  }
}

/* Roots of this process still waiting for their ranks' hellos: each holds two threads (root,
 * acceptor) and three fds until its ranks joined or TUTTI_INIT_TIMEOUT passed, also for an id
 * that is never used. At most ROOT_MAX_WAITING at once: ncclGetUniqueId refuses more, naming the
 * limit, so a program that draws ids in a loop cannot pile up threads and ports. */
#define ROOT_MAX_WAITING 64
static int root_waiting;
static ncclResult_t root_start(int listen_fd, const ncclUniqueId *id);

static void *root_main(void *arg) {
  root_t *r = arg;
  char *msg = r->msg;
  int joined = root_gather_hellos(r) == 0;
  __atomic_sub_fetch(&root_waiting, 1, __ATOMIC_ACQ_REL);
  if (joined && root_reply_all(r, r->peers, sizeof(peer_info_t) * (uint32_t)r->nranks) == 0 &&
      root_serve(r, msg, sizeof(r->msg)) == 0) {
    INFO(SUB_BOOTSTRAP, "bootstrap root: %d ranks initialised", r->nranks);
  } else if (msg[0]) {
    WARN("bootstrap root: %s", msg);
    root_send_error_all(r, msg);
  }
  close(r->listen_fd); /* no joiner is served any more: the port closes at once */
  root_close_all(r);
  free(r->fds);
  free(r->peers);
  free(r);
  return NULL;
}

ncclResult_t bootstrap_root_start(int listen_fd, const ncclUniqueId *id) {
  if (__atomic_add_fetch(&root_waiting, 1, __ATOMIC_ACQ_REL) > ROOT_MAX_WAITING) {
    __atomic_sub_fetch(&root_waiting, 1, __ATOMIC_ACQ_REL);
    return TUTTI_ERR(ncclInvalidUsage,
                     "ncclGetUniqueId: %d unique ids of this process are still waiting for their "
                     "ranks (each holds a thread and a port until its ranks join, or for "
                     "TUTTI_INIT_TIMEOUT=%llds): use them, or draw a new id once they are done",
                     ROOT_MAX_WAITING, (long long)(bootstrap_init_timeout_ms() / 1000));
  }
  ncclResult_t res = root_start(listen_fd, id);
  if (res != ncclSuccess) __atomic_sub_fetch(&root_waiting, 1, __ATOMIC_ACQ_REL);
  return res;
}

static ncclResult_t root_start(int listen_fd, const ncclUniqueId *id) {
  root_t *r = calloc(1, sizeof(*r));
  if (!r) return TUTTI_ERR(ncclSystemError, "out of memory");
  r->listen_fd = listen_fd;
  memcpy(&r->id, id->internal, sizeof(r->id));
  r->timeout_s = bootstrap_init_timeout_ms() / 1000;
  r->deadline = tutti_time_ns() + (uint64_t)r->timeout_s * 1000000000ull;
  char buf[80];
  INFO(SUB_BOOTSTRAP, "bootstrap root listening on %s",
       sock_addr_str(&r->id.root, buf, sizeof(buf)));
  ncclResult_t res = root_gather_start(r);
  if (res != ncclSuccess) {
    free(r);
    return res;
  }
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, root_main, r);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    sock_acceptor_stop(r->acc);
    pthread_cond_destroy(&r->g->cond);
    pthread_mutex_destroy(&r->g->lock);
    free(r->g);
    free(r);
    return TUTTI_ERR(ncclSystemError, "cannot start the bootstrap root thread: %s", strerror(rc));
  }
  return ncclSuccess;
}

/* ---- client ---- */

/* A rank's waits during init all end at one deadline, TUTTI_INIT_TIMEOUT after its init started
 * (its connections to the root and to its peers: bootstrap_init_deadline_ns), and its waits for
 * the root's answers a grace later: a little later than the root gives up (TUTTI_INIT_TIMEOUT after
 * its start, then ROOT_VERDICT_GRACE_MS for late ranks' reasons), so that the root's answer saying
 * why arrives before the rank's own wait ends. So a rank's init never lasts more than
 * TUTTI_INIT_TIMEOUT + 3 s (+ closing), counted from its call, whatever happens to the others. */
#define BOOTSTRAP_REPLY_GRACE_MS 3000

static ncclResult_t recv_reply(ncclComm_t comm, void *data, size_t expect) {
  reply_t rep;
  int fd = comm->bootstrap->fd, tmo = sock_ms_left(comm->bootstrap->deadline);
  ncclResult_t res = sock_recv_all(fd, &rep, sizeof(rep), tmo);
  if (res != ncclSuccess) {
    char why[512];
    snprintf(why, sizeof(why), "%s", tutti_last_error());
    comm->bootstrap->heard = 1;
    return TUTTI_ERR(ncclRemoteError, "rank %d: lost the bootstrap root at %s during init (%s)",
                     comm->rank, comm->bootstrap->root, why);
  }
  if (rep.status != 0) {
    char msg[1024] = "";
    sock_recv_all(fd, msg, TUTTI_MIN(rep.len, sizeof(msg) - 1), 2000);
    msg[sizeof(msg) - 1] = '\0';
    comm->bootstrap->heard = 1;
    return TUTTI_ERR((ncclResult_t)rep.status, "rank %d: bootstrap failed: %s", comm->rank, msg);
  }
  if (rep.len != expect)
    return TUTTI_ERR(ncclInternalError, "bootstrap reply of %u bytes, expected %zu", rep.len,
                     expect);
  return sock_recv_all(fd, data, expect, tmo);
}

/* Sends to the root; when that fails, the root may have said why before it closed (it tells
 * every rank what ended the init): that answer, else the root is named as lost. */
static ncclResult_t send_to_root(ncclComm_t comm, const void *buf, size_t len) {
  int tmo = TUTTI_MAX(sock_ms_left(comm->bootstrap->deadline), 1000);
  if (sock_send_all(comm->bootstrap->fd, buf, len, tmo) == ncclSuccess) return ncclSuccess;
  char none[1];
  struct pollfd pf = {.fd = comm->bootstrap->fd, .events = POLLIN};
  ncclResult_t res = ncclSuccess; /* the root's word, if it is there within a second */
  if (poll(&pf, 1, 1000) > 0) res = recv_reply(comm, none, 0);
  comm->bootstrap->heard = 1;
  return res != ncclSuccess
             ? res
             : TUTTI_ERR(ncclRemoteError, "rank %d: lost the bootstrap root at %s during init",
                         comm->rank, comm->bootstrap->root);
}

uint64_t bootstrap_init_deadline_ns(ncclComm_t comm) {
  if (comm->bootstrap) return comm->bootstrap->init_end;
  return tutti_time_ns() + (uint64_t)bootstrap_init_timeout_ms() * 1000000ull;
}

ncclResult_t bootstrap_join(ncclComm_t comm, const ncclUniqueId *id, uint64_t since_ns) {
  bootstrap_id_t b;
  memcpy(&b, id->internal, sizeof(b));
  if (memcmp(b.magic, ID_MAGIC, 8) != 0)
    return TUTTI_ERR(ncclInvalidArgument,
                     "commId is not a tutti unique id (was it produced by "
                     "ncclGetUniqueId and passed unchanged to every rank?)");
  memcpy(comm->secret, b.secret, 16);
  comm->bootstrap = calloc(1, sizeof(struct bootstrap));
  if (!comm->bootstrap) return TUTTI_ERR(ncclSystemError, "out of memory");
  comm->bootstrap->fd = -1;
  comm->bootstrap->init_end = since_ns + (uint64_t)bootstrap_init_timeout_ms() * 1000000ull;
  comm->bootstrap->deadline =
      comm->bootstrap->init_end + (uint64_t)BOOTSTRAP_REPLY_GRACE_MS * 1000000ull;
  sock_addr_str(&b.root, comm->bootstrap->root, sizeof(comm->bootstrap->root));
  ncclResult_t res =
      b.root_listened
          ? sock_connect_listening(&b.root, sock_ms_left(comm->bootstrap->init_end),
                                   &comm->bootstrap->fd)
          : sock_connect(&b.root, sock_ms_left(comm->bootstrap->init_end), &comm->bootstrap->fd);
  if (res != ncclSuccess && b.root_listened && errno == ECONNREFUSED)
    return TUTTI_ERR(ncclRemoteError,
                     "rank %d: the bootstrap root at %s refused the connection: it is gone (rank "
                     "0 exited, or the job's init already failed and the root closed its port)",
                     comm->rank, comm->bootstrap->root);
  TUTTI_CHECK(res);
  hello_t h = {.magic = HELLO_MAGIC, .nranks = comm->nranks, .info = comm->peers[comm->rank]};
  memcpy(h.secret, b.secret, 16);
  TUTTI_CHECK(send_to_root(comm, &h, sizeof(h)));
  TUTTI_CHECK(recv_reply(comm, comm->peers, sizeof(peer_info_t) * comm->nranks));
  char buf[80];
  INFO(SUB_BOOTSTRAP | SUB_INIT, "rank %d/%d joined through root %s", comm->rank, comm->nranks,
       sock_addr_str(&b.root, buf, sizeof(buf)));
  return ncclSuccess;
}

ncclResult_t bootstrap_allgather(ncclComm_t comm, void *data, size_t bytes) {
  request_t q = {.type = MSG_ALLGATHER, .len = (uint32_t)bytes};
  TUTTI_CHECK(send_to_root(comm, &q, sizeof(q)));
  TUTTI_CHECK(send_to_root(comm, (char *)data + bytes * comm->rank, bytes));
  return recv_reply(comm, data, bytes * comm->nranks);
}

ncclResult_t bootstrap_barrier(ncclComm_t comm) {
  char *tmp = calloc(comm->nranks, 1);
  if (!tmp) return TUTTI_ERR(ncclSystemError, "out of memory");
  ncclResult_t res = bootstrap_allgather(comm, tmp, 1);
  free(tmp);
  return res;
}

/* Tells the root why this rank's init failed (MSG_ABORT and the message) unless the root had its
 * say already, and waits a little longer than the root's grace for the root's verdict. */
static void send_abort(ncclComm_t comm, const char *own) {
  struct bootstrap *b = comm->bootstrap;
  uint64_t until = tutti_time_ns() + (ROOT_VERDICT_GRACE_MS + 2000) * 1000000ull;
  b->deadline = TUTTI_MIN(b->deadline, until);
  struct pollfd pf = {.fd = b->fd, .events = POLLIN};
  if (poll(&pf, 1, 0) != 0) return; /* the root's word is here already */
  request_t q = {.type = MSG_ABORT, .len = (uint32_t)strlen(own) + 1};
  if (sock_send_all(b->fd, &q, sizeof(q), 1000) == ncclSuccess)
    sock_send_all(b->fd, own, q.len, 1000);
}

ncclResult_t bootstrap_abort(ncclComm_t comm, ncclResult_t res) {
  struct bootstrap *b = comm->bootstrap;
  if (!b || b->fd < 0 || b->heard) return res;
  char own[BOOTSTRAP_REASON_BYTES], mine[BOOTSTRAP_REASON_BYTES + 160], none;
  snprintf(own, sizeof(own), "%s", tutti_last_error());
  snprintf(mine, sizeof(mine), "rank %d (host %s) gave up: %s", comm->rank,
           comm->peers[comm->rank].hostname, own); /* the root's verdict naming this rank */
  send_abort(comm, own);
  if (recv_reply(comm, &none, 0) == ncclSuccess || strstr(tutti_last_error(), mine))
    return TUTTI_ERR(res, "%s", own); /* no verdict, or the verdict is this rank's own reason */
  char verdict[1024];
  snprintf(verdict, sizeof(verdict), "%s", tutti_last_error());
  return TUTTI_ERR(res, "%s; rank %d itself saw: %s", verdict, comm->rank, own);
}

ncclResult_t bootstrap_done(ncclComm_t comm) {
  request_t q = {.type = MSG_DONE, .len = 0};
  char none;
  TUTTI_CHECK(send_to_root(comm, &q, sizeof(q)));
  return recv_reply(comm, &none, 0);
}

void bootstrap_close(ncclComm_t comm) {
  if (!comm->bootstrap) return;
  if (comm->bootstrap->fd >= 0) close(comm->bootstrap->fd);
  free(comm->bootstrap);
  comm->bootstrap = NULL;
}
