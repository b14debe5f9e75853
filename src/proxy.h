/* The stream path: calls with device buffers or a CUDA stream, run by a proxy thread per
 * communicator in the order of their streams (NCCL's stream semantics). See proxy.c. */
#ifndef TUTTI_PROXY_H_
#define TUTTI_PROXY_H_

#include "plan.h"

/* Hands one group's calls (ops, all with on_stream set) to the proxies of their communicators
 * comms[0..nc), one item each, starting a proxy on first use, and enqueues on the calls'
 * streams what orders them: a proxy starts once the work queued before on every stream of its
 * item is done, and later work on those streams waits for it. Returns at once; errors found
 * later go to ncclCommGetAsyncError. */
typedef ncclResult_t (*proxy_run_fn)(pending_t *ops, size_t n);
/* `run` runs an item's calls as a group does (group.c hands over group_run_now: the proxy sits
 * below the group and does not call up into it by name). */
ncclResult_t proxy_submit(ncclComm_t const *comms, int nc, const pending_t *ops, size_t n,
                          proxy_run_fn run);
/* Waits until the proxy ran everything handed to it (a synchronous call must not overtake
 * them); gives up when the communicator is aborted or failed. */
void proxy_drain(ncclComm_t comm);
/* Ends comm's proxy: what is queued runs first (abort: fails at once, releasing the streams
 * waiting on it), then the thread stops and its memory is freed. */
void proxy_stop(ncclComm_t comm);

#endif
