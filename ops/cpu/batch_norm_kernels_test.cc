// BatchNorm and BatchNormGrad on the CPU against a double-precision reference
// of PyTorch's BatchNorm2d/1d: y, the saved and running statistics, in both
// phases, and dx, dscale, doffset.

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "graph/graph_io.h"
#include "gtest/gtest.h"
#include "ops/kernel.h"
#include "ops/model_loader.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

constexpr double kTolerance = 1e-4;

std::string InputText(const std::string& name, const std::vector<int64_t>& dims) {
  std::string shape;
  for (int64_t d : dims) absl::StrAppend(&shape, "dim: ", d, " ");
  return absl::StrCat("node { name: \"", name, "\" op: \"Input\" attr { key: \"shape\" value { shape { ", shape,
                      "} } } }\n");
}

std::string OpText(const std::string& name, const std::string& op, const std::vector<std::string>& inputs,
                   const std::string& attrs) {
  std::string s = absl::StrCat("node { name: \"", name, "\" op: \"", op, "\"\n");
  for (const std::string& in : inputs) absl::StrAppend(&s, "  input: \"", in, "\"\n");
  return s + attrs + "}\n";
}

std::string FloatAttr(const std::string& key, float value) {
  return absl::StrCat("  attr { key: \"", key, "\" value { f: ", value, " } }\n");
}

// Loads a graph of five Inputs feeding one `op` node, creates its CPU kernel
// and runs it once.
struct OpRun {
  std::unique_ptr<Graph> graph;
  std::vector<Tensor> outputs;
  absl::Status status;
};

OpRun RunOp(const std::string& op, const std::vector<std::string>& names, const std::vector<Tensor>& inputs,
          const std::string& attrs, bool training) {
  OpRun run;
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += InputText(names[i], inputs[i].dims());
  text += OpText("bn", op, names, attrs);
  absl::StatusOr<GraphFile> file = ParseGraphText(text, "test.pbtxt");
  if (!file.ok()) {
    run.status = file.status();
    return run;
  }
  absl::StatusOr<std::unique_ptr<Graph>> graph = LoadModel(*file);
  if (!graph.ok()) {
    run.status = graph.status();
    return run;
  }
  run.graph = std::move(*graph);
  const Node* node = run.graph->FindNode("bn");
  auto kernel = KernelRegistry::Global().Create(*run.graph, *node, kCpu);
  if (!kernel.ok()) {
    run.status = kernel.status();
    return run;
  }
  std::vector<std::vector<int64_t>> dims;
  for (const ShapeAndType& out : node->outputs()) dims.push_back(out.shape.dims());
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  StepInfo step;
  step.training = training;
  OpKernelContext ctx(node, in, &dims, &step);
  run.status = (*kernel)->Compute(&ctx);
  run.outputs = std::move(ctx.outputs());
  return run;
}

Tensor Random(const std::vector<int64_t>& dims, std::mt19937& rng, float mean, float stddev) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return *Tensor::FromVector(dims, v);
}

Tensor Positive(int64_t c, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(0.5f, 2.0f);
  std::vector<float> v(c);
  for (float& x : v) x = dist(rng);
  return *Tensor::FromVector({c}, v);
}

// x as [N, C, S].
struct Layout {
  int64_t n, c, s;
  explicit Layout(const std::vector<int64_t>& dims) : n(dims[0]), c(dims[1]), s(1) {
    for (size_t i = 2; i < dims.size(); ++i) s *= dims[i];
  }
  int64_t at(int64_t i, int64_t ch, int64_t j) const { return (i * c + ch) * s + j; }
  int64_t m() const { return n * s; }
};

// Biased batch mean and variance per channel.
void BatchStats(const Tensor& x, std::vector<double>* mean, std::vector<double>* var) {
  Layout l(x.dims());
  const float* p = x.data<float>();
  mean->assign(l.c, 0.0);
  var->assign(l.c, 0.0);
  for (int64_t ch = 0; ch < l.c; ++ch) {
    for (int64_t i = 0; i < l.n; ++i)
      for (int64_t j = 0; j < l.s; ++j) (*mean)[ch] += p[l.at(i, ch, j)];
    (*mean)[ch] /= static_cast<double>(l.m());
    for (int64_t i = 0; i < l.n; ++i)
      for (int64_t j = 0; j < l.s; ++j) {
        double d = p[l.at(i, ch, j)] - (*mean)[ch];
        (*var)[ch] += d * d;
      }
    (*var)[ch] /= static_cast<double>(l.m());
  }
}

