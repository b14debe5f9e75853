// Where the stream path's proxy thread runs (TUTTI_PROXY_CPUS, src/cpulist.c): protocol tests
// through the host emulation of the device (TUTTI_DEVICE_EMULATION=1), NOT GPU tests. A rank
// bound to a single CPU must not leave its proxy on that CPU, where the thread waiting for the
// stream spins (docs/gpu.md, "The proxy thread's CPUs"); inherit keeps it there; a CPU list
// puts it there; a malformed setting is an error naming the variable. Also the CPU-list parser
// that tutti-run's placement uses.
#include <dirent.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "cpulist.h"
#include "device.h"
#include "emu_context.h"
#include "nccl.h"
#include "scoped_env.h"

namespace {

// Before anything reads the settings (each is read once per process).
const int emulation_on = setenv("TUTTI_DEVICE_EMULATION", "1", 1);
const int small_off = setenv("TUTTI_SMALL_BYTES", "0", 1);  // every call through the proxy

std::string format(const cpu_set_t &set) {
  char buf[1024];
  tutti_cpulist_format(&set, buf, sizeof buf);
  return buf;
}

TEST(CpuList, ParsesAndFormatsLinuxLists) {
  cpu_set_t set;
  ASSERT_EQ(tutti_cpulist_parse("0-3,8,10-11", &set), 0);
  EXPECT_EQ(CPU_COUNT(&set), 7);
  EXPECT_TRUE(CPU_ISSET(3, &set));
  EXPECT_FALSE(CPU_ISSET(4, &set));
  EXPECT_EQ(format(set), "0-3,8,10-11");
  ASSERT_EQ(tutti_cpulist_parse("", &set), 0);
  EXPECT_EQ(CPU_COUNT(&set), 0);
  for (const char *bad : {"3-1", "a", "1,,2", "1-", "-1", "2,", "99999"})
    EXPECT_EQ(tutti_cpulist_parse(bad, &set), -1) << bad;
}

// The affinity of every proxy thread of this process ("tutti-proxy<rank>"), or of rank's alone.
std::vector<std::string> proxy_cpus(int rank = -1) {
  std::vector<std::string> out;
  DIR *d = opendir("/proc/self/task");
  if (!d) return out;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char path[320], name[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if (FILE *f = fopen(path, "re")) {
      if (!fgets(name, sizeof name, f)) name[0] = '\0';
      fclose(f);
    }
    std::string want = "tutti-proxy" + (rank < 0 ? std::string() : std::to_string(rank) + "\n");
    if (strncmp(name, want.c_str(), want.size()) != 0) continue;
    cpu_set_t set;
    if (sched_getaffinity(atoi(e->d_name), sizeof set, &set) == 0) out.push_back(format(set));
  }
  closedir(d);
  return out;
}

// The calling thread bound to one CPU (the first it may use) while this lives.
struct BoundToOneCpu {
  cpu_set_t saved, one;
  int cpu = -1;
  BoundToOneCpu() {
    EXPECT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
    for (int c = 0; c < CPU_SETSIZE && cpu < 0; c++)
      if (CPU_ISSET(c, &saved)) cpu = c;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    EXPECT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  }
  ~BoundToOneCpu() { sched_setaffinity(0, sizeof saved, &saved); }
};

// Two ranks (threads of this process) on the emulated device; one all-reduce on device buffers
// and streams starts their proxies. Returns the call's result; the proxies' CPUs in *cpus.
ncclResult_t run_once(std::vector<std::string> *cpus) {
  const int n = 2;
  const size_t k = 4099;
  std::vector<ncclComm_t> comms(n);
  ncclResult_t res = init_all_on_device(comms.data(), n);
  EXPECT_EQ(res, ncclSuccess);
  if (res != ncclSuccess) return res;
  std::vector<void *> streams(n), send(n), recv(n);
  for (int r = 0; r < n; r++) {
    streams[r] = device_emu_stream_create();
    send[r] = device_emu_alloc(k * 4);
    recv[r] = device_emu_alloc(k * 4);
    int32_t *s = static_cast<int32_t *>(device_emu_view(send[r]));
    for (size_t j = 0; j < k; j++) s[j] = (int32_t)(j * 7 + r + 1);
  }
  res = ncclGroupStart();
  for (int r = 0; r < n; r++) {
    ncclResult_t one = ncclAllReduce(send[r], recv[r], k, ncclInt32, ncclSum, comms[r],
                                     static_cast<cudaStream_t>(streams[r]));
    if (res == ncclSuccess) res = one;
  }
  ncclResult_t end = ncclGroupEnd();
  if (res == ncclSuccess) res = end;
  if (res == ncclSuccess) {
    for (int r = 0; r < n; r++) EXPECT_EQ(device_emu_stream_sync(streams[r], 60000), 0);
    size_t wrong = 0;
    for (int r = 0; r < n; r++) {
      const int32_t *v = static_cast<const int32_t *>(device_emu_view(recv[r]));
      for (size_t j = 0; j < k; j++) wrong += v[j] != (int32_t)(2 * (j * 7) + 3);
    }
    EXPECT_EQ(wrong, 0u) << "wrong sums";
    *cpus = proxy_cpus();
  }
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
    device_emu_stream_destroy(streams[r]);
    device_emu_free(send[r]);
    device_emu_free(recv[r]);
  }
  EXPECT_TRUE(proxy_cpus().empty()) << "a proxy thread outlived its communicator";
  return res;
}

// The CPUs the process may use besides `cpu`, as a list; "" when there are none.
std::string others(const cpu_set_t &allowed, int cpu) {
  cpu_set_t rest = allowed;
  CPU_CLR(cpu, &rest);
  return format(rest);
}

