#ifndef NEREID_COMPRESS_CODEC_H_
#define NEREID_COMPRESS_CODEC_H_

// Gradient codecs: how one gradient tensor is averaged across the ranks in a
// compressed form. The compress pass routes each selected gradient through a
// CompressedAllReduce node, whose kernel runs the node's codec on the
// collective engine's thread.
//
// Two families:
//  - Gather codecs (QSGD, TernGrad, top-k, 1-bit): the encoded form is not
//    summable (each rank's scale or index set differs), so every rank's code
//    is all-gathered and each rank decodes all of them, in rank order, into
//    the average. Derive from GatherCodec and write Encode and DecodeAdd: the
//    encode/decode pair.
//  - Summable codecs (PowerSGD, GradiVeQ): the encoding is linear in the
//    gradient with a basis every rank shares, so the codes are summed by
//    allreduce itself. Write the rounds: RoundFloats, Contribute, Absorb.
// A node's gradients share one collective per round (AverageFused).
//
// State (error-feedback residuals, DGC momentum, PowerSGD's Q, GradiVeQ's
// basis) lives in graph Parameters the pass creates from State(): it is
// checkpointed and resumed like any state. Per-rank state (a residual is this
// rank's own) is marked so: each rank checkpoints its own copy.
//
// Determinism: every rank must end with bitwise the same average, so decoding
// and summing go in a fixed order, and randomness (stochastic rounding) comes
// from CodecStep::Random, seeded by (seed, step, rank, layer).
//
// Adding a codec: one file NAME_codec.cc in this directory with the class and
// NEREID_REGISTER_CODEC; the BUILD globs it.

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compress/bucket_codes.h"
#include "compress/gradiveq_steps.h"
#include "core/registration.h"

namespace nereid {

// The communication a codec may use; backed by the worker's communicator, or
// by a lone worker (world 1) where both calls are copies.
class CodecComm {
 public:
  virtual ~CodecComm() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // In place: every rank ends with the sum over ranks.
  virtual absl::Status AllReduceSum(absl::Span<float> data) = 0;
  // `out` (world * in.size()) ends with rank 0's block first.
  virtual absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out) = 0;
};

// A lone worker's CodecComm.
class LocalCodecComm : public CodecComm {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  absl::Status AllReduceSum(absl::Span<float>) override { return absl::OkStatus(); }
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out) override;
};

