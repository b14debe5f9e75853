// The ranks of test_chaos: this binary, started by tutti-run --hosts with TUTTI_CHAOS_HELPER=1.
//
// Every rank draws the same sequence of calls from TUTTI_CHAOS_SEED (kind: one of six
// collectives, all-to-all (in place for an even root) and a ring of sends and receives among
// them; datatype, count up to 256 Ki elements, root) and checks every result exactly (inputs j %
// 1009 + rank: sums of a few ranks are integers, exact in every datatype used). The victim rank
// (TUTTI_CHAOS_VICTIM, -1: none) kills itself with SIGKILL, from a thread, TUTTI_CHAOS_DELAY_US
// after the moment TUTTI_CHAOS_PHASE names:
//   init      the start of ncclCommInitRank (tuttiCommInitFromEnv)
//   coll      the start of call TUTTI_CHAOS_CALL (a collective is running when the signal lands)
//   between   the start of a 300 ms pause after call TUTTI_CHAOS_CALL (no call is running)
//   destroy   the start of ncclCommDestroy
// The test cuts links from outside at the same moments, told by the lines printed here:
// "R<r>| Pid <pid> at <s>" (before init, s: CLOCK_MONOTONIC), "R<r>| call <i>", "R<r>| pause",
// "R<r>| destroying". An error prints "R<r>| FAILED in <what> after <s> s: <code> (<last error>)",
// aborts the communicator and exits 3; a rank that got through prints "R<r>| done".
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "chaos_rng.h"
#include "tutti.h"

