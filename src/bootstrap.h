/* Bootstrap over TCP: how ranks find each other.
 *
 * ncclGetUniqueId picks an address, listens, draws a random 128-bit job secret and starts the
 * root thread; the id carries address + port + secret. Each rank connects to the root and
 * presents the secret, its rank, the library version, build options and host identity. The
 * root checks them all (secret, nranks, duplicate ranks, versions), answers with everybody's
 * peer_info_t, then serves allgathers/barriers until every rank says it is done with init.
 * A rank whose init fails on its own side tells the root why (bootstrap_abort); the root tells
 * every rank one verdict, naming a rank that vanished before one that gave up.
 * Connections without the secret are logged and dropped; every wait is bounded by
 * TUTTI_INIT_TIMEOUT (seconds).
 */
#ifndef TUTTI_BOOTSTRAP_H_
#define TUTTI_BOOTSTRAP_H_

#include "comm.h"
#include "socket.h"

typedef struct bootstrap_id { /* layout of ncclUniqueId */
  char magic[8];
  sock_addr_t root;
  unsigned char secret[16];
  uint8_t root_listened; /* the root listened before any rank started (tutti-run): a refused
                          * connection means it is gone, not that it is not up yet */
} bootstrap_id_t;

int64_t bootstrap_init_timeout_ms(void);
/* Fills an id for a root at `addr` with a fresh secret (or `secret` if non-NULL). */
void bootstrap_make_id(const sock_addr_t *addr, const unsigned char *secret, ncclUniqueId *id);
/* Marks an id whose root's socket listened before any rank started (tutti-run opens it first):
 * a rank then takes a refused connection as the root's end, at once, instead of retrying it until
 * TUTTI_INIT_TIMEOUT as a root that may not be up yet. */
void bootstrap_id_set_root_listened(ncclUniqueId *id);
/* Starts the root thread serving `listen_fd` (takes ownership of the fd). */
ncclResult_t bootstrap_root_start(int listen_fd, const ncclUniqueId *id);
/* Joins: fills comm->peers. comm->rank/nranks/peers[rank] must be set. since_ns: when this
 * rank's init started; every wait of the init ends TUTTI_INIT_TIMEOUT after it (a wait for the
 * root's answer 3 s later, see bootstrap.c). */
ncclResult_t bootstrap_join(ncclComm_t comm, const ncclUniqueId *id, uint64_t since_ns);
/* The end of this rank's init (TUTTI_INIT_TIMEOUT after it started): transports' setup waits end
 * by it. Without a bootstrap (not joined): TUTTI_INIT_TIMEOUT from now. */
uint64_t bootstrap_init_deadline_ns(ncclComm_t comm);
/* data holds nranks blocks of `bytes`; this rank's block is sent, all blocks come back. */
ncclResult_t bootstrap_allgather(ncclComm_t comm, void *data, size_t bytes);
ncclResult_t bootstrap_barrier(ncclComm_t comm);
/* Init failed on this rank after it joined, with `res` and the last error: asks the root what
 * ended the job's init (the root weighs every rank's report, see bootstrap.c) and returns `res`
 * with that verdict as the last error, this rank's own reason appended. Bounded by a few s. */
ncclResult_t bootstrap_abort(ncclComm_t comm, ncclResult_t res);
/* Tells the root this rank is done with init and waits for its answer, which comes once every
 * rank said so: an error (the root's verdict) where a rank failed or vanished before that, so
 * that no rank returns from init with a communicator another rank never completed. */
ncclResult_t bootstrap_done(ncclComm_t comm);
/* Closes the connection to the root (after bootstrap_done, or on failure: the root tells the
 * others). */
void bootstrap_close(ncclComm_t comm);

#endif
