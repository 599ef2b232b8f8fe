// Finite-difference check of the group collectives' gradients across ranks:
// the ranks are threads of this process, each with its own graph, executor
// and Gloo communicator over loopback, and its own collective engine for the
// group. Each rank's graph is
//   p0 (Parameter) -> group op -> Reshape [1, -1] -> SoftmaxCrossEntropy
// and autodiff derives the backward communication from the op's conjugate.
// The objective is what the op's gradient is exact for:
//   GroupAllGather, GroupReduceScatter: the sum of every rank's loss, rank 0's
//     p0 perturbed alone;
//   GroupAllReduce (replicated downstream): one loss, equal on every rank;
//   GroupIdentity (replicated input): the sum of the ranks' losses, p0 equal
//     on every rank and perturbed on all at once;
//   GroupSendRecv: the sum of every rank's loss, rank 0's p0 perturbed alone.
// Tolerances as in gradient_check_test.cc: |analytic - numeric| <= 2e-3 +
// 2e-2 * |numeric| with h = 1e-2.

#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/gloo_test_world.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/op_registry.h"
#include "passes/pass_manager.h"
#include "schedulers/collective_engine.h"
#include "schedulers/executor.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using testing::Attr;
using testing::IntsValue;
using testing::OpNode;
using testing::ShapeValue;

struct GroupCase {
  std::string name;
  std::string op;
  std::vector<int64_t> dims;  // p0's
  bool replicated_input;      // p0 equal on every rank, perturbed on all
  bool one_loss;              // the objective is rank 0's loss (equal labels)
  std::string attrs;          // the op's other attributes, as text
};

std::string BuildGraph(const GroupCase& c, int world, int rank) {
  std::string text = "attr { key: \"loss\" value { s: \"loss\" } }\n";
  text += absl::StrCat("records { group { name: \"g\" size: ", world, " } }\n");
  text += OpNode("p0", "Parameter", {}, Attr("shape", ShapeValue(c.dims)));
  text += OpNode("y", c.op, {"p0"},
                 Attr("group", "s: \"g\"") + Attr("group_size", absl::StrCat("i: ", world)) + c.attrs);
  text += OpNode("flat", "Reshape", {"y"}, Attr("shape", IntsValue({1, -1})));
  int label = c.one_loss ? 1 : rank;  // ranks that differ weigh the outputs differently
  text += OpNode("label", "Const", {},
                 Attr("value", absl::StrCat("tensor { dtype: DT_INT32 ", ShapeValue({1}), " int_val: ", label, " }")));
  text += OpNode("loss", "SoftmaxCrossEntropy", {"flat", "label"});
  return text;
}

