/* Picks a transport per peer (first in the table that can connect) and connects every pair.
 * Adding a transport = one file, one entry here, one CMake line. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "comm.h"

static const transport_t *const transports[] = {&shm_transport};
#define NTRANSPORTS (int)(sizeof(transports) / sizeof(transports[0]))

ncclResult_t transport_connect_all(ncclComm_t comm) {
  int n = comm->nranks, me = comm->rank;
  ncclResult_t res = ncclSuccess;
  comm->send_conn = calloc(n, sizeof(conn_t));
  comm->recv_conn = calloc(n, sizeof(conn_t));
  int *choice = calloc(n, sizeof(int));
  char *blobs = calloc(n, TRANSPORT_BLOB_BYTES);
  if (!comm->send_conn || !comm->recv_conn || !choice || !blobs) {
    res = TUTTI_ERR(ncclSystemError, "out of memory");
    goto out;
  }
  for (int p = 0; p < n; p++) {
    choice[p] = -1;
    for (int t = 0; t < NTRANSPORTS && p != me && choice[p] < 0; t++)
      if (transports[t]->can_connect(comm, p)) choice[p] = t;
    if (p != me && choice[p] < 0) {
      res = TUTTI_ERR(ncclSystemError,
                      "no transport can connect rank %d (host %s) to rank %d (host %s): shared "
                      "memory needs the same host (TUTTI_SHM_DISABLE unset)",
                      me, comm->peers[me].hostname, p, comm->peers[p].hostname);
      goto out;
    }
  }
  for (int t = 0; t < NTRANSPORTS; t++) {
    const transport_t *tr = transports[t];
    memset(blobs, 0, (size_t)n * TRANSPORT_BLOB_BYTES);
    TUTTI_CHECK_GOTO(tr->setup(comm, blobs + (size_t)me * TRANSPORT_BLOB_BYTES), res, out);
    TUTTI_CHECK_GOTO(bootstrap_allgather(comm, blobs, TRANSPORT_BLOB_BYTES), res, out);
    for (int p = 0; p < n; p++) {
      if (choice[p] != t) continue;
      comm->send_conn[p] = (conn_t){.transport = tr, .peer = p};
      comm->recv_conn[p] = (conn_t){.transport = tr, .peer = p};
      TUTTI_CHECK_GOTO(tr->connect(comm, p, blobs + (size_t)p * TRANSPORT_BLOB_BYTES,
                                   &comm->send_conn[p], &comm->recv_conn[p]),
                       res, out);
      INFO(SUB_INIT, "rank %d (%s) -> rank %d (%s) via %s", me, comm->peers[me].hostname, p,
           comm->peers[p].hostname, tr->name);
    }
    TUTTI_CHECK_GOTO(bootstrap_barrier(comm), res, out);
    TUTTI_CHECK_GOTO(tr->post_connect(comm), res, out);
  }
out:
  free(choice);
  free(blobs);
  return res;
}

void transport_mark_failed(ncclComm_t comm) {
  for (int t = 0; t < NTRANSPORTS; t++) transports[t]->mark_failed(comm);
}

void transport_close_all(ncclComm_t comm) {
  for (int t = 0; t < NTRANSPORTS; t++) transports[t]->close(comm);
  free(comm->send_conn);
  free(comm->recv_conn);
  comm->send_conn = comm->recv_conn = NULL;
}
