#include "ops/group_collective_call.h"

#include "absl/strings/str_cat.h"

namespace nereid {
namespace {

// Tags of evaluation collectives, apart from the training buckets' tags.
constexpr uint32_t kEvalTagBase = 1u << 16;

}  // namespace

absl::Status GroupCollectiveCall::Init(const Node& node, const AttrMap& attrs) {
  op_ = node.op();
  group_ = attrs.at("group")->s();
  group_size_ = attrs.at("group_size")->i();
  bucket_ = static_cast<int>(attrs.at("bucket")->i());
  eval_bucket_ = static_cast<int>(attrs.at("eval_bucket")->i());
  what_ = absl::StrCat(op_, " on group '", group_, "'");
  return absl::OkStatus();
}

absl::StatusOr<GroupCollectiveCall::Issue> GroupCollectiveCall::IssueOf(const OpKernelContext& ctx,
                                                                        const CollectiveQueue& queue) const {
  const bool training = ctx.step().training;
  Issue issue;
  issue.bucket = training ? bucket_ : eval_bucket_;
  if (issue.bucket < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        op_, " on group '", group_, "' has no place in the group's ", training ? "step" : "evaluation",
        " order (plans get one when they are finished; was the plan edited by hand?)"));
  }
  issue.options.tag =
      training ? static_cast<uint32_t>(issue.bucket) : kEvalTagBase + static_cast<uint32_t>(issue.bucket);
  issue.options.timeout = queue.timeout();
  issue.key = ctx.step().issue_key();
  issue.step = ctx.step().step;
  return issue;
}

absl::Status GroupCollectiveCall::Alone() const {
  if (group_size_ == 1) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("group '", group_, "' has ", group_size_,
                                                    " ranks but this worker has no communicator for it"));
}

std::function<void(absl::Status)> GroupCollectiveCall::Reported(std::function<void(absl::Status)> done) const {
  return [done = std::move(done), what = what_](absl::Status s) {
    if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat(what, ": ", s.message())));
    done(absl::OkStatus());
  };
}

absl::Status GroupCollectiveCall::CheckGroupSize(const Communicator& comm) const {
  if (comm.world() == group_size_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("the plan says the group has ", group_size_,
                                                    " ranks but its communicator has ", comm.world()));
}

}  // namespace nereid
