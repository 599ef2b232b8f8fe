#ifndef NEREID_SCHEDULERS_STREAM_ISSUED_QUEUE_H_
#define NEREID_SCHEDULERS_STREAM_ISSUED_QUEUE_H_

// The collective queue a kernel placed on a device sees (place(comm=device)):
// the worker's queue still picks the order, (step, bucket) the same on every
// rank, but what it orders is the *issue* of each collective onto its
// group's communication stream, which then runs them in that order. This is
// NCCL's model (a communicator's calls issued in one order on every rank,
// run by the stream they were issued to), and the sim's streams reproduce
// it with the host's communicators:
//   * sim (KernelStyle::kHostWork): issuing enqueues the kernel's work (the
//     collective and what the kernel does with its result) as work on the
//     stream, which runs it in issue order;
//   * CUDA (kEnqueued): the work runs on the queue's thread and enqueues its
//     own device work (NCCL's call, the copies around it) on the stream.
// Either way the queue moves on to the next key as soon as one is issued,
// so no collective waits behind another enqueued out of the worker's order,
// and the kernel's launch is over once its collective is issued: `issued`
// is called then (on the queue's thread), with the status of the issue.
// A collective that fails on the stream reports it to `failed`.

#include <atomic>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "device/device.h"
#include "ops/collective_queue.h"

namespace nereid {

class StreamIssuedQueue final : public CollectiveQueue {
 public:
  using Callback = std::function<void(absl::Status)>;

  // `queue` (the worker's, for the node's group) must outlive the issued
  // work; `stream` is the node's communication stream.
  StreamIssuedQueue(CollectiveQueue* queue, Stream* stream, KernelStyle style, std::string name, Callback issued,
                    Callback failed)
      : queue_(queue), stream_(stream), style_(style), name_(std::move(name)), issued_(std::move(issued)),
        failed_(std::move(failed)) {}

  // One collective per launch: a second is refused (the key order could not
  // say when the launch is over).
  void Submit(int64_t step, int bucket, Work work, Done done) override {
    if (submitted_.exchange(true)) {
      done(absl::InternalError(absl::StrCat(name_, ": a kernel placed on a device issues one collective per launch")));
      return;
    }
    queue_->Submit(
        step, bucket,
        [stream = stream_, style = style_, name = name_, failed = failed_, work = std::move(work),
         done = std::move(done)](Communicator& comm) mutable -> absl::Status {
          auto run = [&comm, failed, work = std::move(work), done = std::move(done)]() mutable {
            absl::Status status = work(comm);
            if (!status.ok()) failed(status);
            done(status);
            return status;
          };
          if (style == KernelStyle::kEnqueued) return run();
          return stream->Launch(name, std::move(run));
        },
        [issued = issued_](absl::Status status) { issued(std::move(status)); });
  }
  absl::Duration timeout() const override { return queue_->timeout(); }
  int world() const override { return queue_->world(); }
  void AddCodecTime(absl::Duration d) override { queue_->AddCodecTime(d); }

  // Whether the kernel handed its collective over (a kernel alone in its
  // world runs none, and its launch is over when it is done).
  bool submitted() const { return submitted_.load(); }

 private:
  CollectiveQueue* const queue_;
  Stream* const stream_;
  const KernelStyle style_;
  const std::string name_;
  const Callback issued_;
  const Callback failed_;
  std::atomic<bool> submitted_{false};
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_STREAM_ISSUED_QUEUE_H_
