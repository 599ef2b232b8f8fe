#include "comm/worker_identity.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace nereid {
namespace {

constexpr absl::string_view kHeader = "nereid-identity v2";

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed worker identity: ", why));
}

}  // namespace

std::string EncodeIdentity(const WorkerIdentity& identity) {
  return absl::StrCat(kHeader, "\nversion=", absl::CEscape(identity.nereid_version),
                      "\nplan=", absl::CEscape(identity.plan_fingerprint), "\nworld=", identity.world_size,
                      "\nsettings=", absl::CEscape(identity.settings), "\n");
}

absl::StatusOr<WorkerIdentity> DecodeIdentity(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.empty() || lines[0] != kHeader) return Malformed("missing header");
  if (lines.size() != 6 || !lines[5].empty()) return Malformed("expected four fields");
  WorkerIdentity out;
  absl::string_view version = lines[1], plan = lines[2], world = lines[3], settings = lines[4];
  std::string error;
  if (!absl::ConsumePrefix(&version, "version=") || !absl::CUnescape(version, &out.nereid_version, &error)) {
    return Malformed(absl::StrCat("bad version line: ", error));
  }
  if (!absl::ConsumePrefix(&plan, "plan=") || !absl::CUnescape(plan, &out.plan_fingerprint, &error)) {
    return Malformed(absl::StrCat("bad plan line: ", error));
  }
  if (!absl::ConsumePrefix(&world, "world=") || !absl::SimpleAtoi(world, &out.world_size)) {
    return Malformed("bad world line");
  }
  if (!absl::ConsumePrefix(&settings, "settings=") || !absl::CUnescape(settings, &out.settings, &error)) {
    return Malformed(absl::StrCat("bad settings line: ", error));
  }
  return out;
}

absl::Status CompareIdentities(const WorkerIdentity& mine, int my_rank, const WorkerIdentity& theirs,
                               int their_rank) {
  std::vector<std::string> diffs;
  auto differ = [&](absl::string_view field, const std::string& a, const std::string& b) {
    if (a != b) {
      diffs.push_back(absl::StrCat("rank ", my_rank, " has ", field, " ", a.empty() ? "(empty)" : a, " but rank ",
                                   their_rank, " has ", b.empty() ? "(empty)" : b));
    }
  };
  differ("nereid version", mine.nereid_version, theirs.nereid_version);
  differ("plan fingerprint", mine.plan_fingerprint, theirs.plan_fingerprint);
  differ("world size", absl::StrCat(mine.world_size), absl::StrCat(theirs.world_size));
  // Settings by key: each one that differs, named with both values.
  if (mine.settings != theirs.settings) {
    std::vector<std::string> a = absl::StrSplit(mine.settings, ';', absl::SkipEmpty());
    std::vector<std::string> b = absl::StrSplit(theirs.settings, ';', absl::SkipEmpty());
    auto key_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
    size_t named = diffs.size();
    for (const std::string& kv : a) {
      std::string other = "(not set)";
      for (const std::string& theirs_kv : b) {
        if (key_of(theirs_kv) == key_of(kv)) other = theirs_kv;
      }
      if (other != kv) {
        diffs.push_back(absl::StrCat("rank ", my_rank, " has ", kv, " but rank ", their_rank, " has ", other));
      }
    }
    if (diffs.size() == named) differ("settings", mine.settings, theirs.settings);
  }
  if (diffs.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrJoin(diffs, "; "));
}

}  // namespace nereid
