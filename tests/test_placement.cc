// The topology's decisions applied, not only printed:
//   - the socket address (net_addr.c): the topology's NIC gives the address the bootstrap and
//     tcp listen on, unless TUTTI_SOCKET_IFNAME / NCCL_SOCKET_IFNAME says otherwise; shown by
//     getsockname on the socket listened on, and in real ranks (placement_rank under tutti-run,
//     one fake host per rank so that they talk over tcp) by the address of every socket they
//     listen on and the INFO line with the reason;
//   - TUTTI_BIND=auto: each rank's CPU affinity (sched_getaffinity in the rank) is the binding
//     the topology chose for it; none (the default) leaves the launcher's.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "net_addr.h"
#include "scoped_env.h"
#include "topology/topo.h"
#include "topology/topo_internal.h"

namespace {

const char *const kSettings[] = {"TUTTI_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TUTTI_BIND",
                                 "NCCL_BIND",           "TUTTI_TOPO_FILE",    "NCCL_TOPO_FILE",
                                 "HWLOC_THISSYSTEM",    "TUTTI_HOSTID"};

std::string ip_of(const sock_addr_t &a) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.sa.sa_family == AF_INET6)
    inet_ntop(AF_INET6, &a.sin6.sin6_addr, host, sizeof(host));
  else
    inet_ntop(AF_INET, &a.sin.sin_addr, host, sizeof(host));
  return host;
}

// What a socket bound to the chosen address really listens on.
std::string listened_ip(sock_addr_t addr) {
  int fd = -1;
  EXPECT_EQ(sock_listen(&addr, &fd), ncclSuccess) << tutti_last_error();
  sock_addr_t got{};
  socklen_t len = sizeof(got);
  EXPECT_EQ(getsockname(fd, &got.sa, &len), 0);
  EXPECT_NE(got.sa.sa_family == AF_INET6 ? got.sin6.sin6_port : got.sin.sin_port, 0);
  close(fd);
  return ip_of(got);
}

struct Choice {
  ncclResult_t res;
  sock_addr_t addr;
  std::string ifname, reason;
};

Choice choose(const topo_t *t) {
  Choice c{};
  char ifname[64] = "", reason[2048] = "";
  c.res = net_choose_local_addr(t, &c.addr, ifname, sizeof(ifname), reason, sizeof(reason));
  c.ifname = ifname, c.reason = reason;
  return c;
}

// The address the old rule (first interface up, not loopback or docker) gives here.
std::string first_interface(std::string *ip) {
  sock_addr_t a{};
  char ifname[64] = "lo";
  int found = 0;
  EXPECT_EQ(sock_find_addr(nullptr, &a, ifname, sizeof(ifname), &found), ncclSuccess);
  *ip = found ? ip_of(a) : "127.0.0.1";
  return found ? ifname : "lo";
}

class NetAddr : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char *s : kSettings) unsetenv(s);
  }
  void TearDown() override {
    topo_free(t_);
    for (const char *s : kSettings) unsetenv(s);
  }
  topo_t *t_ = nullptr;
};

TEST_F(NetAddr, TheTopologysNicGivesTheAddress) {
  ASSERT_EQ(topo_load_live(&t_), ncclSuccess) << tutti_last_error();
  topo_nic_choice_t nic;
  topo_choose_nic(t_, TOPO_NIC_SOCKET, -1, nullptr, &nic);
  sock_addr_t nic_addr{};
  char nic_if[64];
  int found = 0;
  std::string exact = std::string("=") + nic.name;
  if (nic.nic >= 0) {
    ASSERT_EQ(sock_find_addr(exact.c_str(), &nic_addr, nic_if, sizeof(nic_if), &found),
              ncclSuccess);
  }
  Choice c = choose(t_);
  ASSERT_EQ(c.res, ncclSuccess) << tutti_last_error();
  if (found) {  // the decision is applied: that NIC's address, on a real socket
    EXPECT_EQ(c.ifname, nic.name) << c.reason;
    EXPECT_EQ(c.reason, std::string("the topology's NIC: ") + nic.reason);
    EXPECT_EQ(listened_ip(c.addr), ip_of(nic_addr));
  } else {  // no NIC in hwloc with an address here: the first interface, with the reason
    std::string ip, name = first_interface(&ip);
    EXPECT_EQ(c.ifname, name) << c.reason;
    EXPECT_EQ(listened_ip(c.addr), ip);
    EXPECT_NE(c.reason.find(nic.nic >= 0 ? "no address here" : "topology: "), std::string::npos)
        << c.reason;
  }
}

