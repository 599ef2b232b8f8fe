// Top-k sparsification with error feedback and momentum correction, as in
// Deep Gradient Compression (Lin et al., 2018, "Deep Gradient Compression:
// Reducing the Communication Bandwidth for Distributed Training"). Per step,
// with momentum m, velocity u and residual v (both per rank):
//
//   u = m * u + g;  v = v + u          (m = 0: v = v + g, plain error feedback)
//   send the k largest |v_i| as (index, value) pairs, k = max(1, ceil(ratio * n))
//   v_i = u_i = 0 at the sent indices  (momentum factor masking)
//
// What is not sent stays in v and goes out later, so nothing is lost. With
// momentum correction the codec applies the momentum: run the optimizer
// without it (sgd momentum=0), or momentum is applied twice. Index sets differ
// between ranks, so the codes are all-gathered, not summed.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "compress/codec.h"
#include "compress/topk_select.h"

namespace nereid {
namespace {

class TopKCodec : public GatherCodec {
 public:
  absl::Status Init(const std::vector<int64_t>& dims, const CodecOptions& o) override {
    elements_ = ElementCount(dims);
    absl::StatusOr<double> ratio = o.Number("ratio", 0.01);
    if (!ratio.ok()) return ratio.status();
    if (!(*ratio > 0 && *ratio <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("codec option ratio=", *ratio, " must be in (0, 1]"));
    }
    absl::StatusOr<double> momentum = o.Number("momentum", 0.9);
    if (!momentum.ok()) return momentum.status();
    if (!(*momentum >= 0 && *momentum < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("codec option momentum=", *momentum, " must be in [0, 1)"));
    }
    if (elements_ > int64_t{std::numeric_limits<uint32_t>::max()}) {
      return absl::InvalidArgumentError(
          absl::StrCat("topk: a gradient of ", elements_, " values is too large for its uint32 indices"));
    }
    momentum_ = static_cast<float>(*momentum);
    // The slack keeps a product like 0.07 * 100 = 7.000000000000001 at 7.
    const int64_t k = static_cast<int64_t>(std::ceil(*ratio * static_cast<double>(elements_) - 1e-6));
    k_ = std::min(std::max<int64_t>(1, k), elements_);
    return absl::OkStatus();
  }

  // Without momentum correction u is never read: no buffer for it.
  std::vector<CodecStateSpec> State() const override {
    std::vector<CodecStateSpec> state;
    if (momentum_ > 0) state.push_back({"momentum", {elements_}, true});
    state.push_back({"residual", {elements_}, true});
    return state;
  }

  int64_t PayloadFloats() const override { return 2 * k_; }

  void Encode(const CodecStep&, int, absl::Span<const float> g, std::vector<absl::Span<float>> state,
              absl::Span<float> code) override {
    absl::Span<float> v = state.back();
    float* u = momentum_ > 0 ? state[0].data() : nullptr;
    for (int64_t i = 0; i < elements_; ++i) {
      codes::TopKAccumulate(momentum_, g[i], u == nullptr ? nullptr : u + i, &v[i]);
    }

    // A total order (codes::TopKKey), so the selection is the same on every
    // run and on the GPU.
    auto before = [&](uint32_t a, uint32_t b) { return codes::TopKKey(v[a], a) < codes::TopKKey(v[b], b); };
    std::vector<uint32_t> index(elements_);
    std::iota(index.begin(), index.end(), 0u);
    if (k_ < elements_) std::nth_element(index.begin(), index.begin() + k_, index.end(), before);
    index.resize(k_);
    std::sort(index.begin(), index.end());  // ascending: a cache-friendly scatter

    for (int64_t j = 0; j < k_; ++j) {
      const uint32_t i = index[j];
      std::memcpy(&code[2 * j], &i, sizeof(i));  // bits, not a number: never summed
      code[2 * j + 1] = v[i];
      v[i] = 0.0f;
      if (momentum_ > 0) state[0][i] = 0.0f;
    }
  }

  void DecodeAdd(absl::Span<const float> code, absl::Span<float> out) const override {
    for (int64_t j = 0; j < k_; ++j) {
      uint32_t i;
      std::memcpy(&i, &code[2 * j], sizeof(i));
      if (i < out.size()) out[i] += code[2 * j + 1];  // a corrupt index must not write out of bounds
    }
  }

 private:
  int64_t elements_ = 0;
  int64_t k_ = 1;
  float momentum_ = 0.9f;

 public:
  double applied_momentum() const override { return momentum_; }
};

NEREID_REGISTER_CODEC({"topk",
                       "Top-k sparsification with error feedback and DGC momentum correction: the k largest "
                       "|accumulated| values as (index, value) pairs; all-gathered. With momentum > 0 run the "
                       "optimizer without momentum",
                       {{"ratio", "(0.01) fraction of values sent per step, in (0, 1]; k = max(1, ceil(ratio*n))"},
                        {"momentum", "(0.9) momentum applied before selection, in [0, 1); 0: plain top-k with "
                                     "error feedback"}},
                       [] { return std::make_unique<TopKCodec>(); }});

}  // namespace
}  // namespace nereid
