/* tutti-run's supervision (see tutti_run.c's opening comment): signal handling through a
 * self-pipe, the --prefix output relay, and the poll() loop that reaps ranks, enforces
 * --timeout and the kill grace, and stops the job when a rank fails. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

/* ---------------------------------------------------------------- signals */

/* Signals forwarded to the ranks. SIGINT and SIGTERM are always caught: they stop the job. A
 * SIGHUP or SIGQUIT that was ignored when we started (nohup) stays ignored, for us and the
 * ranks. (A shell also starts background commands with SIGINT ignored; we catch it anyway, so
 * `kill -INT` stops a job started with `&` from a script.) */
static struct {
  int sig;
  int stops_job;
  int ignored;
} run_forwarded[] = {{SIGINT, 1, 0}, {SIGTERM, 1, 0}, {SIGHUP, 0, 0}, {SIGQUIT, 0, 0}};
#define RUN_N_FORWARDED ((int)(sizeof run_forwarded / sizeof run_forwarded[0]))

static int run_sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  ssize_t ignored = write(run_sig_pipe[1], &b, 1); /* full pipe: a wakeup is pending anyway */
  (void)ignored;
  errno = saved;
}

static void catch_signal(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

void install_signal_handlers(void) {
  if (pipe2(run_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) die("pipe: %s", strerror(errno));
  for (int i = 0; i < RUN_N_FORWARDED; i++) {
    struct sigaction old;
    sigaction(run_forwarded[i].sig, NULL, &old);
    run_forwarded[i].ignored = !run_forwarded[i].stops_job && old.sa_handler == SIG_IGN;
    if (!run_forwarded[i].ignored) catch_signal(run_forwarded[i].sig);
  }
  catch_signal(SIGCHLD);
  signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the launcher */
}

void block_signals(sigset_t *old) {
  sigset_t set;
  sigemptyset(&set);
  for (int i = 0; i < RUN_N_FORWARDED; i++) sigaddset(&set, run_forwarded[i].sig);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, old);
}

/* In a child before exec: our handlers must not run there, SIGPIPE must work again. */
void restore_child_signals(const sigset_t *old) {
  for (int i = 0; i < RUN_N_FORWARDED; i++)
    if (!run_forwarded[i].ignored) signal(run_forwarded[i].sig, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, old, NULL);
}

/* Signals every process in the ranks' group. Only while a rank is unreaped: then the group
 * exists and its id cannot have been reused. */
void signal_group(const run_job_t *job, int sig) {
  if (job->pgid > 0 && job->nalive > 0) kill(-job->pgid, sig);
}

void start_shutdown(run_job_t *job, int exit_code, int sig) {
  if (job->exit_code == 0) job->exit_code = exit_code;
  if (job->stopping) return;
  job->stopping = 1;
  job->kill_at = now_s() + job->grace_s;
  signal_group(job, sig);
}

/* ---------------------------------------------------------------- output relay (--prefix) */

/* Writes "[rank] " and one line in one write(), so lines of different ranks never mix.
 * add_newline ends a line that has none (a full buffer, or the text before EOF). */
static void stream_emit(int rank, const run_stream_t *s, const char *p, size_t n, int add_newline) {
  char out[32 + RUN_LINE_MAX + 1];
  size_t k = (size_t)snprintf(out, 32, "[%d] ", rank);
  memcpy(out + k, p, n);
  k += n;
  if (add_newline) out[k++] = '\n';
  write_all(s->out_fd, out, k);
}

/* Relays every complete line in the buffer; a full buffer without a newline goes out as a
 * line of its own. */
static void stream_consume(int rank, run_stream_t *s) {
  size_t start = 0;
  char *nl;
  while ((nl = memchr(s->buf + start, '\n', s->len - start)) != NULL) {
    size_t end = (size_t)(nl - s->buf) + 1;
    stream_emit(rank, s, s->buf + start, end - start, 0);
    start = end;
  }
  s->len -= start;
  memmove(s->buf, s->buf + start, s->len);
  if (s->len == sizeof s->buf) {
    stream_emit(rank, s, s->buf, s->len, 1);
    s->len = 0;
  }
}

static void stream_close(int rank, run_stream_t *s) {
  if (s->fd < 0) return;
  if (s->len > 0) stream_emit(rank, s, s->buf, s->len, 1);
  s->len = 0;
  close(s->fd);
  s->fd = -1;
}

/* Reads what is there; returns 1 if it got data, 0 if there was none or the stream ended. */
static int stream_pump(int rank, run_stream_t *s) {
  if (s->fd < 0) return 0;
  ssize_t n = read(s->fd, s->buf + s->len, sizeof s->buf - s->len);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (n <= 0) {
    stream_close(rank, s);
    return 0;
  }
  s->len += (size_t)n;
  stream_consume(rank, s);
  return 1;
}

/* After a rank is reaped: relay what it left in the pipe, then close it even if a process it
 * started still holds the write end. */
static void stream_drain(int rank, run_stream_t *s) {
  while (stream_pump(rank, s)) {
  }
  stream_close(rank, s);
}

/* ---------------------------------------------------------------- supervision */

static int find_rank(const run_job_t *job, pid_t pid) {
  for (int r = 0; r < job->nlaunched; r++)
    if (job->ranks[r].pid == pid) return r;
  return -1;
}

static void rank_exited(run_job_t *job, int r, int status) {
  run_rank_t *rk = &job->ranks[r];
  pid_t pid = rk->pid;
  rk->pid = 0;
  job->nalive--;
  stream_drain(r, &rk->out);
  stream_drain(r, &rk->err);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (job->stopping) return; /* an expected casualty of the shutdown */
  if (job->opt.keep_going) { /* report it; the others find out by themselves */
    if (job->exit_code == 0)
      job->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (WIFEXITED(status))
      fprintf(stderr, "tutti-run: rank %d (pid %d) exited with status %d\n", r, (int)pid,
              WEXITSTATUS(status));
    else
      fprintf(stderr, "tutti-run: rank %d (pid %d) was killed by signal %d (%s)\n", r, (int)pid,
              WTERMSIG(status), strsignal(WTERMSIG(status)));
    return;
  }
  if (WIFEXITED(status)) {
    fprintf(stderr, "tutti-run: rank %d (pid %d) exited with status %d\n", r, (int)pid,
            WEXITSTATUS(status));
    start_shutdown(job, WEXITSTATUS(status), SIGTERM);
  } else {
    int sig = WTERMSIG(status);
    fprintf(stderr, "tutti-run: rank %d (pid %d) was killed by signal %d (%s)\n", r, (int)pid, sig,
            strsignal(sig));
    start_shutdown(job, 128 + sig, SIGTERM);
  }
}

/* Reaps every exited rank. Before the last one is reaped (while its zombie still pins the
 * group id) whatever it left behind in the group is signalled: killed if the job failed,
 * asked to terminate if it succeeded. */
static void reap_ranks(run_job_t *job) {
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) return;
    if (job->nalive == 1) signal_group(job, job->exit_code ? SIGKILL : SIGTERM);
    int status;
    pid_t pid;
    do {
      pid = waitpid(si.si_pid, &status, 0);
    } while (pid < 0 && errno == EINTR);
    int r = find_rank(job, si.si_pid);
    if (pid > 0 && r >= 0) rank_exited(job, r, status);
  }
}

