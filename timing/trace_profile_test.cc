#include "timing/trace_profile.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;

// A one-worker trace: 2 warm-up steps of 9 ms, then 6 steps of 4, 5, 6, 4, 5,
// 6 ms (median 5 ms). In every step the node conv runs for 1, 2, 3, 2, 2, 3 ms
// (median 2 ms; 8 ms in warm-up) and relu twice for 0.25 ms (0.5 ms per step);
// an evaluation after the steps runs conv for 50 ms, which must not count.
std::string SampleTrace(bool with_communication) {
  TraceRecorder trace;
  const absl::Time base = absl::Now() + absl::Milliseconds(1);
  auto at = [&](double ms) { return base + absl::Microseconds(ms * 1000); };
  const double step_ms[] = {9, 9, 4, 5, 6, 4, 5, 6};
  const double conv_ms[] = {8, 8, 1, 2, 3, 2, 2, 3};
  for (int s = 0; s < 8; ++s) {
    double start = 10.0 * s;
    trace.Complete(absl::StrCat("step ", s), "step", at(start), at(start + step_ms[s]), {{"step", s}, {"epoch", 0}});
    trace.Complete("conv", "Conv2D", at(start + 0.1), at(start + 0.1 + conv_ms[s]), {{"step", s}});
    trace.Complete("relu", "Relu", at(start + 0.1 + conv_ms[s]), at(start + 0.35 + conv_ms[s]), {{"step", s}});
    trace.Complete("relu", "Relu", at(start + 0.4 + conv_ms[s]), at(start + 0.65 + conv_ms[s]), {{"step", s}});
    if (with_communication) {
      trace.Async("data_parallel/bucket_0", "wait", at(start + 3.5), at(start + 3.9), {{"step", s}});
    }
  }
  trace.Complete("evaluate", "eval", at(81), at(140), {{"epoch", 0}, {"step", 8}});
  trace.Complete("conv", "Conv2D", at(82), at(132), {{"step", 8}});
  return trace.ToJson();
}

TEST(TraceProfileTest, MediansOverMeasuredSteps) {
  TraceProfileOptions options;
  options.warmup_steps = 2;
  TraceProfile p = ProfileTrace(SampleTrace(false), "sample", options).value();
  EXPECT_EQ(p.total_steps, 8);
  EXPECT_EQ(p.warmup_steps, 2);
  EXPECT_EQ(p.measured_steps, 6);
  EXPECT_THAT(p.step_seconds, DoubleNear(0.005, 1e-9));
  ASSERT_EQ(p.nodes.size(), 2u);
  EXPECT_EQ(p.nodes[0].name, "conv");
  EXPECT_EQ(p.nodes[0].op, "Conv2D");
  EXPECT_THAT(p.nodes[0].median_seconds, DoubleNear(0.002, 1e-9));
  EXPECT_EQ(p.nodes[0].steps, 6);
  EXPECT_EQ(p.nodes[1].name, "relu");
  EXPECT_THAT(p.nodes[1].median_seconds, DoubleNear(0.0005, 1e-9));  // two spans per step, summed
  EXPECT_THAT(p.node_seconds, DoubleNear(0.0025, 1e-9));
  // When each is done, from its step's start: conv ends 0.1 ms + its time in;
  // relu's second span ends 0.65 ms after conv's time.
  EXPECT_THAT(p.nodes[0].median_end_seconds, DoubleNear(0.0021, 1e-9));
  EXPECT_THAT(p.nodes[1].median_end_seconds, DoubleNear(0.00265, 1e-9));
  // Per step, over that step's duration: conv 1.1/4, 2.1/5, 3.1/6, 2.1/4,
  // 2.1/5, 3.1/6 (median of 0.275, 0.42, 0.5167, 0.525, 0.42, 0.5167).
  EXPECT_THAT(p.nodes[0].median_end_fraction, DoubleNear((0.42 + 3.1 / 6) / 2, 1e-9));
  EXPECT_FALSE(p.has_communication);
}

