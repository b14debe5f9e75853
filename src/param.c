/* Settings: the one reader of TUTTI_<NAME> / NCCL_<NAME> (see core.h for the syntax).
 *
 * Strings come from tutti_getenv; numbers go through parse_int / parse_double, which reject
 * garbage, trailing text and values that do not fit instead of reading a prefix; lists (comma
 * separated) through tutti_list_next, and interface / HCA lists through tutti_name_list_matches.
 * TUTTI_PARAM settings are read once and cached, until a fork's child forgets them; a value that
 * differs from its default is logged at INFO (ENV subsystem) when read, a bad one is a WARN and
 * keeps the default.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

extern char **environ;

const char *tutti_getenv_which(const char *env, char *which, size_t len) {
  const char *prefixes[2] = {"TUTTI_", "NCCL_"};
  for (int i = 0; i < 2; i++) {
    char name[128];
    snprintf(name, sizeof(name), "%s%s", prefixes[i], env);
    const char *v = getenv(name);
    if (v && *v) {
      if (which && len) snprintf(which, len, "%s", name);
      return v;
    }
  }
  if (which && len) snprintf(which, len, "TUTTI_%s", env);
  return NULL;
}

const char *tutti_getenv(const char *env) {
  return tutti_getenv_which(env, NULL, 0);
}

ncclResult_t tutti_setting_int(const char *env, int64_t dflt, int64_t lo, int64_t hi,
                               int64_t *out) {
  char which[128];
  const char *s = tutti_getenv_which(env, which, sizeof(which));
  int64_t v = dflt;
  const char *why = s ? tutti_parse_int(s, &v) : NULL;
  if (!why && (v < lo || v > hi)) why = "is outside the allowed range";
  if (why)
    return TUTTI_ERR(ncclInvalidUsage, "setting %s=\"%s\" %s: expected an integer in [%lld, %lld]",
                     which, s, why, (long long)lo, (long long)hi);
  *out = v;
  return ncclSuccess;
}

double tutti_setting_double(const char *env, double dflt, double lo, double hi) {
  char which[128];
  const char *s = tutti_getenv_which(env, which, sizeof(which));
  double v = dflt;
  const char *why = s ? tutti_parse_double(s, &v) : NULL;
  if (!why && !(v >= lo && v <= hi)) why = "is outside the allowed range";
  if (why) {
    WARN("setting %s=\"%s\" %s (expected a number in [%g, %g]); using the default %g", which, s,
         why, lo, hi, dflt);
    return dflt;
  }
  if (s && v != dflt) INFO(SUB_ENV, "setting %s=%g (default %g)", which, v, dflt);
  return v;
}

static pthread_mutex_t param_lock = PTHREAD_MUTEX_INITIALIZER;

/* Integer settings with a range narrower than int64 (seconds become int milliseconds where they
 * are used: at most 2147483 s). Outside its range a setting is refused with a warning naming the
 * range, and the default applies. */
static const struct {
  const char *env;
  int64_t lo, hi;
  const char *unit;
} param_ranges[] = {
    {"CACHE_BYTES", 0, INT64_MAX, "bytes (0: the size the CPU reports)"},
    {"INIT_TIMEOUT", 1, 2147483, "seconds"},
    {"TIMEOUT", 0, 2147483, "seconds (0: no limit)"},
};

static int param_in_range(const char *which, const char *env, int64_t v, const char *raw,
                          int64_t dflt) {
  for (size_t i = 0; i < sizeof(param_ranges) / sizeof(param_ranges[0]); i++) {
    if (strcmp(param_ranges[i].env, env) != 0) continue;
    if (v >= param_ranges[i].lo && v <= param_ranges[i].hi) return 1;
    WARN("setting %s=\"%s\" is outside [%lld, %lld] %s; using the default %lld", which, raw,
         (long long)param_ranges[i].lo, (long long)param_ranges[i].hi, param_ranges[i].unit,
         (long long)dflt);
    return 0;
  }
  return 1;
}

