/* The cost model's vocabulary: what the tuner knows about the machine and the communicator, and
 * the formulas every algorithm's cost function is written with (registry.h). Pure functions of
 * their arguments, so tests check them against the closed forms.
 *
 * An algorithm's time is   hops x latency + bytes on the busiest link / bandwidth   at the
 * transport level it runs on (shared memory inside a host; the network as soon as a flat
 * algorithm spans hosts, because its slowest hop then crosses one; peer memory for algorithms
 * that read other ranks' buffers in place), or, when the machine's CPUs are the bottleneck,
 * the CPU time of the messages its ranks send: hops x q x R x c / C if that is longer, with R
 * ranks on the machine (all its hosts: containers and network namespaces share the kernel's C
 * CPUs), q the messages per rank and hop and c the CPU time of one message: c_net
 * (TUTTI_TUNER_MSG_CPU_US) for one that crosses the network, c_shm (TUTTI_TUNER_SHM_MSG_CPU_US)
 * for one through shared memory, mixed by the share g of the algorithm's messages that leave
 * the host. A rank's own messages go out one after another from its thread, so the CPU term
 * is hops x q x c x max(1, R/C). Each piece (slot) a rank sends also costs the engine piece_us:
 * (hops x q + bytes / slot) x piece_us is added (0 by default in the library; tutti-sim passes
 * its --overhead-us); on the network only the part of bytes / slot x piece_us that the wire
 * time does not hide (the NIC sends one piece while the engine cuts the next).
 */
#ifndef TUTTI_COST_H_
#define TUTTI_COST_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tuner_level { /* one transport level: a hop's latency and a link's bandwidth */
  double lat_us, gbps;       /* gbps: GB/s (1e9 bytes per second) */
} tuner_level_t;

typedef struct tuner_model {
  tuner_level_t shm, net; /* inside a host, across hosts */
  double msg_cpu_us;     /* CPU time of one message across hosts (send, kernel, wake-up, receive) */
  double shm_msg_cpu_us; /* the same for a message through shared memory */
  tuner_level_t peer;    /* peer memory: lat_us the handshake and final wait of one call,
                            gbps the bandwidth of one rank reading and writing in place */
  tuner_level_t peer_read; /* peer memory read by copy (CMA): lat_us the handshake, final wait
                              and system calls of one call, gbps of one rank's reads + writes */
  tuner_level_t peer_push; /* the push all-reduce on mapped peer memory: lat_us the handshake
                              and final wait of one call, gbps of one rank's reads + writes */
  tuner_level_t rdv;       /* a whole step by rendezvous on one host (the receiver copies from
                              the sender's buffer): lat_us the announcement and the answer,
                              gbps of one rank's reads + writes */
  double piece_us;         /* engine time of one piece (slot) a rank sends (0: none) */
  double codec_ns;         /* CPU time of compression per element and pass over the buffer
                              (encode, select, decode, products), nanoseconds */
} tuner_model_t;

/* The compressor of a tuttiAllReduceCompressed call as the lossy entries (ALGO_LOSSY,
 * compressed.c) see it: the bytes of its messages among all ranks (flat) and among the hosts'
 * lowest ranks (lead), and its CPU work. Filled by src/compress (compress_tuner_view); every
 * exact call has none (tuner_topo_t.compress NULL). */
typedef struct tuner_compress {
  int kind;                /* tuttiCompressKind_t: bf16, fp16, int8 (block path), topk, powersgd */
  int hier;                /* 0: flat only, 1: hierarchical only, 2: the tuner chooses */
  size_t count;            /* fp32 elements of the buffer */
  size_t flat[2], lead[2]; /* message bytes: block [0] one block message, all pieces (header +
                              payload); topk [0] one rank's pairs; powersgd [0] P with the exact
                              tensors, [1] Q (fp32 all-reduces); unused 0 */
  double passes;           /* CPU passes over the buffer per call */
} tuner_compress_t;