TEST(TraceProfileTest, BucketsAreReadyWhenTheirLastProducerEnds) {
  TraceProfileOptions options;
  options.warmup_steps = 2;
  TraceProfile p = ProfileTrace(SampleTrace(false), "sample", options).value();
  std::vector<std::string> missing;
  std::vector<double> f = BucketReadyFractions(p, {{"conv"}, {"conv", "relu"}, {"relu", "pool"}}, &missing);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_THAT(f[0], DoubleNear(p.nodes[0].median_end_fraction, 1e-12));
  EXPECT_THAT(f[1], DoubleNear(p.nodes[1].median_end_fraction, 1e-12));  // relu ends after conv
  EXPECT_GT(p.nodes[1].median_end_fraction, p.nodes[0].median_end_fraction);
  EXPECT_THAT(f[2], DoubleNear(1, 1e-12));                // pool is not in the profile
  EXPECT_EQ(missing, std::vector<std::string>{"pool"});
}

TEST(TraceProfileTest, WarmupIsAtMostHalfTheSteps) {
  TraceProfileOptions options;
  options.warmup_steps = 100;
  TraceProfile p = ProfileTrace(SampleTrace(false), "sample", options).value();
  EXPECT_EQ(p.warmup_steps, 4);
  EXPECT_EQ(p.measured_steps, 4);
  EXPECT_THAT(p.step_seconds, DoubleNear(0.0055, 1e-9));  // 6, 4, 5, 6 ms
  options.warmup_steps = 0;
  p = ProfileTrace(SampleTrace(false), "sample", options).value();
  EXPECT_EQ(p.measured_steps, 8);
  EXPECT_THAT(p.step_seconds, DoubleNear(0.0055, 1e-9));  // 4 4 5 5 | 6 6 9 9
}

TEST(TraceProfileTest, FlagsCommunication) {
  TraceProfile p = ProfileTrace(SampleTrace(true), "sample").value();
  EXPECT_TRUE(p.has_communication);
  EXPECT_EQ(p.nodes.size(), 2u);  // the async waits are not nodes
}

TEST(TraceProfileTest, AcceptsTheBareArrayForm) {
  std::string json = R"([{"name":"step 0","cat":"step","ph":"X","pid":0,"tid":1,"ts":0,"dur":1000},)"
                     R"({"name":"n","cat":"MatMul","ph":"X","pid":0,"tid":2,"ts":10,"dur":500}])";
  TraceProfile p = ProfileTrace(json, "array").value();
  EXPECT_EQ(p.total_steps, 1);
  EXPECT_THAT(p.step_seconds, DoubleNear(0.001, 1e-12));
  ASSERT_EQ(p.nodes.size(), 1u);
  EXPECT_THAT(p.nodes[0].median_seconds, DoubleNear(0.0005, 1e-12));
}

std::string ErrorOf(const std::string& json) {
  absl::StatusOr<TraceProfile> p = ProfileTrace(json, "t.json");
  EXPECT_FALSE(p.ok()) << json;
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  return std::string(p.status().message());
}

TEST(TraceProfileTest, MalformedInputIsAClearError) {
  EXPECT_THAT(ErrorOf(""), HasSubstr("t.json: not valid JSON"));
  EXPECT_THAT(ErrorOf("{\"traceEvents\": [{\"ph\": \"X\""), HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf("{\"traceEvents\": 3}"), HasSubstr("not a Chrome trace"));
  EXPECT_THAT(ErrorOf("{\"other\": []}"), HasSubstr("not a Chrome trace"));
  EXPECT_THAT(ErrorOf("[1, 2]"), HasSubstr("event 0 is not an object"));
  EXPECT_THAT(ErrorOf("[{\"name\": \"a\"}]"), HasSubstr("event 0 has no \"ph\""));
  EXPECT_THAT(ErrorOf(R"([{"name":"s","cat":"step","ph":"X","dur":1}])"),
              HasSubstr("event 0 (\"s\") has no numeric \"ts\""));
  EXPECT_THAT(ErrorOf(R"([{"name":"s","cat":"step","ph":"X","ts":"x","dur":1}])"), HasSubstr("numeric \"ts\""));
  EXPECT_THAT(ErrorOf(R"([{"name":"s","cat":"step","ph":"X","ts":0,"dur":-1}])"), HasSubstr("negative duration"));
  EXPECT_THAT(ErrorOf(R"([{"name":"n","cat":"MatMul","ph":"X","ts":0,"dur":1}])"), HasSubstr("no step spans"));
  // Fields of the wrong JSON type are read as absent, never thrown.
  EXPECT_THAT(ErrorOf(R"([{"name":"n","cat":5,"ph":"X","ts":0,"dur":1}])"), HasSubstr("no step spans"));
  EXPECT_THAT(ErrorOf(R"([{"name":7,"cat":"MatMul","ph":"X","ts":0,"dur":1}])"), HasSubstr("has no \"name\" string"));
  EXPECT_THAT(ErrorOf(R"([{"name":"n","ph":["X"]}])"), HasSubstr("has no \"ph\" string"));
  EXPECT_THAT(ErrorOf(std::string(100000, '[') + std::string(100000, ']')), HasSubstr("nested deeper than"));
  EXPECT_THAT(ErrorOf(std::string(50, '[') + std::string(50, ']')), HasSubstr("event 0 is not an object"));
}

