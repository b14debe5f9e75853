/* tutti-sim: one simulated collective, with the library's choices of algorithm (for auto), chunk
 * and slot size: the transports' geometry and the tuner (src/algos/tuner.c). */
#include "sim.h"

#include <stdio.h>
#include <string.h>

#include "algos/tuner.h"

/* As the transports' setup and agree_geometry (src/transport/transport.c) do: every connection
 * uses the smallest slot of the transports in use, a ring round (chunk) is at most half of the
 * shallowest FIFO of such slots. */
size_t sim_comm_slot(const sim_cluster_t *c) {
  size_t slot = 0;
  if (c->ppn > 1) slot = c->slot_intra;
  if (c->nodes > 1 && (!slot || c->slot_inter < slot)) slot = c->slot_inter;
  return slot ? slot : c->slot_intra;
}

static size_t comm_chunk_bytes(const sim_cluster_t *c) {
  size_t slot = sim_comm_slot(c), chunk = 0;
  int depth = 0;
  if (c->ppn > 1) chunk = c->slot_intra * (size_t)(c->fifo_intra / 2), depth = c->fifo_intra;
  if (c->nodes > 1 && (!chunk || slot * (size_t)(c->fifo_inter / 2) < chunk))
    chunk = slot * (size_t)(c->fifo_inter / 2);
  if (c->nodes > 1 && (!depth || c->fifo_inter < depth)) depth = c->fifo_inter;
  if (!chunk) chunk = slot * (size_t)(c->fifo_intra / 2), depth = c->fifo_intra;
  return chunk > slot * (size_t)(depth / 2) ? slot * (size_t)(depth / 2) : chunk;
}

/* What the library's tuner sees on this cluster, with the cluster's own constants as its
 * model (the library reads them from TUTTI_TUNER_{SHM,NET}_{LAT_US,GBPS} and
 * TUTTI_TUNER_{,SHM_}MSG_CPU_US; it counts the ranks and CPUs of its machine itself). */
static void tuner_inputs(const sim_cluster_t *c, tuner_model_t *m, tuner_topo_t *t) {
  m->shm = (tuner_level_t){c->intra_lat * 1e6, c->intra_bw / 1e9};
  m->net = (tuner_level_t){c->inter_lat * 1e6, c->inter_bw / 1e9};
  /* peer memory: one copy per byte where the FIFOs make two, after a handshake of a few hops */
  m->peer = (tuner_level_t){3 * c->intra_lat * 1e6, 2 * c->intra_bw / 1e9};
  /* read by copy: the same single copy, plus a system call per piece and peer */
  m->peer_read = (tuner_level_t){6 * c->intra_lat * 1e6, 1.5 * c->intra_bw / 1e9};
  /* push: the single copy of direct, each line written by one core only; handshake + final wait */
  m->peer_push = (tuner_level_t){2 * c->intra_lat * 1e6, 2 * c->intra_bw / 1e9};
  /* rendezvous: the single copy, after an announcement and before an answer */
  m->rdv = (tuner_level_t){2 * c->intra_lat * 1e6, 2 * c->intra_bw / 1e9};
  m->msg_cpu_us = c->msg_cpu * 1e6;
  m->shm_msg_cpu_us = sim_intra_msg_cpu(c) * 1e6;
  m->piece_us = c->overhead * 1e6;
  m->codec_ns = c->codec_ns;
  size_t oneshot_max = 16384; /* TUTTI_ONESHOT_MAX_BYTES */
  int machine_nodes = c->machine_nodes < c->nodes ? c->machine_nodes : c->nodes;
  *t = (tuner_topo_t){.nranks = sim_nranks(c),
                      .nhosts = c->nodes,
                      .local_size = c->ppn,
                      .hier_ok = c->nodes > 1,
                      .machine_ranks = c->cpus > 0 ? machine_nodes * c->ppn : 0,
                      .ncpu = c->cpus,
                      .host_blocks = c->nodes > 1,
                      .nics = c->nics,
                      .peer_mem = c->nodes == 1 && sim_nranks(c) > 1,
                      .peer_min_bytes = 16 * 1024, /* TUTTI_DIRECT_MIN_BYTES */
                      .peer_read = c->nodes == 1 && sim_nranks(c) > 1,
                      .peer_read_min_bytes = 256 * 1024,      /* TUTTI_CMA_MIN_BYTES */
                      .peer_read_copy_min_bytes = 128 * 1024, /* TUTTI_CMA_COPY_MIN_BYTES */
                      .push_min_bytes = 8 * 1024,             /* TUTTI_PUSH_MIN_BYTES */
                      .push_gather_min_bytes = 1 << 20,       /* TUTTI_PUSH_GATHER_MIN_BYTES */
                      .rdv_min_bytes = c->nodes == 1 ? c->rdv_intra : 0,
                      .slot_bytes = sim_comm_slot(c),
                      .chunk_bytes = comm_chunk_bytes(c),
                      .scratch_bytes = TUNER_SCRATCH_MAX_BYTES,
                      .oneshot_max_bytes = oneshot_max, /* scratch: init.c and plan.c */
                      .compress = c->compress};
}

