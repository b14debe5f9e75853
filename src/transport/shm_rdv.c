/* Shared-memory transport: large steps by rendezvous, one copy from the sender's buffer into the
 * receiver's (the FIFO path makes two: into a slot, and out of it).
 *
 * Which steps. The engine announces every STEP_WHOLE step (ncclSend / ncclRecv; all-to-all,
 * gather and scatter through the p2p lanes: a plain send from the user's buffer matched by a
 * plain store into the peer's) of at least conn->large_bytes on both ends, and both ends count
 * such steps alike (transport.h). large_bytes is TUTTI_SHM_RDV_MIN (agreed by all ranks,
 * agreed.c) for two ranks of one process, or for two processes where every rank can read its
 * local peers' memory (comm->peer_read, shm_peer.c); else 0, none.
 *
 * Protocol for one large step of one direction (one FIFO):
 *   sender    posts a header message {where its bytes lie: pid, address, and the shared region
 *             they lie in, if any (memreg.h); how many} flagged SHM_LARGE in its slot header, or
 *             {address 0} when the bytes are not in a buffer as they go (the engine computes
 *             them: pieces), and then waits for the answer, the FIFO's large_ack naming the
 *             header's position.
 *   receiver  takes the header; with an address and a buffer to store into, it copies the
 *             bytes straight into that buffer: through its mapping of the sender's region (an
 *             ncclMemAlloc region, or tutti-run's shared heap: cached, memreg.c) with streaming
 *             stores from TUTTI_NT_THRESHOLD, from the address itself for a sender in its own
 *             process, else in one process_vm_readv. It then answers (done, or pieces where
 *             either end has no buffer) and releases the header. The answer is published before
 *             the release, so a sender woken by the release (shm_wait sleeps on the tail) finds
 *             it.
 *   sender    "done" ends the step: its buffer may change from then on; "pieces" sends the
 *             step through the FIFO like any other.
 * The receiver reads, rather than the sender writing: the bytes then land in the cache of the
 * core that uses them next, and a rank with several large receives (an all-to-all) copies them
 * all itself, in parallel with its peers. The kernel's copy (process_vm_readv) has no streaming
 * stores: past the caches it reads every destination line before writing it, which a mapping
 * copied with streaming stores does not (docs/perf-p2p.md). A header where a piece
 * is expected, a piece where a header is, or a header for another length means the ranks called
 * different counts: the end stops (shm_end_break) naming both ranks. A read that fails because the
 * sender is gone waits (the engine names the dead rank); any other failed read (memory the kernel
 * will not pin, e.g. a driver's mapping) answers "pieces": the FIFO takes the step.
 */
#include <errno.h>
#include <string.h>

#include "copy.h"
#include "shm.h"
#include "tsan.h"

TUTTI_PARAM(ShmRdvMin, "SHM_RDV_MIN", 16 * 1024) /* large steps from this many bytes; 0: none */

/* Test hook, the fallbacks to pieces: 1, a receiver answers "pieces" (as one whose step has no
 * buffer to store into); 2, a sender announces pieces (as one whose bytes are computed); 3, a
 * receiver's process_vm_readv fails (as one of memory the kernel will not pin: EFAULT). */
TUTTI_PARAM(TestShmRdvDecline, "TEST_SHM_RDV_DECLINE", 0)

#define LARGE_MAGIC 0x746865206c617267ull
#define ACK_PIECES 1u /* large_ack = (header's position) << 1 | ACK_PIECES when pieces follow */

typedef struct large_msg { /* a large step's header, inline in its slot header */
  uint64_t magic;
  shm_handle_t h; /* where the step's bytes lie (h.addr 0: they come as pieces), how many */
} large_msg_t;
_Static_assert(sizeof(large_msg_t) <= SHM_INLINE, "a large step's header goes inline");

void shm_large_agree(struct ncclComm *comm) {
  int64_t min = tutti_param_ShmRdvMin();
  for (int p = 0; p < comm->nranks; p++) {
    conn_t *s = &comm->send_conn[p], *r = &comm->recv_conn[p];
    if (p == comm->rank || s->transport != &shm_transport) continue;
    int one_process = comm->peers[p].pid == comm->peers[comm->rank].pid;
    s->large_bytes = r->large_bytes = min > 0 && (one_process || comm->peer_read) ? (size_t)min : 0;
  }
}