namespace {

int g_rank = -1;
ncclComm_t g_comm = nullptr;

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

// The victim's killer: armed at the chosen moment, SIGKILLs this process after the delay.
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
bool g_armed = false;

void *killer_main(void *) {
  pthread_mutex_lock(&g_mu);
  while (!g_armed) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  usleep((useconds_t)env_int("TUTTI_CHAOS_DELAY_US", 0));
  kill(getpid(), SIGKILL);
  return nullptr;
}

void at_moment(const char *phase) {
  const char *want = getenv("TUTTI_CHAOS_PHASE");
  if (env_int("TUTTI_CHAOS_VICTIM", -1) != g_rank || !want || strcmp(want, phase) != 0) return;
  pthread_mutex_lock(&g_mu);
  g_armed = true;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

double g_t_fail = 0;
int failed(const char *what, ncclResult_t r) {
  printf("R%d| FAILED in %s after %.2f s: %s (%s)\n", g_rank, what, now_s() - g_t_fail,
         ncclGetErrorString(r), ncclGetLastError(g_comm));
  fflush(stdout);
  if (g_comm) ncclCommAbort(g_comm);
  return 3;
}

double in(int r, size_t j) {
  return (double)(j % 1009) + r;
}

// One random collective, checked exactly; 0, 3 on an error, 4 on a wrong value.
int one_call(ChaosRng &rng, int n) {
  const ncclDataType_t types[] = {ncclFloat32, ncclInt32, ncclFloat64};
  ncclDataType_t t = types[rng.below(3)];
  size_t es = t == ncclFloat64 ? 8 : 4, c = 1 + (size_t)rng.below(256 * 1024);
  int kind = rng.below(6), root = rng.below(n);
  if (kind == 4) c = 1 + c / (size_t)n; /* all-to-all: c per peer */
  size_t sc = kind == 2 ? c : kind == 3 || kind == 4 ? c * n : c;
  size_t rc = kind == 2 || kind == 4 ? c * n : c;
  std::vector<char> s(sc * es), d(rc * es);
  auto put = [&](std::vector<char> &v, size_t j, double x) {
    if (t == ncclFloat32) ((float *)v.data())[j] = (float)x;
    if (t == ncclInt32) ((int32_t *)v.data())[j] = (int32_t)x;
    if (t == ncclFloat64) ((double *)v.data())[j] = x;
  };
  auto get = [&](const std::vector<char> &v, size_t j) {
    return t == ncclFloat32 ? (double)((const float *)v.data())[j]
           : t == ncclInt32 ? (double)((const int32_t *)v.data())[j]
                            : ((const double *)v.data())[j];
  };
  for (size_t j = 0; j < sc; j++) put(s, j, in(g_rank, j));
  ncclResult_t r;
  const char *what[] = {"AllReduce",     "Broadcast", "AllGather",
                        "ReduceScatter", "AlltoAll",  "Send/Recv"};
  int next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  if (kind == 0) r = ncclAllReduce(s.data(), d.data(), c, t, ncclSum, g_comm, nullptr);
  if (kind == 1) r = ncclBroadcast(s.data(), d.data(), c, t, root, g_comm, nullptr);
  if (kind == 2) r = ncclAllGather(s.data(), d.data(), c, t, g_comm, nullptr);
  if (kind == 3) r = ncclReduceScatter(s.data(), d.data(), c, t, ncclSum, g_comm, nullptr);
  /* an all-to-all in place for an even root (drawn for every call: the seeds' sequences stay) */
  bool in_place = kind == 4 && root % 2 == 0;
  if (kind == 4) r = ncclAlltoAll(s.data(), in_place ? s.data() : d.data(), c, t, g_comm, nullptr);
  if (kind == 5) { /* a ring shift: receive the previous rank's buffer, send to the next */
    ncclGroupStart();
    ncclRecv(d.data(), c, t, prev, g_comm, nullptr);
    ncclSend(s.data(), c, t, next, g_comm, nullptr);
    r = ncclGroupEnd();
  }
  if (r != ncclSuccess) return failed(what[kind], r);
  for (size_t j = 0; j < rc; j++) {
    double want = kind == 0   ? n * (double)(j % 1009) + n * (n - 1) / 2.0
                  : kind == 1 ? in(root, j)
                  : kind == 2 ? in((int)(j / c), j % c)
                  : kind == 3 ? n * (double)((g_rank * c + j) % 1009) + n * (n - 1) / 2.0
                  : kind == 4 ? in((int)(j / c), g_rank * c + j % c)
                              : in(prev, j);
    double got = get(in_place ? s : d, j);
    if (got != want) {
      printf("R%d| WRONG %s%s count %zu at %zu: %g, want %g\n", g_rank, what[kind],
             in_place ? " in place" : "", c, j, got, want);
      return 4;
    }
  }
  return 0;
}

}  // namespace

extern "C" int chaos_helper_main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  g_rank = env_int("TUTTI_RANK", -1);
  printf("R%d| Pid %d at %.3f\n", g_rank, (int)getpid(), now_s());
  pthread_t killer;
  if (env_int("TUTTI_CHAOS_VICTIM", -1) == g_rank)
    pthread_create(&killer, nullptr, killer_main, nullptr);
  ChaosRng rng = {(uint64_t)env_int("TUTTI_CHAOS_SEED", 1)};
  int calls = env_int("TUTTI_CHAOS_CALLS", 20), at = env_int("TUTTI_CHAOS_CALL", 0), n = 0;
  g_t_fail = now_s();
  at_moment("init");
  ncclResult_t r = tuttiCommInitFromEnv(&g_comm);
  if (r != ncclSuccess) return failed("init", r);
  ncclCommCount(g_comm, &n);
  for (int i = 0; i < calls; i++) {
    printf("R%d| call %d\n", g_rank, i);
    g_t_fail = now_s();
    if (i == at) at_moment("coll");
    int rc = one_call(rng, n);
    if (rc) return rc;
    if (i == at) {
      printf("R%d| pause\n", g_rank);
      g_t_fail = now_s();
      at_moment("between");
      usleep(300000);
    }
  }
  printf("R%d| destroying\n", g_rank);
  g_t_fail = now_s();
  at_moment("destroy");
  r = ncclCommDestroy(g_comm);
  if (r != ncclSuccess) return g_comm = nullptr, failed("destroy", r);
  printf("R%d| done\n", g_rank);
  return 0;
}
