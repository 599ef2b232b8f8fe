// coded: gradient descent on a linear model with the data stored coded
// (coded distributed computing; RLNC against MDS, docs/CODED.md). Rank 0 is
// the master: it holds the parameters, the loss and the optimizer. Ranks
// 1..n are coded workers: worker i holds coded partition i of the training
// data, a mix (coded/linear_code.h) of some of the k data partitions,
// built once before training (runtime/coded_partitions.h). Each step has two
// rounds, the two matrix products of the linear model's gradient:
//
//   Z = X W     rows of X cut into k partitions X_j; worker i computes
//               (sum_j G_ij X_j) W; the master decodes every X_j W from the
//               first results that determine them, stacks them: Z.
//   master      logits = Z (+ bias ...), the loss, dZ = d loss / d Z (the
//               model's own nodes and their gradients, unchanged)
//   dW = X^T dZ columns of X cut into k partitions X^(j); worker i computes
//               (sum_j G_ij X^(j))^T dZ; the master decodes every X^(j)T dZ,
//               stacks them: dW, which the optimizer applies.
//
// W goes to every worker at the start of the step, dZ in the middle (Send /
// Recv ends written with their peers). Workers gone in a round
// (departures=..., coded/departure_plan.h) send nothing and the master
// does not wait for them; a round whose present workers cannot decode is an
// error naming them.
//
// The model must have the coded form: one trained parameter W read by a
// MatMul X W whose X is the fed images (through Flatten / Reshape /
// Identity only), with W's gradient the MatMul X^T dZ autodiff made, and
// nothing else reading X. Anything else is refused, naming what differs.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "coded/departure_plan.h"
#include "coded/linear_code.h"
#include "core/status_macros.h"
#include "graph/placement.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

constexpr char kNotCoded[] = "coded: the model's gradient is not of the coded form (a linear model: logits from "
                             "MatMul(images, W)): ";

// Channels of the four transfers of a step (the plan's only point-to-point
// ends: coded plans take no other communication pass).
enum Channel : int64_t { kWeightChannel = 0, kLogitGradChannel = 1, kForwardChannel = 2, kBackwardChannel = 3 };

bool IsShapeOnly(const Node& n) {
  return n.op() == "Flatten" || n.op() == "Reshape" || n.op() == "Identity";
}

// The fed images a node reads through shape-only ops, or null.
Node* ImagesBehind(Node* n, std::vector<Node*>* chain) {
  while (IsShapeOnly(*n) && n->num_inputs() == 1) {
    chain->push_back(n);
    n = n->input_edge(0)->src;
  }
  if (n->op() == "Input" && NodeAttrString(*n, "feed") == "images") return n;
  return nullptr;
}

struct CodedForm {
  Node* images = nullptr;
  std::vector<Node*> chain;  // images -> ... -> X (shape-only), X last
  Node* x = nullptr;         // [rows, features]
  Node* weight = nullptr;    // W [features, classes]
  Node* forward = nullptr;   // MatMul(X, W)
  Node* backward = nullptr;  // MatMul(X, dZ, transpose_a): W's gradient
};

