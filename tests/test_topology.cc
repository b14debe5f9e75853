// Topology decisions on machines we do not have (hwloc XML fixtures in tests/fixtures/), and a
// few checks of live discovery, binding and the XML dump on this machine.
//
// Every decision is asserted exactly: a change in NIC choice, binding, ring order, P2P or path
// class must fail here and be reviewed.
//
// Built a second time with TUTTI_FAKE_NVML, this file is a stand-in libnvidia-ml.so.1 (see the
// end) that ctest puts first on LD_LIBRARY_PATH, so the NVML path runs without a GPU.
#ifndef TUTTI_FAKE_NVML
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "topology/topo.h"
#include "topology/topo_internal.h"

namespace {

std::string fixture(const char *name) {
  return std::string(TUTTI_FIXTURES_DIR "/") + name;
}

// Settings the decisions read, cleared around every test so the caller's environment (an
// NCCL_IB_HCA exported in the shell...) cannot change the answers.
const char *const kSettings[] = {"P2P_LEVEL",      "P2P_DISABLE",         "IB_HCA",
                                 "SOCKET_IFNAME",  "IGNORE_CPU_AFFINITY", "TOPO_FILE",
                                 "TOPO_DUMP_FILE", "TOPO_LOAD_TIMEOUT"};

void clear_settings() {
  unsetenv("HWLOC_THISSYSTEM");  // would make the fixtures "this machine" and bind for real
  for (const char *s : kSettings) {
    unsetenv((std::string("TUTTI_") + s).c_str());
    unsetenv((std::string("NCCL_") + s).c_str());
  }
}

class Env {  // one variable, restored (removed) at the end of the scope
 public:
  Env(const char *name, const char *value) : name_(name) { setenv(name, value, 1); }
  ~Env() { unsetenv(name_.c_str()); }

 private:
  std::string name_;
};

class Topo : public ::testing::Test {
 protected:
  void SetUp() override { clear_settings(); }
  void TearDown() override {
    topo_free(t_);
    clear_settings();
  }
  void load(const char *name) {
    ASSERT_EQ(topo_load_xml(fixture(name).c_str(), &t_), ncclSuccess) << tutti_last_error();
  }
  std::string nic(topo_nic_kind_t kind, int gpu, const char *cpuset = nullptr,
                  topo_path_t *path = nullptr) {
    topo_nic_choice_t c;
    topo_choose_nic(t_, kind, gpu, cpuset, &c);
    if (path) *path = c.path;
    return c.nic < 0 ? "none" : c.name;
  }
  std::vector<int> ring(const std::vector<topo_rank_loc_t> &locs, std::string *why = nullptr) {
    std::vector<int> order(locs.size());
    char reason[TOPO_REASON_CHARS];
    EXPECT_EQ(
        topo_ring_order(t_, (int)locs.size(), locs.data(), order.data(), reason, sizeof(reason)),
        ncclSuccess);
    if (why) *why = reason;
    return order;
  }
  std::vector<int> ring_of_gpus(const std::vector<int> &gpus) {
    std::vector<topo_rank_loc_t> locs;
    for (int g : gpus) locs.push_back({g, -1});
    return ring(locs);
  }
  bool p2p(int a, int b) {
    topo_path_t level = topo_p2p_level(nullptr, 0);
    return topo_p2p_allowed(t_, a, b, level, nullptr, 0) != 0;
  }
  topo_t *t_ = nullptr;
};

#define EXPECT_PATH(expected, actual) EXPECT_STREQ(topo_path_name(expected), topo_path_name(actual))

// ---------------------------------------------------------------- DGX-H100-like

TEST_F(Topo, DgxInventory) {
  load("dgx-h100.xml");
  topo_counts_t c;
  topo_get_counts(t_, &c);
  EXPECT_EQ(c.packages, 2);
  EXPECT_EQ(c.numa_nodes, 2);
  EXPECT_EQ(c.cores, 16);
  EXPECT_EQ(c.pus, 32);
  EXPECT_EQ(c.gpus, 8);
  EXPECT_EQ(c.nics, 9);  // 8 HCAs + the management Ethernet
  const char *bus[8] = {"0000:13:00.0", "0000:16:00.0", "0000:43:00.0", "0000:46:00.0",
                        "0000:93:00.0", "0000:96:00.0", "0000:c3:00.0", "0000:c6:00.0"};
  for (int g = 0; g < 8; g++) {
    const topo_gpu_info_t *info = topo_gpu(t_, g);
    ASSERT_NE(info, nullptr);
    EXPECT_STREQ(info->busid, bus[g]);
    EXPECT_EQ(info->device, 0x2330u);
    EXPECT_EQ(info->numa, g < 4 ? 0 : 1);
    EXPECT_EQ(info->package, g < 4 ? 0 : 1);
    EXPECT_EQ(info->nvswitch_links, 18);
  }
  EXPECT_EQ(topo_gpu(t_, 8), nullptr);
  const topo_nic_info_t *n = topo_nic(t_, 0);
  EXPECT_STREQ(n->name, "mlx5_0");
  EXPECT_EQ(n->kind, TOPO_NIC_IB);
  EXPECT_STREQ(n->busid, "0000:14:00.0");
  EXPECT_EQ(n->speed_mbps, 400000);
  EXPECT_EQ(n->active, 1);
  EXPECT_STREQ(topo_nic(t_, 8)->name, "eno3");
  EXPECT_EQ(topo_nic(t_, 8)->kind, TOPO_NIC_SOCKET);
}

TEST_F(Topo, DgxBusIdLookup) {
  load("dgx-h100.xml");
  EXPECT_EQ(topo_gpu_by_busid(t_, "0000:93:00.0"), 4);
  EXPECT_EQ(topo_gpu_by_busid(t_, "00000000:93:00.0"), 4);  // NVML's form
  EXPECT_EQ(topo_gpu_by_busid(t_, "0000:C6:00.0"), 7);      // upper case
  EXPECT_EQ(topo_gpu_by_busid(t_, "13:00.0"), 0);
  EXPECT_EQ(topo_gpu_by_busid(t_, "0000:14:00.0"), -1);  // a NIC, not a GPU
  EXPECT_EQ(topo_gpu_by_busid(t_, "garbage"), -1);
}

TEST_F(Topo, DgxPaths) {
  load("dgx-h100.xml");
  EXPECT_PATH(TOPO_PATH_LOC, topo_path_gpu_gpu(t_, 3, 3));
  EXPECT_PATH(TOPO_PATH_NVL, topo_path_gpu_gpu(t_, 0, 1));
  EXPECT_PATH(TOPO_PATH_NVL, topo_path_gpu_gpu(t_, 0, 7));  // NVSwitch: across sockets too
  EXPECT_EQ(topo_nvlinks(t_, 0, 7), 18);
  EXPECT_PATH(TOPO_PATH_PIX, topo_path_gpu_nic(t_, 0, 0));
  EXPECT_PATH(TOPO_PATH_PIX, topo_path_gpu_nic(t_, 0, 1));
  EXPECT_PATH(TOPO_PATH_PHB, topo_path_gpu_nic(t_, 0, 2));  // other switch, same socket
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_nic(t_, 0, 4));
  EXPECT_PATH(TOPO_PATH_PHB, topo_path_gpu_nic(t_, 3, 8));  // eno3 on socket 0
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_nic(t_, 4, 8));
  EXPECT_PATH(TOPO_PATH_PHB, topo_path_cpu_nic(t_, "0-7", 0));
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_cpu_nic(t_, "8-15", 0));
  EXPECT_PATH(TOPO_PATH_PHB, topo_path_cpu_nic(t_, "24", 7));
}

