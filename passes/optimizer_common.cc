#include "passes/optimizer_common.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/process_groups.h"
#include "graph/errors.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"

namespace nereid {
PassInfo OptimizerPassInfo(std::string name, std::string summary, std::vector<PassOptionSpec> options,
                           std::function<std::unique_ptr<Pass>()> factory) {
  PassInfo info{std::move(name), std::move(summary), std::move(options), std::move(factory)};
  info.needs = {kGradientsProperty};
  info.provides = {kOptimizerProperty};
  return info;
}

LoopScope* TrainLoop(Graph& graph) {
  for (LoopScope& loop : *graph.mutable_header()->mutable_loop()) {
    if (loop.name() == kTrainLoop) return &loop;
  }
  LoopScope* loop = graph.mutable_header()->add_loop();
  loop->set_name(kTrainLoop);
  loop->set_max_in_flight(1);
  return loop;
}

absl::StatusOr<std::vector<GradientOfParameter>> FindGradients(Graph& graph) {
  std::vector<GradientOfParameter> found;
  for (Node* n : graph.nodes()) {
    if (n->op() != "Gradient") continue;
    const std::string& name = n->def().attr().at("parameter").s();
    Node* p = graph.FindNode(name);
    if (p == nullptr || p->op() != "Parameter") {
      return NodeError(graph, *n, absl::StrCat("names parameter '", name, "', which is not a Parameter node"));
    }
    if (p->num_inputs() > 0) return NodeError(graph, *p, "already has an optimizer update (an optimizer pass ran before)");
    found.push_back({p, n});
  }
  if (found.empty()) {
    return absl::InvalidArgumentError("the graph has no gradients: run the autodiff pass before an optimizer");
  }
  return found;
}

std::vector<PassOptionSpec> LearningRateOptions(const std::string& default_lr) {
  return {
      {"lr", OptionType::kFloat, default_lr, "the base learning rate"},
      {"schedule", OptionType::kString, "constant", "constant, step or cosine"},
      {"step_epochs", OptionType::kInt, "30", "step schedule: decay every this many epochs"},
      {"gamma", OptionType::kFloat, "0.1", "step schedule: the decay factor"},
      {"warmup_epochs", OptionType::kFloat, "0", "linear warm-up over this many (fractional) epochs"},
      {"min_lr", OptionType::kFloat, "0", "cosine schedule: the final rate"},
  };
}

absl::StatusOr<Node*> AddLearningRate(Graph& graph, const PassOptions& o) {
  const std::string& schedule = o.GetString("schedule");
  if (schedule != "constant" && schedule != "step" && schedule != "cosine") {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule=", schedule, " is not a schedule; use constant, step or cosine"));
  }
  if (o.GetFloat("lr") < 0) return absl::InvalidArgumentError("lr must be >= 0");
  AttrValue sched;
  sched.set_s(schedule);
  return AddOpNode(&graph, "optimizer/learning_rate", "LearningRate", {},
                   {{"base", FloatAttr(static_cast<float>(o.GetFloat("lr")))},
                    {"schedule", sched},
                    {"step_epochs", IntAttr(o.GetInt("step_epochs"))},
                    {"gamma", FloatAttr(static_cast<float>(o.GetFloat("gamma")))},
                    {"warmup_epochs", FloatAttr(static_cast<float>(o.GetFloat("warmup_epochs")))},
                    {"min_lr", FloatAttr(static_cast<float>(o.GetFloat("min_lr")))}});
}

// Whether state shaped like `like` differs between ranks: `like` is per-rank
// state or a shard, or the gradient of one.
bool IsPerRank(const Graph& graph, const Node& like) {
  const Node* parameter = like.op() == "Gradient" ? graph.FindNode(NodeAttrString(like, "parameter")) : &like;
  return parameter != nullptr && HoldsPerRankValue(*parameter);
}

absl::Status CheckMomentumAppliedOnce(const Graph& graph, double optimizer_momentum) {
  const PlanRecords::Compression& codec = graph.header().records().compression();
  if (codec.momentum() == 0 || optimizer_momentum == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "momentum would be applied twice: compress(method=", codec.method(), ") applies momentum ", codec.momentum(),
      " itself (DGC's momentum correction) and sgd has momentum ", optimizer_momentum,
      "; use sgd(momentum=0) with it, or compress(method=", codec.method(), ", momentum=0)"));
}

absl::StatusOr<Node*> AddStateLike(Graph& graph, const Node& like, const std::string& suffix) {
  return AddState(graph, absl::StrCat(like.name(), "/", suffix), like.outputs()[0].shape.dims(),
                  IsPerRank(graph, like));
}

absl::StatusOr<Node*> AddStatePiece(Graph& graph, const Node& whole, const std::string& name, int64_t begin,
                                    int64_t size) {
  NodeDef def = whole.def();
  def.set_name(name);
  def.clear_input();
  auto& attrs = *def.mutable_attr();
  attrs["init_of_shape"] = attrs["shape"];
  attrs["init_offset"] = IntAttr(begin);
  attrs["shape"] = ShapeAttr({size});
  return graph.AddNode(def, 0);
}