typedef struct tuner_topo {                /* what the communicator knows, the same on every rank */
  int nranks, nhosts, local_size, hier_ok; /* local_size: of the largest host */
  int machine_ranks, ncpu; /* the machine (kernel) with the most ranks per CPU: its ranks and
                              CPUs; 0: unknown */
  int host_blocks;         /* 1: rank r is on host r / local_size, every host alike */
  int ring_grouped;        /* 1: the ring order enters each host once (host_blocks implies it) */
  int peer_mem;            /* 1: every pair of ranks is connected by a transport with the
                              peer-memory capability (one host, shared memory) */
  int peer_read;           /* 1: and every rank may read every other rank's memory by copy
                              (transport mem_read, agreed by all ranks at setup) */
  size_t slot_bytes, chunk_bytes, oneshot_max_bytes;
  size_t scratch_bytes;       /* BUF_SCRATCH a call may use (the communicator's grows on demand
                                 up to TUTTI_SCRATCH_MAX_BYTES); beyond it only with may_alloc */
  size_t peer_min_bytes;      /* smallest call that may try peer memory (TUTTI_DIRECT_MIN_BYTES) */
  size_t peer_read_min_bytes; /* the same for reading by copy (TUTTI_CMA_MIN_BYTES) */
  size_t peer_read_copy_min_bytes; /* and for the collectives that only copy: broadcast,
                                      gather, scatter, all-to-all (TUTTI_CMA_COPY_MIN_BYTES) */
  size_t push_min_bytes;           /* the same for the push all-reduce (TUTTI_PUSH_MIN_BYTES) */
  size_t push_gather_min_bytes;    /* and for the push all-gather (TUTTI_PUSH_GATHER_MIN_BYTES) */
  size_t rdv_min_bytes; /* one host: every connection takes a whole step (the p2p lanes' blocks)
                           of this many bytes or more by rendezvous (TUTTI_SHM_RDV_MIN); 0 none */
  int may_alloc;        /* 1: a schedule may use more scratch than scratch_bytes (a temporary) */
  int nics;             /* NICs per host, local rank l on NIC l mod nics (0: one) */
  const tuner_compress_t *compress; /* the call's compressor (tuttiAllReduceCompressed): only
                                       lossy entries apply; NULL (every exact call): only the
                                       others */
} tuner_topo_t;

/* Reducing exchanges (rhd, rd) copy what they send into the FIFO in one step and reduce what
 * they receive in another, where a ring step reduces straight into the outgoing slot: 1.5x the
 * memory traffic per byte (docs/perf.md, "exchange factor"). */
#define COST_XCHG 1.5

/* time = hops x latency + bytes / bandwidth at level l, or the CPU time of the q messages per
 * rank that every rank of the machine sends per hop when that is longer; a share g of those
 * messages crosses the network (0 at the shm level). */
double cost_q(const tuner_model_t *m, const tuner_topo_t *t, const tuner_level_t *l, double hops,
              double q, double g, double bytes);
/* One message per rank and hop, all of them at level l's CPU cost. */
double cost(const tuner_model_t *m, const tuner_topo_t *t, const tuner_level_t *l, double hops,
            double bytes);
/* The level a flat algorithm runs at: the network as soon as it spans hosts. */
const tuner_level_t *cost_level(const tuner_model_t *m, const tuner_topo_t *t);
/* The share of a flat algorithm's messages that leave the host: ring-like (each rank sends to
 * its neighbour: H of the n links cross hosts when hosts hold blocks of ranks or the ring order
 * enters each host once, 1 when the placement is unknown) or to every peer ((n-m)/(n-1) of them).
 */
double cost_ring_net_share(const tuner_topo_t *t);
double cost_peers_net_share(const tuner_topo_t *t);
/* Ranks of one host whose exchange steps cross the network at the same time share its NICs:
 * ceil(local_size / nics) of them on the busiest NIC (1 on one host). */
double cost_nic_share(const tuner_topo_t *t);
int cost_is_pow2(int n);
/* ceil(bytes / unit), at least 1 (1 where unit is not positive): the pieces, chunks or rounds
 * a step of `bytes` is cut into. */
double cost_pieces(double bytes, double unit);
/* The factor on a message's CPU time where the machine's CPUs are shared: max(1, R / C) for R
 * ranks on C CPUs; 0 where they are unknown (no CPU model). */
double cost_cpu_share(const tuner_topo_t *t);
/* An algorithm on peer memory (one host) at level l: its handshake and final wait, the bytes
 * one rank moves, and the engine time of the 2(n-1) notes each rank sends (its progress to
 * every peer, then done). */
double cost_peer(const tuner_model_t *m, const tuner_level_t *l, int n, double moved);
/* Steps of a ring in which every rank sends c bytes per step to its neighbour and forwards
 * what it receives piece by piece (the pieces of one step pipelined with those of the next
 * around the ring): a share g of the hops cross the network, s flows through the busiest NIC.
 * Each step takes the longest of the busiest NIC's transfer (s c / b_net, or its rank's
 * per-piece time if longer), a shared-memory hop's copy by its sender (c / b_shm + the
 * per-piece time: the sender copies), a piece's way across the average hop (a piece's latency
 * and transfer at g net + (1 - g) shm, and its per-piece time) and the CPU time of its
 * messages (cost_q's CPU model). */
double cost_ring_steps(const tuner_model_t *m, const tuner_topo_t *t, double steps, double c,
                       double g, double s);

#ifdef __cplusplus
}
#endif
#endif
