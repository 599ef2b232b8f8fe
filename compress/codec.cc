#include "compress/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/key_values.h"

namespace nereid {

absl::Status LocalCodecComm::AllGather(absl::Span<const float> in, absl::Span<float> out) {
  if (out.size() != in.size()) return absl::InternalError("allgather: output size differs from world * input");
  std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
  return absl::OkStatus();
}

absl::StatusOr<CodecOptions> CodecOptions::Parse(const std::string& text) {
  absl::StatusOr<KeyValues> items = ParseKeyValues(text, ';', "codec option");
  if (!items.ok()) return items.status();
  return CodecOptions(std::map<std::string, std::string>(items->begin(), items->end()));
}

std::string CodecOptions::ToString() const {
  return FormatKeyValues(KeyValues(values_.begin(), values_.end()), ';');
}

absl::StatusOr<double> CodecOptions::Number(const std::string& key, double fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  double v;
  if (!absl::SimpleAtod(it->second, &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat("codec option ", key, "=", it->second, " is not a number"));
  }
  return v;
}

absl::StatusOr<int64_t> CodecOptions::Integer(const std::string& key, int64_t fallback, int64_t min,
                                              int64_t max) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("codec option ", key, "=", it->second, " is not an integer"));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec option ", key, "=", v, " must be in [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<std::string> CodecOptions::Choice(const std::string& key, const std::string& fallback,
                                                 const std::vector<std::string>& allowed) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (std::find(allowed.begin(), allowed.end(), it->second) == allowed.end()) {
    return absl::InvalidArgumentError(absl::StrCat("codec option ", key, "=", it->second, " must be one of ",
                                                   absl::StrJoin(allowed, ", ")));
  }
  return it->second;
}

std::mt19937_64 CodecStep::Random(int rank) const {
  std::seed_seq seq{static_cast<uint64_t>(seed), static_cast<uint64_t>(step), static_cast<uint64_t>(rank),
                    static_cast<uint64_t>(layer), uint64_t{0x51C0DEC}};
  return std::mt19937_64(seq);
}

absl::Status GradientCodec::Average(const CodecStep& step, absl::Span<const float> gradient,
                                    std::vector<absl::Span<float>> state, absl::Span<float> average,
                                    CodecComm& comm) {
  std::vector<FusedGradient> one = {{this, step, gradient, std::move(state), average}};
  return AverageFused(one, comm);
}

absl::Status AverageFused(std::vector<FusedGradient>& fused, CodecComm& comm) {
  if (fused.empty()) return absl::OkStatus();
  const CodecCollective kind = fused[0].codec->collective();
  int rounds = 0;
  for (const FusedGradient& f : fused) {
    if (f.codec->collective() != kind) return absl::InternalError("a fused node mixes allreduce and allgather codecs");
    rounds = std::max(rounds, f.codec->Rounds());
  }
  const int world = comm.world();
  std::vector<float> mine, all, block;
  for (int round = 0; round < rounds; ++round) {
    // This round's slice of each gradient in one buffer.
    std::vector<int64_t> offset(fused.size() + 1, 0), floats(fused.size(), 0);
    for (size_t i = 0; i < fused.size(); ++i) {
      if (round < fused[i].codec->Rounds()) floats[i] = fused[i].codec->RoundFloats(fused[i].step, round, fused[i].state);
      offset[i + 1] = offset[i] + floats[i];
    }
    mine.assign(offset.back(), 0.0f);
    for (size_t i = 0; i < fused.size(); ++i) {
      if (round >= fused[i].codec->Rounds()) continue;
      fused[i].codec->Contribute(fused[i].step, round, comm.rank(), fused[i].gradient, fused[i].state,
                                 absl::MakeSpan(mine).subspan(offset[i], floats[i]));
    }
    if (kind == CodecCollective::kAllReduce) {
      if (absl::Status s = comm.AllReduceSum(absl::MakeSpan(mine)); !s.ok()) return s;
    } else {
      all.resize(mine.size() * world);
      if (absl::Status s = comm.AllGather(mine, absl::MakeSpan(all)); !s.ok()) return s;
    }
    for (size_t i = 0; i < fused.size(); ++i) {
      if (round >= fused[i].codec->Rounds()) continue;
      absl::Span<const float> in = absl::MakeConstSpan(mine).subspan(offset[i], floats[i]);
      if (kind == CodecCollective::kAllGather) {  // this gradient's code from every rank, rank order
        block.resize(floats[i] * world);
        for (int r = 0; r < world; ++r) {
          std::copy_n(all.begin() + r * mine.size() + offset[i], floats[i], block.begin() + r * floats[i]);
        }
        in = block;
      }
      fused[i].codec->Absorb(fused[i].step, round, world, fused[i].gradient, fused[i].state, in, fused[i].average);
    }
  }
  return absl::OkStatus();
}

