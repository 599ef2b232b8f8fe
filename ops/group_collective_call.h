#ifndef NEREID_OPS_GROUP_COLLECTIVE_CALL_H_
#define NEREID_OPS_GROUP_COLLECTIVE_CALL_H_

// Where one launch of a group collective (ops/group_collective_ops.cc) goes
// in its group's order, shared by the CPU kernels (ops/cpu) and the GPU ones
// (ops/cuda, NCCL on the group's stream): the key (step, bucket) in training
// and (evaluation batch, eval_bucket) in evaluation, so every member issues
// the group's collectives in one order, the tag that names it, and the
// checks of the group's size.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ops/kernel.h"

namespace nereid {

class GroupCollectiveCall {
 public:
  // One launch's place in the order.
  struct Issue {
    int64_t key = 0;  // the step, or the evaluation batch
    int bucket = 0;
    CollectiveOptions options;  // tag and the queue's timeout
    int64_t step = 0;           // the training step (evaluation: the step it follows)
  };

  // Reads group, group_size, bucket and eval_bucket.
  absl::Status Init(const Node& node, const AttrMap& attrs);

  // The launch's issue through `queue` (the node's group's, non-null);
  // FailedPrecondition for a node the plan gave no place in that order.
  absl::StatusOr<Issue> IssueOf(const OpKernelContext& ctx, const CollectiveQueue& queue) const;
  // With no queue: OK for a group of one (the kernel's result is its input),
  // else FailedPrecondition.
  absl::Status Alone() const;
  // FailedPrecondition unless `comm` has the group's size.
  absl::Status CheckGroupSize(const Communicator& comm) const;
  // `done`, with a failure's message prefixed by what() (the queue's
  // completion callback).
  std::function<void(absl::Status)> Reported(std::function<void(absl::Status)> done) const;
  // "GroupAllGather on group 'tp'", for messages.
  const std::string& what() const { return what_; }

 private:
  std::string op_, group_, what_;
  int64_t group_size_ = 1;
  int bucket_ = -1, eval_bucket_ = -1;
};

}  // namespace nereid

#endif  // NEREID_OPS_GROUP_COLLECTIVE_CALL_H_
