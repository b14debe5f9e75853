// The ranks of test_multihost: this binary, started by tutti-run --hosts with TUTTI_MH_HELPER.
//
//   collectives  every collective (all-reduce with every op, broadcast and reduce from several
//                roots, all-gather, reduce-scatter, all-to-all, gather, scatter, send/recv),
//                in and out of place, counts 0, 1, 7, 1000, 300001 (crossing slots and chunks),
//                checked against closed forms (Gloo's j*stride + rank pattern: exact in int32
//                and float); once, or until rank 0 sees TUTTI_MH_STOP_FILE. Prints "every
//                collective exact".
//   loop         fp32 all-reduce of 256 MiB, over and over (TUTTI_MH_ITERS, default 1000):
//                prints "looping" after the first one; on an error prints "FAILED ... <last
//                error>", aborts the communicator and exits 3.
// Every line this file prints starts "R<rank>| " so the test can tell the ranks apart.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "tutti.h"

namespace {

int g_rank = -1, g_n = 0;
ncclComm_t g_comm = nullptr;
double g_t0 = 0;

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int failed(const char *what, ncclResult_t r) {
  printf("R%d| FAILED after %.1f s in %s: %s (%s)\n", g_rank, now_s() - g_t0, what,
         ncclGetErrorString(r), ncclGetLastError(g_comm));
  fflush(stdout);
  if (g_comm) ncclCommAbort(g_comm);
  return 3;
}

#define NCCL(call)                                   \
  do {                                               \
    ncclResult_t r_ = (call);                        \
    if (r_ != ncclSuccess) return failed(#call, r_); \
  } while (0)

long in(int r, size_t j) {
  return (long)(j % 1009) + 7 * r + 1;
}
long sum_in(size_t j, int n) {
  return n * (long)(j % 1009) + 7L * n * (n - 1) / 2 + n;
}

int mismatches = 0;
template <class T>
void expect(const char *what, size_t c, const T *got, long (*want)(size_t, void *), void *ctx) {
  for (size_t j = 0; j < c; j++)
    if ((double)got[j] != (double)want(j, ctx)) {
      if (mismatches++ < 10)
        printf("R%d| mismatch in %s (count %zu) at %zu: got %.1f want %ld\n", g_rank, what, c, j,
               (double)got[j], want(j, ctx));
      return;
    }
}

struct Ctx {
  int n, rank, root;
  size_t c;
};

template <class T>
void fill(std::vector<T> &v, int r, size_t off = 0) {
  for (size_t j = 0; j < v.size(); j++) v[j] = (T)in(r, off + j);
}

template <class T>
int check_allreduce(size_t c, ncclDataType_t t) {
  std::vector<T> s(c), d(c, (T)-1);
  Ctx x = {g_n, g_rank, 0, c};
  fill(s, g_rank);
  NCCL(ncclAllReduce(s.data(), d.data(), c, t, ncclSum, g_comm, nullptr));
  expect<T>(
      "allreduce sum", c, d.data(), [](size_t j, void *p) { return sum_in(j, ((Ctx *)p)->n); }, &x);
  NCCL(ncclAllReduce(s.data(), s.data(), c, t, ncclSum, g_comm, nullptr));  // in place
  expect<T>(
      "allreduce sum in place", c, s.data(),
      [](size_t j, void *p) { return sum_in(j, ((Ctx *)p)->n); }, &x);
  fill(s, g_rank);
  NCCL(ncclAllReduce(s.data(), d.data(), c, t, ncclMax, g_comm, nullptr));
  expect<T>(
      "allreduce max", c, d.data(), [](size_t j, void *p) { return in(((Ctx *)p)->n - 1, j); }, &x);
  NCCL(ncclAllReduce(s.data(), d.data(), c, t, ncclMin, g_comm, nullptr));
  expect<T>(
      "allreduce min", c, d.data(), [](size_t j, void *) { return in(0, j); }, &x);
  for (auto &v : s) v = (T)(g_rank % 2 + 1);
  NCCL(ncclAllReduce(s.data(), d.data(), c, t, ncclProd, g_comm, nullptr));
  expect<T>(
      "allreduce prod", c, d.data(), [](size_t, void *p) { return 1L << (((Ctx *)p)->n / 2); }, &x);
  return 0;
}

int check_avg(size_t c) {
  std::vector<float> s(c), d(c);
  fill(s, g_rank);
  NCCL(ncclAllReduce(s.data(), d.data(), c, ncclFloat32, ncclAvg, g_comm, nullptr));
  // Exact: every partial sum is an integer below 2^24 (exact in float, in any order) and Avg
  // divides the final sum once by n (reduce.h), the same float division as here.
  for (size_t j = 0; j < c; j++)
    if (d[j] != (float)sum_in(j, g_n) / (float)g_n) {
      if (mismatches++ < 10) printf("R%d| mismatch in allreduce avg at %zu: %f\n", g_rank, j, d[j]);
      break;
    }
  return 0;
}

int check_rooted(size_t c) {
  std::vector<int32_t> s(c), d(c);
  for (int root = 0; root < g_n; root += (g_n > 2 ? g_n - 1 : 1)) {
    Ctx x = {g_n, g_rank, root, c};
    fill(s, g_rank);
    NCCL(ncclBroadcast(s.data(), d.data(), c, ncclInt32, root, g_comm, nullptr));
    expect<int32_t>(
        "broadcast", c, d.data(), [](size_t j, void *p) { return in(((Ctx *)p)->root, j); }, &x);
    NCCL(ncclBroadcast(s.data(), s.data(), c, ncclInt32, root, g_comm, nullptr));  // in place
    expect<int32_t>(
        "broadcast in place", c, s.data(),
        [](size_t j, void *p) { return in(((Ctx *)p)->root, j); }, &x);
    fill(s, g_rank);
    NCCL(ncclReduce(s.data(), d.data(), c, ncclInt32, ncclSum, root, g_comm, nullptr));
    if (g_rank == root)
      expect<int32_t>(
          "reduce", c, d.data(), [](size_t j, void *p) { return sum_in(j, ((Ctx *)p)->n); }, &x);
    std::vector<int32_t> big(c * g_n, -1);
    NCCL(ncclGather(s.data(), big.data(), c, ncclInt32, root, g_comm, nullptr));
    if (g_rank == root)
      expect<int32_t>(
          "gather", c * g_n, big.data(),
          [](size_t i, void *p) {
            size_t c = ((Ctx *)p)->c;
            return in((int)(i / c), i % c);
          },
          &x);
    for (size_t i = 0; i < big.size(); i++) big[i] = (int32_t)in(g_rank, i);
    NCCL(ncclScatter(big.data(), d.data(), c, ncclInt32, root, g_comm, nullptr));
    expect<int32_t>(
        "scatter", c, d.data(),
        [](size_t j, void *p) {
          Ctx *x = (Ctx *)p;
          return in(x->root, x->rank * x->c + j);
        },
        &x);
  }
  return 0;
}

int check_all_to_all(size_t c) {
  size_t nc = c * g_n;
  Ctx x = {g_n, g_rank, 0, c};
  std::vector<float> s(c), big(nc, -1), sbig(nc), d(c);
  fill(s, g_rank);
  NCCL(ncclAllGather(s.data(), big.data(), c, ncclFloat32, g_comm, nullptr));
  expect<float>(
      "allgather", nc, big.data(),
      [](size_t i, void *p) {
        size_t c = ((Ctx *)p)->c;
        return in((int)(i / c), i % c);
      },
      &x);
  fill(big, 0);  // in place: own block at rank * c
  for (size_t j = 0; j < c; j++) big[g_rank * c + j] = (float)in(g_rank, j);
  NCCL(ncclAllGather(big.data() + g_rank * c, big.data(), c, ncclFloat32, g_comm, nullptr));
  expect<float>(
      "allgather in place", nc, big.data(),
      [](size_t i, void *p) {
        size_t c = ((Ctx *)p)->c;
        return in((int)(i / c), i % c);
      },
      &x);
  fill(sbig, g_rank);
  NCCL(ncclReduceScatter(sbig.data(), d.data(), c, ncclFloat32, ncclSum, g_comm, nullptr));
  expect<float>(
      "reducescatter", c, d.data(),
      [](size_t j, void *p) {
        Ctx *x = (Ctx *)p;
        return sum_in(x->rank * x->c + j, x->n);
      },
      &x);
  NCCL(ncclAlltoAll(sbig.data(), big.data(), c, ncclFloat32, g_comm, nullptr));
  expect<float>(
      "alltoall", nc, big.data(),
      [](size_t i, void *p) {
        Ctx *x = (Ctx *)p;
        return in((int)(i / x->c), x->rank * x->c + i % x->c);
      },
      &x);
  int next = (g_rank + 1) % g_n, prev = (g_rank + g_n - 1) % g_n;
  x.root = prev;
  if (g_n > 1) {
    NCCL(ncclGroupStart());
    NCCL(ncclSend(s.data(), c, ncclFloat32, next, g_comm, nullptr));
    NCCL(ncclRecv(d.data(), c, ncclFloat32, prev, g_comm, nullptr));
    NCCL(ncclGroupEnd());
    expect<float>(
        "send/recv ring", c, d.data(), [](size_t j, void *p) { return in(((Ctx *)p)->root, j); },
        &x);
  }
  return 0;
}

// Another round? Once without TUTTI_MH_STOP_FILE; with it, until rank 0 sees that file (its
// decision is broadcast, so every rank stops after the same round). 1 yes, 0 no, 3 failure.
int another_round(int round) {
  const char *stop = getenv("TUTTI_MH_STOP_FILE");
  if (!stop) return round == 0;
  int go = g_rank == 0 ? access(stop, F_OK) != 0 : 0;
  NCCL(ncclBroadcast(&go, &go, 1, ncclInt32, 0, g_comm, nullptr));
  return go;
}

int run_collectives() {
  const size_t counts[] = {0, 1, 7, 1000, 300001};
  if (getenv("TUTTI_MH_STOP_FILE")) printf("R%d| looping\n", g_rank), fflush(stdout);
  for (int round = 0;; round++) {
    int more = another_round(round);
    if (more != 1) {
      if (more == 3) return 3;
      break;
    }
    for (size_t c : counts) {
      int rc = check_allreduce<int32_t>(c, ncclInt32);
      if (!rc) rc = check_allreduce<float>(c, ncclFloat32);
      if (!rc) rc = check_avg(c);
      if (!rc) rc = check_rooted(c);
      if (!rc) rc = check_all_to_all(c);
      if (rc) return rc;
    }
  }
  if (mismatches) {
    printf("R%d| %d mismatches\n", g_rank, mismatches);
    return 1;
  }
  printf("R%d| every collective exact (%d ranks)\n", g_rank, g_n);
  return 0;
}

int run_loop() {
  const size_t count = 64u << 20;  // 256 MiB of fp32
  const char *it = getenv("TUTTI_MH_ITERS");
  int iters = it ? atoi(it) : 1000;
  std::vector<float> s(count, (float)(g_rank + 1)), d(count);
  for (int i = 0; i < iters; i++) {
    NCCL(ncclAllReduce(s.data(), d.data(), count, ncclFloat32, ncclSum, g_comm, nullptr));
    if (i == 0) {
      if (d[0] != g_n * (g_n + 1) / 2.0f || d[count - 1] != d[0])
        return printf("R%d| wrong sum\n", g_rank), 1;
      printf("R%d| looping\n", g_rank);
      fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

extern "C" int multihost_helper_main(const char *mode) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  g_t0 = now_s();
  ncclResult_t r = tuttiCommInitFromEnv(&g_comm);
  if (r != ncclSuccess) {
    printf("R?| FAILED init: %s\n", ncclGetLastError(nullptr));
    return 3;
  }
  ncclCommUserRank(g_comm, &g_rank);
  ncclCommCount(g_comm, &g_n);
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  printf("R%d| Pid %d on host %s: initialised\n", g_rank, (int)getpid(), host);
  int rc = strcmp(mode, "loop") == 0 ? run_loop() : run_collectives();
  if (rc == 0 || rc == 1) ncclCommDestroy(g_comm);
  return rc;
}
