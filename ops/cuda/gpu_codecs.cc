#include "ops/cuda/gpu_codecs.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/cuda/codec_gpu.h"

namespace nereid::cuda {
namespace {

// A gather codec: one round, every rank's code all-gathered and decoded.
class GatherGpuCodec : public GpuCodec {
 public:
  int64_t round_floats(int) const override { return floats(); }
  size_t scratch_bytes(int) const override { return encode_scratch_bytes(); }
  int Contribute(int, const CodecStep& step, int rank, const float* g, const std::vector<float*>& state,
                 void* scratch, const GpuRoundSize&, float* out, cudaStream_t stream) const override {
    return Encode(g, state, step.UniformSeed(rank), scratch, out, stream);
  }
  int Absorb(int, const CodecStep&, const float* in, int64_t stride, const GpuRoundSize&, int world,
             const std::vector<float*>&, void*, float* average, cudaStream_t stream) const override {
    return DecodeAverage(in, stride, world, average, stream);
  }

 protected:
  virtual int64_t floats() const = 0;
  virtual size_t encode_scratch_bytes() const = 0;
  virtual int Encode(const float* g, const std::vector<float*>& state, uint64_t seed, void* scratch, float* code,
                     cudaStream_t stream) const = 0;
  virtual int DecodeAverage(const float* codes, int64_t stride, int world, float* average,
                            cudaStream_t stream) const = 0;
};

// A bucketed code (compress/bucket_codes.h); 1-bit SGD's residual is its
// one state tensor.
class BucketedGpuCodec : public GatherGpuCodec {
 public:
  BucketedGpuCodec(codecs::Coder coder, codes::BucketLayout layout)
      : coder_(coder), layout_(layout), scratch_(codecs::EncodeScratchBytes(coder, layout)) {}

 private:
  size_t encode_scratch_bytes() const override { return scratch_; }
  int64_t floats() const override { return layout_.Floats(); }
  int Encode(const float* g, const std::vector<float*>& state, uint64_t seed, void* scratch, float* code,
             cudaStream_t stream) const override {
    return codecs::Encode(coder_, layout_, g, state.empty() ? nullptr : state[0], seed, scratch, scratch_, code,
                          stream);
  }
  int DecodeAverage(const float* codes, int64_t stride, int world, float* average,
                    cudaStream_t stream) const override {
    return codecs::DecodeAverage(coder_, layout_, codes, stride, world, average, stream);
  }

  codecs::Coder coder_;
  codes::BucketLayout layout_;
  size_t scratch_;
};

// QSGD's Elias coding: round 0 encodes into the scratch and sends the
// code's length; round 1 sends the code padded to the longest rank's, and
// decodes every rank's. Scratch: the code, then the encode's or the
// decode's own.
class EliasGpuCodec : public GpuCodec {
 public:
  explicit EliasGpuCodec(codes::QsgdElias coder)
      : coder_(coder), encode_scratch_(codecs::EliasEncodeScratchBytes(coder)) {}
  int rounds() const override { return 2; }
  bool variable_length() const override { return true; }
  int64_t round_floats(int round) const override { return round == 0 ? 1 : coder_.BoundFloats(); }
  size_t scratch_bytes(int world) const override {
    return work_at() + std::max(encode_scratch_, codecs::EliasDecodeScratchBytes(coder_, world));
  }

  int64_t payload_floats() const override { return round_floats(1); }

  int Contribute(int round, const CodecStep& step, int rank, const float* g, const std::vector<float*>&,
                 void* scratch, const GpuRoundSize& size, float* out, cudaStream_t stream) const override {
    float* code = static_cast<float*>(scratch);
    if (round == 1) return codecs::EliasPad(code, size.floats, out, stream);
    const int encoded = codecs::EliasEncode(coder_, g, step.UniformSeed(rank), work(scratch), encode_scratch_, code,
                                            stream);
    if (encoded != cudaSuccess) return encoded;
    return cudaMemcpyAsync(out, code, sizeof(float), cudaMemcpyDeviceToDevice, stream);  // the length word
  }

  int Absorb(int round, const CodecStep&, const float* in, int64_t stride, const GpuRoundSize& size, int world,
             const std::vector<float*>&, void* scratch, float* average, cudaStream_t stream) const override {
    if (round == 0) return cudaSuccess;  // the lengths: the kernel reads them
    return codecs::EliasDecodeAverage(coder_, in, stride, size.floats, world, work(scratch),
                                      codecs::EliasDecodeScratchBytes(coder_, world), average, stream);
  }

 private:
  size_t work_at() const { return (sizeof(float) * static_cast<size_t>(coder_.BoundFloats()) + 255) / 256 * 256; }
  void* work(void* scratch) const { return static_cast<char*>(scratch) + work_at(); }

