#include "comm/fault_injection.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <utility>

#include "absl/time/clock.h"
#include "core/logging.h"

namespace nereid {

namespace {
std::atomic<int> injected_delays{0};
}  // namespace

bool InInjectedDelay() { return injected_delays.load() > 0; }

float CorruptValue(float x) { return x == 0.0f ? 1.0f : -x; }

FaultInjectingCommunicator::FaultInjectingCommunicator(std::unique_ptr<Communicator> inner, const FaultPlan& plan)
    : inner_(std::move(inner)), plan_(plan.ForRank(inner_->rank())) {}

FaultInjectingCommunicator::Decision FaultInjectingCommunicator::Before(const char* op) {
  Decision d;
  d.call = calls_.fetch_add(1) + 1;
  const int r = rank();
  for (const Fault& f : plan_.faults) {
    if (!f.AppliesTo(r, d.call)) continue;
    switch (f.kind) {
      case Fault::Kind::kDelay:
        ++injected_delays;
        absl::SleepFor(f.delay);
        --injected_delays;
        break;
      case Fault::Kind::kKill:
        Log().warn("fault injection: SIGKILL on rank {} at call {} ({})", r, d.call, op);
        std::raise(SIGKILL);
        break;
      case Fault::Kind::kStop:
        Log().warn("fault injection: SIGSTOP on rank {} at call {} ({})", r, d.call, op);
        std::raise(SIGSTOP);
        break;
      case Fault::Kind::kDrop:
        d.drop = true;
        break;
      case Fault::Kind::kCorrupt:
        d.corrupt = true;
        break;
      case Fault::Kind::kSlow:  // the executor's (ExecutorOptions::slow_step)
        break;
    }
  }
  return d;
}

template <typename Call>
absl::Status FaultInjectingCommunicator::Apply(const char* op, absl::Span<float> out, Call&& call) {
  const Decision d = Before(op);
  if (d.drop) return absl::OkStatus();
  absl::Status status = call();
  if (status.ok() && d.corrupt && !out.empty()) out[0] = CorruptValue(out[0]);
  return status;
}

absl::Status FaultInjectingCommunicator::AllReduce(absl::Span<float> data, ReduceOp op,
                                                   const CollectiveOptions& options) {
  return Apply("allreduce", data, [&] { return inner_->AllReduce(data, op, options); });
}

absl::Status FaultInjectingCommunicator::ReduceScatter(absl::Span<const float> data, absl::Span<float> out,
                                                       ReduceOp op, const CollectiveOptions& options) {
  return Apply("reduce_scatter", out, [&] { return inner_->ReduceScatter(data, out, op, options); });
}

absl::Status FaultInjectingCommunicator::AllGather(absl::Span<const float> in, absl::Span<float> out,
                                                   const CollectiveOptions& options) {
  return Apply("allgather", out, [&] { return inner_->AllGather(in, out, options); });
}

absl::Status FaultInjectingCommunicator::Broadcast(absl::Span<float> data, int root,
                                                   const CollectiveOptions& options) {
  return Apply("broadcast", data, [&] { return inner_->Broadcast(data, root, options); });
}

absl::Status FaultInjectingCommunicator::Send(absl::Span<const float> data, int peer,
                                              const CollectiveOptions& options) {
  return Apply("send", {}, [&] { return inner_->Send(data, peer, options); });
}

absl::Status FaultInjectingCommunicator::Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) {
  return Apply("recv", data, [&] { return inner_->Recv(data, peer, options); });
}

absl::Status FaultInjectingCommunicator::SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv,
                                                  int from, const CollectiveOptions& options) {
  return Apply("sendrecv", recv, [&] { return inner_->SendRecv(send, to, recv, from, options); });
}

absl::Status FaultInjectingCommunicator::Barrier(const CollectiveOptions& options) {
  return Apply("barrier", {}, [&] { return inner_->Barrier(options); });
}

std::unique_ptr<Communicator> WithFaults(std::unique_ptr<Communicator> inner, const FaultPlan& plan) {
  if (plan.ForRank(inner->rank()).empty()) return inner;
  return std::make_unique<FaultInjectingCommunicator>(std::move(inner), plan);
}

}  // namespace nereid
