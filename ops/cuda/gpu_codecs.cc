#include "ops/cuda/gpu_codecs.h"

#include <climits>
#include <functional>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/cuda/codec_gpu.h"

namespace nereid::cuda {
namespace {

// A bucketed code (compress/bucket_codes.h); 1-bit SGD's residual is its
// one state tensor.
class BucketedGpuCodec : public GpuCodec {
 public:
  BucketedGpuCodec(codecs::Coder coder, codes::BucketLayout layout)
      : coder_(coder), layout_(layout), scratch_(codecs::EncodeScratchBytes(coder, layout)) {}
  int64_t floats() const override { return layout_.Floats(); }
  size_t scratch_bytes() const override { return scratch_; }
  int Encode(const float* g, const std::vector<float*>& state, uint64_t seed, void* scratch, float* code,
             cudaStream_t stream) const override {
    return codecs::Encode(coder_, layout_, g, state.empty() ? nullptr : state[0], seed, scratch, scratch_, code,
                          stream);
  }
  int DecodeAverage(const float* codes, int64_t stride, int world, float* average,
                    cudaStream_t stream) const override {
    return codecs::DecodeAverage(coder_, layout_, codes, stride, world, average, stream);
  }

 private:
  codecs::Coder coder_;
  codes::BucketLayout layout_;
  size_t scratch_;
};

// Top-k with momentum correction: state [u, v] with momentum, [v] without.
class TopKGpuCodec : public GpuCodec {
 public:
  TopKGpuCodec(int64_t n, int64_t k, float momentum)
      : n_(n), k_(k), momentum_(momentum), scratch_(codecs::TopKScratchBytes(n, k)) {}
  int64_t floats() const override { return 2 * k_; }
  size_t scratch_bytes() const override { return scratch_; }
  int Encode(const float* g, const std::vector<float*>& state, uint64_t, void* scratch, float* code,
             cudaStream_t stream) const override {
    if (state.empty()) return cudaErrorInvalidValue;
    return codecs::TopKEncode(n_, k_, momentum_, g, state.size() > 1 ? state[0] : nullptr, state.back(), scratch,
                              scratch_, code, stream);
  }
  int DecodeAverage(const float* codes, int64_t stride, int world, float* average,
                    cudaStream_t stream) const override {
    return codecs::TopKDecodeAverage(n_, k_, codes, stride, world, average, stream);
  }

 private:
  int64_t n_, k_;
  float momentum_;
  size_t scratch_;
};

using Maker = std::function<std::unique_ptr<GpuCodec>(const GradientCodec&, int64_t elements)>;

std::unique_ptr<GpuCodec> Bucketed(codecs::Coder coder, const GradientCodec& host) {
  const std::optional<codes::BucketLayout> layout = host.bucket_layout();
  if (!layout.has_value() || layout->Buckets() > INT_MAX) return nullptr;  // past a scan's int count
  return std::make_unique<BucketedGpuCodec>(coder, *layout);
}

const std::map<std::string, Maker>& Makers() {
  static const auto* makers = new std::map<std::string, Maker>{
      {"onebit", [](const GradientCodec& host, int64_t) { return Bucketed(codecs::Coder::kOneBit, host); }},
      {"qsgd", [](const GradientCodec& host, int64_t) { return Bucketed(codecs::Coder::kQsgd, host); }},
      {"terngrad", [](const GradientCodec& host, int64_t) { return Bucketed(codecs::Coder::kTernGrad, host); }},
      {"topk",
       [](const GradientCodec& host, int64_t elements) -> std::unique_ptr<GpuCodec> {
         const int64_t k = host.PayloadFloats() / 2;
         if (codecs::TopKScratchBytes(elements, k) == 0) return nullptr;  // past a radix sort's int count
         return std::make_unique<TopKGpuCodec>(elements, k, static_cast<float>(host.applied_momentum()));
       }},
  };
  return *makers;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuCodec>> MakeGpuCodec(const std::string& method, const GradientCodec& host,
                                                       int64_t elements) {
  auto maker = Makers().find(method);
  std::unique_ptr<GpuCodec> codec = maker == Makers().end() ? nullptr : maker->second(host, elements);
  if (codec != nullptr && codec->floats() == host.PayloadFloats()) return codec;
  std::vector<std::string> names;
  for (const auto& [name, m] : Makers()) names.push_back(name);
  return absl::UnimplementedError(absl::StrCat("the ", method, " codec",
                                               maker == Makers().end() ? "" : " with these options",
                                               " has no GPU kernels; the GPU runs ", absl::StrJoin(names, ", "),
                                               " (qsgd with coding=fixed)"));
}

}  // namespace nereid::cuda
