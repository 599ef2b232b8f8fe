// compress(method=..., key=value...): gradient compression around the
// data-parallel communication. It goes after data_parallel (or gossip).
//
// fp16 / bf16 (Pipe-SGD's truncation): the values are summable, so every
// AllReduce bucket is marked with the wire format; the communicator sends
// 16-bit values and adds them in float32 (comm/wire_format.h). After gossip
// the same wire goes on its pushes (GroupSendRecv keeps each sender's
// rounding at home, so push-sum's mass is conserved). powersgd after gossip
// turns each push into a LowRankPush (compress/low_rank_push.h): rank-r
// differences from a per-edge reference, the sender keeping what the code
// leaves out. Other codecs are refused on pushes.
//
// Every other method is a gradient codec (compress/): the selected
// gradients leave their AllReduce bucket for one CompressedAllReduce node per
// bucket, with a codec per gradient, whose codes go in one collective per
// round: all-gathered (QSGD, TernGrad, top-k, 1-bit) or allreduced
// (PowerSGD, GradiVeQ: linear codes); the plan says which. One collective
// per bucket, not per layer: on a real link each small collective costs the
// ring's latency. The codec's state (error-feedback residuals,
// momentum, bases) becomes zero-started state Parameters carried through the
// training loop, so checkpoints keep it; residuals are marked per rank.
//
// Selection: tensors with fewer than min_elements values, biases (rank-1
// tensors) unless skip_biases=false, and tensors the codec is not meant for
// (GradiVeQ: anything but conv filters) stay in the dense buckets:
// compressing them saves little and costs accuracy.
//
// Issue order: the remaining dense buckets and the compressed gradients are
// renumbered by when their last input becomes ready in the backward pass, so
// communication keeps overlapping the rest of it.

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compress/codec.h"
#include "compress/low_rank_push.h"
#include "core/status_macros.h"
#include "core/tensor_shape.h"
#include "ops/collective_schedule.h"
#include "ops/gradient_builder.h"
#include "ops/topo_order.h"
#include "passes/optimizer_common.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

// Whether `n` is one of gossip's pushes (its collectives on the gossip group).
bool IsGossipPush(const Node& n) {
  return (n.op() == "GroupSendRecv" || n.op() == "GroupAllReduce") && NodeAttrString(n, "group", "") == kGossipGroup;
}

// Marks every AllReduce bucket and every gossip push with a 16-bit wire format.
absl::Status TruncateOnTheWire(Graph& graph, const std::string& method, PassLog* log) {
  const std::string wire = method == "fp16" ? "float16" : "bfloat16";
  int buckets = 0, pushes = 0;
  int64_t elements = 0;
  for (Node* n : graph.nodes()) {
    if (n->op() != "AllReduce" && !IsGossipPush(*n)) continue;
    (*n->mutable_def()->mutable_attr())["wire"] = StringAttr(wire);
    ++(n->op() == "AllReduce" ? buckets : pushes);
    for (int i = 0; i < n->num_inputs(); ++i) {
      const Edge* e = n->input_edge(i);
      elements += e->src->outputs()[e->src_port].shape.KnownElements();
    }
  }
  const std::string what = buckets > 0 ? absl::StrCat(buckets, " allreduce bucket", buckets == 1 ? "" : "s")
                                        : absl::StrCat(pushes, " gossip push", pushes == 1 ? "" : "es");
  log->notes.push_back(absl::StrCat(method, " on the wire for ", what, ": ", elements * 4, " -> ", elements * 2,
                                    " bytes per step (2x), sums in float32",
                                    pushes > 0 ? "; each sender keeps what rounding takes off (mass conserved)" : ""));
  return absl::OkStatus();
}

std::string Kib(int64_t bytes) { return absl::StrFormat("%.1f KiB", bytes / 1024.0); }

// The dims of each value a gossip push carries: the value's own, or, for a
// bucket (Concat of flattened values), each flattened value's source.
std::vector<std::vector<int64_t>> PushedDims(const Node& push) {
  const Edge* in = push.input_edge(0);
  const bool bucket = in->src->op() == "Concat" && absl::EndsWith(in->src->name(), "/pack");
  if (!bucket) return {in->src->outputs()[in->src_port].shape.dims()};
  std::vector<std::vector<int64_t>> dims;
  for (int i = 0; i < in->src->num_inputs(); ++i) {
    const Edge* flat = in->src->input_edge(i);
    const Edge* value = flat->src->op() == "Reshape" ? flat->src->input_edge(0) : flat;
    dims.push_back(value->src->outputs()[value->src_port].shape.dims());
  }
  return dims;
}