/* The setting's value now: the default when unset or refused (with a WARN naming it). */
static int64_t param_read(const tutti_param_t *p) {
  char which[128];
  const char *s = tutti_getenv_which(p->env, which, sizeof(which));
  int64_t v = p->dflt;
  const char *why = s ? tutti_parse_int(s, &v) : NULL;
  if (why) {
    WARN("setting %s=\"%s\" %s; using the default %lld", which, s, why, (long long)p->dflt);
    v = p->dflt;
  } else if (s && !param_in_range(which, p->env, v, s, p->dflt)) {
    v = p->dflt;
  } else if (v != p->dflt) {
    INFO(SUB_ENV, "setting %s=%lld (default %lld)", which, (long long)v, (long long)p->dflt);
  }
  return v;
}

static tutti_param_t *params_read; /* every setting read once, listed under param_lock */

/* Around a fork the forking thread holds param_lock, so no other thread is half-way through a
 * read when the child is copied. A read may log under param_lock, so param_lock comes before the
 * logger's locks: its fork handlers are registered after the logger's (the handlers before a
 * fork run last registered first). A fork's child (its one thread): every setting is read again
 * where next asked for, from the environment the child has then. */
static void params_before_fork(void) {
  pthread_mutex_lock(&param_lock);
}

static void params_after_fork_parent(void) {
  pthread_mutex_unlock(&param_lock);
}

static void params_after_fork_child(void) {
  for (tutti_param_t *p = params_read; p; p = p->next)
    __atomic_store_n(&p->state, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&param_lock);
}

static int params_register_fork_handlers(void) {
  tutti_log_ready();
  return pthread_atfork(params_before_fork, params_after_fork_parent, params_after_fork_child) == 0;
}

int64_t tutti_param_load(tutti_param_t *p) {
  static int fork_handlers_registered;
  if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == 2) return p->value;
  pthread_mutex_lock(&param_lock);
  if (p->state != 2) {
    p->value = param_read(p);
    if (!p->listed) p->next = params_read, params_read = p, p->listed = 1;
    if (!fork_handlers_registered) fork_handlers_registered = params_register_fork_handlers();
    __atomic_store_n(&p->state, 2, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&param_lock);
  return p->value;
}

int64_t tutti_param_fresh(const char *env, int64_t dflt) {
  tutti_param_t p = {env, dflt, 0, 0, 0, NULL};
  return param_read(&p);
}

/* ---- lists ---- */

int tutti_list_next(const char **cursor, char *tok, size_t len) {
  const char *s = *cursor;
  while (*s == ',' || *s == ' ' || *s == '\t') s++;
  if (*s == '\0') return 0;
  size_t n = strcspn(s, ",");
  *cursor = s + n;
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  snprintf(tok, len, "%.*s", (int)n, s);
  return 1;
}

/* One entry of a list against a name: "mlx5_0:1" compares "mlx5_0" (the port is for the ib
 * transport), exactly with "=", else as a prefix. */
static int entry_matches(const char *entry, const char *name, int exact) {
  size_t elen = strcspn(entry, ":");
  if (elen == 0) return 0;
  if (exact) return strlen(name) == elen && strncmp(entry, name, elen) == 0;
  return strncmp(entry, name, elen) == 0;
}

int tutti_name_list_matches(const char *spec, const char *name) {
  int exclude = 0, exact = 0, hit = 0;
  char entry[256];
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  while (!hit && tutti_list_next(&spec, entry, sizeof(entry)))
    hit = entry_matches(entry, name, exact);
  return exclude ? !hit : hit;
}

/* ---- the environment at INFO ---- */

static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

static void log_settings_once(void) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "TUTTI_SECRET=", 13) == 0)
      INFO(SUB_ENV | SUB_INIT, "environment: TUTTI_SECRET=<set, not shown>");
    else if (strncmp(*e, "TUTTI_", 6) == 0 || strncmp(*e, "NCCL_", 5) == 0)
      INFO(SUB_ENV | SUB_INIT, "environment: %s", *e);
  }
}

void tutti_log_settings(void) {
  pthread_once(&settings_once, log_settings_once);
}
