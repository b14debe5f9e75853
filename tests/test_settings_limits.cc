// Settings validation (issue 13, defect 9): values that overflow or make no sense are refused
// with a warning and the default applies. Settings are read once per process: each test reads
// a different one, and ctest runs every test in its own process.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core.h"

extern "C" {
int64_t bootstrap_init_timeout_ms(void);
TUTTI_PARAM_DECL(Timeout);
TUTTI_PARAM_DECL(InitTimeout);
TUTTI_PARAM_DECL(OneshotMaxBytes);
TUTTI_PARAM_DECL(ShmSlotBytes);
}

// 4294968 s is 4294968000 ms: as an int it wrapped to ~0.7 s (and 2147484 to a negative
// "no limit"); 0 and -1 failed at once.
TEST(Settings, InitTimeoutThatOverflowsMillisecondsIsRefused) {
  setenv("TUTTI_INIT_TIMEOUT", "4294968", 1);
  EXPECT_EQ(bootstrap_init_timeout_ms(), 120 * 1000);
}

TEST(Settings, InitTimeoutZeroIsRefused) {
  setenv("TUTTI_INIT_TIMEOUT", "0", 1);
  EXPECT_EQ(tutti_param_InitTimeout(), 120);
}

TEST(Settings, InitTimeoutAtTheLimitIsKept) {
  setenv("TUTTI_INIT_TIMEOUT", "2147483", 1);
  EXPECT_EQ(bootstrap_init_timeout_ms(), 2147483ll * 1000);
  EXPECT_GT((int)bootstrap_init_timeout_ms(), 0);
}

TEST(Settings, NegativeTimeoutIsRefused) {
  setenv("TUTTI_TIMEOUT", "-1", 1);
  EXPECT_EQ(tutti_param_Timeout(), 60);
}

TEST(Settings, TimeoutZeroMeansNoLimitAndIsKept) {
  setenv("TUTTI_TIMEOUT", "0", 1);
  EXPECT_EQ(tutti_param_Timeout(), 0);
}

// 2^40 G does not fit in 64 bits: it used to wrap to 0.
TEST(Settings, SuffixThatOverflowsIsRefused) {
  setenv("TUTTI_ONESHOT_MAX_BYTES", "1099511627776G", 1);
  EXPECT_EQ(tutti_param_OneshotMaxBytes(), 16384);
}

TEST(Settings, NumberThatOverflowsIsRefused) {
  setenv("TUTTI_SHM_SLOT_BYTES", "99999999999999999999", 1);
  EXPECT_EQ(tutti_param_ShmSlotBytes(), 128 * 1024);
}

TEST(Settings, SuffixesStillWork) {
  setenv("TUTTI_ONESHOT_MAX_BYTES", "3M", 1);
  EXPECT_EQ(tutti_param_OneshotMaxBytes(), 3 << 20);
}
