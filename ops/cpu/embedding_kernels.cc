// Gather and its gradient. Both view the table as [outer, rows, inner]
// (rows: the gathered axis) and move runs of `inner` floats.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

struct TableView {
  int64_t outer = 1, rows = 0, inner = 1;
};

TableView ViewAt(const std::vector<int64_t>& dims, int axis) {
  TableView v;
  v.rows = dims[axis];
  for (int i = 0; i < axis; ++i) v.outer *= dims[i];
  for (size_t i = axis + 1; i < dims.size(); ++i) v.inner *= dims[i];
  return v;
}

// The ids as row numbers, negatives counted from the end; an error names the
// first id outside the table.
absl::StatusOr<std::vector<int64_t>> Rows(const Tensor& indices, int64_t rows, const Node& node) {
  std::vector<int64_t> out(indices.num_elements());
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    int64_t id = indices.dtype() == DT_INT64 ? indices.data<int64_t>()[i] : indices.data<int32_t>()[i];
    int64_t row = id < 0 ? id + rows : id;
    if (row < 0 || row >= rows) {
      return absl::InvalidArgumentError(absl::StrCat("node '", node.name(), "': index ", id, " at position ", i,
                                                     " is outside the table's ", rows, " rows"));
    }
    out[i] = row;
  }
  return out;
}

class GatherKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& params = ctx->input(0);
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + params.rank() : axis_);
    TableView v = ViewAt(params.dims(), axis);
    ASSIGN_OR_RETURN(std::vector<int64_t> rows, Rows(ctx->input(1), v.rows, ctx->node()));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const float* in = params.data<float>();
    float* out = y->data<float>();
    const int64_t n = static_cast<int64_t>(rows.size());
    cpu::ParallelFor(ctx, v.outer * n, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, v.inner)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t j = begin; j < end; ++j) {
                         const int64_t o = j / n, r = rows[j % n];
                         std::memcpy(out + j * v.inner, in + (o * v.rows + r) * v.inner, v.inner * sizeof(float));
                       }
                     });
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 0;
};

// Rows are accumulated in the order the ids come, so the sum is the same in
// every run; threads split the table's outer blocks, never one row.
class GatherGradKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const std::vector<int64_t>& dims = ctx->output_dims(0);
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + static_cast<int64_t>(dims.size()) : axis_);
    TableView v = ViewAt(dims, axis);
    ASSIGN_OR_RETURN(std::vector<int64_t> rows, Rows(ctx->input(1), v.rows, ctx->node()));
    const int64_t n = static_cast<int64_t>(rows.size());
    if (dy.num_elements() != v.outer * n * v.inner) {
      return absl::InvalidArgumentError(absl::StrCat("dy ", dy.DebugString(), " does not match ", n,
                                                     " ids into a table of dims ", DimsToString(dims)));
    }
    ASSIGN_OR_RETURN(Tensor * dparams, ctx->AllocateOutput(0));
    float* out = dparams->data<float>();
    std::memset(out, 0, dparams->num_elements() * sizeof(float));
    const float* in = dy.data<float>();
    cpu::ParallelFor(ctx, v.outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        for (int64_t j = 0; j < n; ++j) {
          float* dst = out + (o * v.rows + rows[j]) * v.inner;
          const float* src = in + (o * n + j) * v.inner;
          for (int64_t i = 0; i < v.inner; ++i) dst[i] += src[i];
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 0;
};

NEREID_REGISTER_KERNEL("Gather", kCpu, DT_FLOAT, GatherKernel);
NEREID_REGISTER_KERNEL("GatherGrad", kCpu, DT_FLOAT, GatherGradKernel);

}  // namespace
}  // namespace nereid