TEST_F(Topo, DgxNicPerGpu) {
  load("dgx-h100.xml");
  for (int g = 0; g < 8; g++) {
    topo_path_t p;
    EXPECT_EQ(nic(TOPO_NIC_IB, g, nullptr, &p), "mlx5_" + std::to_string(g)) << "GPU " << g;
    EXPECT_PATH(TOPO_PATH_PIX, p);
    EXPECT_EQ(nic(TOPO_NIC_SOCKET, g, nullptr, &p), "eno3");
    EXPECT_PATH(g < 4 ? TOPO_PATH_PHB : TOPO_PATH_SYS, p);
  }
  // Without a GPU: the CPU set decides.
  EXPECT_EQ(nic(TOPO_NIC_IB, -1, "8-15"), "mlx5_4");
  EXPECT_EQ(nic(TOPO_NIC_IB, -1, "0-3"), "mlx5_0");
}

TEST_F(Topo, DgxIbHcaOverride) {
  load("dgx-h100.xml");
  {
    Env e("TUTTI_IB_HCA", "=mlx5_1");
    topo_path_t p;
    EXPECT_EQ(nic(TOPO_NIC_IB, 0, nullptr, &p), "mlx5_1");
    EXPECT_PATH(TOPO_PATH_PIX, p);
    EXPECT_EQ(nic(TOPO_NIC_IB, 4, nullptr, &p), "mlx5_1");
    EXPECT_PATH(TOPO_PATH_SYS, p);
  }
  {
    Env e("TUTTI_IB_HCA", "^mlx5_0");
    EXPECT_EQ(nic(TOPO_NIC_IB, 0), "mlx5_1");
    EXPECT_EQ(nic(TOPO_NIC_IB, 1), "mlx5_1");
    EXPECT_EQ(nic(TOPO_NIC_IB, 2), "mlx5_2");
  }
  {
    Env e("NCCL_IB_HCA", "mlx5_4:1,mlx5_5:1");  // NCCL_ name, ports ignored
    EXPECT_EQ(nic(TOPO_NIC_IB, 0), "mlx5_4");   // socket 0 GPUs share both, in turn
    EXPECT_EQ(nic(TOPO_NIC_IB, 1), "mlx5_5");
    EXPECT_EQ(nic(TOPO_NIC_IB, 2), "mlx5_4");
    EXPECT_EQ(nic(TOPO_NIC_IB, 3), "mlx5_5");
    EXPECT_EQ(nic(TOPO_NIC_IB, 5), "mlx5_5");
    Env tutti("TUTTI_IB_HCA", "mlx5_7");  // TUTTI_ wins over NCCL_
    EXPECT_EQ(nic(TOPO_NIC_IB, 0), "mlx5_7");
  }
  {
    Env e("TUTTI_IB_HCA", "=mlx5");
    topo_nic_choice_t c;
    topo_choose_nic(t_, TOPO_NIC_IB, 0, nullptr, &c);
    EXPECT_EQ(c.nic, -1);
    EXPECT_NE(std::string(c.reason).find("TUTTI_IB_HCA==mlx5 matches none"), std::string::npos)
        << c.reason;
  }
  {
    Env e("TUTTI_SOCKET_IFNAME", "^eno");
    EXPECT_EQ(nic(TOPO_NIC_SOCKET, 0), "none");
  }
}

