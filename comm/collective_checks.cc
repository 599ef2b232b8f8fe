#include "comm/collective_checks.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace nereid {

absl::Status CheckTimeout(const std::string& where, absl::Duration timeout) {
  if (timeout > absl::ZeroDuration()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": timeout must be positive, got ", absl::FormatDuration(timeout)));
}

absl::Status CheckReduceScatterSizes(const std::string& where, size_t input, size_t output, int world) {
  if (input == output * world) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, ": input has ", input, " elements, expected world (", world,
                                                 ") x output (", output, ") = ", output * world));
}

absl::Status CheckAllGatherSizes(const std::string& where, size_t input, size_t output, int world) {
  if (output == input * world) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, ": output has ", output, " elements, expected world (", world,
                                                 ") x input (", input, ") = ", input * world));
}

absl::Status CheckRoot(const std::string& where, int root, int world) {
  if (root >= 0 && root < world) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, ": root ", root, " is not a rank of world ", world));
}

absl::Status CheckPeer(const std::string& where, int peer, int rank, int world) {
  if (peer >= 0 && peer < world && peer != rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, ": peer ", peer, " is not another rank of world ", world));
}

absl::Status CheckSendRecvPeers(const std::string& where, int to, int from, int rank, int world) {
  if ((to == rank) == (from == rank) && to >= 0 && to < world && from >= 0 && from < world) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, ": ranks ", to, " and ", from,
                                                 " must both be this rank or both other ranks of world ", world));
}

bool CollectedLocally(absl::Span<const float> in, absl::Span<float> out, int world) {
  if (out.empty()) return true;
  if (world != 1) return false;
  std::copy(in.begin(), in.end(), out.begin());
  return true;
}

absl::Status SendRecvToSelf(const std::string& where, absl::Span<const float> send, absl::Span<float> recv) {
  if (send.size() != recv.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", send.size(), " elements sent to itself, ", recv.size(), " received"));
  }
  std::copy(send.begin(), send.end(), recv.begin());
  return absl::OkStatus();
}

absl::Status FailureLatch::CheckUsable(const std::string& where) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(where, ": communicator unusable after an earlier failure: ", broken_.message()));
}

absl::Status FailureLatch::Record(absl::Status status) {
  if (status.code() == absl::StatusCode::kDeadlineExceeded || status.code() == absl::StatusCode::kUnavailable ||
      status.code() == absl::StatusCode::kCancelled) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = status;
  }
  return status;
}

}  // namespace nereid
