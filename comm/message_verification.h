#ifndef NEREID_COMM_MESSAGE_VERIFICATION_H_
#define NEREID_COMM_MESSAGE_VERIFICATION_H_

// `--verify-messages`: a Communicator that checks what crosses the wire,
// around a real one (and around the fault injector, so that injected
// corruption is what it catches). For debugging: it costs a copy and a CRC
// per message and one small AllGather per collective.
//
// - Send / Recv / SendRecv: the payload travels with a trailer (CRC-32 of
//   the payload, the tag, and a sequence number per peer and tag); the
//   receiver recomputes and compares all three, so a changed, misdirected
//   (another tag's), duplicated or reordered message is DataLoss naming the
//   peer, the tag and what differed.
// - AllReduce, AllGather, Broadcast: every rank ends with the same values,
//   so after the call the ranks exchange a CRC-32 of their result and any
//   disagreement is DataLoss on every rank, naming the ranks whose result
//   differs from rank 0's.
// - ReduceScatter (each rank's result is its own) and Barrier: passed
//   through unchecked.
//
// The extra AllGather is a call of the inner communicator: with both this
// and NEREID_FAULTS, fault call numbers count it too.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "comm/communicator.h"

namespace nereid {

class VerifyingCommunicator final : public Communicator {
 public:
  explicit VerifyingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return "verified(" + inner_->backend() + ")"; }

  absl::Status AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) override;
  absl::Status ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                             const CollectiveOptions& options) override {
    return inner_->ReduceScatter(data, out, op, options);
  }
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out,
                         const CollectiveOptions& options) override;
  absl::Status Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) override;
  absl::Status Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) override;
  absl::Status Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) override;
  absl::Status Barrier(const CollectiveOptions& options) override { return inner_->Barrier(options); }
  absl::Status SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                        const CollectiveOptions& options) override;

  // The inner communicator's traffic, trailers and checks included.
  TrafficCounters traffic() const override { return inner_->traffic(); }

 private:
  // The next sequence number of (peer, tag) in one direction.
  uint32_t NextSent(int peer, uint32_t tag);
  uint32_t NextReceived(int peer, uint32_t tag);
  // Every rank's CRC of `result`, compared with rank 0's.
  absl::Status CompareAcrossRanks(const char* op, absl::Span<const float> result, const CollectiveOptions& options);
  // Checks a received message's trailer, then copies its payload to `data`.
  absl::Status Unpack(absl::Span<const float> message, absl::Span<float> data, int peer, uint32_t tag,
                      const char* op);

  std::unique_ptr<Communicator> inner_;
  absl::Mutex mu_;
  std::map<std::pair<int, uint32_t>, uint32_t> sent_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, uint32_t>, uint32_t> received_ ABSL_GUARDED_BY(mu_);
};

// `inner` wrapped in a VerifyingCommunicator.
std::unique_ptr<Communicator> WithMessageVerification(std::unique_ptr<Communicator> inner);

}  // namespace nereid

#endif  // NEREID_COMM_MESSAGE_VERIFICATION_H_
