/* Fuzz target: the readers of settings text (src/param.c, agreed.c, the tuner's TUTTI_ALGO,
 * the compressor spec, collective names).
 *
 * Input: [u8 reader] then NUL-separated strings (a missing one is ""):
 *   0  a number: tutti_parse_int, tutti_parse_double, and tutti_setting_int through the
 *      environment (TUTTI_FUZZ_N, range [-5, 1G])
 *   1  an interface / HCA list and a name (NCCL_SOCKET_IFNAME, NCCL_IB_HCA syntax:
 *      "^=eth0,ib0:1"), tutti_name_list_matches, plus every token of tutti_list_next
 *   2  TUTTI_ALGO (tuner_parse_algo): "allreduce:ring,tree;broadcast:^chain"
 *   3  a compressor spec (tuttiCompressorParse): "topk:0.01,hier"
 *   4  two ranks' agreed-settings fingerprints, as hellos carry them (agreed_settings_explain)
 *   5  a collective name (coll_parse, tutti-sched and tutti-sim's --coll)
 * Every reader must refuse bad text with a reason and never read past the string. */
#include <stdio.h>
#include <string.h>

#include "agreed.h"
#include "algos/schedule.h"
#include "algos/tuner.h"
#include "core.h"
#include "fuzz.h"
#include "tutti.h"

#define FUZZ_STRINGS 2

static void split(const uint8_t *data, size_t size, char *s[FUZZ_STRINGS]) {
  size_t at = 0;
  for (int i = 0; i < FUZZ_STRINGS; i++) {
    size_t n = 0;
    while (at + n < size && data[at + n]) n++;
    s[i] = malloc(n + 1); /* exactly n + 1: a read past the NUL is an ASan report */
    memcpy(s[i], data + at, n);
    s[i][n] = '\0';
    at = TUTTI_MIN(size, at + n + 1);
  }
}

static void read_number(const char *s) {
  int64_t v;
  double d;
  tutti_parse_int(s, &v);
  tutti_parse_double(s, &d);
  if (*s && setenv("TUTTI_FUZZ_N", s, 1) == 0) {
    tutti_setting_int("FUZZ_N", 7, -5, 1ll << 30, &v);
    unsetenv("TUTTI_FUZZ_N");
  }
}

static void read_list(const char *spec, const char *name) {
  tutti_name_list_matches(spec, name);
  char tok[64];
  const char *cur = spec;
  for (int i = 0; i < 1000 && tutti_list_next(&cur, tok, sizeof(tok)); i++) {
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  if (size < 1) return 0;
  char *s[FUZZ_STRINGS];
  split(data + 1, size - 1, s);
  uint32_t masks[COLL_NUM];
  tuttiCompressorConfig_t cfg;
  char msg[512];
  switch (data[0] % 6) {
    case 0:
      read_number(s[0]);
      break;
    case 1:
      read_list(s[0], s[1]);
      break;
    case 2:
      tuner_parse_algo(s[0], masks);
      break;
    case 3:
      tuttiCompressorParse(s[0], &cfg);
      break;
    case 4:
      agreed_settings_explain(s[0], 0, "h0", s[1], 1, "h1", msg, sizeof(msg));
      break;
    default:
      coll_parse(s[0]);
  }
  for (int i = 0; i < FUZZ_STRINGS; i++) free(s[i]);
  return 0;
}

/* ---- seeds: values from the documentation and the tests ---- */

static void seed(fuzz_put_fn put, void *arg, const char *name, int reader, const char *a,
                 const char *b) {
  char buf[600];
  int n = snprintf(buf, sizeof(buf), "%c%s", reader, a);
  buf[n++] = '\0';
  n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s", b);
  put(arg, name, buf, (size_t)n);
}

void fuzz_seeds(fuzz_put_fn put, void *arg) {
  seed(put, arg, "int-suffix", 0, "64KB", "");
  seed(put, arg, "int-hex", 0, "0x7fffffffffffffff", "");
  seed(put, arg, "double", 0, "2.5e-3", "");
  seed(put, arg, "ifname-exclude", 1, "^docker,lo", "eth0");
  seed(put, arg, "ifname-exact", 1, "=mlx5_0:1,mlx5_1:1", "mlx5_1");
  seed(put, arg, "algo", 2, "allreduce:ring,tree;broadcast:^chain", "");
  seed(put, arg, "algo-all", 2, "rd", "");
  seed(put, arg, "compress-topk", 3, "topk:0.01,hier", "");
  seed(put, arg, "compress-psgd", 3, "powersgd:4", "");
  char fa[512], fb[512];
  setenv("TUTTI_ALGO", "ring", 1);
  agreed_settings_format(fa, sizeof(fa));
  setenv("TUTTI_ALGO", "tree", 1);
  setenv("TUTTI_CHECK_COLL", "1", 1);
  agreed_settings_format(fb, sizeof(fb));
  unsetenv("TUTTI_ALGO"), unsetenv("TUTTI_CHECK_COLL");
  seed(put, arg, "agreed", 4, fa, fb);
  seed(put, arg, "coll", 5, "ReduceScatter", "");
}
