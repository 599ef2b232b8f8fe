#include "comm/communicator_factory.h"

#include <signal.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/fault_injection.h"
#include "comm/message_verification.h"
#include "comm/self_delivery.h"
#include "comm/fault_plan.h"
#include "core/fingerprint.h"
#include "core/status_macros.h"

namespace nereid {
namespace {

constexpr size_t kMaxGroupNameLength = 64;
// Longer member lists go into the fingerprint as a count and a hash, so that
// a mismatch message stays readable.
constexpr size_t kMaxListedMembers = 32;

std::string Registered(const std::vector<std::string>& names) {
  return names.empty() ? "none (link a backend library such as //comm:gloo_backend)" : absl::StrJoin(names, ", ");
}

// Looks the backend up and connects; no fault injection.
absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec) {
  const CommunicatorRegistry::Factory factory = CommunicatorRegistry::Global().Find(spec.backend);
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat("unknown communicator backend '", spec.backend, "' (registered: ",
                                                   Registered(CommunicatorRegistry::Global().Names()), ")"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator, factory(spec));
  if (communicator == nullptr) {
    return absl::InternalError(absl::StrCat("communicator backend '", spec.backend, "' returned no communicator"));
  }
  return communicator;
}

// Wraps `inner` in the faults NEREID_FAULTS names for `world_rank`. Read after
// connecting, the order DataParallelGroup::Join always had, so that its errors
// stay the same.
absl::StatusOr<std::unique_ptr<Communicator>> ApplyFaults(std::unique_ptr<Communicator> inner, int world_rank,
                                                          const EnvGetter& env) {
  ASSIGN_OR_RETURN(FaultPlan faults, FaultPlanFromEnv(env ? env : ProcessEnv()));
  faults = faults.ForRank(world_rank);
  // A slow machine is the executor's (slow=): not a communicator fault.
  faults.faults.erase(std::remove_if(faults.faults.begin(), faults.faults.end(),
                                     [](const Fault& f) { return f.kind == Fault::Kind::kSlow; }),
                      faults.faults.end());
  if (faults.empty()) return inner;
  // The wrapper selects faults by inner->rank(), a group rank on a group
  // communicator: the selection by world rank is done, so keep them all.
  for (Fault& fault : faults.faults) fault.rank = -1;
  return WithFaults(std::move(inner), faults);
}

// The wrappers every communicator gets: transfers to its own rank
// (self_delivery.h), faults, then (outside them, so that
// it sees what they do) the message verifier when asked.
absl::StatusOr<std::unique_ptr<Communicator>> Wrap(std::unique_ptr<Communicator> inner,
                                                   const CommunicatorSpec& world_spec) {
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> wrapped,
                   ApplyFaults(WithSelfDelivery(std::move(inner)), world_spec.rank, world_spec.env));
  if (!world_spec.verify_messages) return wrapped;
  return WithMessageVerification(std::move(wrapped));
}

absl::Status CheckRankAndWorld(const CommunicatorSpec& spec, const std::string& what) {
  if (spec.world < 1 || spec.rank < 0 || spec.rank >= spec.world) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": need world >= 1 and 0 <= rank < world (rank ", spec.rank, ", world ", spec.world, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckGroupName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("group name is empty");
  if (name.size() > kMaxGroupNameLength) {
    return absl::InvalidArgumentError(absl::StrCat("group name '", name.substr(0, kMaxGroupNameLength),
                                                   "...' is longer than ", kMaxGroupNameLength, " characters"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      // It becomes part of store keys: no '/', no spaces, nothing to escape.
      return absl::InvalidArgumentError(
          absl::StrCat("group name '", absl::CEscape(name), "' may contain only letters, digits, '_', '.' and '-'"));
    }
  }
  return absl::OkStatus();
}

// The group rank of `rank`, or -1.
absl::StatusOr<int> CheckMembers(const std::string& where, const std::vector<int>& members, int world, int rank) {
  if (members.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no members"));
  absl::flat_hash_set<int> seen;
  int index = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    if (m < 0 || m >= world) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": member ", m, " is not a rank of the world (0..", world - 1, ")"));
    }
    if (!seen.insert(m).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": rank ", m, " is listed twice"));
    }
    if (m == rank) index = static_cast<int>(i);
  }
  return index;
}

}  // namespace

CommunicatorRegistry& CommunicatorRegistry::Global() {
  static CommunicatorRegistry* registry = new CommunicatorRegistry();
  return *registry;
}