TEST_F(Topo, DgxBinding) {
  load("dgx-h100.xml");
  topo_binding_t b;
  topo_choose_binding(t_, 0, nullptr, &b);  // a file: "current" is the whole machine
  EXPECT_EQ(b.numa, 0);
  EXPECT_STREQ(b.cpuset, "0-7,16-23");
  EXPECT_EQ(b.cpubind, 1);
  EXPECT_EQ(b.membind, 1);
  topo_choose_binding(t_, 5, nullptr, &b);
  EXPECT_EQ(b.numa, 1);
  EXPECT_STREQ(b.cpuset, "8-15,24-31");
  EXPECT_STREQ(b.reason, "GPU 5 is local to NUMA 1 (CPUs 8-15,24-31)");
  // The launcher bound the rank inside the GPU's node: keep its binding.
  topo_choose_binding(t_, 0, "0-3", &b);
  EXPECT_STREQ(b.cpuset, "0-3");
  EXPECT_EQ(b.cpubind, 0);
  EXPECT_EQ(b.numa, 0);
  EXPECT_EQ(b.membind, 1);
  // ... straddling nodes: the GPU's part of it.
  topo_choose_binding(t_, 4, "6-9", &b);
  EXPECT_STREQ(b.cpuset, "8-9");
  EXPECT_EQ(b.cpubind, 1);
  // ... on the other socket: respected, memory follows the CPUs.
  topo_choose_binding(t_, 0, "8-11", &b);
  EXPECT_STREQ(b.cpuset, "8-11");
  EXPECT_EQ(b.cpubind, 0);
  EXPECT_EQ(b.numa, 1);
  EXPECT_NE(std::string(b.reason).find("exclude GPU 0's CPUs 0-7,16-23"), std::string::npos);
  {
    Env e("NCCL_IGNORE_CPU_AFFINITY", "1");
    topo_choose_binding(t_, 0, "8-11", &b);
    EXPECT_STREQ(b.cpuset, "0-7,16-23");
    EXPECT_EQ(b.cpubind, 1);
    EXPECT_EQ(b.numa, 0);
  }
  // No GPU: the launcher's binding stays; memory follows it when it lies in one node.
  topo_choose_binding(t_, -1, "0-7", &b);
  EXPECT_EQ(b.numa, 0);
  EXPECT_EQ(b.cpubind, 0);
  EXPECT_EQ(b.membind, 1);
  topo_choose_binding(t_, -1, "0-15", &b);
  EXPECT_EQ(b.numa, -1);
  EXPECT_EQ(b.cpubind, 0);
  EXPECT_EQ(b.membind, 0);
  topo_choose_binding(t_, 0, "fast", &b);
  EXPECT_EQ(b.cpubind, 0);
  EXPECT_EQ(b.membind, 0);
  EXPECT_STREQ(b.reason, "\"fast\" is not a CPU set: no binding");
}

TEST_F(Topo, DgxRingAndP2p) {
  load("dgx-h100.xml");
  std::string why;
  std::vector<topo_rank_loc_t> locs;
  for (int g = 0; g < 8; g++) locs.push_back({g, -1});
  EXPECT_EQ(ring(locs, &why), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(why, "ring 0 1 2 3 4 5 6 7: 8 NVL edges (best of 5040 orders)");
  // 12 ranks on 8 GPUs (greedy + 2-opt): ranks on the same GPU side by side.
  std::vector<int> gpus;
  for (int r = 0; r < 12; r++) gpus.push_back(r % 8);
  EXPECT_EQ(ring_of_gpus(gpus), (std::vector<int>{0, 8, 1, 9, 2, 10, 3, 11, 4, 5, 6, 7}));
  EXPECT_TRUE(p2p(0, 7));  // NVL <= PXB
  {
    Env e("TUTTI_P2P_LEVEL", "LOC");
    EXPECT_FALSE(p2p(0, 7));
    EXPECT_TRUE(p2p(2, 2));
  }
  {
    Env e("TUTTI_P2P_LEVEL", "NVL");
    EXPECT_TRUE(p2p(0, 7));
  }
}

// ---------------------------------------------------------------- 2 sockets, 4 PCIe GPUs

TEST_F(Topo, Pcie4Paths) {
  load("pcie-4gpu-2socket.xml");
  EXPECT_PATH(TOPO_PATH_PHB, topo_path_gpu_gpu(t_, 0, 1));
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_gpu(t_, 0, 2));
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_gpu(t_, 1, 3));
  EXPECT_PATH(TOPO_PATH_PHB, topo_path_gpu_gpu(t_, 2, 3));
  EXPECT_EQ(topo_nvlinks(t_, 0, 1), 0);
  EXPECT_PATH(TOPO_PATH_PHB, topo_path_gpu_nic(t_, 1, 0));
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_nic(t_, 2, 0));
}