int shm_send_large(conn_t *c, const void *buf, size_t bytes) {
  shm_end_t *e = c->priv;
  if (!e->large_wait) {
    large_msg_t *m = shm_send_slot(c, sizeof(*m));
    if (!m) return 0;
    if (tutti_param_TestShmRdvDecline() == 2) buf = NULL;
    m->magic = LARGE_MAGIC;
    shm_handle_of(buf, bytes, &m->h);
    TUTTI_HB_RELEASE(buf); /* the receiver's read of buf comes after what we wrote (tsan.h) */
    shm_post(c, sizeof(*m), SHM_LARGE);
    if (!buf) return LARGE_PIECES;
    e->large_wait = e->pos, e->large_buf = buf;
  }
  uint64_t ack = __atomic_load_n(&e->ctrl->large_ack, __ATOMIC_ACQUIRE);
  if (ack >> 1 != e->large_wait) {
    shm_end_reread(e); /* shm_wait then sleeps until the receiver releases the header */
    return 0;
  }
  e->large_wait = 0;
  TUTTI_HB_ACQUIRE(e->large_buf); /* and our next write after its read */
  INFO(SUB_SHM, "rank %d: %zu bytes to rank %d %s", e->comm->rank, bytes, e->peer,
       (ack & ACK_PIECES) ? "go as pieces (the receiver asked for them)" : "read whole");
  return (ack & ACK_PIECES) ? LARGE_PIECES : LARGE_DONE;
}

int shm_recv_large(conn_t *c, void *buf, size_t bytes) {
  shm_end_t *e = c->priv;
  size_t n;
  uint32_t flags;
  const void *slot = shm_peek(c, &n, &flags);
  if (!slot) return 0;
  large_msg_t m = {0};
  if ((flags & SHM_LARGE) && n == sizeof(m)) memcpy(&m, slot, sizeof(m));
  if (m.magic != LARGE_MAGIC) {
    shm_end_break(e,
                  "rank %d sent a piece of %zu bytes where rank %d expected the header of a "
                  "large message of %zu bytes: ranks called different counts, types or "
                  "collectives",
                  e->peer, n, e->comm->rank, bytes);
    return 0;
  }
  if (m.h.bytes != bytes) {
    shm_end_break(e,
                  "rank %d sends %llu bytes in a step where rank %d receives %zu: ranks called "
                  "different counts or types",
                  e->peer, (unsigned long long)m.h.bytes, e->comm->rank, bytes);
    return 0;
  }
  if (tutti_param_TestShmRdvDecline() == 1) buf = NULL;
  int pieces = !buf || !m.h.addr, self = m.h.pid == (int32_t)tutti_self_pid();
  /* ranks that are threads: the buffer's address is the key both name alike (tsan.h) */
  const void *key = self ? (const void *)(uintptr_t)m.h.addr : NULL;
  TUTTI_HB_ACQUIRE(key);
  /* loaded in place where it can be (this process, a shared region mapped here: cached); a
   * mapping that fails leaves the read by copy, which needs none */
  const char *src = NULL;
  if (!pieces && shm_handle_map(e->comm, e->peer, &m.h, &src) != ncclSuccess) src = NULL;
  if (src) {
    if (bytes >= e->comm->nt_threshold)
      copy_stream(buf, src, bytes);
    else
      copy_bytes(buf, src, bytes);
  } else if (!pieces) {
    int err = tutti_param_TestShmRdvDecline() == 3 ? EFAULT
                                                   : shm_cma_move(m.h.pid, buf, m.h.addr, bytes, 0);
    if (err && tutti_pid_gone(m.h.pid)) return 0; /* the engine names the dead rank */
    if (err) {
      INFO(SUB_SHM, "rank %d: process_vm_readv of %zu bytes from rank %d failed (%s): as pieces",
           e->comm->rank, bytes, e->peer, strerror(err));
      pieces = 1;
    }
  }
  INFO(SUB_SHM, "rank %d: %zu bytes from rank %d %s", e->comm->rank, bytes, e->peer,
       src && self ? "read whole (rendezvous: this process)"
       : src       ? "read whole (rendezvous: mapped)"
       : !pieces   ? "read whole (rendezvous: process_vm_readv)"
       : !m.h.addr ? "as pieces (the sender has them in no buffer)"
       : buf       ? "as pieces (the read failed)"
                   : "as pieces (no buffer here to read them into)");
  TUTTI_HB_RELEASE(key);
  if (m.h.addr) __atomic_store_n(&e->ctrl->large_ack, (e->pos + 1) << 1 | pieces, __ATOMIC_RELEASE);
  shm_recv_done(c);
  return pieces ? LARGE_PIECES : LARGE_DONE;
}
