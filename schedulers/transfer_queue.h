#ifndef NEREID_SCHEDULERS_TRANSFER_QUEUE_H_
#define NEREID_SCHEDULERS_TRANSFER_QUEUE_H_

// The queue one transfer placed on a device sees (ops/collective_schedule.h:
// IsDeviceTransfer): whatever bucket its kernel names, the transfer goes
// into the rank's transfer engine at its own place in the rank's issue
// order (DeviceTransferBuckets), so the rank issues its transfers in the
// order every rank agrees with, as NCCL (which matches transfers by issue
// order, not by tag) needs.

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ops/collective_queue.h"

namespace nereid {

class TransferQueue final : public CollectiveQueue {
 public:
  // `engine` (the transfer group's, for training or evaluation) must outlive
  // this queue; bucket -1: the transfer has no place in that order.
  TransferQueue(CollectiveQueue* engine, int bucket, std::string node)
      : engine_(engine), bucket_(bucket), node_(std::move(node)) {}

  void Submit(int64_t step, int /*kernel's bucket*/, Work work, Done done) override {
    if (bucket_ < 0) {
      done(absl::FailedPreconditionError(
          absl::StrCat("'", node_, "' has no place in this rank's order of device transfers for evaluation")));
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

#endif  // NEREID_SCHEDULERS_TRANSFER_QUEUE_H_