TEST_F(Topo, Pcie4Decisions) {
  load("pcie-4gpu-2socket.xml");
  const topo_path_t ib_path[4] = {TOPO_PATH_PHB, TOPO_PATH_PHB, TOPO_PATH_SYS, TOPO_PATH_SYS};
  for (int g = 0; g < 4; g++) {
    topo_path_t p;
    EXPECT_EQ(nic(TOPO_NIC_IB, g, nullptr, &p), "mlx5_0");
    EXPECT_PATH(ib_path[g], p);
    EXPECT_EQ(nic(TOPO_NIC_SOCKET, g), "enp75s0f0np0");
    topo_binding_t b;
    topo_choose_binding(t_, g, nullptr, &b);
    EXPECT_EQ(b.numa, g < 2 ? 0 : 1);
    EXPECT_STREQ(b.cpuset, g < 2 ? "0-7,16-23" : "8-15,24-31");
  }
  std::string why;
  EXPECT_EQ(ring_of_gpus({0, 1, 2, 3}), (std::vector<int>{0, 1, 2, 3}));
  // Ranks 0, 2 on socket 0 and 1, 3 on socket 1: each socket's ranks side by side, socket
  // crossed twice; of the equal rings (0 2 1 3, 0 2 3 1, 0 1 3 2, ...) the smallest order.
  EXPECT_EQ(ring({{0, -1}, {2, -1}, {1, -1}, {3, -1}}, &why), (std::vector<int>{0, 1, 3, 2}));
  EXPECT_EQ(why, "ring 0 1 3 2: 2 SYS + 2 PHB edges (best of 6 orders)");
  // CPU-only ranks are placed by their NUMA node.
  EXPECT_EQ(ring({{-1, 0}, {-1, 1}, {-1, 0}, {-1, 1}}), (std::vector<int>{0, 1, 3, 2}));
}

TEST_F(Topo, Pcie4P2pLevels) {
  load("pcie-4gpu-2socket.xml");
  char why[TOPO_REASON_CHARS];
  EXPECT_EQ(topo_p2p_level(why, sizeof(why)), TOPO_PATH_PXB);
  EXPECT_STREQ(why, "default level PXB");
  EXPECT_FALSE(p2p(0, 1));  // PHB > PXB
  EXPECT_TRUE(p2p(1, 1));
  topo_p2p_allowed(t_, 0, 1, TOPO_PATH_PXB, why, sizeof(why));
  EXPECT_STREQ(why, "GPU 0 - GPU 1 path PHB beyond level PXB: P2P not allowed");
  {
    Env e("TUTTI_P2P_LEVEL", "PHB");
    EXPECT_TRUE(p2p(0, 1));
    EXPECT_TRUE(p2p(2, 3));
    EXPECT_FALSE(p2p(0, 2));
  }
  {
    Env e("NCCL_P2P_LEVEL", "SYS");
    EXPECT_TRUE(p2p(0, 2));
  }
  {
    Env e("TUTTI_P2P_LEVEL", "3");  // NCCL's legacy number for PHB
    EXPECT_EQ(topo_p2p_level(nullptr, 0), TOPO_PATH_PHB);
    EXPECT_TRUE(p2p(0, 1));
  }
  {
    Env e("TUTTI_P2P_LEVEL", "9");
    EXPECT_EQ(topo_p2p_level(nullptr, 0), TOPO_PATH_SYS);
  }
  {
    Env level("TUTTI_P2P_LEVEL", "SYS");
    Env off("NCCL_P2P_DISABLE", "1");  // disable wins, as in NCCL
    EXPECT_EQ(topo_p2p_level(nullptr, 0), TOPO_PATH_LOC);
    EXPECT_FALSE(p2p(0, 2));
  }
  {
    Env e("TUTTI_P2P_LEVEL", "FAST");  // not a level: warned, default kept
    EXPECT_EQ(topo_p2p_level(nullptr, 0), TOPO_PATH_PXB);
  }
}

// ---------------------------------------------------------------- NVLink pairs

TEST_F(Topo, PairsPaths) {
  load("nvlink-pairs-4gpu.xml");
  EXPECT_PATH(TOPO_PATH_NVL, topo_path_gpu_gpu(t_, 0, 1));
  EXPECT_EQ(topo_nvlinks(t_, 0, 1), 12);
  EXPECT_EQ(topo_nvlinks(t_, 1, 0), 12);
  EXPECT_PATH(TOPO_PATH_NVL, topo_path_gpu_gpu(t_, 2, 3));
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_gpu(t_, 0, 2));
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_gpu(t_, 1, 3));
  EXPECT_EQ(topo_nvlinks(t_, 1, 2), 0);
  EXPECT_PATH(TOPO_PATH_PIX, topo_path_gpu_nic(t_, 0, 0));
  EXPECT_PATH(TOPO_PATH_PIX, topo_path_gpu_nic(t_, 1, 0));
  EXPECT_PATH(TOPO_PATH_PXB, topo_path_gpu_nic(t_, 2, 1));  // nested switches
  EXPECT_PATH(TOPO_PATH_PIX, topo_path_gpu_nic(t_, 3, 1));
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_nic(t_, 0, 1));
  EXPECT_EQ(topo_gpu(t_, 0)->nvlinks, 12);
  EXPECT_EQ(topo_gpu(t_, 0)->nvswitch_links, 0);
}