absl::StatusOr<Node*> AddState(Graph& graph, const std::string& name, const std::vector<int64_t>& dims,
                               bool per_rank) {
  AttrValue shape;
  *shape.mutable_shape() = TensorShape(dims).ToProto();
  AttrValue init;
  init.mutable_tensor()->set_dtype(DT_FLOAT);
  init.mutable_tensor()->mutable_init()->set_kind("zeros");
  std::vector<std::pair<std::string, AttrValue>> attrs = {
      {"shape", shape}, {"init", init}, {"trainable", BoolAttr(false)}};
  if (per_rank) attrs.emplace_back("per_rank", BoolAttr(true));
  return AddOpNode(&graph, name, "Parameter", {}, std::move(attrs));
}

AttrValue ScalarConstValue(float v) {
  AttrValue value;
  TensorProto* t = value.mutable_tensor();
  t->set_dtype(DT_FLOAT);
  t->mutable_shape()->add_dim(1);
  t->add_float_val(v);
  return value;
}

std::vector<std::pair<Node*, Node*>> CarriedTrainedParameters(Graph& graph) {
  std::vector<std::pair<Node*, Node*>> carried;
  for (Node* n : graph.nodes()) {
    if (n->op() != "Parameter" || n->num_inputs() != 1) continue;
    if (!NodeAttrBool(*n, "trainable", true)) {
      (*n->mutable_def()->mutable_attr())["per_rank"] = BoolAttr(true);
      continue;
    }
    Node* feedback = n->input_edge(0)->src;
    if (feedback->op() != "Feedback") continue;
    (*n->mutable_def()->mutable_attr())["per_rank"] = BoolAttr(true);
    carried.emplace_back(n, feedback);
  }
  return carried;
}

absl::Status CloseLoop(Graph& graph, Node* parameter, NodeOut next) {
  AttrValue loop, shape;
  loop.set_s(kTrainLoop);
  *shape.mutable_shape() = parameter->def().attr().at("shape").shape();  // new state has no inferred shape yet
  LoopScope* scope = TrainLoop(graph);
  ASSIGN_OR_RETURN(Node * feedback, AddOpNode(&graph, absl::StrCat(parameter->name(), "/next"), "Feedback", {next},
                                              {{"loop", loop}, {"shape", shape}}));
  RETURN_IF_ERROR(graph.SetNumInputs(parameter, 1));
  RETURN_IF_ERROR(graph.AddEdge(feedback, 0, parameter, 0).status());
  scope->add_ingress(parameter->name());
  scope->add_feedback(feedback->name());
  return absl::OkStatus();
}

absl::Status RemoveState(Graph& graph, Node* parameter) {
  if (parameter->op() != "Parameter") {
    return absl::InternalError(absl::StrCat("RemoveState: '", parameter->name(), "' is not a Parameter"));
  }
  LoopScope* scope = TrainLoop(graph);
  auto erase = [](google::protobuf::RepeatedPtrField<std::string>* names, const std::string& name) {
    for (int i = 0; i < names->size(); ++i) {
      if (names->Get(i) == name) {
        names->erase(names->begin() + i);
        return;
      }
    }
  };
  if (parameter->num_inputs() > 0 && parameter->input_edge(0) != nullptr) {
    Node* feedback = parameter->input_edge(0)->src;
    if (feedback->op() == "Feedback") {
      erase(scope->mutable_feedback(), feedback->name());
      graph.RemoveNode(feedback);
    }
  }
  erase(scope->mutable_ingress(), parameter->name());
  graph.RemoveNode(parameter);
  return absl::OkStatus();
}

absl::StatusOr<int> CloseStateUpdates(Graph& graph) {
  int closed = 0;
  for (Node* n : graph.nodes()) {
    const OpDef* def = OpRegistry::Global().Find(n->op());
    if (def == nullptr) continue;
    for (auto [input, output] : def->state_updates) {
      const Edge* e = n->input_edge(input);
      if (e == nullptr || e->src->op() != "Parameter") {
        return NodeError(graph, *n, absl::StrCat("input ", def->InputName(input),
                                                 " is updated as state, so it must come from a Parameter"));
      }
      if (e->src->num_inputs() > 0) continue;  // already carried
      // Each data-parallel rank updates the statistics from its own batches,
      // so the ranks' values differ between evaluations: per-rank state
      // (checkpointed per rank, not checked equal), averaged across the
      // ranks before each evaluation (runtime/data_parallel_group.h).
      (*e->src->mutable_def()->mutable_attr())["per_rank"] = BoolAttr(true);
      RETURN_IF_ERROR(CloseLoop(graph, e->src, NodeOut{n, output}));
      ++closed;
    }
  }
  return closed;
}

}  // namespace nereid
