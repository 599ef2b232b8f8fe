// LstmLayer and its gradient through time. Forward: one GEMM projects every
// step's input at once ([T*B, I] x [I, 4H]); each step then adds h_{t-1} R^T
// (a GEMM) and applies the gates in one pass that also stores what the
// backward pass needs. Backward walks the steps in reverse, keeping dh and
// dc of the running step, stores each step's pre-activation gradients dG,
// and computes dx, dw, dr and dbias from all of dG with one GEMM each (or
// two for dr). The matrices go through oneDNN's sgemm, the sigmoids and
// tanhs through its vectorised eltwise primitives on dense blocks (a step's
// [B, 4H] gates at once: tanh(z) = 2 sigmoid(2z) - 1 for the candidate),
// rather than scalar std::exp / std::tanh.

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/recurrent_util.h"

namespace nereid {
namespace {

constexpr int kGates = 4;  // i, o, f, c (ONNX's order)

using cpu::DenseEltwise;
using cpu::RecurrentShape;

class LstmLayerKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    hidden_ = attrs.at("hidden_size")->i();
    reverse_ = attrs.at("reverse")->b();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const RecurrentShape s = cpu::RecurrentShapeOf(ctx->input(0), hidden_, kGates, reverse_);
    const float* r = ctx->input(2).data<float>();
    const float* bias = ctx->input(3).data<float>();
    const bool has_state = ctx->num_inputs() == 6;
    const float* h0 = has_state ? ctx->input(4).data<float>() : nullptr;
    const float* c0 = has_state ? ctx->input(5).data<float>() : nullptr;
    Tensor* out[5];
    RETURN_IF_ERROR(cpu::AllocateRecurrentOutputs(ctx, 5, out, /*zeroed=*/false));
    float* y = out[0]->data<float>();
    float* gates = out[3]->data<float>();
    float* cells = out[4]->data<float>();
    const int64_t g = s.gates, h = s.hidden, step_state = s.batch * h;
    if (s.steps == 0 || s.batch == 0) return absl::OkStatus();
    const int threads = cpu::RecurrentGemmThreads(ctx, s);
    RETURN_IF_ERROR(cpu::ProjectInputs(ctx, s, gates, threads));
    for (int64_t i = 0; i < s.steps; ++i) {
      const int64_t t = s.StepAt(i);
      float* gt = gates + t * s.batch * g;
      const float* h_prev = i > 0 ? y + s.StepAt(i - 1) * step_state : h0;
      const float* c_prev = i > 0 ? cells + s.StepAt(i - 1) * step_state : c0;
      if (h_prev != nullptr) RETURN_IF_ERROR(cpu::Sgemm(false, true, s.batch, g, h, 1.0f, h_prev, r, 1.0f, gt, threads));
      float* ct = cells + t * step_state;
      float* yt = y + t * step_state;
      // Pre-activations with the bias; the candidate's doubled, so that one
      // sigmoid over the whole block gives every gate.
      for (int64_t b = 0; b < s.batch; ++b) {
        float* row = gt + b * g;
        for (int64_t j = 0; j < 3 * h; ++j) row[j] += bias[j];
        for (int64_t j = 3 * h; j < g; ++j) row[j] = 2.0f * (row[j] + bias[j]);
      }
      RETURN_IF_ERROR(eltwise_.Run(dnnl::algorithm::eltwise_logistic, gt, gt, s.batch * g, threads));
      for (int64_t b = 0; b < s.batch; ++b) {
        float* row = gt + b * g;
        for (int64_t j = 0; j < h; ++j) {
          const float candidate = 2.0f * row[3 * h + j] - 1.0f;
          row[3 * h + j] = candidate;
          ct[b * h + j] = (c_prev != nullptr ? row[2 * h + j] * c_prev[b * h + j] : 0.0f) + row[j] * candidate;
        }
      }
      RETURN_IF_ERROR(eltwise_.Run(dnnl::algorithm::eltwise_tanh, ct, yt, step_state, threads));
      for (int64_t b = 0; b < s.batch; ++b) {
        const float* out_gate = gt + b * g + h;
        for (int64_t j = 0; j < h; ++j) yt[b * h + j] *= out_gate[j];
      }
    }
    const int64_t last = s.StepAt(s.steps - 1);
    std::copy_n(y + last * step_state, step_state, out[1]->data<float>());
    std::copy_n(cells + last * step_state, step_state, out[2]->data<float>());
    return absl::OkStatus();
  }

 private:
  int64_t hidden_ = 0;
  bool reverse_ = false;
  DenseEltwise eltwise_;
};

class LstmLayerGradKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    hidden_ = attrs.at("hidden_size")->i();
    reverse_ = attrs.at("reverse")->b();
    has_dy_ = attrs.at("has_dy")->b();
    has_dh_last_ = attrs.at("has_dh_last")->b();
    has_dc_last_ = attrs.at("has_dc_last")->b();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const RecurrentShape s = cpu::RecurrentShapeOf(ctx->input(0), hidden_, kGates, reverse_);
    const cpu::RecurrentGradInputs in = cpu::ReadRecurrentGradInputs(ctx, has_dy_, has_dh_last_);
    const float *cells = in.saved, *dy = in.dy;
    int next = in.next;
    const float* dc_last = has_dc_last_ ? ctx->input(next++).data<float>() : nullptr;
    const int states = ctx->num_inputs() - next;
    if (states != 0 && states != 2) {
      return absl::InvalidArgumentError(absl::StrCat("expected h0 and c0 or neither after the gradients, got ", states,
                                                     " tensors"));
    }
    const float* h0 = states == 2 ? ctx->input(next).data<float>() : nullptr;
    const float* c0 = states == 2 ? ctx->input(next + 1).data<float>() : nullptr;
    Tensor* out[6];
    RETURN_IF_ERROR(cpu::AllocateRecurrentOutputs(ctx, 6, out, /*zeroed=*/true));
    const int64_t g = s.gates, h = s.hidden, step_state = s.batch * h, rows = s.steps * s.batch;
    if (s.steps == 0 || s.batch == 0) return absl::OkStatus();
    const int threads = cpu::RecurrentGemmThreads(ctx, s);

    // dh and dc flowing into the step being visited; dG of every step;
    // tanh of every cell state.
    std::vector<float> dh(step_state, 0.0f), dc(step_state, 0.0f), dgates(rows * g), tanh_cells(rows * h);
    RETURN_IF_ERROR(eltwise_.Run(dnnl::algorithm::eltwise_tanh, cells, tanh_cells.data(), rows * h, threads));
    if (in.dh_last != nullptr) std::copy_n(in.dh_last, step_state, dh.data());
    if (dc_last != nullptr) std::copy_n(dc_last, step_state, dc.data());
    for (int64_t i = s.steps - 1; i >= 0; --i) {
      const int64_t t = s.StepAt(i);
      const float* gt = in.gates + t * s.batch * g;
      const float* tanh_ct = tanh_cells.data() + t * step_state;
      const float* c_prev = i > 0 ? cells + s.StepAt(i - 1) * step_state : c0;
      float* dgt = dgates.data() + t * s.batch * g;
      for (int64_t b = 0; b < s.batch; ++b) {
        const float* row = gt + b * g;
        float* drow = dgt + b * g;
        for (int64_t j = 0; j < h; ++j) {
          const int64_t k = b * h + j;
          const float in_gate = row[j], out_gate = row[h + j], forget = row[2 * h + j], candidate = row[3 * h + j];
          const float dh_k = dh[k] + (dy != nullptr ? dy[t * step_state + k] : 0.0f);
          const float tanh_c = tanh_ct[k];
          const float dc_k = dc[k] + dh_k * out_gate * (1.0f - tanh_c * tanh_c);
          const float prev = c_prev != nullptr ? c_prev[k] : 0.0f;
          drow[j] = dc_k * candidate * in_gate * (1.0f - in_gate);
          drow[h + j] = dh_k * tanh_c * out_gate * (1.0f - out_gate);
          drow[2 * h + j] = dc_k * prev * forget * (1.0f - forget);
          drow[3 * h + j] = dc_k * in_gate * (1.0f - candidate * candidate);
          dc[k] = dc_k * forget;
        }
      }
      // dh into the previous step (or h0): dG_t R.
      RETURN_IF_ERROR(cpu::Sgemm(false, false, s.batch, h, g, 1.0f, dgt, in.r, 0.0f, dh.data(), threads));
    }
    std::copy_n(dh.data(), step_state, out[4]->data<float>());
    std::copy_n(dc.data(), step_state, out[5]->data<float>());

    const float* dg = dgates.data();
    RETURN_IF_ERROR(cpu::InputGrads(s, dg, in.x, in.w, out[0]->data<float>(), out[1]->data<float>(), threads));
    // dr = sum over steps of dG_t^T h_{t-1}.
    RETURN_IF_ERROR(cpu::RecurrentWeightGrad(s, dg, g, in.y, h0, out[2]->data<float>(), threads));
    cpu::AddColumnSums(dg, rows, g, g, out[3]->data<float>());
    return absl::OkStatus();
  }

 private:
  int64_t hidden_ = 0;
  bool reverse_ = false, has_dy_ = true, has_dh_last_ = false, has_dc_last_ = false;
  DenseEltwise eltwise_;
};

}  // namespace

NEREID_REGISTER_KERNEL("LstmLayer", kCpu, DT_FLOAT, LstmLayerKernel);
NEREID_REGISTER_KERNEL("LstmLayerGrad", kCpu, DT_FLOAT, LstmLayerGradKernel);

}  // namespace nereid
