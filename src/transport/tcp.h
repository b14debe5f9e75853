/* The TCP transport's private types, shared by its two files:
 *   tcp.c        the vtable, the data path (engine side and receive helpers), failure, close
 *   tcp_setup.c  connection setup: listening, the authenticated data port, opening sockets
 * See tcp.c for the design. */
#ifndef TUTTI_TRANSPORT_TCP_H_
#define TUTTI_TRANSPORT_TCP_H_

#include <pthread.h>
#include <stdint.h>

#include "comm.h"
#include "socket.h"

#define TCP_MAX_THREADS 16
#define TCP_MAX_SOCKS 64
#define TCP_MAX_SLOTS 64
#define TCP_HELLO_MS 5000 /* a connection must present its hello this fast */
#define TCP_BLOB_MAGIC 0x74757474692d7462ull
#define TCP_HELLO_MAGIC 0x74757474692d7468ull
#define HDR_DATA 0x74740d01u  /* bytes of payload follow */
#define HDR_BYE 0x74740b1eu   /* clean close: nothing follows */
#define HDR_ABORT 0x74740ab0u /* the sender failed or aborted: bytes of reason text follow */
#define TCP_REASON_MAX 1024

typedef struct tcp_hdr {
  uint32_t kind; /* HDR_DATA, HDR_BYE or HDR_ABORT */
  uint32_t bytes;
  uint32_t crc; /* DATA with TUTTI_CHECKSUM=1: CRC32C of the payload (else 0) */
} tcp_hdr_t;

typedef struct tcp_hello {
  uint64_t magic;
  unsigned char secret[16];
  uint64_t id_hash;
  int32_t from, to;     /* ranks */
  int32_t sock, nsocks; /* this socket's index */
} tcp_hello_t;

typedef struct tcp_blob {
  uint64_t magic;
  sock_addr_t addr;
  int32_t nthreads, per_thread;
  uint32_t nslots, slot_bytes;
  char ifname[32];
} tcp_blob_t;

typedef struct padded_u64 { /* a counter alone on its cache line */
  uint64_t v;
} __attribute__((aligned(TUTTI_CACHELINE))) padded_u64_t;

struct tcp_state;

typedef struct tcp_conn {
  /* set at connect, read-only afterwards */
  struct tcp_state *st;
  int peer, is_send, nsocks;
  int shared; /* the pair's sockets carry both directions (the recv end owns them) */
  size_t slot_bytes, arena_bytes;
  char *slots; /* one staging slot */
  int fds[TCP_MAX_SOCKS];
  /* send: the piece going out (engine thread; tx_mu keeps an abort notice out of it) */
  pthread_mutex_t tx_mu;
  tcp_hdr_t tx_hdr;
  size_t tx_hdr_left, tx_left; /* header and payload bytes of the piece not yet sent */
  uint64_t tx_piece;           /* pieces started: piece s goes on socket s % nsocks */
  int tx_fd;
  /* receive (engine thread): the piece coming in */
  tcp_hdr_t rx_hdr;
  size_t rx_hdr_got, rx_got; /* header and payload bytes of it read so far */
  uint64_t rx_piece;         /* pieces done: piece s comes on socket s % nsocks */
  int rx_fd, byes;           /* byes: the peer said goodbye */
  int checksum;              /* TUTTI_CHECKSUM: pieces carry and are checked against a CRC32C */
  uint32_t rx_crc;           /* CRC32C of the piece's payload read so far */
  int claimed, failed;       /* failed is set once reason is written */
  char reason[384];
} tcp_conn_t;

typedef struct tcp_state {
  struct ncclComm *comm;
  struct tcp_state *next;
  int npeers; /* peers reached over tcp */
  int listen_fd;
  sock_acceptor_t *acceptor; /* answers the data port for the communicator's life */
  sock_addr_t addr;
  char ifname[64];
  int aborted;              /* this rank failed (mark_failed) */
  int closing;              /* tcp_close runs: failures are expected, nobody is told */
  pthread_mutex_t life_mu;  /* mark_failed (any thread) vs. the start of tcp_close */
  int nremote;              /* remote failures seen (the first is a WARN, others INFO) */
  int nthreads, per_thread; /* this rank's settings */
  int checksum;             /* TUTTI_CHECKSUM (an agreed setting: the same on every rank) */
  int64_t corrupt_piece;    /* TUTTI_TEST_CORRUPT_RECV: flip a bit of the Nth piece received */
  int64_t pieces_in;        /* pieces received on every connection (for corrupt_piece) */
  uint32_t nslots;
  size_t slot_bytes, fifo_bytes; /* fifo_bytes: what one socket holds in flight (0: unknown) */
  tcp_conn_t **send, **recv;     /* [nranks] */
  /* filled by the accept thread, guarded by mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int *rfds; /* [nranks][TCP_MAX_SOCKS] receive sockets, -1: none yet */
  int naccepted, init_done, nwarn;
  int live; /* post_connect done: the peers read our send sockets */
} tcp_state_t;

static inline const char *tcp_host_of(const tcp_state_t *st, int rank) {
  return st->comm->peers[rank].hostname;
}

/* tcp_setup.c */
tcp_state_t *tcp_state_of(struct ncclComm *comm);
void tcp_state_unlink(tcp_state_t *st);
ncclResult_t tcp_setup_listen(struct ncclComm *comm, char blob[TRANSPORT_BLOB_BYTES]);
ncclResult_t tcp_setup_connect(struct ncclComm *comm, int peer, const char *peer_blob, conn_t *send,
                               conn_t *recv);
ncclResult_t tcp_wait_receive_sockets(tcp_state_t *st);
/* NULL if a peer's blob is well formed, else why not. */
const char *tcp_blob_check(const tcp_blob_t *b);

#endif