TEST_F(Topo, PairsDecisions) {
  load("nvlink-pairs-4gpu.xml");
  const char *want[4] = {"mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1"};
  const topo_path_t path[4] = {TOPO_PATH_PIX, TOPO_PATH_PIX, TOPO_PATH_PXB, TOPO_PATH_PIX};
  for (int g = 0; g < 4; g++) {
    topo_path_t p;
    EXPECT_EQ(nic(TOPO_NIC_IB, g, nullptr, &p), want[g]);
    EXPECT_PATH(path[g], p);
    EXPECT_EQ(nic(TOPO_NIC_SOCKET, g), "none");
    topo_binding_t b;
    topo_choose_binding(t_, g, nullptr, &b);
    EXPECT_EQ(b.numa, g < 2 ? 0 : 1);
  }
  // NVLink neighbours side by side whatever the rank -> GPU mapping: ranks (0, 2) and (1, 3)
  // hold the pairs below.
  std::string why;
  EXPECT_EQ(ring({{0, -1}, {2, -1}, {1, -1}, {3, -1}}, &why), (std::vector<int>{0, 1, 3, 2}));
  EXPECT_EQ(why, "ring 0 1 3 2: 2 SYS + 2 NVL edges (best of 6 orders)");
  EXPECT_EQ(ring_of_gpus({3, 0, 2, 1}), (std::vector<int>{0, 1, 3, 2}));
  EXPECT_EQ(ring_of_gpus({0, 1, 2, 3}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(p2p(0, 1));  // NVL
  EXPECT_TRUE(p2p(3, 2));
  EXPECT_FALSE(p2p(0, 2));  // SYS
  EXPECT_FALSE(p2p(1, 3));
  {
    Env e("TUTTI_P2P_LEVEL", "LOC");
    EXPECT_FALSE(p2p(0, 1));
  }
  {
    Env e("TUTTI_P2P_LEVEL", "NVL");
    EXPECT_TRUE(p2p(0, 1));
    EXPECT_FALSE(p2p(0, 2));
  }
}

// ---------------------------------------------------------------- GPU-less cloud VM

TEST_F(Topo, CloudVm) {
  load("cloud-vm-2vcpu.xml");
  topo_counts_t c;
  topo_get_counts(t_, &c);
  EXPECT_EQ(c.packages, 1);
  EXPECT_EQ(c.numa_nodes, 1);
  EXPECT_EQ(c.cores, 2);
  EXPECT_EQ(c.pus, 2);
  EXPECT_EQ(c.gpus, 0);
  EXPECT_EQ(c.nics, 1);
  EXPECT_STREQ(topo_nic(t_, 0)->name, "eth0");
  EXPECT_STREQ(topo_nic(t_, 0)->busid, "0000:00:03.0");
  EXPECT_EQ(topo_nic(t_, 0)->numa, 0);
  topo_path_t p;
  EXPECT_EQ(nic(TOPO_NIC_SOCKET, -1, nullptr, &p), "eth0");
  EXPECT_PATH(TOPO_PATH_PHB, p);
  topo_nic_choice_t ib;
  topo_choose_nic(t_, TOPO_NIC_IB, -1, nullptr, &ib);
  EXPECT_EQ(ib.nic, -1);
  EXPECT_STREQ(ib.reason, "no usable InfiniBand/RoCE HCAs in the topology (0 seen)");
  {
    Env e("TUTTI_SOCKET_IFNAME", "=eth0");
    EXPECT_EQ(nic(TOPO_NIC_SOCKET, -1), "eth0");
  }
  {
    Env e("NCCL_SOCKET_IFNAME", "ens");
    EXPECT_EQ(nic(TOPO_NIC_SOCKET, -1), "none");
  }
  // Four CPU-only ranks: nothing to bind on one NUMA node.
  topo_binding_t b;
  topo_choose_binding(t_, -1, nullptr, &b);
  EXPECT_EQ(b.numa, 0);
  EXPECT_STREQ(b.cpuset, "0-1");
  EXPECT_EQ(b.cpubind, 0);
  EXPECT_EQ(b.membind, 0);
  std::vector<topo_rank_loc_t> locs(4, topo_rank_loc_t{-1, -1});
  EXPECT_EQ(ring(locs), (std::vector<int>{0, 1, 2, 3}));
  char why[TOPO_REASON_CHARS];
  EXPECT_EQ(topo_p2p_allowed(t_, 0, 1, TOPO_PATH_SYS, why, sizeof(why)), 0);
  EXPECT_STREQ(why, "GPU 0 or 1 is not in the topology");
}

// ---------------------------------------------------------------- NVLink from NVML

// The fake NVML (below) joins GPUs 0-1 of the PCIe fixture by 4 direct links and GPUs 2-3 to
// NVSwitches by 6 links each.
TEST_F(Topo, NvlinkFromNvml) {
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  bool fake = lib && dlsym(lib, "tutti_fake_nvml");
  if (lib) dlclose(lib);
  if (!fake) GTEST_SKIP() << "the fake libnvidia-ml.so.1 is not on LD_LIBRARY_PATH (run ctest)";
  load("pcie-4gpu-2socket.xml");
  EXPECT_EQ(topo_nvlinks(t_, 0, 1), 0);
  topo_nvml_annotate(t_);
  ASSERT_EQ(topo_nvlink_build(t_), ncclSuccess);
  EXPECT_EQ(topo_nvlinks(t_, 0, 1), 4);
  EXPECT_EQ(topo_nvlinks(t_, 1, 0), 4);
  EXPECT_EQ(topo_nvlinks(t_, 2, 3), 6);
  EXPECT_EQ(topo_nvlinks(t_, 0, 2), 0);
  EXPECT_EQ(topo_gpu(t_, 2)->nvswitch_links, 6);
  EXPECT_EQ(topo_gpu(t_, 0)->nvlinks, 4);
  EXPECT_PATH(TOPO_PATH_NVL, topo_path_gpu_gpu(t_, 0, 1));
  EXPECT_PATH(TOPO_PATH_NVL, topo_path_gpu_gpu(t_, 3, 2));
  EXPECT_PATH(TOPO_PATH_SYS, topo_path_gpu_gpu(t_, 1, 2));
  EXPECT_STREQ(hwloc_obj_get_info_by_name(t_->gpu_obj[0], "NVLinkPeers"), "0000:3b:00.0*4");
  EXPECT_STREQ(hwloc_obj_get_info_by_name(t_->gpu_obj[3], "NVLinkPeers"), "nvswitch*6");
  EXPECT_TRUE(p2p(0, 1));  // NVL: allowed at the default level now
}

// ---------------------------------------------------------------- pure helpers

TEST(TopoHelpers, NameMatching) {
  EXPECT_TRUE(tutti_name_list_matches("mlx5", "mlx5_3"));
  EXPECT_TRUE(tutti_name_list_matches("eth,ib", "ib0"));
  EXPECT_FALSE(tutti_name_list_matches("eth,ib", "ens5"));
  EXPECT_FALSE(tutti_name_list_matches("^docker,lo", "docker0"));
  EXPECT_TRUE(tutti_name_list_matches("^docker,lo", "eth0"));
  EXPECT_TRUE(tutti_name_list_matches("=eth0", "eth0"));
  EXPECT_FALSE(tutti_name_list_matches("=eth0", "eth01"));
  EXPECT_TRUE(tutti_name_list_matches("=mlx5_0:1,mlx5_1:1", "mlx5_1"));
  EXPECT_FALSE(tutti_name_list_matches("^=mlx5_0", "mlx5_0"));
  EXPECT_TRUE(tutti_name_list_matches("^=mlx5_0", "mlx5_01"));
}

TEST(TopoHelpers, PathNames) {
  for (int p = 0; p < TOPO_PATH_COUNT; p++) {
    topo_path_t q;
    ASSERT_EQ(topo_path_parse(topo_path_name((topo_path_t)p), &q), 0);
    EXPECT_EQ(q, p);
  }
  topo_path_t q;
  EXPECT_EQ(topo_path_parse("pxb", &q), 0);
  EXPECT_EQ(q, TOPO_PATH_PXB);
  EXPECT_NE(topo_path_parse("NVB", &q), 0);
}

TEST(TopoHelpers, RingHosts) {
  const uint64_t host[6] = {7, 9, 7, 9, 5, 7};
  const int pos[6] = {1, 0, 0, 1, 0, 2};
  int order[6];
  topo_ring_hosts(6, host, pos, order);
  EXPECT_EQ(std::vector<int>(order, order + 6), (std::vector<int>{2, 0, 5, 1, 3, 4}));
}

// Two hosts of 4 CPU-only ranks, no topology needed (NUMA nodes alone place them). Host A
// (ranks 0 2 4 6 on NUMA 0 1 0 1): rings from local rank 0 with 2 SYS edges are the cheapest
// (the identity has 4); the lexicographically first is local 0 1 3 2 = ranks 0 2 6 4. Host B
// (1 3 5 7, all on NUMA 0): every ring is 4 PHB edges, the identity. Host A first (rank 0).
TEST(TopoHelpers, RingGlobal) {
  const uint64_t host[8] = {11, 22, 11, 22, 11, 22, 11, 22};
  const topo_rank_loc_t locs[8] = {{-1, 0}, {-1, 0}, {-1, 1}, {-1, 0},
                                   {-1, 0}, {-1, 0}, {-1, 1}, {-1, 0}};
  int order[8];
  ASSERT_EQ(topo_ring_global(nullptr, 8, host, locs, order), ncclSuccess) << tutti_last_error();
  EXPECT_EQ(std::vector<int>(order, order + 8), (std::vector<int>{0, 2, 6, 4, 1, 3, 5, 7}));
  // One host, one rank: itself.
  ASSERT_EQ(topo_ring_global(nullptr, 1, host, locs, order), ncclSuccess);
  EXPECT_EQ(order[0], 0);
}

// GPU ranks on the 2-socket PCIe machine (GPUs 0 1 on one socket, 2 3 on the other), two
// identical hosts of 4: host A's ranks 0 2 4 6 on GPUs 0 2 1 3 ring as local 0 1 3 2 (as
// Pcie4Decisions: 2 SYS edges instead of 4) = ranks 0 2 6 4; host B's 1 3 5 7 on GPUs 0 1 2 3
// keep their order. Host A first.
TEST_F(Topo, Pcie4RingGlobal) {
  load("pcie-4gpu-2socket.xml");
  const uint64_t host[8] = {1, 2, 1, 2, 1, 2, 1, 2};
  const topo_rank_loc_t locs[8] = {{0, -1}, {0, -1}, {2, -1}, {1, -1},
                                   {1, -1}, {2, -1}, {3, -1}, {3, -1}};
  int order[8];
  ASSERT_EQ(topo_ring_global(t_, 8, host, locs, order), ncclSuccess) << tutti_last_error();
  EXPECT_EQ(std::vector<int>(order, order + 8), (std::vector<int>{0, 2, 6, 4, 1, 3, 5, 7}));
}

// Launcher placement (topo_place_ranks) on the 2-socket fixture: NUMA 0 = cores 0-7 (PUs k and
// k+16), NUMA 1 = cores 8-15. Cores another job holds are skipped while free ones suffice.
std::vector<std::string> placed(const topo_t *t, const char *allowed, const char *busy, int n,
                                topo_place_unit_t unit, int spread, int *shared) {
  topo_place_t p;
  EXPECT_EQ(topo_place_ranks(t, allowed, busy, n, unit, spread, &p), ncclSuccess)
      << tutti_last_error();
  std::vector<std::string> sets;
  for (int r = 0; r < p.nranks; r++)
    sets.push_back(std::string(p.cpuset[r]) + "@" + std::to_string(p.numa[r]));
  *shared = p.shared;
  topo_place_free(&p);
  return sets;
}

TEST_F(Topo, Pcie4PlaceRanks) {
  load("pcie-4gpu-2socket.xml");
  int shared = -1;
  EXPECT_EQ(placed(t_, "0-31", "0-1,16-17,8", 4, TOPO_PLACE_CORE, 1, &shared),
            (std::vector<std::string>{"2,18@0", "3,19@0", "9,25@1", "10,26@1"}));
  EXPECT_EQ(shared, 0);
  EXPECT_EQ(placed(t_, "0-31", "0-1", 3, TOPO_PLACE_CORE, 0, &shared),
            (std::vector<std::string>{"2,18@0", "3,19@0", "4,20@0"}));
  // A mask of two CPUs, one of them busy, two ranks: both used, one rank counted as sharing.
  EXPECT_EQ(placed(t_, "5,13", "5", 2, TOPO_PLACE_CORE, 0, &shared),
            (std::vector<std::string>{"5@0", "13@1"}));
  EXPECT_EQ(shared, 1);
  EXPECT_EQ(placed(t_, "5,13", "5", 1, TOPO_PLACE_CORE, 0, &shared),
            (std::vector<std::string>{"13@1"}));
  EXPECT_EQ(placed(t_, "0-3", nullptr, 4, TOPO_PLACE_NUMA, 1, &shared),
            (std::vector<std::string>{"0-3@0", "0-3@0", "0-3@0", "0-3@0"}));
  topo_place_t p;  // more ranks than hardware threads: nothing placed, with the counts
  ASSERT_EQ(topo_place_ranks(t_, "0-3", "", 5, TOPO_PLACE_CORE, 1, &p), ncclSuccess);
  EXPECT_EQ(p.fits, 0);
  EXPECT_EQ(p.nranks, 0);
  EXPECT_EQ(p.units, 4);
  topo_place_free(&p);
  EXPECT_EQ(topo_place_ranks(t_, "banana", "", 1, TOPO_PLACE_CORE, 1, &p), ncclInvalidArgument);
  topo_place_free(&p);
}

// ---------------------------------------------------------------- this machine, env, dump

class TopoLive : public Topo {};

TEST_F(TopoLive, DiscoversThisMachine) {
  ASSERT_EQ(topo_load_live(&t_), ncclSuccess) << tutti_last_error();
  topo_counts_t c;
  topo_get_counts(t_, &c);
  EXPECT_GE(c.pus, 1);
  EXPECT_EQ(c.pus, (int)sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_TRUE(topo_is_live(t_));
  EXPECT_STREQ(topo_source(t_), "live");
  // A rank without a GPU is left where the launcher put it.
  topo_binding_t b;
  topo_choose_binding(t_, -1, nullptr, &b);
  EXPECT_EQ(b.cpubind, 0);
}

TEST_F(TopoLive, BindAndRestore) {
  ASSERT_EQ(topo_load_live(&t_), ncclSuccess);
  cpu_set_t before, during, after;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  int first = -1;
  for (int i = 0; i < CPU_SETSIZE && first < 0; i++)
    if (CPU_ISSET(i, &before)) first = i;
  topo_binding_t b = {};
  b.numa = -1;
  b.cpubind = 1;
  snprintf(b.cpuset, sizeof(b.cpuset), "%d", first);
  topo_saved_binding_t saved;
  topo_bind_thread(t_, &b, &saved);
  ASSERT_EQ(sched_getaffinity(0, sizeof(during), &during), 0);
  EXPECT_EQ(CPU_COUNT(&during), 1);
  EXPECT_TRUE(CPU_ISSET(first, &during));
  topo_restore_thread(t_, &saved);
  ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

TEST_F(TopoLive, FileTopologyIsNotApplied) {
  load("dgx-h100.xml");
  cpu_set_t before, after;
  sched_getaffinity(0, sizeof(before), &before);
  topo_binding_t b;
  topo_choose_binding(t_, 4, nullptr, &b);
  topo_bind_thread(t_, &b, nullptr);
  sched_getaffinity(0, sizeof(after), &after);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

// hwloc 2.9 crashes (SIGSEGV) loading this malformed file, as its own lstopo does (found by
// fuzz_topo_xml): TUTTI_TOPO_FILE pointing at it used to kill every rank at init.
TEST_F(TopoLive, FileThatCrashesHwlocIsAnError) {
  std::string bad = std::string(TUTTI_FIXTURES_DIR) + "/../fuzz/regress/topo_xml/hwloc-crash.xml";
  Env e("TUTTI_TOPO_FILE", bad.c_str());
  EXPECT_EQ(topo_load(&t_), ncclInvalidUsage);
  EXPECT_EQ(t_, nullptr);
  EXPECT_NE(std::string(tutti_last_error()).find("hwloc crashed reading it"), std::string::npos)
      << tutti_last_error();
}

TEST_F(TopoLive, EnvSelectsTheFile) {
  std::string dgx = fixture("dgx-h100.xml");
  {
    Env e("TUTTI_TOPO_FILE", dgx.c_str());
    ASSERT_EQ(topo_load(&t_), ncclSuccess);
    EXPECT_EQ(std::string(topo_source(t_)), dgx);
    EXPECT_FALSE(topo_is_live(t_));
    topo_free(t_);
    t_ = nullptr;
  }
  {
    Env e("TUTTI_TOPO_FILE", "/nonexistent/topo.xml");
    EXPECT_EQ(topo_load(&t_), ncclInvalidUsage);
    EXPECT_EQ(t_, nullptr);
  }
  {
    // An NCCL-format file in NCCL_TOPO_FILE (cloud images set one) is ignored.
    char path[] = "/tmp/tutti-nccl-topo-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const char xml[] = "<system version=\"1\">\n  <cpu numaid=\"0\"/>\n</system>\n";
    ASSERT_EQ(write(fd, xml, sizeof(xml) - 1), (ssize_t)(sizeof(xml) - 1));
    close(fd);
    Env e("NCCL_TOPO_FILE", path);
    ASSERT_EQ(topo_load(&t_), ncclSuccess);
    EXPECT_STREQ(topo_source(t_), "live");
    unlink(path);
  }
}

TEST_F(TopoLive, DumpRoundTrip) {
  load("dgx-h100.xml");
  std::string out = "/tmp/tutti-topo-dump-" + std::to_string(getpid()) + ".xml";
  ASSERT_EQ(topo_export_xml(t_, out.c_str()), ncclSuccess);
  topo_t *back = nullptr;
  ASSERT_EQ(topo_load_xml(out.c_str(), &back), ncclSuccess);
  EXPECT_EQ(topo_nvlinks(back, 0, 5), 18);  // NVLinkPeers survives
  EXPECT_EQ(topo_nic(back, 3)->speed_mbps, 400000);
  topo_nic_choice_t c;
  topo_choose_nic(back, TOPO_NIC_IB, 3, nullptr, &c);
  EXPECT_STREQ(c.name, "mlx5_3");
  topo_free(back);
  unlink(out.c_str());
  // TUTTI_TOPO_DUMP_FILE with %p, on load.
  topo_free(t_);
  t_ = nullptr;
  Env file("TUTTI_TOPO_FILE", fixture("cloud-vm-2vcpu.xml").c_str());
  Env dump("TUTTI_TOPO_DUMP_FILE", "/tmp/tutti-topo-env-%p.xml");
  ASSERT_EQ(topo_load(&t_), ncclSuccess);
  std::string expected = "/tmp/tutti-topo-env-" + std::to_string(getpid()) + ".xml";
  EXPECT_EQ(access(expected.c_str(), R_OK), 0);
  unlink(expected.c_str());
}

TEST_F(TopoLive, PrintsTreeAndDecisions) {
  load("nvlink-pairs-4gpu.xml");
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  topo_print(t_, f);
  topo_print_decisions(t_, 4, f);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  EXPECT_NE(s.find("PCI 0000:c5:00.0 [10de:20b5] GPU 2, NVLink 0000:c6:00.0*12"), std::string::npos)
      << s;
  EXPECT_NE(s.find("GPU0                X     NV12      SYS      SYS      PIX      SYS   0"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("ring 0 1 2 3: 2 SYS + 2 NVL edges"), std::string::npos) << s;
}

}  // namespace

#else  // TUTTI_FAKE_NVML: the few NVML entry points tutti calls, for a 4-GPU machine whose bus
       // ids are those of tests/fixtures/pcie-4gpu-2socket.xml.
#include <string.h>
#include <strings.h>

extern "C" {
typedef struct {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} fake_pci_info_t;

struct fake_gpu {
  const char *busid;
  unsigned links;      // links 0..links-1 are active
  const char *remote;  // as NVML prints it: 8-digit domain, upper case
  int remote_type;     // 0 GPU, 2 NVSwitch
};

static const fake_gpu fake_gpus[] = {{"0000:18:00.0", 4, "00000000:3B:00.0", 0},
                                     {"0000:3b:00.0", 4, "00000000:18:00.0", 0},
                                     {"0000:99:00.0", 6, "00000000:E0:00.0", 2},
                                     {"0000:b2:00.0", 6, "00000000:E1:00.0", 2}};

__attribute__((visibility("default"))) int tutti_fake_nvml = 1;
__attribute__((visibility("default"))) int nvmlInit_v2(void) {
  return 0;
}
__attribute__((visibility("default"))) int nvmlShutdown(void) {
  return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByPciBusId_v2(const char *id,
                                                                            void **dev) {
  for (const fake_gpu &g : fake_gpus) {
    if (strcasecmp(g.busid, id) != 0) continue;
    *dev = (void *)&g;
    return 0;
  }
  return 6;  // NVML_ERROR_NOT_FOUND
}

__attribute__((visibility("default"))) int nvmlDeviceGetNvLinkState(void *dev, unsigned link,
                                                                    int *active) {
  *active = link < ((const fake_gpu *)dev)->links;
  return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetNvLinkRemotePciInfo_v2(
    void *dev, unsigned link, fake_pci_info_t *pci) {
  memset(pci, 0, sizeof(*pci));
  strcpy(pci->bus_id, ((const fake_gpu *)dev)->remote);
  return link < ((const fake_gpu *)dev)->links ? 0 : 2;
}

__attribute__((visibility("default"))) int nvmlDeviceGetNvLinkRemoteDeviceType(void *dev,
                                                                               unsigned link,
                                                                               int *type) {
  *type = ((const fake_gpu *)dev)->remote_type;
  return link < ((const fake_gpu *)dev)->links ? 0 : 2;
}
}
#endif  // TUTTI_FAKE_NVML