/* The codec's CPU time in a compressed call (the schedules carry only its wire traffic): the
 * ranks that compress work at once; chier on one node compresses nothing. */
static double codec_seconds(const sim_cluster_t *c, algo_t algo) {
  if (!c->compress || (algo == ALGO_CHIER && c->nodes < 2)) return 0;
  return c->compress->passes * (double)c->compress->count * c->codec_ns * 1e-9;
}

/* The call's bytes as the library's tuner counts them (plan.c: count x element size, times the
 * ranks for all-gather and reduce-scatter): nccl-tests' size is the whole buffer, which for
 * gather, scatter and all-to-all is n blocks of one rank's count. */
static size_t tuner_bytes(coll_t coll, size_t bytes, int n) {
  int blocks = coll == COLL_GATHER || coll == COLL_SCATTER || coll == COLL_ALLTOALL;
  return blocks ? bytes / (size_t)n : bytes;
}

int sim_choose(const sim_cluster_t *c, coll_t coll, int algo, size_t bytes, algo_t *chosen,
               size_t *chunk_bytes) {
  tuner_model_t m;
  tuner_topo_t t;
  tuner_inputs(c, &m, &t);
  bytes = tuner_bytes(coll, bytes, sim_nranks(c));
  uint32_t mask = algo == SIM_ALGO_AUTO ? TUNER_ALL_ALGOS : 1u << algo;
  tuner_choice_t ch = tuner_choose(&m, &t, coll, bytes, mask, 0);
  if (ch.algo == ALGO_NUM) { /* the library then chooses among all (plan.c) */
    ch = tuner_choose(&m, &t, coll, bytes, TUNER_ALL_ALGOS, 0);
    if (ch.algo == ALGO_NUM) ch.algo = ALGO_P2P;
  }
  *chosen = ch.algo;
  *chunk_bytes = ch.chunk_bytes;
  return algo == SIM_ALGO_AUTO || ch.algo == (algo_t)algo ? 0 : -2;
}

int sim_run(const sim_cluster_t *c, coll_t coll, int algo_in, size_t bytes, int esize,
            sim_method_t method, size_t max_steps, sim_result_t *r) {
  memset(r, 0, sizeof *r);
  int n = sim_nranks(c);
  size_t es = (size_t)esize, slot = sim_comm_slot(c), chunk_bytes;
  algo_t algo;
  if (sim_choose(c, coll, algo_in, bytes, &algo, &chunk_bytes) != 0) {
    snprintf(r->msg, sizeof r->msg, "%s does not apply here (the library would run %s)",
             algo_name((algo_t)algo_in), algo_name(algo));
    return -2;
  }
  r->algo = algo;
  if (c->compress && esize != 4) {
    snprintf(r->msg, sizeof r->msg, "%s: a compressed all-reduce takes fp32 (4-byte) elements",
             algo_name(algo));
    return -2;
  }
  size_t chunk = chunk_bytes / es;
  if (slot >= es) chunk -= chunk % (slot / es);
  sched_args_t a = {.coll = coll,
                    .rank = 0,
                    .nranks = n,
                    .root = 0,
                    .count = sim_count_for(coll, bytes, esize, n),
                    .chunk = chunk ? chunk : 1,
                    .compress = c->compress};
  sim_lane_t *lanes;
  sim_sym_t sym;
  int nlanes, approx, rc;
  if (method != SIM_FULL) { /* pipeline rounds: a few simulated, the others one period each */
    rc = sim_run_rounds(c, &a, algo, esize, max_steps, r);
    r->algo = algo;
    if (rc != 1) return rc;
  }
  rc = sim_build(c, &a, algo, method, max_steps, &lanes, &nlanes, &sym, &approx, r->msg,
                 sizeof r->msg);
  if (rc != 0) return rc;
  if (sym.kind == SYM_NONE)
    snprintf(r->method, sizeof r->method, "full");
  else
    snprintf(r->method, sizeof r->method, "%s/%d%s", sym.kind == SYM_SHIFT ? "shift" : "xor",
             sym.period, approx ? "~" : "");
  r->simulated = sym.kind == SYM_NONE ? n : sym.period;
  rc = sim_des(c, lanes, nlanes, &sym, esize, r);
  sim_lanes_free(lanes, nlanes);
  if (rc == 0) r->time += codec_seconds(c, algo);
  /* the symmetry was checked on samples only; when an unsampled rank breaks it (a piece that
   * does not match, a rank left waiting), the automatic method falls back to the full one */
  if (rc != 0 && sym.kind != SYM_NONE && method == SIM_AUTO)
    return sim_run(c, coll, algo_in, bytes, esize, SIM_FULL, max_steps, r);
  return rc;
}
