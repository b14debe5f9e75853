// Huge pages for the heap tensors a group all-reduces again and again (DDP's gradient buckets).
//
// tutti reads and writes a peer's heap buffers by copy (process_vm_readv/writev, the cma
// algorithm): the kernel walks the page tables of both processes for every page. PyTorch's tensors
// come from malloc, in 4 KiB pages; DDP's buckets are touched once per step between long stretches
// of compute that leave the caches and the TLB cold, so each of a 2 MB bucket's ~500 pages costs
// a page walk on both sides, which in a virtual machine (nested paging) is most of the
// all-reduce's time. With 2 MiB pages that is one walk per 2 MiB.
//
// The pages of a tensor the backend did not allocate can only be changed in place:
// MADV_COLLAPSE (Linux 6.1) replaces the small pages of an aligned 2 MiB range of anonymous
// memory by one huge page with the same contents, synchronously, independent of the THP sysfs
// mode (as the kernel documents it). Ranges reach past the tensor to the 2 MiB boundaries around
// it (other malloc'd memory of the same mapping: its contents are kept, only the page size
// changes; the process may use up to 2 MiB more memory at each end where those pages were not
// yet touched). A call that runs once on a buffer gains nothing from it, so a range is collapsed
// only when the same buffer (address and size) is all-reduced a second time, and every 2 MiB
// range at most once in the process's life (success or not), so the cost (copying the range,
// about as long as one all-reduce of it) is paid once. TUTTI_TORCH_HUGEPAGES=0 leaves every
// page as it is; buffers below TUTTI_TORCH_HUGEPAGE_MIN_BYTES (default 512 KiB) are left alone.
#include "hugepages.hpp"

#include <c10/util/Exception.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <mutex>
#include <unordered_set>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1 uapi value; older headers lack the name
#endif

namespace tutti_torch {

namespace {

constexpr uintptr_t kHuge = (uintptr_t)2 << 20;

size_t env_bytes(const char *name, size_t fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end = nullptr;
  unsigned long long n = strtoull(v, &end, 10);
  TORCH_CHECK(end && *end == '\0', "tutti: ", name, "=", v, " is not a number");
  return (size_t)n;
}

struct State {
  std::mutex mutex;
  bool enabled = env_bytes("TUTTI_TORCH_HUGEPAGES", 1) != 0;
  size_t min_bytes = env_bytes("TUTTI_TORCH_HUGEPAGE_MIN_BYTES", (size_t)512 << 10);
  // A hash of (address, size) of the buffers met once; a collision only collapses a buffer early.
  std::unordered_set<uint64_t> seen;
  std::unordered_set<uintptr_t> ranges;  // 2 MiB ranges already tried
  HugePageStats stats;
};

State &state() {
  static State s;
  return s;
}

uint64_t key(uintptr_t p, size_t bytes) {
  return (uint64_t)p * 1000003u ^ (uint64_t)bytes;
}

}  // namespace

void hugepages_note_buffer(void *ptr, size_t bytes) {
  State &s = state();
  if (!s.enabled || bytes < s.min_bytes) return;
  uintptr_t p = (uintptr_t)ptr;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.seen.insert(key(p, bytes)).second) {
    if (s.seen.size() > 4096) s.seen.clear();  // bound the memory of one-off buffers
    return;
  }
  for (uintptr_t r = p & ~(kHuge - 1); r < p + bytes; r += kHuge) {
    if (!s.ranges.insert(r).second) continue;
    if (madvise((void *)r, kHuge, MADV_COLLAPSE) == 0)
      s.stats.collapsed++;
    else
      s.stats.failed++;
  }
}

HugePageStats hugepages_stats() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

}  // namespace tutti_torch
