// nereid export: a checkpoint's trained values -> NumPy's .npz, or an ONNX
// model with them as its initializers. Rank 0's per-rank state (batch-norm
// running statistics) is merged in, from DIR/rank-<r>/ beside the shared file.

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file_io.h"
#include "core/npz_file.h"
#include "core/status_macros.h"
#include "graph/ir.h"
#include "graph/onnx/onnx_import.h"
#include "ops/model_loader.h"
#include "runtime/checkpoint.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"

namespace nereid {
namespace {

Flags ExportFlags() {
  Flags f("nereid export CHECKPOINT -o OUT.npz|OUT.onnx [--model MODEL] [--rank R]",
          "Writes the values a checkpoint holds: CHECKPOINT is a --checkpoint directory (its newest\n"
          "checkpoint) or one .ckpt file.");
  f.Value("o,output", "PATH",
          ".npz: one array per parameter, named as in the graph\n"
          "(numpy.load(PATH)['fc1/weight']); .onnx: MODEL (an .onnx file) with\n"
          "the trained values as its initializers, as an inference graph (batch\n"
          "norm on its running statistics, dropout removed)")
      .Value("model", "MODEL",
             "keep only MODEL's parameters (weights and running statistics), not\n"
             "the optimizer's state; required for .onnx output")
      .Value("rank", "R", "whose per-rank state to take (default 0)")
      .Switch("training-graph", ".onnx: keep MODEL's training graph (batch norm on batch statistics, dropout)");
  return f;
}

using Arrays = std::vector<std::pair<std::string, Tensor>>;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The shared checkpoint with rank `rank`'s per-rank tensors added.
absl::StatusOr<Checkpoint> LoadForExport(const std::string& path, int rank, bool rank_given) {
  ASSIGN_OR_RETURN(Checkpoint ckpt, IsDirectory(path) ? LoadLatestCheckpoint(path) : ReadCheckpointFile(path));
  if (ckpt.path.empty()) ckpt.path = path;
  std::filesystem::path file(ckpt.path);
  const std::string rank_dir = (file.parent_path() / absl::StrCat("rank-", rank)).string();
  if (!IsDirectory(rank_dir)) {
    if (!rank_given) return ckpt;  // a run without per-rank state
    return absl::NotFoundError(absl::StrCat("--rank ", rank, ": no ", rank_dir, " beside ", ckpt.path));
  }
  const std::string rank_file = (std::filesystem::path(rank_dir) / file.filename()).string();
  absl::StatusOr<Checkpoint> mine = ReadCheckpointFile(rank_file);
  if (!mine.ok()) {
    return absl::Status(mine.status().code(), absl::StrCat("rank ", rank, "'s state for ", ckpt.path, ": ",
                                                           mine.status().message()));
  }
  for (auto& named : mine->tensors) ckpt.tensors.push_back(std::move(named));
  return ckpt;
}

// The checkpoint's tensors that are MODEL's Parameters; a parameter the
// checkpoint lacks is an error (another model's checkpoint).
absl::StatusOr<Arrays> ModelParameters(const std::string& model, const Arrays& all) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadModel(model));
  absl::flat_hash_map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : all) by_name[name] = &t;
  Arrays out;
  for (Node* n : graph->nodes()) {
    if (n->op() != "Parameter") continue;
    auto it = by_name.find(n->name());
    if (it == by_name.end()) {
      return absl::NotFoundError(absl::StrCat("the checkpoint has no value for ", model, "'s parameter '", n->name(),
                                              "' (written for another model?)"));
    }
    out.emplace_back(n->name(), *it->second);
  }
  return out;
}

// The model as it deploys: BatchNormalization normalises with its running
// statistics (training_mode 0, no statistics outputs) and Dropout passes its
// input through (an Identity). What PyTorch exports from a module in eval
// mode, without folding batch norm into the convolutions.
void ToInferenceGraph(onnx::GraphProto& graph) {
  for (onnx::NodeProto& node : *graph.mutable_node()) {
    if (node.op_type() == "BatchNormalization") {
      for (onnx::AttributeProto& a : *node.mutable_attribute()) {
        if (a.name() == "training_mode") a.set_i(0);
      }
      while (node.output_size() > 1) node.mutable_output()->RemoveLast();
    } else if (node.op_type() == "Dropout") {
      node.set_op_type("Identity");
      node.clear_attribute();
      while (node.input_size() > 1) node.mutable_input()->RemoveLast();
      while (node.output_size() > 1) node.mutable_output()->RemoveLast();
    }
  }
}

