// Test harness for tutti's end-to-end tests (harness.cc: ranks; harness_cases.cc: datatypes
// and collective cases): the public API only (tutti.h), nothing internal.
//
// 1. Ranks. run_ranks(mode, n, body) runs `body` once per rank, either
//      Mode::kProcs    n forked processes: the parent draws the id (ncclGetUniqueId; the
//                      bootstrap root thread lives in the parent), each child calls
//                      ncclCommInitRank, the body, ncclCommDestroy and reports by exit code; its
//                      failure messages come back through a pipe and the first one is also
//                      printed to stderr. The parent waits until a deadline, then SIGKILLs.
//      Mode::kThreads  one process, ncclCommInitAll(comms, n, NULL) and one std::thread per
//                      rank; on the deadline the comms are aborted (ncclCommAbort releases the
//                      blocked calls) and, if a thread still does not return, the test binary
//                      aborts rather than hang.
//    A body never uses gtest assertions (they would be lost in a child): it reports through
//    ctx.fail(...) or the RCHECK / NCCL_OK macros below. expect_ranks_ok() turns the outcome
//    into gtest failures naming the rank, the exit status and the messages. Every run also
//    checks that no /dev/shm/tutti-<pid>-* segment of its processes is left behind.
//    TUTTI_TEST_VERBOSE=1 prints each run's outcome and duration.
//
// 2. Datatypes. Own codecs for float16 / bfloat16 / fp8 (round to nearest even, fp8 saturates
//    to the largest finite), element encode/decode, and printable values for messages.
//
// 3. Collective cases (Gloo style). run_case(ctx, case) fills inputs with a closed-form
//    f(index, rank) chosen so that every partial result is exact in the datatype, runs the
//    collective (in place or not, any root, any op including PreMulSum), and checks every
//    element of every buffer it passed: outputs against the closed form, inputs unchanged,
//    buffers the collective must not write (non-root outputs, guard bytes around every buffer)
//    unchanged.
#ifndef TUTTI_TESTS_HARNESS_H_
#define TUTTI_TESTS_HARNESS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "tutti.h"

namespace th {

// ---------------------------------------------------------------- ranks

enum class Mode { kProcs, kThreads };
const char *mode_name(Mode m);

// What one rank's body sees.
struct RankCtx {
  int rank = 0, nranks = 0;
  Mode mode = Mode::kProcs;
  ncclComm_t comm = nullptr;            // null when Options::init is false
  ncclUniqueId id{};                    // the ranks' id (zero for threads with Options::init)
  std::vector<ncclUniqueId> extra_ids;  // Options::extra_ids more ids, same for every rank
  std::vector<std::string> messages;    // first failures (capped)
  int failures = 0;

  // Records a failure (printf style). The first one is also printed to stderr at once.
  void fail(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
  bool ok() const { return failures == 0; }
};

struct Options {
  double timeout_s = 120;  // per run; a rank still running after it is killed / aborted
  bool init = true;        // false: the body makes its own communicator from ctx.id
  int extra_ids = 0;       // more unique ids drawn before the ranks start
  // Processes only: environment set in every child before init, and a per-rank hook run in the
  // rank (child process, or thread) before init.
  std::vector<std::pair<std::string, std::string>> env;
  std::function<void(int rank)> before_init;
  // Processes only: runs in the parent while the children run (e.g. to kill one).
  std::function<void(const std::vector<pid_t> &pids)> while_running;
};

// Options::env reaches ranks that are processes only; ranks that are threads read this process's
// environment. For mode kThreads this sets Options::env here for its scope (unset at its end);
// for processes it does nothing.
class ThreadEnv {
 public:
  ThreadEnv(Mode mode, const Options &opt);
  ~ThreadEnv();
  ThreadEnv(const ThreadEnv &) = delete;
  ThreadEnv &operator=(const ThreadEnv &) = delete;