int64_t GatherCodec::RoundFloats(const CodecStep&, int round, const std::vector<absl::Span<float>>&) const {
  if (!variable_length()) return PayloadFloats();
  return round == 0 ? 1 : longest_;
}

void GatherCodec::Contribute(const CodecStep& step, int round, int rank, absl::Span<const float> gradient,
                             const std::vector<absl::Span<float>>& state, absl::Span<float> out) {
  if (!variable_length()) {
    Encode(step, rank, gradient, state, out);
    return;
  }
  if (round == 0) {  // encode now; send the length (as its bits: exact for any size)
    code_.assign(PayloadFloats(), 0.0f);
    Encode(step, rank, gradient, state, absl::MakeSpan(code_));
    used_ = UsedFloats(code_);
    const uint32_t length = static_cast<uint32_t>(used_);
    std::memcpy(&out[0], &length, sizeof(length));
    return;
  }
  std::copy_n(code_.begin(), used_, out.begin());
  std::fill(out.begin() + used_, out.end(), 0.0f);
}

void GatherCodec::Absorb(const CodecStep&, int round, int world, absl::Span<const float>,
                         const std::vector<absl::Span<float>>&, absl::Span<const float> in,
                         absl::Span<float> average) {
  if (variable_length() && round == 0) {
    longest_ = 0;
    for (int r = 0; r < world; ++r) {
      uint32_t length;
      std::memcpy(&length, &in[r], sizeof(length));
      longest_ = std::max<int64_t>(longest_, length);
    }
    // Never beyond the bound every rank computed alike: a bad length word
    // must not turn into an unbounded allocation.
    longest_ = std::min(longest_, PayloadFloats());
    return;
  }
  const int64_t words = static_cast<int64_t>(in.size()) / world;
  std::fill(average.begin(), average.end(), 0.0f);
  for (int r = 0; r < world; ++r) DecodeAdd(in.subspan(r * words, words), average);
  const float inv = 1.0f / static_cast<float>(world);
  for (float& v : average) v *= inv;
}

absl::Status BucketedGatherCodec::Init(const std::vector<int64_t>& dims, const CodecOptions& o) {
  layout_.elements = ElementCount(dims);
  absl::StatusOr<int64_t> bucket = o.Integer("bucket", 512, 1, int64_t{1} << 24);
  if (!bucket.ok()) return bucket.status();
  layout_.bucket = *bucket;
  return absl::OkStatus();
}

CodecRegistry& CodecRegistry::Global() {
  static CodecRegistry* registry = new CodecRegistry();
  return *registry;
}

absl::Status CodecRegistry::Register(Entry entry) {
  if (entry.name.empty() || !entry.factory) {
    return absl::InvalidArgumentError(absl::StrCat("codec '", entry.name, "': a codec needs a name and a factory"));
  }
  std::string name = entry.name;
  if (!entries_.emplace(name, std::move(entry)).second) {
    return absl::AlreadyExistsError(absl::StrCat("codec '", name, "' is registered twice"));
  }
  return absl::OkStatus();
}

const CodecRegistry::Entry* CodecRegistry::Find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> CodecRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

absl::StatusOr<std::unique_ptr<GradientCodec>> CodecRegistry::Create(const std::string& name) const {
  const Entry* entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no gradient codec '", name, "'; built: ", absl::StrJoin(Names(), ", ")));
  }
  return entry->factory();
}

}  // namespace nereid
