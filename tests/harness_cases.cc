// Test harness, second half: datatype codecs and collective cases (closed-form inputs and
// expected outputs, buffer checks). See harness.h.
#include <sys/types.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness.h"
#include "reduce_codec.h"

namespace th {

// ---------------------------------------------------------------- datatypes

const ncclDataType_t kAllTypes[12] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                      ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                      ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

Case random_case(std::mt19937_64 &rng, int nranks, int max_log2, int rank) {
  Case c;
  c.coll = kAllColls[rng() % 8];
  c.type = kAllTypes[rng() % 12];
  c.op = kAllOps[rng() % 6];
  int bits = (int)(rng() % (uint64_t)(max_log2 + 1));
  c.count = bits == 0 ? 0 : (size_t)(rng() % (1ull << bits));
  if (rank < 0) {
    c.in_place = rng() % 2 == 0;
  } else {
    uint64_t place = rng() % 3, place_bits = rng();
    c.in_place = place == 0 ? false : place == 1 ? true : ((place_bits >> rank) & 1) != 0;
  }
  c.root = (int)(rng() % (uint64_t)nranks);
  c.align = rng() % 4;
  return c;
}

const TypeInfo &type_info(ncclDataType_t t) {
  static const TypeInfo kInfo[12] = {
      {ncclInt8, "int8", 1, false, true, 127},
      {ncclUint8, "uint8", 1, false, false, 255},
      {ncclInt32, "int32", 4, false, true, INT32_MAX},
      {ncclUint32, "uint32", 4, false, false, UINT32_MAX},
      {ncclInt64, "int64", 8, false, true, INT64_MAX},
      {ncclUint64, "uint64", 8, false, false, UINT64_MAX},
      {ncclFloat16, "float16", 2, true, true, 2048},
      {ncclFloat32, "float32", 4, true, true, 1ull << 24},
      {ncclFloat64, "float64", 8, true, true, 1ull << 53},
      {ncclBfloat16, "bfloat16", 2, true, true, 256},
      {ncclFloat8e4m3, "fp8e4m3", 1, true, true, 16},
      {ncclFloat8e5m2, "fp8e5m2", 1, true, true, 8},
  };
  return kInfo[static_cast<unsigned>(t) < 12 ? t : 0];
}

uint32_t minifloat_encode(double v, int ebits, int mbits, bool fn, bool saturate) {
  uint32_t sign = std::signbit(v) ? 1u << (ebits + mbits) : 0;
  uint32_t all_exp = ((1u << ebits) - 1) << mbits;
  if (std::isnan(v)) return sign | all_exp | (fn ? (1u << mbits) - 1 : 1u << (mbits - 1));
  int bias = (1 << (ebits - 1)) - 1;
  int emax = fn ? (1 << ebits) - 1 - bias : (1 << ebits) - 2 - bias;
  double maxfin = std::ldexp(2.0 - std::ldexp(1.0, fn ? 1 - mbits : -mbits), emax);
  double a = std::fabs(v);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);
  int ue = std::max(e - 1, 1 - bias);
  double q = std::ldexp(1.0, ue - mbits);
  double r = std::nearbyint(a / q) * q;  // the default rounding mode: nearest, ties to even
  if (r > maxfin) {
    if (saturate)
      r = maxfin;
    else
      return sign | all_exp;  // infinity (half, bfloat16)
  }
  double min_normal = std::ldexp(1.0, 1 - bias);
  if (r < min_normal) return sign | static_cast<uint32_t>(r / std::ldexp(1.0, 1 - bias - mbits));
  std::frexp(r, &e);
  ue = e - 1;
  uint32_t mant = static_cast<uint32_t>((r / std::ldexp(1.0, ue) - 1.0) * (1u << mbits));
  return sign | (static_cast<uint32_t>(ue + bias) << mbits) | mant;
}

void encode_int(ncclDataType_t t, int64_t v, void *out) {
  memcpy(out, &v, type_info(t).size);  // little endian: the low bytes, i.e. wrapped
}

int64_t decode_int(ncclDataType_t t, const void *p) {
  switch (t) {
    case ncclInt8:
      return *static_cast<const int8_t *>(p);
    case ncclUint8:
      return *static_cast<const uint8_t *>(p);
    case ncclInt32: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    case ncclUint32: {
      uint32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      memcpy(&v, p, 8);
      return v;
    }
  }
}

