/* Settings: TUTTI_<NAME>, else NCCL_<NAME>, read once and cached.
 * A value that differs from its default is logged at INFO (ENV subsystem) when first read. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

extern char **environ;

const char *tutti_getenv(const char *env) {
  char name[128];
  snprintf(name, sizeof(name), "TUTTI_%s", env);
  const char *v = getenv(name);
  if (v && *v) return v;
  snprintf(name, sizeof(name), "NCCL_%s", env);
  v = getenv(name);
  return (v && *v) ? v : NULL;
}

/* Parses "123", "-1", "64K", "2M", "1G" (powers of 1024). Returns 0 on success, -1 for what is
 * not a number or does not fit in 64 bits (with its suffix). */
static int parse_int(const char *s, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (end == s || errno == ERANGE) return -1;
  while (isspace((unsigned char)*end)) end++;
  int shift = 0;
  switch (toupper((unsigned char)*end)) {
    case 'K':
      shift = 10;
      end++;
      break;
    case 'M':
      shift = 20;
      end++;
      break;
    case 'G':
      shift = 30;
      end++;
      break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return -1;
  if (v > (INT64_MAX >> shift) || v < (INT64_MIN >> shift)) return -1;
  *out = (int64_t)((uint64_t)v << shift);
  return 0;
}

/* Ranges of the settings whose other values are meaningless (a negative timeout) or overflow
 * where they are used (seconds become int milliseconds: at most 2147483 s). Outside its range a
 * setting is refused with a warning naming the range, and the default applies. */
static const struct {
  const char *env;
  int64_t lo, hi;
  const char *unit;
} param_ranges[] = {
    {"INIT_TIMEOUT", 1, 2147483, "seconds"},
    {"TIMEOUT", 0, 2147483, "seconds (0: no limit)"},
};

static int param_in_range(const char *env, int64_t v, const char *raw, int64_t dflt) {
  for (size_t i = 0; i < sizeof(param_ranges) / sizeof(param_ranges[0]); i++) {
    if (strcmp(param_ranges[i].env, env) != 0) continue;
    if (v >= param_ranges[i].lo && v <= param_ranges[i].hi) return 1;
    WARN("setting %s=\"%s\" is outside [%lld, %lld] %s; using the default %lld", env, raw,
         (long long)param_ranges[i].lo, (long long)param_ranges[i].hi, param_ranges[i].unit,
         (long long)dflt);
    return 0;
  }
  return 1;
}

static pthread_mutex_t param_lock = PTHREAD_MUTEX_INITIALIZER;

int64_t tutti_param_load(tutti_param_t *p) {
  if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == 2) return p->value;
  pthread_mutex_lock(&param_lock);
  if (p->state != 2) {
    int64_t v = p->dflt;
    const char *s = tutti_getenv(p->env);
    if (s) {
      if (parse_int(s, &v) != 0) {
        WARN("setting %s=\"%s\" is not a number that fits in 64 bits; using the default %lld",
             p->env, s, (long long)p->dflt);
        v = p->dflt;
      } else if (!param_in_range(p->env, v, s, p->dflt)) {
        v = p->dflt;
      } else if (v != p->dflt) {
        INFO(SUB_ENV, "setting %s=%lld (default %lld)", p->env, (long long)v, (long long)p->dflt);
      }
    }
    p->value = v;
    __atomic_store_n(&p->state, 2, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&param_lock);
  return p->value;
}

static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

static void log_settings_once(void) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "TUTTI_SECRET=", 13) == 0)
      INFO(SUB_ENV | SUB_INIT, "environment: TUTTI_SECRET=<set, not shown>");
    else if (strncmp(*e, "TUTTI_", 6) == 0 || strncmp(*e, "NCCL_", 5) == 0)
      INFO(SUB_ENV | SUB_INIT, "environment: %s", *e);
  }
}

void tutti_log_settings(void) { pthread_once(&settings_once, log_settings_once); }
