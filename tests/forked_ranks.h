// Ranks as forked processes for protocol tests: forked() runs body(rank, comm) in n children and
// returns each child's exit code; CHILD_CHECK reports a failed condition from inside a child.
#ifndef TUTTI_TESTS_FORKED_RANKS_H
#define TUTTI_TESTS_FORKED_RANKS_H

#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "nccl.h"

// Runs body(rank, comm) in n forked ranks; returns each child's exit code (0: passed; the
// child prints why it failed). env(rank) is applied in the child before init.
inline std::vector<int> forked(int n, const std::function<void(int)> &env,
                               const std::function<int(int, ncclComm_t)> &body) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; rank++) {
    pid_t pid = fork();
    if (pid == 0) {
      env(rank);
      ncclComm_t comm;
      if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) _exit(90);
      int rc = body(rank, comm);
      if (rc == 0 && ncclCommDestroy(comm) != ncclSuccess) rc = 91;
      _exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
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