namespace {

// Codes of the integers -4096..4096 in the four minifloat types (the test inputs), so filling
// and checking large buffers does not spend its time in the general encoder.
struct MinifloatIntCodes {
  uint16_t code[4][8193];
  MinifloatIntCodes() {
    for (int v = -4096; v <= 4096; v++) {
      code[0][v + 4096] = static_cast<uint16_t>(minifloat_encode(v, 5, 10, false, false));
      code[1][v + 4096] = static_cast<uint16_t>(minifloat_encode(v, 8, 7, false, false));
      code[2][v + 4096] = static_cast<uint16_t>(minifloat_encode(v, 4, 3, true, true));
      code[3][v + 4096] = static_cast<uint16_t>(minifloat_encode(v, 5, 2, false, true));
    }
  }
};

int minifloat_index(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16:
      return 0;
    case ncclBfloat16:
      return 1;
    case ncclFloat8e4m3:
      return 2;
    case ncclFloat8e5m2:
      return 3;
    default:
      return -1;
  }
}

}  // namespace

void encode_float(ncclDataType_t t, double v, void *out) {
  static const MinifloatIntCodes table;
  int idx = minifloat_index(t);
  if (idx >= 0 && v >= -4096 && v <= 4096 && v == static_cast<int>(v) &&
      !(v == 0 && std::signbit(v))) {
    uint16_t c = table.code[idx][static_cast<int>(v) + 4096];
    memcpy(out, &c, type_info(t).size);
    return;
  }
  uint32_t bits = 0;
  switch (t) {
    case ncclFloat32: {
      float f = static_cast<float>(v);
      memcpy(out, &f, 4);
      return;
    }
    case ncclFloat64:
      memcpy(out, &v, 8);
      return;
    case ncclFloat16:
      bits = minifloat_encode(v, 5, 10, false, false);
      break;
    case ncclBfloat16:
      bits = minifloat_encode(v, 8, 7, false, false);
      break;
    case ncclFloat8e4m3:
      bits = minifloat_encode(v, 4, 3, true, true);
      break;
    case ncclFloat8e5m2:
      bits = minifloat_encode(v, 5, 2, false, true);
      break;
    default:
      encode_int(t, static_cast<int64_t>(v), out);
      return;
  }
  memcpy(out, &bits, type_info(t).size);
}

double decode_float(ncclDataType_t t, const void *p) {
  if (type_info(t).is_float) return reduce_codec::decode(t, p);
  return static_cast<double>(decode_int(t, p));
}

std::string format_elem(ncclDataType_t t, const void *p) {
  const TypeInfo &ti = type_info(t);
  uint64_t bits = 0;
  memcpy(&bits, p, ti.size);
  char buf[96];
  if (ti.is_float)
    snprintf(buf, sizeof buf, "%.9g (0x%0*" PRIx64 ")", decode_float(t, p), (int)ti.size * 2, bits);
  else if (ti.is_signed)
    snprintf(buf, sizeof buf, "%" PRId64 " (0x%0*" PRIx64 ")", decode_int(t, p), (int)ti.size * 2,
             bits);
  else
    snprintf(buf, sizeof buf, "%" PRIu64 " (0x%0*" PRIx64 ")",
             static_cast<uint64_t>(decode_int(t, p)), (int)ti.size * 2, bits);
  return buf;
}

// ---------------------------------------------------------------- collective cases

const Coll kAllColls[8] = {Coll::kAllReduce,     Coll::kBroadcast, Coll::kReduce, Coll::kAllGather,
                           Coll::kReduceScatter, Coll::kAlltoAll,  Coll::kGather, Coll::kScatter};
const Op kAllOps[6] = {Op::kSum, Op::kProd, Op::kMax, Op::kMin, Op::kAvg, Op::kPreMulSum};

const char *coll_name(Coll c) {
  static const char *const names[] = {"AllReduce",     "Broadcast", "Reduce", "AllGather",
                                      "ReduceScatter", "AlltoAll",  "Gather", "Scatter"};
  return names[static_cast<int>(c)];
}

const char *op_name(Op o) {
  static const char *const names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return names[static_cast<int>(o)];
}

bool coll_reduces(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter;
}

static bool coll_rooted(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

std::string describe(const Case &c, int nranks) {
  char buf[200];
  snprintf(buf, sizeof buf, "nccl%s %s%s%s count=%zu %s%s nranks=%d%s", coll_name(c.coll),
           type_info(c.type).name, coll_reduces(c.coll) ? " " : "",
           coll_reduces(c.coll) ? op_name(c.op) : "", c.count,
           c.in_place ? "in-place" : "out-of-place",
           coll_rooted(c.coll) ? (" root=" + std::to_string(c.root)).c_str() : "", nranks,
           c.align ? (" misaligned by " + std::to_string(c.align)).c_str() : "");
  return buf;
}

namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t elem_hash(size_t g, int rank, uint64_t salt) {
  return mix(g * 0x100000001b3ull ^ (static_cast<uint64_t>(rank) << 48) ^ salt);
}

}  // namespace