// compress(powersgd) after gossip: every push becomes a LowRankPush whose
// matrices (dims[0] x the rest, min_elements values or more, where rank r
// saves bytes) travel as rank-r codes, the rest exactly; its
// references, warm starts and started flags are per-rank state.
absl::Status LowRankPushes(Graph& graph, const PassOptions& o,
                           const std::vector<std::pair<std::string, std::string>>& extra, PassLog* log) {
  int64_t rank = 2;
  float consensus = 0.05f;  // CHOCO-gossip's step: larger ones drift apart (docs/SGP.md)
  for (const auto& [key, value] : extra) {
    const bool ok = key == "rank"        ? absl::SimpleAtoi(value, &rank) && rank >= 1
                    : key == "consensus" ? absl::SimpleAtof(value, &consensus) && consensus > 0 && consensus <= 1
                                         : false;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("compress: powersgd on gossip's pushes takes rank=R (R >= 1) "
                                                     "and consensus=C (0 < C <= 1); got ", key, "=", value));
    }
  }
  std::vector<Node*> pushes;
  for (Node* n : graph.nodes()) {
    if (!IsGossipPush(*n)) continue;
    if (n->op() == "GroupAllReduce") {
      return absl::InvalidArgumentError(
          "compress: gossip on the complete graph is an allreduce; low-rank codes go on data_parallel's "
          "(compress(method=powersgd) after data_parallel)");
    }
    pushes.push_back(n);
  }
  int64_t dense = 0, coded = 0, matrices = 0;
  for (Node* push : pushes) {
    // A 1-D value (a bias, the weight) is an n x 1 matrix: always exact.
    std::vector<PushSegment> segments;
    for (const std::vector<int64_t>& d : PushedDims(*push)) {
      const int64_t elements = TensorShape(d).KnownElements();
      const int64_t rows = d.size() >= 2 ? d[0] : elements;
      const int64_t cols = elements / std::max<int64_t>(rows, 1);
      int64_t r = std::min(rank, std::min(rows, cols) - 1);
      if (elements < o.GetInt("min_elements") || r < 1 || (rows + cols) * r >= elements) r = 0;
      segments.push_back({rows, cols, r});
    }
    ASSIGN_OR_RETURN(LowRankPush code, LowRankPush::Create(segments));
    dense += code.elements() * 4;
    coded += code.MessageFloats(/*started=*/true) * 4;
    if (code.basis_floats() == 0) continue;  // nothing to code: the push stays exact
    std::vector<int64_t> triples;
    for (const PushSegment& g : segments) {
      triples.insert(triples.end(), {g.rows, g.cols, g.rank});
      matrices += g.rank > 0;
    }
    const int64_t slots = push->def().attr().at("offsets").list().i_size();
    const std::vector<std::pair<std::string, std::vector<int64_t>>> state_specs = {
        {"sent", {slots, code.elements()}}, {"received", {slots, code.elements()}},
        {"bases", {slots, code.basis_floats()}}, {"started", {2, slots}}};
    const Edge* in = push->input_edge(0);
    std::vector<NodeOut> inputs = {NodeOut{in->src, in->src_port}};
    std::vector<Node*> state;
    for (const auto& [suffix, dims] : state_specs) {
      ASSIGN_OR_RETURN(Node * p, AddState(graph, absl::StrCat(push->name(), "/low_rank/", suffix), dims,
                                          /*per_rank=*/true));
      state.push_back(p);
      inputs.push_back(NodeOut{p, 0});
    }
    ASSIGN_OR_RETURN(Node * coded_push,
                     AddOpNode(&graph, absl::StrCat(push->name(), "/low_rank"), "LowRankPush", inputs,
                               {{"group", push->def().attr().at("group")},
                                {"group_size", push->def().attr().at("group_size")},
                                {"offsets", push->def().attr().at("offsets")},
                                {"segments", IntListAttr(triples)},
                                {"consensus", FloatAttr(consensus)},
                                {"seed", IntAttr(o.GetInt("seed"))}}));
    for (size_t i = 0; i < state.size(); ++i) {
      RETURN_IF_ERROR(CloseLoop(graph, state[i], NodeOut{coded_push, static_cast<int>(i + 1)}));
    }
    std::vector<std::pair<Node*, int>> readers;
    for (const Edge* e : push->out_edges()) {
      if (!e->IsControl()) readers.emplace_back(e->dst, e->dst_port);
    }
    for (auto& [reader, port] : readers) RETURN_IF_ERROR(graph.ReplaceInput(reader, port, coded_push, 0));
    graph.RemoveNode(push);
  }
  if (matrices == 0) {
    return absl::FailedPreconditionError(absl::StrCat("compress: no pushed matrix has min_elements=",
                                                      o.GetInt("min_elements"), " values or more at a rank that "
                                                      "saves bytes; nothing to compress"));
  }
  log->notes.push_back(absl::StrCat("powersgd (rank ", rank, ") on ", pushes.size(), " gossip push",
                                    pushes.size() == 1 ? "" : "es", ", ", matrices, " matrices as rank-r codes: ",
                                    Kib(dense), " -> ", Kib(coded), " per push (",
                                    absl::StrFormat("%.1fx", static_cast<double>(dense) / coded),
                                    "; each edge's first push exact); each sender keeps what its code leaves out "
                                    "(mass conserved)"));
  return absl::OkStatus();
}

