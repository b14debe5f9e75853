// Test harness, first half: ranks as processes or threads, their outcome, leftovers in
// /dev/shm. Datatypes and collective cases are in harness_cases.cc. See harness.h.
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "forked_ranks.h"

namespace th {

namespace {
const size_t kMaxMessages = 8;        // kept per rank
const size_t kMaxMessageBytes = 700;  // per message (a child's pipe never fills)
}  // namespace

const char *mode_name(Mode m) {
  return m == Mode::kProcs ? "processes" : "threads";
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double timeout_scale() {
  const char *s = getenv("TUTTI_TEST_TIMEOUT_SCALE");
  double v = s ? atof(s) : 1;
  return v >= 1 ? v : 1;
}

bool contains(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

void RankCtx::fail(const char *fmt, ...) {
  char buf[kMaxMessageBytes];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  for (char *c = buf; *c; c++)
    if (*c == '\n') *c = ' ';
  if (failures == 0)
    fprintf(stderr, "[%s rank %d/%d] FAIL: %s\n", mode_name(mode), rank, nranks, buf);
  failures++;
  if (messages.size() < kMaxMessages) messages.push_back(buf);
}

ThreadEnv::ThreadEnv(Mode mode, const Options &opt) {
  if (mode != Mode::kThreads) return;
  for (const auto &e : opt.env) {
    setenv(e.first.c_str(), e.second.c_str(), 1);
    names_.push_back(e.first);
  }
}

ThreadEnv::~ThreadEnv() {
  for (const std::string &n : names_) unsetenv(n.c_str());
}

void *shared_alloc(size_t bytes) {
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void shared_free(void *p, size_t bytes) {
  if (p != nullptr) munmap(p, bytes);
}

std::vector<std::string> shm_segments_of(const std::vector<pid_t> &pids) {
  std::vector<std::string> found;
  DIR *d = opendir("/dev/shm");
  if (d == nullptr) return found;
  while (dirent *e = readdir(d)) {
    int pid = 0;
    if (sscanf(e->d_name, "tutti-%d-", &pid) != 1) continue;
    for (pid_t p : pids)
      if (p == pid) found.push_back(std::string("/dev/shm/") + e->d_name);
  }
  closedir(d);
  return found;
}

// ---------------------------------------------------------------- processes

namespace {

[[noreturn]] void child_main(int rank, int nranks, const ncclUniqueId &id,
                             const std::vector<ncclUniqueId> &extra, const Body &body,
                             const Options &opt, int report_fd) {
  for (const auto &kv : opt.env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
  RankCtx ctx;
  ctx.rank = rank, ctx.nranks = nranks, ctx.mode = Mode::kProcs;
  ctx.id = id, ctx.extra_ids = extra;
  int code = 0;
  try {
    if (opt.before_init) opt.before_init(rank);
    if (opt.init) {
      ncclResult_t rc = ncclCommInitRank(&ctx.comm, nranks, id, rank);
      if (rc != ncclSuccess) {
        ctx.fail("ncclCommInitRank returned %d (%s): %s", (int)rc, ncclGetErrorString(rc),
                 ncclGetLastError(nullptr));
        code = 2;
      }
    }
    if (code == 0) {
      body(ctx);
      if (ctx.comm != nullptr) {
        ncclResult_t rc = ncclCommDestroy(ctx.comm);
        if (rc != ncclSuccess)
          ctx.fail("ncclCommDestroy returned %d: %s", (int)rc, ncclGetLastError(nullptr));
      }
    }
  } catch (const std::exception &e) {
    ctx.fail("exception: %s", e.what());
  } catch (...) {
    ctx.fail("unknown exception");
  }
  if (code == 0 && ctx.failures) code = 1;
  std::string report = std::to_string(ctx.failures) + "\n";
  for (const std::string &m : ctx.messages) report += m + "\n";
  ssize_t ignored = write(report_fd, report.data(), report.size());
  (void)ignored;
  close(report_fd);
  _exit(code);
}

void read_report(int fd, RankResult *rr) {
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  std::istringstream in(text);
  std::string line;
  if (std::getline(in, line)) rr->failures = atoi(line.c_str());
  while (std::getline(in, line)) rr->messages.push_back(line);
}

// The ranks are forked before their ids exist (forked_ranks.h says why) and wait for them on a
// pipe each; where no id can be made, their pipes close and they exit without starting.
void run_procs(int n, const Body &body, const Options &opt, RunResult *res) {
  fflush(nullptr);
  wait_single_threaded();
  std::vector<pid_t> pids;
  std::vector<int> fds, id_fds;
  for (int r = 0; r < n; r++) {
    int p[2], q[2];
    if (pipe(p) != 0) {
      res->setup_error = "pipe failed";
      break;
    }
    if (pipe(q) != 0) {
      close(p[0]), close(p[1]);
      res->setup_error = "pipe failed";
      break;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      close(q[1]);
      for (int fd : fds) close(fd);
      for (int fd : id_fds) close(fd);
      std::vector<ncclUniqueId> ids;
      if (!recv_ids(q[0], 1 + static_cast<size_t>(opt.extra_ids), &ids)) _exit(89);
      std::vector<ncclUniqueId> extra(ids.begin() + 1, ids.end());
      child_main(r, n, ids[0], extra, body, opt, p[1]);
    }
    close(p[1]);
    close(q[0]);
    if (pid < 0) {
      close(p[0]);
      close(q[1]);
      res->setup_error = "fork failed";
      break;
    }
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    pids.push_back(pid);
    fds.push_back(p[0]);
    id_fds.push_back(q[1]);
    res->ranks.push_back(RankResult{});
    res->ranks.back().rank = r;
    res->ranks.back().pid = pid;
  }
  std::vector<ncclUniqueId> ids(1 + static_cast<size_t>(opt.extra_ids));
  ncclResult_t rc = ncclSuccess;
  for (size_t i = 0; i < ids.size() && rc == ncclSuccess; i++) rc = ncclGetUniqueId(&ids[i]);
  if (rc != ncclSuccess && res->setup_error.empty())
    res->setup_error = std::string("ncclGetUniqueId failed: ") + ncclGetLastError(nullptr);
  for (int fd : id_fds) rc == ncclSuccess ? (void)send_ids(fd, ids) : (void)close(fd);
  if (opt.while_running && res->setup_error.empty()) opt.while_running(pids);
  double deadline = now_s() + opt.timeout_s * timeout_scale();
  size_t left = pids.size();
  std::vector<bool> reaped(pids.size(), false);
  while (left > 0) {
    bool late = now_s() > deadline;
    for (size_t i = 0; i < pids.size(); i++) {
      if (reaped[i]) continue;
      if (late) {
        kill(pids[i], SIGKILL);
        res->ranks[i].timed_out = true;
      }
      int status = 0;
      pid_t got = waitpid(pids[i], &status, late ? 0 : WNOHANG);
      if (got != pids[i]) continue;
      reaped[i] = true;
      left--;
      if (WIFEXITED(status)) res->ranks[i].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) res->ranks[i].term_signal = WTERMSIG(status);
    }
    if (left > 0) usleep(2000);
  }
  for (size_t i = 0; i < fds.size(); i++) read_report(fds[i], &res->ranks[i]);
}

// ---------------------------------------------------------------- threads

void run_threads(int n, const Body &body, const Options &opt, RunResult *res) {
  std::vector<ncclComm_t> comms(n, nullptr);
  ncclUniqueId id{};
  std::vector<ncclUniqueId> extra(opt.extra_ids);
  ncclResult_t rc = opt.init ? ncclCommInitAll(comms.data(), n, nullptr) : ncclGetUniqueId(&id);
  for (int i = 0; i < opt.extra_ids && rc == ncclSuccess; i++) rc = ncclGetUniqueId(&extra[i]);
  if (rc != ncclSuccess) {
    res->setup_error = std::string(opt.init ? "ncclCommInitAll" : "ncclGetUniqueId") +
                       " failed: " + ncclGetLastError(nullptr);
    for (ncclComm_t c : comms) ncclCommDestroy(c);
    return;
  }
  struct Sync {
    std::mutex m;
    std::condition_variable cv;
    int done = 0;
  };
  auto sync = std::make_shared<Sync>();
  std::vector<RankCtx> ctxs(n);
  std::vector<std::atomic<bool>> finished(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    RankCtx &c = ctxs[r];
    c.rank = r, c.nranks = n, c.mode = Mode::kThreads, c.comm = comms[r];
    c.id = id, c.extra_ids = extra;
    finished[r] = false;
    threads.emplace_back([&, r] {
      try {
        if (opt.before_init) opt.before_init(r);
        body(ctxs[r]);
      } catch (const std::exception &e) {
        ctxs[r].fail("exception: %s", e.what());
      } catch (...) {
        ctxs[r].fail("unknown exception");
      }
      std::lock_guard<std::mutex> lock(sync->m);
      finished[r] = true;
      sync->done++;
      sync->cv.notify_all();
    });
  }
  std::vector<bool> aborted(n, false), timed_out(n, false);
  {
    std::unique_lock<std::mutex> lock(sync->m);
    auto until = [&](double s) {
      return sync->cv.wait_for(lock, std::chrono::duration<double>(s),
                               [&] { return sync->done == n; });
    };
    if (!until(opt.timeout_s * timeout_scale())) {
      lock.unlock();
      for (int r = 0; r < n; r++) {
        if (finished[r]) continue;
        timed_out[r] = true;
        fprintf(stderr, "[threads rank %d/%d] still running after %.0f s: aborting its comm\n", r,
                n, opt.timeout_s * timeout_scale());
        if (comms[r] != nullptr) ncclCommAbort(comms[r]), aborted[r] = true;
      }
      lock.lock();
      if (!until(15)) {
        fprintf(stderr,
                "tutti test harness: threads did not return even after ncclCommAbort; "
                "aborting the test program\n");
        fflush(stderr);
        std::abort();
      }
    }
  }
  for (std::thread &t : threads) t.join();
  res->ranks.resize(n);
  for (int r = 0; r < n; r++) {
    RankResult &rr = res->ranks[r];
    rr.rank = r, rr.pid = getpid(), rr.exit_code = 0, rr.timed_out = timed_out[r];
    if (ctxs[r].comm != nullptr && !aborted[r]) {  // the body may have destroyed it (nullptr)
      ncclResult_t d = ncclCommDestroy(ctxs[r].comm);
      if (d != ncclSuccess)
        ctxs[r].fail("ncclCommDestroy returned %d: %s", (int)d, ncclGetLastError(nullptr));
    }
    rr.failures = ctxs[r].failures;
    rr.messages = ctxs[r].messages;
  }
}

}  // namespace

RunResult run_ranks(Mode mode, int nranks, const Body &body, const Options &opt) {
  RunResult res;
  res.mode = mode, res.nranks = nranks;
  double t0 = now_s();
  if (mode == Mode::kProcs)
    run_procs(nranks, body, opt, &res);
  else
    run_threads(nranks, body, opt, &res);
  std::vector<pid_t> pids;
  for (const RankResult &r : res.ranks) pids.push_back(r.pid);
  res.leaked_shm = shm_segments_of(pids);
  res.seconds = now_s() - t0;
  return res;
}

bool RunResult::ok() const {
  if (!setup_error.empty() || !leaked_shm.empty() || static_cast<int>(ranks.size()) != nranks)
    return false;
  for (const RankResult &r : ranks)
    if (r.exit_code != 0 || r.term_signal || r.timed_out || r.failures) return false;
  return true;
}

std::string RunResult::describe() const {
  std::ostringstream o;
  o << nranks << " ranks as " << mode_name(mode) << ", " << seconds << " s";
  if (!setup_error.empty()) o << "\n  setup: " << setup_error;
  if (static_cast<int>(ranks.size()) != nranks)
    o << "\n  only " << ranks.size() << " ranks started";
  for (const std::string &s : leaked_shm) o << "\n  left behind: " << s;
  for (const RankResult &r : ranks) {
    if (r.exit_code == 0 && !r.term_signal && !r.timed_out && !r.failures) continue;
    o << "\n  rank " << r.rank << " (pid " << r.pid << "):";
    if (r.timed_out) o << " TIMED OUT (killed/aborted)";
    if (r.term_signal)
      o << " killed by signal " << r.term_signal;
    else if (r.exit_code == 2)
      o << " ncclCommInitRank failed";
    else if (r.exit_code > 0)
      o << " exit code " << r.exit_code;
    o << ", " << r.failures << " failure(s)";
    for (const std::string &m : r.messages) o << "\n    " << m;
  }
  return o.str();
}

bool expect_ranks_ok(const RunResult &r, const std::string &what) {
  bool ok = r.ok();
  EXPECT_TRUE(ok) << what << ": " << r.describe();
  return ok;
}

bool run_ranks_ok(Mode mode, int nranks, const Body &body, const Options &opt,
                  const std::string &what) {
  RunResult r = run_ranks(mode, nranks, body, opt);
  if (getenv("TUTTI_TEST_VERBOSE"))
    fprintf(stderr, "  [%s: %s]\n", what.c_str(), r.describe().c_str());
  return expect_ranks_ok(r, what);
}

uint64_t hash_bytes(const void *p, size_t n) {
  const unsigned char *b = static_cast<const unsigned char *>(p);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace th