absl::Status CommunicatorRegistry::Register(std::string backend, Factory factory) {
  if (backend.empty() || !factory) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator backend '", backend, "': a backend needs a name and a factory"));
  }
  absl::MutexLock lock(&mu_);
  if (!factories_.emplace(backend, std::move(factory)).second) {
    return absl::AlreadyExistsError(absl::StrCat("communicator backend '", backend, "' is registered twice"));
  }
  return absl::OkStatus();
}

CommunicatorRegistry::Factory CommunicatorRegistry::Find(const std::string& backend) const {
  absl::MutexLock lock(&mu_);
  auto it = factories_.find(backend);
  return it == factories_.end() ? Factory() : it->second;
}

std::vector<std::string> CommunicatorRegistry::Names() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories_) names.push_back(name);
  return names;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const CommunicatorSpec& spec) {
  if (!spec.group.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("CreateCommunicator: the spec names group '", spec.group,
                                                   "'; create group communicators with CreateGroupCommunicator"));
  }
  // This process is about to hold sockets to its peers. A peer that dies
  // closes them, and Gloo writes without MSG_NOSIGNAL: the write must fail
  // the call with an error naming the peer, not kill this rank with SIGPIPE
  // (its launcher would then report this rank as the one that died).
  signal(SIGPIPE, SIG_IGN);
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator, Connect(spec));
  return Wrap(std::move(communicator), spec);
}

std::string GroupFingerprint(const std::string& world_plan, const std::string& group_name,
                             const std::vector<int>& members) {
  std::string list = absl::StrJoin(members, ",");
  if (members.size() > kMaxListedMembers) {
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016" PRIx64, Fnv1a(list));
    list = absl::StrCat(members.size(), " ranks, fnv1a ", hash);
  }
  return absl::StrCat(world_plan, " | group ", group_name, " members ", list);
}

CommunicatorSpec GroupSpec(const CommunicatorSpec& parent, const std::string& group_name,
                           const std::vector<int>& members, int index) {
  CommunicatorSpec spec = parent;
  spec.group = parent.group.empty() ? group_name : absl::StrCat(parent.group, "/", group_name);
  spec.rank = index;
  spec.world = static_cast<int>(members.size());
  // Nested under the run's prefix: "nereid/<run>/group/<name>/...".
  spec.rendezvous.run_id = absl::StrCat(parent.rendezvous.run_id, "/group/", group_name);
  spec.rendezvous.rank0_serves = false;  // the world's rank 0 already serves a tcp:// store
  spec.identity.plan_fingerprint = GroupFingerprint(parent.identity.plan_fingerprint, group_name, members);
  spec.identity.world_size = spec.world;
  return spec;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectBackend(const CommunicatorSpec& spec) { return Connect(spec); }

absl::StatusOr<std::unique_ptr<Communicator>> CreateGroupCommunicator(const CommunicatorSpec& world_spec,
                                                                      const std::string& group_name,
                                                                      const std::vector<int>& members) {
  RETURN_IF_ERROR(CheckGroupName(group_name));
  const std::string group = absl::StrCat("group '", group_name, "'");
  if (!world_spec.group.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(group, ": the spec is group '", world_spec.group, "''s; groups are made from the world's spec"));
  }
  RETURN_IF_ERROR(CheckRankAndWorld(world_spec, group));
  ASSIGN_OR_RETURN(const int index, CheckMembers(group, members, world_spec.world, world_spec.rank));
  const std::string described = absl::StrCat(group, " (members ", absl::StrJoin(members, ","), ")");
  if (index < 0) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", world_spec.rank, " is not a member of ", described));
  }
  if (world_spec.identity.world_size != 0 && world_spec.identity.world_size != world_spec.world) {
    return absl::InvalidArgumentError(absl::StrCat(group, ": identity says world size ", world_spec.identity.world_size,
                                                   " but world is ", world_spec.world));
  }

  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      Connect(GroupSpec(world_spec, group_name, members, index));
  if (!communicator.ok()) {
    const absl::Status& s = communicator.status();
    std::string message =
        absl::StrCat(described, ", world rank ", world_spec.rank, " as group rank ", index, ": ", s.message());
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      // Another rank holds this group rank's key: a reused group name, or a
      // rank that puts itself at the same position in a different list.
      absl::StrAppend(&message,
                      " (a group name is used once per run, and every member must pass the same member list)");
    }
    return absl::Status(s.code(), message);
  }
  return Wrap(*std::move(communicator), world_spec);
}

}  // namespace nereid
