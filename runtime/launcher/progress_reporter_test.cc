#include "runtime/launcher/progress_reporter.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace nereid {
namespace launcher {
namespace {

struct Pipe {
  Pipe() { EXPECT_EQ(pipe(fds), 0); }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  // Hands the write end to a reporter, which closes it.
  int TakeWriteEnd() { return std::exchange(fds[1], -1); }
  // What is in the pipe now (the read end is made non-blocking).
  std::string ReadAvailable() {
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
  int fds[2] = {-1, -1};
};

TEST(ProgressReporterTest, DefaultReporterDoesNothing) {
  ProgressReporter reporter;
  EXPECT_FALSE(reporter.enabled());
  EXPECT_FALSE(reporter.Report("phase=train step=1"));
  EXPECT_TRUE(reporter.metrics_path().empty());
  EXPECT_TRUE(reporter.WriteMetrics("{}").ok());
}

TEST(ProgressReporterTest, ReportWritesOneLine) {
  Pipe p;
  ProgressReporter reporter(p.TakeWriteEnd());
  ASSERT_TRUE(reporter.enabled());
  EXPECT_TRUE(reporter.Report("phase=train epoch=1 step=34"));
  EXPECT_TRUE(reporter.Report("two\nlines\rhere"));
  EXPECT_EQ(p.ReadAvailable(), "phase=train epoch=1 step=34\ntwo lines here\n");
}

TEST(ProgressReporterTest, LongReportsAreCutToOneAtomicWrite) {
  Pipe p;
  ProgressReporter reporter(p.TakeWriteEnd());
  EXPECT_TRUE(reporter.Report(std::string(3 * PIPE_BUF, 'x')));
  EXPECT_EQ(p.ReadAvailable(), std::string(PIPE_BUF - 1, 'x') + "\n");
}

TEST(ProgressReporterTest, FullPipeDropsInsteadOfBlocking) {
  Pipe p;
  ProgressReporter reporter(p.TakeWriteEnd());
  const std::string line(1000, 'y');
  int written = 0;
  // A pipe holds at most a few MiB; nobody reads, so reports must start failing.
  for (int i = 0; i < 100000 && reporter.Report(line); ++i) ++written;
  EXPECT_GT(written, 0);
  EXPECT_EQ(reporter.dropped(), 1);
  EXPECT_FALSE(reporter.Report(line));
  EXPECT_EQ(reporter.dropped(), 2);
  // Every line that got in is whole.
  for (absl::string_view l : absl::StrSplit(p.ReadAvailable(), '\n', absl::SkipEmpty())) EXPECT_EQ(l, line);
}

TEST(ProgressReporterTest, ClosedPipeDropsWithoutSigpipe) {
  Pipe p;
  ProgressReporter reporter(p.TakeWriteEnd());
  close(p.fds[0]);
  p.fds[0] = -1;
  EXPECT_FALSE(reporter.Report("phase=train"));  // the test process is still alive
  EXPECT_EQ(reporter.dropped(), 1);
}

TEST(ProgressReporterTest, ConcurrentReportsStayWholeLines) {
  Pipe p;
  ProgressReporter reporter(p.TakeWriteEnd());
  fcntl(p.fds[0], F_SETFL, fcntl(p.fds[0], F_GETFL) | O_NONBLOCK);
  std::atomic<bool> done{false};
  std::string received;
  std::thread reader([&] {
    char buf[4096];
    while (true) {
      const bool last = done.load();
      ssize_t n;
      while ((n = read(p.fds[0], buf, sizeof(buf))) > 0) received.append(buf, static_cast<size_t>(n));
      if (last) break;
      usleep(1000);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&reporter, t] {
      for (int i = 0; i < 200; ++i)
        reporter.Report(absl::StrCat("thread=", t, " step=", i, " ", std::string(100, 'z')));
    });
  }
  for (std::thread& w : writers) w.join();
  done.store(true);
  reader.join();
  int lines = 0;
  for (absl::string_view l : absl::StrSplit(received, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(l, "thread=")) << l;
    ++lines;
  }
  EXPECT_EQ(lines + reporter.dropped(), 800);
}

TEST(ProgressReporterTest, FromEnvironment) {
  Pipe p;
  ASSERT_EQ(setenv(kProgressFdEnv, absl::StrCat(p.fds[1]).c_str(), 1), 0);
  ASSERT_EQ(setenv(kWorkerMetricsEnv, "/tmp/m.json", 1), 0);
  {
    ProgressReporter reporter = ProgressReporter::FromEnvironment();
    p.fds[1] = -1;  // owned by the reporter now
    EXPECT_TRUE(reporter.enabled());
    EXPECT_EQ(reporter.metrics_path(), "/tmp/m.json");
    EXPECT_TRUE(reporter.Report("phase=eval"));
    EXPECT_EQ(p.ReadAvailable(), "phase=eval\n");
    ProgressReporter moved = std::move(reporter);
    EXPECT_FALSE(reporter.enabled());  // NOLINT(bugprone-use-after-move)
    EXPECT_TRUE(moved.Report("phase=moved"));
    EXPECT_EQ(p.ReadAvailable(), "phase=moved\n");
  }
  unsetenv(kProgressFdEnv);
  unsetenv(kWorkerMetricsEnv);
}

TEST(ProgressReporterTest, FromEnvironmentIgnoresBadValues) {
  unsetenv(kProgressFdEnv);
  EXPECT_FALSE(ProgressReporter::FromEnvironment().enabled());
  setenv(kProgressFdEnv, "three", 1);
  EXPECT_FALSE(ProgressReporter::FromEnvironment().enabled());
  setenv(kProgressFdEnv, "-1", 1);
  EXPECT_FALSE(ProgressReporter::FromEnvironment().enabled());
  setenv(kProgressFdEnv, "987654", 1);  // not open
  EXPECT_FALSE(ProgressReporter::FromEnvironment().enabled());
  // Open but not a pipe: left alone (and not closed).
  const int fd = open("/dev/null", O_WRONLY);
  ASSERT_GE(fd, 0);
  setenv(kProgressFdEnv, absl::StrCat(fd).c_str(), 1);
  EXPECT_FALSE(ProgressReporter::FromEnvironment().enabled());
  EXPECT_EQ(fcntl(fd, F_GETFD) >= 0, true);
  close(fd);
  unsetenv(kProgressFdEnv);
}

TEST(ProgressReporterTest, WriteMetrics) {
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/progress_reporter_metrics.json");
  ProgressReporter reporter(-1, path);
  ASSERT_TRUE(reporter.WriteMetrics("{\"loss\": 0.5}").ok());
  FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  char buf[64] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, n), "{\"loss\": 0.5}");

  ProgressReporter bad(-1, "/nonexistent-dir/metrics.json");
  EXPECT_FALSE(bad.WriteMetrics("{}").ok());
}

}  // namespace
}  // namespace launcher
}  // namespace nereid