int64_t premul_scalar(ncclDataType_t t, int nranks) {
  const TypeInfo &ti = type_info(t);
  if (!ti.is_signed) return 3;
  if (!ti.is_float) return -2;
  return ti.exact_bound / (2u * nranks) >= 1 ? 2 : -1;  // -1 keeps fp8 e5m2 exact at 5+ ranks
}

// Sums (also after PreMulSum's multiply) stay within the type's exact bound: each rank gives at
// most bound / (nranks * |scalar|) in magnitude. Products are of {1, 2} (and -1, -2 for signed
// types) with a 2 on at most ceil(n / 3) ranks, so |product| <= 8. Max and min take any bit
// pattern of an integer type and any exact integer of a float type.
int64_t input_value(ncclDataType_t t, Op op, size_t g, int rank, int nranks) {
  const TypeInfo &ti = type_info(t);
  uint64_t h = elem_hash(g, rank, 0x5eed0000u + static_cast<unsigned>(op));
  if (op == Op::kProd) {
    int64_t v = (g + rank) % 3 == 0 ? 2 : 1;
    return ti.is_signed && (h & 3) == 0 ? -v : v;
  }
  if ((op == Op::kMax || op == Op::kMin) && !ti.is_float) return decode_int(t, &h);
  uint64_t bound = ti.exact_bound;
  if (op != Op::kMax && op != Op::kMin) {
    uint64_t s = op == Op::kPreMulSum ? std::llabs(premul_scalar(t, nranks)) : 1;
    bound /= s * static_cast<uint64_t>(nranks);
  }
  if (!ti.is_signed)
    return bound == UINT64_MAX ? static_cast<int64_t>(h) : static_cast<int64_t>(h % (bound + 1));
  // in [-bound, bound]; the difference taken in uint64_t (bound = INT64_MAX for 64-bit types on
  // one rank: the signed difference overflowed there, UBSan)
  return static_cast<int64_t>(h % (2 * bound + 1) - bound);
}

static const uint8_t kSentinel = 0xa5;
static const size_t kGuard = 64;

// A buffer with guard bytes on both sides, everything preset to the sentinel.
bool g_memalloc_buffers = false;

void case_buffers_from_memalloc(bool on) {
  g_memalloc_buffers = on;
}

const BufferSource *g_source = nullptr;

void case_buffers_from(const BufferSource *src) {
  g_source = src;
}

// A case's buffer with guards on both sides: from the heap, or from ncclMemAlloc (memory the
// other ranks of the host can map) after case_buffers_from_memalloc(true).
struct CaseBuffer {
  struct Mem {
    uint8_t *p = nullptr;  // what the test reads and writes
    size_t n = 0;
    bool shared = false;
    const BufferSource *src = g_source;
    void *given = nullptr;  // what the call gets, from src
    explicit Mem(size_t bytes) : n(bytes) {
      void *q = nullptr;
      if (src) {
        given = src->alloc(n);
        p = static_cast<uint8_t *>(src->view(given));
      } else if (g_memalloc_buffers && ncclMemAlloc(&q, n) == ncclSuccess) {
        p = static_cast<uint8_t *>(q), shared = true;
      } else {
        p = new uint8_t[n];
      }
      memset(p, kSentinel, n);
    }
    ~Mem() {
      if (src)
        src->release(given);
      else if (shared)
        ncclMemFree(p);
      else
        delete[] p;
    }
    size_t size() const { return n; }
    uint8_t &operator[](size_t i) { return p[i]; }
  } mem;
  size_t lead, bytes;
  CaseBuffer(size_t nbytes, size_t misalign)
      : mem(2 * kGuard + misalign + nbytes), lead(kGuard + misalign), bytes(nbytes) {}
  std::vector<uint8_t> before;  // the whole buffer, guards included, just before the call
  uint8_t *data() { return mem.p + lead; }
  // What the call gets for data() + off.
  void *for_call(size_t off) {
    return mem.src ? static_cast<uint8_t *>(mem.given) + lead + off : data() + off;
  }
  void snapshot() { before.assign(mem.p, mem.p + mem.n); }
};

