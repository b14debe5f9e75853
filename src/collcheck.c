/* Collective mismatch detection (TUTTI_CHECK_COLL=1): before a group's collectives run, the
 * ranks of each communicator all-gather a fixed-size record of what they are about to call
 * (collective, count, datatype, op, root, per-communicator sequence number) and compare. Ranks
 * that called different collectives, counts, types, ops or roots then all return
 * ncclInvalidUsage, with a message naming both calls and both ranks, and nothing runs: without
 * the check they would exchange mismatched steps and hang or return garbage.
 *
 * Cost: one extra all-gather of sizeof(collcheck_rec_t) bytes per communicator per group
 * (docs/hardening.md has the measurement). Groups of only send/recv are not checked: their
 * ranks need not all take part. The record carries up to COLLCHECK_CALLS calls in full and a
 * hash of all of them, so larger groups are still compared, with the first calls named.
 */
#include "collcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TUTTI_PARAM(CheckColl, "CHECK_COLL", 0)

#define COLLCHECK_CALLS 4

typedef struct collcheck_call {
  int32_t coll, type, op, root;
  uint64_t count;
} collcheck_call_t;

typedef struct collcheck_rec {
  uint64_t seq;   /* the communicator's checked groups so far */
  uint64_t hash;  /* FNV-1a of every collective call of the group on this communicator */
  int32_t ncalls; /* collective calls of the group on this communicator */
  int32_t rank;
  collcheck_call_t calls[COLLCHECK_CALLS];
} collcheck_rec_t;

static TUTTI_TLS int collcheck_active; /* the check's own all-gathers are not checked */

static int is_coll(const pending_t *p) {
  return p->args.coll != COLL_SEND && p->args.coll != COLL_RECV;
}

int collcheck_wanted(const pending_t *ops, size_t n) {
  if (collcheck_active || !tutti_param_CheckColl()) return 0;
  for (size_t i = 0; i < n; i++)
    if (is_coll(&ops[i])) return 1;
  return 0;
}

static collcheck_call_t call_of(const pending_t *p) {
  const reduce_op_t *o = &p->ctx.rop;
  int coll_has_op = p->args.coll == COLL_ALLREDUCE || p->args.coll == COLL_REDUCE ||
                    p->args.coll == COLL_REDUCESCATTER;
  int rooted = p->args.coll == COLL_BROADCAST || p->args.coll == COLL_REDUCE ||
               p->args.coll == COLL_GATHER || p->args.coll == COLL_SCATTER;
  return (collcheck_call_t){
      .coll = p->args.coll,
      .type = o->type,
      .op = coll_has_op ? (int32_t)o->base | o->premul << 4 | o->postdiv << 5 : -1,
      .root = rooted ? p->args.root : -1,
      .count = p->args.count,
  };
}

static void rec_fill(collcheck_rec_t *r, const pending_t *ops, size_t n, ncclComm_t comm) {
  memset(r, 0, sizeof(*r));
  r->seq = ++comm->collcheck_seq;
  r->rank = comm->rank;
  r->hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    if (ops[i].ctx.comm != comm || !is_coll(&ops[i])) continue;
    collcheck_call_t c = call_of(&ops[i]);
    if (r->ncalls < COLLCHECK_CALLS) r->calls[r->ncalls] = c;
    r->ncalls++;
    const unsigned char *b = (const unsigned char *)&c;
    for (size_t k = 0; k < sizeof(c); k++) r->hash = (r->hash ^ b[k]) * 0x100000001b3ull;
  }
}

static const char *op_text(int32_t op) {
  if (op < 0) return "";
  if (op & 16) return ", premulsum";
  if (op & 32) return ", avg";
  static const char *const names[] = {", sum", ", prod", ", max", ", min"};
  return (op & 15) < 4 ? names[op & 15] : ", op?";
}

static void call_text(const collcheck_rec_t *r, int i, char *out, size_t len) {
  if (i >= r->ncalls) {
    snprintf(out, len, "no collective (%d in the group)", r->ncalls);
    return;
  }
  if (i >= COLLCHECK_CALLS) {
    snprintf(out, len, "a group of %d collectives (calls %d.. not recorded)", r->ncalls, i + 1);
    return;
  }
  const collcheck_call_t *c = &r->calls[i];
  char root[24] = "";
  if (c->root >= 0) snprintf(root, sizeof(root), ", root %d", c->root);
  snprintf(out, len, "%s(count %llu, datatype %d%s%s)", coll_name((coll_t)c->coll),
           (unsigned long long)c->count, c->type, op_text(c->op), root);
}

