#ifndef NEREID_OPS_LEARNING_RATE_H_
#define NEREID_OPS_LEARNING_RATE_H_

// The LearningRate op's schedule (constant, step or cosine, with linear
// warm-up), read from the node's attributes. One definition for the CPU and
// the GPU kernel, so a device computes the host's rate exactly.

#include <cstdint>
#include <string>

#include "ops/kernel.h"

namespace nereid {

class LearningRateSchedule {
 public:
  void Init(const AttrMap& attrs);
  // The rate at the step's point in training.
  float At(const StepInfo& step) const;

 private:
  float base_ = 0, gamma_ = 0.1f, warmup_epochs_ = 0, min_lr_ = 0;
  std::string schedule_;
  int64_t step_epochs_ = 30;
};

}  // namespace nereid

#endif  // NEREID_OPS_LEARNING_RATE_H_
