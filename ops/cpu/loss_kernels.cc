// Classification losses over logits [..., K] and integer labels [...] (rows:
// every position but the classes), and their gradients. Each returns the
// mean over the labelled rows (a label equal to ignore_index is skipped);
// rows are independent, so the loops are plain and summed in row order
// (deterministic). A label outside [0, K) that is not ignore_index is an
// error naming the row and the value, never an out-of-bounds read.

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

constexpr int64_t kIgnored = -1;  // a row out of the loss

absl::StatusOr<std::vector<int64_t>> ReadLabels(const Tensor& labels, int64_t num_classes, int64_t ignore_index) {
  std::vector<int64_t> out(labels.num_elements());
  for (int64_t i = 0; i < labels.num_elements(); ++i) {
    int64_t v = labels.dtype() == DT_INT64 ? labels.data<int64_t>()[i] : labels.data<int32_t>()[i];
    if (v == ignore_index) {
      out[i] = kIgnored;
      continue;
    }
    if (v < 0 || v >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", v, " in row ", i, " is outside [0, ", num_classes, ")"));
    }
    out[i] = v;
  }
  return out;
}

// -log softmax(s)[y] = logsumexp(s) - s[y]; also fills softmax if asked.
double SoftmaxRow(const float* s, int64_t k, int64_t y, float* softmax) {
  float max = *std::max_element(s, s + k);
  double sum = 0;
  for (int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(s[j] - max));
  if (softmax != nullptr) {
    for (int64_t j = 0; j < k; ++j) softmax[j] = static_cast<float>(std::exp(static_cast<double>(s[j] - max)) / sum);
  }
  return std::log(sum) + max - s[y];
}

// log(1 + exp(z)) without overflow.
double Softplus(double z) { return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z)); }

struct SoftmaxCrossEntropy {
  static double Loss(const float* s, int64_t k, int64_t y, float) { return SoftmaxRow(s, k, y, nullptr); }
  // d row loss / d s.
  static void Grad(const float* s, int64_t k, int64_t y, float, float* ds) {
    SoftmaxRow(s, k, y, ds);
    ds[y] -= 1;
  }
};

struct HingeLoss {
  static double Loss(const float* s, int64_t k, int64_t y, float margin) {
    double loss = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (j != y) loss += std::max(0.0, static_cast<double>(margin) - s[y] + s[j]);
    }
    return loss;
  }
  static void Grad(const float* s, int64_t k, int64_t y, float margin, float* ds) {
    float violated = 0;
    for (int64_t j = 0; j < k; ++j) {
      ds[j] = (j != y && margin - s[y] + s[j] > 0) ? 1.0f : 0.0f;
      violated += ds[j];
    }
    ds[y] = -violated;
  }
};

struct LogisticLoss {
  static double Loss(const float* s, int64_t k, int64_t y, float) {
    double loss = 0;
    for (int64_t j = 0; j < k; ++j) loss += Softplus(j == y ? -s[j] : s[j]);
    return loss;
  }
  static void Grad(const float* s, int64_t k, int64_t y, float, float* ds) {
    for (int64_t j = 0; j < k; ++j) {
      double sign = j == y ? 1.0 : -1.0;
      ds[j] = static_cast<float>(-sign / (1.0 + std::exp(sign * s[j])));
    }
  }
};

// Reads the hinge margin (the other losses have none) and the ignored label.
class ClassLossKernelBase : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    auto it = attrs.find("margin");
    if (it != attrs.end()) margin_ = it->second->f();
    auto ignore = attrs.find("ignore_index");
    if (ignore != attrs.end()) ignore_index_ = ignore->second->i();
    return absl::OkStatus();
  }

 protected:
  // Rows (every position but the last) and classes of logits; the labelled
  // rows' count.
  static std::pair<int64_t, int64_t> RowsOf(const Tensor& logits) {
    const int64_t k = logits.dim(logits.rank() - 1);
    return {k == 0 ? 0 : logits.num_elements() / k, k};
  }
  static int64_t Labelled(const std::vector<int64_t>& labels) {
    return static_cast<int64_t>(std::count_if(labels.begin(), labels.end(), [](int64_t y) { return y != kIgnored; }));
  }

  float margin_ = 1.0f;
  int64_t ignore_index_ = -100;
};

template <typename L>
class LossKernel : public ClassLossKernelBase {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const auto [n, k] = RowsOf(logits);
    ASSIGN_OR_RETURN(std::vector<int64_t> labels, ReadLabels(ctx->input(1), k, ignore_index_));
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (labels[i] != kIgnored) total += L::Loss(logits.data<float>() + i * k, k, labels[i], margin_);
    }
    const int64_t labelled = Labelled(labels);
    out->data<float>()[0] = labelled > 0 ? static_cast<float>(total / static_cast<double>(labelled)) : 0.0f;
    return absl::OkStatus();
  }
};

// (logits, labels, dloss) -> dlogits = dloss * d(mean loss)/d logits.
template <typename L>
class LossGradKernel : public ClassLossKernelBase {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const auto [n, k] = RowsOf(logits);
    ASSIGN_OR_RETURN(std::vector<int64_t> labels, ReadLabels(ctx->input(1), k, ignore_index_));
    const int64_t labelled = Labelled(labels);
    float scale = labelled > 0 ? ctx->input(2).data<float>()[0] / static_cast<float>(labelled) : 0.0f;
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    for (int64_t i = 0; i < n; ++i) {
      float* ds = out->data<float>() + i * k;
      if (labels[i] == kIgnored) {
        std::fill(ds, ds + k, 0.0f);
        continue;
      }
      L::Grad(logits.data<float>() + i * k, k, labels[i], margin_, ds);
      for (int64_t j = 0; j < k; ++j) ds[j] *= scale;
    }
    return absl::OkStatus();
  }
};

NEREID_REGISTER_KERNEL("SoftmaxCrossEntropy", kCpu, DT_FLOAT, LossKernel<SoftmaxCrossEntropy>);
NEREID_REGISTER_KERNEL("SoftmaxCrossEntropyGrad", kCpu, DT_FLOAT, LossGradKernel<SoftmaxCrossEntropy>);
NEREID_REGISTER_KERNEL("HingeLoss", kCpu, DT_FLOAT, LossKernel<HingeLoss>);
NEREID_REGISTER_KERNEL("HingeLossGrad", kCpu, DT_FLOAT, LossGradKernel<HingeLoss>);
NEREID_REGISTER_KERNEL("LogisticLoss", kCpu, DT_FLOAT, LossKernel<LogisticLoss>);
NEREID_REGISTER_KERNEL("LogisticLossGrad", kCpu, DT_FLOAT, LossGradKernel<LogisticLoss>);

}  // namespace
}  // namespace nereid
