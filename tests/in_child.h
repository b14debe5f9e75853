// A check run in a fork's child, for state the library keeps once per process (a loaded driver,
// a printed banner, settings read): the test process itself never holds it, so the tests do not
// depend on their order and can be repeated (--gtest_repeat).
#ifndef TUTTI_TESTS_IN_CHILD_H_
#define TUTTI_TESTS_IN_CHILD_H_

#include <sys/wait.h>
#include <unistd.h>

#include <functional>

// fn's return value as the child's exit code; -1 when the fork failed or the child did not exit
// (a signal).
inline int exit_code_in_child(const std::function<int()> &fn) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(fn());
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

#endif  // TUTTI_TESTS_IN_CHILD_H_
