/* Settings every rank of a communicator must agree on: those that change what a rank sends or
 * expects to receive (which algorithm a call uses, how a transport lays out its FIFO). Two
 * ranks that differ here would run different schedules against each other and return wrong
 * results or hang, so bootstrap compares them and fails init naming the setting and the ranks.
 *
 * The fingerprint is the list of such settings that are set, as "NAME=value;" in the fixed order
 * of the table below (raw values: "16K" and "16384" count as different, which errs on the safe
 * side). Settings only about this rank (timeouts, logging, waiting) are not in it.
 */
#include "agreed.h"

#include <stdio.h>
#include <string.h>

static const char *const agreed_names[] = {
    "ALGO",              /* algorithm mask: the tuner's choice */
    "ONESHOT_MAX_BYTES", /* one-shot versus the tuner's algorithm */
    "SCRATCH_MAX_BYTES", /* scratch-hungry algorithms versus the tuner's others */
    "TUNER_SHM_LAT_US",  /* cost model inputs: the tuner's choice */
    "TUNER_SHM_GBPS",
    "TUNER_NET_LAT_US",
    "TUNER_NET_GBPS",
    "TUNER_MSG_CPU_US",
    "TUNER_SHM_MSG_CPU_US",
    "TUNER_PEER_LAT_US", /* peer memory (direct) against the FIFOs */
    "TUNER_PEER_GBPS",
    "TUNER_PEER_READ_LAT_US", /* reading by copy (cma) against the FIFOs */
    "TUNER_PEER_READ_GBPS",
    "TUNER_PEER_PUSH_LAT_US", /* the push all-reduce against direct and the FIFOs */
    "TUNER_PEER_PUSH_GBPS",
    "TUNER_RDV_LAT_US", /* the p2p lanes' rendezvous against direct and cma */
    "TUNER_RDV_GBPS",
    "TUNER_PIECE_US",
    "TUNER_CODEC_NS", /* compressed calls: which lossy entry */
    "SHM_DISABLE",    /* which transport connects a pair */
    "SHM_SLOT_BYTES", /* the shared FIFO's layout */
    "SHM_NSLOTS",
    "SHM_RDV_MIN", /* which p2p steps go by rendezvous (shm_rdv.c) */
    "DIRECT",      /* the direct all-reduce path */
    "DIRECT_MIN_BYTES",
    "CMA_MIN_BYTES", /* the cma path (CMA itself is agreed at setup, shm.c) */
    "CMA_COPY_MIN_BYTES",
    "PUSH_MIN_BYTES", /* the push all-reduce (algos/push.c) */
    "PUSH_GATHER_MIN_BYTES",
    "ADAPT", /* the measured choice between the FIFOs and cma (adapt.h) */
    "ADAPT_MIN_BYTES",
    "CHECK_COLL", /* an extra exchange before each group's collectives */
    "CHECKSUM",   /* a CRC32C on every piece the tcp transport sends */
};
#define AGREED_N (sizeof(agreed_names) / sizeof(agreed_names[0]))

void agreed_settings_format(char *out, size_t len) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < AGREED_N; i++) {
    const char *v = tutti_getenv(agreed_names[i]);
    if (!v) continue;
    int n = snprintf(out + used, len - used, "%s=%.40s;", agreed_names[i], v);
    if (n < 0 || (size_t)n >= len - used) break; /* full: the prefix still compares */
    used += (size_t)n;
  }
}

/* The value of `name` in a fingerprint, into val ("(not set)" when absent). */
static void agreed_lookup(const char *fp, const char *name, char *val, size_t len) {
  size_t nl = strlen(name);
  snprintf(val, len, "(not set)");
  for (const char *p = fp; p && *p;) {
    const char *end = strchr(p, ';');
    if (!end) break;
    if (strncmp(p, name, nl) == 0 && p[nl] == '=') {
      snprintf(val, len, "%.*s", (int)(end - p - nl - 1), p + nl + 1);
      return;
    }
    p = end + 1;
  }
}

int agreed_settings_explain(const char *fp_a, int rank_a, const char *host_a, const char *fp_b,
                            int rank_b, const char *host_b, char *msg, size_t len) {
  if (strcmp(fp_a, fp_b) == 0) return 0;
  for (size_t i = 0; i < AGREED_N; i++) {
    char va[48], vb[48];
    agreed_lookup(fp_a, agreed_names[i], va, sizeof(va));
    agreed_lookup(fp_b, agreed_names[i], vb, sizeof(vb));
    if (strcmp(va, vb) == 0) continue;
    snprintf(msg, len,
             "setting TUTTI_%s differs between ranks: rank %d on host %s has %s, rank %d "
             "on host %s has %s; it changes what ranks send, so every rank must be given the "
             "same value (or none)",
             agreed_names[i], rank_a, host_a, va, rank_b, host_b, vb);
    return 1;
  }
  snprintf(msg, len,
           "settings differ between ranks: rank %d on host %s has \"%s\", rank %d on "
           "host %s has \"%s\"",
           rank_a, host_a, fp_a, rank_b, host_b, fp_b);
  return 1;
}
