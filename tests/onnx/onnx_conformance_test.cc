// ONNX's own backend node tests (Debian's libonnx-testdata), forward, on
// Nereid's CPU kernels. Each case is a one-op model with input and expected
// output tensors; a case runs when every op in it has a converter and the
// importer can express it. Integer inputs (Reshape's target shape) are made
// initializers first, and so are scalars (Dropout's ratio) and booleans
// (Where's condition: a mask): Nereid takes such operands as constants.
// Cast is exempt from "every op passes a case": ONNX 1.12's Cast tests cast
// among float16, bfloat16, float64 and strings only; tests/ops/cast_test.cc
// checks Nereid's float32 / int32 / int64 casts.
//
// A case passes when every output matches within ONNX's backend-test
// tolerance (rtol 1e-3, atol 1e-7). The test fails on any case that imports
// but is rejected by Nereid or computes a different result, and on any
// supported op with no passing case; it prints every case with its outcome.

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file_io.h"
#include "core/initializers.h"
#include "graph/onnx/onnx_converter.h"
#include "graph/onnx/onnx_import.h"
#include "graph/onnx/shape_folding.h"
#include "gtest/gtest.h"
#include "ops/model_loader.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

constexpr char kNodeTests[] = "/usr/share/libonnx-testdata/data/node";

std::vector<std::string> ListDir(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool ReadProto(const std::string& path, google::protobuf::Message* message) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  return bytes.ok() && message->ParseFromString(*bytes);
}

absl::StatusOr<Tensor> ToTensor(const onnx::TensorProto& t) {
  absl::StatusOr<TensorProto> proto = FromOnnxTensor(t);
  if (!proto.ok()) return proto.status();
  absl::StatusOr<TensorShape> shape = TensorShape::FromProto(proto->shape());
  if (!shape.ok()) return shape.status();
  return MaterializeTensor(*proto, *shape);
}

// A Dropout whose training_mode input is a true constant: its output depends
// on the random generator that made the expected data.
bool DropsOutInTraining(const onnx::GraphProto& graph) {
  for (const onnx::NodeProto& n : graph.node()) {
    if (n.op_type() != "Dropout" || n.input_size() < 3) continue;
    for (const onnx::TensorProto& t : graph.initializer()) {
      if (t.name() == n.input(2) && !t.raw_data().empty() && t.raw_data()[0] != 0) return true;
      if (t.name() == n.input(2) && t.int32_data_size() > 0 && t.int32_data(0) != 0) return true;
    }
  }
  return false;
}

double ElementAt(const Tensor& t, int64_t k) {
  switch (t.dtype()) {
    case DT_INT64: return static_cast<double>(t.data<int64_t>()[k]);
    case DT_INT32: return t.data<int32_t>()[k];
    default: return t.data<float>()[k];
  }
}

// Outputs the comparison reads: float, and the integers of folded shape
// arithmetic.
bool ComparableOutputs(const onnx::GraphProto& graph) {
  for (const onnx::ValueInfoProto& v : graph.output()) {
    const int32_t type = v.type().tensor_type().elem_type();
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32) {
      return false;
    }
  }
  return true;
}

struct Outcome {
  enum Kind { kPassed, kSkipped, kFailed } kind;
  std::string detail;
};

