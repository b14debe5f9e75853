// Soak of groups (src/group.c, src/plan.c): random groups of 1-5 collectives (harness cases: any
// collective, datatype, op, root, count up to 128 Ki elements) and sends and receives between
// random pairs of ranks, itself included, each rank with its own placement per collective and,
// as processes, its own buffers (heap or ncclMemAlloc memory the peers map). Each group runs 1-3
// times in a row, so the cached plans and the quick way run as well. Every result is checked
// element by element (collectives: harness CaseRun; point-to-point: a closed form of sender,
// receiver, index and group).
// TUTTI_SOAK_GROUPS sets the groups of the slow tests (default 8000; the threads run half of them,
// the split communicators, fake hosts and sockets a quarter), TUTTI_SOAK_GROUPS_SEED the draws'
// seed (20261207).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "harness.h"
#include "in_child.h"

namespace {

using th::CaseRun;
using th::Mode;
using th::RankCtx;

// One send of a group: from rank src to rank dst, count uint32 elements.
struct P2p {
  int src, dst;
  size_t count;
};

uint32_t p2p_value(const P2p &p, size_t j, long group) {
  return (uint32_t)(p.src * 2654435761u + p.dst * 40503u + j * 3u + (uint64_t)group * 97u);
}

// A group as drawn on every rank alike (the per-rank choices are bits of one draw).
struct Group {
  std::vector<th::Case> cases;
  std::vector<bool> memalloc;  // per case: this rank's buffers from ncclMemAlloc
  std::vector<P2p> p2p;
  int reps = 1;
};

Group draw_group(std::mt19937_64 &rng, int rank, int n, bool may_memalloc) {
  Group g;
  int ncoll = (int)(rng() % 6);  // 0-5 collectives
  int np2p = ncoll == 0 ? 1 + (int)(rng() % 4) : (int)(rng() % 4);
  for (int k = 0; k < ncoll; k++) {
    th::Case c = th::random_case(rng, n, 17, rank);
    uint64_t kind = rng() % 3, kind_bits = rng();
    g.memalloc.push_back(may_memalloc &&
                         (kind == 1 || (kind == 2 && ((kind_bits >> rank) & 1) != 0)));
    g.cases.push_back(c);
  }
  for (int k = 0; k < np2p; k++) {
    P2p p;
    p.src = (int)(rng() % (uint64_t)n);
    p.dst = (int)(rng() % (uint64_t)n);
    int bits = (int)(rng() % 17);
    p.count = bits == 0 ? 0 : (size_t)(rng() % (1ull << bits));
    g.p2p.push_back(p);
  }
  g.reps = 1 + (int)(rng() % 3);
  return g;
}

std::string describe_group(const Group &g, int n) {
  std::string s;
  for (const th::Case &c : g.cases) s += th::describe(c, n) + "; ";
  for (const P2p &p : g.p2p)
    s += "send " + std::to_string(p.src) + "->" + std::to_string(p.dst) + " x" +
         std::to_string(p.count) + "; ";
  return s;
}

// One run of group g (number `id`) on one rank of one communicator (ctx): its buffers laid out
// and filled, then issued inside the caller's ncclGroupStart / ncclGroupEnd, then checked.
class GroupRun {
 public:
  GroupRun(RankCtx &ctx, const Group &g, long id, bool procs) : ctx_(ctx), g_(g), id_(id) {
    for (size_t k = 0; k < g.cases.size(); k++) {
      if (procs) th::case_buffers_from_memalloc(g.memalloc[k]);
      runs_.emplace_back(new CaseRun(ctx, g.cases[k]));
    }
    if (procs) th::case_buffers_from_memalloc(false);
    for (const P2p &p : g.p2p) {
      sends_.emplace_back(p.src == ctx.rank ? p.count : 0);
      recvs_.emplace_back(p.dst == ctx.rank ? p.count : 0, 0xdeadbeefu);
      for (size_t j = 0; j < sends_.back().size(); j++) sends_.back()[j] = p2p_value(p, j, id);
    }
  }
  bool issue() {
    for (auto &run : runs_) run->issue();
    for (size_t k = 0; k < g_.p2p.size(); k++) {
      const P2p &p = g_.p2p[k];
      if (p.src == ctx_.rank)
        NCCL_OK_RET(ctx_,
                    ncclSend(sends_[k].data(), p.count, ncclUint32, p.dst, ctx_.comm, nullptr),
                    false);
      if (p.dst == ctx_.rank)
        NCCL_OK_RET(ctx_,
                    ncclRecv(recvs_[k].data(), p.count, ncclUint32, p.src, ctx_.comm, nullptr),
                    false);
    }
    return true;
  }
  // After ncclGroupEnd returned rc.
  bool verify(ncclResult_t rc) {
    RCHECK_RET(ctx_, rc == ncclSuccess, false, "group %ld: ncclGroupEnd: %s (%s); the group: %s",
               id_, ncclGetErrorString(rc), ncclGetLastError(ctx_.comm),
               describe_group(g_, ctx_.nranks).c_str());
    bool ok = true;
    for (auto &run : runs_) ok = run->verify() && ok;
    for (size_t k = 0; k < g_.p2p.size() && ok; k++) {
      const P2p &p = g_.p2p[k];
      for (size_t j = 0; j < recvs_[k].size(); j++)
        if (recvs_[k][j] != p2p_value(p, j, id_)) {
          ctx_.fail("group %ld: receive %zu from rank %d, element %zu: %u, want %u", id_, k, p.src,
                    j, recvs_[k][j], p2p_value(p, j, id_));
          ok = false;
          break;
        }
    }
    if (!ok) ctx_.fail("group %ld was: %s", id_, describe_group(g_, ctx_.nranks).c_str());
    return ok;
  }