std::string TempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path) << contents;
  return path;
}

TEST(TraceProfileTest, ReadsFilesWithinTheBound) {
  std::string path = TempFile("trace.json", SampleTrace(false));
  EXPECT_EQ(ReadTraceProfile(path).value().total_steps, 8);
  TraceProfileOptions small;
  small.max_bytes = 100;
  absl::Status too_big = ReadTraceProfile(path, small).status();
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("files over 100 bytes are refused"));
  EXPECT_EQ(ReadTraceProfile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

// Two traces pooled: every measured step of both, the median over all.
TEST(TraceProfileTest, PoolsTheStepsOfSeveralTraces) {
  TraceProfileOptions options;
  options.warmup_steps = 4;
  std::string path = TempFile("pooled.json", SampleTrace(false));
  TraceProfile one = ReadTraceProfile(path, options).value();
  TraceProfile two = ReadTraceProfiles({path, path}, options).value();
  EXPECT_EQ(two.total_steps, 2 * one.total_steps);
  EXPECT_EQ(two.measured_steps, 2 * one.measured_steps);
  EXPECT_EQ(two.measured_step_seconds.size(), 2 * one.measured_step_seconds.size());
  EXPECT_THAT(two.step_seconds, DoubleNear(one.step_seconds, 1e-12));
  EXPECT_EQ(two.nodes.size(), one.nodes.size());
  EXPECT_EQ(ReadTraceProfiles({path, path + ".missing"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(ReadTraceProfiles({}).ok());
}

TEST(TraceProfileTest, ReadsTheLinkOfABenchReport) {
  LinkModel link =
      ParseBenchLink(R"({"world":2,"alpha_seconds":2.5e-05,"beta_bytes_per_second":1.5e9,"sizes":[]})", "b").value();
  EXPECT_DOUBLE_EQ(link.alpha_seconds, 2.5e-5);
  EXPECT_DOUBLE_EQ(link.beta_bytes_per_second, 1.5e9);
  EXPECT_EQ(link.gamma_seconds_per_byte, 0);
  EXPECT_THAT(ParseBenchLink(R"({"alpha_seconds":1e-5})", "b.json").status().message(),
              HasSubstr("b.json: no numeric alpha_seconds and beta_bytes_per_second"));
  EXPECT_THAT(ParseBenchLink(R"({"alpha_seconds":1e-5,"beta_bytes_per_second":0})", "b").status().message(),
              HasSubstr("unusable"));
  EXPECT_THAT(ParseBenchLink("[]", "b").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseBenchLink("{", "b").status().message(), HasSubstr("not valid JSON"));
  std::string path = TempFile("bench.json", R"({"alpha_seconds":1e-4,"beta_bytes_per_second":1e8})");
  EXPECT_DOUBLE_EQ(ReadBenchLink(path).value().beta_bytes_per_second, 1e8);
}

TEST(TraceProfileTest, ReadsTheHostSideOfABenchReportWhenItHasOne) {
  LinkModel old = ParseBenchLink(R"({"alpha_seconds":1e-5,"beta_bytes_per_second":1e8})", "b").value();
  EXPECT_EQ(old.cpu_seconds_per_byte_sent, 0);
  EXPECT_EQ(old.cores_per_worker, 0);
  const std::string json = R"({"world":2,"alpha_seconds":1e-5,"beta_bytes_per_second":1e8,)"
                           R"("comm_cpu_seconds_per_byte":4e-8,"cores_per_rank":0.5,)"
                           R"("sizes":[{"bytes":1000,"seconds":1e-3},{"bytes":2000,"seconds":1.5e-3}]})";
  for (BenchLink source : {BenchLink::kProbe, BenchLink::kFit}) {
    LinkModel link = ParseBenchLink(json, "b", source).value();
    EXPECT_DOUBLE_EQ(link.cpu_seconds_per_byte_sent, 4e-8);
    EXPECT_DOUBLE_EQ(link.cores_per_worker, 0.5);
  }
  EXPECT_THAT(ParseBenchLink(R"({"alpha_seconds":1e-5,"beta_bytes_per_second":1e8,)"
                             R"("comm_cpu_seconds_per_byte":-1,"cores_per_rank":1})",
                             "b.json")
                  .status()
                  .message(),
              HasSubstr("b.json: comm_cpu_seconds_per_byte"));
  EXPECT_FALSE(ParseBenchLink(R"({"alpha_seconds":1e-5,"beta_bytes_per_second":1e8,)"
                              R"("comm_cpu_seconds_per_byte":1e-9,"cores_per_rank":0})",
                              "b")
                   .ok());
}

TEST(TraceProfileTest, FitsTheLinkToTheMeasuredAllreduces) {
  // 4 ranks, alpha 50 us, beta 1e9 B/s: t(S) = 6 * 50 us + 6/4 * S / 1e9.
  auto row = [](double bytes) {
    return absl::StrFormat(R"({"bytes":%.17g,"seconds":%.17g})", bytes, 300e-6 + 1.5 * bytes / 1e9);
  };
  std::string json = absl::StrCat(R"({"world":4,"alpha_seconds":1e-6,"beta_bytes_per_second":5e9,"sizes":[)",
                                  row(65536), ",", row(1 << 20), ",", row(4 << 20), "]}");
  LinkModel fit = ParseBenchLink(json, "b", BenchLink::kFit).value();
  EXPECT_THAT(fit.alpha_seconds, DoubleNear(50e-6, 1e-12));
  EXPECT_THAT(fit.beta_bytes_per_second, DoubleNear(1e9, 1e-3));
  EXPECT_THAT(fit.min_step_seconds, DoubleNear((300e-6 + 1.5 * 65536 / 1e9) / 6, 1e-12));  // the smallest size's
  EXPECT_DOUBLE_EQ(ParseBenchLink(json, "b").value().beta_bytes_per_second, 5e9);  // the probe
  // A negative intercept: through the origin, alpha 0.
  json = R"({"world":2,"sizes":[{"bytes":1000,"seconds":1e-7},{"bytes":2000,"seconds":3e-7}]})";
  fit = ParseBenchLink(json, "b", BenchLink::kFit).value();
  EXPECT_EQ(fit.alpha_seconds, 0);
  EXPECT_GT(fit.beta_bytes_per_second, 0);
  EXPECT_THAT(
      ParseBenchLink(R"({"world":2,"sizes":[{"bytes":1000,"seconds":1e-3}]})", "b", BenchLink::kFit).status().message(),
      HasSubstr("at least two message sizes"));
  EXPECT_THAT(ParseBenchLink(R"({"sizes":[]})", "b", BenchLink::kFit).status().message(), HasSubstr("\"world\""));
  EXPECT_THAT(ParseBenchLink(R"({"world":2,"sizes":[{"bytes":1000,"seconds":2e-3},{"bytes":2000,"seconds":1e-3}]})",
                             "b", BenchLink::kFit)
                  .status()
                  .message(),
              HasSubstr("do not grow"));
}

}  // namespace
}  // namespace nereid
