/* Internal foundation shared by every file of the library: error checks, logging, settings.
 *
 * Errors are values with a trail: every internal function that can fail returns ncclResult_t
 * and TUTTI_CHECK(call) returns on failure, logging "file:line -> code" at INFO so that a failure
 * leaves a breadcrumb trail. TUTTI_ERR() records the message ncclGetLastError returns.
 * The exceptions, each said at its declaration: functions that cannot fail return their value
 * or void (pure helpers, counts, the data-path calls of a transport, which report through the
 * connection's state); decisions that never fail (topo_choose_*) return void with the reason in
 * their output; parsers return NULL or why the text is refused (tutti_parse_int), so the caller
 * names the setting in the error; schedule builders (src/algos/) return 0, or a negative
 * number on failure, and log nothing.
 */
#ifndef TUTTI_CORE_H_
#define TUTTI_CORE_H_

#include <stddef.h>
#include <stdint.h>

#include "parse_num.h"
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

/* A flag computed once and read by many threads (rank threads of one process ask at once): *slot
 * starts at -1; probe may run more than once, every run gives the same answer. */
static inline int tutti_cached_flag(int *slot, int (*probe)(void)) {
  int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
  if (v < 0) {
    v = probe();
    __atomic_store_n(slot, v, __ATOMIC_RELAXED);
  }
  return v;
}

extern int tutti_log_level; /* -1 until the first log call reads TUTTI_DEBUG */
/* The level now: ncclResetDebugInit may change it while other threads log. */
static inline int tutti_log_level_now(void) {
  return __atomic_load_n(&tutti_log_level, __ATOMIC_RELAXED);
}
void tutti_log(log_level_t level, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int tutti_log_enabled(log_level_t level, unsigned subsys);
/* Reads the logging settings once per process (again in a fork's child) and registers the
 * logger's fork handlers; every log call does it first. */
void tutti_log_ready(void);
/* Rank printed in every log line of this thread ("[rank]"), -1 for none. */
void tutti_log_set_rank(int rank);
/* Re-reads the logging settings (ncclResetDebugInit). */
void tutti_log_reinit(void);
/* Prints the version banner once per process when TUTTI_DEBUG / NCCL_DEBUG is VERSION or more. */
void tutti_log_version(void);

#define WARN(...) tutti_log(LOG_WARN, SUB_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(sub, ...)                                                                             \
  do {                                                                                             \
    int lvl_ = tutti_log_level_now();                                                              \
    if (lvl_ >= LOG_INFO || lvl_ < 0) tutti_log(LOG_INFO, (sub), __FILE__, __LINE__, __VA_ARGS__); \
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
/* Makes msg the last error again, without logging it (after a cleanup that may record its own). */
void tutti_restore_error(const char *msg);
const char *tutti_last_error(void);

#define TUTTI_CHECK(call)                                          \
  do {                                                             \
    ncclResult_t res_ = (call);                                    \
    if (res_ != ncclSuccess && res_ != ncclInProgress) {           \
      INFO(SUB_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)res_); \
      return res_;                                                 \
    }                                                              \
  } while (0)
#define TUTTI_CHECK_GOTO(call, res, label)                          \
  do {                                                              \
    (res) = (call);                                                 \
    if ((res) != ncclSuccess && (res) != ncclInProgress) {          \
      INFO(SUB_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)(res)); \
      goto label;                                                   \
    }                                                               \
  } while (0)
/* System calls: on failure report errno with the call's text. */
#define SYS_CHECK(call, what)                                                                    \
  do {                                                                                           \
    if ((call) < 0) return TUTTI_ERR(ncclSystemError, "%s failed: %s", (what), strerror(errno)); \
  } while (0)

/* ---- settings ----
 * The one reader of settings (param.c). A setting NAME is TUTTI_NAME, else NCCL_NAME (an empty
 * variable counts as unset). Syntax, everywhere:
 *   integers  "123", "-1", "0x40", with an optional K, M or G (powers of 1024) and B: "64K",
 *             "2MB"; garbage, trailing text and values beyond 64 bits are errors, never a prefix
 *   numbers   strtod syntax ("0.6", "1e3"), the whole text
 *   lists     comma separated, blanks around entries ignored (tutti_list_next)
 *   names     NCCL's interface / HCA lists: "eth,ib" prefixes, "^" excludes, "=" exact,
 *             ":port" ignored (tutti_name_list_matches)
 * TUTTI_PARAM(Name, "ENV", default) defines int64_t tutti_param_Name(void), read once and
 * cached (a fork's child reads it again: it may have set its own environment before its
 * communicators); a non-default value is logged at INFO (ENV subsystem), a bad one is a WARN
 * naming the variable and keeps the default. */