// One collective of the rewritten plan, before its bucket number is known.
struct Collective {
  size_t ready = 0;                  // topological position of its last input
  std::vector<NodeOut> values;       // dense bucket: its inputs
  std::vector<Node*> gradients;      // the Gradient nodes it feeds, in input order
  Node* node = nullptr;
};

// "data_parallel/bucket_3" -> "bucket_3".
std::string BaseName(const std::string& name) { return name.substr(name.rfind('/') + 1); }

// The codec options `extra` sets for `method`; an error names an unknown method or option.
absl::StatusOr<CodecOptions> CodecOptionsFor(const std::string& method,
                                             const std::vector<std::pair<std::string, std::string>>& extra) {
  const CodecRegistry::Entry* entry = CodecRegistry::Global().Find(method);
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("compress: unknown method '", method, "'; methods: fp16, bf16, ",
                                                   absl::StrJoin(CodecRegistry::Global().Names(), ", ")));
  }
  std::map<std::string, std::string> codec_values;
  for (const auto& [key, value] : extra) {
    bool known = false;
    for (const auto& option : entry->options) known |= option.first == key;
    if (!known) {
      std::vector<std::string> keys;
      for (const auto& option : entry->options) keys.push_back(option.first);
      return absl::InvalidArgumentError(absl::StrCat("compress: ", method, " has no option '", key, "'",
                                                     keys.empty() ? "" : "; its options: ", absl::StrJoin(keys, ", ")));
    }
    codec_values[key] = value;
  }
  return CodecOptions(codec_values);
}

// The rewritten plan's collectives and the payload they send, added up bucket by bucket.
struct CodecRewrite {
  std::vector<Collective> plan;
  int64_t dense_bytes = 0, compressed_dense_bytes = 0, payload_bytes = 0;
  bool bound = false;  // some payload is a variable-length code's bound
  std::vector<std::string> table;  // a line per compressed gradient
  int layer = 0;                   // codecs so far: the next codec's layer
  int compressed_nodes = 0;
};

// The payload table's line for one compressed gradient.
std::string PayloadRow(const std::string& gradient, int64_t elements, const GradientCodec& codec, int64_t payload) {
  return absl::StrFormat("  %-28s %10s -> %2s%8s  %2s%4.1fx  %s", gradient, Kib(elements * 4),
                         codec.variable_length() ? "<=" : "", Kib(payload), codec.variable_length() ? ">=" : "",
                         static_cast<double>(elements * 4) / payload,
                         codec.collective() == CodecCollective::kAllReduce ? "allreduce" : "allgather");
}

// Numbers the collectives by readiness in the backward pass and points each gradient at its collective.
absl::Status IssueByReadiness(Graph& graph, std::vector<Collective>& plan) {
  // Issue order: by readiness in the backward pass, stable for ties.
  std::stable_sort(plan.begin(), plan.end(), [](const Collective& a, const Collective& b) { return a.ready < b.ready; });
  for (size_t b = 0; b < plan.size(); ++b) {
    (*plan[b].node->mutable_def()->mutable_attr())["bucket"] = IntAttr(static_cast<int64_t>(b));
    for (size_t i = 0; i < plan[b].gradients.size(); ++i) {
      RETURN_IF_ERROR(graph.ReplaceInput(plan[b].gradients[i], 0, plan[b].node, static_cast<int>(i)));
    }
  }
  return absl::OkStatus();
}

