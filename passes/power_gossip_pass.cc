// power_gossip: decentralised averaging with low-rank messages (PowerGossip,
// Vogels et al., 2020), the PowerSGD idea applied to gossip. Every rank
// keeps its own parameters, as with `gossip`; after each local optimizer
// step it moves towards its two ring neighbours, but instead of pushing its
// whole model it sends, per weight matrix X (a parameter viewed as rows x
// the rest) and per ring edge, two vectors:
//   round 1: a = X q        (q: the edge's vector, the same on both ends)
//   round 2: b = X^T p,     p = unit(a_mine - a_theirs) = unit(D q),
// where D is the difference of the two ends' matrices. Both ends then know
// the rank-1 approximation p (D^T p)^T of D, computed from the same numbers
// in the same order, so they apply it with opposite signs and the ranks'
// sum of parameters is unchanged: the average model moves exactly as the
// average of the local steps (mass is conserved by construction, not by a
// weight). q <- D^T p warm-starts the next step's power iteration, so the
// approximation sharpens on the directions where the neighbours differ.
// A bias (one column) is sent as exactly as a full push would.
//
// Messages: per step, rows + columns floats per matrix and edge, against
// rows x columns for a gossip push (all of a round's vectors go as one
// message per neighbour). `mix` is the share of each neighbour's
// difference taken (1/3: uniform ring averaging when the approximation is
// exact).

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/tensor_shape.h"
#include "graph/process_groups.h"
#include "ops/gradient_builder.h"
#include "passes/optimizer_common.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

constexpr char kPowerGossipGroup[] = "power_gossip";

// One parameter's part of the exchange.
struct Exchanged {
  std::string name;
  NodeOut matrix;   // the updated parameter as rows x columns
  int64_t rows = 0, columns = 0;
  Node* q_right = nullptr;  // per-edge power-iteration vectors (columns x 1)
  Node* q_left = nullptr;
};

// Per parameter, one vector for each ring edge: the edge to the right
// neighbour and the edge to the left one.
struct EdgeVectors {
  std::vector<NodeOut> right, left;
};

// One round of the power iteration: this rank's products for each edge and
// what the neighbours sent back (`theirs.right`: the right neighbour's left
// vector; `theirs.left`: the left neighbour's right one).
struct RoundVectors {
  EdgeVectors mine, theirs;
};

class PowerGossipPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& o = context.options;
    graph_ = &graph;
    const int64_t world = context.target.workers;
    const double mix = o.GetFloat("mix");
    RETURN_IF_ERROR(CheckOptions(world, mix));
    RETURN_IF_ERROR(DeclareGroup(world));

    // The trained parameters' updates; optimizer state stays local, per rank.
    std::vector<std::pair<Node*, Node*>> carried = CarriedTrainedParameters(graph);  // (parameter, its Feedback)
    if (carried.empty()) return absl::FailedPreconditionError("power_gossip: runs after an optimizer (sgd, adam)");
    RETURN_IF_ERROR(AddConstants(mix));
    ASSIGN_OR_RETURN(std::vector<Exchanged> values, Matrices(carried));

    // Round 1: a = X q for each edge; the differences D q and their unit p.
    EdgeVectors q;
    for (const Exchanged& v : values) {
      q.right.push_back(NodeOut{v.q_right, 0});
      q.left.push_back(NodeOut{v.q_left, 0});
    }
    ASSIGN_OR_RETURN(RoundVectors a, ProductRound(1, "a", values, q, /*transpose=*/false));
    ASSIGN_OR_RETURN(EdgeVectors p, UnitDifferences(values, a));
    // Round 2: b = X^T p; D^T p from both ends; the rank-1 approximations.
    ASSIGN_OR_RETURN(RoundVectors b, ProductRound(2, "b", values, p, /*transpose=*/true));
    RETURN_IF_ERROR(MoveTowardsNeighbours(values, carried, p, b));
    return RecordPowerGossip(values, mix, log);
  }

 private:
  // Refuses a ring without two distinct neighbours per rank, and a mix
  // outside (0, 0.5], before the graph is touched.
  static absl::Status CheckOptions(int64_t world, double mix) {
    if (world < 3) {
      return absl::FailedPreconditionError(
          "power_gossip: the ring needs at least 3 workers (plan with --workers N, run with --workers N)");
    }
    if (!(mix > 0 && mix <= 0.5)) {
      return absl::InvalidArgumentError(absl::StrCat("power_gossip: mix=", mix, " must be in (0, 0.5]"));
    }
    return absl::OkStatus();
  }

  // Declares the ring's group of all ranks and the attributes every exchange
  // carries; a plan that gossips already (gossip or power_gossip) is refused.
  absl::Status DeclareGroup(int64_t world) {
    ASSIGN_OR_RETURN(std::vector<GroupDecl> groups, DeclaredGroups(*graph_));
    for (const GroupDecl& g : groups) {
      if (g.name == kPowerGossipGroup || g.name == kGossipGroup) {
        return absl::FailedPreconditionError("power_gossip: the plan already gossips (gossip or power_gossip ran)");
      }
    }
    groups.push_back(GroupDecl{kPowerGossipGroup, GroupLayout::kBlocks, static_cast<int>(world)});
    DeclareGroups(*graph_, groups);
    group_ = {{"group", StringAttr(kPowerGossipGroup)}, {"group_size", IntAttr(world)}};
    world_ = world;
    return absl::OkStatus();
  }

  // Adds the constants every parameter's arithmetic shares: -1 (for
  // Difference) and the mix share.
  absl::Status AddConstants(double mix) {
    ASSIGN_OR_RETURN(Node * minus_one, AddOpNode(graph_, "power_gossip/minus_one", "Const", {},
                                                 {{"value", ScalarConstValue(-1)}}));
    ASSIGN_OR_RETURN(Node * share,
                     AddOpNode(graph_, "power_gossip/mix", "Const", {}, {{"value", ScalarConstValue(mix)}}));
    minus_one_ = NodeOut{minus_one, 0};
    share_ = NodeOut{share, 0};
    return absl::OkStatus();
  }

  // Views each trained parameter's update as a rows x columns matrix and adds
  // its two per-edge power-iteration vectors (per-rank state).
  absl::StatusOr<std::vector<Exchanged>> Matrices(const std::vector<std::pair<Node*, Node*>>& carried) {
    std::vector<Exchanged> values;
    for (size_t i = 0; i < carried.size(); ++i) {
      Node* parameter = carried[i].first;
      const Edge* in = carried[i].second->input_edge(0);
      const std::vector<int64_t> dims = parameter->outputs()[0].shape.dims();
      Exchanged v;
      v.name = parameter->name();
      v.rows = dims.empty() ? 1 : dims[0];
      v.columns = TensorShape(dims).KnownElements() / std::max<int64_t>(v.rows, 1);
      ASSIGN_OR_RETURN(Node * matrix, AddOpNode(graph_, v.name + "/power_gossip/matrix", "Reshape",
                                                {NodeOut{in->src, in->src_port}},
                                                {{"shape", IntListAttr({v.rows, v.columns})}}));
      v.matrix = NodeOut{matrix, 0};
      // Both ends of an edge start from the same vector: every rank draws
      // both of its vectors of a parameter from one seed.
      ASSIGN_OR_RETURN(v.q_right, VectorState(v.name + "/power_gossip/q_right", v.columns, 1000 + i));
      ASSIGN_OR_RETURN(v.q_left, VectorState(v.name + "/power_gossip/q_left", v.columns, 1000 + i));
      values.push_back(std::move(v));
    }
    return values;
  }

  // One round: each matrix times its vector for each edge (transposed in
  // round 2), named "<parameter>/power_gossip/<product>_right|_left", then
  // the round's vectors exchanged with both neighbours.
  absl::StatusOr<RoundVectors> ProductRound(int round, const std::string& product,
                                            const std::vector<Exchanged>& values, const EdgeVectors& by,
                                            bool transpose) {
    RoundVectors out;
    for (size_t i = 0; i < values.size(); ++i) {
      const Exchanged& v = values[i];
      ASSIGN_OR_RETURN(NodeOut right, MatMul(absl::StrCat(v.name, "/power_gossip/", product, "_right"), v.matrix,
                                             by.right[i], transpose));
      ASSIGN_OR_RETURN(NodeOut left, MatMul(absl::StrCat(v.name, "/power_gossip/", product, "_left"), v.matrix,
                                            by.left[i], transpose));
      out.mine.right.push_back(right);
      out.mine.left.push_back(left);
    }
    // The right neighbour's left vector and the left neighbour's right one.
    const std::string name = absl::StrCat("power_gossip/round", round);
    ASSIGN_OR_RETURN(out.theirs.right, Exchange(name + "_left", out.mine.left, -1, values, /*rows=*/!transpose));
    ASSIGN_OR_RETURN(out.theirs.left, Exchange(name + "_right", out.mine.right, +1, values, /*rows=*/!transpose));
    return out;
  }

  // p for each edge, the unit of D q: edge (me, right): D = X_me - X_right;
  // edge (left, me): D = X_left - X_me.
  absl::StatusOr<EdgeVectors> UnitDifferences(const std::vector<Exchanged>& values, const RoundVectors& a) {
    EdgeVectors p;
    for (size_t i = 0; i < values.size(); ++i) {
      const std::string& name = values[i].name;
      ASSIGN_OR_RETURN(NodeOut dq_right,
                       Difference(name + "/power_gossip/dq_right", a.mine.right[i], a.theirs.right[i]));
      ASSIGN_OR_RETURN(NodeOut dq_left, Difference(name + "/power_gossip/dq_left", a.theirs.left[i], a.mine.left[i]));
      ASSIGN_OR_RETURN(Node * pr, AddOpNode(graph_, name + "/power_gossip/p_right", "UnitVector", {dq_right}));
      ASSIGN_OR_RETURN(Node * pl, AddOpNode(graph_, name + "/power_gossip/p_left", "UnitVector", {dq_left}));
      p.right.push_back(NodeOut{pr, 0});
      p.left.push_back(NodeOut{pl, 0});
    }
    return p;
  }

  // From round 2's b: D^T p for each edge, which warm-starts the next step's
  // q; moves each parameter by mix times the rank-1 approximated differences
  // and feeds the result back through its Feedback.
  absl::Status MoveTowardsNeighbours(const std::vector<Exchanged>& values,
                                     const std::vector<std::pair<Node*, Node*>>& carried, const EdgeVectors& p,
                                     const RoundVectors& b) {
    for (size_t i = 0; i < values.size(); ++i) {
      const Exchanged& v = values[i];
      ASSIGN_OR_RETURN(NodeOut dtp_right, Difference(v.name + "/power_gossip/dtp_right", b.mine.right[i],
                                                     b.theirs.right[i]));
      ASSIGN_OR_RETURN(NodeOut dtp_left, Difference(v.name + "/power_gossip/dtp_left", b.theirs.left[i],
                                                    b.mine.left[i]));
      RETURN_IF_ERROR(CloseLoop(*graph_, v.q_right, dtp_right));
      RETURN_IF_ERROR(CloseLoop(*graph_, v.q_left, dtp_left));
      // p (D^T p)^T, the rank-1 approximation of each edge's difference.
      ASSIGN_OR_RETURN(Node * approx_right, AddOpNode(graph_, v.name + "/power_gossip/approx_right", "MatMul",
                                                      {p.right[i], dtp_right}, {{"transpose_b", BoolAttr(true)}}));
      ASSIGN_OR_RETURN(Node * approx_left, AddOpNode(graph_, v.name + "/power_gossip/approx_left", "MatMul",
                                                     {p.left[i], dtp_left}, {{"transpose_b", BoolAttr(true)}}));
      // X + mix (D_left - D_right): towards the left neighbour by its
      // difference, away from the right one's (D_right = X_me - X_right).
      ASSIGN_OR_RETURN(NodeOut step, Difference(v.name + "/power_gossip/step", NodeOut{approx_left, 0},
                                                NodeOut{approx_right, 0}));
      ASSIGN_OR_RETURN(Node * scaled, AddOpNode(graph_, v.name + "/power_gossip/scaled", "Mul", {step, share_}));
      ASSIGN_OR_RETURN(Node * moved, AddOpNode(graph_, v.name + "/power_gossip/mixed", "Add",
                                               {v.matrix, NodeOut{scaled, 0}}));
      ASSIGN_OR_RETURN(Node * shaped, AddOpNode(graph_, v.name + "/power_gossip/shaped", "Reshape", {NodeOut{moved, 0}},
                                                {{"shape", IntListAttr(carried[i].first->outputs()[0].shape.dims())}}));
      RETURN_IF_ERROR(graph_->ReplaceInput(carried[i].second, 0, shaped, 0));
    }
    return absl::OkStatus();
  }

  // A push-sum weight that stays 1 (nothing is pushed one way; no Feedback,
  // so it keeps its value), so the trainer's gossip reports (mass,
  // consensus, the averaged model) apply; then the plan's record and the note.
  absl::Status RecordPowerGossip(const std::vector<Exchanged>& values, double mix, PassLog* log) {
    ASSIGN_OR_RETURN(Node * weight, AddState(*graph_, kPushSumWeightState, {1}, /*per_rank=*/true));
    (*weight->mutable_def()->mutable_attr())["init"].mutable_tensor()->mutable_init()->set_kind("ones");
    PlanRecords::Gossip& record = *graph_->mutable_header()->mutable_records()->mutable_gossip();
    record.set_topology("ring (power gossip)");
    record.set_weight_state(weight->name());
    int64_t floats_per_edge = 0, full_floats = 0;
    for (const Exchanged& v : values) {
      floats_per_edge += v.rows + v.columns;
      full_floats += v.rows * v.columns;
    }
    log->notes.push_back(absl::StrCat(values.size(), " values mixed with the two ring neighbours by rank-1 power steps: ",
                                      2 * floats_per_edge, " floats sent per step (two rounds, both neighbours), against ",
                                      full_floats, " for one gossip push; mix ", mix));
    return absl::OkStatus();
  }

  // A per-rank, non-trained column vector drawn from N(0, 1) with `seed`.
  absl::StatusOr<Node*> VectorState(const std::string& name, int64_t length, int64_t seed) {
    ASSIGN_OR_RETURN(Node * q, AddState(*graph_, name, {length, 1}, /*per_rank=*/true));
    auto* init = (*q->mutable_def()->mutable_attr())["init"].mutable_tensor()->mutable_init();
    init->set_kind("normal");
    init->set_mean(0);
    init->set_stddev(1);
    init->set_seed(seed);
    return q;
  }

  absl::StatusOr<NodeOut> MatMul(const std::string& name, NodeOut x, NodeOut v, bool transpose_x) {
    ASSIGN_OR_RETURN(Node * n, AddOpNode(graph_, name, "MatMul", {x, v}, {{"transpose_a", BoolAttr(transpose_x)}}));
    return NodeOut{n, 0};
  }

  // a - b as a + (-1 * b): both ends of an edge evaluate the same
  // expression on the same numbers.
  absl::StatusOr<NodeOut> Difference(const std::string& name, NodeOut a, NodeOut b) {
    ASSIGN_OR_RETURN(Node * negated, AddOpNode(graph_, name + "/negated", "Mul", {b, minus_one_}));
    ASSIGN_OR_RETURN(Node * sum, AddOpNode(graph_, name, "Add", {a, NodeOut{negated, 0}}));
    return NodeOut{sum, 0};
  }

  // Sends the column vectors to the neighbour at `offset` (+1: right, -1:
  // left) as one message and receives the other neighbour's, sliced back.
  // Round 1's vectors have a parameter's rows, round 2's its columns.
  absl::StatusOr<std::vector<NodeOut>> Exchange(const std::string& name, const std::vector<NodeOut>& vectors,
                                                int64_t offset, const std::vector<Exchanged>& values, bool rows) {
    ASSIGN_OR_RETURN(Node * packed, AddOpNode(graph_, name + "/pack", "Concat", vectors, {{"axis", IntAttr(0)}}));
    auto attrs = group_;
    attrs.emplace_back("offsets", IntListAttr({(offset + world_) % world_}));
    ASSIGN_OR_RETURN(Node * received, AddOpNode(graph_, name, "GroupSendRecv", {NodeOut{packed, 0}}, attrs));
    std::vector<NodeOut> out;
    int64_t begin = 0;
    for (const Exchanged& v : values) {
      const int64_t size = rows ? v.rows : v.columns;
      ASSIGN_OR_RETURN(Node * piece, AddOpNode(graph_, absl::StrCat(v.name, "/", name, "/unpacked"), "Slice",
                                               {NodeOut{received, 0}},
                                               {{"axis", IntAttr(0)}, {"begin", IntAttr(begin)}, {"size", IntAttr(size)}}));
      out.push_back(NodeOut{piece, 0});
      begin += size;
    }
    return out;
  }

  Graph* graph_ = nullptr;
  int64_t world_ = 0;
  NodeOut minus_one_;
  NodeOut share_;  // the Const mix
  std::vector<std::pair<std::string, AttrValue>> group_;
};

PassInfo PowerGossipInfo() {
  PassInfo info{"power_gossip",
                "PowerGossip: each rank keeps its own parameters and, after each local step, moves towards its two "
                "ring neighbours by rank-1 power-iteration approximations of the differences (two small messages "
                "per neighbour instead of the model); the sum over the ranks is conserved.",
                {{"mix", OptionType::kFloat, "0.333333",
                  "the share of each neighbour's (approximated) difference taken per step (1/3: uniform averaging "
                  "on the ring when the approximation is exact)"}},
                [] { return std::make_unique<PowerGossipPass>(); }};
  info.needs = {kOptimizerProperty};
  info.provides = {kGradientCommunicationProperty};
  info.precedes = {kPipelinedProperty};
  return info;
}

NEREID_REGISTER_PASS(PowerGossipInfo());

}  // namespace
}  // namespace nereid