CaseRun::CaseRun(RankCtx &ctx, const Case &c)
    : ctx_(ctx),
      c_(c),
      r_(ctx.rank),
      n_(ctx.nranks),
      es_(type_info(c.type).size),
      scalar_(premul_scalar(c.type, ctx.nranks)) {
  layout();
  size_t mis = c_.align * es_;
  if (c_.in_place) {
    buf_.reset(new CaseBuffer(buf_n_ * es_, mis));
    for (size_t i = 0; i < send_n_; i++) input(i, buf_->data() + (send_at_ + i) * es_);
    buf_->snapshot();
  } else {
    sb_.reset(new CaseBuffer(send_n_ * es_, mis));
    rb_.reset(new CaseBuffer(recv_n_ * es_, mis));
    for (size_t i = 0; i < send_n_; i++) input(i, sb_->data() + i * es_);
    sb_->snapshot();
    rb_->snapshot();
  }
}

CaseRun::~CaseRun() = default;

void CaseRun::layout() {
  size_t k = c_.count, nk = k * n_;
  bool root = r_ == c_.root;
  switch (c_.coll) {
    case Coll::kAllReduce:
      send_n_ = recv_n_ = buf_n_ = k;
      break;
    case Coll::kReduce:
      send_n_ = recv_n_ = buf_n_ = k, writes_ = root;
      break;
    case Coll::kReduceScatter:
      send_n_ = buf_n_ = nk, recv_n_ = k, recv_at_ = r_ * k;
      break;
    case Coll::kBroadcast:  // non-roots pass a send buffer of garbage that must be ignored
      send_n_ = recv_n_ = buf_n_ = k;
      if (c_.in_place && !root) send_n_ = 0;
      break;
    case Coll::kAllGather:
      send_n_ = k, recv_n_ = buf_n_ = nk, send_at_ = r_ * k;
      break;
    case Coll::kAlltoAll:
      send_n_ = recv_n_ = buf_n_ = nk;
      break;
    case Coll::kGather:
      send_n_ = k, recv_n_ = buf_n_ = nk, send_at_ = r_ * k, writes_ = root;
      break;
    case Coll::kScatter:
      send_n_ = root ? nk : k, recv_n_ = k, buf_n_ = nk, recv_at_ = r_ * k;
      if (c_.in_place && !root) send_n_ = 0;
      break;
  }
}

void copy_elem(ncclDataType_t t, size_t g, int src, void *out) {
  uint64_t h = elem_hash(g, src, 0xb175);
  memcpy(out, &h, type_info(t).size);
}

void CaseRun::bits(size_t g, int src, uint8_t *out) const {
  copy_elem(c_.type, g, src, out);
}

void CaseRun::input(size_t i, uint8_t *out) const {
  if (coll_reduces(c_.coll)) {
    int64_t v = input_value(c_.type, c_.op, i, r_, n_);
    if (type_info(c_.type).is_float)
      encode_float(c_.type, static_cast<double>(v), out);
    else
      encode_int(c_.type, v, out);
    return;
  }
  bits(i, r_, out);  // broadcast/scatter: the root's data, or a non-root's ignored garbage
}

void CaseRun::output(size_t i, uint8_t *out) const {
  size_t k = c_.count;
  switch (c_.coll) {
    case Coll::kAllReduce:
    case Coll::kReduce:
      reduced(i, out);
      return;
    case Coll::kReduceScatter:
      reduced(r_ * k + i, out);
      return;
    case Coll::kBroadcast:
      bits(i, c_.root, out);
      return;
    case Coll::kAllGather:
    case Coll::kGather:
      bits(i % k, static_cast<int>(i / k), out);
      return;
    case Coll::kAlltoAll:
      bits(r_ * k + i % k, static_cast<int>(i / k), out);
      return;
    case Coll::kScatter:
      bits(r_ * k + i, c_.root, out);
      return;
  }
}

