/* Peer memory for device buffers of ranks of one host (cuda_p2p.c): the same-host transport's
 * peer-memory capability (transport.h: mem_expose / mem_map) for device memory, through the
 * device-memory interface (device.h: ipc_export / ipc_open). shm.c hands device buffers and
 * device handles here; nothing else calls it.
 *
 * A device handle's first two int32 are {pid, CUDA_P2P_HANDLE_KIND}; shm's own handles start
 * with {pid, 0 or 1}, so shm tells them apart by the second word.
 */
#ifndef TUTTI_TRANSPORT_CUDA_P2P_H_
#define TUTTI_TRANSPORT_CUDA_P2P_H_

#include "transport.h"

#define CUDA_P2P_HANDLE_KIND 2

/* Collective, at setup (every rank of the communicator calls it): comm->dev_peer = 1 on every
 * rank when every rank has a device (the calling thread's), all ranks are on one host, every
 * rank's device reaches every other's (the same GPU, or peer access) and no rank set
 * TUTTI_P2P_DISABLE; else 0 everywhere, with an INFO line saying which rank and why. */
ncclResult_t cuda_p2p_agree(struct ncclComm *comm);
/* 1 when buf is device memory (then cuda_p2p_expose answers for it). */
int cuda_p2p_is_device(const void *buf);
/* PEER_EXPOSE_MAP with a handle when the peers can map [buf, buf + bytes), else
 * PEER_EXPOSE_NONE (device memory is never read by copy). */
int cuda_p2p_expose(struct ncclComm *comm, const void *buf, size_t bytes, peer_handle_t *h);
/* 1 when h is a device handle. */
int cuda_p2p_is_handle(const peer_handle_t *h);
/* The peer's device buffer as a device pointer here: its address within this process, or
 * its allocation opened from the handle (cached per process, released at cuda_p2p_close). */
ncclResult_t cuda_p2p_map(struct ncclComm *comm, int peer, const peer_handle_t *h,
                          const char **addr);
/* Releases what comm opened. */
void cuda_p2p_close(struct ncclComm *comm);

#endif
