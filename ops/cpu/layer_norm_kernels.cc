// LayerNorm and its gradient over [rows, width] views of x (width: the
// product of the normalised dimensions). Rows are independent, so threads
// split them; dscale and dbias sum over rows, so there threads split the
// columns and each adds its rows in order (the same sums in every run).

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

struct RowView {
  int64_t rows = 1, width = 1;
};

RowView ViewOf(const std::vector<int64_t>& dims, int64_t axis) {
  if (axis < 0) axis += static_cast<int64_t>(dims.size());
  RowView v;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) (i < axis ? v.rows : v.width) *= dims[i];
  return v;
}

int64_t RowsPerThread(int64_t width) { return std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, width)); }

class LayerNormKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    epsilon_ = attrs.at("epsilon")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    RowView v = ViewOf(x.dims(), axis_);
    const float* in = x.data<float>();
    const float* scale = ctx->input(1).data<float>();
    const float* bias = ctx->input(2).data<float>();
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    ASSIGN_OR_RETURN(Tensor * mean, ctx->AllocateOutput(1));
    ASSIGN_OR_RETURN(Tensor * rstd, ctx->AllocateOutput(2));
    float* out = y->data<float>();
    cpu::ParallelFor(ctx, v.rows, RowsPerThread(v.width), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* row = in + r * v.width;
        const float mu = cpu::SumLanes(row, v.width) / static_cast<float>(v.width);
        const float squares = cpu::SumLanes(v.width, [&](int64_t i) { return (row[i] - mu) * (row[i] - mu); });
        const float inv = 1.0f / std::sqrt(squares / static_cast<float>(v.width) + epsilon_);
        float* dst = out + r * v.width;
        for (int64_t i = 0; i < v.width; ++i) dst[i] = (row[i] - mu) * inv * scale[i] + bias[i];
        mean->data<float>()[r] = mu;
        rstd->data<float>()[r] = inv;
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = -1;
  float epsilon_ = 1e-5f;
};

// x_hat = (x - mean) * rstd, g = dy * scale:
//   dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)),
//   dscale = sum over rows of dy * x_hat, dbias = sum over rows of dy.
class LayerNormGradKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    if (dy.dims() != x.dims()) {
      return absl::InvalidArgumentError(absl::StrCat("dy ", dy.DebugString(), " and x ", x.DebugString(), " differ"));
    }
    RowView v = ViewOf(x.dims(), axis_);
    const float* pdy = dy.data<float>();
    const float* px = x.data<float>();
    const float* scale = ctx->input(2).data<float>();
    const float* mean = ctx->input(3).data<float>();
    const float* rstd = ctx->input(4).data<float>();
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    ASSIGN_OR_RETURN(Tensor * dscale, ctx->AllocateOutput(1));
    ASSIGN_OR_RETURN(Tensor * dbias, ctx->AllocateOutput(2));
    float* out = dx->data<float>();
    const float inv_width = 1.0f / static_cast<float>(v.width);
    cpu::ParallelFor(ctx, v.rows, RowsPerThread(v.width), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* row_dy = pdy + r * v.width;
        const float* row_x = px + r * v.width;
        const float mu = mean[r], inv = rstd[r];
        const float sum_g = cpu::SumLanes(v.width, [&](int64_t i) { return row_dy[i] * scale[i]; });
        const float sum_gx =
            cpu::SumLanes(v.width, [&](int64_t i) { return row_dy[i] * scale[i] * (row_x[i] - mu) * inv; });
        const float mean_g = sum_g * inv_width, mean_gx = sum_gx * inv_width;
        float* dst = out + r * v.width;
        for (int64_t i = 0; i < v.width; ++i) {
          const float x_hat = (row_x[i] - mu) * inv;
          dst[i] = inv * (row_dy[i] * scale[i] - mean_g - x_hat * mean_gx);
        }
      }
    });
    float* ds = dscale->data<float>();
    float* db = dbias->data<float>();
    cpu::ParallelFor(ctx, v.width, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ds[i] = db[i] = 0;
      for (int64_t r = 0; r < v.rows; ++r) {
        const float* row_dy = pdy + r * v.width;
        const float* row_x = px + r * v.width;
        const float mu = mean[r], inv = rstd[r];
        for (int64_t i = begin; i < end; ++i) {
          ds[i] += row_dy[i] * (row_x[i] - mu) * inv;
          db[i] += row_dy[i];
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = -1;
};

NEREID_REGISTER_KERNEL("LayerNorm", kCpu, DT_FLOAT, LayerNormKernel);
NEREID_REGISTER_KERNEL("LayerNormGrad", kCpu, DT_FLOAT, LayerNormGradKernel);

}  // namespace
}  // namespace nereid
