#ifndef NEREID_COMM_FAULT_INJECTION_H_
#define NEREID_COMM_FAULT_INJECTION_H_

// A Communicator that misbehaves on purpose, following a FaultPlan
// (fault_plan.h), around a real one: the way to test that a training run
// fails cleanly (DeadlineExceeded on the peers, a crash detected, a corrupted
// gradient caught) rather than hanging.
//
// Per call, in this order: count the call; sleep for every matching delay;
// raise SIGKILL on a matching kill (after a line on stderr); return OK
// without calling the inner communicator on a matching drop; otherwise call
// it and, on a matching corrupt and an OK result, change element 0 of the
// output. Thread-safe if the inner communicator is; call numbers then follow
// the order in which calls enter the wrapper.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "comm/fault_plan.h"

namespace nereid {

class FaultInjectingCommunicator final : public Communicator {
 public:
  // Keeps the faults of `plan` that apply on inner->rank().
  FaultInjectingCommunicator(std::unique_ptr<Communicator> inner, const FaultPlan& plan);

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return "fault(" + inner_->backend() + ")"; }

  absl::Status AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) override;
  absl::Status ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                             const CollectiveOptions& options) override;
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out,
                         const CollectiveOptions& options) override;
  absl::Status Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) override;
  absl::Status Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) override;
  absl::Status Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) override;
  absl::Status Barrier(const CollectiveOptions& options) override;
  absl::Status SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                        const CollectiveOptions& options) override;

  // The inner communicator's traffic: dropped calls move nothing.
  TrafficCounters traffic() const override { return inner_->traffic(); }
  // Collectives on device streams go to the inner backend untouched (the
  // faults that act on the process, kill and stop, still reach them).
  StreamCollectives* stream_collectives() override { return inner_->stream_collectives(); }

  // Calls made so far (the number the next call's faults are matched with,
  // minus one).
  int64_t calls() const { return calls_.load(); }
  const FaultPlan& plan() const { return plan_; }
  Communicator& inner() { return *inner_; }

 private:
  struct Decision {
    int64_t call = 0;
    bool drop = false;
    bool corrupt = false;
  };
  // Counts the call, applies delays and kills, and says whether to drop the
  // call and whether to corrupt its output.
  Decision Before(const char* op);
  // Runs `call` unless dropped, then corrupts `out` if asked.
  template <typename Call>
  absl::Status Apply(const char* op, absl::Span<float> out, Call&& call);

  std::unique_ptr<Communicator> inner_;
  const FaultPlan plan_;
  std::atomic<int64_t> calls_{0};
};

// Whether a thread of this process sleeps in an injected delay now. Such a
// rank plays one that is stuck before its call, so it must not report itself
// waiting for its peers (the launcher would blame them instead).
bool InInjectedDelay();

// `inner` wrapped in a FaultInjectingCommunicator if `plan` has faults for its
// rank, else `inner` itself.
std::unique_ptr<Communicator> WithFaults(std::unique_ptr<Communicator> inner, const FaultPlan& plan);

// Changes one value so that it differs from the original: x -> -x, 0 -> 1.
float CorruptValue(float x);

}  // namespace nereid

#endif  // NEREID_COMM_FAULT_INJECTION_H_
