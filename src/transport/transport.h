/* Transports: one file each behind one vtable; the communicator picks, per peer, the first
 * transport in the table whose can_connect says yes (same host -> shm; else ib; else tcp).
 *
 * Data path (slot-based, non-blocking; the engine owns all waiting):
 *   send_slot(conn, bytes) -> pointer to room for the next message (at most bytes long) in the
 *                            peer's FIFO, or NULL if full
 *   send_post(conn, bytes) -> hands that message to the peer: bytes as asked of send_slot
 *   recv_slot(conn, &n)    -> pointer to the next filled slot from the peer, or NULL if none
 *   recv_done(conn)        -> gives the slot back to the sender
 *   peer_failed(conn)      -> nonzero once the peer is known dead or has aborted
 * Optional, instead of send_post (NULL: slots only, e.g. shm):
 *   send_from(conn, buf, n) -> sends what it can of a piece straight from buf without blocking
 *                            and returns the bytes it took (0: full); the engine calls again
 *                            with the rest until the piece is all taken, and only then starts
 *                            the next piece on that connection. Taken bytes are gone: buf may
 *                            change at once. The engine sends from the user's buffers where the
 *                            bytes already lie there, else computes them into send_slot first.
 *   recv_into(conn, buf, n) -> the same for receiving: reads what is there of the next piece,
 *                            which must be n bytes long, straight into buf (without blocking);
 *                            the engine uses it where a step only stores what it receives, and
 *                            recv_slot/recv_done (in place, e.g. to reduce from) otherwise.
 * Optional, whole steps by rendezvous (NULL: pieces only, e.g. tcp). A step the schedule
 * marks STEP_WHOLE (a plain send from, or a plain store into, the user's buffer, matched by such
 * a step on the peer) of at least conn->large_bytes bytes (0: never; both ends of a connection
 * hold the same value) is announced on both ends before any piece of it moves, and the two ends
 * agree whether it travels whole, straight from buffer to buffer (ib: the receiver offers its
 * buffer, the sender writes into it; shm: the sender announces its buffer, the receiver reads
 * it) or by pieces as any other step. The engine calls the same function again until it answers:
 *   send_large(conn, buf, n) -> the step's n bytes lie at buf, unchanged until LARGE_DONE;
 *                            LARGE_DONE: all of them are in the peer's buffer (the step is
 *                            over); LARGE_PIECES: send them piece by piece; 0: not yet.
 *   recv_large(conn, buf, n) -> the step stores the n bytes it receives at buf; LARGE_DONE: they
 *                            are all there; LARGE_PIECES: receive them piece by piece; 0: not
 *                            yet. A failure shows as peer_failed, as on the data path.
 * Every slot holds up to conn->slot_bytes bytes. The engine cuts a step into pieces of the
 * smallest slot of the step's connections, so the pieces a sender cuts match the receiver's
 * only if every connection of the communicator has the same slot_bytes: after setup,
 * transport_connect_all sets it to the smallest slot of all ranks (transports' FIFOs may be
 * larger; they just fill less of each slot) and the chunk to at most half the shallowest FIFO.
 *
 * Peer memory (optional capability; NULL where a transport has none): a rank exposes a buffer
 * to the peers it reaches through this transport and maps a peer's exposed buffer, so that
 * algorithms with peer steps (schedule.h) read each other's buffers in place; plus two words per
 * rank the peer steps publish and poll (progress of the rank's reduction, calls it finished).
 *   mem_expose(comm, buf, n, &h)  -> PEER_EXPOSE_MAP (1) and an opaque handle when peers can
 *                                    map [buf, buf + n); PEER_EXPOSE_READ when they can only
 *                                    read it by copy (mem_read below); 0 when neither
 *                                    (shm: an ncclMemAlloc region, or a peer in this process)
 *   mem_map(comm, peer, &h, &addr) -> maps what `peer` exposed as h (cached), to be read and
 *                                    written; addr is its address here, NULL when it cannot be
 *                                    mapped
 *   mem_word(comm, rank, which)   -> PEER_WORD_PROGRESS / PEER_WORD_DONE of `rank` (this rank or
 *                                    a peer of this transport) as seen here; NULL if none
 *   mem_word_key(comm, rank, which) -> the same word's address in its owner's own mapping when
 *                                    the owner is this process (ranks as threads), else NULL: a
 *                                    name every rank of the process gives the word alike, for
 *                                    the race detector's annotations (tsan.h); never accessed
 * A second flavour, for memory peers cannot map (heap): the peer reads it by copy.
 *   mem_read(comm, peer, &h, off, dst, n) -> copies n bytes at offset off of the buffer `peer`
 *                                    exposed as h into dst here, in one step of the kernel (shm:
 *                                    process_vm_readv, single copy); an error when it cannot.
 *   mem_write(comm, peer, &h, off, src, n) -> the other direction: n bytes from src here into
 *                                    the buffer `peer` exposed as h, at offset off.
 *   A transport with mem_read sets comm->peer_read during setup (collectively: 1 on every rank
 *   when every rank can read every local peer's memory, else 0 on every rank), so that the
 *   planner may choose an algorithm that reads by copy (ALGO_NEEDS_PEER_READ) on every rank
 *   alike; mem_expose then answers PEER_EXPOSE_READ for a buffer it cannot share.
 * Handles travel between ranks as bytes; nothing outside the transport reads them.
 *
 * Setup happens in three collective phases driven by transport_connect_all():
 *   setup(comm, blob)        create this rank's local resources; describe them in a blob
 *                            (comm->send_conn[p].transport already names each peer's choice)
 *   connect(comm, peer, blob) attach to a peer's resources (after an allgather of blobs)
 *   post_connect(comm)       after a barrier: e.g. unlink names nobody needs any more
 */