double MaxError(const Tensor& got, const std::vector<double>& want) {
  EXPECT_EQ(got.num_elements(), static_cast<int64_t>(want.size()));
  double err = 0;
  for (size_t i = 0; i < want.size() && static_cast<int64_t>(i) < got.num_elements(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(got.data<float>()[i]) - want[i]));
  }
  return err;
}

std::vector<double> Normalise(const Tensor& x, const Tensor& scale, const Tensor& offset,
                              const std::vector<double>& mean, const std::vector<double>& var, double eps) {
  Layout l(x.dims());
  std::vector<double> y(x.num_elements());
  for (int64_t i = 0; i < l.n; ++i)
    for (int64_t ch = 0; ch < l.c; ++ch)
      for (int64_t j = 0; j < l.s; ++j) {
        int64_t k = l.at(i, ch, j);
        y[k] = scale.data<float>()[ch] * (x.data<float>()[k] - mean[ch]) / std::sqrt(var[ch] + eps) +
               offset.data<float>()[ch];
      }
  return y;
}

const std::vector<std::string> kForwardInputs = {"x", "scale", "offset", "running_mean", "running_var"};
const std::vector<std::string> kGradInputs = {"dy", "x", "scale", "saved_mean", "saved_var"};

class BatchNormTest : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(BatchNormTest, TrainingUsesBatchStatisticsAndUpdatesRunningOnes) {
  std::mt19937 rng(1);
  std::vector<int64_t> dims = GetParam();
  int64_t c = dims[1];
  Tensor x = Random(dims, rng, 2.0f, 3.0f), scale = Random({c}, rng, 1.0f, 0.5f), offset = Random({c}, rng, 0, 1);
  Tensor rmean = Random({c}, rng, 0, 1), rvar = Positive(c, rng);
  const float eps = 1e-3f, momentum = 0.3f;
  OpRun run = RunOp("BatchNorm", kForwardInputs, {x, scale, offset, rmean, rvar},
                  FloatAttr("epsilon", eps) + FloatAttr("momentum", momentum), /*training=*/true);
  ASSERT_TRUE(run.status.ok()) << run.status;
  ASSERT_EQ(run.outputs.size(), 5u);

  std::vector<double> mean, var;
  BatchStats(x, &mean, &var);
  double m = static_cast<double>(Layout(dims).m());
  std::vector<double> next_mean(c), next_var(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    next_mean[ch] = (1 - momentum) * rmean.data<float>()[ch] + momentum * mean[ch];
    next_var[ch] = (1 - momentum) * rvar.data<float>()[ch] + momentum * var[ch] * m / (m - 1);
  }
  double y_err = MaxError(run.outputs[0], Normalise(x, scale, offset, mean, var, eps));
  double stats_err = std::max(MaxError(run.outputs[1], mean), MaxError(run.outputs[2], var));
  double running_err = std::max(MaxError(run.outputs[3], next_mean), MaxError(run.outputs[4], next_var));
  std::printf("training %s: max |err| y %.3g, saved stats %.3g, running stats %.3g\n",
              DimsToString(dims).c_str(), y_err, stats_err, running_err);
  EXPECT_LT(y_err, kTolerance);
  EXPECT_LT(stats_err, kTolerance * 10);  // the variance of x ~ N(2, 9) is ~9
  EXPECT_LT(running_err, kTolerance * 10);
}