typedef struct tutti_param {
  const char *env;
  int64_t dflt;
  int64_t value;
  int state;                /* 0 unread, 1 reading, 2 ready */
  int listed;               /* 1: on the list of settings read (param.c) */
  struct tutti_param *next; /* that list */
} tutti_param_t;
int64_t tutti_param_load(tutti_param_t *p);
#define TUTTI_PARAM(name, env, dflt)                                        \
  int64_t tutti_param_##name(void) {                                        \
    static tutti_param_t p_ = {env, dflt, 0, 0, 0, NULL};                   \
    if (__atomic_load_n(&p_.state, __ATOMIC_ACQUIRE) == 2) return p_.value; \
    return tutti_param_load(&p_);                                           \
  }
#define TUTTI_PARAM_DECL(name) int64_t tutti_param_##name(void)
/* A setting read now, not cached (checked as TUTTI_PARAM's are): for a setting that belongs to
 * one communicator and is read at its init, so a program may change it between communicators. */
int64_t tutti_param_fresh(const char *env, int64_t dflt);
/* String settings: TUTTI_env, else NCCL_env, else NULL. Not cached (read at init only). */
const char *tutti_getenv(const char *env);
/* The same; which (may be NULL) receives the variable's full name ("NCCL_SOCKET_IFNAME"), or
 * "TUTTI_<env>" when neither is set, for messages. */
const char *tutti_getenv_which(const char *env, char *which, size_t len);
/* An integer setting read now (not cached): dflt when unset; ncclInvalidUsage naming the
 * variable when it is not an integer or lies outside [lo, hi]. */
ncclResult_t tutti_setting_int(const char *env, int64_t dflt, int64_t lo, int64_t hi, int64_t *out);
/* A number setting read now: dflt when unset; a bad value or one outside [lo, hi] is a WARN
 * naming the variable and gives dflt. */
double tutti_setting_double(const char *env, double dflt, double lo, double hi);
/* Next entry of a comma list into tok (truncated to len); advances *cursor; 0 at the end. */
int tutti_list_next(const char **cursor, char *tok, size_t len);
/* 1 when name matches a NCCL-style name list (see above), e.g. "^docker,lo" or "=eth0". */
int tutti_name_list_matches(const char *spec, const char *name);
/* Logs every TUTTI_* / NCCL_* variable of the environment at INFO (once per process). */
void tutti_log_settings(void);

/* ---- small helpers ---- */
/* Marks a function of the public API: the library is built with -fvisibility=hidden, so only
 * these are exported. */
#define API __attribute__((visibility("default"), weak)) /* weak as NCCL: see include/tutti.h */
/* Thread-locals. The default (dynamic) model, so libtutti.so and libnccl.so.2 can be opened with
 * dlopen() at any time (Python extensions, a CUDA PyTorch loading libnccl.so.2): initial-exec
 * would need glibc's small static-TLS reserve, which torch has used up by then. The library is
 * built with TLS descriptors where the compiler has them (-mtls-dialect=gnu2, CMakeLists.txt):
 * in a library loaded at start an access is then one call that returns a constant offset, not
 * __tls_get_addr, and a static link relaxes it to a direct access. */
#define TUTTI_TLS __thread
uint64_t tutti_time_ns(void); /* CLOCK_MONOTONIC */
/* getpid(), remembered: glibc makes every getpid a system call (about 150 ns in a VM), and the
 * peer-memory path asks per buffer per call. A fork's child forgets it (pthread_atfork). */
int tutti_self_pid(void);
/* 1 when process pid is gone, exiting (killed: its memory and files are being torn down) or a
 * zombie (not yet reaped by its parent). */
int tutti_pid_gone(int pid);
/* 1 when process pid is stopped (SIGSTOP, job control, or a debugger's stop). */
int tutti_pid_stopped(int pid);
/* Test hooks that hold a rank at a point of its init (TUTTI_TEST_*_DELAY_MS): says so (WARN,
 * naming the setting, so that one set by accident shows), then sleeps ms, at most 60 s. */
void tutti_test_hold(const char *setting, int64_t ms, int rank, const char *before);
/* /proc/<pid>/stat read into buf: the fields after the command name (the state first), or NULL
 * when the process is gone or the line cannot be read. */
const char *tutti_proc_stat(int pid, char *buf, size_t len);
#define TUTTI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TUTTI_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TUTTI_DIV_UP(a, b) (((a) + (b)-1) / (b))
#define TUTTI_ALIGN_UP(a, b) (TUTTI_DIV_UP((a), (b)) * (b))
#define TUTTI_CACHELINE 64
/* a mod n in [0, n) also for negative a (ring positions: r - k). */
static inline int tutti_mod(int a, int n) {
  return ((a % n) + n) % n;
}

/* Build options every rank must agree on (checked at bootstrap). */
const char *tutti_build_options(void);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_CORE_H_ */
