#ifndef NEREID_COMM_WORKER_IDENTITY_H_
#define NEREID_COMM_WORKER_IDENTITY_H_

// What every rank of a run must agree on before it exchanges a byte of
// training data: the Nereid build, the plan it executes, the world size, and
// the run's settings that shape its arithmetic or its metrics
// ("batch=32;max_steps=50;...", compared key by key).
// Each rank publishes its identity in the rendezvous store; ranks that differ
// fail with a message naming the field, both values and both ranks.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nereid {

struct WorkerIdentity {
  std::string nereid_version;
  std::string plan_fingerprint;
  int world_size = 0;
  std::string settings;  // "key=value;key=value", in one order on every rank
};

// A line-oriented text form ("nereid-identity v1", then key=value lines with
// C-escaped values) and its inverse; Decode rejects anything else.
std::string EncodeIdentity(const WorkerIdentity& identity);
absl::StatusOr<WorkerIdentity> DecodeIdentity(absl::string_view text);

// OK when equal; otherwise FailedPrecondition listing every differing field:
// "rank 1 has plan fingerprint 1234abcd but rank 0 has 99ff0012; rank 1 has
// world size 4 but rank 0 has 2; rank 1 has max_steps=20 but rank 0 has
// max_steps=50".
absl::Status CompareIdentities(const WorkerIdentity& mine, int my_rank, const WorkerIdentity& theirs,
                               int their_rank);

}  // namespace nereid

#endif  // NEREID_COMM_WORKER_IDENTITY_H_
