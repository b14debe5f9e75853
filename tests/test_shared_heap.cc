// The shared heap (libtutti-heap.so, src/heap/shared_heap.c), preloaded into this test (main
// runs the program again with LD_PRELOAD and TUTTI_HEAP_BYTES=256M): large blocks come from its
// arena, small ones and those the arena cannot hold from glibc, and every block behaves as malloc's
// would -- contents kept by realloc, calloc's zeros after reuse, alignment, malloc_usable_size,
// frees from many threads, and a forked child that gets a copy of the blocks rather than sharing
// them.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "heap/heap_abi.h"

// The tests look at memory after free (its pages, its reuse) and ask for an overflowing calloc
// on purpose.
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="

namespace {

constexpr size_t kMiB = 1 << 20;

tutti_heap_region_t region() {
  auto fn = reinterpret_cast<tutti_heap_region_fn>(dlsym(RTLD_DEFAULT, TUTTI_HEAP_REGION_FN));
  tutti_heap_region_t r{};
  if (!fn || !fn(&r)) r = tutti_heap_region_t{nullptr, 0, -1};
  return r;
}

// p, hidden from the compiler's use-after-free and free-offset warnings (the tests mean it).
template <typename T>
__attribute__((noinline)) T *opaque(T *p) {
  asm volatile("" : "+r"(p));
  return p;
}

bool in_arena(const void *p) {
  tutti_heap_region_t r = region();
  return r.base && (const char *)p >= r.base && (const char *)p < r.base + r.bytes;
}

// Resident pages of [p, p + bytes) (mincore: pages of the memfd in memory).
size_t resident_pages(void *p, size_t bytes) {
  char *page = (char *)((uintptr_t)p & ~(uintptr_t)4095);
  size_t n = ((char *)p + bytes - page + 4095) / 4096, in = 0;
  std::vector<unsigned char> v(n);
  if (mincore(page, n * 4096, v.data()) != 0) return SIZE_MAX;
  for (unsigned char c : v) in += c & 1;
  return in;
}

TEST(SharedHeap, IsPreloadedWithTheTestsArenaSize) {
  tutti_heap_region_t r = region();
  ASSERT_NE(r.base, nullptr) << "libtutti-heap.so is not preloaded (LD_PRELOAD)";
  EXPECT_EQ(r.bytes, 256 * kMiB);
  char link[128] = {0}, path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", r.fd);
  ASSERT_GT(readlink(path, link, sizeof link - 1), 0);
  EXPECT_EQ(strncmp(link, "/memfd:" TUTTI_HEAP_MEMFD_NAME " ", 19), 0) << link;
}

TEST(SharedHeap, LargeBlocksFromTheArenaSmallOnesFromGlibc) {
  void *small = malloc(64 * 1024 - 1), *large = malloc(64 * 1024), *big = malloc(3 * kMiB + 5);
  EXPECT_FALSE(in_arena(small));
  EXPECT_TRUE(in_arena(large));
  EXPECT_TRUE(in_arena(big));
  EXPECT_EQ((uintptr_t)large % 64, 0u);
  EXPECT_GE(malloc_usable_size(big), 3 * kMiB + 5);
  EXPECT_LT(malloc_usable_size(big), 3 * kMiB + 5 + 4096);
  EXPECT_GE(malloc_usable_size(small), 64u * 1024 - 1);
  memset(big, 0x5a, 3 * kMiB + 5);
  free(small);
  free(large);
  free(big);
  void *over = malloc(300 * kMiB);  // more than the arena holds: glibc's
  ASSERT_NE(over, nullptr);
  EXPECT_FALSE(in_arena(over));
  free(over);
}

TEST(SharedHeap, FreedRunsAreReusedAndCoalesced) {
  char *a = (char *)malloc(kMiB), *b = (char *)malloc(kMiB), *c = (char *)malloc(kMiB);
  ASSERT_TRUE(in_arena(a) && in_arena(b) && in_arena(c));
  const uintptr_t b_at = (uintptr_t)b, a_at = (uintptr_t)a;
  free(b);
  void *again = malloc(kMiB);
  EXPECT_EQ((uintptr_t)again, b_at) << "the freed run of the same size is the best fit";
  free(a);
  free(again);  // a and b's runs are one run now
  char *two = (char *)malloc(2 * kMiB);
  EXPECT_EQ((uintptr_t)two, a_at) << "two adjacent freed runs coalesce";
  free(two);
  free(c);
}

TEST(SharedHeap, CallocClearsReusedMemoryAndReallocKeepsContents) {
  const size_t n = 2 * kMiB;
  unsigned char *p = (unsigned char *)malloc(n);
  memset(opaque(p), 0xab, n);
  free(p);
  unsigned char *z = (unsigned char *)calloc(n / 8, 8);
  ASSERT_TRUE(in_arena(z));
  size_t nonzero = 0;
  for (size_t i = 0; i < n; i++) nonzero += z[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  for (size_t i = 0; i < n; i++) z[i] = (unsigned char)(i * 7);
  unsigned char *g = (unsigned char *)realloc(z, 5 * kMiB);  // grows: moves, keeps the bytes
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += g[i] != (unsigned char)(i * 7);
  EXPECT_EQ(wrong, 0u);
  const uintptr_t g_at = (uintptr_t)g;
  unsigned char *s = (unsigned char *)realloc(g, 3 * kMiB);  // shrinks within the block
  EXPECT_EQ((uintptr_t)s, g_at);
  unsigned char *t = (unsigned char *)realloc(s, 1000);  // to glibc's size range: a new block
  EXPECT_FALSE(in_arena(t));
  for (size_t i = 0; i < 1000; i++) wrong += t[i] != (unsigned char)(i * 7);
  EXPECT_EQ(wrong, 0u);
  free(t);
  void *none = calloc(SIZE_MAX / 2, 4);
  EXPECT_EQ(none, nullptr) << "n * size overflows";
}

TEST(SharedHeap, AlignedAllocationsAreAligned) {
  void *p = nullptr;
  ASSERT_EQ(posix_memalign(&p, 4096, kMiB), 0);
  EXPECT_TRUE(in_arena(p));
  EXPECT_EQ((uintptr_t)p % 4096, 0u);
  void *q = aligned_alloc(256, kMiB);
  EXPECT_TRUE(in_arena(q));
  EXPECT_EQ((uintptr_t)q % 256, 0u);
  void *r = memalign(1 << 16, kMiB);  // more than a page: glibc's
  EXPECT_EQ((uintptr_t)r % (1 << 16), 0u);
  void *v = valloc(100000);
  EXPECT_EQ((uintptr_t)v % 4096, 0u);
  EXPECT_EQ(posix_memalign(&p, 24, kMiB), EINVAL) << "not a power of two";
  free(q);
  free(r);
  free(v);
  free(p);
}

// tutti_heap_alloc (ncclMemAlloc's source under the heap): blocks of any size from the arena,
// below TUTTI_HEAP_MIN too, page-aligned, zeroed when the run is reused, given back by free.
TEST(SharedHeap, HeapAllocServesAnySizeZeroedAndAligned) {
  auto fn = reinterpret_cast<tutti_heap_alloc_fn>(dlsym(RTLD_DEFAULT, TUTTI_HEAP_ALLOC_FN));
  ASSERT_NE(fn, nullptr);
  for (size_t n : {(size_t)1, (size_t)4096, (size_t)40000, 3 * kMiB}) {
    unsigned char *p = (unsigned char *)fn(n);
    ASSERT_TRUE(in_arena(p)) << n;
    EXPECT_EQ((uintptr_t)p % 4096, 0u) << n;
    EXPECT_GE(malloc_usable_size(p), n);
    memset(opaque(p), 0xcd, n);
    const uintptr_t at = (uintptr_t)p;
    free(p);
    unsigned char *q = (unsigned char *)fn(n);
    ASSERT_TRUE((uintptr_t)q < at + n && (uintptr_t)q + n > at)
        << n << ": the new block reuses the freed (dirty) one";
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += q[i] != 0;
    EXPECT_EQ(nonzero, 0u) << n;
    free(q);
  }
  EXPECT_EQ(fn(512 * kMiB), nullptr) << "more than the arena holds";
}

TEST(SharedHeap, FreeingABigBlockGivesItsPagesBack) {
  const size_t n = 40 * kMiB;
  char *p = (char *)malloc(n);
  ASSERT_TRUE(in_arena(p));
  memset(opaque(p), 1, n);
  EXPECT_GE(resident_pages(p, n), n / 4096);
  const uintptr_t at = (uintptr_t)p;
  free(p);
  EXPECT_EQ(resident_pages((void *)at, n), 0u) << "a freed run of 32 MiB or more is punched out";
  char *small = (char *)malloc(kMiB);
  memset(opaque(small), 1, kMiB);
  const uintptr_t small_at = (uintptr_t)small;
  free(small);
  EXPECT_GT(resident_pages((void *)small_at, kMiB), 0u) << "smaller runs stay for reuse";
}

TEST(SharedHeap, ManyThreadsAllocateAndFreeWithoutMixingBlocks) {
  std::vector<std::thread> threads;
  std::vector<size_t> wrong(4, 0);
  for (int t = 0; t < 4; t++)
    threads.emplace_back([t, &wrong] {
      std::vector<std::pair<unsigned char *, size_t>> live;
      uint32_t x = 12345u + (uint32_t)t;
      for (int i = 0; i < 3000; i++) {
        x = x * 1664525u + 1013904223u;
        if (live.size() > 8 || (!live.empty() && (x >> 30) == 0)) {
          auto [p, n] = live[x % live.size()];
          for (size_t k = 0; k < n; k += 4093) wrong[t] += p[k] != (unsigned char)(t + n);
          free(p);
          live.erase(live.begin() + (long)(x % live.size()));
        } else {
          size_t n = 64 * 1024 + (x >> 8) % (512 * 1024);
          unsigned char *p = (unsigned char *)malloc(n);
          memset(p, (unsigned char)(t + n), n);
          live.push_back({p, n});
        }
      }
      for (auto [p, n] : live) free(p);
    });
  for (auto &th : threads) th.join();
  for (int t = 0; t < 4; t++) EXPECT_EQ(wrong[t], 0u) << "thread " << t;
}

// fork: the child sees the blocks as they were at the fork, its writes stay its own, the
// parent's later writes do not reach it, and it allocates nothing from the shared arena.
TEST(SharedHeap, AForkedChildGetsACopyOfTheBlocks) {
  const size_t n = 4 * kMiB;
  unsigned char *p = (unsigned char *)malloc(n);
  ASSERT_TRUE(in_arena(p));
  memset(p, 1, n);
  const tutti_heap_region_t r = region();
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad |= p[i] != 1;
    memset(p, 2, n / 2);  // the parent must not see this
    char c;
    bad |= (write(to_parent[1], "w", 1) != 1) << 1;
    bad |= (read(to_child[0], &c, 1) != 1) << 2;  // the parent has written 3s by now
    for (size_t i = n / 2; i < n; i++) bad |= (p[i] != 1) << 3;
    char *q = (char *)malloc(kMiB);
    bad |= (q >= r.base && q < r.base + r.bytes) << 4;
    bad |= (region().base != nullptr) << 5;  // a child serves nothing from the arena
    free(q);
    free(p);
    _exit(bad);
  }
  char c;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  size_t changed = 0;
  for (size_t i = 0; i < n; i++) changed += p[i] != 1;
  EXPECT_EQ(changed, 0u) << "the child's writes reached the parent";
  memset(p, 3, n);
  ASSERT_EQ(write(to_child[1], "p", 1), 1);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "bits: 1 contents at fork, 2/4 pipe, 8 parent's writes seen, "
                                   "16 child allocated from the arena, 32 child serves";
  void *more = malloc(kMiB);
  EXPECT_TRUE(in_arena(more)) << "the parent still serves from the arena";
  free(more);
  free(p);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

// In a process of its own (the death test's re-run of this program), where the arena is new:
// the freed run is the only free one, so calloc takes it, dirty, and must clear it.
TEST(SharedHeapDeathTest, CallocClearsTheRunItReuses) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const size_t n = 3 * kMiB;
        unsigned char *p = (unsigned char *)malloc(n);
        memset(opaque(p), 0xab, n);  // through opaque: not a dead store the compiler may drop
        void *guard = malloc(kMiB);  // after p: the freed run cannot join the untouched pages
        const uintptr_t at = (uintptr_t)p;
        free(p);
        unsigned char *z = (unsigned char *)calloc(n, 1);
        size_t nonzero = 0;
        for (size_t i = 0; i < n; i++) nonzero += z[i] != 0;
        const int code = (uintptr_t)z != at ? 2 : nonzero != 0 ? 1 : 0;
        free(z);
        free(guard);
        exit(code);
      },
      testing::ExitedWithCode(0), "");
}

TEST(SharedHeapDeathTest, FreeOfAPointerInsideABlockAborts) {
  char *p = (char *)malloc(kMiB);
  ASSERT_TRUE(in_arena(p));
  EXPECT_DEATH(free(opaque(p + 4096)),
               "libtutti-heap: free/realloc of a pointer it did not return");
  free(p);
}

}  // namespace

int main(int argc, char **argv) {
  const char *preload = getenv("LD_PRELOAD");
  if (!preload || !strstr(preload, TUTTI_HEAP_LIB)) {  // once more, with the library preloaded
    setenv("LD_PRELOAD", TUTTI_HEAP_LIB, 1);
    setenv("TUTTI_HEAP_BYTES", "256M", 1);
    unsetenv("TUTTI_HEAP_MIN");
    unsetenv("TUTTI_HEAP");
    execv("/proc/self/exe", argv);
    perror("execv /proc/self/exe");
    return 2;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
