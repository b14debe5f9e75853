/* Logging and error messages.
 *
 * Every line starts with "host:pid:tid [rank]". WARN always prints (with file:line); INFO is
 * gated by TUTTI_DEBUG / NCCL_DEBUG (VERSION, WARN, INFO, TRACE) and by TUTTI_DEBUG_SUBSYS /
 * NCCL_DEBUG_SUBSYS (comma list of INIT, COLL, P2P, SHM, NET, BOOTSTRAP, ENV, TUNING, ALL;
 * a leading ^ excludes). TUTTI_DEBUG_FILE writes to a file instead of stderr (%h host, %p pid).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

#ifndef TUTTI_BUILD_INFO /* optional parts that ranks need not agree on, e.g. "pmix=dlopen" */
#define TUTTI_BUILD_INFO ""
#endif

int tutti_log_level = -1;
static int log_level_explicit; /* TUTTI_DEBUG / NCCL_DEBUG was set */
static unsigned log_subsys = SUB_ALL;
static FILE *log_file;
static char log_host[64];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_stale; /* 1: a fork's child that has not read the settings again yet */
static pthread_mutex_t log_stale_lock = PTHREAD_MUTEX_INITIALIZER;
static TUTTI_TLS int log_rank = -1;
static TUTTI_TLS char last_error[1024];

static const struct {
  const char *name;
  unsigned bit;
} subsys_names[] = {{"INIT", SUB_INIT}, {"COLL", SUB_COLL},     {"P2P", SUB_P2P},
                    {"SHM", SUB_SHM},   {"NET", SUB_NET},       {"BOOTSTRAP", SUB_BOOTSTRAP},
                    {"ENV", SUB_ENV},   {"TUNING", SUB_TUNING}, {"ALL", SUB_ALL}};

static unsigned parse_subsys(const char *s) {
  int exclude = (s[0] == '^');
  unsigned mask = 0;
  char tok[64];
  for (s += exclude; tutti_list_next(&s, tok, sizeof(tok));) {
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
      if (strcasecmp(tok, subsys_names[i].name) == 0) mask |= subsys_names[i].bit;
  }
  return exclude ? ~mask : mask;
}

static FILE *open_log_file(const char *pattern) {
  char path[512];
  size_t o = 0;
  for (const char *c = pattern; *c && o + 32 < sizeof(path); c++) {
    if (c[0] == '%' && c[1] == 'h') {
      o += snprintf(path + o, sizeof(path) - o, "%s", log_host), c++;
    } else if (c[0] == '%' && c[1] == 'p') {
      o += snprintf(path + o, sizeof(path) - o, "%d", (int)getpid()), c++;
    } else {
      path[o++] = *c;
    }
  }
  path[o] = '\0';
  FILE *f = fopen(path, "a");
  if (f) setvbuf(f, NULL, _IOLBF, 0);
  return f;
}

/* Reads the settings and publishes them: level, subsystems and the explicit flag as atomics,
 * the file under log_lock (threads may be logging while ncclResetDebugInit re-reads them). */
static void log_settings(void) {
  const char *lvl = tutti_getenv("DEBUG");
  int level = LOG_WARN; /* WARN prints unless TUTTI_DEBUG=NONE */
  if (lvl) {
    if (strcasecmp(lvl, "NONE") == 0)
      level = LOG_NONE;
    else if (strcasecmp(lvl, "VERSION") == 0)
      level = LOG_VERSION;
    else if (strcasecmp(lvl, "WARN") == 0)
      level = LOG_WARN;
    else if (strcasecmp(lvl, "INFO") == 0)
      level = LOG_INFO;
    else if (strcasecmp(lvl, "TRACE") == 0)
      level = LOG_TRACE;
  }
  const char *sub = tutti_getenv("DEBUG_SUBSYS");
  const char *file = tutti_getenv("DEBUG_FILE");
  FILE *f = file ? open_log_file(file) : NULL;
  pthread_mutex_lock(&log_lock);
  FILE *old = log_file;
  log_file = f;
  pthread_mutex_unlock(&log_lock);
  if (old) fclose(old);
  __atomic_store_n(&log_subsys, sub ? parse_subsys(sub) : (SUB_ALL & ~0u), __ATOMIC_RELAXED);
  __atomic_store_n(&log_level_explicit, lvl != NULL, __ATOMIC_RELAXED);
  __atomic_store_n(&tutti_log_level, level, __ATOMIC_RELEASE);
}