 private:
  std::vector<std::string> names_;
};

struct RankResult {
  int rank = 0;
  pid_t pid = 0;        // the child (processes) or this process (threads)
  int exit_code = -1;   // processes: exit status, -1 if killed by a signal
  int term_signal = 0;  // processes: the signal that ended it
  bool timed_out = false;
  int failures = 0;
  std::vector<std::string> messages;
};

struct RunResult {
  Mode mode = Mode::kProcs;
  int nranks = 0;
  double seconds = 0;
  std::vector<RankResult> ranks;
  std::vector<std::string> leaked_shm;  // /dev/shm/tutti-<pid>-* of this run's processes
  std::string setup_error;              // e.g. ncclCommInitAll failed
  bool ok() const;
  std::string describe() const;  // one line per rank that did not pass
};

using Body = std::function<void(RankCtx &)>;

RunResult run_ranks(Mode mode, int nranks, const Body &body, const Options &opt = Options());
// Adds a gtest failure naming `what` and every failing rank; returns r.ok().
bool expect_ranks_ok(const RunResult &r, const std::string &what);
// run_ranks + expect_ranks_ok.
bool run_ranks_ok(Mode mode, int nranks, const Body &body, const Options &opt = Options(),
                  const std::string &what = "");

// Zeroed memory shared by this process and every child forked later (MAP_SHARED | MAP_ANONYMOUS,
// nothing in /dev/shm): how ranks that are processes report to the test. nullptr on failure.
void *shared_alloc(size_t bytes);
void shared_free(void *p, size_t bytes);

// /dev/shm/tutti-<pid>-* entries for the given pids.
std::vector<std::string> shm_segments_of(const std::vector<pid_t> &pids);
double now_s();  // CLOCK_MONOTONIC, comparable between processes
// TUTTI_TEST_TIMEOUT_SCALE (default 1, at least 1): multiplies every run's Options::timeout_s,
// for builds that run several times slower (sanitizers; scripts/sanitize.sh sets it).
double timeout_scale();
bool contains(const std::string &text, const std::string &what);

// Inside a body: record and return (or return `ret`) when a condition or a call fails.
#define RCHECK_RET(ctx, cond, ret, ...) \
  do {                                  \
    if (!(cond)) {                      \
      (ctx).fail(__VA_ARGS__);          \
      return ret;                       \
    }                                   \
  } while (0)
#define RCHECK(ctx, cond, ...) RCHECK_RET(ctx, cond, , __VA_ARGS__)
#define NCCL_OK_RET(ctx, call, ret)                                                    \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                           \
      (ctx).fail("%s:%d: %s returned %d (%s): %s", __FILE__, __LINE__, #call, (int)r_, \
                 ncclGetErrorString(r_), ncclGetLastError((ctx).comm));                \
      return ret;                                                                      \
    }                                                                                  \
  } while (0)
#define NCCL_OK(ctx, call) NCCL_OK_RET(ctx, call, )

// ---------------------------------------------------------------- datatypes

struct TypeInfo {
  ncclDataType_t type;
  const char *name;
  size_t size;
  bool is_float, is_signed;
  uint64_t exact_bound;  // every integer in [-bound, bound] ([0, bound] unsigned) is exact
};
extern const ncclDataType_t kAllTypes[12];
const TypeInfo &type_info(ncclDataType_t t);

// Minifloat encoder: `ebits` exponent and `mbits` mantissa bits; fn = e4m3 style (no infinity,
// only all-ones is NaN). Rounds to nearest even; overflow saturates when `saturate` (fp8) and
// goes to infinity otherwise (half, bfloat16). Decoding is reduce_codec.h's.
uint32_t minifloat_encode(double v, int ebits, int mbits, bool fn, bool saturate);

// Element codecs. encode_float rounds once (nearest even) to the type; encode_int truncates to
// the type's width (two's complement wrapping).
void encode_float(ncclDataType_t t, double v, void *out);
void encode_int(ncclDataType_t t, int64_t v, void *out);
double decode_float(ncclDataType_t t, const void *p);
int64_t decode_int(ncclDataType_t t, const void *p);       // sign- or zero-extended
std::string format_elem(ncclDataType_t t, const void *p);  // "value (0xbits)"

// ---------------------------------------------------------------- collective cases

enum class Coll {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter
};
enum class Op { kSum, kProd, kMax, kMin, kAvg, kPreMulSum };
extern const Coll kAllColls[8];
extern const Op kAllOps[6];
const char *coll_name(Coll c);
const char *op_name(Op o);
bool coll_reduces(Coll c);  // takes an op