  codes::QsgdElias coder_;
  size_t encode_scratch_;
};

// GradiVeQ, summed in one round; state [covariance, basis, residual (with
// error feedback)]. Whether a step goes exact depends on whether the basis
// is all zero, a word the kernel reads back before the steps that need it.
class GradiveqGpuCodec : public GpuCodec {
 public:
  explicit GradiveqGpuCodec(codes::GradiveqCode code) : code_(code) {}
  bool summed() const override { return true; }
  bool sized_by_state() const override { return true; }
  int WriteStateWord(const CodecStep&, const std::vector<float*>& state, uint32_t* word,
                     cudaStream_t stream) const override {
    if (state.size() < 2) return cudaErrorInvalidValue;
    return codecs::GradiveqBasisWord(code_, state[1], word, stream);
  }
  // Read in the first step after the warm-up, and on until the basis is
  // non-zero (gradiveq_steps.h): once a run, as a rule.
  bool NeedsStateWord(const CodecStep& step, const codes::StickyWord& last) const override {
    return code_.NeedsBasisWord(step.step, last);
  }
  int64_t round_floats(int) const override {
    return std::max(code_.Floats(codes::GradiveqStep::kWarmingUp), code_.Floats(codes::GradiveqStep::kCompressed));
  }
  int64_t StepRoundFloats(int, const CodecStep& step, uint32_t state_word) const override {
    return code_.Floats(Kind(step, state_word));
  }
  int64_t payload_floats() const override { return code_.Floats(codes::GradiveqStep::kCompressed); }
  size_t scratch_bytes(int) const override { return codecs::GradiveqScratchBytes(code_); }

  int Contribute(int, const CodecStep& step, int, const float* g, const std::vector<float*>& state, void*,
                 const GpuRoundSize& size, float* out, cudaStream_t stream) const override {
    if (state.size() != (code_.error_feedback ? 3u : 2u)) return cudaErrorInvalidValue;
    return codecs::GradiveqContribute(code_, Kind(step, size.state_word), g, state[1],
                                      code_.error_feedback ? state[2] : nullptr, out, stream);
  }

  int Absorb(int, const CodecStep& step, const float* in, int64_t, const GpuRoundSize& size, int world,
             const std::vector<float*>& state, void* scratch, float* average, cudaStream_t stream) const override {
    if (state.size() < 2) return cudaErrorInvalidValue;
    return codecs::GradiveqAbsorb(code_, Kind(step, size.state_word), step.step, in, world, state[0], state[1],
                                  scratch, codecs::GradiveqScratchBytes(code_), average, stream);
  }

 private:
  // The word says whether the basis holds a value other than zero.
  codes::GradiveqStep Kind(const CodecStep& step, uint32_t state_word) const {
    return code_.StepAt(step.step, /*basis_all_zero=*/state_word == 0);
  }

  codes::GradiveqCode code_;
};

// Top-k with momentum correction: state [u, v] with momentum, [v] without.
class TopKGpuCodec : public GatherGpuCodec {
 public:
  TopKGpuCodec(int64_t n, int64_t k, float momentum, size_t scratch)
      : n_(n), k_(k), momentum_(momentum), scratch_(scratch) {}

 private:
  size_t encode_scratch_bytes() const override { return scratch_; }
  int64_t floats() const override { return 2 * k_; }
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

  int64_t n_, k_;
  float momentum_;
  size_t scratch_;
};

// PowerSGD, M of n x m at rank r; state [residual (n x m), Q (m x r)].
// Scratch, kept through the step's two rounds: P (n x r floats), the
// orthonormalisation's doubles, Q's zero-column flags and the host's normal
// draws for them.
class PowerSgdGpuCodec : public GpuCodec {
 public:
  PowerSgdGpuCodec(int64_t n, int64_t m, int64_t r) : n_(n), m_(m), r_(r) {}
  bool summed() const override { return true; }
  int rounds() const override { return 2; }
  int64_t round_floats(int round) const override { return (round == 0 ? n_ : m_) * r_; }
  size_t scratch_bytes(int) const override { return normals_at() + sizeof(float) * m_ * r_; }

  int Contribute(int round, const CodecStep& step, int, const float* g, const std::vector<float*>& state,
                 void* scratch, const GpuRoundSize&, float* out, cudaStream_t stream) const override {
    if (state.size() != 2) return cudaErrorInvalidValue;
    if (round == 1) return codecs::PowerSgdContributeQ(n_, m_, r_, state[0], P(scratch), out, stream);
    // Q's zero columns take N(0, 1) draws made as the host codec makes them
    // (every entry, a fixed sequence); whether a column is zero is known on
    // the device only, so they are drawn and sent every step.
    const std::vector<float> normals = PowerSgdSeedDraws(step, m_, r_);
    float* device_normals = reinterpret_cast<float*>(static_cast<char*>(scratch) + normals_at());
    // From pageable memory: returns once `normals` is staged.
    const cudaError_t copied = cudaMemcpyAsync(device_normals, normals.data(), normals.size() * sizeof(float),
                                               cudaMemcpyHostToDevice, stream);
    if (copied != cudaSuccess) return copied;
    return codecs::PowerSgdContributeP(n_, m_, r_, g, state[0], state[1], device_normals,
                                       static_cast<unsigned char*>(scratch) + flags_at(), out, stream);
  }