absl::StatusOr<CodedForm> FindCodedForm(Graph& graph) {
  CodedForm form;
  for (Node* n : graph.nodes()) {
    if (n->op() != "MatMul" || n->num_inputs() != 2) continue;
    std::vector<Node*> chain;
    Node* images = ImagesBehind(n->input_edge(0)->src, &chain);
    Node* w = n->input_edge(1)->src;
    if (images == nullptr || w->op() != "Parameter" || NodeAttrBool(*n, "transpose_a", false) ||
        NodeAttrBool(*n, "transpose_b", false)) {
      continue;
    }
    if (form.forward != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(kNotCoded, "both '", form.forward->name(), "' and '", n->name(),
                                                        "' multiply the images by a parameter"));
    }
    form.forward = n;
    form.images = images;
    form.chain = chain;
    form.x = chain.empty() ? images : chain.front();
    form.weight = w;
  }
  if (form.forward == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(kNotCoded, "no MatMul reads the fed images and a parameter"));
  }
  if (form.x->outputs()[0].shape.rank() != 2) {
    return absl::FailedPreconditionError(absl::StrCat(kNotCoded, "'", form.x->name(), "' is ",
                                                      form.x->outputs()[0].shape.ToString(), ", not [rows, features]"));
  }
  // W's gradient: X^T dZ, the MatMul autodiff made for the forward MatMul.
  for (Node* n : graph.nodes()) {
    if (n->op() == "Gradient" && NodeAttrString(*n, "parameter") == form.weight->name()) {
      Node* g = n->input_edge(0)->src;
      if (g->op() == "MatMul" && g->input_edge(0)->src == form.x && NodeAttrBool(*g, "transpose_a", false) &&
          !NodeAttrBool(*g, "transpose_b", false)) {
        form.backward = g;
      } else {
        return absl::FailedPreconditionError(absl::StrCat(kNotCoded, "the gradient of '", form.weight->name(),
                                                          "' is '", g->name(), "' (", g->op(), "), not X^T dZ"));
      }
    }
  }
  if (form.backward == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("coded: runs after autodiff and an optimizer ('", form.weight->name(), "' has no gradient)"));
  }
  // Nothing else may read the data: it lives on the workers, coded.
  for (const Edge* e : form.x->out_edges()) {
    if (e->dst != form.forward && e->dst != form.backward) {
      return absl::FailedPreconditionError(absl::StrCat(kNotCoded, "'", e->dst->name(), "' (", e->dst->op(),
                                                        ") reads the images too"));
    }
  }
  for (Node* n : form.chain) {
    if (n != form.x && n->out_edges().size() != 1) {
      return absl::FailedPreconditionError(absl::StrCat(kNotCoded, "'", n->name(), "' is read by more than one node"));
    }
  }
  if (form.images->out_edges().size() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(kNotCoded, "the images are read by more than one node"));
  }
  for (const Edge* e : form.weight->out_edges()) {
    if (e->dst != form.forward && !e->IsControl() && e->dst->op() == "MatMul") {
      return absl::FailedPreconditionError(
          absl::StrCat(kNotCoded, "'", e->dst->name(), "' reads '", form.weight->name(), "' too"));
    }
  }
  return form;
}

// What the rewrite's helpers share: the code, the model's coded form and its
// sizes, where the master runs, and the master's nodes its sends and decodes read.
struct CodedRewrite {
  CodeSpec spec;
  std::string departures;
  CodedForm form;
  int64_t features = 0;      // X's columns, W's rows
  int64_t classes = 0;       // W's columns
  int64_t column_block = 0;  // the columns of one partition X^(j)
  Placement master;          // rank 0
  Node* labels = nullptr;    // the fed labels, the forward decode's input
  NodeOut d_logits;          // dZ, what the backward product read
};

// The code from the options, checked against the plan's world: n coded
// workers and the master (rlnc's degree defaults to min(2, k)).
absl::StatusOr<CodeSpec> ParseCodeSpec(const PassOptions& o, int64_t world) {
  CodeSpec spec;
  ASSIGN_OR_RETURN(spec.scheme, ParseCodeScheme(o.GetString("scheme")));
  spec.n = static_cast<int>(o.GetInt("n") > 0 ? o.GetInt("n") : world - 1);
  spec.k = static_cast<int>(o.GetInt("k"));
  spec.degree = static_cast<int>(o.GetInt("degree"));
  spec.seed = static_cast<uint64_t>(o.GetInt("seed"));
  if (spec.n < 1 || world != spec.n + 1) {
    return absl::FailedPreconditionError(absl::StrCat("coded: n=", spec.n, " coded workers and the master need ",
                                                      spec.n + 1, " ranks (--workers ", spec.n + 1,
                                                      "); the plan has ", world));
  }
  if (spec.scheme == CodeScheme::kRlnc && spec.degree == 0) spec.degree = std::min(2, spec.k);
  return spec;
}