// Runs one test case directory; `ops` gets the op types the model uses.
Outcome RunCase(const std::string& dir, std::vector<std::string>& ops) {
  onnx::ModelProto model;
  if (!ReadProto(dir + "/model.onnx", &model)) return {Outcome::kFailed, "model.onnx does not parse"};
  for (const onnx::NodeProto& n : model.graph().node()) ops.push_back(n.op_type());
  for (const std::string& op : ops) {
    if (OnnxConverterRegistry::Global().Find(op) == nullptr && !IsFoldableOp(op)) {
      return {Outcome::kSkipped, "op " + op + " not supported"};
    }
  }
  if (!ComparableOutputs(model.graph())) return {Outcome::kSkipped, "an output that is neither float nor int32/int64"};
  std::vector<std::string> data_sets = ListDir(dir, "test_data_set_");
  if (data_sets.empty()) return {Outcome::kSkipped, "no test data"};
  for (const std::string& set : data_sets) {
    const std::string set_dir = absl::StrCat(dir, "/", set);
    onnx::ModelProto case_model = model;
    onnx::GraphProto* graph = case_model.mutable_graph();
    FeedMap feeds;
    std::vector<std::string> fed_names;
    int file = 0;
    for (const onnx::ValueInfoProto& v : model.graph().input()) {
      bool is_initializer = false;
      for (const auto& t : model.graph().initializer()) is_initializer |= t.name() == v.name();
      if (is_initializer) continue;
      onnx::TensorProto value;
      if (!ReadProto(absl::StrCat(set_dir, "/input_", file++, ".pb"), &value)) {
        return {Outcome::kFailed, absl::StrCat(set, ": missing input ", file - 1)};
      }
      const int32_t type = value.data_type();
      if (!v.type().has_tensor_type()) return {Outcome::kSkipped, absl::StrCat("input ", v.name(), " is not a tensor")};
      if (type == onnx::TensorProto::INT64 || type == onnx::TensorProto::INT32 || type == onnx::TensorProto::BOOL ||
          value.dims_size() == 0) {
        value.set_name(v.name());
        *graph->add_initializer() = value;  // a constant operand (a shape, a ratio), as in real models
        continue;
      }
      if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::DOUBLE) {
        return {Outcome::kSkipped, absl::StrCat("input ", v.name(), " is ", onnx::TensorProto::DataType_Name(type),
                                                "; Nereid's compute ops take floating point")};
      }
      absl::StatusOr<Tensor> tensor = ToTensor(value);
      if (!tensor.ok()) return {Outcome::kSkipped, absl::StrCat("input ", v.name(), ": ", tensor.status().message())};
      feeds[v.name()] = *tensor;
      fed_names.push_back(v.name());
    }
    if (DropsOutInTraining(*graph)) {
      return {Outcome::kSkipped, "Dropout in training mode: the expected output holds NumPy's random mask"};
    }
    OnnxImportOptions options;
    options.forward_only = true;
    absl::StatusOr<GraphDef> def = ImportOnnxModel(case_model, options, "model.onnx");
    if (!def.ok()) {
      if (absl::IsUnimplemented(def.status())) return {Outcome::kSkipped, std::string(def.status().message())};
      return {Outcome::kFailed, absl::StrCat("import: ", def.status().message())};
    }
    GraphFile graph_file;
    graph_file.path = dir + "/model.onnx";
    graph_file.format = GraphFormat::kBinary;
    graph_file.def = *def;
    absl::StatusOr<std::unique_ptr<Graph>> loaded = LoadModel(graph_file);
    if (!loaded.ok()) return {Outcome::kFailed, absl::StrCat("Nereid rejects the imported graph: ", loaded.status().message())};
    absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::Create(loaded->get(), ExecutorOptions{});
    if (!executor.ok()) return {Outcome::kFailed, absl::StrCat("executor: ", executor.status().message())};
    std::vector<std::string> fetches;
    for (const onnx::ValueInfoProto& v : model.graph().output()) fetches.push_back(v.name());
    StepInfo step;
    step.training = false;
    absl::StatusOr<std::vector<Tensor>> outputs = (*executor)->Evaluate(step, feeds, fetches);
    if (!outputs.ok()) return {Outcome::kFailed, absl::StrCat("run: ", outputs.status().message())};
    for (size_t i = 0; i < fetches.size(); ++i) {
      onnx::TensorProto expected_proto;
      if (!ReadProto(absl::StrCat(set_dir, "/output_", i, ".pb"), &expected_proto)) {
        return {Outcome::kFailed, absl::StrCat(set, ": missing output ", i)};
      }
      absl::StatusOr<Tensor> expected = ToTensor(expected_proto);
      if (!expected.ok()) return {Outcome::kSkipped, absl::StrCat("output: ", expected.status().message())};
      const Tensor& got = (*outputs)[i];
      if (got.dims() != expected->dims() || got.dtype() != expected->dtype()) {
        return {Outcome::kFailed, absl::StrCat(set, ": output ", fetches[i], " is ", got.DebugString(), ", expected ",
                                               expected->DebugString())};
      }
      for (int64_t k = 0; k < got.num_elements(); ++k) {
        const double a = ElementAt(got, k), e = ElementAt(*expected, k);
        // Integers (shape arithmetic folded at import) must be exact.
        const double tolerance = got.dtype() == DT_FLOAT ? 1e-7 + 1e-3 * std::fabs(e) : 0;
        if (!(std::fabs(a - e) <= tolerance)) {
          return {Outcome::kFailed, absl::StrCat(set, ": output ", fetches[i], " element ", k, " is ", a, ", expected ", e)};
        }
      }
    }
  }
  return {Outcome::kPassed, ""};
}

TEST(OnnxConformance, EverySupportedOpPassesOnnxsNodeTests) {
  std::vector<std::string> cases = ListDir(kNodeTests, "test_");
  ASSERT_FALSE(cases.empty()) << kNodeTests << " is empty or missing: ./setup.sh installs libonnx-testdata";
  std::map<std::string, int> passed_by_op;
  std::map<std::string, int> unsupported_ops;
  int passed = 0, skipped = 0;
  std::vector<std::string> failures;
  for (const std::string& name : cases) {
    std::vector<std::string> ops;
    Outcome outcome = RunCase(absl::StrCat(kNodeTests, "/", name), ops);
    switch (outcome.kind) {
      case Outcome::kPassed:
        ++passed;
        for (const std::string& op : ops) ++passed_by_op[op];
        std::printf("pass  %s\n", name.c_str());
        break;
      case Outcome::kSkipped:
        ++skipped;
        if (outcome.detail.rfind("op ", 0) == 0 && outcome.detail.find(" not supported") != std::string::npos) {
          ++unsupported_ops[outcome.detail.substr(3, outcome.detail.find(' ', 3) - 3)];
        } else {
          std::printf("skip  %s: %s\n", name.c_str(), outcome.detail.c_str());
        }
        break;
      case Outcome::kFailed:
        failures.push_back(absl::StrCat(name, ": ", outcome.detail));
        std::printf("FAIL  %s: %s\n", name.c_str(), outcome.detail.c_str());
        break;
    }
  }
  std::printf("\n%d cases: %d passed, %zu failed, %d skipped (%zu ops without a converter)\n", static_cast<int>(cases.size()),
              passed, failures.size(), skipped, unsupported_ops.size());
  EXPECT_TRUE(failures.empty()) << absl::StrJoin(failures, "\n");
  for (const std::string& op : OnnxConverterRegistry::Global().OpTypes()) {
    if (op == "Cast") continue;  // see the top of this file
    EXPECT_GT(passed_by_op[op], 0) << "no ONNX node test of " << op << " passed";
  }
}

}  // namespace
}  // namespace nereid
