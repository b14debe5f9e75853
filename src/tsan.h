/* Happens-before annotations for ThreadSanitizer; nothing in any other build.
 *
 * Ranks that are threads of one process read each other's buffers in place and order those
 * reads with words in shared memory (engine_peer.c): the owner of a word stores it through its
 * own mapping of its segment, every peer loads it through the peer's own mapping of the same
 * segment (transport/shm.c). The hardware orders these accesses (the same physical memory);
 * TSan cannot see it, because it tracks synchronisation per virtual address, while the buffers
 * themselves have one address for every thread. Without these annotations TSan reports a reader's
 * copy and the owner's next write to the same buffer as a race, although the owner waited for
 * the reader's done word. The annotations repeat each release/acquire pair on a key every rank
 * of the process names alike (transport.h: mem_word_key):
 *   owner:  TUTTI_HB_RELEASE(key); then the release store of the word
 *   reader: the acquire load of the word; then TUTTI_HB_ACQUIRE(key)
 * The release comes first so that a reader that sees the store always finds the release.
 */
#ifndef TUTTI_TSAN_H_
#define TUTTI_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#define TUTTI_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TUTTI_TSAN 1
#endif
#endif

#ifdef TUTTI_TSAN
void __tsan_acquire(void *addr); /* the TSan runtime's interface (sanitizer/tsan_interface.h) */
void __tsan_release(void *addr);
#define TUTTI_HB_RELEASE(key)               \
  do {                                      \
    if (key) __tsan_release((void *)(key)); \
  } while (0)
#define TUTTI_HB_ACQUIRE(key)               \
  do {                                      \
    if (key) __tsan_acquire((void *)(key)); \
  } while (0)
#else
#define TUTTI_HB_RELEASE(key) ((void)(key))
#define TUTTI_HB_ACQUIRE(key) ((void)(key))
#endif

#endif
