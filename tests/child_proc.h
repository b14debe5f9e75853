// A child process of a namespace test (tutti-run under scripts/netns-cluster.sh) whose stdout and
// stderr are read as they come; shared by test_multihost.cc and test_chaos.cc.
#ifndef TUTTI_TESTS_CHILD_PROC_H_
#define TUTTI_TESTS_CHILD_PROC_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace child_proc {

inline double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

inline std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = '\0';
  return buf;
}

// A shell command's stdout.
inline std::string sh(const std::string &cmd) {
  std::string out;
  FILE *f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

struct Proc {
  pid_t pid = -1;
  int fd = -1, status = -1;
  std::string out;

  // Runs argv (argv[0] a path) with env ("NAME=value") added, stdout and stderr into one pipe.
  void start(const std::vector<std::string> &argv, const std::vector<std::string> &env) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    pid = fork();
    if (pid == 0) {
      dup2(p[1], 1);
      dup2(p[1], 2);
      close(p[0]);
      close(p[1]);
      for (auto &e : env) putenv(strdup(e.c_str()));
      std::vector<char *> a;
      for (auto &s : argv) a.push_back(strdup(s.c_str()));
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    close(p[1]);
    fd = p[0];
    fcntl(fd, F_SETFL, O_NONBLOCK);
  }
  // Reads output until pred(out) holds, the output ends (every writer gone) or the deadline.
  bool read_until(const std::function<bool(const std::string &)> &pred, double deadline) {
    while (!pred(out)) {
      if (fd < 0 || now_s() > deadline) return pred(out);
      pollfd pf = {fd, POLLIN, 0};
      poll(&pf, 1, 20);
      char buf[65536];
      ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0)
        out.append(buf, (size_t)n);
      else if (n == 0)
        close(fd), fd = -1;
    }
    return true;
  }
  // Reads until the output ends or the deadline; a process still writing then gets `sig` and 5 s
  // more to end. Reaps it (status). Returns the time the reading stopped.
  double finish(double deadline, int sig) {
    read_until([](const std::string &) { return false; }, deadline);
    double t = now_s();
    if (fd >= 0) {
      kill(pid, sig);
      read_until([](const std::string &) { return false; }, now_s() + 5);
    }
    waitpid(pid, &status, 0);
    if (fd >= 0) close(fd), fd = -1;
    return t;
  }
  ~Proc() {
    if (fd >= 0) close(fd);
    if (pid > 0 && status == -1) kill(pid, SIGKILL), waitpid(pid, &status, 0);
  }
};

}  // namespace child_proc

#endif
