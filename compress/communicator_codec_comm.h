#ifndef NEREID_COMPRESS_COMMUNICATOR_CODEC_COMM_H_
#define NEREID_COMPRESS_COMMUNICATOR_CODEC_COMM_H_

// A worker's Communicator as a codec sees it; sums the time spent inside
// collectives so the rest of a codec's run can be booked as codec time.

#include "absl/time/clock.h"
#include "comm/communicator.h"
#include "compress/codec.h"

namespace nereid {

class CommunicatorCodecComm : public CodecComm {
 public:
  CommunicatorCodecComm(Communicator& comm, CollectiveOptions options) : comm_(comm), options_(options) {}
  int rank() const override { return comm_.rank(); }
  int world() const override { return comm_.world(); }
  absl::Status AllReduceSum(absl::Span<float> data) override {
    absl::Time start = absl::Now();
    absl::Status s = comm_.AllReduce(data, ReduceOp::kSum, options_);
    in_collectives_ += absl::Now() - start;
    return s;
  }
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out) override {
    absl::Time start = absl::Now();
    absl::Status s = comm_.AllGather(in, out, options_);
    in_collectives_ += absl::Now() - start;
    return s;
  }
  absl::Duration in_collectives() const { return in_collectives_; }

 private:
  Communicator& comm_;
  CollectiveOptions options_;
  absl::Duration in_collectives_ = absl::ZeroDuration();
};

}  // namespace nereid

#endif  // NEREID_COMPRESS_COMMUNICATOR_CODEC_COMM_H_
