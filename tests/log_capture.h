// The library's INFO COLL lines of every process of a test program, captured so that a test can
// assert what ran (an algorithm, the direct path). Including this header sets, before main,
// TUTTI_DEBUG=INFO, TUTTI_DEBUG_SUBSYS=COLL and TUTTI_DEBUG_FILE=<private dir>/log.%p: the logger
// (configured once per process) of the test program and of every rank it forks writes one file
// per process there. The directory is removed when the test program exits.
#ifndef TUTTI_TESTS_LOG_CAPTURE_H_
#define TUTTI_TESTS_LOG_CAPTURE_H_

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

namespace log_capture {

inline std::string init_dir() {
  char tmpl[] = "/tmp/tutti-test-log-XXXXXX";
  std::string dir = mkdtemp(tmpl) ? tmpl : "/tmp";
  setenv("TUTTI_DEBUG", "INFO", 1);
  setenv("TUTTI_DEBUG_SUBSYS", "COLL", 1);
  setenv("TUTTI_DEBUG_FILE", (dir + "/log.%p").c_str(), 1);
  return dir;
}
inline const std::string g_dir = init_dir();
inline const pid_t g_owner = getpid();

inline std::vector<std::string> files() {
  std::vector<std::string> out;
  if (DIR *d = opendir(g_dir.c_str())) {
    while (struct dirent *e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(g_dir + "/" + e->d_name);
    closedir(d);
  }
  return out;
}

// Empties the logs (this process keeps its file open in append mode; ranks' files are new).
inline void clear() {
  for (const std::string &f : files()) std::ofstream(f, std::ios::trunc);
}

// Every line logged since clear(), all processes.
inline std::vector<std::string> lines() {
  std::vector<std::string> out;
  for (const std::string &f : files()) {
    std::ifstream in(f);
    for (std::string line; std::getline(in, line);) out.push_back(line);
  }
  return out;
}

inline int count(const std::string &needle) {
  int n = 0;
  for (const std::string &l : lines()) n += l.find(needle) != std::string::npos;
  return n;
}

// The lines about calls of collective `fn` ("ncclBroadcast": the planner's lines name a call
// "ncclBroadcast (op #N): ...") that say `what`.
inline int calls_saying(const std::string &fn, const std::string &what) {
  const std::string call = fn + " (op #";
  int n = 0;
  for (const std::string &l : lines())
    n += l.find(call) != std::string::npos && l.find(what) != std::string::npos;
  return n;
}

// The rank in a line's "host:pid:tid [rank]" prefix, -1 when it has none (ranks forked after the
// test process opened its log write to its file, so a file is not a rank).
inline int rank_of(const std::string &line) {
  size_t open = line.find(" ["), close = open == std::string::npos ? open : line.find("] ", open);
  return close == std::string::npos ? -1 : atoi(line.c_str() + open + 2);
}

// Per rank (0..n-1), in order, what follows the last ": " of each line that holds `needle` (the
// measured choices' decisions: "...: cma for the next 16 calls").
inline std::vector<std::vector<std::string>> tails_per_rank(int n, const std::string &needle) {
  std::vector<std::vector<std::string>> out(n);
  for (const std::string &line : lines()) {
    int rank = rank_of(line);
    if (line.find(needle) != std::string::npos && rank >= 0 && rank < n)
      out[rank].push_back(line.substr(line.rfind(": ") + 2));
  }
  return out;
}

struct Cleanup {
  ~Cleanup() {
    if (getpid() != g_owner) return;  // a forked rank exiting
    for (const std::string &f : files()) unlink(f.c_str());
    rmdir(g_dir.c_str());
  }
};
inline Cleanup g_cleanup;

}  // namespace log_capture

#endif  // TUTTI_TESTS_LOG_CAPTURE_H_
