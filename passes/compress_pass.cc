// compress(method=...): gradient compression around communication.
//
// Built so far: truncation to 16-bit floats, Pipe-SGD's compressor. fp16 and
// bf16 values are summable, so the allreduce itself carries them: every
// AllReduce bucket is marked with the wire format, the communicator sends
// 16-bit values and adds them in float32 (runtime/comm/wire_format.h). Half
// the bytes on the wire; nothing else in the graph changes.
//
// Not built yet (the compression issue): QSGD, TernGrad, top-k and 1-bit with
// error feedback, GradiVeQ, PowerSGD, and per-layer selection; asking for one
// says so.

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "ops/gradient_builder.h"
#include "passes/optimizer_common.h"
#include "passes/pass.h"

namespace nereid {
namespace {

class CompressPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassOptions& o, PassLog* log) override {
    const std::string& method = o.GetString("method");
    std::string wire;
    if (method == "fp16") {
      wire = "float16";
    } else if (method == "bf16") {
      wire = "bfloat16";
    } else {
      return absl::UnimplementedError(absl::StrCat("compress: method=", method,
                                                   " is not built; built methods: fp16, bf16 (truncation). "
                                                   "QSGD, TernGrad, top-k, 1-bit, GradiVeQ and PowerSGD are not yet"));
    }
    int buckets = 0;
    int64_t elements = 0;
    for (Node* n : graph.nodes()) {
      if (n->op() != "AllReduce") continue;
      auto& attrs = *n->mutable_def()->mutable_attr();
      if (attrs.count("wire") > 0 && attrs.at("wire").s() != "float32") {
        return absl::FailedPreconditionError(
            absl::StrCat("compress: '", n->name(), "' is already compressed (", attrs.at("wire").s(), ")"));
      }
      attrs["wire"] = StringAttr(wire);
      ++buckets;
      for (int i = 0; i < n->num_inputs(); ++i) {
        const Edge* e = n->input_edge(i);
        elements += e->src->outputs()[e->src_port].shape.KnownElements();
      }
    }
    if (buckets == 0) {
      return absl::FailedPreconditionError(
          "compress: no communication to compress; it goes after data_parallel (which --workers > 1 adds "
          "after autodiff)");
    }
    (*graph.mutable_header()->mutable_attr())["compression"] = StringAttr(method);
    log->notes.push_back(absl::StrCat(method, " on the wire for ", buckets, " allreduce bucket",
                                      buckets == 1 ? "" : "s", ": ", elements * 4, " -> ", elements * 2,
                                      " bytes per allreduce (2x), sums in float32"));
    return absl::OkStatus();
  }
};

NEREID_REGISTER_PASS((PassInfo{
    "compress",
    "Gradient compression on the allreduce; built: fp16 and bf16 truncation (summable, so the ring carries "
    "16-bit values and adds in float32).",
    {{"method", OptionType::kString, "fp16", "fp16 or bf16"}},
    [] { return std::make_unique<CompressPass>(); }}));

}  // namespace
}  // namespace nereid
