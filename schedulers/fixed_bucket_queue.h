#ifndef NEREID_SCHEDULERS_FIXED_BUCKET_QUEUE_H_
#define NEREID_SCHEDULERS_FIXED_BUCKET_QUEUE_H_

// The queue a node sees whose place in its engine's order is not the bucket
// its kernel names (ops/collective_schedule.h): a transfer placed on a
// device goes into the rank's transfer engine at its place in the rank's
// issue order (DeviceTransferBuckets), which every rank agrees with, as NCCL
// (which matches transfers by issue order, not by tag) needs; a collective
// of a group split across a device and the host (SplitAcrossSides) goes into
// its share's engine at its place in the share's order.

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ops/collective_queue.h"

namespace nereid {

class FixedBucketQueue final : public CollectiveQueue {
 public:
  // `engine` (for training or evaluation) must outlive this queue; bucket
  // -1: the node has no place in that order.
  FixedBucketQueue(CollectiveQueue* engine, int bucket, std::string node)
      : engine_(engine), bucket_(bucket), node_(std::move(node)) {}

  void Submit(int64_t step, int /*kernel's bucket*/, Work work, Done done) override {
    if (bucket_ < 0) {
      done(absl::FailedPreconditionError(
          absl::StrCat("'", node_, "' has no place in its engine's order for evaluation")));
      return;
    }
    engine_->Submit(step, bucket_, std::move(work), std::move(done));
  }
  absl::Duration timeout() const override { return engine_->timeout(); }
  int world() const override { return engine_->world(); }
  void AddCodecTime(absl::Duration d) override { engine_->AddCodecTime(d); }

 private:
  CollectiveQueue* engine_;
  int bucket_;
  std::string node_;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_FIXED_BUCKET_QUEUE_H_