TEST_F(NetAddr, IfnameSettingSaysOtherwise) {
  ASSERT_EQ(topo_load_live(&t_), ncclSuccess) << tutti_last_error();
  {
    Env e("TUTTI_SOCKET_IFNAME", "lo");  // loopback is never on PCI: not the topology's
    Choice c = choose(t_);
    ASSERT_EQ(c.res, ncclSuccess) << tutti_last_error();
    EXPECT_EQ(c.ifname, "lo");
    EXPECT_EQ(listened_ip(c.addr), "127.0.0.1");
    EXPECT_EQ(c.reason.rfind("first interface matching TUTTI_SOCKET_IFNAME=lo; topology: ", 0), 0u)
        << c.reason;
  }
  Env e("NCCL_SOCKET_IFNAME", "=lo");
  Choice c = choose(t_);
  ASSERT_EQ(c.res, ncclSuccess) << tutti_last_error();
  EXPECT_EQ(listened_ip(c.addr), "127.0.0.1");
  EXPECT_NE(c.reason.find("NCCL_SOCKET_IFNAME==lo"), std::string::npos) << c.reason;
}

TEST_F(NetAddr, IfnameMatchingNothingIsInvalidUsage) {
  ASSERT_EQ(topo_load_live(&t_), ncclSuccess) << tutti_last_error();
  Env e("TUTTI_SOCKET_IFNAME", "nosuchif");
  Choice c = choose(t_);
  EXPECT_EQ(c.res, ncclInvalidUsage);
  EXPECT_NE(std::string(tutti_last_error()).find("TUTTI_SOCKET_IFNAME=\"nosuchif\""),
            std::string::npos)
      << tutti_last_error();
}

// The topology decides even against the old rule: the cloud VM fixture with its NIC renamed
// "lo" makes loopback the topology's NIC, so the address is 127.0.0.1 where the first
// interface up (the rule without a topology) would not be loopback.
TEST_F(NetAddr, TheTopologysChoiceWinsOverTheFirstInterface) {
  std::string src = std::string(TUTTI_FIXTURES_DIR) + "/cloud-vm-2vcpu.xml";
  std::ifstream in(src);
  std::stringstream xml;
  xml << in.rdbuf();
  std::string text = xml.str();
  size_t at = text.find("name=\"eth0\" osdev_type=\"2\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 11, "name=\"lo\"");
  char path[] = "/tmp/tutti-tidy18-topo-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  ncclResult_t loaded = topo_load_xml(path, &t_);
  unlink(path);
  ASSERT_EQ(loaded, ncclSuccess) << tutti_last_error();
  std::string ip, name = first_interface(&ip);
  ASSERT_NE(name, "lo") << "this machine has no interface up but loopback";
  Choice c = choose(t_);
  ASSERT_EQ(c.res, ncclSuccess) << tutti_last_error();
  EXPECT_EQ(c.ifname, "lo") << c.reason;
  EXPECT_EQ(listened_ip(c.addr), "127.0.0.1");
  EXPECT_EQ(c.reason.rfind("the topology's NIC: lo is the closest", 0), 0u) << c.reason;
}