std::vector<float> Draw(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

class GroupGradientCheck : public ::testing::TestWithParam<std::tuple<GroupCase, int>> {};

TEST_P(GroupGradientCheck, MatchesFiniteDifferencesOfTheObjective) {
  const auto& [c, world] = GetParam();
  int64_t n = 1;
  for (int64_t d : c.dims) n *= d;
  constexpr float h = 1e-2f;
  // Evaluation k of every rank: k = 0 is the analytic gradient, then for each
  // element i of p0, k = 1 + 2i (+h) and 2 + 2i (-h).
  std::vector<std::vector<double>> losses(1 + 2 * n, std::vector<double>(world));
  std::vector<std::vector<float>> gradients(world);

  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> comms =
      nereid::testing::ConnectWorld(nereid::testing::LocalFileSpec(c.name), world, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  std::vector<absl::Status> statuses = nereid::testing::RunOnRanks(world, [&](int rank) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, testing::LoadText(BuildGraph(c, world, rank)));
    ASSIGN_OR_RETURN(std::vector<PipelineStage> pipeline, ParsePipeline("autodiff"));
    RETURN_IF_ERROR(RunPipeline(*graph, pipeline).status());
    int per_step = 0;
    for (Node* node : graph->nodes()) {
      if (node->op() == c.op || node->op().rfind("Group", 0) == 0) ++per_step;
    }
    CollectiveEngine engine((*comms)[rank].get(), per_step, absl::Seconds(30));
    ExecutorOptions options;
    options.group_collectives["g"] = &engine;
    options.group_ranks["g"] = rank;
    ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(graph.get(), options));
    ASSIGN_OR_RETURN(Tensor p0, Tensor::FromVector(c.dims, Draw(n, c.replicated_input ? 7 : 7 + rank)));
    RETURN_IF_ERROR(executor->SetState("p0", p0));
    StepInfo step;  // every evaluation is step 0 of a fresh engine order
    auto evaluate = [&](const std::vector<std::string>& fetches) {
      engine.Reset(0);
      return executor->Evaluate(step, {}, fetches);
    };
    ASSIGN_OR_RETURN(std::vector<Tensor> analytic, evaluate({"loss", "p0/grad"}));
    losses[0][rank] = analytic[0].data<float>()[0];
    gradients[rank].assign(analytic[1].data<float>(), analytic[1].data<float>() + n);
    for (int64_t i = 0; i < n; ++i) {
      for (int sign : {1, -1}) {
        ASSIGN_OR_RETURN(Tensor moved, p0.Clone());
        if (rank == 0 || c.replicated_input) moved.data<float>()[i] += sign * h;
        RETURN_IF_ERROR(executor->SetState("p0", moved));
        ASSIGN_OR_RETURN(std::vector<Tensor> out, evaluate({"loss"}));
        losses[1 + 2 * i + (sign < 0)][rank] = out[0].data<float>()[0];
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(nereid::testing::AllOk(statuses).ok()) << nereid::testing::AllOk(statuses);

  auto objective = [&](int k) {
    if (c.one_loss) return losses[k][0];
    double sum = 0;
    for (double l : losses[k]) sum += l;
    return sum;
  };
  for (int64_t i = 0; i < n; ++i) {
    double numeric = (objective(1 + 2 * i) - objective(2 + 2 * i)) / (2 * h);
    double analytic = gradients[0][i];
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << c.op << " element " << i;
  }
  if (c.replicated_input) {
    // Every rank's gradient of a replicated input is the same sum.
    for (int r = 1; r < world; ++r) EXPECT_EQ(gradients[r], gradients[0]) << "rank " << r;
  }
}

const std::vector<GroupCase>& Cases() {
  static const std::vector<GroupCase> cases = {
      {"all_gather", "GroupAllGather", {2, 3}, false, false},
      {"reduce_scatter", "GroupReduceScatter", {6, 2}, false, false},
      {"all_reduce", "GroupAllReduce", {2, 3}, false, true},
      {"identity", "GroupIdentity", {2, 3}, true, false},
      // Step 0's offset: each member sends to the next and receives from the one before.
      {"send_recv", "GroupSendRecv", {2, 3}, false, false, Attr("offsets", "list { i: 1 i: 2 }")},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    Conjugates, GroupGradientCheck, ::testing::Combine(::testing::ValuesIn(Cases()), ::testing::Values(2, 3)),
    [](const auto& info) { return absl::StrCat(std::get<0>(info.param).name, "_", std::get<1>(info.param), "_ranks"); });

// gradient_check_test.cc leaves the group ops (named Group*) to this file.
TEST(GroupGradientCoverage, EveryGroupOpWithAGradientIsCheckedHere) {
  std::set<std::string> checked;
  for (const GroupCase& c : Cases()) checked.insert(c.op);
  for (const std::string& name : OpRegistry::Global().OpNames()) {
    if (name.rfind("Group", 0) != 0 || !OpRegistry::Global().Find(name)->grad_fn) continue;
    EXPECT_TRUE(checked.count(name)) << name << " has a gradient that no case here checks";
  }
}

}  // namespace
}  // namespace nereid