// The number of values in a tensor of `dims`.
inline int64_t ElementCount(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Key=value options of a codec, as the compress pass received them.
class CodecOptions {
 public:
  CodecOptions() = default;
  explicit CodecOptions(std::map<std::string, std::string> values) : values_(std::move(values)) {}
  // "k=v;k=v" (the node attribute's form) and back.
  static absl::StatusOr<CodecOptions> Parse(const std::string& text);
  std::string ToString() const;

  // The value of `key`, or `fallback`; an error names a malformed value.
  absl::StatusOr<double> Number(const std::string& key, double fallback) const;
  absl::StatusOr<int64_t> Integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  // One of `allowed`; an error lists them.
  absl::StatusOr<std::string> Choice(const std::string& key, const std::string& fallback,
                                     const std::vector<std::string>& allowed) const;
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::map<std::string, std::string> values_;
};

struct CodecStateSpec {
  std::string name;           // suffix of the state Parameter: "<layer>/<name>"
  std::vector<int64_t> dims;
  bool per_rank = false;      // differs between ranks (error feedback)
};

enum class CodecCollective { kAllReduce, kAllGather };

// Uniform floats in [0, 1) for stochastic rounding, one per value per step:
// splitmix64, several times cheaper than std::uniform_real_distribution over
// a Mersenne twister, with 24 random bits per float.
class UniformSource {
 public:
  explicit UniformSource(uint64_t seed) : state_(seed) {}
  float Next() { return codes::MixToUniform(state_ += codes::kUniformStride); }

 private:
  uint64_t state_;
};

// Where one run of a codec stands.
struct CodecStep {
  int64_t step = 0;
  int64_t seed = 0;
  int64_t layer = 0;  // the gradient's place among compressed ones
  // A generator seeded by (seed, step, rank, layer): the same on a rerun.
  std::mt19937_64 Random(int rank) const;
  // The same seeding for stochastic rounding.
  UniformSource Uniform(int rank) const { return UniformSource(UniformSeed(rank)); }
  // Its seed: draw k is codes::UniformAt(UniformSeed(rank), k).
  uint64_t UniformSeed(int rank) const { return Random(rank)(); }
};

// PowerSGD's draws for Q's zero columns: N(0, 1) values for every entry of
// an m x r matrix, from a generator seeded alike on every rank, in one
// fixed sequence (the host codec and its GPU kernels take the same).
std::vector<float> PowerSgdSeedDraws(const CodecStep& step, int64_t m, int64_t r);

class GradientCodec {
 public:
  virtual ~GradientCodec() = default;
  // Whether the method is meant for a gradient of `dims` (GradiVeQ: conv
  // filters only); the compress pass leaves the others in dense buckets.
  virtual bool Suits(const std::vector<int64_t>& dims) const { return true; }
  // Checks the options against a gradient of `dims` (called once per node).
  virtual absl::Status Init(const std::vector<int64_t>& dims, const CodecOptions& options) = 0;
  virtual CodecCollective collective() const = 0;
  // The momentum the codec applies to the gradient itself (top-k's DGC
  // momentum correction), 0 if none: the optimizer must then not apply its own.
  virtual double applied_momentum() const { return 0; }
  // State Parameters this codec keeps for the gradient (zero-initialised).
  virtual std::vector<CodecStateSpec> State() const { return {}; }
  // The floats one rank puts into the collective per step (its payload), for
  // the plan's byte accounting; the dense gradient is elements() floats.
  // For a variable-length code, an upper bound.
  virtual int64_t PayloadFloats() const = 0;
  // Whether codes vary in length with the gradient (entropy-coded QSGD); the
  // byte accounting then marks PayloadFloats() as a bound.
  virtual bool variable_length() const { return false; }
  // The layout of a bucketed code (compress/bucket_codes.h) written by the
  // coder in <method>_buckets.h, whose GPU kernels run it; for a code of
  // variable length, the layout whose fields it codes in words of variable
  // length (QSGD's Elias coding: qsgd_elias_buckets.h); nullopt where the
  // code is not bucketed (top-k, the summable codecs).
  virtual std::optional<codes::BucketLayout> bucket_layout() const { return std::nullopt; }
  // GradiVeQ's slices and schedule (compress/gradiveq_steps.h), whose GPU
  // kernels run it; nullopt for the other codecs.
  virtual std::optional<codes::GradiveqCode> gradiveq_code() const { return std::nullopt; }

  // A step runs in rounds (PowerSGD: 2, the others: 1). In round r each rank
  // writes RoundFloats(r) floats with Contribute; they go through the codec's
  // collective, fused with the other gradients of the node into one call:
  // summed by allreduce (kAllReduce: Absorb gets the sum, RoundFloats(r)
  // floats) or all-gathered (kAllGather: Absorb gets world blocks of
  // RoundFloats(r) floats, rank 0's first). After the last round's Absorb,
  // `average` holds the average over the ranks, bitwise the same on every
  // rank. `state` is State()'s tensors, read and updated in place; the codec
  // object may keep scratch between the rounds of one step (one step at a
  // time).
  virtual int Rounds() const { return 1; }
  virtual int64_t RoundFloats(const CodecStep& step, int round, const std::vector<absl::Span<float>>& state) const = 0;
  virtual void Contribute(const CodecStep& step, int round, int rank, absl::Span<const float> gradient,
                          const std::vector<absl::Span<float>>& state, absl::Span<float> out) = 0;
  virtual void Absorb(const CodecStep& step, int round, int world, absl::Span<const float> gradient,
                      const std::vector<absl::Span<float>>& state, absl::Span<const float> in,
                      absl::Span<float> average) = 0;

  // All rounds for this gradient alone (tests, and the unfused path).
  absl::Status Average(const CodecStep& step, absl::Span<const float> gradient, std::vector<absl::Span<float>> state,
                       absl::Span<float> average, CodecComm& comm);
};

// One gradient of a fused CompressedAllReduce node.
struct FusedGradient {
  GradientCodec* codec;
  CodecStep step;
  absl::Span<const float> gradient;
  std::vector<absl::Span<float>> state;
  absl::Span<float> average;
};

// Averages every gradient of `fused` (one method, so one collective kind) with
// one collective per round for all of them: a node's compressed layers cost
// one ring's latency, not one each.
absl::Status AverageFused(std::vector<FusedGradient>& fused, CodecComm& comm);

// Base for gather codecs: Contribute = Encode, Absorb = the average of
// DecodeAdd over the ranks' codes, in rank order. One round for fixed-length
// codes. A variable-length code takes two: the ranks all-gather the lengths
// of their codes, then the codes, each padded to the longest.
class GatherCodec : public GradientCodec {
 public:
  CodecCollective collective() const override { return CodecCollective::kAllGather; }
  int Rounds() const override { return variable_length() ? 2 : 1; }
  int64_t RoundFloats(const CodecStep&, int round, const std::vector<absl::Span<float>>&) const override;
  void Contribute(const CodecStep& step, int round, int rank, absl::Span<const float> gradient,
                  const std::vector<absl::Span<float>>& state, absl::Span<float> out) override;
  void Absorb(const CodecStep& step, int round, int world, absl::Span<const float> gradient,
              const std::vector<absl::Span<float>>& state, absl::Span<const float> in,
              absl::Span<float> average) override;

  // Writes at most PayloadFloats() floats of code for `gradient`; may update
  // state (an error-feedback residual becomes what the code leaves out).
  virtual void Encode(const CodecStep& step, int rank, absl::Span<const float> gradient,
                      std::vector<absl::Span<float>> state, absl::Span<float> code) = 0;
  // out += decode(code); `code` may run on past the code (padding).
  virtual void DecodeAdd(absl::Span<const float> code, absl::Span<float> out) const = 0;
  // How many floats of `code` (PayloadFloats() long) Encode used; variable-
  // length codes say so.
  virtual int64_t UsedFloats(absl::Span<const float> code) const { return static_cast<int64_t>(code.size()); }

 private:
  // Between the two rounds of a variable-length step.
  std::vector<float> code_;
  int64_t used_ = 0, longest_ = 0;
};

// Base for gather codecs that send their tensor in buckets of `bucket` values
// (the "bucket" option, 512 unless given), each bucket as `head` float32
// values then `bits` bits per value (compress/bucket_codes.h): 1-bit SGD,
// TernGrad.
class BucketedGatherCodec : public GatherCodec {
 public:
  BucketedGatherCodec(int head, int bits) { layout_.head = head, layout_.bits = bits; }
  absl::Status Init(const std::vector<int64_t>& dims, const CodecOptions& o) override;
  int64_t PayloadFloats() const override { return layout_.Floats(); }
  std::optional<codes::BucketLayout> bucket_layout() const override { return layout_; }

 protected:
  int64_t elements() const { return layout_.elements; }
  const codes::BucketLayout& layout() const { return layout_; }

 private:
  codes::BucketLayout layout_;
};

class CodecRegistry {
 public:
  using Factory = std::function<std::unique_ptr<GradientCodec>()>;
  struct Entry {
    std::string name;
    std::string summary;
    // The option keys it takes, each with "(default) meaning" for the docs.
    std::vector<std::pair<std::string, std::string>> options;
    Factory factory;
  };
  static CodecRegistry& Global();
  // Fails on an empty or taken name, or a missing factory.
  absl::Status Register(Entry entry);
  // The error lists the registered names.
  absl::StatusOr<std::unique_ptr<GradientCodec>> Create(const std::string& name) const;
  const Entry* Find(const std::string& name) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, Entry> entries_;
};

}  // namespace nereid

#define NEREID_REGISTER_CODEC(...) NEREID_REGISTER(::nereid::CodecRegistry, ::nereid::CodecRegistry::Entry __VA_ARGS__)

#endif  // NEREID_COMPRESS_CODEC_H_
