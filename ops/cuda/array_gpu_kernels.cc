// GPU kernels that move values rather than compute them: Transpose (float,
// int32, int64), CausalMask, and Gather with its gradient, with the CPU
// kernels' semantics (ops/cpu/array_kernels.cc, mask_kernels.cc,
// embedding_kernels.cc) through the project's kernels (gpu_math.h).
// Transpose, CausalMask and Gather copy, so their values are the host's
// exactly. GatherGrad adds the dy rows that picked a table row in the order
// of the ids, from zero, in float, as the host's loop does: the host's
// floats, every run, without atomics.
//
// An id outside the table is the host's error, raised in stream order: the
// device reads nothing outside the table (such an id picks zeros and adds
// nothing), a kernel finds the first such id, its position and value are
// copied to page-locked memory, and a host callback on the node's stream
// turns them into the host's message. The stream then fails, and the run
// reports the error with the node's name; the host never waits for it.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "device/device.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

using cuda::Prefix;

// y = x with its dims permuted by `perm` (reversed when the attribute is
// empty, ONNX's default).
class TransposeGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    given_.assign(attrs.at("perm")->list().i().begin(), attrs.at("perm")->list().i().end());
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    const int rank = x.rank();
    std::vector<int64_t> perm = given_;
    for (int d = rank - 1; given_.empty() && d >= 0; --d) perm.push_back(d);
    if (static_cast<int>(perm.size()) != rank || rank > cuda::math::kMaxRank) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(ctx->node()), "perm [", absl::StrJoin(perm, ","),
                                                     "] does not permute the dims of x ", x.DebugString(), " (at most ",
                                                     cuda::math::kMaxRank, ")"));
    }
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0, x.dtype()));
    if (y->num_elements() == 0) return absl::OkStatus();
    std::vector<int64_t> in_strides(rank, 1);
    for (int d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * x.dim(d + 1);
    cuda::math::Strided view;
    view.rank = rank;
    for (int d = 0; d < rank; ++d) {
      view.out[d] = y->dim(d);
      view.stride[d] = in_strides[perm[d]];
    }
    return cuda::Launched(
        cuda::math::Transpose(x.raw(), y->raw(), DataTypeSize(x.dtype()), y->num_elements(), view, stream), *ctx);
  }

 private:
  std::vector<int64_t> given_;  // the attribute; empty: the dims reversed
};

// Scores [..., queries, keys]: row q keeps keys 0 .. q + keys - queries, the
// rest become `value`.
class CausalMaskGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    value_ = attrs.at("value")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    if (x.rank() < 2 || x.dim(x.rank() - 2) > x.dim(x.rank() - 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Prefix(ctx->node()), "x ", x.DebugString(),
                       " must be scores [..., queries, keys], no more queries than keys"));
    }
    const int64_t queries = x.dim(x.rank() - 2), keys = x.dim(x.rank() - 1);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (y->num_elements() == 0) return absl::OkStatus();
    return cuda::Launched(cuda::math::CausalMask(x.data<float>(), y->data<float>(), x.num_elements() / keys, queries,
                                                 keys, value_, stream),
                          *ctx);
  }

 private:
  float value_ = 0.0f;
};

// The check of a node's ids against its table. Its page-locked pair is
// reused by every run: a run's check, copy and callback are enqueued under
// the lock on the node's one stream, so a run's callback has read the pair
// before the next run's copy writes it. The executor drains its streams
// before it destroys its kernels, so no callback outlives the pair.
class IdCheck {
 public:
  IdCheck() = default;
  IdCheck(const IdCheck&) = delete;
  IdCheck& operator=(const IdCheck&) = delete;
  ~IdCheck() {
    if (found_ != nullptr) cudaFreeHost(found_);
  }

  // Enqueues the check of `ids` into a table of `rows` rows on the node's
  // stream; the host's error fails the stream if one is outside.
  absl::Status Enqueue(OpKernelContext& ctx, const cuda::math::Ids& ids, int64_t rows, cudaStream_t stream) {
    if (ids.count == 0) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu_);
    if (found_ == nullptr) {
      void* pinned = nullptr;
      RETURN_IF_ERROR(cuda::CudaStatus(cudaMallocHost(&pinned, 2 * sizeof(int64_t)),
                                       absl::StrCat(Prefix(ctx.node()), "cudaMallocHost")));
      found_ = static_cast<int64_t*>(pinned);
    }
    ASSIGN_OR_RETURN(Tensor bad, cuda::Scratch(ctx, 2 * sizeof(int64_t)));
    RETURN_IF_ERROR(cuda::Launched(cuda::math::FindBadId(ids, rows, static_cast<int64_t*>(bad.raw()), stream), ctx));
    RETURN_IF_ERROR(
        cuda::CudaStatus(cudaMemcpyAsync(found_, bad.raw(), 2 * sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
                         absl::StrCat(Prefix(ctx.node()), "cudaMemcpyAsync")));
    const int64_t* found = found_;
    return ctx.device_launch()->stream->Launch(
        absl::StrCat(ctx.node().name(), " (id check)"), [found, rows, name = ctx.node().name()]() -> absl::Status {
          if (found[0] < 0) return absl::OkStatus();
          // ops/cpu/embedding_kernels.cc's message.
          return absl::InvalidArgumentError(absl::StrCat("node '", name, "': index ", found[1], " at position ",
                                                         found[0], " is outside the table's ", rows, " rows"));
        });
  }