// Refuses a model placed already: coded decides every node's rank itself.
absl::Status CheckNotPlaced(Graph& graph) {
  for (const Node* n : graph.nodes()) {
    if (!PlacementOf(*n).everywhere()) return absl::FailedPreconditionError("coded: the model is placed already");
  }
  return absl::OkStatus();
}

// Places every node of the model on the master and returns the fed labels,
// which the forward decode reads.
absl::StatusOr<Node*> PlaceOnMaster(Graph& graph, const Placement& master) {
  for (Node* n : graph.nodes()) SetPlacement(*n, master);
  Node* labels = nullptr;
  for (Node* n : graph.nodes()) {
    if (n->op() == "Input" && NodeAttrString(*n, "feed") == "labels") labels = n;
  }
  if (labels == nullptr) return absl::FailedPreconditionError("coded: the model has no fed labels");
  return labels;
}

// The attributes of a CodedSend or CodedGather on `channel`: the code's
// parameters, from which its kernel builds the code.
std::vector<std::pair<std::string, AttrValue>> CodeAttrs(const CodedRewrite& rewrite, int64_t channel) {
  const CodeSpec& spec = rewrite.spec;
  return {{"scheme", StringAttr(CodeSchemeName(spec.scheme))},
          {"n", IntAttr(spec.n)},
          {"k", IntAttr(spec.k)},
          {"degree", IntAttr(spec.degree)},
          {"seed", IntAttr(static_cast<int64_t>(spec.seed))},
          {"departures", StringAttr(rewrite.departures)},
          {"channel", IntAttr(channel)}};
}

// The attributes of a Send or Recv end: its peer and channel (training only).
std::vector<std::pair<std::string, AttrValue>> EndAttrs(int64_t peer, int64_t channel) {
  return {{"peer", IntAttr(peer)}, {"channel", IntAttr(channel)}, {"eval", BoolAttr(false)}};
}

// Adds coded worker `w` (rank w + 1): the master's two sends to it, and its
// coded rows times W and coded columns' transpose times dZ, sent back coded.
absl::Status AddCodedWorker(Graph& graph, const CodedRewrite& rewrite, int w) {
  const int64_t rank = w + 1;
  Placement at;
  at.worker = static_cast<int>(rank);
  const std::string base = absl::StrCat("coded/worker", w);
  auto placed = [&](absl::StatusOr<Node*> node) -> absl::StatusOr<Node*> {
    if (node.ok()) SetPlacement(**node, at);
    return node;
  };
  // The master's two sends to this worker.
  ASSIGN_OR_RETURN(Node * send_w, AddOpNode(&graph, base + "/weight/send", "Send", {{rewrite.form.weight, 0}},
                                            EndAttrs(rank, kWeightChannel)));
  SetPlacement(*send_w, rewrite.master);
  ASSIGN_OR_RETURN(Node * send_dz, AddOpNode(&graph, base + "/logit_grad/send", "Send", {rewrite.d_logits},
                                             EndAttrs(rank, kLogitGradChannel)));
  SetPlacement(*send_dz, rewrite.master);
  // The worker: its coded rows times W, its coded columns' transpose times dZ.
  std::vector<std::pair<std::string, AttrValue>> recv_w = EndAttrs(0, kWeightChannel);
  recv_w.emplace_back("shape", ShapeAttr({rewrite.features, rewrite.classes}));
  ASSIGN_OR_RETURN(Node * weight, placed(AddOpNode(&graph, base + "/weight", "Recv", {}, recv_w)));
  ASSIGN_OR_RETURN(Node * rows, placed(AddOpNode(&graph, base + "/rows", "Input", {},
                                                 {{"shape", ShapeAttr({-1, rewrite.features})},
                                                  {"feed", StringAttr("coded_rows")}})));
  ASSIGN_OR_RETURN(Node * z, placed(AddOpNode(&graph, base + "/z", "MatMul", {{rows, 0}, {weight, 0}})));
  std::vector<std::pair<std::string, AttrValue>> send_attrs = CodeAttrs(rewrite, kForwardChannel);
  send_attrs.emplace_back("peer", IntAttr(0));
  send_attrs.emplace_back("worker", IntAttr(w));
  RETURN_IF_ERROR(placed(AddOpNode(&graph, base + "/z/send", "CodedSend", {{z, 0}}, send_attrs)).status());
  std::vector<std::pair<std::string, AttrValue>> recv_dz = EndAttrs(0, kLogitGradChannel);
  recv_dz.emplace_back("shape", ShapeAttr({-1, rewrite.classes}));
  ASSIGN_OR_RETURN(Node * dz, placed(AddOpNode(&graph, base + "/logit_grad", "Recv", {}, recv_dz)));
  ASSIGN_OR_RETURN(Node * cols, placed(AddOpNode(&graph, base + "/columns", "Input", {},
                                                 {{"shape", ShapeAttr({-1, rewrite.column_block})},
                                                  {"feed", StringAttr("coded_columns")}})));
  ASSIGN_OR_RETURN(Node * g, placed(AddOpNode(&graph, base + "/weight_grad", "MatMul", {{cols, 0}, {dz, 0}},
                                              {{"transpose_a", BoolAttr(true)}})));
  send_attrs = CodeAttrs(rewrite, kBackwardChannel);
  send_attrs.emplace_back("peer", IntAttr(0));
  send_attrs.emplace_back("worker", IntAttr(w));
  RETURN_IF_ERROR(placed(AddOpNode(&graph, base + "/weight_grad/send", "CodedSend", {{g, 0}}, send_attrs)).status());
  return absl::OkStatus();
}

