// Ranks as forked processes for protocol tests: forked() runs body(rank, comm) in n children and
// returns each child's exit code; CHILD_CHECK reports a failed condition from inside a child.
#ifndef TUTTI_TESTS_FORKED_RANKS_H
#define TUTTI_TESTS_FORKED_RANKS_H

#include <dirent.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "nccl.h"

// Why the ranks are forked before their ids exist: ncclGetUniqueId starts the bootstrap root's
// thread, and a fork while another thread of the parent holds a lock (GCC 12's ASan allocator
// takes none of its locks around fork) leaves the child stuck on a lock no thread of it will
// release. So the parent waits until it runs alone (a previous test's threads may still be
// ending), forks every rank, and only then creates the ids and sends them down a pipe per child.

// Waits, at most limit_s, until this process has a single thread; returns whether it has.
inline bool wait_single_threaded(double limit_s = 5.0) {
  for (int waited_ms = 0;; waited_ms += 2) {
    int threads = 0;
    if (DIR *d = opendir("/proc/self/task")) {
      while (dirent *e = readdir(d)) threads += e->d_name[0] != '.';
      closedir(d);
    }
    if (threads == 1) return true;
    if (waited_ms >= limit_s * 1000) return false;
    usleep(2000);
  }
}

// Writes the ids to fd (a child's id pipe) and closes it.
inline bool send_ids(int fd, const std::vector<ncclUniqueId> &ids) {
  const char *p = reinterpret_cast<const char *>(ids.data());
  size_t left = ids.size() * sizeof(ncclUniqueId);
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n, left -= static_cast<size_t>(n);
  }
  close(fd);
  return left == 0;
}

// In a child: reads `count` ids from fd and closes it; false when the parent sent none (its
// ncclGetUniqueId failed, or it died).
inline bool recv_ids(int fd, size_t count, std::vector<ncclUniqueId> *ids) {
  ids->assign(count, ncclUniqueId{});
  char *p = reinterpret_cast<char *>(ids->data());
  size_t left = count * sizeof(ncclUniqueId);
  while (left > 0) {
    ssize_t n = read(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n, left -= static_cast<size_t>(n);
  }
  close(fd);
  return left == 0;
}

// Runs body(rank, comm) in n forked ranks; returns each child's exit code (0: passed; the
// child prints why it failed; 89: no id arrived). env(rank) is applied in the child before init.
inline std::vector<int> forked(int n, const std::function<void(int)> &env,
                               const std::function<int(int, ncclComm_t)> &body) {
  fflush(nullptr);
  wait_single_threaded();
  std::vector<pid_t> pids;
  std::vector<int> id_fds;
  for (int rank = 0; rank < n; rank++) {
    int p[2];
    if (pipe(p) != 0) break;
    pid_t pid = fork();
    if (pid == 0) {
      close(p[1]);
      for (int fd : id_fds) close(fd);
      std::vector<ncclUniqueId> id;
      if (!recv_ids(p[0], 1, &id)) _exit(89);
      env(rank);
      ncclComm_t comm;
      if (ncclCommInitRank(&comm, n, id[0], rank) != ncclSuccess) _exit(90);
      int rc = body(rank, comm);
      if (rc == 0 && ncclCommDestroy(comm) != ncclSuccess) rc = 91;
      _exit(rc);
    }
    close(p[0]);
    if (pid < 0) {
      close(p[1]);
      break;
    }
    pids.push_back(pid);
    id_fds.push_back(p[1]);
  }
  EXPECT_EQ(pids.size(), static_cast<size_t>(n)) << "fork failed";
  std::vector<ncclUniqueId> id(1);
  bool have_id = ncclGetUniqueId(&id[0]) == ncclSuccess;
  EXPECT_TRUE(have_id) << ncclGetLastError(nullptr);
  for (int fd : id_fds) have_id ? (void)send_ids(fd, id) : (void)close(fd);
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

// Every rank of a forked() run exited 0 (a failure names the rank).
inline void expect_all_ok(const std::vector<int> &codes) {
  for (size_t r = 0; r < codes.size(); r++) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// In a child of forked(): unless cond holds, print why (with `rank` in scope) and return code.
#define CHILD_CHECK(cond, code, ...)                     \
  do {                                                   \
    if (!(cond)) {                                       \
      fprintf(stderr, "rank %d: ", rank);                \
      fprintf(stderr, __VA_ARGS__);                      \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
      return code;                                       \
    }                                                    \
  } while (0)

#endif
