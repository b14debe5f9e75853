// The one settings reader (param.c): integers with K/M/G suffixes, numbers, lists, NCCL-style
// name lists, TUTTI_ before NCCL_, clear errors on garbage and overflow, and a fork's child
// reading them again.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core.h"
#include "in_child.h"
#include "scoped_env.h"

namespace {

int64_t parse_ok(const char *text) {
  int64_t v = -12345;
  const char *why = tutti_parse_int(text, &v);
  EXPECT_EQ(why, nullptr) << text << ": " << (why ? why : "");
  return v;
}

std::string parse_error(const char *text) {
  int64_t v = -12345;
  const char *why = tutti_parse_int(text, &v);
  EXPECT_EQ(v, -12345) << text << " must leave the output alone";
  return why ? why : "";
}

TEST(Settings, IntegersAndSuffixes) {
  EXPECT_EQ(parse_ok("123"), 123);
  EXPECT_EQ(parse_ok("-1"), -1);
  EXPECT_EQ(parse_ok("0x40"), 64);
  EXPECT_EQ(parse_ok("64K"), 64 * 1024);
  EXPECT_EQ(parse_ok("64k"), 64 * 1024);
  EXPECT_EQ(parse_ok("2M"), 2 * 1024 * 1024);
  EXPECT_EQ(parse_ok("2MB"), 2 * 1024 * 1024);
  EXPECT_EQ(parse_ok("1G"), int64_t(1) << 30);
  EXPECT_EQ(parse_ok("-3K"), -3 * 1024);
  EXPECT_EQ(parse_ok("100B"), 100);
  EXPECT_EQ(parse_ok("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(parse_ok("8589934591G"), int64_t(8589934591) << 30);  // the largest that fits
}

TEST(Settings, IntegerGarbageAndOverflowAreErrors) {
  EXPECT_EQ(parse_error(""), "is not an integer");
  EXPECT_EQ(parse_error("abc"), "is not an integer");
  EXPECT_EQ(parse_error(" 5"), "is not an integer");
  EXPECT_NE(parse_error("12abc").find("trailing text"), std::string::npos);
  EXPECT_NE(parse_error("64KK").find("trailing text"), std::string::npos);
  EXPECT_NE(parse_error("1.5").find("trailing text"), std::string::npos);
  EXPECT_NE(parse_error("9223372036854775808").find("out of range"), std::string::npos);
  EXPECT_NE(parse_error("-9223372036854775809").find("out of range"), std::string::npos);
  EXPECT_NE(parse_error("8589934592G").find("out of range"), std::string::npos);
  EXPECT_NE(parse_error("9007199254740992K").find("out of range"), std::string::npos);
}

TEST(Settings, Doubles) {
  double v = -1;
  EXPECT_EQ(tutti_parse_double("0.6", &v), nullptr);
  EXPECT_EQ(v, 0.6);
  EXPECT_EQ(tutti_parse_double("1e3", &v), nullptr);
  EXPECT_EQ(v, 1000.0);
  v = -1;
  EXPECT_NE(tutti_parse_double("abc", &v), nullptr);
  EXPECT_NE(tutti_parse_double("1.5x", &v), nullptr);
  EXPECT_NE(tutti_parse_double("1e999", &v), nullptr);
  EXPECT_NE(tutti_parse_double("nan", &v), nullptr);
  EXPECT_EQ(v, -1);
}

TEST(Settings, TuttiBeforeNcclAndEmptyIsUnset) {
  char which[64];
  EXPECT_EQ(tutti_getenv("SETTINGS_TEST_A"), nullptr);
  EXPECT_EQ(tutti_getenv_which("SETTINGS_TEST_A", which, sizeof(which)), nullptr);
  EXPECT_STREQ(which, "TUTTI_SETTINGS_TEST_A");
  Env nccl("NCCL_SETTINGS_TEST_A", "nccl");
  EXPECT_STREQ(tutti_getenv_which("SETTINGS_TEST_A", which, sizeof(which)), "nccl");
  EXPECT_STREQ(which, "NCCL_SETTINGS_TEST_A");
  {
    Env empty("TUTTI_SETTINGS_TEST_A", "");
    EXPECT_STREQ(tutti_getenv("SETTINGS_TEST_A"), "nccl");
  }
  Env tutti("TUTTI_SETTINGS_TEST_A", "tutti");
  EXPECT_STREQ(tutti_getenv_which("SETTINGS_TEST_A", which, sizeof(which)), "tutti");
  EXPECT_STREQ(which, "TUTTI_SETTINGS_TEST_A");
}

TEST(Settings, IntegerSettingNamesTheVariableOnError) {
  int64_t v = 0;
  EXPECT_EQ(tutti_setting_int("SETTINGS_TEST_B", 7, 0, 100, &v), ncclSuccess);
  EXPECT_EQ(v, 7);
  {
    Env e("NCCL_SETTINGS_TEST_B", "64");
    EXPECT_EQ(tutti_setting_int("SETTINGS_TEST_B", 7, 0, 100, &v), ncclSuccess);
    EXPECT_EQ(v, 64);
  }
  {
    Env e("NCCL_SETTINGS_TEST_B", "1K");  // 1024 > 100
    v = 5;
    EXPECT_EQ(tutti_setting_int("SETTINGS_TEST_B", 7, 0, 100, &v), ncclInvalidUsage);
    EXPECT_EQ(v, 5);
    std::string msg = tutti_last_error();
    EXPECT_NE(msg.find("NCCL_SETTINGS_TEST_B=\"1K\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("outside the allowed range"), std::string::npos) << msg;
  }
  Env e("TUTTI_SETTINGS_TEST_B", "12abc");
  EXPECT_EQ(tutti_setting_int("SETTINGS_TEST_B", 7, 0, 100, &v), ncclInvalidUsage);
  std::string msg = tutti_last_error();
  EXPECT_NE(msg.find("TUTTI_SETTINGS_TEST_B=\"12abc\" has trailing text"), std::string::npos)
      << msg;
}

TEST(Settings, DoubleSettingKeepsTheDefaultOnGarbage) {
  EXPECT_EQ(tutti_setting_double("SETTINGS_TEST_C", 0.6, 1e-9, 1e12), 0.6);
  {
    Env e("TUTTI_SETTINGS_TEST_C", "2.5");
    EXPECT_EQ(tutti_setting_double("SETTINGS_TEST_C", 0.6, 1e-9, 1e12), 2.5);
  }
  {
    Env e("TUTTI_SETTINGS_TEST_C", "fast");
    EXPECT_EQ(tutti_setting_double("SETTINGS_TEST_C", 0.6, 1e-9, 1e12), 0.6);
  }
  Env e("TUTTI_SETTINGS_TEST_C", "-1");  // below the range
  EXPECT_EQ(tutti_setting_double("SETTINGS_TEST_C", 0.6, 1e-9, 1e12), 0.6);
}

TUTTI_PARAM(SettingsTestGood, "SETTINGS_TEST_GOOD", 3)
TUTTI_PARAM(SettingsTestBad, "SETTINGS_TEST_BAD", 3)

TEST(Settings, CachedParamsReadOnceAndKeepTheDefaultOnGarbage) {
  {
    Env good("TUTTI_SETTINGS_TEST_GOOD", "16K");
    Env bad("TUTTI_SETTINGS_TEST_BAD", "16Q");
    EXPECT_EQ(tutti_param_SettingsTestGood(), 16 * 1024);
    EXPECT_EQ(tutti_param_SettingsTestBad(), 3);
  }
  Env later("TUTTI_SETTINGS_TEST_GOOD", "1");  // cached: read once
  EXPECT_EQ(tutti_param_SettingsTestGood(), 16 * 1024);
}

TUTTI_PARAM(SettingsTestFork, "SETTINGS_TEST_FORK", 3)

// Whether this process's log file in dir (TUTTI_DEBUG_FILE=dir/log.%p) holds a line with text.
bool own_log_has(const std::string &dir, const char *text) {
  std::ifstream f(dir + "/log." + std::to_string(getpid()));
  for (std::string line; std::getline(f, line);)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

// A fork's child reads the cached settings and the logging settings again, from the environment
// it has by then (a launcher that forks its ranks sets each one's own); the parent keeps its own.
// Exit codes: 1 the setting kept the parent's value, 2 no log file of the child's own; a lock
// left held across the fork hangs it (SIGALRM ends it: not an exit).
int forked_child(const std::string &dir) {
  alarm(10);
  setenv("TUTTI_SETTINGS_TEST_FORK", "5", 1);
  setenv("TUTTI_DEBUG", "INFO", 1);
  setenv("TUTTI_DEBUG_SUBSYS", "ALL", 1);
  setenv("TUTTI_DEBUG_FILE", (dir + "/log.%p").c_str(), 1);
  if (tutti_param_SettingsTestFork() != 5) return 1;
  INFO(SUB_ALL, "a line of the child");
  return own_log_has(dir, "a line of the child") ? 0 : 2;
}

TEST(Settings, AForksChildReadsTheSettingsAgain) {
  char tmpl[] = "/tmp/tutti-settings-fork-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    Env fork_setting("TUTTI_SETTINGS_TEST_FORK", "16K");
    EXPECT_EQ(tutti_param_SettingsTestFork(), 16 * 1024);
    INFO(SUB_ALL, "the parent has read its logging settings");
    EXPECT_EQ(exit_code_in_child([&] { return forked_child(dir); }), 0)
        << "1: the setting kept the parent's value, 2: no log file";
    std::string rm = "rm -f " + dir + "/log.*";
    EXPECT_EQ(system(rm.c_str()), 0);
  }
  EXPECT_EQ(tutti_param_SettingsTestFork(), 16 * 1024) << "the parent's setting stays cached";
  rmdir(dir.c_str());
}

TUTTI_PARAM(SettingsTestForkBusy, "SETTINGS_TEST_FORK_BUSY", 3)

// A grandchild forked while other threads log and re-read the logging settings: it reads a
// cached setting again and writes a line to its own log file. Exit codes: 1 the setting kept
// the parent's value, 2 its line is missing. A lock left held across the fork hangs it
// (SIGALRM ends it: not an exit).
int busy_grandchild(const std::string &dir) {
  alarm(10);
  setenv("TUTTI_SETTINGS_TEST_FORK_BUSY", "7", 1);
  if (tutti_param_SettingsTestForkBusy() != 7) return 1;
  INFO(SUB_ALL, "a line of the grandchild");
  return own_log_has(dir, "a line of the grandchild") ? 0 : 2;
}

// The process that forks: two threads write log lines and re-read the logging settings (which
// reopens the log file) without pause while it forks 100 grandchildren. Exit codes: 0 all
// fine, 1 the setting was not its default, 3 a grandchild failed, 4 the threads could not start; a
// fork that hangs ends the process (SIGALRM).
int fork_while_busy(const std::string &dir) {
  alarm(60);
  setenv("TUTTI_DEBUG", "INFO", 1);
  setenv("TUTTI_DEBUG_SUBSYS", "ALL", 1);
  setenv("TUTTI_DEBUG_FILE", (dir + "/log.%p").c_str(), 1);
  tutti_log_reinit();
  if (tutti_param_SettingsTestForkBusy() != 3) return 1;
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  try {
    busy.emplace_back([&] {
      while (!stop) INFO(SUB_ALL, "a line of a busy thread");
    });
    busy.emplace_back([&] {
      while (!stop) tutti_log_reinit();
    });
  } catch (...) {
    stop = true;
    for (auto &t : busy) t.join();
    return 4;
  }
  int bad = 0;
  for (int i = 0; i < 100 && !bad; i++)
    bad = exit_code_in_child([&] { return busy_grandchild(dir); }) != 0;
  stop = true;
  for (auto &t : busy) t.join();
  return bad ? 3 : 0;
}

// The logger and the settings hold their locks across a fork (fork handlers), so a fork while
// other threads are inside them neither hangs nor leaves the child a lock it cannot take.
TEST(Settings, ForksWhileOtherThreadsLogCompleteAndTheChildrenLogAndReadSettings) {
  char tmpl[] = "/tmp/tutti-settings-busy-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  EXPECT_EQ(exit_code_in_child([&] { return fork_while_busy(dir); }), 0)
      << "-1: a fork or a grandchild hung (SIGALRM), 1: the setting was not 3, 3: a grandchild "
         "failed, 4: no threads";
  std::string rm = "rm -rf " + dir;
  EXPECT_EQ(system(rm.c_str()), 0);
}

std::vector<std::string> list(const char *text) {
  std::vector<std::string> out;
  char tok[8];
  for (const char *c = text; tutti_list_next(&c, tok, sizeof(tok));) out.push_back(tok);
  return out;
}

TEST(Settings, Lists) {
  EXPECT_EQ(list(""), std::vector<std::string>{});
  EXPECT_EQ(list(" , ,"), std::vector<std::string>{});
  EXPECT_EQ(list("ring"), std::vector<std::string>{"ring"});
  EXPECT_EQ(list("a, b ,,c\t"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(list("toolongentry,x"), (std::vector<std::string>{"toolong", "x"}));  // truncated
}

// NCCL_SOCKET_IFNAME / NCCL_IB_HCA syntax; the same parser serves the socket address
// (net_addr.c, socket.c) and the topology's NIC choice (topo_decide.c).
TEST(Settings, NameLists) {
  EXPECT_TRUE(tutti_name_list_matches("eth", "eth0"));
  EXPECT_TRUE(tutti_name_list_matches("eth,ib", "ib0"));
  EXPECT_TRUE(tutti_name_list_matches("eth, ib", "ib0"));
  EXPECT_FALSE(tutti_name_list_matches("eth,ib", "ens5"));
  EXPECT_FALSE(tutti_name_list_matches("^docker,lo", "docker0"));
  EXPECT_FALSE(tutti_name_list_matches("^docker,lo", "lo"));
  EXPECT_TRUE(tutti_name_list_matches("^docker,lo", "eth0"));
  EXPECT_TRUE(tutti_name_list_matches("=eth0", "eth0"));
  EXPECT_FALSE(tutti_name_list_matches("=eth0", "eth01"));
  EXPECT_TRUE(tutti_name_list_matches("=mlx5_0:1,mlx5_1:1", "mlx5_1"));
  EXPECT_TRUE(tutti_name_list_matches("^=eth0", "eth01"));
  EXPECT_FALSE(tutti_name_list_matches("^=eth0", "eth0"));
  EXPECT_FALSE(tutti_name_list_matches("", "eth0"));
  EXPECT_TRUE(tutti_name_list_matches("^", "eth0"));
}

TEST(Settings, OneDatatypeTable) {
  // The sizes NCCL defines for its types, in enum order.
  const size_t want[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int t = 0; t < ncclNumTypes; t++)
    EXPECT_EQ(tuttiTypeSize(static_cast<ncclDataType_t>(t)), want[t]) << t;
  EXPECT_EQ(tuttiTypeSize(ncclNumTypes), 0u);
  EXPECT_EQ(tuttiTypeSize(static_cast<ncclDataType_t>(-1)), 0u);
}

TEST(Settings, Mod) {
  EXPECT_EQ(tutti_mod(-1, 5), 4);
  EXPECT_EQ(tutti_mod(-6, 5), 4);
  EXPECT_EQ(tutti_mod(7, 5), 2);
  EXPECT_EQ(tutti_mod(0, 1), 0);
}

}  // namespace
