/* The cost model's shared formulas (cost.h); each algorithm's own formula is in its file. */
#include "algos/cost.h"

int cost_is_pow2(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}

double cost_pieces(double bytes, double unit) {
  return unit > 0 && bytes > unit ? (double)(size_t)(bytes / unit + 0.999999) : 1;
}

double cost_cpu_share(const tuner_topo_t *t) {
  if (t->machine_ranks <= 0 || t->ncpu <= 0) return 0;
  return t->machine_ranks > t->ncpu ? (double)t->machine_ranks / t->ncpu : 1.0;
}

double cost_q(const tuner_model_t *m, const tuner_topo_t *t, const tuner_level_t *l, double hops,
              double q, double g, double bytes) {
  double us = hops * l->lat_us + bytes / (l->gbps * 1e3); /* GB/s = 1e3 bytes per microsecond */
  double share = cost_cpu_share(t);
  if (share > 0) {
    double c = l == &m->net ? g * m->msg_cpu_us + (1 - g) * m->shm_msg_cpu_us : m->shm_msg_cpu_us;
    double cpu = hops * q * c * share;
    if (cpu > us) us = cpu;
  }
  if (m->piece_us > 0) {
    double engine = m->piece_us * (t->slot_bytes ? bytes / (double)t->slot_bytes : 0);
    if (l == &m->net) { /* the NIC sends a piece while the engine cuts the next */
      double wire = bytes / (l->gbps * 1e3);
      engine = engine > wire ? engine - wire : 0;
    }
    us += m->piece_us * hops * q + engine;
  }
  return us;
}

double cost(const tuner_model_t *m, const tuner_topo_t *t, const tuner_level_t *l, double hops,
            double bytes) {
  return cost_q(m, t, l, hops, 1, 1, bytes);
}

const tuner_level_t *cost_level(const tuner_model_t *m, const tuner_topo_t *t) {
  return t->nhosts > 1 ? &m->net : &m->shm;
}

double cost_ring_net_share(const tuner_topo_t *t) {
  if (t->nhosts < 2) return 0;
  return t->host_blocks || t->ring_grouped ? (double)t->nhosts / t->nranks : 1;
}

double cost_peers_net_share(const tuner_topo_t *t) {
  if (t->nhosts < 2) return 0;
  return t->nranks > 1 ? (double)(t->nranks - t->local_size) / (t->nranks - 1) : 0;
}

double cost_nic_share(const tuner_topo_t *t) {
  int nics = t->nics > 1 ? t->nics : 1;
  if (t->nhosts < 2 || t->local_size < 2) return 1.0;
  return (double)((t->local_size + nics - 1) / nics);
}

double cost_peer(const tuner_model_t *m, const tuner_level_t *l, int n, double moved) {
  return l->lat_us + moved / (l->gbps * 1e3) + 2.0 * (n - 1) * m->piece_us;
}

double cost_ring_steps(const tuner_model_t *m, const tuner_topo_t *t, double steps, double c,
                       double g, double s) {
  double bn = m->net.gbps * 1e3, bs = m->shm.gbps * 1e3; /* bytes per microsecond */
  double pieces = cost_pieces(c, (double)t->slot_bytes), p = c / pieces;
  double step = g * (m->net.lat_us + p / bn) + (1 - g) * (m->shm.lat_us + p / bs) + m->piece_us;
  if (g > 0) {
    double nic = s * c / bn, engine = pieces * m->piece_us;
    if (nic > step) step = nic;
    if (engine > step) step = engine;
  }
  if (g < 1 && c / bs + pieces * m->piece_us > step) step = c / bs + pieces * m->piece_us;
  double cpu = (g * m->msg_cpu_us + (1 - g) * m->shm_msg_cpu_us) * cost_cpu_share(t);
  if (cpu > step) step = cpu;
  return steps * step;
}
