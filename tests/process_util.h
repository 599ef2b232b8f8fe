#ifndef NEREID_TESTS_PROCESS_UTIL_H_
#define NEREID_TESTS_PROCESS_UTIL_H_

// Helpers for tests that run `nereid` as real processes: a fresh directory
// per test, a bounded shell command with its output, whole-file reads, and
// the comparison of two runs' losses.

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace nereid {
namespace testing {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command (bounded by `timeout -s KILL`), returning its exit code
// and its stdout and stderr together.
inline Outcome Shell(const std::string& command, int timeout_seconds = 120) {
  std::string line = absl::StrCat("timeout -s KILL ", timeout_seconds, " sh -c '", command, "' 2>&1");
  Outcome o;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return o;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) o.output.append(buffer, n);
  int status = pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

// An empty directory for the running test: $TEST_TMPDIR (or /tmp) / the
// test's name, removed and created again.
inline std::string FreshTestDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/",
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The largest relative difference between two runs' per-step losses over
// their first `steps` steps (all by default).
inline double WorstRelativeDifference(const std::vector<double>& a, const std::vector<double>& b,
                                      size_t steps = SIZE_MAX) {
  double worst = 0;
  for (size_t i = 0; i < steps && i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(a[i]));
  }
  return worst;
}

}  // namespace testing
}  // namespace nereid

#endif  // NEREID_TESTS_PROCESS_UTIL_H_