#ifndef TUTTI_TRANSPORT_H_
#define TUTTI_TRANSPORT_H_

#include "core.h"

struct ncclComm;

typedef struct conn {
  const struct transport *transport;
  int peer;
  size_t slot_bytes;  /* the communicator's agreed slot: every connection cuts the same pieces */
  int nslots;         /* FIFO depth in slots (0: not reported); bounds the agreed chunk */
  size_t large_bytes; /* STEP_WHOLE steps this long go through send_large/recv_large (0: none) */
  void *priv;         /* transport's own state */
} conn_t;

#define TRANSPORT_BLOB_BYTES 256

#define PEER_HANDLE_BYTES 96 /* cuda_p2p: a 64-byte CUDA IPC handle and where the buffer lies */
typedef struct peer_handle {
  unsigned char bytes[PEER_HANDLE_BYTES];
} peer_handle_t;
enum { LARGE_DONE = 1, LARGE_PIECES = 2 }; /* send_large / recv_large; 0: not yet */
enum { PEER_WORD_PROGRESS = 0, PEER_WORD_DONE = 1 };
/* What mem_expose says about a buffer, ordered: every mappable buffer can also be read. */
enum { PEER_EXPOSE_NONE = 0, PEER_EXPOSE_MAP = 1, PEER_EXPOSE_READ = 2 };

typedef struct transport {
  const char *name;
  int (*can_connect)(struct ncclComm *comm, int peer);
  ncclResult_t (*setup)(struct ncclComm *comm, char blob[TRANSPORT_BLOB_BYTES]);
  ncclResult_t (*connect)(struct ncclComm *comm, int peer, const char *peer_blob, conn_t *send,
                          conn_t *recv);
  ncclResult_t (*post_connect)(struct ncclComm *comm);
  void *(*send_slot)(conn_t *conn, size_t bytes);
  void (*send_post)(conn_t *conn, size_t bytes);
  size_t (*send_from)(conn_t *conn, const void *buf, size_t bytes);
  size_t (*recv_into)(conn_t *conn, void *buf, size_t bytes);
  int (*send_large)(conn_t *conn, const void *buf, size_t bytes);
  int (*recv_large)(conn_t *conn, void *buf, size_t bytes);
  /* Optional: sleeps until the connection can probably move (send: room; receive: a piece),
   * at most timeout_ns; the engine calls it instead of spinning and sleeping (on machines with
   * more ranks than CPUs after yielding for TUTTI_YIELD_US). */
  void (*wait)(conn_t *conn, int send, uint64_t timeout_ns);
  int wait_oversubscribed_only; /* wait is for machines with more ranks than CPUs; elsewhere
                                 * the engine spins and yields as for a transport without */
  /* Optional: called when this rank starts to wait (its lanes moved nothing): publishes what the
   * transport held back to save traffic (shm: releases of messages taken), which a peer may
   * be waiting for. */
  void (*idle)(struct ncclComm *comm);
  const void *(*recv_slot)(conn_t *conn, size_t *bytes);
  void (*recv_done)(conn_t *conn);
  int (*peer_failed)(conn_t *conn);
  /* Optional: why the peer failed, as it recorded it, or what this end saw ("connection reset
   * by rank 3 on host h2"); NULL when unknown. */
  const char *(*peer_reason)(conn_t *conn);
  /* Tells peers this rank failed / aborted (sets a flag they poll). */
  void (*mark_failed)(struct ncclComm *comm);
  void (*close)(struct ncclComm *comm);
  /* Optional peer memory (see above). */
  int (*mem_expose)(struct ncclComm *comm, const void *buf, size_t bytes, peer_handle_t *h);
  ncclResult_t (*mem_map)(struct ncclComm *comm, int peer, const peer_handle_t *h,
                          const char **addr);
  volatile uint64_t *(*mem_word)(struct ncclComm *comm, int rank, int which);
  const void *(*mem_word_key)(struct ncclComm *comm, int rank, int which);
  ncclResult_t (*mem_read)(struct ncclComm *comm, int peer, const peer_handle_t *h, size_t off,
                           void *dst, size_t bytes);
  ncclResult_t (*mem_write)(struct ncclComm *comm, int peer, const peer_handle_t *h, size_t off,
                            const void *src, size_t bytes);
} transport_t;

extern const transport_t shm_transport;
extern const transport_t tcp_transport;
extern const transport_t ib_transport;

/* Picks a transport per peer and connects every pair (collective over the communicator). */
ncclResult_t transport_connect_all(struct ncclComm *comm);
void transport_mark_failed(struct ncclComm *comm);
/* A rank starts to wait: every transport's idle (publishes what it held back). */
void transport_idle(struct ncclComm *comm);
void transport_close_all(struct ncclComm *comm);

#endif