/* The first call where a and b differ (COLLCHECK_CALLS when only the hash tells). */
static int rec_first_difference(const collcheck_rec_t *a, const collcheck_rec_t *b) {
  int n = TUTTI_MIN(TUTTI_MIN(a->ncalls, b->ncalls), COLLCHECK_CALLS);
  for (int i = 0; i < n; i++)
    if (memcmp(&a->calls[i], &b->calls[i], sizeof(collcheck_call_t)) != 0) return i;
  return a->ncalls != b->ncalls ? n : COLLCHECK_CALLS;
}

/* Every rank names the same pair: rank 0 and the lowest rank whose calls differ from it. A
 * record is its sender's word: a count of calls below 0 is refused before anything indexes by
 * it, and ranks are named by where their record arrived, not by what it says. */
static ncclResult_t rec_compare(ncclComm_t comm, const collcheck_rec_t *all) {
  const collcheck_rec_t *lo = &all[0];
  for (int p = 0; p < comm->nranks; p++)
    if (all[p].ncalls < 0)
      return TUTTI_ERR(ncclRemoteError,
                       "TUTTI_CHECK_COLL: rank %d sent a malformed record (%d calls); nothing "
                       "was run",
                       p, all[p].ncalls);
  for (int p = 1; p < comm->nranks; p++) {
    const collcheck_rec_t *hi = &all[p];
    if (hi->ncalls == lo->ncalls && hi->hash == lo->hash && hi->seq == lo->seq) continue;
    int i = rec_first_difference(lo, hi);
    char a[128], b[128];
    call_text(lo, i, a, sizeof(a));
    call_text(hi, i, b, sizeof(b));
    return TUTTI_ERR(ncclInvalidUsage,
                     "TUTTI_CHECK_COLL: collective mismatch at call %llu of "
                     "the communicator (group position %d): rank %d called %s but rank %d "
                     "called %s (sequence %llu vs %llu); nothing was run",
                     (unsigned long long)all[comm->rank].seq, i + 1, 0, a, p, b,
                     (unsigned long long)lo->seq, (unsigned long long)hi->seq);
  }
  return ncclSuccess;
}

/* The distinct communicators with collectives in ops, into comms; their number. */
static int collect(const pending_t *ops, size_t n, ncclComm_t *comms) {
  int nc = 0;
  for (size_t i = 0; i < n; i++) {
    if (!is_coll(&ops[i])) continue;
    int seen = 0;
    for (int j = 0; j < nc && !seen; j++) seen = comms[j] == ops[i].ctx.comm;
    if (!seen) comms[nc++] = ops[i].ctx.comm;
  }
  return nc;
}

/* The first collective of comm in ops: the call an error during the check names. */
static const op_ctx_t *first_call(const pending_t *ops, size_t n, ncclComm_t comm) {
  for (size_t i = 0; i < n; i++)
    if (is_coll(&ops[i]) && ops[i].ctx.comm == comm) return &ops[i].ctx;
  return NULL; /* not reached: comm came from collect */
}

ncclResult_t collcheck_run(const pending_t *ops, size_t n) {
  ncclComm_t *comms = calloc(n, sizeof(ncclComm_t));
  collcheck_rec_t *mine = calloc(n, sizeof(collcheck_rec_t));
  collcheck_rec_t **all = calloc(n, sizeof(collcheck_rec_t *));
  ncclResult_t res = ncclSuccess;
  int nc = comms && mine && all ? collect(ops, n, comms) : -1;
  for (int c = 0; c < nc && res == ncclSuccess; c++)
    if (!(all[c] = calloc(comms[c]->nranks, sizeof(collcheck_rec_t)))) nc = -1;
  if (nc < 0) {
    res = TUTTI_ERR(ncclSystemError, "out of memory");
    goto out;
  }
  exchange_t *x = calloc((size_t)nc, sizeof(exchange_t));
  if (!x) {
    res = TUTTI_ERR(ncclSystemError, "out of memory");
    goto out;
  }
  for (int c = 0; c < nc; c++) {
    rec_fill(&mine[c], ops, n, comms[c]);
    all[c][comms[c]->rank] = mine[c];
    x[c] = (exchange_t){comms[c], &mine[c], all[c], sizeof(collcheck_rec_t),
                        first_call(ops, n, comms[c])};
  }
  res = engine_exchange(x, nc); /* one exchange: a thread may drive several communicators */
  free(x);
  for (int c = 0; c < nc && res == ncclSuccess; c++) res = rec_compare(comms[c], all[c]);
out:
  for (size_t c = 0; all && c < n; c++) free(all[c]);
  free(all);
  free(mine);
  free(comms);
  return res;
}