/* Around a fork the forking thread holds both locks (taken in their order: log_stale_lock, then
 * log_lock inside log_settings), so no other thread is half-way through a line or a re-read
 * when the child is copied. Nothing else is locked while a thread holds them (a line is written,
 * a file opened or closed), so the fork waits at most for that. A fork's child (its one thread)
 * reads the settings again at its first log line: it may have set its own (a TUTTI_DEBUG_FILE
 * with %p names its own file). Until then every line asks (level -1). */
static void log_before_fork(void) {
  pthread_mutex_lock(&log_stale_lock);
  pthread_mutex_lock(&log_lock);
}

static void log_after_fork_parent(void) {
  pthread_mutex_unlock(&log_lock);
  pthread_mutex_unlock(&log_stale_lock);
}

static void log_after_fork_child(void) {
  __atomic_store_n(&log_stale, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&tutti_log_level, -1, __ATOMIC_RELAXED);
  log_after_fork_parent();
}

static void log_init(void) {
  gethostname(log_host, sizeof(log_host) - 1);
  char *dot = strchr(log_host, '.');
  if (dot) *dot = '\0';
  log_settings();
  pthread_atfork(log_before_fork, log_after_fork_parent, log_after_fork_child);
}

/* The settings read: once per process, and again in a fork's child. */
void tutti_log_ready(void) {
  pthread_once(&log_once, log_init);
  if (!__atomic_load_n(&log_stale, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&log_stale_lock);
  if (log_stale) {
    log_settings();
    __atomic_store_n(&log_stale, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&log_stale_lock);
}

int tutti_log_enabled(log_level_t level, unsigned subsys) {
  tutti_log_ready();
  if (level <= LOG_WARN) return tutti_log_level_now() >= (int)level;
  return tutti_log_level_now() >= (int)level &&
         (__atomic_load_n(&log_subsys, __ATOMIC_RELAXED) & subsys);
}

void tutti_log_set_rank(int rank) {
  log_rank = rank;
}

void tutti_log_reinit(void) {
  tutti_log_ready();
  log_settings();
}

/* The first line NCCL users look for. Printed once per process, at the first communicator's
 * init, when TUTTI_DEBUG / NCCL_DEBUG asks for VERSION or more; not at the default level. */
void tutti_log_version(void) {
  static int printed;
  tutti_log_ready();
  if (!__atomic_load_n(&log_level_explicit, __ATOMIC_RELAXED) ||
      tutti_log_level_now() < LOG_VERSION)
    return;
  if (__atomic_exchange_n(&printed, 1, __ATOMIC_ACQ_REL)) return;
  tutti_log(LOG_VERSION, SUB_ALL, __FILE__, __LINE__,
            "tutti version %s, NCCL API %d.%d.%d (code %d), build %s %s", TUTTI_VERSION_STRING,
            NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_VERSION_CODE, tutti_build_options(),
            TUTTI_BUILD_INFO);
}

static void vlog(log_level_t level, const char *file, int line, const char *fmt, va_list ap) {
  char msg[1536];
  int n;
  long tid = syscall(SYS_gettid);
  if (log_rank >= 0)
    n = snprintf(msg, sizeof(msg), "%s:%d:%ld [%d] TUTTI ", log_host, (int)getpid(), tid, log_rank);
  else
    n = snprintf(msg, sizeof(msg), "%s:%d:%ld [-] TUTTI ", log_host, (int)getpid(), tid);
  if (level == LOG_WARN) {
    const char *base = strrchr(file, '/');
    n += snprintf(msg + n, sizeof(msg) - n, "WARN %s:%d ", base ? base + 1 : file, line);
  } else {
    n += snprintf(msg + n, sizeof(msg) - n, "INFO ");
  }
  if (n < (int)sizeof(msg)) n += vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
  if (n >= (int)sizeof(msg) - 1) n = sizeof(msg) - 2;
  msg[n++] = '\n';
  msg[n] = '\0';
  pthread_mutex_lock(&log_lock);
  fputs(msg, log_file ? log_file : stderr);
  pthread_mutex_unlock(&log_lock);
}

void tutti_log(log_level_t level, unsigned subsys, const char *file, int line, const char *fmt,
               ...) {
  if (!tutti_log_enabled(level, subsys)) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, file, line, fmt, ap);
  va_end(ap);
}

ncclResult_t tutti_error(ncclResult_t code, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  tutti_log_ready();
  if (tutti_log_level_now() >= LOG_WARN) tutti_log(LOG_WARN, SUB_ALL, file, line, "%s", last_error);
  return code;
}

void tutti_restore_error(const char *msg) {
  if (msg != last_error) snprintf(last_error, sizeof(last_error), "%s", msg);
}

void tutti_clear_error(void) {
  if (last_error[0]) last_error[0] = '\0';
}
const char *tutti_last_error(void) {
  return last_error;
}

const char *tutti_proc_stat(int pid, char *buf, size_t len) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  return paren && paren[1] == ' ' ? paren + 2 : NULL;
}