// Adds every coded worker in rank order; returns their ranks, the peers the
// master's decodes wait on.
absl::StatusOr<std::vector<int64_t>> AddCodedWorkers(Graph& graph, const CodedRewrite& rewrite) {
  std::vector<int64_t> peers;
  for (int w = 0; w < rewrite.spec.n; ++w) {
    peers.push_back(w + 1);
    RETURN_IF_ERROR(AddCodedWorker(graph, rewrite, w));
  }
  return peers;
}

// The master's two decodes replace the two products; the products and the
// data's nodes (which now live on the workers, coded) are removed.
absl::Status DecodeOnMaster(Graph& graph, const CodedRewrite& rewrite, const std::vector<int64_t>& peers) {
  const CodedForm& form = rewrite.form;
  std::vector<std::pair<std::string, AttrValue>> gather = CodeAttrs(rewrite, kForwardChannel);
  gather.emplace_back("peers", IntListAttr(peers));
  gather.emplace_back("cols", IntAttr(rewrite.classes));
  ASSIGN_OR_RETURN(Node * z, AddOpNode(&graph, "coded/z", "CodedGather", {{rewrite.labels, 0}}, gather));
  SetPlacement(*z, rewrite.master);
  gather = CodeAttrs(rewrite, kBackwardChannel);
  gather.emplace_back("peers", IntListAttr(peers));
  gather.emplace_back("cols", IntAttr(rewrite.classes));
  ASSIGN_OR_RETURN(Node * dw, AddOpNode(&graph, "coded/weight_grad", "CodedGather", {{form.weight, 0}}, gather));
  SetPlacement(*dw, rewrite.master);
  RETURN_IF_ERROR(graph.RedirectOutput(form.forward, 0, z, 0));
  RETURN_IF_ERROR(graph.RedirectOutput(form.backward, 0, dw, 0));
  graph.RemoveNode(form.backward);
  graph.RemoveNode(form.forward);
  for (Node* n : form.chain) graph.RemoveNode(n);
  graph.RemoveNode(form.images);
  return absl::OkStatus();
}