static void handle_signal(run_job_t *job, int sig) {
  if (sig == SIGCHLD) return; /* reap_ranks runs on every wakeup */
  if (sig == SIGHUP || sig == SIGQUIT) {
    signal_group(job, sig);
    return;
  }
  if (job->stopping) { /* asked again while stopping: no more grace */
    if (!job->killed) fprintf(stderr, "tutti-run: received signal %d, killing the job now\n", sig);
    job->kill_at = now_s();
    return;
  }
  fprintf(stderr, "tutti-run: received signal %d (%s), stopping the job\n", sig, strsignal(sig));
  start_shutdown(job, 128 + sig, sig);
}

static void drain_signal_pipe(run_job_t *job) {
  unsigned char sigs[64];
  ssize_t n;
  while ((n = read(run_sig_pipe[0], sigs, sizeof sigs)) > 0)
    for (ssize_t i = 0; i < n; i++) handle_signal(job, sigs[i]);
}

static void check_deadlines(run_job_t *job) {
  double t = now_s();
  if (!job->stopping && job->timeout_at > 0 && t >= job->timeout_at) {
    fprintf(stderr, "tutti-run: job timed out after %g seconds, stopping it\n", job->opt.timeout_s);
    start_shutdown(job, RUN_EXIT_TIMEOUT, SIGTERM);
  }
  if (job->stopping && !job->killed && t >= job->kill_at) {
    if (job->nalive > 0)
      fprintf(stderr, "tutti-run: %d rank(s) still running, sending SIGKILL\n", job->nalive);
    signal_group(job, SIGKILL);
    job->killed = 1;
  }
}

static int poll_timeout_ms(const run_job_t *job) {
  double next;
  if (job->stopping && !job->killed)
    next = job->kill_at;
  else if (!job->stopping && job->timeout_at > 0)
    next = job->timeout_at;
  else
    return -1;
  double ms = (next - now_s()) * 1000.0;
  if (ms <= 0) return 0;
  return ms >= INT_MAX ? INT_MAX : (int)ms + 1;
}

/* The poll set: the signal pipe, then every open rank stream. */
static int build_poll_set(run_job_t *job, struct pollfd *pfd, run_stream_t **who, int *rank_of) {
  int n = 0;
  pfd[n++] = (struct pollfd){.fd = run_sig_pipe[0], .events = POLLIN};
  for (int r = 0; r < job->nlaunched; r++) {
    run_stream_t *s[2] = {&job->ranks[r].out, &job->ranks[r].err};
    for (int k = 0; k < 2; k++) {
      if (s[k]->fd < 0) continue;
      who[n] = s[k];
      rank_of[n] = r;
      pfd[n++] = (struct pollfd){.fd = s[k]->fd, .events = POLLIN};
    }
  }
  return n;
}

void supervise(run_job_t *job) {
  int cap = 1 + 2 * job->opt.nranks;
  struct pollfd *pfd = calloc((size_t)cap, sizeof *pfd);
  run_stream_t **who = calloc((size_t)cap, sizeof *who);
  int *rank_of = calloc((size_t)cap, sizeof *rank_of);
  if (pfd == NULL || who == NULL || rank_of == NULL) die("out of memory");
  while (job->nalive > 0) {
    int n = build_poll_set(job, pfd, who, rank_of);
    if (poll(pfd, (nfds_t)n, poll_timeout_ms(job)) < 0 && errno != EINTR)
      die("poll: %s", strerror(errno));
    if (pfd[0].revents) drain_signal_pipe(job);
    for (int i = 1; i < n; i++)
      if (pfd[i].revents) stream_pump(rank_of[i], who[i]);
    reap_ranks(job);
    check_deadlines(job);
  }
  free(pfd);
  free(who);
  free(rank_of);
}
