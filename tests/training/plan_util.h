#ifndef NEREID_TESTS_TRAINING_PLAN_UTIL_H_
#define NEREID_TESTS_TRAINING_PLAN_UTIL_H_

// Helpers of the training tests: a model of models/ planned with a pass
// list, and random Fashion-MNIST-shaped batches to run it on.

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "graph/ir.h"
#include "ops/model_loader.h"
#include "passes/pass_manager.h"
#include "schedulers/executor.h"

namespace nereid {
namespace testing {

// models/<model>.pbtxt after `passes`, for a world of `workers` ranks (0:
// not known, the passes' default).
inline absl::StatusOr<std::unique_ptr<Graph>> PlanModel(const std::string& model, const std::string& passes,
                                                        int workers = 0) {
  auto graph = LoadModel("models/" + model + ".pbtxt");
  if (!graph.ok()) return graph.status();
  auto pipeline = ParsePipeline(passes);
  if (!pipeline.ok()) return pipeline.status();
  PipelineOptions options;
  if (workers > 0) {
    options.target = PlanTarget{};
    options.target->workers = workers;
  }
  auto reports = RunPipeline(**graph, *pipeline, options);
  if (!reports.ok()) return reports.status();
  return graph;
}

// `steps` batches of `batch` random images of `image_dims` (default
// Fashion-MNIST's 1x28x28; {3, 32, 32} for the CIFAR-shaped models) as
// "images" and labels of 10 classes ("labels"), drawn from `seed`.
inline std::vector<FeedMap> RandomImageFeeds(unsigned seed, int steps, int batch,
                                             std::vector<int64_t> image_dims = {1, 28, 28}) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<FeedMap> feeds(steps);
  std::vector<int64_t> dims = {batch};
  int64_t pixels = 1;
  for (int64_t d : image_dims) {
    dims.push_back(d);
    pixels *= d;
  }
  for (FeedMap& f : feeds) {
    std::vector<float> images(batch * pixels);
    for (float& v : images) v = normal(rng);
    f["images"] = *Tensor::FromVector(dims, images);
    Tensor labels = *Tensor::Allocate(DT_INT32, {batch});
    for (int i = 0; i < batch; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng() % 10);
    f["labels"] = labels;
  }
  return feeds;
}

}  // namespace testing
}  // namespace nereid

#endif  // NEREID_TESTS_TRAINING_PLAN_UTIL_H_