// Writes the plan's coded record (the runtime builds the code and the coded
// partitions from it) and logs the code and what building it moves.
void RecordCoded(Graph& graph, const CodedRewrite& rewrite, const LinearCode& code, const std::string& forward_name,
                 PassLog* log) {
  const CodeSpec& spec = rewrite.spec;
  const std::string& departures = rewrite.departures;
  PlanRecords::Coded& record = *graph.mutable_header()->mutable_records()->mutable_coded();
  record.set_scheme(CodeSchemeName(spec.scheme));
  record.set_n(spec.n);
  record.set_k(spec.k);
  record.set_degree(spec.degree);
  record.set_seed(spec.seed);
  record.set_departures(departures);
  log->notes.push_back(absl::StrCat(
      CodeSchemeName(spec.scheme), " code: ", spec.n, " coded workers (ranks 1-", spec.n, ") over ", spec.k,
      " data partitions", spec.scheme == CodeScheme::kRlnc ? absl::StrCat(", degree ", spec.degree) : "",
      "; rank 0 decodes ", forward_name, " and ", rewrite.form.weight->name(), "'s gradient; building the coded "
      "partitions moves ", code.PartitionsMoved(), " partitions",
      departures.empty() ? "" : absl::StrCat("; departures ", departures)));
}

class CodedPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& o = context.options;
    CodedRewrite rewrite;
    ASSIGN_OR_RETURN(rewrite.spec, ParseCodeSpec(o, context.target.workers));
    absl::StatusOr<LinearCode> code = LinearCode::Make(rewrite.spec);
    if (!code.ok()) return absl::InvalidArgumentError(absl::StrCat("coded: ", code.status().message()));
    rewrite.departures = o.GetString("departures");
    RETURN_IF_ERROR(DeparturePlan::Parse(rewrite.departures, rewrite.spec.n, rewrite.spec.seed).status());
    RETURN_IF_ERROR(CheckNotPlaced(graph));
    ASSIGN_OR_RETURN(rewrite.form, FindCodedForm(graph));
    rewrite.features = rewrite.form.x->outputs()[0].shape.dim(1);
    rewrite.classes = rewrite.form.weight->outputs()[0].shape.dim(1);
    rewrite.column_block = (rewrite.features + rewrite.spec.k - 1) / rewrite.spec.k;

    // The master (rank 0) runs the model's nodes but the data's.
    rewrite.master.worker = 0;
    ASSIGN_OR_RETURN(rewrite.labels, PlaceOnMaster(graph, rewrite.master));
    const Edge* d_logits = rewrite.form.backward->input_edge(1);
    rewrite.d_logits = NodeOut{d_logits->src, d_logits->src_port};
    ASSIGN_OR_RETURN(std::vector<int64_t> peers, AddCodedWorkers(graph, rewrite));
    const std::string forward_name = rewrite.form.forward->name();
    RETURN_IF_ERROR(DecodeOnMaster(graph, rewrite, peers));
    RecordCoded(graph, rewrite, *code, forward_name, log);
    return absl::OkStatus();
  }
};

PassInfo CodedInfo() {
  PassInfo info{"coded",
                "Coded computing for a linear model: rank 0 decodes the gradient's two matrix products from the "
                "coded workers (ranks 1..n) that answer, each holding a coded mix of the data partitions.",
                {{"scheme", OptionType::kString, "rlnc", "rlnc, mds, replication or none (coded/linear_code.h)"},
                 {"n", OptionType::kInt, "0", "coded workers (0: every rank but the master)"},
                 {"k", OptionType::kInt, "2", "data partitions"},
                 {"degree", OptionType::kInt, "0", "rlnc: partitions each coded partition mixes (0: min(2, k))"},
                 {"seed", OptionType::kInt, "1", "the generator's and the random departures' seed"},
                 {"departures", OptionType::kString, "",
                  "workers gone per round: random:P, or ROUND:W+W;ROUND-ROUND:W (0-based workers)"}},
                [] { return std::make_unique<CodedPass>(); }};
  info.needs = {kOptimizerProperty};
  info.provides = {kGradientCommunicationProperty};
  info.precedes = {kPipelinedProperty};
  return info;
}

NEREID_REGISTER_PASS(CodedInfo());

}  // namespace
}  // namespace nereid
