// The AllReduce (gradient bucket) kernel: fuse the bucket's tensors into one
// buffer, hand the allreduce to the worker's collective engine (which issues
// buckets in the same order on every rank), and split the result into the
// outputs. Asynchronous, so the node's core runs other nodes meanwhile.

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/kernel.h"

namespace nereid {
namespace {

class AllReduceKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    bucket_ = static_cast<int>(attrs.at("bucket")->i());
    op_ = attrs.at("reduce")->s() == "sum" ? ReduceOp::kSum : ReduceOp::kAvg;
    ASSIGN_OR_RETURN(wire_, ParseWireType(attrs.at("wire")->s()));
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    std::vector<float*> outputs;
    int64_t total = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      absl::StatusOr<Tensor*> out = ctx->AllocateOutput(i);
      if (!out.ok()) return done(out.status());
      outputs.push_back((*out)->data<float>());
      total += ctx->input(i).num_elements();
    }
    CollectiveQueue* engine = ctx->collectives();
    if (engine == nullptr) {
      // A worker alone: the reduction over one rank is its own value.
      for (int i = 0; i < ctx->num_inputs(); ++i) {
        std::memcpy(outputs[i], ctx->input(i).data<float>(), ctx->input(i).num_bytes());
      }
      return done(absl::OkStatus());
    }
    absl::StatusOr<Tensor> fused = Tensor::Allocate(DT_FLOAT, {total});
    if (!fused.ok()) return done(fused.status());
    auto buffer = std::make_shared<Tensor>(*std::move(fused));
    float* at = buffer->data<float>();
    std::vector<int64_t> sizes;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      int64_t n = ctx->input(i).num_elements();
      std::memcpy(at, ctx->input(i).data<float>(), n * sizeof(float));
      at += n;
      sizes.push_back(n);
    }
    CollectiveOptions options;
    options.tag = static_cast<uint32_t>(bucket_);
    options.timeout = engine->timeout();
    options.wire = wire_;
    ReduceOp op = op_;
    engine->Submit(
        ctx->step().step, bucket_,
        [buffer, op, options](Communicator& comm) {
          return comm.AllReduce(absl::MakeSpan(buffer->data<float>(), buffer->num_elements()), op, options);
        },
        [buffer, outputs, sizes, done = std::move(done), bucket = bucket_](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("allreduce of bucket ", bucket, ": ", s.message())));
          const float* from = buffer->data<float>();
          for (size_t i = 0; i < outputs.size(); ++i) {
            std::memcpy(outputs[i], from, sizes[i] * sizeof(float));
            from += sizes[i];
          }
          done(absl::OkStatus());
        });
  }

 private:
  int bucket_ = 0;
  WireType wire_ = WireType::kFloat32;
  ReduceOp op_ = ReduceOp::kAvg;
};

NEREID_REGISTER_KERNEL("AllReduce", kCpu, DT_FLOAT, AllReduceKernel);

}  // namespace
}  // namespace nereid
