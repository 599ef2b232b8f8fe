// GruLayer and its gradient through time, as LstmLayer's: one GEMM projects
// every step's input, each step adds its recurrent product (a GEMM) and
// applies the gates on dense blocks through oneDNN's logistic and tanh; the
// backward pass walks the steps in reverse, stores the pre-activation
// gradients of the input side (dGx) and of the recurrent side (dGh), and
// gets dx, dw, dr and dbias from them with a GEMM each.
//
// ONNX's GRU (gates z, r, h; bias Wb | Rb), with hp the previous h:
//   z = sigmoid(x Wz^T + hp Rz^T + Wbz + Rbz), r likewise,
//   n = tanh(x Wh^T + Wbh + r * (hp Rh^T + Rbh))   linear_before_reset
//   n = tanh(x Wh^T + Wbh + (r * hp) Rh^T + Rbh)   otherwise
//   h = (1 - z) * n + z * hp.
// The reset term stored per step is hp Rh^T + Rbh (linear_before_reset) or
// r * hp: what the gradient of r or of Rh needs.

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/recurrent_util.h"

namespace nereid {
namespace {

constexpr int kGates = 3;  // z, r, h (ONNX's order)

using cpu::DenseEltwise;
using cpu::RecurrentShape;

class GruLayerKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    hidden_ = attrs.at("hidden_size")->i();
    reverse_ = attrs.at("reverse")->b();
    linear_before_reset_ = attrs.at("linear_before_reset")->b();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const RecurrentShape s = cpu::RecurrentShapeOf(ctx->input(0), hidden_, kGates, reverse_);
    const float* r = ctx->input(2).data<float>();
    const float* wb = ctx->input(3).data<float>();
    const float* rb = wb + s.gates;
    const float* h0 = ctx->num_inputs() == 5 ? ctx->input(4).data<float>() : nullptr;
    Tensor* out[4];
    RETURN_IF_ERROR(cpu::AllocateRecurrentOutputs(ctx, 4, out, /*zeroed=*/false));
    float* y = out[0]->data<float>();
    float* gates = out[2]->data<float>();
    float* reset = out[3]->data<float>();
    const int64_t g = s.gates, h = s.hidden, step_state = s.state();
    if (s.steps == 0 || s.batch == 0) return absl::OkStatus();
    const int threads = cpu::RecurrentGemmThreads(ctx, s);
    RETURN_IF_ERROR(cpu::ProjectInputs(ctx, s, gates, threads));
    // The recurrent product of a step ([B, 3H]), the activated block and the
    // candidate's pre-activation.
    std::vector<float> recurrent(s.batch * g), activated(s.batch * g), candidate(step_state);
    for (int64_t i = 0; i < s.steps; ++i) {
      const int64_t t = s.StepAt(i);
      float* gt = gates + t * s.batch * g;
      float* reset_t = reset + t * step_state;
      const float* hp = i > 0 ? y + s.StepAt(i - 1) * step_state : h0;
      // recurrent = hp R^T + Rb: every gate with linear_before_reset, z and r
      // otherwise (the candidate's product needs r first).
      for (int64_t b = 0; b < s.batch; ++b) std::copy_n(rb, g, recurrent.data() + b * g);
      if (hp != nullptr) {
        const int64_t cols = linear_before_reset_ ? g : 2 * h;
        RETURN_IF_ERROR(cpu::Sgemm(false, true, s.batch, cols, h, 1.0f, hp, h, r, h, 1.0f, recurrent.data(), g, threads));
      }
      for (int64_t b = 0; b < s.batch; ++b) {
        float* row = gt + b * g;
        const float* rec = recurrent.data() + b * g;
        for (int64_t j = 0; j < 2 * h; ++j) row[j] += wb[j] + rec[j];
      }
      RETURN_IF_ERROR(eltwise_.Run(dnnl::algorithm::eltwise_logistic, gt, activated.data(), s.batch * g, threads));
      for (int64_t b = 0; b < s.batch; ++b) {
        const float* reset_gate = activated.data() + b * g + h;
        for (int64_t j = 0; j < h; ++j) {
          const int64_t k = b * h + j;
          reset_t[k] = linear_before_reset_ ? recurrent[b * g + 2 * h + j]
                                            : (hp != nullptr ? reset_gate[j] * hp[k] : 0.0f);
        }
      }
      if (linear_before_reset_) {
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t j = 0; j < h; ++j) {
            const int64_t k = b * h + j;
            candidate[k] = gt[b * g + 2 * h + j] + wb[2 * h + j] + activated[b * g + h + j] * reset_t[k];
          }
        }
      } else {
        // (r * hp) Rh^T + Rbh, then the input side.
        for (int64_t b = 0; b < s.batch; ++b) std::copy_n(rb + 2 * h, h, candidate.data() + b * h);
        if (hp != nullptr) {
          RETURN_IF_ERROR(cpu::Sgemm(false, true, s.batch, h, h, 1.0f, reset_t, h, r + 2 * h * h, h, 1.0f,
                                     candidate.data(), h, threads));
        }
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t j = 0; j < h; ++j) candidate[b * h + j] += gt[b * g + 2 * h + j] + wb[2 * h + j];
        }
      }
      RETURN_IF_ERROR(eltwise_.Run(dnnl::algorithm::eltwise_tanh, candidate.data(), candidate.data(), step_state,
                                   threads));
      float* yt = y + t * step_state;
      for (int64_t b = 0; b < s.batch; ++b) {
        float* row = gt + b * g;
        const float* act = activated.data() + b * g;
        for (int64_t j = 0; j < h; ++j) {
          const int64_t k = b * h + j;
          const float z = act[j], n = candidate[k];
          row[j] = z;
          row[h + j] = act[h + j];
          row[2 * h + j] = n;
          yt[k] = (1.0f - z) * n + (hp != nullptr ? z * hp[k] : 0.0f);
        }
      }
    }
    std::copy_n(y + s.StepAt(s.steps - 1) * step_state, step_state, out[1]->data<float>());
    return absl::OkStatus();
  }

 private:
  int64_t hidden_ = 0;
  bool reverse_ = false, linear_before_reset_ = false;
  DenseEltwise eltwise_;
};

class GruLayerGradKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    hidden_ = attrs.at("hidden_size")->i();
    reverse_ = attrs.at("reverse")->b();
    linear_before_reset_ = attrs.at("linear_before_reset")->b();
    has_dy_ = attrs.at("has_dy")->b();
    has_dh_last_ = attrs.at("has_dh_last")->b();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const RecurrentShape s = cpu::RecurrentShapeOf(ctx->input(0), hidden_, kGates, reverse_);
    const cpu::RecurrentGradInputs in = cpu::ReadRecurrentGradInputs(ctx, has_dy_, has_dh_last_);
    const float *r = in.r, *y = in.y, *reset = in.saved, *dy = in.dy;
    const int next = in.next;
    if (ctx->num_inputs() - next > 1) {
      return absl::InvalidArgumentError(absl::StrCat("expected at most h0 after the gradients, got ",
                                                     ctx->num_inputs() - next, " tensors"));
    }
    const float* h0 = ctx->num_inputs() > next ? ctx->input(next).data<float>() : nullptr;
    Tensor* out[5];
    RETURN_IF_ERROR(cpu::AllocateRecurrentOutputs(ctx, 5, out, /*zeroed=*/true));
    const int64_t g = s.gates, h = s.hidden, step_state = s.state(), rows = s.steps * s.batch;
    if (s.steps == 0 || s.batch == 0) return absl::OkStatus();
    const int threads = cpu::RecurrentGemmThreads(ctx, s);

    // dh into the step being visited; the two sides' pre-activation
    // gradients of every step; dh into the previous step (before the
    // recurrent product's share) and, without linear_before_reset, the
    // gradient of r * hp.
    std::vector<float> dh(step_state, 0.0f), dgx(rows * g), dgh(rows * g), dh_prev(step_state), dq(step_state);
    if (in.dh_last != nullptr) std::copy_n(in.dh_last, step_state, dh.data());
    for (int64_t i = s.steps - 1; i >= 0; --i) {
      const int64_t t = s.StepAt(i);
      const float* gt = in.gates + t * s.batch * g;
      const float* reset_t = reset + t * step_state;
      const float* hp = i > 0 ? y + s.StepAt(i - 1) * step_state : h0;
      float* dgx_t = dgx.data() + t * s.batch * g;
      float* dgh_t = dgh.data() + t * s.batch * g;
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t j = 0; j < h; ++j) {
          const int64_t k = b * h + j;
          const float z = gt[b * g + j], n = gt[b * g + 2 * h + j];
          const float dh_k = dh[k] + (dy != nullptr ? dy[t * step_state + k] : 0.0f);
          const float prev = hp != nullptr ? hp[k] : 0.0f;
          const float dn = dh_k * (1.0f - z) * (1.0f - n * n);
          dgx_t[b * g + j] = dh_k * (prev - n) * z * (1.0f - z);
          dgx_t[b * g + 2 * h + j] = dn;
          dgh_t[b * g + j] = dgx_t[b * g + j];
          dgh_t[b * g + 2 * h + j] = linear_before_reset_ ? dn * gt[b * g + h + j] : dn;
          dh_prev[k] = dh_k * z;
        }
      }
      // The reset gate's gradient: through r * (hp Rh^T + Rbh), or through
      // (r * hp) Rh^T, whose input gradient dq = dn Rh.
      if (!linear_before_reset_) {
        RETURN_IF_ERROR(cpu::Sgemm(false, false, s.batch, h, h, 1.0f, dgx_t + 2 * h, g, r + 2 * h * h, h, 0.0f,
                                   dq.data(), h, threads));
      }
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t j = 0; j < h; ++j) {
          const int64_t k = b * h + j;
          const float reset_gate = gt[b * g + h + j];
          const float prev = hp != nullptr ? hp[k] : 0.0f;
          const float dr = linear_before_reset_ ? dgx_t[b * g + 2 * h + j] * reset_t[k] : dq[k] * prev;
          if (!linear_before_reset_) dh_prev[k] += dq[k] * reset_gate;
          dgx_t[b * g + h + j] = dr * reset_gate * (1.0f - reset_gate);
          dgh_t[b * g + h + j] = dgx_t[b * g + h + j];
        }
      }
      // dh into the previous step: dGh R over the gates whose product reads hp.
      const int64_t cols = linear_before_reset_ ? g : 2 * h;
      RETURN_IF_ERROR(cpu::Sgemm(false, false, s.batch, h, cols, 1.0f, dgh_t, g, r, h, 1.0f, dh_prev.data(), h,
                                 threads));
      std::swap(dh, dh_prev);
    }
    std::copy_n(dh.data(), step_state, out[4]->data<float>());

    RETURN_IF_ERROR(
        cpu::InputGrads(s, dgx.data(), in.x, in.w, out[0]->data<float>(), out[1]->data<float>(), threads));
    float* dbias = out[3]->data<float>();
    cpu::AddColumnSums(dgx.data(), rows, g, g, dbias);
    cpu::AddColumnSums(dgh.data(), rows, g, g, dbias + g);
    // dr = sum over steps of dGh_t^T hp_t over the gates reading hp; without
    // linear_before_reset, Rh's rows pair with the stored r * hp instead.
    float* dr = out[2]->data<float>();
    RETURN_IF_ERROR(
        cpu::RecurrentWeightGrad(s, dgh.data(), linear_before_reset_ ? g : 2 * h, y, h0, dr, threads));
    if (!linear_before_reset_) {
      RETURN_IF_ERROR(cpu::Sgemm(true, false, h, h, rows, 1.0f, dgh.data() + 2 * h, g, reset, h, 0.0f, dr + 2 * h * h,
                                 h, threads));
    }
    return absl::OkStatus();
  }

 private:
  int64_t hidden_ = 0;
  bool reverse_ = false, linear_before_reset_ = false, has_dy_ = true, has_dh_last_ = false;
};

}  // namespace

NEREID_REGISTER_KERNEL("GruLayer", kCpu, DT_FLOAT, GruLayerKernel);
NEREID_REGISTER_KERNEL("GruLayerGrad", kCpu, DT_FLOAT, GruLayerGradKernel);

}  // namespace nereid
