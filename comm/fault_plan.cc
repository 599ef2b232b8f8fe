#include "comm/fault_plan.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace nereid {
namespace {

constexpr absl::string_view kSyntax =
    "expected delay=<duration>[@N], slow=<duration>, drop@N, kill@N, stop@N or corrupt@N, each optionally prefixed by "
    "restart=A: and rank=R:";

absl::StatusOr<int64_t> ParseCall(absl::string_view text, absl::string_view item) {
  int64_t call = 0;
  if (!absl::SimpleAtoi(text, &call) || call < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault '", item, "': call number '", text, "' is not an integer >= 1 (calls count from 1)"));
  }
  return call;
}

// "<key>=N:" at the start of `rest`: N (>= 0) into `value` and the prefix
// consumed; nothing when `rest` does not start with "<key>=".
absl::Status ConsumeIndexPrefix(absl::string_view item, absl::string_view key, absl::string_view* rest, int* value) {
  if (!absl::ConsumePrefix(rest, absl::StrCat(key, "="))) return absl::OkStatus();
  const size_t colon = rest->find(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault '", item, "': '", key, "=", key == "rank" ? "R" : "A", "' must be followed by ':'"));
  }
  const absl::string_view text = rest->substr(0, colon);
  if (!absl::SimpleAtoi(text, value) || *value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("fault '", item, "': ", key, " '", text, "' is not an integer >= 0"));
  }
  rest->remove_prefix(colon + 1);
  return absl::OkStatus();
}

absl::StatusOr<Fault> ParseItem(absl::string_view item) {
  Fault fault;
  absl::string_view rest = item;
  RETURN_IF_ERROR(ConsumeIndexPrefix(item, "restart", &rest, &fault.restart));
  RETURN_IF_ERROR(ConsumeIndexPrefix(item, "rank", &rest, &fault.rank));
  absl::string_view at_text;
  bool has_at = false;
  if (const size_t at = rest.find('@'); at != absl::string_view::npos) {
    at_text = rest.substr(at + 1);
    rest = rest.substr(0, at);
    has_at = true;
  }
  const bool slow = absl::ConsumePrefix(&rest, "slow=");
  if (slow || absl::ConsumePrefix(&rest, "delay=")) {
    fault.kind = slow ? Fault::Kind::kSlow : Fault::Kind::kDelay;
    if (!absl::ParseDuration(rest, &fault.delay) || fault.delay < absl::ZeroDuration() ||
        fault.delay == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault '", item, "': '", rest, "' is not a finite duration >= 0 such as 200ms or 1.5s"));
    }
  } else if (rest == "drop") {
    fault.kind = Fault::Kind::kDrop;
  } else if (rest == "kill") {
    fault.kind = Fault::Kind::kKill;
  } else if (rest == "stop") {
    fault.kind = Fault::Kind::kStop;
  } else if (rest == "corrupt") {
    fault.kind = Fault::Kind::kCorrupt;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("fault '", item, "': unknown fault '", rest, "' (", kSyntax, ")"));
  }
  if (has_at && fault.kind == Fault::Kind::kSlow) {
    return absl::InvalidArgumentError(absl::StrCat("fault '", item, "': slow applies to every step; it takes no @N"));
  }
  if (has_at) {
    absl::StatusOr<int64_t> call = ParseCall(at_text, item);
    if (!call.ok()) return call.status();
    fault.call = *call;
  } else if (fault.kind != Fault::Kind::kDelay && fault.kind != Fault::Kind::kSlow) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault '", item, "': '", rest, "' needs a call number, e.g. ", rest, "@3"));
  }
  return fault;
}

}  // namespace

FaultPlan FaultPlan::ForRank(int rank) const {
  FaultPlan out;
  for (const Fault& f : faults) {
    if (f.rank < 0 || f.rank == rank) out.faults.push_back(f);
  }
  return out;
}

absl::Duration FaultPlan::SlowStepFor(int rank) const {
  absl::Duration total = absl::ZeroDuration();
  for (const Fault& f : faults) {
    if (f.kind == Fault::Kind::kSlow && (f.rank < 0 || f.rank == rank)) total += f.delay;
  }
  return total;
}

FaultPlan FaultPlan::ForRestart(int restart) const {
  FaultPlan out;
  for (const Fault& f : faults) {
    if (f.restart < 0 || f.restart == restart) out.faults.push_back(f);
  }
  return out;
}

std::string FaultPlan::ToString() const {
  std::vector<std::string> items;
  for (const Fault& f : faults) {
    std::string item = f.restart >= 0 ? absl::StrCat("restart=", f.restart, ":") : "";
    if (f.rank >= 0) absl::StrAppend(&item, "rank=", f.rank, ":");
    switch (f.kind) {
      case Fault::Kind::kDelay:
        absl::StrAppend(&item, "delay=", absl::FormatDuration(f.delay));
        break;
      case Fault::Kind::kDrop:
        item += "drop";
        break;
      case Fault::Kind::kKill:
        item += "kill";
        break;
      case Fault::Kind::kStop:
        item += "stop";
        break;
      case Fault::Kind::kCorrupt:
        item += "corrupt";
        break;
      case Fault::Kind::kSlow:
        absl::StrAppend(&item, "slow=", absl::FormatDuration(f.delay));
        break;
    }
    if (f.call > 0) absl::StrAppend(&item, "@", f.call);
    items.push_back(std::move(item));
  }
  return absl::StrJoin(items, ",");
}

absl::StatusOr<FaultPlan> ParseFaultPlan(absl::string_view text) {
  FaultPlan plan;
  if (absl::StripAsciiWhitespace(text).empty()) return plan;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("fault plan '", text, "': empty item (", kSyntax, ")"));
    }
    absl::StatusOr<Fault> fault = ParseItem(item);
    if (!fault.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("fault plan '", text, "': ", fault.status().message()));
    }
    plan.faults.push_back(*fault);
  }
  return plan;
}

absl::StatusOr<FaultPlan> FaultPlanFromEnv(const EnvGetter& env) {
  const std::optional<std::string> value = env(kFaultsEnvVar);
  if (!value.has_value()) return FaultPlan{};
  absl::StatusOr<FaultPlan> plan = ParseFaultPlan(*value);
  if (!plan.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kFaultsEnvVar, ": ", plan.status().message()));
  }
  int restart = 0;
  if (const std::optional<std::string> text = env(kRestartEnvVar); text.has_value()) {
    if (!absl::SimpleAtoi(*text, &restart) || restart < 0) {
      return absl::InvalidArgumentError(absl::StrCat(kRestartEnvVar, "='", *text, "' is not an integer >= 0"));
    }
  }
  return plan->ForRestart(restart);
}

}  // namespace nereid
