// tutti_pid_gone (src/debug.c), which decides that a peer process is dead (engine.c, small.c)
// and that a /dev/shm segment is stale (shm.c): 0 for a live process, 1 for a zombie and for a
// reaped one, and 1 from the moment a killed process starts to exit. A rank killed during init
// closes its sockets (its peers fail) while it is still tearing down its memory, long before it
// is a zombie; a survivor that removes stale segments then must see it as gone, or the killed
// rank's segment stays in /dev/shm (test_chaos's "nothing is left").
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "core.h"

namespace {

// '?' when /proc has no stat for pid.
char state_of(pid_t pid) {
  char buf[512];
  const char *state = tutti_proc_stat(pid, buf, sizeof(buf));
  return state ? *state : '?';
}

TEST(PidGone, LiveZombieAndReaped) {
  pid_t live = fork();
  ASSERT_GE(live, 0);
  if (live == 0) {
    pause();
    _exit(0);
  }
  EXPECT_EQ(tutti_pid_gone(live), 0);
  kill(live, SIGKILL);
  for (char s = state_of(live); s != 'Z' && s != '?'; s = state_of(live)) usleep(1000);
  EXPECT_EQ(tutti_pid_gone(live), 1) << "a zombie";
  ASSERT_EQ(waitpid(live, nullptr, 0), live);
  EXPECT_EQ(tutti_pid_gone(live), 1) << "reaped";
}

// What the polls of one killed child saw.
struct DeathWatch {
  int polls = 0;               // polls before the zombie
  int gone_before_zombie = 0;  // of them, those where tutti_pid_gone said 1
  int alive_after_gone = 0;    // 0 after an earlier 1
};

// A child holding 256 MiB of touched memory is killed and polled until it is a zombie: its exit
// takes the teardown of 65536 pages (milliseconds; small pages asked for, since huge ones would
// be freed in 128 steps), during which its state is not yet 'Z'.
void watch_a_killed_child(DeathWatch *w) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const size_t bytes = size_t{256} << 20;
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(2);
    madvise(p, bytes, MADV_NOHUGEPAGE); /* 4 KiB pages even where THP is "always" */
    memset(p, 1, bytes);
    if (write(ready[1], "x", 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(tutti_pid_gone(child), 0) << "alive, holding its memory";
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int seen_gone = 0;
  for (char s = state_of(child); s != 'Z' && s != '?'; s = state_of(child)) {
    int gone = tutti_pid_gone(child);
    w->polls++;
    w->gone_before_zombie += gone && state_of(child) != 'Z';
    w->alive_after_gone += seen_gone && !gone;
    seen_gone |= gone;
  }
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  close(ready[0]);
  close(ready[1]);
}

// tutti_pid_gone must answer 1 while a killed process tears down its memory (PF_EXITING).
// Whether a poll falls in that window is up to the scheduler: on a loaded machine the child can
// wait for a CPU (the polls see it alive), then tear down while this process waits for one (no
// poll sees the window). So up to 20 children are killed until one is seen in the window; a
// library that ignored PF_EXITING would see none of them there.
TEST(PidGone, AKilledProcessIsGoneWhileItTearsDownItsMemory) {
  const int tries = 20;
  int seen_in_window = 0, polls = 0;
  for (int t = 0; t < tries && !seen_in_window; t++) {
    DeathWatch w;
    ASSERT_NO_FATAL_FAILURE(watch_a_killed_child(&w));
    EXPECT_EQ(w.alive_after_gone, 0) << "once gone, a dying process stays gone (try " << t << ")";
    seen_in_window = w.gone_before_zombie > 0;
    polls += w.polls;
  }
  EXPECT_TRUE(seen_in_window) << tries << " killed children, " << polls
                              << " polls before their zombies, none said gone";
}

}  // namespace
