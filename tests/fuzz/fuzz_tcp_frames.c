/* Fuzz target: what the tcp transport reads from a peer (src/transport/tcp.c, tcp_setup.c).
 *
 * The first byte picks a reader, the rest is what arrives:
 *   0  the data port's hellos (port_hello): records of sizeof(tcp_hello_t), as the acceptor
 *      hands them over (job secret, communicator hash, ranks, socket index)
 *   1  a receive connection's pieces into the staging slot (recv_slot): [u8 nsocks-1, bit 2:
 *      TUTTI_CHECKSUM, bit 3: the sender stays (its sockets are not shut down: no EOF)]
 *      [u16 slot bytes], then per socket [u16 length][bytes]: headers (data, goodbye, abort
 *      with its reason) and payloads, then EOF
 *   2  the same read straight into a buffer of a given size (recv_into), as the engine does
 *      for pieces that need no reduction
 * tcp.c and tcp_setup.c are compiled into this file so that their static readers run as the
 * engine runs them, on real sockets (socketpairs). */
#include <sys/socket.h>

#include "../../src/transport/tcp.c"
#include "../../src/transport/tcp_setup.c"
#include "fuzz.h"

#define FUZZ_NRANKS 4

typedef struct fuzz_comm {
  struct ncclComm comm;
  peer_info_t peers[FUZZ_NRANKS];
  tcp_state_t st;
} fuzz_comm_t;

static void fuzz_comm_init(fuzz_comm_t *f) {
  memset(f, 0, sizeof(*f));
  f->comm.rank = 0, f->comm.nranks = FUZZ_NRANKS, f->comm.peers = f->peers;
  f->comm.id_hash = 0x1d1d1d1d2e2e2e2eull;
  for (int i = 0; i < 16; i++) f->comm.secret[i] = (unsigned char)(0xa0 + i);
  for (int i = 0; i < FUZZ_NRANKS; i++) snprintf(f->peers[i].hostname, HOST_NAME_BYTES, "h%d", i);
  f->st.comm = &f->comm;
  pthread_mutex_init(&f->st.mu, NULL);
  pthread_mutex_init(&f->st.life_mu, NULL);
  pthread_cond_init(&f->st.cv, NULL);
}

static void fuzz_hellos(fuzz_in_t *in) {
  fuzz_comm_t f;
  fuzz_comm_init(&f);
  int rfds[FUZZ_NRANKS * TCP_MAX_SOCKS];
  for (size_t i = 0; i < FUZZ_NRANKS * TCP_MAX_SOCKS; i++) rfds[i] = -1;
  f.st.rfds = rfds;
  while (in->left >= sizeof(tcp_hello_t)) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) break;
    if (port_hello(&f.st, sv[0], in->p)) close(sv[0]); /* refused: the acceptor closes it */
    close(sv[1]);
    in->p += sizeof(tcp_hello_t), in->left -= sizeof(tcp_hello_t);
  }
  for (size_t i = 0; i < FUZZ_NRANKS * TCP_MAX_SOCKS; i++)
    if (rfds[i] >= 0) close(rfds[i]);
}

/* Reads pieces until the connection ends; each read is bounded by what the input holds. */
static void read_pieces(conn_t *conn, tcp_conn_t *c, int into, size_t want) {
  char *buf = malloc(want ? want : 1);
  for (int piece = 0; piece < 256 && !c->failed && !c->byes; piece++) {
    if (!into) {
      size_t bytes = 0;
      if (!tcp_recv_slot(conn, &bytes)) break;
      tcp_recv_done(conn);
      continue;
    }
    size_t got = 0;
    for (int tries = 0; got < want && tries < 4096; tries++) {
      size_t k = tcp_recv_into(conn, buf + got, want - got);
      if (k == 0) break;
      got += k;
    }
    if (got < want) break;
  }
  free(buf);
}