 private:
  std::mutex mu_;             // held while a run's check is enqueued
  int64_t* found_ = nullptr;  // page-locked [position, id]; position -1: none
};

// What Gather and GatherGrad share: the axis, the table seen as [outer,
// rows, inner] around it, the ids, and their check.
class TableKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }

 protected:
  struct Lookup {
    cuda::math::Table table;
    cuda::math::Ids ids;
  };

  // The table of dims `dims` and the ids of input `ids_input`; their check
  // enqueued on the stream.
  absl::StatusOr<Lookup> Prepare(OpKernelContext& ctx, const std::vector<int64_t>& dims, int ids_input,
                                 cudaStream_t stream) {
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(ctx.node()), "axis ", axis_,
                                                     " is outside a table of dims [", absl::StrJoin(dims, ","), "]"));
    }
    const Tensor& indices = ctx.input(ids_input);
    if (indices.dtype() != DT_INT32 && indices.dtype() != DT_INT64) {
      return absl::InvalidArgumentError(
          absl::StrCat(Prefix(ctx.node()), "ids ", indices.DebugString(), " must be int32 or int64"));
    }
    Lookup l{{1, dims[axis], 1}, {indices.raw(), indices.dtype() == DT_INT64, indices.num_elements()}};
    for (int64_t i = 0; i < rank; ++i) {
      if (i != axis) (i < axis ? l.table.outer : l.table.inner) *= dims[i];
    }
    RETURN_IF_ERROR(check_.Enqueue(ctx, l.ids, l.table.rows, stream));
    return l;
  }

 private:
  int64_t axis_ = 0;
  IdCheck check_;
};

// (params, ids) -> the rows the ids pick.
class GatherGpuKernel : public TableKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& params = ctx->input(0);
    ASSIGN_OR_RETURN(Lookup l, Prepare(*ctx, params.dims(), 1, stream));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (y->num_elements() == 0) return absl::OkStatus();
    return cuda::Launched(cuda::math::Gather(params.data<float>(), l.ids, l.table, y->data<float>(), stream), *ctx);
  }
};

// (dy, ids, params) -> a table of params' dims: each row the sum of the dy
// rows of the ids that picked it, in the ids' order.
class GatherGradGpuKernel : public TableKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& dy = ctx->input(0);
    const std::vector<int64_t>& dims = ctx->output_dims(0);
    ASSIGN_OR_RETURN(Lookup l, Prepare(*ctx, dims, 1, stream));
    if (dy.num_elements() != l.table.outer * l.ids.count * l.table.inner) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(ctx->node()), "dy ", dy.DebugString(), " does not match ",
                                                     l.ids.count, " ids into a table of dims [",
                                                     absl::StrJoin(dims, ","), "]"));
    }
    ASSIGN_OR_RETURN(Tensor * dparams, ctx->AllocateOutput(0));
    if (dparams->num_elements() == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(Tensor scratch,
                     cuda::Scratch(*ctx, cuda::math::GatherGradScratch(l.table, l.ids) * sizeof(int64_t)));
    return cuda::Launched(cuda::math::GatherGrad(dy.data<float>(), l.ids, l.table, dparams->data<float>(),
                                                 static_cast<int64_t*>(scratch.raw()), stream),
                          *ctx);
  }
};

NEREID_REGISTER_KERNEL("Transpose", kGpu, DT_FLOAT, TransposeGpuKernel);
NEREID_REGISTER_KERNEL("Transpose", kGpu, DT_INT32, TransposeGpuKernel);
NEREID_REGISTER_KERNEL("Transpose", kGpu, DT_INT64, TransposeGpuKernel);
NEREID_REGISTER_KERNEL("CausalMask", kGpu, DT_FLOAT, CausalMaskGpuKernel);
NEREID_REGISTER_KERNEL("Gather", kGpu, DT_FLOAT, GatherGpuKernel);
NEREID_REGISTER_KERNEL("GatherGrad", kGpu, DT_FLOAT, GatherGradGpuKernel);

}  // namespace
}  // namespace nereid