TEST_F(NetAddr, ANicWithoutAnAddressHereFallsBack) {
  // The DGX fixture's NIC closest to the whole machine is not an interface of this machine.
  std::string path = std::string(TUTTI_FIXTURES_DIR) + "/dgx-h100.xml";
  ASSERT_EQ(topo_load_xml(path.c_str(), &t_), ncclSuccess) << tutti_last_error();
  topo_nic_choice_t nic;
  topo_choose_nic(t_, TOPO_NIC_SOCKET, -1, nullptr, &nic);
  ASSERT_GE(nic.nic, 0) << nic.reason;
  ASSERT_EQ(if_nametoindex(nic.name), 0u) << nic.name << " exists here: pick another fixture";
  Choice c = choose(t_);
  ASSERT_EQ(c.res, ncclSuccess) << tutti_last_error();
  std::string ip, name = first_interface(&ip);
  EXPECT_EQ(c.ifname, name);
  EXPECT_EQ(listened_ip(c.addr), ip);
  EXPECT_NE(c.reason.find(std::string("the topology's NIC ") + nic.name +
                          " is down or has no address here"),
            std::string::npos)
      << c.reason;
}

TEST_F(NetAddr, WithoutATopology) {
  Choice c = choose(nullptr);
  ASSERT_EQ(c.res, ncclSuccess) << tutti_last_error();
  std::string ip, name = first_interface(&ip);
  EXPECT_EQ(c.ifname, name);
  EXPECT_NE(c.reason.find("no topology"), std::string::npos) << c.reason;
}

// ---- the binding a host's ranks get (pure, on a fixture: two sockets) ----

std::string package_cpus(const topo_t *t, int i) {
  hwloc_obj_t p = hwloc_get_obj_by_type(t->hw, HWLOC_OBJ_PACKAGE, (unsigned)i);
  char buf[256] = "";
  if (p) hwloc_bitmap_list_snprintf(buf, sizeof(buf), p->cpuset);
  return buf;
}

TEST_F(NetAddr, BindingSharesOfAHostsRanks) {
  std::string path = std::string(TUTTI_FIXTURES_DIR) + "/pcie-4gpu-2socket.xml";
  ASSERT_EQ(topo_load_xml(path.c_str(), &t_), ncclSuccess) << tutti_last_error();
  ASSERT_EQ(hwloc_get_nbobjs_by_type(t_->hw, HWLOC_OBJ_PACKAGE), 2);
  for (int r = 0; r < 2; r++) {  // two ranks: a socket each, memory on its node
    topo_binding_t b;
    topo_choose_binding_local(t_, -1, r, 2, &b);
    EXPECT_EQ(b.cpuset, package_cpus(t_, r)) << b.reason;
    EXPECT_EQ(b.cpubind, 1);
    EXPECT_EQ(b.membind, 1);
    EXPECT_GE(b.numa, 0);
    EXPECT_NE(
        std::string(b.reason).find("local rank " + std::to_string(r) + " of 2 takes its share"),
        std::string::npos)
        << b.reason;
  }
  topo_binding_t one, plain;  // a single rank keeps everything, as topo_choose_binding says
  topo_choose_binding_local(t_, -1, 0, 1, &one);
  topo_choose_binding(t_, -1, nullptr, &plain);
  EXPECT_STREQ(one.cpuset, plain.cpuset);
  EXPECT_STREQ(one.reason, plain.reason);
  topo_binding_t gpu, gpu_plain;  // a rank with a GPU: its GPU's node, whatever the split
  topo_choose_binding_local(t_, 3, 0, 2, &gpu);
  topo_choose_binding(t_, 3, nullptr, &gpu_plain);
  EXPECT_STREQ(gpu.cpuset, gpu_plain.cpuset);
}

// ---- real ranks under tutti-run ----

struct RankRun {
  int status = -1;
  std::string out;
};

// Runs placement_rank under tutti-run -n 2 --bind none (the ranks start with this process's
// binding; environment of this process plus `env`), output and errors together.
RankRun run_ranks(const std::string &env, const char *arg = "") {
  std::string cmd = "env " + env +
                    " timeout 90 " TUTTI_RUN_PATH " -n 2 --bind none " PLACEMENT_RANK_PATH " " +
                    arg + " 2>&1";
  RankRun r;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// "rank R <key> VALUE" lines.
std::map<int, std::string> values(const std::string &out, const std::string &key) {
  std::map<int, std::string> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    int rank = -1;
    char word[32], value[512];
    if (sscanf(line.c_str(), "rank %d %31s %511s", &rank, word, value) == 3 && key == word)
      v[rank] = value;
  }
  return v;
}