static void fuzz_pieces(fuzz_in_t *in, int into) {
  fuzz_comm_t f;
  fuzz_comm_init(&f);
  uint32_t geometry = fuzz_take(in, 1);
  int nsocks = 1 + (int)(geometry % 4), checksum = (int)(geometry >> 2) & 1;
  int stays = (int)(geometry >> 3) & 1;
  size_t slot = 1 + fuzz_take(in, 2) % 8192;
  tcp_conn_t *c = calloc(1, sizeof(*c));
  *c = (tcp_conn_t){
      .st = &f.st, .peer = 1, .nsocks = nsocks, .slot_bytes = slot, .checksum = checksum};
  c->slots = malloc(slot);
  int peer[4];
  for (int k = 0; k < TCP_MAX_SOCKS; k++) c->fds[k] = -1;
  for (int k = 0; k < nsocks; k++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) sv[0] = sv[1] = -1;
    c->fds[k] = sv[0], peer[k] = sv[1];
    size_t want = fuzz_take(in, 2), n = TUTTI_MIN(want, in->left); /* TUTTI_MIN evaluates twice */
    if (n && sv[1] >= 0 && write(sv[1], in->p, n) < 0) n = 0;
    in->p += n, in->left -= n;
    if (sv[1] >= 0 && !stays) shutdown(sv[1], SHUT_WR);
  }
  conn_t conn = {.peer = 1, .slot_bytes = slot, .priv = c};
  read_pieces(&conn, c, into, slot);
  for (int k = 0; k < nsocks; k++) {
    if (c->fds[k] >= 0) close(c->fds[k]);
    if (peer[k] >= 0) close(peer[k]);
  }
  free(c->slots);
  free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  fuzz_in_t in = {data, size};
  int mode = (int)(fuzz_take(&in, 1) % 3);
  if (mode == 0)
    fuzz_hellos(&in);
  else
    fuzz_pieces(&in, mode == 2);
  return 0;
}

/* ---- seeds: what open_sockets, tcp_send_from, send_bye and send_abort_notice write ---- */

static uint8_t *put_stream(uint8_t *p, const void *bytes, size_t n) {
  uint16_t len = (uint16_t)n;
  memcpy(p, &len, 2);
  memcpy(p + 2, bytes, n);
  return p + 2 + n;
}

void fuzz_seeds(fuzz_put_fn put, void *arg) {
  fuzz_comm_t f;
  fuzz_comm_init(&f);
  uint8_t buf[1024], *p = buf;
  *p++ = 0;
  for (int k = 0; k < 2; k++) {
    tcp_hello_t h = {.magic = TCP_HELLO_MAGIC,
                     .id_hash = f.comm.id_hash,
                     .from = 1 + k,
                     .to = 0,
                     .sock = k,
                     .nsocks = 2};
    memcpy(h.secret, f.comm.secret, 16);
    memcpy(p, &h, sizeof(h)), p += sizeof(h);
  }
  put(arg, "hellos", buf, (size_t)(p - buf));
  for (int into = 0; into < 2; into++) { /* 2 sockets, slot 64: 3 pieces of 64, then goodbye */
    uint8_t s0[256], s1[256], *a = s0, *b = s1;
    for (int piece = 0; piece < 3; piece++) {
      uint8_t payload[64];
      memset(payload, piece, 64);
      tcp_hdr_t h = {.kind = HDR_DATA, .bytes = 64, .crc = crc32c(0, payload, 64)};
      uint8_t **q = piece % 2 ? &b : &a;
      memcpy(*q, &h, sizeof(h)), *q += sizeof(h);
      memset(*q, piece, 64), *q += 64;
    }
    tcp_hdr_t bye = {.kind = HDR_BYE, .bytes = 0};
    memcpy(b, &bye, sizeof(bye)), b += sizeof(bye);
    p = buf;
    *p++ = (uint8_t)(1 + into), *p++ = (uint8_t)(1 | into << 2); /* 2 sockets; into: checksum */
    uint16_t slot = 63;                                          /* the target reads 1 + this */
    memcpy(p, &slot, 2), p += 2;
    p = put_stream(p, s0, (size_t)(a - s0));
    p = put_stream(p, s1, (size_t)(b - s1));
    put(arg, into ? "pieces-into" : "pieces-slot", buf, (size_t)(p - buf));
  }
  const char why[] = "rank 2 on host h1 aborted: ncclCommAbort was called";
  uint8_t s[128], *q = s;
  tcp_hdr_t ab = {.kind = HDR_ABORT, .bytes = sizeof(why) - 1};
  memcpy(q, &ab, sizeof(ab)), q += sizeof(ab);
  memcpy(q, why, sizeof(why) - 1), q += sizeof(why) - 1;
  p = buf;
  *p++ = 1, *p++ = 0;
  uint16_t slot = 4095;
  memcpy(p, &slot, 2), p += 2;
  p = put_stream(p, s, (size_t)(q - s));
  put(arg, "abort-notice", buf, (size_t)(p - buf));
  /* The notice cut short by a sender that is still there (stopped, not dead): its header
   * promises more reason than comes and no EOF ends the wait. The reader gives up after
   * REASON_WAIT_NS with what came; a blocking read of the rest would hang here. */
  ab.bytes = 200;
  memcpy(s, &ab, sizeof(ab));
  p = buf;
  *p++ = 1, *p++ = 1 << 3;
  memcpy(p, &slot, 2), p += 2;
  p = put_stream(p, s, sizeof(ab) + 20);
  put(arg, "abort-notice-cut", buf, (size_t)(p - buf));
}
