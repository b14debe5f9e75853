/* Picks a transport per peer (first in the table that can connect) and connects every pair.
 * Adding a transport = one file, one entry here, one CMake line.
 *
 * Order matters: shm for ranks on the same host (same host identity, TUTTI_SHM_DISABLE unset),
 * ib where a device is up (ib.c: NCCL_IB_DISABLE, NCCL_NET), tcp for everything else; with
 * NCCL_NET=IB a pair that would fall back to tcp is an error. After setup the FIFO geometry
 * (smallest slot, largest safe chunk) is agreed by all ranks: schedules are cut into rounds of
 * `chunk`, and a rank whose peers are all remote must cut them exactly as a rank with local peers
 * does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bootstrap.h"
#include "comm.h"

static const transport_t *const transports[] = {&shm_transport, &ib_transport, &tcp_transport};
#define NTRANSPORTS (int)(sizeof(transports) / sizeof(transports[0]))

/* Every rank takes the smallest slot and chunk of all ranks (0: a rank without peers), caps
 * the chunk at half the shallowest FIFO counted in agreed slots (schedule.h: a ring can then
 * never fill all its FIFOs) and gives every connection the agreed slot. */
static ncclResult_t agree_geometry(ncclComm_t comm) {
  int n = comm->nranks;
  uint64_t depth = 0, *g = calloc(3 * (size_t)n, sizeof(uint64_t));
  if (!g) return TUTTI_ERR(ncclSystemError, "out of memory");
  for (int p = 0; p < n; p++)
    for (int d = 0; d < 2; d++) {
      const conn_t *c = d ? &comm->recv_conn[p] : &comm->send_conn[p];
      if (c->transport && c->nslots > 0 && (!depth || (uint64_t)c->nslots < depth))
        depth = c->nslots;
    }
  g[3 * comm->rank] = comm->slot_bytes;
  g[3 * comm->rank + 1] = comm->chunk_bytes;
  g[3 * comm->rank + 2] = depth;
  ncclResult_t res = bootstrap_allgather(comm, g, 3 * sizeof(uint64_t));
  uint64_t slot = 0, chunk = 0;
  depth = 0;
  for (int r = 0; res == ncclSuccess && r < n; r++) {
    if (g[3 * r] && (!slot || g[3 * r] < slot)) slot = g[3 * r];
    if (g[3 * r + 1] && (!chunk || g[3 * r + 1] < chunk)) chunk = g[3 * r + 1];
    if (g[3 * r + 2] && (!depth || g[3 * r + 2] < depth)) depth = g[3 * r + 2];
  }
  free(g);
  if (res != ncclSuccess) return res;
  if (slot && depth && chunk > slot * (depth / 2)) chunk = slot * (depth / 2);
  comm->slot_bytes = slot;
  comm->chunk_bytes = chunk;
  for (int p = 0; p < n; p++)
    if (p != comm->rank) comm->send_conn[p].slot_bytes = comm->recv_conn[p].slot_bytes = slot;
  INFO(SUB_INIT, "rank %d: FIFO geometry agreed by all ranks: slots of %llu bytes, chunks of %llu",
       comm->rank, (unsigned long long)slot, (unsigned long long)chunk);
  return ncclSuccess;
}

/* Test hook: every rank waits this long after the transport's addresses are exchanged and
 * before it connects to its peers, saying so, so that a test can cut a link in between
 * (MultiHost.ALinkCutBeforeTheDataConnectionsIsNamedInTime). */
TUTTI_PARAM(TestConnectDelayMs, "TEST_CONNECT_DELAY_MS", 0)

static void test_connect_delay(ncclComm_t comm, const transport_t *tr, const int *choice, int t) {
  int peers = 0;
  for (int p = 0; p < comm->nranks; p++) peers += choice[p] == t;
  if (peers == 0) return;
  char before[64];
  snprintf(before, sizeof(before), "before its %s connections", tr->name);
  tutti_test_hold("TUTTI_TEST_CONNECT_DELAY_MS", tutti_param_TestConnectDelayMs(), comm->rank,
                  before);
}

static int net_forced_ib(void) {
  const char *net = tutti_getenv("NET");
  return net && strcasecmp(net, "IB") == 0;
}

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
                      "no transport can connect rank %d (host %s) to rank %d "
                      "(host %s)",
                      me, comm->peers[me].hostname, p, comm->peers[p].hostname);
      goto out;
    }
    if (p != me && transports[choice[p]] == &tcp_transport && net_forced_ib()) {
      res = TUTTI_ERR(ncclSystemError,
                      "NCCL_NET=IB, but rank %d (host %s) has no usable ib device to reach rank "
                      "%d (TUTTI_DEBUG=INFO says why)",
                      me, comm->peers[me].hostname, p);
      goto out;
    }
    if (p != me)
      comm->send_conn[p].transport = comm->recv_conn[p].transport = transports[choice[p]];
  }
  for (int t = 0; t < NTRANSPORTS; t++) {
    const transport_t *tr = transports[t];
    memset(blobs, 0, (size_t)n * TRANSPORT_BLOB_BYTES);
    TUTTI_CHECK_GOTO(tr->setup(comm, blobs + (size_t)me * TRANSPORT_BLOB_BYTES), res, out);
    TUTTI_CHECK_GOTO(bootstrap_allgather(comm, blobs, TRANSPORT_BLOB_BYTES), res, out);
    test_connect_delay(comm, tr, choice, t);
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
  TUTTI_CHECK_GOTO(agree_geometry(comm), res, out);
out:
  free(choice);
  free(blobs);
  return res;
}

void transport_idle(ncclComm_t comm) {
  for (int t = 0; t < NTRANSPORTS; t++)
    if (transports[t]->idle) transports[t]->idle(comm);
}

void transport_mark_failed(ncclComm_t comm) {
  for (int t = 0; t < NTRANSPORTS; t++) transports[t]->mark_failed(comm);
}

/* In reverse table order: closing tcp may still report a failure (which marks every transport
 * failed, shm included), so shm must outlive it. */
void transport_close_all(ncclComm_t comm) {
  for (int t = NTRANSPORTS - 1; t >= 0; t--) transports[t]->close(comm);
  free(comm->send_conn);
  free(comm->recv_conn);
  comm->send_conn = comm->recv_conn = NULL;
}