/* PF_EXITING in /proc/<pid>/stat's flags (field 9): set when the process starts to exit, before
 * it closes its files (its peers see their sockets reset) and long before it is a zombie. */
#define TUTTI_PF_EXITING 0x4u

int tutti_pid_gone(int pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char buf[512];
  const char *state = tutti_proc_stat(pid, buf, sizeof(buf));
  if (!state) return 0;
  if (*state == 'Z' || *state == 'X') return 1;
  unsigned flags = 0; /* after the state: ppid pgrp session tty_nr tpgid, then flags */
  return sscanf(state + 1, " %*d %*d %*d %*d %*d %u", &flags) == 1 && (flags & TUTTI_PF_EXITING);
}

void tutti_test_hold(const char *setting, int64_t ms, int rank, const char *before) {
  if (ms <= 0) return;
  WARN("test hook %s: rank %d waits %lld ms %s", setting, rank, (long long)ms, before);
  usleep((useconds_t)TUTTI_MIN(ms, 60000) * 1000);
}

int tutti_pid_stopped(int pid) {
  char buf[256];
  const char *state = tutti_proc_stat(pid, buf, sizeof(buf));
  return state && (*state == 'T' || *state == 't');
}

static int self_pid; /* 0: not read yet, or forgotten by a fork's child */
static pthread_once_t self_pid_once = PTHREAD_ONCE_INIT;

static void self_pid_forget(void) {
  __atomic_store_n(&self_pid, 0, __ATOMIC_RELAXED);
}

static void self_pid_register(void) {
  pthread_atfork(NULL, NULL, self_pid_forget);
}

int tutti_self_pid(void) {
  int pid = __atomic_load_n(&self_pid, __ATOMIC_RELAXED);
  if (pid) return pid;
  pthread_once(&self_pid_once, self_pid_register);
  pid = (int)getpid();
  __atomic_store_n(&self_pid, pid, __ATOMIC_RELAXED);
  return pid;
}

uint64_t tutti_time_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *tutti_build_options(void) {
#ifdef TUTTI_BUILD_OPTIONS
  return TUTTI_BUILD_OPTIONS;
#else
  return "unknown";
#endif
}
