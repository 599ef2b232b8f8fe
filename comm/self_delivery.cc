#include "comm/self_delivery.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/abort_signal.h"

namespace nereid {
namespace {

class SelfDeliveringCommunicatorImpl final : public SelfDeliveringCommunicator {
 public:
  explicit SelfDeliveringCommunicatorImpl(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  Communicator& inner() override { return *inner_; }

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return inner_->backend(); }

  absl::Status AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) override {
    return inner_->AllReduce(data, op, options);
  }
  absl::Status ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                             const CollectiveOptions& options) override {
    return inner_->ReduceScatter(data, out, op, options);
  }
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out, const CollectiveOptions& options) override {
    return inner_->AllGather(in, out, options);
  }
  absl::Status Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) override {
    return inner_->Broadcast(data, root, options);
  }
  absl::Status Barrier(const CollectiveOptions& options) override { return inner_->Barrier(options); }
  absl::Status SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                        const CollectiveOptions& options) override {
    return inner_->SendRecv(send, to, recv, from, options);
  }
  TrafficCounters traffic() const override { return inner_->traffic(); }
  // Transfers to other ranks only (AsyncPointToPoint): this rank's own stay
  // on Send and Recv, through the mailbox.
  AsyncPointToPoint* async_point_to_point() override { return inner_->async_point_to_point(); }
  StreamCollectives* stream_collectives() override { return inner_->stream_collectives(); }

  absl::Status Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) override {
    if (peer != rank()) return inner_->Send(data, peer, options);
    {
      std::lock_guard<std::mutex> lock(mu_);
      mailbox_[options.tag].emplace_back(data.begin(), data.end());
    }
    arrived_.notify_all();
    return absl::OkStatus();
  }

  absl::Status Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) override {
    if (peer != rank()) return inner_->Recv(data, peer, options);
    const absl::Time deadline = absl::Now() + options.timeout;
    bool aborted = false;
    AbortRegistration abort(options.abort, [&] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        aborted = true;
      }
      arrived_.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      auto it = mailbox_.find(options.tag);
      if (it != mailbox_.end() && !it->second.empty()) {
        std::vector<float> message = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) mailbox_.erase(it);
        if (message.size() != data.size()) {
          return absl::InvalidArgumentError(absl::StrCat("recv from rank ", peer, " (itself), tag ", options.tag, ": ",
                                                         message.size(), " elements sent, ", data.size(), " expected"));
        }
        std::copy(message.begin(), message.end(), data.begin());
        return absl::OkStatus();
      }
      if (aborted) return absl::CancelledError(absl::StrCat("recv from rank ", peer, " (itself), tag ", options.tag, ": aborted"));
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("recv from rank ", peer, " (itself), tag ", options.tag,
                                                        ": nothing sent within ", absl::FormatDuration(options.timeout)));
      }
      arrived_.wait_for(lock, absl::ToChronoMilliseconds(std::min(deadline - absl::Now(), absl::Milliseconds(100))));
    }
  }

 private:
  std::unique_ptr<Communicator> inner_;
  std::mutex mu_;
  std::condition_variable arrived_;
  absl::flat_hash_map<uint32_t, std::deque<std::vector<float>>> mailbox_;
};

}  // namespace

std::unique_ptr<Communicator> WithSelfDelivery(std::unique_ptr<Communicator> inner) {
  return std::make_unique<SelfDeliveringCommunicatorImpl>(std::move(inner));
}

}  // namespace nereid