// `model` (ONNX) with each initializer's data replaced by the trained value,
// as an inference graph unless `training_graph`.
absl::Status WriteOnnx(const std::string& model, const Arrays& values, const std::string& out, bool training_graph) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(model));
  onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) return absl::InvalidArgumentError(absl::StrCat(model, ": not an ONNX model"));
  absl::flat_hash_map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : values) by_name[name] = &t;
  absl::flat_hash_set<std::string> written;
  for (onnx::TensorProto& init : *proto.mutable_graph()->mutable_initializer()) {
    const std::string name = OnnxNameToNodeName(init.name());
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;  // a constant (a shape), not a parameter
    if (!written.insert(name).second) {
      return absl::FailedPreconditionError(absl::StrCat("two initializers map to parameter '", name, "'"));
    }
    const Tensor& t = *it->second;
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    if (dims != t.dims()) {
      return absl::FailedPreconditionError(absl::StrCat("initializer '", init.name(), "' has other dims than the trained ",
                                                        t.DebugString()));
    }
    const std::string type = onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(init.data_type()));
    if (init.data_type() != onnx::TensorProto::FLOAT || t.dtype() != DT_FLOAT) {
      return absl::UnimplementedError(absl::StrCat("initializer '", init.name(), "' is ", type, "; only float is exported"));
    }
    init.clear_float_data();
    init.set_raw_data(std::string(static_cast<const char*>(t.raw()), static_cast<size_t>(t.num_bytes())));
  }
  // The importer renames a parameter only when its name collides: such a
  // value has no initializer of its name, and is an error, not a drop.
  for (const auto& [name, t] : values) {
    if (!written.contains(name)) {
      return absl::FailedPreconditionError(absl::StrCat("parameter '", name, "' matches no initializer of ", model));
    }
  }
  if (!training_graph) ToInferenceGraph(*proto.mutable_graph());
  std::string serialized;
  if (!proto.SerializeToString(&serialized)) return absl::InternalError("cannot serialise the ONNX model");
  return WriteFileAtomically(out, serialized);
}

int Export(const std::vector<std::string>& args) {
  Flags flags = ExportFlags();
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  const std::string out = flags.String("output");
  const std::string model = flags.String("model");
  absl::StatusOr<int64_t> rank = flags.Int("rank", 0);
  if (flags.positional().size() != 1 || out.empty() || !rank.ok() || *rank < 0) {
    std::fprintf(stderr, "error: give one checkpoint, -o OUT and a --rank >= 0 (see nereid export --help)\n");
    return kExitUsage;
  }
  const bool onnx_out = absl::EndsWith(out, ".onnx");
  if (!onnx_out && !absl::EndsWith(out, ".npz")) {
    std::fprintf(stderr, "error: -o %s: write .npz or .onnx\n", out.c_str());
    return kExitUsage;
  }
  if (onnx_out && !IsOnnxPath(model)) {
    std::fprintf(stderr, "error: .onnx output needs --model MODEL.onnx (the model the checkpoint trained)\n");
    return kExitUsage;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return kExitFailure;
  };
  absl::StatusOr<Checkpoint> ckpt = LoadForExport(flags.positional()[0], static_cast<int>(*rank), flags.Has("rank"));
  if (!ckpt.ok()) return fail(ckpt.status());
  Arrays arrays = ckpt->tensors;
  if (!model.empty()) {
    absl::StatusOr<Arrays> kept = ModelParameters(model, arrays);
    if (!kept.ok()) return fail(kept.status());
    arrays = *std::move(kept);
  }
  absl::Status written = onnx_out ? WriteOnnx(model, arrays, out, flags.Has("training-graph")) : WriteNpz(out, arrays);
  if (!written.ok()) return fail(written);
  int64_t values = 0;
  for (const auto& [name, t] : arrays) values += t.num_elements();
  std::printf("%s: %zu arrays, %lld values (epoch %lld, step %lld) written to %s\n", ckpt->path.c_str(), arrays.size(),
              static_cast<long long>(values), static_cast<long long>(ckpt->epochs_completed),
              static_cast<long long>(ckpt->step), out.c_str());
  return kExitOk;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"export", "write a checkpoint's trained values as .npz or ONNX",
                                [] { return ExportFlags().Help(); }, Export});

}  // namespace nereid
