#ifndef NEREID_COMM_COMMUNICATOR_FACTORY_H_
#define NEREID_COMM_COMMUNICATOR_FACTORY_H_

// Communicators by backend name, and process groups.
//
// A backend registers a factory under its name in one file of its own
// (gloo_backend.cc), in the project's registration shape (core/registration.h):
//
//   NEREID_REGISTER_COMMUNICATOR("gloo", ConnectGlooBackend);
//
// and CreateCommunicator looks the name up, connects, and wraps the result in
// the NEREID_FAULTS fault injector (fault_injection.h) when the plan names
// this rank, and in the message verifier when the spec asks: the one place where callers above comm/ get a communicator.
//
// Groups: CreateGroupCommunicator connects a subset of the world's ranks as a
// communicator of their own (rank = index in `members`, world =
// members.size()). Its rendezvous runs in the world's store under the run id
// "<run_id>/group/<name>", so its keys ("nereid/<run_id>/group/<name>/...")
// never meet the world's ("nereid/<run_id>/ident/...") or another group's. The
// group's identity is the world's with the group's name and member list added
// to the plan fingerprint and world_size = members.size(), so members that
// disagree on a group's membership fail the identity check (or find their
// group rank's key taken) instead of connecting; every wait is bounded by the
// spec's connect_timeout and every error names the group. A group name is
// used once per run. Ranks must create the groups they share in the same
// order (each call blocks until the group's members have met).

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "comm/rendezvous_spec.h"
#include "comm/worker_identity.h"
#include "core/registration.h"

namespace nereid {

struct CommunicatorSpec {
  std::string backend = "gloo";
  // Where the ranks meet; its run_id scopes every key of the run (one field,
  // so the store and the run id cannot disagree).
  RendezvousSpec rendezvous;
  int rank = 0;
  int world = 1;
  // What all ranks must agree on; world_size 0 means `world`.
  WorkerIdentity identity;
  // Address the transport binds to and advertises to its peers.
  std::string hostname = "127.0.0.1";
  // Bounds the rendezvous and the connects.
  absl::Duration connect_timeout = absl::Seconds(60);
  // The CUDA device of a GPU backend ("nccl"; usually the local rank).
  int device = 0;
  // Empty: the whole world. Set by CreateGroupCommunicator on the spec it
  // hands the backend (rank, world, rendezvous and identity are then the
  // group's); callers leave it empty.
  std::string group;
  // Where NEREID_FAULTS is read; null: the process environment.
  EnvGetter env;
  // Wrap in the message verifier (message_verification.h), outside the
  // fault injector: `--verify-messages`.
  bool verify_messages = false;
};

class CommunicatorRegistry {
 public:
  // Connects one rank as `spec` says; no fault injection (the factory adds it).
  using Factory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(const CommunicatorSpec& spec)>;

  static CommunicatorRegistry& Global();
  // Fails on an empty or taken name, or a missing factory.
  absl::Status Register(std::string backend, Factory factory);
  // Null if `backend` is not registered.
  Factory Find(const std::string& backend) const;
  // Sorted.
  std::vector<std::string> Names() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Factory> factories_ ABSL_GUARDED_BY(mu_);
};

// Connects `spec.rank` of `spec.world` through the backend `spec.backend`
// (unknown: InvalidArgument listing the registered ones), then wraps it in a
// FaultInjectingCommunicator if NEREID_FAULTS has faults for `spec.rank`.
// `spec.group` must be empty (groups: CreateGroupCommunicator). The process
// ignores SIGPIPE from then on: writing to a dead peer's socket is an error.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const CommunicatorSpec& spec);

// For `world_spec.rank`, a member of `members` (distinct ranks of
// [0, world_spec.world), in group-rank order): a communicator over the members
// only, through `world_spec.backend` (see the header comment). `group_name`:
// 1 to 64 characters of [A-Za-z0-9_.-]. Bad arguments are InvalidArgument; a
// calling rank outside `members` is FailedPrecondition naming the rank and the
// group. NEREID_FAULTS applies by world rank (its "rank=R" is the world's
// rank R); call numbers count per communicator.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGroupCommunicator(const CommunicatorSpec& world_spec,
                                                                      const std::string& group_name,
                                                                      const std::vector<int>& members);

// For backends made of other backends (hierarchical_communicator.h): the
// spec group `group_name` hands its member at `index` of `members` (ranks of
// `parent`, which may itself be a group's spec), and a connect through
// `spec.backend` without the wrappers CreateCommunicator adds (the composite
// gets them once, as a whole). Arguments as CreateGroupCommunicator checks them.
CommunicatorSpec GroupSpec(const CommunicatorSpec& parent, const std::string& group_name,
                           const std::vector<int>& members, int index);
absl::StatusOr<std::unique_ptr<Communicator>> ConnectBackend(const CommunicatorSpec& spec);

// What a group's members must agree on, as it goes into the group identity's
// plan fingerprint: "<world plan> | group <name> members 0,2,5".
std::string GroupFingerprint(const std::string& world_plan, const std::string& group_name,
                             const std::vector<int>& members);

}  // namespace nereid

#define NEREID_REGISTER_COMMUNICATOR(...) NEREID_REGISTER(::nereid::CommunicatorRegistry, __VA_ARGS__)

#endif  // NEREID_COMM_COMMUNICATOR_FACTORY_H_
