// NCCL 2.28's surface on tutti. Compiled against NVIDIA's nccl.h from the CUDA toolkit (not
// tutti's header) and linked to tutti's libnccl.so.2 by file name, as a program built for NCCL:
// - every function the header declares (nccl* and the pnccl* profiling twins) is exported by
//   libnccl.so.2 and libtutti.so, the list taken from the header itself;
// - each pnccl* is the same code as its nccl*, and nccl* is a weak symbol (NCCL's scheme);
// - the 2.28 additions run: ncclCommInitRankScalable and ncclCommShrink give working
//   communicators, what tutti cannot do (windows, group simulation) is ncclInvalidUsage with a
//   message naming the function.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "in_child.h"

static std::vector<std::string> header_functions() {
  std::ifstream in(NVIDIA_NCCL_H);
  EXPECT_TRUE(in.good()) << "cannot read " << NVIDIA_NCCL_H;
  std::regex decl(R"(^\s*(ncclResult_t|const\s+char\s*\*|void)\s+(p?nccl\w+)\s*\()");
  std::vector<std::string> names;
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, decl)) names.push_back(m[2]);
  return names;
}

static void check_library_exports(const char *path) {
  std::vector<std::string> names = header_functions();
  std::set<std::string> unique(names.begin(), names.end());
  // NCCL 2.28.9 declares 41 functions and their 41 pnccl twins; a parse that finds far fewer
  // is a broken parse, not a pass.
  ASSERT_GE(unique.size(), 82u) << "parsed too few declarations from " << NVIDIA_NCCL_H;
  ASSERT_TRUE(unique.count("ncclCommInitRankScalable") && unique.count("pncclGroupSimulateEnd"));
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  for (const std::string &n : unique) {
    void *sym = dlsym(lib, n.c_str());
    EXPECT_NE(sym, nullptr) << path << " does not export " << n;
    if (n[0] == 'p' && sym) {
      void *base = dlsym(lib, n.c_str() + 1);
      EXPECT_EQ(sym, base) << n << " is not an alias of " << (n.c_str() + 1);
    }
  }
  dlclose(lib);
}

TEST(NcclSymbols, LibncclExportsEveryDeclaredFunction) {
  check_library_exports(LIBNCCL_PATH);
}

// The nccl* and pnccl* names a library defines (nm -D; versions after "@" cut).
static std::set<std::string> defined_nccl_symbols(const std::string &lib) {
  FILE *p = popen(("nm -D --defined-only " + lib).c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::set<std::string> names;
  if (!p) return names;
  const std::regex nccl("^p?nccl");
  char buf[512], type, name[400];
  unsigned long long addr;
  while (fgets(buf, sizeof(buf), p))
    if (sscanf(buf, "%llx %c %399s", &addr, &type, name) == 3 && std::regex_search(name, nccl))
      names.insert(std::string(name).substr(0, std::string(name).find('@')));
  pclose(p);
  return names;
}

// libtutti.so is the same code as the libnccl.so.2 this process has loaded, so it is not
// dlopen'ed next to it (its calls to its own exported functions could bind to libnccl.so.2's):
// read its dynamic symbol table instead, where every declared function must be defined.
TEST(NcclSymbols, LibtuttiExportsEveryDeclaredFunction) {
  std::vector<std::string> names = header_functions();
  ASSERT_GE(names.size(), 82u);
  std::set<std::string> defined = defined_nccl_symbols(LIBTUTTI_PATH);
  for (const std::string &n : names)
    EXPECT_TRUE(defined.count(n)) << LIBTUTTI_PATH << " does not export " << n;
}

#ifdef NVIDIA_LIBNCCL_PATH
// A program linked against NVIDIA's libnccl.so.2 and bound at load time (PyTorch 2.11's
// libtorch_cuda.so) needs every function that library exports, also those declared outside
// nccl.h (the device API's host functions): one missing name and the program does not load.
TEST(NcclSymbols, LibncclExportsEveryFunctionOfNvidiasLibrary) {
  std::set<std::string> theirs = defined_nccl_symbols(NVIDIA_LIBNCCL_PATH);
  // NCCL 2.28.9 exports 105 such names; far fewer is a broken read, not a pass.
  ASSERT_GE(theirs.size(), 100u) << "read too few names from " << NVIDIA_LIBNCCL_PATH;
  ASSERT_TRUE(theirs.count("ncclDevCommDestroy") && theirs.count("pncclTeamWorld"));
  std::set<std::string> ours = defined_nccl_symbols(LIBNCCL_PATH);
  for (const std::string &n : theirs)
    EXPECT_TRUE(ours.count(n)) << LIBNCCL_PATH << " does not export " << n << " (exported by "
                               << NVIDIA_LIBNCCL_PATH << ")";
}
#endif

// nccl* must be weak (a profiler's strong definition wins), pnccl* a plain global: read the
// dynamic symbol table of the library this program is linked to.
TEST(NcclSymbols, NcclIsWeakAndPncclIsGlobal) {
  Dl_info info;
  ASSERT_NE(dladdr((void *)&ncclAllReduce, &info), 0);
  std::string cmd = std::string("readelf --dyn-syms -W ") + info.dli_fname;
  FILE *p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[512];
  std::string weak, global;
  while (fgets(buf, sizeof(buf), p)) {
    std::string l(buf);
    if (std::regex_search(l, std::regex(R"(\bWEAK\b.* ncclAllReduce\s*$)"))) weak = l;
    if (std::regex_search(l, std::regex(R"(\bGLOBAL\b.* pncclAllReduce\s*$)"))) global = l;
  }
  pclose(p);
  EXPECT_FALSE(weak.empty()) << "ncclAllReduce is not WEAK in " << info.dli_fname;
  EXPECT_FALSE(global.empty()) << "pncclAllReduce is not GLOBAL in " << info.dli_fname;
}

TEST(NcclSymbols, VersionIsTheApiLevel) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION(2, 28, 0));  // tutti implements the 2.28 API, no patch level
  EXPECT_EQ(pncclGetVersion(&v), ncclSuccess);
}