struct Case {
  Coll coll = Coll::kAllReduce;
  ncclDataType_t type = ncclFloat32;
  Op op = Op::kSum;  // reducing collectives only
  size_t count = 0;  // NCCL's count argument (per-rank block for gather/scatter/...)
  bool in_place = false;
  int root = 0;      // rooted collectives only
  size_t align = 0;  // extra elements of misalignment of every buffer (0..3)
};
std::string describe(const Case &c, int nranks);
// A random case, the same on every rank from the same rng state: collective, datatype, op, a count
// drawn log-uniformly below 2^max_log2, root, misalignment; in place on every rank alike or not
// (rank < 0), or each rank its own placement (rank >= 0: in place, out of place, or a bit per
// rank of one draw).
Case random_case(std::mt19937_64 &rng, int nranks, int max_log2, int rank = -1);
// Readable gtest parameter values (test names in ctest show them).
inline void PrintTo(Coll c, std::ostream *os) {
  *os << coll_name(c);
}
inline void PrintTo(Mode m, std::ostream *os) {
  *os << mode_name(m);
}

// Value rank `rank` contributes at global index g for a reducing case, as an integer (all
// generated values are integers; uint64 values are bit patterns) and the PreMulSum scalar.
int64_t input_value(ncclDataType_t t, Op op, size_t g, int rank, int nranks);
int64_t premul_scalar(ncclDataType_t t, int nranks);

// Case buffers (CaseRun) from ncclMemAlloc instead of the heap, for every case made after the
// call in this process and in ranks forked later (direct all-reduce tests).
void case_buffers_from_memalloc(bool on);

// Case buffers from another allocator, for every case made after the call in this process (nullptr:
// back to the heap or ncclMemAlloc): alloc gives what the call gets, view(p) the bytes the test
// fills and checks (emulated device memory, which the host reaches only through such a view).
struct BufferSource {
  void *(*alloc)(size_t bytes);
  void (*release)(void *p);
  void *(*view)(void *p);
};
void case_buffers_from(const BufferSource *src);

// One collective case on one rank: the constructor lays out and fills the buffers, issue()
// makes the call (inside a group it only queues it), verify() checks every buffer and reports
// through ctx.fail. Buffers live as long as the object.
struct CaseBuffer;
class CaseRun {
 public:
  CaseRun(RankCtx &ctx, const Case &c);
  ~CaseRun();
  CaseRun(const CaseRun &) = delete;
  CaseRun &operator=(const CaseRun &) = delete;
  // The stream the call is made on (nullptr by default); the caller synchronizes it before verify.
  void set_stream(cudaStream_t s) { stream_ = s; }
  ncclResult_t issue();
  bool verify();
  // For a call the library may refuse: it returned ncclInvalidArgument and no buffer changed.
  bool verify_rejected();
  ncclResult_t result() const { return rc_; }
  bool comm_broken() const;  // the call failed and the communicator reports an async error

 private:
  void layout();
  void input(size_t i, uint8_t *out) const;   // this rank's send element i
  void output(size_t i, uint8_t *out) const;  // expected receive element i
  void reduced(size_t g, uint8_t *out) const;
  void bits(size_t g, int src, uint8_t *out) const;
  ncclResult_t call(const void *send, void *recv, ncclRedOp_t op);
  // Checks b: elements [out_at, out_at + out_n) hold the outputs, every other byte (guards
  // included) is as it was before the call.
  bool check(const char *what, CaseBuffer &b, size_t out_at, size_t out_n);

  RankCtx &ctx_;
  Case c_;
  int r_, n_;
  size_t es_;
  int64_t scalar_;
  // Elements this rank sends / receives out of place, whether its receive buffer gets a result,
  // and the single buffer in place (length, offsets of the send and receive views).
  size_t send_n_ = 0, recv_n_ = 0, buf_n_ = 0, send_at_ = 0, recv_at_ = 0;
  bool writes_ = true;
  std::unique_ptr<CaseBuffer> buf_, sb_, rb_;
  ncclRedOp_t op_ = ncclSum;
  bool premul_ = false;
  ncclResult_t rc_ = ncclSuccess;
  cudaStream_t stream_ = nullptr;
};

// CaseRun's issue + verify. *comm_broken (if given) tells whether to stop using the comm.
bool run_case(RankCtx &ctx, const Case &c, bool *comm_broken = nullptr);

// Bit pattern element g of rank src in a copy collective (broadcast, gathers, all-to-all).
void copy_elem(ncclDataType_t t, size_t g, int src, void *out);

// A 64-bit hash of a buffer (FNV-1a), for comparing results between ranks and runs.
uint64_t hash_bytes(const void *p, size_t n);

}  // namespace th

#endif  // TUTTI_TESTS_HARNESS_H_