  int Absorb(int round, const CodecStep&, const float* in, int64_t, const GpuRoundSize&, int world,
             const std::vector<float*>& state, void* scratch, float* average, cudaStream_t stream) const override {
    if (state.size() != 2) return cudaErrorInvalidValue;
    if (round == 0) {
      double* col = static_cast<double*>(scratch);
      return codecs::PowerSgdAbsorbP(n_, r_, in, world, P(scratch), col, col + n_, stream);
    }
    return codecs::PowerSgdAbsorbQ(n_, m_, r_, in, world, P(scratch), state[1], state[0], average, stream);
  }

 private:
  // [col: n doubles][basis: n*r doubles][P: n*r floats][flags: r bytes][normals: m*r floats]
  size_t p_at() const { return sizeof(double) * (n_ + n_ * r_); }
  size_t flags_at() const { return p_at() + sizeof(float) * n_ * r_; }
  size_t normals_at() const { return (flags_at() + r_ + 15) / 16 * 16; }
  float* P(void* scratch) const { return reinterpret_cast<float*>(static_cast<char*>(scratch) + p_at()); }

  int64_t n_, m_, r_;
};

using Maker = std::function<std::unique_ptr<GpuCodec>(const GradientCodec&, int64_t elements)>;

std::unique_ptr<GpuCodec> Bucketed(codecs::Coder coder, const GradientCodec& host) {
  const std::optional<codes::BucketLayout> layout = host.bucket_layout();
  if (!layout.has_value() || layout->Buckets() > INT_MAX) return nullptr;  // past a scan's int count
  return std::make_unique<BucketedGpuCodec>(coder, *layout);
}

const std::map<std::string, Maker>& Makers() {
  static const auto* makers = new std::map<std::string, Maker>{
      {"gradiveq",
       [](const GradientCodec& host, int64_t) -> std::unique_ptr<GpuCodec> {
         const std::optional<codes::GradiveqCode> code = host.gradiveq_code();
         if (!code.has_value()) return nullptr;
         return std::make_unique<GradiveqGpuCodec>(*code);
       }},
      {"onebit", [](const GradientCodec& host, int64_t) { return Bucketed(codecs::Coder::kOneBit, host); }},
      {"powersgd",
       [](const GradientCodec& host, int64_t) -> std::unique_ptr<GpuCodec> {
         const std::vector<CodecStateSpec> state = host.State();  // residual (n x m), Q (m x r)
         if (state.size() != 2 || state[0].dims.size() != 2 || state[1].dims.size() != 2) return nullptr;
         return std::make_unique<PowerSgdGpuCodec>(state[0].dims[0], state[0].dims[1], state[1].dims[1]);
       }},
      {"qsgd",
       [](const GradientCodec& host, int64_t) -> std::unique_ptr<GpuCodec> {
         if (!host.variable_length()) return Bucketed(codecs::Coder::kQsgd, host);
         // Elias coding: the words of the fixed coding's fields.
         const std::optional<codes::BucketLayout> layout = host.bucket_layout();
         if (!layout.has_value()) return nullptr;
         const codes::QsgdElias coder{codes::QsgdBuckets{*layout}};
         if (codecs::EliasEncodeScratchBytes(coder) == 0) return nullptr;  // past a scan's int count
         return std::make_unique<EliasGpuCodec>(coder);
       }},
      {"terngrad", [](const GradientCodec& host, int64_t) { return Bucketed(codecs::Coder::kTernGrad, host); }},
      {"topk",
       [](const GradientCodec& host, int64_t elements) -> std::unique_ptr<GpuCodec> {
         const int64_t k = host.PayloadFloats() / 2;
         const size_t scratch = codecs::TopKScratchBytes(elements, k);
         if (scratch == 0) return nullptr;  // past a radix sort's int count
         return std::make_unique<TopKGpuCodec>(elements, k, static_cast<float>(host.applied_momentum()), scratch);
       }},
  };
  return *makers;
}

}  // namespace

int64_t GpuCodec::payload_floats() const {
  int64_t floats = 0;
  for (int round = 0; round < rounds(); ++round) floats += round_floats(round);
  return floats;
}

absl::StatusOr<std::unique_ptr<GpuCodec>> MakeGpuCodec(const std::string& method, const GradientCodec& host,
                                                       int64_t elements) {
  auto maker = Makers().find(method);
  std::unique_ptr<GpuCodec> codec = maker == Makers().end() ? nullptr : maker->second(host, elements);
  if (codec != nullptr && codec->rounds() == host.Rounds() &&
      codec->summed() == (host.collective() == CodecCollective::kAllReduce)) {
    if (codec->variable_length() == host.variable_length() && codec->payload_floats() == host.PayloadFloats()) {
      return codec;
    }
  }
  std::vector<std::string> names;
  for (const auto& [name, m] : Makers()) names.push_back(name);
  return absl::UnimplementedError(absl::StrCat("the ", method, " codec",
                                               maker == Makers().end() ? "" : " with these options",
                                               " has no GPU kernels; the GPU runs ", absl::StrJoin(names, ", ")));
}

}  // namespace nereid::cuda