// n ranks as threads: each thread runs fn(rank).
template <class F>
static void run_ranks(int n, F fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; r++) t.emplace_back(fn, r);
  for (auto &x : t) x.join();
}

// Sum of (i + r) over the ranks in `ranks`: integers, exact in int32.
static bool check_sum(ncclComm_t comm, const std::vector<int> &ranks, int me) {
  const int n = 1000;
  std::vector<int32_t> in(n), out(n, -1);
  for (int i = 0; i < n; i++) in[i] = i + me;
  if (pncclAllReduce(in.data(), out.data(), n, ncclInt32, ncclSum, comm, nullptr) != ncclSuccess)
    return false;
  int rsum = 0;
  for (int r : ranks) rsum += r;
  for (int i = 0; i < n; i++)
    if (out[i] != (int)ranks.size() * i + rsum) return false;
  return true;
}

TEST(Nccl228, InitRankScalableThenShrink) {
  const int n = 3, nid = 2;
  ncclUniqueId ids[nid];
  for (int k = 0; k < nid; k++) ASSERT_EQ(ncclGetUniqueId(&ids[k]), ncclSuccess);
  ncclComm_t comms[n] = {}, shrunk[n] = {};
  ncclResult_t init[n], shr[n];
  bool ok[n] = {}, ok2[n] = {};
  run_ranks(n, [&](int r) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    init[r] = ncclCommInitRankScalable(&comms[r], n, r, nid, ids, &cfg);
    if (init[r] != ncclSuccess) return;
    ok[r] = check_sum(comms[r], {0, 1, 2}, r);
    if (r == 1) return;  // excluded ranks do not call ncclCommShrink
    int excluded[1] = {1};
    shr[r] = ncclCommShrink(comms[r], excluded, 1, &shrunk[r], nullptr, NCCL_SHRINK_DEFAULT);
    if (shr[r] == ncclSuccess) ok2[r] = check_sum(shrunk[r], {0, 2}, r);
  });
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(init[r], ncclSuccess) << "rank " << r << ": " << ncclGetLastError(nullptr);
    EXPECT_TRUE(ok[r]) << "rank " << r;
  }
  for (int r : {0, 2}) {
    ASSERT_EQ(shr[r], ncclSuccess) << "rank " << r;
    int count = 0, rank = -1;
    EXPECT_EQ(ncclCommCount(shrunk[r], &count), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(shrunk[r], &rank), ncclSuccess);
    EXPECT_EQ(count, 2);
    EXPECT_EQ(rank, r == 0 ? 0 : 1);
    EXPECT_TRUE(ok2[r]) << "rank " << r;
    EXPECT_EQ(ncclCommDestroy(shrunk[r]), ncclSuccess);
  }
  for (int r = 0; r < n; r++) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
}

