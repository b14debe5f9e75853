/* tools/run.h: what tutti-run's files share (tutti_run.c: command line, job setup, launching;
 * run_supervise.c: signals, output relay, supervision; run_bind.c: placement on CPUs). */
#ifndef TUTTI_RUN_H_
#define TUTTI_RUN_H_

#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#ifndef TUTTI_RUN_VERSION
#define TUTTI_RUN_VERSION "0.1.0"
#endif

#define RUN_MAX_RANKS 1024
#define RUN_LINE_MAX 4096 /* longer lines are relayed as several prefixed lines */
#define RUN_DEFAULT_GRACE_S 3.0
#define RUN_EXIT_USAGE 2
#define RUN_EXIT_TIMEOUT 124
#define RUN_EXIT_NOEXEC 127

#define RUN_MAX_HOSTS 256

enum { RUN_BIND_AUTO = 0, RUN_BIND_NONE, RUN_BIND_CORE, RUN_BIND_NUMA };
enum { RUN_HEAP_SHARED = 1, RUN_HEAP_PRIVATE };

typedef struct {
  char name[48];
  int count; /* ranks on this host; 0 until placed */
} run_host_t;

typedef struct {
  int nranks;
  int prefix;
  int keep_going;    /* a failing rank does not stop the others */
  run_host_t *hosts; /* --hosts, NULL: this host */
  int nhosts;
  const char *netns_prefix;
  int print_settings;
  int bind_mode, bind_set; /* RUN_BIND_*; bind_set: given on the command line */
  int map_spread;          /* --map: 1 spread, 0 pack, -1 mpirun's rule */
  int report_bindings;     /* --report-bindings */
  int oversubscribe;       /* --oversubscribe: more ranks than CPUs unbinds */
  int heap, heap_set;      /* RUN_HEAP_*; heap_set: given on the command line */
  cpu_set_t *rank_sets;    /* [nranks] rank r's CPUs; NULL: ranks not bound */
  double timeout_s;        /* 0: no timeout */
  char **prog_argv;        /* NULL-terminated, points into argv */
} run_options_t;

/* One relayed output stream of one rank (--prefix only). */
typedef struct {
  int fd;     /* read end of the rank's pipe; -1 when closed */
  int out_fd; /* STDOUT_FILENO or STDERR_FILENO */
  size_t len;
  char buf[RUN_LINE_MAX];
} run_stream_t;

typedef struct {
  pid_t pid; /* 0 once reaped */
  run_stream_t out, err;
} run_rank_t;

typedef struct {
  run_options_t opt;
  run_rank_t *ranks;
  int nlaunched;
  int nalive;    /* launched and not yet reaped */
  pid_t pgid;    /* the ranks' process group; 0 before the first fork */
  int listen_fd; /* the root's listening socket until all ranks are forked */
  int exit_code; /* the first failure's code; 0 while all is well */
  int stopping;  /* shutdown started */
  int killed;    /* SIGKILL sent */
  double grace_s;
  double timeout_at; /* monotonic seconds; 0: none */
  double kill_at;
} run_job_t;

__attribute__((format(printf, 1, 2), noreturn)) void die(const char *fmt, ...);
__attribute__((format(printf, 1, 2), noreturn)) void usage_error(const char *fmt, ...);

/* run_heap.c: --heap shared|private; prepare_heap puts libtutti-heap.so into LD_PRELOAD for
 * the shared heap (the default, or $TUTTI_RUN_HEAP). */
int parse_heap(const char *v);
void prepare_heap(run_options_t *o);
int parse_bind(const char *v); /* RUN_BIND_*; a usage error for anything else */
/* run_bind.c: decides each rank's CPUs (and claims them in the registry) before any rank
 * starts; bind_rank applies rank r's in its child. */
void plan_binding(run_options_t *o);
void bind_rank(const run_options_t *o, int rank);
double now_s(void);
void write_all(int fd, const char *p, size_t n);
void install_signal_handlers(void);
void block_signals(sigset_t *old);
void restore_child_signals(const sigset_t *old);
void signal_group(const run_job_t *job, int sig);
void start_shutdown(run_job_t *job, int exit_code, int sig);
void stream_init(run_stream_t *s, int fd, int out_fd);
void close_fd(int *fd);
void close_pair(int p[2]);
/* Relays output and reaps ranks until every rank is gone. */
void supervise(run_job_t *job);

#endif