std::string my_cpus() {
  hwloc_topology_t t;
  hwloc_topology_init(&t);
  hwloc_topology_load(t);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_get_cpubind(t, set, HWLOC_CPUBIND_THREAD);
  char buf[256] = "";
  hwloc_bitmap_list_snprintf(buf, sizeof(buf), set);
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(t);
  return buf;
}

class Placement : public NetAddr {};

TEST_F(Placement, BindAutoGivesEachRankTheChosenCpus) {
  ASSERT_EQ(topo_load_live(&t_), ncclSuccess) << tutti_last_error();
  RankRun r = run_ranks("TUTTI_BIND=auto TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=INIT");
  ASSERT_EQ(r.status, 0) << r.out;
  std::map<int, std::string> cpus = values(r.out, "cpus");
  ASSERT_EQ(cpus.size(), 2u) << r.out;
  std::set<int> seen;  // with 2 CPUs or more, the two ranks' CPUs are disjoint
  int allowed = hwloc_bitmap_weight(hwloc_topology_get_allowed_cpuset(t_->hw));
  for (int rank = 0; rank < 2; rank++) {
    topo_binding_t want;  // tutti-run starts the ranks with this process's binding
    topo_choose_binding_local(t_, -1, rank, 2, &want);
    EXPECT_EQ(cpus[rank], want.cpuset) << want.reason << "\n" << r.out;
    if (want.cpubind) {
      EXPECT_NE(r.out.find(std::string("bound this thread: CPUs ") + want.cpuset),
                std::string::npos)
          << r.out;
    }
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_bitmap_list_sscanf(set, cpus[rank].c_str());
    for (int c = hwloc_bitmap_first(set); c >= 0; c = hwloc_bitmap_next(set, c))
      EXPECT_TRUE(seen.insert(c).second || allowed < 2) << "CPU " << c << " given twice";
    hwloc_bitmap_free(set);
  }
  EXPECT_NE(r.out.find("takes its share"), std::string::npos) << r.out;
}

TEST_F(Placement, BindNoneKeepsTheLaunchersCpus) {
  RankRun r = run_ranks("TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=INIT");
  ASSERT_EQ(r.status, 0) << r.out;
  std::map<int, std::string> cpus = values(r.out, "cpus");
  ASSERT_EQ(cpus.size(), 2u) << r.out;
  EXPECT_EQ(cpus[0], my_cpus());
  EXPECT_EQ(cpus[1], my_cpus());
  EXPECT_NE(r.out.find("binding not applied (TUTTI_BIND=none, the default"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("bound this thread"), std::string::npos) << r.out;
}

TEST_F(Placement, BindGarbageIsInvalidUsage) {
  RankRun r = run_ranks("TUTTI_BIND=sometimes");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("init failed: invalid usage"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TUTTI_BIND=\"sometimes\" is not \"none\" or \"auto\""), std::string::npos)
      << r.out;
}

TEST_F(Placement, TcpListensOnTheChosenAddress) {
  ASSERT_EQ(topo_load_live(&t_), ncclSuccess) << tutti_last_error();
  Choice c = choose(t_);
  ASSERT_EQ(c.res, ncclSuccess) << tutti_last_error();
  RankRun r = run_ranks("TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=NET", "hosts");
  ASSERT_EQ(r.status, 0) << r.out;
  std::map<int, std::string> listen = values(r.out, "listen");
  ASSERT_EQ(listen.size(), 2u) << r.out;  // each rank's tcp data port
  EXPECT_EQ(listen[0], ip_of(c.addr)) << r.out;
  EXPECT_EQ(listen[1], ip_of(c.addr)) << r.out;
  char a[80];
  std::string line = std::string("socket address ") + sock_addr_str(&c.addr, a, sizeof(a)) + " (" +
                     c.ifname + "): " + c.reason;
  EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_NE(r.out.find("tcp: listening on " + ip_of(c.addr) + ":"), std::string::npos) << r.out;
}

}  // namespace
