#include "data/normalize.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace nereid {
namespace data {

absl::Status NormalizePerChannel(Dataset* dataset, const std::vector<float>& mean,
                                 const std::vector<float>& stddev) {
  if (dataset == nullptr) return absl::InvalidArgumentError("NormalizePerChannel: null dataset");
  Dataset& ds = *dataset;
  if (static_cast<int64_t>(mean.size()) != ds.channels ||
      static_cast<int64_t>(stddev.size()) != ds.channels) {
    return absl::InvalidArgumentError(absl::StrCat("NormalizePerChannel on '", ds.name, "': got ",
                                                   mean.size(), " means and ", stddev.size(),
                                                   " stddevs for ", ds.channels, " channels"));
  }
  for (size_t c = 0; c < mean.size(); ++c) {
    if (!std::isfinite(mean[c]) || !std::isfinite(stddev[c]) || !(stddev[c] > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("NormalizePerChannel on '", ds.name, "': channel ", c, " has mean ", mean[c],
                       " and stddev ", stddev[c], "; need finite values and stddev > 0"));
    }
  }
  if (absl::Status valid = ds.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("NormalizePerChannel: ", valid.message()));
  }
  const int64_t plane = ds.height * ds.width;
  for (int64_t n = 0; n < ds.num_examples; ++n) {
    for (int64_t c = 0; c < ds.channels; ++c) {
      float* p = ds.images.data() + (n * ds.channels + c) * plane;
      const float m = mean[c];
      const float s = stddev[c];
      for (int64_t i = 0; i < plane; ++i) p[i] = (p[i] - m) / s;
    }
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<std::vector<float>> ParseValues(absl::string_view text, absl::string_view whole) {
  std::vector<float> values;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    float v = 0;
    if (!absl::SimpleAtof(absl::StripAsciiWhitespace(piece), &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat("--normalize '", whole, "': '", piece, "' is not a finite number"));
    }
    values.push_back(v);
  }
  return values;
}

std::string Describe(const std::vector<float>& mean, const std::vector<float>& stddev) {
  if (mean.size() == 1) return absl::StrCat("(x - ", mean[0], ") / ", stddev[0]);
  return absl::StrCat("(x - [", absl::StrJoin(mean, ", "), "]) / [", absl::StrJoin(stddev, ", "), "] per channel");
}

}  // namespace

absl::StatusOr<NormalizationSpec> ParseNormalization(absl::string_view text) {
  NormalizationSpec spec;
  if (text.empty() || text == "default") return spec;
  if (text == "none") {
    spec.kind = NormalizationSpec::Kind::kNone;
    return spec;
  }
  const std::vector<absl::string_view> halves = absl::StrSplit(text, '/');
  if (halves.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--normalize '", text, "': expected default, none, MEAN/STDDEV or M1,M2,.../S1,S2,... (one per channel)"));
  }
  spec.kind = NormalizationSpec::Kind::kPerChannel;
  auto mean = ParseValues(halves[0], text);
  if (!mean.ok()) return mean.status();
  auto stddev = ParseValues(halves[1], text);
  if (!stddev.ok()) return stddev.status();
  spec.mean = *std::move(mean);
  spec.stddev = *std::move(stddev);
  if (spec.mean.size() != spec.stddev.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--normalize '", text, "': ", spec.mean.size(), " means but ",
                                                   spec.stddev.size(), " stddevs"));
  }
  for (float s : spec.stddev) {
    if (!(s > 0)) return absl::InvalidArgumentError(absl::StrCat("--normalize '", text, "': a stddev must be > 0"));
  }
  return spec;
}

absl::Status ApplyNormalization(Dataset* dataset, const NormalizationSpec& spec,
                                const std::vector<float>& default_mean, const std::vector<float>& default_stddev) {
  if (dataset == nullptr) return absl::InvalidArgumentError("ApplyNormalization: null dataset");
  std::vector<float> mean, stddev;
  switch (spec.kind) {
    case NormalizationSpec::Kind::kDefault:
      mean = default_mean;
      stddev = default_stddev;
      break;
    case NormalizationSpec::Kind::kNone:
      break;
    case NormalizationSpec::Kind::kPerChannel:
      mean = spec.mean;
      stddev = spec.stddev;
      if (mean.size() == 1 && dataset->channels > 1) {
        mean.assign(static_cast<size_t>(dataset->channels), spec.mean[0]);
        stddev.assign(static_cast<size_t>(dataset->channels), spec.stddev[0]);
      }
      if (static_cast<int64_t>(mean.size()) != dataset->channels) {
        return absl::InvalidArgumentError(absl::StrCat("--normalize: ", mean.size(), " means and stddevs for '",
                                                       dataset->name, "', which has ", dataset->channels,
                                                       " channels (give one value, or one per channel)"));
      }
      break;
  }
  if (mean.empty()) {
    dataset->normalization = "none";
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(NormalizePerChannel(dataset, mean, stddev));
  dataset->normalization = Describe(mean, stddev);
  return absl::OkStatus();
}

}  // namespace data
}  // namespace nereid