TEST_P(BatchNormTest, InferenceUsesRunningStatisticsAndPassesThemThrough) {
  std::mt19937 rng(2);
  std::vector<int64_t> dims = GetParam();
  int64_t c = dims[1];
  Tensor x = Random(dims, rng, 2.0f, 3.0f), scale = Random({c}, rng, 1.0f, 0.5f), offset = Random({c}, rng, 0, 1);
  Tensor rmean = Random({c}, rng, 2, 1), rvar = Positive(c, rng);
  OpRun run = RunOp("BatchNorm", kForwardInputs, {x, scale, offset, rmean, rvar}, FloatAttr("epsilon", 1e-5f),
                  /*training=*/false);
  ASSERT_TRUE(run.status.ok()) << run.status;
  std::vector<double> mean(rmean.data<float>(), rmean.data<float>() + c);
  std::vector<double> var(rvar.data<float>(), rvar.data<float>() + c);
  double y_err = MaxError(run.outputs[0], Normalise(x, scale, offset, mean, var, 1e-5));
  std::printf("inference %s: max |err| y %.3g\n", DimsToString(dims).c_str(), y_err);
  EXPECT_LT(y_err, kTolerance);
  EXPECT_TRUE(run.outputs[1].BitwiseEquals(rmean));
  EXPECT_TRUE(run.outputs[2].BitwiseEquals(rvar));
  EXPECT_TRUE(run.outputs[3].BitwiseEquals(rmean));
  EXPECT_TRUE(run.outputs[4].BitwiseEquals(rvar));
}

TEST_P(BatchNormTest, GradMatchesReference) {
  std::mt19937 rng(3);
  std::vector<int64_t> dims = GetParam();
  int64_t c = dims[1];
  Layout l(dims);
  Tensor x = Random(dims, rng, 2.0f, 3.0f), dy = Random(dims, rng, 0, 1), scale = Random({c}, rng, 1.0f, 0.5f);
  std::vector<double> mean, var;
  BatchStats(x, &mean, &var);
  std::vector<float> mean_f(mean.begin(), mean.end()), var_f(var.begin(), var.end());
  Tensor saved_mean = *Tensor::FromVector({c}, mean_f), saved_var = *Tensor::FromVector({c}, var_f);
  const double eps = 1e-5;
  OpRun run = RunOp("BatchNormGrad", kGradInputs, {dy, x, scale, saved_mean, saved_var}, "", /*training=*/true);
  ASSERT_TRUE(run.status.ok()) << run.status;
  ASSERT_EQ(run.outputs.size(), 3u);

  // dx = scale / sqrt(var + eps) * (dy - mean(dy) - x_hat * mean(dy * x_hat)).
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  std::vector<double> dx(x.num_elements()), dscale(c, 0.0), doffset(c, 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double inv = 1 / std::sqrt(var[ch] + eps);
    for (int64_t i = 0; i < l.n; ++i)
      for (int64_t j = 0; j < l.s; ++j) {
        int64_t k = l.at(i, ch, j);
        doffset[ch] += pdy[k];
        dscale[ch] += pdy[k] * (px[k] - mean[ch]) * inv;
      }
    for (int64_t i = 0; i < l.n; ++i)
      for (int64_t j = 0; j < l.s; ++j) {
        int64_t k = l.at(i, ch, j);
        double x_hat = (px[k] - mean[ch]) * inv;
        dx[k] = scale.data<float>()[ch] * inv * (pdy[k] - doffset[ch] / l.m() - x_hat * dscale[ch] / l.m());
      }
  }
  double dx_err = MaxError(run.outputs[0], dx);
  double dscale_err = MaxError(run.outputs[1], dscale);
  double doffset_err = MaxError(run.outputs[2], doffset);
  std::printf("grad %s: max |err| dx %.3g, dscale %.3g, doffset %.3g\n", DimsToString(dims).c_str(), dx_err,
              dscale_err, doffset_err);
  EXPECT_LT(dx_err, kTolerance);
  EXPECT_LT(dscale_err, kTolerance);
  EXPECT_LT(doffset_err, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Values(std::vector<int64_t>{4, 3, 5, 5}, std::vector<int64_t>{8, 5},
                                           std::vector<int64_t>{2, 4, 7}, std::vector<int64_t>{16, 16, 8, 8}));

TEST(BatchNormErrorTest, TrainingNeedsMoreThanOneValuePerChannel) {
  std::mt19937 rng(4);
  Tensor x = Random({1, 3}, rng, 0, 1), v = Positive(3, rng);
  OpRun run = RunOp("BatchNorm", kForwardInputs, {x, v, v, v, v}, "", /*training=*/true);
  EXPECT_THAT(std::string(run.status.message()), HasSubstr("expected more than 1 value per channel"));
  // Evaluation of a single example is fine.
  EXPECT_TRUE(RunOp("BatchNorm", kForwardInputs, {x, v, v, v, v}, "", /*training=*/false).status.ok());
}

}  // namespace
}  // namespace nereid
