/* Internal foundation shared by every file of the library: error checks, logging, settings.
 *
 * Errors are values with a trail: every internal function returns ncclResult_t and
 * TUTTI_CHECK(call) returns on failure, logging "file:line -> code" at INFO so that a failure
 * leaves a breadcrumb trail. tutti_set_error() records the message ncclGetLastError returns.
 */
#ifndef TUTTI_CORE_H_
#define TUTTI_CORE_H_

#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- logging ---- */
typedef enum { LOG_NONE = 0, LOG_VERSION, LOG_WARN, LOG_INFO, LOG_TRACE } log_level_t;
typedef enum {
  SUB_INIT = 1 << 0,
  SUB_COLL = 1 << 1,
  SUB_P2P = 1 << 2,
  SUB_SHM = 1 << 3,
  SUB_NET = 1 << 4,
  SUB_BOOTSTRAP = 1 << 5,
  SUB_ENV = 1 << 6,
  SUB_TUNING = 1 << 7,
  SUB_ALL = ~0
} log_subsys_t;

extern int tutti_log_level; /* -1 until the first log call reads TUTTI_DEBUG */
void tutti_log(log_level_t level, unsigned subsys, const char *file, int line, const char *fmt,
               ...) __attribute__((format(printf, 5, 6)));
int tutti_log_enabled(log_level_t level, unsigned subsys);
/* Rank printed in every log line of this thread ("[rank]"), -1 for none. */
void tutti_log_set_rank(int rank);
/* Re-reads the logging settings (ncclResetDebugInit). */
void tutti_log_reinit(void);
/* Prints the version banner once per process when TUTTI_DEBUG / NCCL_DEBUG is VERSION or more. */
void tutti_log_version(void);

#define WARN(...) tutti_log(LOG_WARN, SUB_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(sub, ...)                                                         \
  do {                                                                         \
    if (tutti_log_level >= LOG_INFO || tutti_log_level < 0)                    \
      tutti_log(LOG_INFO, (sub), __FILE__, __LINE__, __VA_ARGS__);             \
  } while (0)
#ifdef TUTTI_ENABLE_TRACE
#define TRACE(sub, ...) tutti_log(LOG_TRACE, (sub), __FILE__, __LINE__, __VA_ARGS__)
#else
#define TRACE(sub, ...) \
  do {                  \
  } while (0)
#endif

/* ---- errors ---- */
/* Records the message returned by ncclGetLastError for this thread and logs it as WARN. */
ncclResult_t tutti_error(ncclResult_t code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define TUTTI_ERR(code, ...) tutti_error((code), __FILE__, __LINE__, __VA_ARGS__)
void tutti_clear_error(void);
const char *tutti_last_error(void);

#define TUTTI_CHECK(call)                                                          \
  do {                                                                             \
    ncclResult_t res_ = (call);                                                    \
    if (res_ != ncclSuccess && res_ != ncclInProgress) {                           \
      INFO(SUB_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)res_);                 \
      return res_;                                                                 \
    }                                                                              \
  } while (0)
#define TUTTI_CHECK_GOTO(call, res, label)                                         \
  do {                                                                             \
    (res) = (call);                                                                \
    if ((res) != ncclSuccess && (res) != ncclInProgress) {                         \
      INFO(SUB_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)(res));                \
      goto label;                                                                  \
    }                                                                              \
  } while (0)
/* System calls: on failure report errno with the call's text. */
#define SYS_CHECK(call, what)                                                                \
  do {                                                                                       \
    if ((call) < 0)                                                                          \
      return TUTTI_ERR(ncclSystemError, "%s failed: %s", (what), strerror(errno));           \
  } while (0)

/* ---- settings ----
 * TUTTI_PARAM(Name, "ENV", default) defines int64_t tutti_param_Name(void), reading
 * TUTTI_ENV, else NCCL_ENV, once; a non-default value is logged at INFO (ENV subsystem).
 * Values accept K/M/G suffixes (powers of 1024). */
typedef struct tutti_param {
  const char *env;
  int64_t dflt;
  int64_t value;
  int state; /* 0 unread, 1 reading, 2 ready */
} tutti_param_t;
int64_t tutti_param_load(tutti_param_t *p);
#define TUTTI_PARAM(name, env, dflt)                                 \
  int64_t tutti_param_##name(void) {                                 \
    static tutti_param_t p_ = {env, dflt, 0, 0};                     \
    if (__atomic_load_n(&p_.state, __ATOMIC_ACQUIRE) == 2) return p_.value; \
    return tutti_param_load(&p_);                                    \
  }
#define TUTTI_PARAM_DECL(name) int64_t tutti_param_##name(void)
/* String settings: TUTTI_env, else NCCL_env, else NULL. Not cached (read at init only). */
const char *tutti_getenv(const char *env);
/* Logs every TUTTI_* / NCCL_* variable of the environment at INFO (once per process). */
void tutti_log_settings(void);

/* ---- small helpers ---- */
/* Thread-locals on hot paths: initial-exec avoids a __tls_get_addr call per access. */
#define TUTTI_TLS __thread __attribute__((tls_model("initial-exec")))
uint64_t tutti_time_ns(void); /* CLOCK_MONOTONIC */
#define TUTTI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TUTTI_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TUTTI_DIV_UP(a, b) (((a) + (b)-1) / (b))
#define TUTTI_ALIGN_UP(a, b) (TUTTI_DIV_UP((a), (b)) * (b))
#define TUTTI_CACHELINE 64

/* Build options every rank must agree on (checked at bootstrap). */
const char *tutti_build_options(void);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_CORE_H_ */
