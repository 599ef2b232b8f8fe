#include "benchmarks/fma_peak.h"

#include <algorithm>

#include "core/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(FmaPeakTest, MeasuresEveryIsaAndReportsTheHighestMedian) {
  FmaPeakOptions options;
  options.trials = 3;
  options.seconds_per_trial = 0.01;
  options.threads = 2;
  absl::StatusOr<FmaPeak> peak = MeasureFmaPeak(options);
#if defined(__x86_64__)
  ASSERT_TRUE(peak.ok()) << peak.status();
  ASSERT_FALSE(peak->rows.empty());
  EXPECT_EQ(peak->rows.back().isa, "sse2");  // every x86-64 CPU runs the baseline loop
  double best = 0;
  for (const FmaPeakRow& row : peak->rows) {
    ASSERT_EQ(row.trial_gflops.size(), 3u) << row.isa;
    std::vector<double> sorted = row.trial_gflops;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(row.median_gflops, sorted[1]) << row.isa;
    EXPECT_GT(row.median_gflops, 0) << row.isa;
    best = std::max(best, row.median_gflops);
  }
  EXPECT_EQ(peak->best_gflops, best);
  EXPECT_EQ(peak->threads, 2);

  Json doc = Json::parse(FmaPeakJson(*peak));
  EXPECT_EQ(doc["peak_gflops"].get<double>(), best);
  EXPECT_EQ(doc["peak_isa"].get<std::string>(), peak->best_isa);
  EXPECT_EQ(doc["isas"].size(), peak->rows.size());
  EXPECT_THAT(FormatFmaPeak(*peak), testing::HasSubstr(peak->best_isa + " "));
  EXPECT_THAT(FormatFmaPeak(*peak), testing::HasSubstr("<- peak"));
#else
  EXPECT_EQ(peak.status().code(), absl::StatusCode::kUnimplemented);
#endif
}

TEST(FmaPeakTest, RejectsOptionsThatMeasureNothing) {
  for (FmaPeakOptions bad : {FmaPeakOptions{0, 0.1, 1}, FmaPeakOptions{3, 0, 1}, FmaPeakOptions{3, 0.1, 0}}) {
    absl::StatusOr<FmaPeak> peak = MeasureFmaPeak(bad);
    EXPECT_EQ(peak.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace nereid