TEST(ProxyCpus, ABoundCallersProxyRunsOffItsCpu) {
  ASSERT_EQ(emulation_on, 0);
  ASSERT_EQ(small_off, 0);
  BoundToOneCpu bound;
  std::vector<std::string> cpus;
  ASSERT_EQ(run_once(&cpus), ncclSuccess);
  ASSERT_EQ(cpus.size(), 2u) << "one proxy thread per communicator, named tutti-proxy";
  if (others(bound.saved, bound.cpu).empty()) {  // a machine with one usable CPU: nowhere else
    for (const auto &c : cpus) EXPECT_EQ(c, std::to_string(bound.cpu));
    return;
  }
  for (const auto &c : cpus) {
    cpu_set_t set;
    ASSERT_EQ(tutti_cpulist_parse(c.c_str(), &set), 0) << c;
    EXPECT_FALSE(CPU_ISSET(bound.cpu, &set)) << "the proxy shares the bound CPU: " << c;
    EXPECT_GT(CPU_COUNT(&set), 0);
    cpu_set_t outside;
    CPU_AND(&outside, &set, &bound.saved);
    EXPECT_TRUE(CPU_EQUAL(&outside, &set)) << "the proxy runs on CPUs the process may not use";
  }
}

// Ranks driven by threads bound to different CPUs (as processes bound by a launcher are): no
// proxy goes to a CPU a rank is bound to; where no CPU is left, each stays on its own.
TEST(ProxyCpus, NoProxyGoesToAnotherRanksCpu) {
  cpu_set_t usable;
  ASSERT_EQ(sched_getaffinity(0, sizeof usable, &usable), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; c++)
    if (CPU_ISSET(c, &usable)) cpus.push_back(c);
  const int n = (int)cpus.size();  // 2, or 1 on a machine with one usable CPU
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const size_t k = 1031;
  std::vector<std::string> placed(n);
  std::vector<int> ok(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++)
    threads.emplace_back([&, r] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[r], &one);
      if (sched_setaffinity(0, sizeof one, &one) != 0) return;
      OnDevice on;
      ncclComm_t comm;
      if (ncclCommInitRank(&comm, n, id, r) != ncclSuccess) return;
      void *st = device_emu_stream_create(), *buf = device_emu_alloc(k * 4);
      int32_t *v = static_cast<int32_t *>(device_emu_view(buf));
      for (size_t j = 0; j < k; j++) v[j] = (int32_t)(j + r);
      int good = ncclAllReduce(buf, buf, k, ncclInt32, ncclSum, comm,
                               static_cast<cudaStream_t>(st)) == ncclSuccess &&
                 device_emu_stream_sync(st, 60000) == 0;
      for (size_t j = 0; j < k && good; j++) good = v[j] == (int32_t)(n * j + n * (n - 1) / 2);
      for (const auto &c : proxy_cpus(r)) placed[r] += c;  // this rank's proxy
      ok[r] = good && ncclCommDestroy(comm) == ncclSuccess;
      device_emu_free(buf);
      device_emu_stream_destroy(st);
    });
  for (auto &t : threads) t.join();
  for (int r = 0; r < n; r++) ASSERT_EQ(ok[r], 1) << "rank " << r << " failed or summed wrong";
  cpu_set_t taken;
  CPU_ZERO(&taken);
  for (int c : cpus) CPU_SET(c, &taken);
  cpu_set_t rest = usable;
  for (int c : cpus) CPU_CLR(c, &rest);
  for (int r = 0; r < n; r++) {
    SCOPED_TRACE("rank " + std::to_string(r) + " bound to CPU " + std::to_string(cpus[r]) +
                 ", its proxy on " + placed[r]);
    cpu_set_t set, both;
    ASSERT_FALSE(placed[r].empty()) << "no proxy thread named for this rank";
    ASSERT_EQ(tutti_cpulist_parse(placed[r].c_str(), &set), 0);
    CPU_AND(&both, &set, &taken);
    if (CPU_COUNT(&rest) == 0) {  // nowhere free: the proxy stays on its own rank's CPU
      EXPECT_EQ(placed[r], std::to_string(cpus[r]));
    } else {
      EXPECT_EQ(CPU_COUNT(&both), 0) << "a proxy on a CPU a rank is bound to";
    }
  }
}

TEST(ProxyCpus, InheritKeepsTheCallersCpuAndAListIsTaken) {
  BoundToOneCpu bound;
  std::vector<std::string> cpus;
  {
    Env e("TUTTI_PROXY_CPUS", "inherit");
    ASSERT_EQ(run_once(&cpus), ncclSuccess);
    ASSERT_EQ(cpus.size(), 2u);
    for (const auto &c : cpus) EXPECT_EQ(c, std::to_string(bound.cpu));
  }
  std::string list = others(bound.saved, bound.cpu);
  if (list.empty()) list = std::to_string(bound.cpu);  // one usable CPU: the list names it
  Env e("TUTTI_PROXY_CPUS", list.c_str());
  ASSERT_EQ(run_once(&cpus), ncclSuccess);
  ASSERT_EQ(cpus.size(), 2u);
  for (const auto &c : cpus) EXPECT_EQ(c, list);
}

TEST(ProxyCpus, AMalformedSettingIsAnErrorNamingIt) {
  for (const char *bad : {"fast", "2-1", ","}) {
    Env e("TUTTI_PROXY_CPUS", bad);
    std::vector<std::string> cpus;
    EXPECT_EQ(run_once(&cpus), ncclInvalidArgument) << bad;
    std::string msg = ncclGetLastError(nullptr);
    EXPECT_NE(msg.find("TUTTI_PROXY_CPUS"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  }
}

}  // namespace