// The reduction of every rank's input at global index g, computed exactly and rounded once.
void CaseRun::reduced(size_t g, uint8_t *out) const {
  const TypeInfo &ti = type_info(c_.type);
  if (ti.is_float) {
    double acc = 0;
    for (int p = 0; p < n_; p++) {
      double v = static_cast<double>(input_value(c_.type, c_.op, g, p, n_));
      switch (c_.op) {
        case Op::kSum:
        case Op::kAvg:
          acc = p ? acc + v : v;
          break;
        case Op::kProd:
          acc = p ? acc * v : v;
          break;
        case Op::kMax:
          acc = p ? std::max(acc, v) : v;
          break;
        case Op::kMin:
          acc = p ? std::min(acc, v) : v;
          break;
        case Op::kPreMulSum:  // from the first term, so that all -0 terms sum to -0 as in IEEE
          acc = p ? acc + v * static_cast<double>(scalar_) : v * static_cast<double>(scalar_);
          break;
      }
    }
    encode_float(c_.type, c_.op == Op::kAvg ? acc / n_ : acc, out);
    return;
  }
  uint64_t acc = 0;  // two's complement wrapping, as the type's own arithmetic
  int64_t best = 0;
  for (int p = 0; p < n_; p++) {
    int64_t v = input_value(c_.type, c_.op, g, p, n_);
    uint64_t u = static_cast<uint64_t>(v);
    bool better = false;
    if (c_.op == Op::kMax) better = ti.is_signed ? v > best : u > static_cast<uint64_t>(best);
    if (c_.op == Op::kMin) better = ti.is_signed ? v < best : u < static_cast<uint64_t>(best);
    if (p == 0 || better) best = v;
    if (c_.op == Op::kProd)
      acc = p ? acc * u : u;
    else
      acc += c_.op == Op::kPreMulSum ? u * static_cast<uint64_t>(scalar_) : u;
  }
  int64_t res = static_cast<int64_t>(acc);
  if (c_.op == Op::kMax || c_.op == Op::kMin) res = best;
  if (c_.op == Op::kAvg) {  // C division of the (exact, in range) sum: truncates toward zero
    res = ti.is_signed ? static_cast<int64_t>(acc) / n_
                       : static_cast<int64_t>(acc / static_cast<uint64_t>(n_));
  }
  encode_int(c_.type, res, out);
}

ncclResult_t CaseRun::call(const void *send, void *recv, ncclRedOp_t op) {
  size_t k = c_.count;
  ncclDataType_t t = c_.type;
  ncclComm_t comm = ctx_.comm;
  switch (c_.coll) {
    case Coll::kAllReduce:
      return ncclAllReduce(send, recv, k, t, op, comm, stream_);
    case Coll::kReduce:
      return ncclReduce(send, recv, k, t, op, c_.root, comm, stream_);
    case Coll::kReduceScatter:
      return ncclReduceScatter(send, recv, k, t, op, comm, stream_);
    case Coll::kBroadcast:
      if (c_.in_place && k % 2 == 1) return ncclBcast(recv, k, t, c_.root, comm, stream_);
      return ncclBroadcast(send, recv, k, t, c_.root, comm, stream_);
    case Coll::kAllGather:
      return ncclAllGather(send, recv, k, t, comm, stream_);
    case Coll::kAlltoAll:
      return ncclAlltoAll(send, recv, k, t, comm, stream_);
    case Coll::kGather:
      return ncclGather(send, recv, k, t, c_.root, comm, stream_);
    case Coll::kScatter:
      return ncclScatter(send, recv, k, t, c_.root, comm, stream_);
  }
  return ncclInternalError;
}

// Compares b with its snapshot taken before the call, except elements [out_at, out_at + out_n)
// which must hold output(0..out_n-1). Expected outputs are generated in blocks and compared
// with memcmp; only a block that differs is looked at element by element.
bool CaseRun::check(const char *what, CaseBuffer &b, size_t out_at, size_t out_n) {
  std::string desc = describe(c_, n_);
  const uint8_t *d = b.data();
  size_t lo = b.lead + out_at * es_, hi = lo + out_n * es_;
  auto first_change = [&](size_t from, size_t to) {
    if (from >= to || memcmp(&b.mem[from], &b.before[from], to - from) == 0) return SIZE_MAX;
    for (size_t i = from; i < to; i++)
      if (b.mem[i] != b.before[i]) return i;
    return SIZE_MAX;
  };
  size_t i = first_change(0, lo);
  if (i == SIZE_MAX) i = first_change(hi, b.mem.size());
  if (i != SIZE_MAX) {
    ssize_t rel = static_cast<ssize_t>(i) - static_cast<ssize_t>(b.lead);
    bool inside = i >= b.lead && i < b.lead + b.bytes;
    ctx_.fail("%s: rank %d: %s %s byte %zd (element %zd) changed from 0x%02x to 0x%02x",
              desc.c_str(), r_, inside ? "must not change" : "wrote outside", what, rel,
              rel / static_cast<ssize_t>(es_), b.before[i], b.mem[i]);
    return false;
  }
  const size_t kBlock = 4096;
  std::vector<uint8_t> exp(kBlock * es_);
  size_t wrong = 0, first = 0;
  uint8_t first_exp[8];
  for (size_t base = 0; base < out_n; base += kBlock) {
    size_t m = std::min(kBlock, out_n - base);
    for (size_t i = 0; i < m; i++) output(base + i, &exp[i * es_]);
    const uint8_t *got = d + (out_at + base) * es_;
    if (memcmp(got, exp.data(), m * es_) == 0) continue;
    for (size_t i = 0; i < m; i++) {
      if (memcmp(got + i * es_, &exp[i * es_], es_) == 0) continue;
      if (wrong++ == 0) first = base + i, memcpy(first_exp, &exp[i * es_], es_);
    }
  }
  if (wrong == 0) return true;
  ctx_.fail("%s: rank %d: %s[%zu] = %s, expected %s (%zu of %zu elements wrong)", desc.c_str(), r_,
            what, out_at + first, format_elem(c_.type, d + (out_at + first) * es_).c_str(),
            format_elem(c_.type, first_exp).c_str(), wrong, out_n);
  return false;
}

