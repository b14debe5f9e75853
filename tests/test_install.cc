// An install runs from its prefix, not from the build folder: `cmake --install` into a fresh
// temporary prefix, the prefix moved elsewhere (RUNPATH must be relative), then from there
// - tutti-run -np 2 all_reduce_perf -b 8 -e 1M (no #wrong, two ranks listed),
// - all_reduce_perf alone (one rank, no launcher),
// - a program compiled with `pkg-config --cflags --libs tutti` that includes <nccl.h>,
// - a CMake project using find_package(tutti),
// all with LD_LIBRARY_PATH unset and the build folder out of sight (the commands run in the
// prefix; nothing points back to the build tree).
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

static std::string run(const std::string &cmd, int *status) {
  std::string out;
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return "popen failed";
  char buf[4096];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

// The install is made once, by the first test that needs it; every test asserts that it
// worked (a failed install fails every test, it does not skip them).
class Install : public ::testing::Test {
 protected:
  static std::string prefix;  // the moved install
  static std::string tmp;
  static std::string install_log;
  static int install_status;

  static void install_once() {
    if (install_status >= 0) return;
    char tmpl[] = "/tmp/tutti-install-XXXXXX";
    if (!mkdtemp(tmpl)) {
      install_status = 1, install_log = "mkdtemp failed";
      return;
    }
    tmp = tmpl;
    install_log = run(std::string(CMAKE_COMMAND) + " --install " + BUILD_DIR + " --prefix " + tmp +
                          "/first && mv " + tmp + "/first " + tmp + "/moved",
                      &install_status);
    prefix = tmp + "/moved";
  }
  void SetUp() override {
    install_once();
    ASSERT_EQ(install_status, 0) << install_log;
  }
  static void TearDownTestSuite() {  // the next run of the suite (--gtest_repeat) installs again
    int st;
    if (!tmp.empty()) run("rm -rf " + tmp, &st);
    tmp.clear(), install_status = -1;
  }
  // Runs `cmd` in the prefix with a clean library path.
  static std::string in_prefix(const std::string &cmd, int *status) {
    return run("cd " + prefix + " && env -u LD_LIBRARY_PATH -u TUTTI_RANK -u RANK " + cmd, status);
  }
};
std::string Install::prefix, Install::tmp, Install::install_log;
int Install::install_status = -1;

TEST_F(Install, LayoutKeepsNcclHeaderAside) {
  EXPECT_EQ(access((prefix + "/include/tutti-nccl/nccl.h").c_str(), R_OK), 0);
  EXPECT_EQ(access((prefix + "/include/tutti.h").c_str(), R_OK), 0);
  EXPECT_NE(access((prefix + "/include/nccl.h").c_str(), F_OK), 0) << "nccl.h would collide";
  EXPECT_EQ(access((prefix + "/lib/tutti-nccl/libnccl.so.2").c_str(), R_OK), 0);
  int st;
  std::string out =
      run("readelf -d " + prefix + "/bin/tutti-run " + prefix + "/bin/all_reduce_perf", &st);
  EXPECT_NE(out.find("RUNPATH"), std::string::npos) << out;
  EXPECT_NE(out.find("$ORIGIN/../lib"), std::string::npos) << out;
}

TEST_F(Install, TuttiRunAllReducePerfFromThePrefix) {
  int st;
  std::string out = in_prefix("bin/tutti-run -np 2 bin/all_reduce_perf -b 8 -e 1M -f 4", &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_NE(out.find("#  Rank  1"), std::string::npos) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("1048576"), std::string::npos) << "the 1 MiB row is missing:\n" << out;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // no shared heap there
  // The installed tutti-run finds the installed shared heap (prefix/lib) and preloads it.
  std::string settings = in_prefix("bin/tutti-run -np 2 --print-settings true", &st);
  EXPECT_EQ(st, 0) << settings;
  EXPECT_NE(settings.find("LD_PRELOAD=" + prefix + "/lib/libtutti-heap.so"), std::string::npos)
      << settings;
#endif
}

TEST_F(Install, AllReducePerfAloneIsOneRank) {
  int st;
  std::string out = in_prefix("bin/all_reduce_perf -b 8 -e 64K -f 8", &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_NE(out.find("#  Rank  0"), std::string::npos) << out;
  EXPECT_EQ(out.find("#  Rank  1"), std::string::npos) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
}

static const char consumer_src[] =
    "#include <nccl.h>\n"
    "#include <stdio.h>\n"
    "int main(void) {\n"
    "  ncclComm_t c; int v = 0; double x[3] = {1, 2, 3}, y[3];\n"
    "  if (ncclGetVersion(&v) || ncclCommInitAll(&c, 1, NULL)) return 1;\n"
    "  if (ncclAllReduce(x, y, 3, ncclDouble, ncclSum, c, NULL)) return 2;\n"
    "  printf(\"consumer %d %s %g\\n\", v, tuttiVersionString(), y[0] + y[1] + y[2]);\n"
    "  return ncclCommDestroy(c);\n"
    "}\n";

TEST_F(Install, PkgConfigConsumer) {
  std::ofstream(tmp + "/consumer.c") << consumer_src;
  int st;
  std::string out = in_prefix("env PKG_CONFIG_PATH=" + prefix +
                                  "/lib/pkgconfig sh -c 'cc " CONSUMER_CFLAGS
                                  " -o ../consumer ../consumer.c "
                                  "$(pkg-config --cflags --libs tutti) -Wl,-rpath,$PWD/lib'",
                              &st);
  ASSERT_EQ(st, 0) << out;
  out = in_prefix("../consumer", &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_NE(out.find("consumer 22800"), std::string::npos) << out;
  EXPECT_NE(out.find(" 6\n"), std::string::npos) << out;
}

TEST_F(Install, CMakePackageConsumer) {
  std::string dir = tmp + "/cmake-consumer";
  int st;
  run("mkdir -p " + dir, &st);
  std::ofstream(dir + "/consumer.c") << consumer_src;
  std::ofstream(dir + "/CMakeLists.txt")
      << "cmake_minimum_required(VERSION 3.25)\nproject(c C)\nfind_package(tutti REQUIRED)\n"
         "add_executable(consumer consumer.c)\ntarget_link_libraries(consumer tutti::tutti)\n";
  std::string out = run(std::string(CMAKE_COMMAND) + " -S " + dir + " -B " + dir +
                            "/build -DCMAKE_PREFIX_PATH=" + prefix +
                            " -DCMAKE_C_FLAGS='" CONSUMER_CFLAGS "' > /dev/null && " +
                            CMAKE_COMMAND + " --build " + dir + "/build > /dev/null",
                        &st);
  ASSERT_EQ(st, 0) << out;
  out = in_prefix(dir + "/build/consumer", &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_NE(out.find("consumer 22800"), std::string::npos) << out;
}