TEST(Nccl228, ShrinkChecksItsArguments) {
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  ncclComm_t out = nullptr;
  int self[1] = {0};
  EXPECT_EQ(ncclCommShrink(comm, self, 1, &out, nullptr, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("excludeRanksCount"), std::string::npos);
  EXPECT_EQ(ncclCommShrink(comm, nullptr, 0, &out, nullptr, 7), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("shrinkFlags"), std::string::npos);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(Nccl228, WhatTuttiCannotDoIsInvalidUsageWithAMessage) {
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  std::vector<char> buf(1 << 16);
  ncclWindow_t win = (ncclWindow_t)1;
  EXPECT_EQ(ncclCommWindowRegister(comm, buf.data(), buf.size(), &win, NCCL_WIN_COLL_SYMMETRIC),
            ncclInvalidUsage);
  EXPECT_EQ(win, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("ncclCommWindowRegister"), std::string::npos);
  EXPECT_EQ(ncclCommWindowDeregister(comm, win), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("ncclCommWindowDeregister"),
            std::string::npos);

  // Group simulation: refused, the group stays open and ncclGroupEnd still runs it.
  int32_t x = 5, y = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("ncclGroupSimulateEnd"), std::string::npos);
  ncclSimInfo_t bad = {};
  EXPECT_EQ(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(y, 5);

  // Revoke: accepted with flags 0, then the communicator refuses work until destroyed.
  EXPECT_EQ(ncclCommRevoke(comm, 1), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclSuccess);
  EXPECT_NE(ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit, below

// NCCL_DEBUG=VERSION prints the version banner (and nothing else) at the first init; the
// setting is re-read through ncclResetDebugInit, the file named by NCCL_DEBUG_FILE. In a child:
// the banner is printed once per process (so the test can be repeated in one process).
int banner_child(const char *path) {
  unsetenv("NCCL_DEBUG");
  ncclResetDebugInit();  // the logging settings read, with no NCCL_DEBUG
  setenv("NCCL_DEBUG", "VERSION", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
  ncclResetDebugInit();  // and again: now VERSION, into the file
  ncclComm_t comm;
  if (ncclCommInitAll(&comm, 1, nullptr) != ncclSuccess) return 1;
  return ncclCommDestroy(comm) == ncclSuccess ? 0 : 1;
}

TEST(Nccl228, DebugVersionPrintsTheBanner) {
  char path[] = "/tmp/tutti-banner-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_EQ(exit_code_in_child([&] { return banner_child(path); }), 0) << "init or destroy failed";
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  unlink(path);
  EXPECT_NE(text.find("tutti version " TUTTI_VERSION_EXPECTED ", NCCL API 2.28.0"),
            std::string::npos)
      << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
}

// The device API's host functions, declared as NVIDIA's nccl_device/core.h, barrier and
// all-to-all headers declare them (not in nccl.h).
struct DevTeam {
  int nRanks, rank, stride;
};
struct DevCommRequirements {
  void *resources, *teams;
  bool lsaMultimem;
  int counts[8];
};
extern "C" {
ncclResult_t ncclDevCommCreate(ncclComm_t, const DevCommRequirements *, void *outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t, const void *devComm);
DevTeam ncclTeamWorld(ncclComm_t);
DevTeam ncclTeamLsa(ncclComm_t);
DevTeam ncclTeamRail(ncclComm_t);
int ncclTeamRankToWorld(ncclComm_t, DevTeam, int rank);
int ncclTeamRankToLsa(ncclComm_t, DevTeam, int rank);
ncclResult_t ncclLsaBarrierCreateRequirement(DevTeam, int nBarriers, void *outHandle, void *outReq);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
}

static bool same(DevTeam a, DevTeam b) {
  return a.nRanks == b.nRanks && a.rank == b.rank && a.stride == b.stride;
}

// No device communicator (ncclInvalidUsage naming the function, bad arguments named); the
// teams as tutti runs the communicator: the world, each rank its own load/store team, the rail
// team the world again, and the device API's index arithmetic between them.
TEST(Nccl228, DeviceApiHostFunctionsRefuseOrAnswer) {
  ncclComm_t comms[3];
  ASSERT_EQ(ncclCommInitAll(comms, 3, nullptr), ncclSuccess);
  DevCommRequirements reqs = {};
  char devcomm[256];
  EXPECT_EQ(ncclDevCommCreate(comms[0], &reqs, devcomm), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("ncclDevCommCreate"), std::string::npos);
  EXPECT_EQ(ncclDevCommCreate(comms[0], nullptr, devcomm), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("reqs"), std::string::npos);
  EXPECT_EQ(ncclDevCommCreate(nullptr, &reqs, devcomm), ncclInvalidArgument);
  EXPECT_EQ(ncclDevCommDestroy(comms[0], devcomm), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("ncclDevCommDestroy"), std::string::npos);
  EXPECT_EQ(ncclLsaBarrierCreateRequirement(ncclTeamLsa(comms[0]), 1, devcomm, devcomm),
            ncclInvalidUsage);
  EXPECT_EQ(ncclLLA2ACalcSlots(1024, 16), -1);
  for (int r = 0; r < 3; r++) {
    EXPECT_TRUE(same(ncclTeamWorld(comms[r]), DevTeam{3, r, 1})) << "rank " << r;
    EXPECT_TRUE(same(ncclTeamLsa(comms[r]), DevTeam{1, 0, 1})) << "rank " << r;
    EXPECT_TRUE(same(ncclTeamRail(comms[r]), DevTeam{3, r, 1})) << "rank " << r;
    for (int peer = 0; peer < 3; peer++) {
      EXPECT_EQ(ncclTeamRankToWorld(comms[r], ncclTeamWorld(comms[r]), peer), peer);
      EXPECT_EQ(ncclTeamRankToWorld(comms[r], ncclTeamRail(comms[r]), peer), peer);
      EXPECT_EQ(ncclTeamRankToLsa(comms[r], ncclTeamWorld(comms[r]), peer), peer - r);
    }
    EXPECT_EQ(ncclTeamRankToWorld(comms[r], ncclTeamLsa(comms[r]), 0), r);
  }
  EXPECT_EQ(ncclTeamRankToWorld(nullptr, DevTeam{3, 0, 1}, 1), -1);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}
