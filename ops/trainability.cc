#include "ops/trainability.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/errors.h"
#include "ops/op_registry.h"

namespace nereid {
namespace {

// Per-example dims of the named datasets whose images have a fixed shape.
std::vector<int64_t> ExampleDims(const std::string& dataset) {
  if (dataset == "fashion-mnist") return {1, 28, 28};
  if (dataset == "cifar10") return {3, 32, 32};
  return {};  // synthetic follows the model; npy:DIR is the user's
}

std::string Describe(const Node& n) {
  return absl::StrCat(n.name(), " ", n.outputs()[0].shape.ToString(), " ", DataTypeName(n.outputs()[0].dtype));
}

absl::Status GraphFix(const Graph& graph, const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(graph.source_path(), ": not trainable: ", what));
}

}  // namespace

absl::StatusOr<TrainabilityReport> CheckTrainable(const Graph& graph, const std::string& dataset_override) {
  TrainabilityReport report;
  const std::string loss_name = GraphAttr(graph, "loss");
  if (loss_name.empty()) {
    return GraphFix(graph, "no graph attribute 'loss'; add attr { key: \"loss\" value { s: \"NODE\" } } naming the "
                           "node that computes the scalar loss");
  }
  const Node* loss = graph.FindNode(loss_name);
  if (loss == nullptr) return GraphFix(graph, absl::StrCat("graph attribute 'loss' names '", loss_name, "', which does not exist"));
  const ShapeAndType& out = loss->outputs()[0];
  if (!out.shape.IsFullyDefined() || out.shape.KnownElements() != 1 || (out.dtype != DT_FLOAT && out.dtype != DT_DOUBLE)) {
    return NodeError(graph, *loss, absl::StrCat("is the loss but its output is ", out.shape.ToString(), " ",
                                                DataTypeName(out.dtype), "; the loss must be one float (a loss op such as "
                                                "SoftmaxCrossEntropy averages over the batch)"),
                     absl::StatusCode::kFailedPrecondition);
  }
  report.loss = loss_name;
  const std::string logits_name = GraphAttr(graph, "logits");
  if (const Node* logits = logits_name.empty() ? nullptr : graph.FindNode(logits_name); logits != nullptr) {
    const TensorShape& shape = logits->outputs()[0].shape;
    if (shape.rank() < 2) {
      return NodeError(graph, *logits, absl::StrCat("is the logits but has shape ", shape.ToString(),
                                                    "; evaluation needs [batch, classes] (or [batch, positions, "
                                                    "classes] for a sequence)"),
                       absl::StatusCode::kFailedPrecondition);
    }
    // The classes the graph declares are the ones its logits score.
    const int64_t declared = GraphAttrInt(graph, "num_classes", -1);
    const int64_t scored = shape.dim(shape.rank() - 1);
    if (declared >= 0 && scored >= 0 && declared != scored) {
      return NodeError(graph, *logits, absl::StrCat("is the logits, scoring ", scored,
                                                    " classes, but the graph attribute num_classes is ", declared,
                                                    ": make them agree"),
                       absl::StatusCode::kFailedPrecondition);
    }
  }
  const std::string dataset = dataset_override.empty() ? GraphAttr(graph, "dataset") : dataset_override;
  const std::vector<int64_t> example = ExampleDims(dataset);
  for (const Node* n : graph.nodes()) {
    if (n->op() != "Input") continue;
    const std::string feed = NodeAttrString(*n, "feed", n->name());
    const TensorShape& shape = n->outputs()[0].shape;
    if (feed == "labels") {
      if (n->outputs()[0].dtype != DT_INT32 || shape.rank() < 1) {
        return NodeError(graph, *n, absl::StrCat("is fed the labels, which are int32 [-1] (or [-1, T] for one per "
                                                 "position); it is ", Describe(*n)),
                         absl::StatusCode::kFailedPrecondition);
      }
      report.labels = Describe(*n);
    } else if (feed == "images") {
      const DataType dtype = n->outputs()[0].dtype;
      if ((dtype != DT_FLOAT && dtype != DT_INT32 && dtype != DT_INT64) || shape.rank() < 2) {
        return NodeError(graph, *n, absl::StrCat("is fed the images, float32 (or int32 / int64 ids) [-1, ...]; it is ",
                                                 Describe(*n)),
                         absl::StatusCode::kFailedPrecondition);
      }
      if (!example.empty()) {
        int64_t want = 1, have = 1;
        for (int64_t d : example) want *= d;
        for (int i = 1; i < shape.rank(); ++i) have *= std::max<int64_t>(shape.dim(i), 1);
        if (want != have) {
          return NodeError(graph, *n, absl::StrCat("is fed ", dataset, " images of [", absl::StrJoin(example, ","),
                                                   "] (", want, " values each) but holds ", have, " per example; give it shape [-1,",
                                                   absl::StrJoin(example, ","), "] or [-1,", want, "]"),
                           absl::StatusCode::kFailedPrecondition);
        }
      }
      report.images = Describe(*n);
    } else {
      return NodeError(graph, *n, absl::StrCat("is fed '", feed, "', which no dataset provides; add attr { key: \"feed\" "
                                               "value { s: \"images\" } } (or \"labels\")"),
                       absl::StatusCode::kFailedPrecondition);
    }
  }
  if (report.images.empty() || report.labels.empty()) {
    return GraphFix(graph, absl::StrCat("no Input is fed the ", report.images.empty() ? "images" : "labels",
                                        "; add an Input with attr { key: \"feed\" value { s: \"",
                                        report.images.empty() ? "images" : "labels", "\" } }"));
  }
  return report;
}

}  // namespace nereid
