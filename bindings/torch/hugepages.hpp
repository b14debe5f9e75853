// Huge pages for heap tensors that are all-reduced repeatedly (hugepages.cpp explains why).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tutti_torch {

struct HugePageStats {
  uint64_t collapsed = 0;  // 2 MiB ranges now backed by a huge page
  uint64_t failed = 0;     // ranges the kernel refused (outside a mapping, no memory, busy)
};

// Called with a buffer about to be all-reduced; collapses its 2 MiB ranges into huge pages the
// second time the same buffer comes by (TUTTI_TORCH_HUGEPAGES, TUTTI_TORCH_HUGEPAGE_MIN_BYTES).
void hugepages_note_buffer(void *ptr, size_t bytes);
HugePageStats hugepages_stats();

}  // namespace tutti_torch
