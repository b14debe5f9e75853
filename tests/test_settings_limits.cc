// Settings validation (issue 13, defect 9): values that overflow or make no sense are refused
// with a warning and the default applies. Settings are read once per process and again in a
// fork's child, so each check reads its setting in a child of its own (the order of the tests
// does not matter, nor does running them all in one process).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "core.h"

extern "C" {
int64_t bootstrap_init_timeout_ms(void);
TUTTI_PARAM_DECL(Timeout);
TUTTI_PARAM_DECL(OneshotMaxBytes);
TUTTI_PARAM_DECL(ShmSlotBytes);
}

namespace {

// What get() gives in a fork's child whose environment has env=value.
int64_t read_in_child(const char *env, const char *value, int64_t (*get)()) {
  int fd[2];
  if (pipe(fd) != 0) return INT64_MIN;
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    setenv(env, value, 1);
    int64_t v = get();
    _exit(write(fd[1], &v, sizeof(v)) == sizeof(v) ? 0 : 1);
  }
  close(fd[1]);
  int64_t v = INT64_MIN;  // the child wrote nothing
  if (pid < 0 || read(fd[0], &v, sizeof(v)) != sizeof(v)) v = INT64_MIN;
  close(fd[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  return v;
}

// 4294968 s is 4294968000 ms: as an int it wrapped to ~0.7 s (and 2147484 to a negative
// "no limit"); 0 and -1 failed at once.
TEST(Settings, InitTimeoutThatOverflowsMillisecondsIsRefused) {
  EXPECT_EQ(read_in_child("TUTTI_INIT_TIMEOUT", "4294968", bootstrap_init_timeout_ms), 120 * 1000);
}

TEST(Settings, InitTimeoutZeroIsRefused) {
  EXPECT_EQ(read_in_child("TUTTI_INIT_TIMEOUT", "0", bootstrap_init_timeout_ms), 120 * 1000);
}

TEST(Settings, InitTimeoutAtTheLimitIsKept) {
  int64_t ms = read_in_child("TUTTI_INIT_TIMEOUT", "2147483", bootstrap_init_timeout_ms);
  EXPECT_EQ(ms, 2147483ll * 1000);
  EXPECT_GT((int)ms, 0);
}

TEST(Settings, NegativeTimeoutIsRefused) {
  EXPECT_EQ(read_in_child("TUTTI_TIMEOUT", "-1", tutti_param_Timeout), 60);
}

TEST(Settings, TimeoutZeroMeansNoLimitAndIsKept) {
  EXPECT_EQ(read_in_child("TUTTI_TIMEOUT", "0", tutti_param_Timeout), 0);
}

// 2^40 G does not fit in 64 bits: it used to wrap to 0.
TEST(Settings, SuffixThatOverflowsIsRefused) {
  EXPECT_EQ(read_in_child("TUTTI_ONESHOT_MAX_BYTES", "1099511627776G", tutti_param_OneshotMaxBytes),
            16384);
}

TEST(Settings, NumberThatOverflowsIsRefused) {
  EXPECT_EQ(read_in_child("TUTTI_SHM_SLOT_BYTES", "99999999999999999999", tutti_param_ShmSlotBytes),
            128 * 1024);
}

TEST(Settings, SuffixesStillWork) {
  EXPECT_EQ(read_in_child("TUTTI_ONESHOT_MAX_BYTES", "3M", tutti_param_OneshotMaxBytes), 3 << 20);
}

}  // namespace
