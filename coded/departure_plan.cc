#include "coded/departure_plan.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace nereid {
namespace {

// SplitMix64: a well-mixed hash of (seed, round, worker) into [0, 1).
double Uniform(uint64_t seed, int64_t round, int worker) {
  uint64_t z = seed ^ (static_cast<uint64_t>(round) * 0x9E3779B97F4A7C15ull) ^
               (static_cast<uint64_t>(worker) * 0xC2B2AE3D27D4EB4Full);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

}  // namespace

absl::StatusOr<DeparturePlan> DeparturePlan::Parse(absl::string_view text, int workers, uint64_t seed) {
  DeparturePlan plan;
  plan.workers_ = workers;
  plan.seed_ = seed;
  if (text.empty()) return plan;
  const absl::string_view whole = text;
  auto bad = [whole](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "departures '", whole, "': ", why, " (expected random:P, or ROUND:W+W;ROUND-ROUND:W with 0-based workers)"));
  };
  if (absl::ConsumePrefix(&text, "random:")) {
    if (!absl::SimpleAtod(text, &plan.probability_) || !(plan.probability_ >= 0 && plan.probability_ < 1)) {
      return bad("P must be a probability in [0, 1)");
    }
    return plan;
  }
  for (absl::string_view entry : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    if (parts.size() != 2) return bad(absl::StrCat("'", entry, "' is not ROUND:WORKERS"));
    const std::vector<absl::string_view> range = absl::StrSplit(parts[0], '-');
    int64_t first = 0, last = 0;
    if (range.size() > 2 || !absl::SimpleAtoi(range[0], &first) ||
        !absl::SimpleAtoi(range.size() == 2 ? range[1] : range[0], &last) || first < 0 || last < first) {
      return bad(absl::StrCat("'", parts[0], "' is not a round or a range of rounds from 0"));
    }
    std::vector<int> gone;
    for (absl::string_view w : absl::StrSplit(parts[1], '+')) {
      int worker = -1;
      if (!absl::SimpleAtoi(w, &worker) || worker < 0 || worker >= workers) {
        return bad(absl::StrCat("'", w, "' is not a worker in [0, ", workers, ")"));
      }
      gone.push_back(worker);
    }
    std::sort(gone.begin(), gone.end());
    gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
    plan.scripted_.push_back({{first, last}, std::move(gone)});
  }
  return plan;
}

bool DeparturePlan::Gone(int64_t round, int worker) const {
  if (probability_ > 0) return Uniform(seed_, round, worker) < probability_;
  for (const auto& [rounds, gone] : scripted_) {
    if (round >= rounds.first && round <= rounds.second && std::binary_search(gone.begin(), gone.end(), worker)) {
      return true;
    }
  }
  return false;
}

std::vector<int> DeparturePlan::GoneIn(int64_t round) const {
  std::vector<int> gone;
  for (int w = 0; w < workers_; ++w) {
    if (Gone(round, w)) gone.push_back(w);
  }
  return gone;
}

}  // namespace nereid