ncclResult_t CaseRun::issue() {
  static const ncclRedOp_t kBuiltin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  op_ = ncclSum;
  premul_ = coll_reduces(c_.coll) && c_.op == Op::kPreMulSum;
  if (coll_reduces(c_.coll) && !premul_) op_ = kBuiltin[static_cast<int>(c_.op)];
  if (premul_) {
    uint8_t s[8];
    if (type_info(c_.type).is_float)
      encode_float(c_.type, static_cast<double>(scalar_), s);
    else
      encode_int(c_.type, scalar_, s);
    rc_ = ncclRedOpCreatePreMulSum(&op_, s, c_.type, ncclScalarHostImmediate, ctx_.comm);
    memset(s, 0, sizeof s);  // an immediate scalar is copied at creation
    if (rc_ != ncclSuccess) {
      premul_ = false;
      ctx_.fail("%s: ncclRedOpCreatePreMulSum returned %d: %s", describe(c_, n_).c_str(), (int)rc_,
                ncclGetLastError(ctx_.comm));
      return rc_;
    }
  }
  if (c_.in_place)
    rc_ = call(buf_->for_call(send_at_ * es_), buf_->for_call(recv_at_ * es_), op_);
  else
    rc_ = call(sb_->for_call(0), rb_->for_call(0), op_);
  return rc_;
}

bool CaseRun::verify() {
  bool ok = rc_ == ncclSuccess;
  if (!ok)
    ctx_.fail("%s: rank %d: returned %d (%s): %s", describe(c_, n_).c_str(), r_, (int)rc_,
              ncclGetErrorString(rc_), ncclGetLastError(ctx_.comm));
  if (ok && c_.in_place) {
    ok = check("buffer", *buf_, recv_at_, writes_ ? recv_n_ : 0);
  } else if (ok) {
    ok = check("sendbuff", *sb_, 0, 0);
    ok = check("recvbuff", *rb_, 0, writes_ ? recv_n_ : 0) && ok;
  }
  if (premul_) {
    premul_ = false;
    ncclResult_t d = ncclRedOpDestroy(op_, ctx_.comm);
    if (d != ncclSuccess) {
      ctx_.fail("ncclRedOpDestroy returned %d: %s", (int)d, ncclGetLastError(ctx_.comm));
      ok = false;
    }
  }
  return ok;
}

bool CaseRun::verify_rejected() {
  if (rc_ != ncclInvalidArgument) {
    ctx_.fail("%s: rank %d: returned %d, expected a success or ncclInvalidArgument",
              describe(c_, n_).c_str(), r_, (int)rc_);
    return false;
  }
  if (c_.in_place) return check("buffer", *buf_, 0, 0);
  bool ok = check("sendbuff", *sb_, 0, 0);
  return check("recvbuff", *rb_, 0, 0) && ok;
}

bool CaseRun::comm_broken() const {
  ncclResult_t async = ncclSuccess;
  return rc_ != ncclSuccess &&
         (ncclCommGetAsyncError(ctx_.comm, &async) != ncclSuccess || async != ncclSuccess);
}

bool run_case(RankCtx &ctx, const Case &c, bool *comm_broken) {
  CaseRun run(ctx, c);
  run.issue();
  bool ok = run.verify();
  if (comm_broken) *comm_broken = run.comm_broken();
  return ok;
}

}  // namespace th