// Logs what the codec compresses and the payload per rank per step (moves `rewrite`'s table out).
void LogCodecRewrite(const std::string& method, const CodecOptions& codec_options, CodecRewrite& rewrite,
                     PassLog* log) {
  const int64_t uncompressed = rewrite.dense_bytes - rewrite.compressed_dense_bytes;
  const size_t dense_buckets = rewrite.plan.size() - rewrite.compressed_nodes;
  log->notes.push_back(absl::StrCat(method, " (", codec_options.ToString().empty() ? "defaults" : codec_options.ToString(),
                                    ") on ", rewrite.table.size(), " gradient", rewrite.table.size() == 1 ? "" : "s",
                                    " in ", rewrite.compressed_nodes, " fused collective",
                                    rewrite.compressed_nodes == 1 ? "" : "s", "; ", dense_buckets, " dense bucket",
                                    dense_buckets == 1 ? " keeps" : "s keep", " the rest. Payload per rank per step:"));
  for (std::string& line : rewrite.table) log->notes.push_back(std::move(line));
  log->notes.push_back(absl::StrFormat("  %-28s %10s -> %10s  (uncompressed, allreduce)", "the rest (dense)",
                                       Kib(uncompressed), Kib(uncompressed)));
  log->notes.push_back(absl::StrFormat("  %-28s %10s -> %2s%8s  %2s%4.1fx%s", "total", Kib(rewrite.dense_bytes),
                                       rewrite.bound ? "<=" : "", Kib(rewrite.payload_bytes + uncompressed),
                                       rewrite.bound ? ">=" : "",
                                       static_cast<double>(rewrite.dense_bytes) / (rewrite.payload_bytes + uncompressed),
                                       rewrite.bound ? "  (variable-length codes: their bound)" : ""));
}


class CompressPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& o = context.options;
    const std::string& method = o.GetString("method");
    bool any_allreduce = false, any_push = false;
    for (Node* n : graph.nodes()) {
      if (n->op() == "CompressedAllReduce" || n->op() == "LowRankPush" ||
          ((n->op() == "AllReduce" || IsGossipPush(*n)) && NodeAttrString(*n, "wire", "float32") != "float32")) {
        return absl::FailedPreconditionError(absl::StrCat("compress: '", n->name(), "' is already compressed"));
      }
      any_allreduce |= n->op() == "AllReduce";
      any_push |= IsGossipPush(*n);
    }
    if (!any_allreduce && !any_push) {
      return absl::FailedPreconditionError(
          "compress: no communication to compress; it goes after data_parallel (which --workers > 1 adds "
          "after autodiff) or gossip (power_gossip's messages are already low-rank)");
    }
    if (any_push && method != "fp16" && method != "bf16" && method != "powersgd") {
      // Push-sum adds what arrives to what it keeps: only codes whose
      // error the sender can keep back conserve its mass.
      return absl::InvalidArgumentError(absl::StrCat("compress: gossip's pushes take fp16, bf16 or powersgd (codes "
                                                     "whose error the sender keeps); ", method, " is not one"));
    }
    std::vector<std::pair<std::string, std::string>> extra = o.Undeclared(PassInfoOptions());
    if (any_push && method == "powersgd") {
      RETURN_IF_ERROR(LowRankPushes(graph, o, extra, log));
    } else if (method == "fp16" || method == "bf16") {
      if (!extra.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("compress: ", method, " takes no option '", extra[0].first, "'"));
      }
      RETURN_IF_ERROR(TruncateOnTheWire(graph, method, log));
    } else {
      RETURN_IF_ERROR(RewriteWithCodec(graph, o, method, extra, log));
    }
    PlanRecords::Compression& record = *graph.mutable_header()->mutable_records()->mutable_compression();
    record.set_method(method);
    if (applied_momentum_ > 0) {
      record.set_momentum(static_cast<float>(applied_momentum_));
      // An optimizer planned before this pass already applies its own.
      for (Node* n : graph.nodes()) {
        auto m = n->def().attr().find("momentum");
        if (n->op() != "ApplySgd" || m == n->def().attr().end()) continue;
        if (absl::Status once = CheckMomentumAppliedOnce(graph, m->second.f()); !once.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("compress: ", once.message()));
        }
      }
    }
    return absl::OkStatus();
  }

  static std::vector<PassOptionSpec> PassInfoOptions() {
    return {{"method", OptionType::kString, "fp16", "fp16, bf16, or a gradient codec (listed below)"},
            {"min_elements", OptionType::kInt, "1024", "tensors with fewer values stay uncompressed"},
            {"skip_biases", OptionType::kBool, "true", "rank-1 tensors (biases) stay uncompressed"},
            {"seed", OptionType::kInt, "1", "seed of the codecs' stochastic rounding"}};
  }

 private:
  // The largest momentum a selected gradient's codec applies itself.
  double applied_momentum_ = 0;

  absl::Status RewriteWithCodec(Graph& graph, const PassOptions& o, const std::string& method,
                                const std::vector<std::pair<std::string, std::string>>& extra, PassLog* log) {
    ASSIGN_OR_RETURN(const CodecOptions codec_options, CodecOptionsFor(method, extra));
    const int64_t min_elements = o.GetInt("min_elements");
    const bool skip_biases = o.GetBool("skip_biases");

    ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
    absl::flat_hash_map<int, size_t> position;
    for (size_t i = 0; i < order.size(); ++i) position[order[i]->id()] = i;

    std::vector<Node*> old_buckets;
    for (Node* n : order) {
      // Buckets of other groups (a shard's replicas) keep their plain allreduce.
      if (n->op() == "AllReduce" && CollectiveGroup(*n).empty()) old_buckets.push_back(n);
    }
    std::sort(old_buckets.begin(), old_buckets.end(),
              [](Node* a, Node* b) { return a->def().attr().at("bucket").i() < b->def().attr().at("bucket").i(); });

    CodecRewrite rewrite;
    for (Node* bucket : old_buckets) {
      RETURN_IF_ERROR(
          RewriteBucket(graph, o, method, codec_options, min_elements, skip_biases, position, bucket, rewrite));
    }
    if (rewrite.table.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "compress: no gradient has min_elements=", min_elements, " values or more", skip_biases ? " (biases skipped)" : "",
          " and suits ", method, "; nothing to compress"));
    }
    RETURN_IF_ERROR(IssueByReadiness(graph, rewrite.plan));
    for (Node* bucket : old_buckets) graph.RemoveNode(bucket);
    LogCodecRewrite(method, codec_options, rewrite, log);
    return absl::OkStatus();
  }

  // Moves `bucket`'s selected gradients to one CompressedAllReduce, the rest to one dense AllReduce.
  absl::Status RewriteBucket(Graph& graph, const PassOptions& o, const std::string& method,
                             const CodecOptions& codec_options, int64_t min_elements, bool skip_biases,
                             const absl::flat_hash_map<int, size_t>& position, Node* bucket, CodecRewrite& rewrite) {
    // The bucket's selected gradients share one CompressedAllReduce (one
    // collective per round for all); the rest stay one dense allreduce.
    Collective dense, fused;
    std::vector<std::unique_ptr<GradientCodec>> codecs;
    for (int i = 0; i < bucket->num_inputs(); ++i) {
      const Edge* in = bucket->input_edge(i);
      NodeOut value{in->src, in->src_port};
      std::vector<Node*> consumers;
      for (const Edge* e : bucket->out_edges()) {
        if (e->src_port == i) consumers.push_back(e->dst);
      }
      if (consumers.size() != 1 || consumers[0]->op() != "Gradient") {
        return absl::FailedPreconditionError(absl::StrCat("compress: output ", i, " of '", bucket->name(),
                                                          "' must feed exactly one Gradient node"));
      }
      Node* gradient = consumers[0];
      const TensorShape& shape = in->src->outputs()[in->src_port].shape;
      const int64_t elements = shape.KnownElements();
      rewrite.dense_bytes += elements * 4;
      ASSIGN_OR_RETURN(std::unique_ptr<GradientCodec> codec, CodecRegistry::Global().Create(method));
      const bool selected =
          elements >= min_elements && !(skip_biases && shape.rank() <= 1) && codec->Suits(shape.dims());
      if (!selected) {
        dense.values.push_back(value);
        dense.gradients.push_back(gradient);
        dense.ready = std::max(dense.ready, position.at(in->src->id()));
        continue;
      }
      if (absl::Status s = codec->Init(shape.dims(), codec_options); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("compress: ", method, " on gradient '", gradient->name(), "' ", shape.ToString(), ": ",
                         s.message(), " (min_elements / skip_biases choose what is compressed)"));
      }
      fused.ready = std::max(fused.ready, position.at(in->src->id()));
      fused.values.push_back(value);
      fused.gradients.push_back(gradient);
      applied_momentum_ = std::max(applied_momentum_, codec->applied_momentum());
      codecs.push_back(std::move(codec));
      const int64_t payload = codecs.back()->PayloadFloats() * 4;
      rewrite.compressed_dense_bytes += elements * 4;
      rewrite.payload_bytes += payload;
      // A variable-length code's size is only known when it runs: its bound.
      rewrite.bound = rewrite.bound || codecs.back()->variable_length();
      rewrite.table.push_back(PayloadRow(gradient->name(), elements, *codecs.back(), payload));
    }
    if (!fused.values.empty()) {
      ASSIGN_OR_RETURN(fused.node, AddCompressedNode(graph, absl::StrCat("compress/", BaseName(bucket->name())), method,
                                                     codec_options, codecs, fused, rewrite.layer, o.GetInt("seed")));
      rewrite.layer += static_cast<int>(codecs.size());
      rewrite.compressed_nodes++;
      rewrite.plan.push_back(std::move(fused));
    }
    if (!dense.values.empty()) {
      ASSIGN_OR_RETURN(dense.node, AddOpNode(&graph, absl::StrCat(bucket->name(), "/dense"), "AllReduce",
                                             dense.values, {{"bucket", IntAttr(0)}, {"reduce", StringAttr("avg")}}));
      rewrite.plan.push_back(std::move(dense));
    }
    return absl::OkStatus();
  }

  // The node for `fused`'s gradients: inputs the gradients, then each one's
  // codec state (new state Parameters carried by Feedback); outputs the same.
  absl::StatusOr<Node*> AddCompressedNode(Graph& graph, const std::string& name, const std::string& method,
                                          const CodecOptions& options,
                                          const std::vector<std::unique_ptr<GradientCodec>>& codecs,
                                          const Collective& fused, int layer, int64_t seed) {
    std::vector<Node*> state;
    std::vector<NodeOut> inputs = fused.values;
    std::vector<std::string> names;
    for (size_t g = 0; g < codecs.size(); ++g) {
      names.push_back(fused.gradients[g]->name());
      for (const CodecStateSpec& spec : codecs[g]->State()) {
        ASSIGN_OR_RETURN(Node * p, AddState(graph, absl::StrCat("compress/", fused.gradients[g]->name(), "/", spec.name),
                                            spec.dims, spec.per_rank));
        state.push_back(p);
        inputs.push_back({p, 0});
      }
    }
    ASSIGN_OR_RETURN(Node * node, AddOpNode(&graph, name, "CompressedAllReduce", inputs,
                                            {{"bucket", IntAttr(0)},
                                             {"method", StringAttr(method)},
                                             {"options", StringAttr(options.ToString())},
                                             {"gradients", IntAttr(static_cast<int64_t>(codecs.size()))},
                                             {"names", StringAttr(absl::StrJoin(names, ","))},
                                             {"layer", IntAttr(layer)},
                                             {"seed", IntAttr(seed)}}));
    for (size_t i = 0; i < state.size(); ++i) {
      RETURN_IF_ERROR(CloseLoop(graph, state[i], {node, static_cast<int>(codecs.size() + i)}));
    }
    return node;
  }
};

PassInfo CompressInfo() {
  PassInfo info{"compress",
                "Gradient compression around the data-parallel communication: fp16/bf16 on the allreduce wire (and on "
                "gossip's pushes), or a gradient codec per selected gradient (QSGD, TernGrad, top-k, 1-bit, PowerSGD, GradiVeQ; "
                "see below); after gossip, powersgd sends the pushes as rank-r codes (options rank, consensus).",
                CompressPass::PassInfoOptions(),
                [] { return std::make_unique<CompressPass>(); },
                "codec options (key=value) go to the codec: see the list of codecs below"};
  info.needs = {kGradientCommunicationProperty};
  info.provides = {kCompressedProperty};
  info.precedes = {kPipelinedProperty, kClippedProperty};
  return info;
}

NEREID_REGISTER_PASS(CompressInfo());

}  // namespace
}  // namespace nereid