 private:
  RankCtx &ctx_;
  const Group &g_;
  long id_;
  std::vector<std::unique_ptr<CaseRun>> runs_;
  std::vector<std::vector<uint32_t>> sends_, recvs_;
};

// One run of group g on this rank; false after a failure (reported).
bool run_group(RankCtx &ctx, const Group &g, long id, bool procs) {
  GroupRun run(ctx, g, id, procs);
  NCCL_OK_RET(ctx, ncclGroupStart(), false);
  bool issued = run.issue();
  ncclResult_t rc = ncclGroupEnd();
  return issued && run.verify(rc);
}

// `opt` (processes only): settings of the ranks, e.g. fake hosts or sockets only.
void soak_groups(Mode mode, int nranks, long groups, double timeout_s,
                 th::Options opt = th::Options()) {
  const char *seed = std::getenv("TUTTI_SOAK_GROUPS_SEED");
  const uint64_t s = seed ? std::strtoull(seed, nullptr, 10) : 20261207;
  opt.timeout_s = timeout_s;
  th::run_ranks_ok(
      mode, nranks,
      [&](RankCtx &ctx) {
        std::mt19937_64 rng(s);
        bool procs = ctx.mode == Mode::kProcs;
        long colls = 0, p2p = 0, runs = 0;
        for (long i = 0; i < groups; i++) {
          Group g = draw_group(rng, ctx.rank, ctx.nranks, procs);
          for (int r = 0; r < g.reps; r++, runs++) {
            if (!run_group(ctx, g, i, procs)) return;
            colls += (long)g.cases.size(), p2p += (long)g.p2p.size();
          }
        }
        if (ctx.rank == 0)
          std::fprintf(stderr,
                       "soak: %d ranks (%s), %ld groups run %ld times: %ld collectives, "
                       "%ld sends\n",
                       ctx.nranks, th::mode_name(ctx.mode), groups, runs, colls, p2p);
      },
      opt, std::to_string(groups) + " groups");
}

// One thread drives every rank of a process (ncclCommInitAll): each group holds every rank's
// calls, so the groups span the communicators (the handshakes and lanes of several of them run
// together). In a child, with TUTTI_TIMEOUT so that a wait that never ends is an error; exit
// code 0 when every result was exact.
int one_thread_soak(int n, long groups) {
  setenv("TUTTI_TIMEOUT", "60", 1);
  const char *seed = std::getenv("TUTTI_SOAK_GROUPS_SEED");
  const uint64_t s = seed ? std::strtoull(seed, nullptr, 10) : 20261207;
  std::vector<ncclComm_t> comms(n);
  if (ncclCommInitAll(comms.data(), n, nullptr) != ncclSuccess) return 2;
  std::vector<RankCtx> ctx(n);
  std::vector<std::mt19937_64> rng(n, std::mt19937_64(s));
  for (int r = 0; r < n; r++)
    ctx[r].rank = r, ctx[r].nranks = n, ctx[r].mode = Mode::kThreads, ctx[r].comm = comms[r];
  bool ok = true;
  for (long i = 0; i < groups && ok; i++) {
    std::vector<Group> g;
    for (int r = 0; r < n; r++) g.push_back(draw_group(rng[r], r, n, false));
    for (int rep = 0; rep < g[0].reps && ok; rep++) {
      std::vector<std::vector<std::unique_ptr<CaseRun>>> runs(n);
      std::vector<std::vector<std::vector<uint32_t>>> sends(n), recvs(n);
      for (int r = 0; r < n; r++) {
        for (const th::Case &c : g[r].cases) runs[r].emplace_back(new CaseRun(ctx[r], c));
        for (const P2p &p : g[r].p2p) {
          sends[r].emplace_back(p.src == r ? p.count : 0);
          recvs[r].emplace_back(p.dst == r ? p.count : 0, 0xdeadbeefu);
          for (size_t j = 0; j < sends[r].back().size(); j++)
            sends[r].back()[j] = p2p_value(p, j, i);
        }
      }
      ncclGroupStart();
      for (int r = 0; r < n; r++) {
        for (auto &run : runs[r]) run->issue();
        for (size_t k = 0; k < g[r].p2p.size(); k++) {
          const P2p &p = g[r].p2p[k];
          if (p.src == r)
            ncclSend(sends[r][k].data(), p.count, ncclUint32, p.dst, comms[r], nullptr);
          if (p.dst == r)
            ncclRecv(recvs[r][k].data(), p.count, ncclUint32, p.src, comms[r], nullptr);
        }
      }
      ncclResult_t rc = ncclGroupEnd();
      if (rc != ncclSuccess) {
        std::fprintf(stderr, "group %ld: ncclGroupEnd: %s (%s); the group: %s\n", i,
                     ncclGetErrorString(rc), ncclGetLastError(comms[0]),
                     describe_group(g[0], n).c_str());
        return 3;
      }
      for (int r = 0; r < n; r++) {
        for (auto &run : runs[r]) ok = run->verify() && ok;
        for (size_t k = 0; k < g[r].p2p.size(); k++)
          for (size_t j = 0; j < recvs[r][k].size() && ok; j++)
            ok = recvs[r][k][j] == p2p_value(g[r].p2p[k], j, i);
      }
      if (!ok) std::fprintf(stderr, "group %ld failed: %s\n", i, describe_group(g[0], n).c_str());
    }
  }
  for (int r = 0; r < n; r++) ncclCommDestroy(comms[r]);
  if (ok) std::fprintf(stderr, "soak: %d ranks driven by one thread, %ld groups\n", n, groups);
  return ok ? 0 : 4;
}

// Each rank also on a communicator split from the first (ranks of even and of odd number): every
// group holds calls on both, in an order drawn per group, so one thread's group spans two
// communicators that share its rank.
void soak_split(Mode mode, int nranks, long groups, double timeout_s) {
  const char *seed = std::getenv("TUTTI_SOAK_GROUPS_SEED");
  const uint64_t s = seed ? std::strtoull(seed, nullptr, 10) : 20261207;
  th::Options opt;
  opt.timeout_s = timeout_s;
  th::run_ranks_ok(
      mode, nranks,
      [&](RankCtx &ctx) {
        RankCtx sub;
        sub.mode = ctx.mode;
        NCCL_OK(ctx, ncclCommSplit(ctx.comm, ctx.rank % 2, ctx.rank, &sub.comm, nullptr));
        NCCL_OK(ctx, ncclCommUserRank(sub.comm, &sub.rank));
        NCCL_OK(ctx, ncclCommCount(sub.comm, &sub.nranks));
        std::mt19937_64 rng(s);
        bool procs = ctx.mode == Mode::kProcs;
        for (long i = 0; i < groups && ctx.ok() && sub.ok(); i++) {
          Group a = draw_group(rng, ctx.rank, ctx.nranks, procs);
          Group b = draw_group(rng, sub.rank, sub.nranks, procs);
          bool sub_first = rng() % 2 == 0;
          for (int r = 0; r < a.reps && ctx.ok() && sub.ok(); r++) {
            GroupRun ra(ctx, a, i, procs), rb(sub, b, i, procs);
            NCCL_OK(ctx, ncclGroupStart());
            bool issued = sub_first ? rb.issue() && ra.issue() : ra.issue() && rb.issue();
            ncclResult_t rc = ncclGroupEnd();
            if (issued) ra.verify(rc), rb.verify(rc);
          }
        }
        for (const std::string &m : sub.messages)
          ctx.fail("on the split communicator: %s", m.c_str());
        NCCL_OK(ctx, ncclCommDestroy(sub.comm));
      },
      opt, std::to_string(groups) + " groups on a communicator and its split");
}

long groups_from_env(long fallback) {
  const char *env = std::getenv("TUTTI_SOAK_GROUPS");
  return env && std::atol(env) > 0 ? std::atol(env) : fallback;
}

TEST(SoakGroups, ShortTwoRanksAsProcesses) {
  soak_groups(Mode::kProcs, 2, 400, 300);
}

TEST(SoakGroups, ShortThreeRanksAsThreads) {
  soak_groups(Mode::kThreads, 3, 200, 300);
}

TEST(SoakGroups, FourRanksAsProcesses) {
  soak_groups(Mode::kProcs, 4, groups_from_env(8000), 3600);
}

TEST(SoakGroups, ThreeRanksAsThreads) {
  soak_groups(Mode::kThreads, 3, groups_from_env(8000) / 2, 3600);
}

TEST(SoakGroups, ShortOneThreadDrivesThreeRanks) {
  EXPECT_EQ(exit_code_in_child([] { return one_thread_soak(3, 150); }), 0)
      << "2: init, 3: a group failed, 4: a wrong result (stderr says which)";
}

TEST(SoakGroups, OneThreadDrivesFourRanks) {
  EXPECT_EQ(exit_code_in_child([] { return one_thread_soak(4, groups_from_env(8000) / 4); }), 0)
      << "2: init, 3: a group failed, 4: a wrong result (stderr says which)";
}

TEST(SoakGroups, ShortSplitFourRanksAsProcesses) {
  soak_split(Mode::kProcs, 4, 100, 300);
}

TEST(SoakGroups, SplitFourRanksAsProcessesAndThreads) {
  soak_split(Mode::kProcs, 4, groups_from_env(8000) / 4, 3600);
  soak_split(Mode::kThreads, 4, groups_from_env(8000) / 4, 3600);
}

// Ranks 0-1 and 2-3 on two hosts (TUTTI_HOSTID): shm inside a host, sockets between them, the
// hierarchical algorithms.
TEST(SoakGroups, FourRanksOnTwoHostsAsProcesses) {
  th::Options opt;
  opt.before_init = [](int rank) { setenv("TUTTI_HOSTID", rank < 2 ? "soak-a" : "soak-b", 1); };
  soak_groups(Mode::kProcs, 4, groups_from_env(8000) / 4, 3600, opt);
}

// Every pair over sockets (TUTTI_SHM_DISABLE=1).
TEST(SoakGroups, ThreeRanksOverSocketsAsProcesses) {
  th::Options opt;
  opt.env = {{"TUTTI_SHM_DISABLE", "1"}};
  soak_groups(Mode::kProcs, 3, groups_from_env(8000) / 4, 3600, opt);
}

}  // namespace
