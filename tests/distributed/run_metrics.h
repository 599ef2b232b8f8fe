#ifndef NEREID_TESTS_DISTRIBUTED_RUN_METRICS_H_
#define NEREID_TESTS_DISTRIBUTED_RUN_METRICS_H_

// What the multi-process model tests read of a run: rank 0's
// --metrics-json.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/json.h"
#include "gtest/gtest.h"
#include "tests/process_util.h"

namespace nereid {
namespace testing {

struct RunMetrics {
  std::string strategy;
  std::vector<double> losses;  // per step
  double accuracy = 0;         // final test accuracy
  int64_t state_bytes = 0;
  int64_t model_parallel = 0;
  double bytes_sent_per_step = 0;
  std::vector<int64_t> rank_state_bytes;  // by rank
  std::vector<int64_t> rank_peak_tensor_bytes;
  std::string parameter_fingerprint;
};

inline RunMetrics ReadRunMetrics(const std::string& path) {
  Json j = Json::parse(ReadFile(path));
  RunMetrics m;
  m.strategy = j["strategy"].get<std::string>();
  m.losses = j["step_losses"].get<std::vector<double>>();
  m.accuracy = j["final_test_accuracy"].get<double>();
  m.state_bytes = j["state_bytes"].get<int64_t>();
  m.model_parallel = j["model_parallel"].get<int64_t>();
  m.bytes_sent_per_step = j["bytes_sent_per_step"].get<double>();
  m.rank_state_bytes = j["rank_state_bytes"].get<std::vector<int64_t>>();
  m.rank_peak_tensor_bytes = j["rank_peak_tensor_bytes"].get<std::vector<int64_t>>();
  m.parameter_fingerprint = j.value("parameter_fingerprint", "");
  return m;
}

// mlp_fashion on `workers` local workers (one thread each), `steps` steps
// of 32 per worker on Fashion-MNIST (one epoch), 1,000 test images, with
// `passes` and `more` flags; rank 0's --metrics-json, written to `json`
// (null, with a test failure, if the run failed).
inline Json RunMlpWorkers(const std::string& json, int workers, int steps, const std::string& passes,
                          const std::string& more = "") {
  Outcome o = Shell(absl::StrCat("runtime/cli/nereid run models/mlp_fashion.pbtxt --workers ", workers,
                                 " --threads 1 --batch 32 --train-limit ", 32 * steps * workers,
                                 " --test-limit 1000 --epochs 1 --quiet --comm-timeout 30 --passes \"", passes,
                                 "\" --metrics-json ", json, more),
                    300);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  if (o.exit_code != 0) return Json();
  return Json::parse(ReadFile(json));
}

}  // namespace testing
}  // namespace nereid

#endif  // NEREID_TESTS_DISTRIBUTED_RUN_METRICS_H_
