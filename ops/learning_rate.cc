#include "ops/learning_rate.h"

#include <algorithm>
#include <cmath>

namespace nereid {

constexpr double kPi = 3.14159265358979323846;

void LearningRateSchedule::Init(const AttrMap& attrs) {
  base_ = attrs.at("base")->f();
  schedule_ = attrs.at("schedule")->s();
  step_epochs_ = attrs.at("step_epochs")->i();
  gamma_ = attrs.at("gamma")->f();
  warmup_epochs_ = attrs.at("warmup_epochs")->f();
  min_lr_ = attrs.at("min_lr")->f();
}

float LearningRateSchedule::At(const StepInfo& s) const {
  double steps_per_epoch = static_cast<double>(std::max<int64_t>(1, s.steps_per_epoch));
  double progress = static_cast<double>(s.epoch) + static_cast<double>(s.step_in_epoch) / steps_per_epoch;
  double lr = base_;
  if (schedule_ == "step") {
    lr = base_ * std::pow(static_cast<double>(gamma_), static_cast<double>(s.epoch / step_epochs_));
  } else if (schedule_ == "cosine") {
    double t = std::min(1.0, progress / static_cast<double>(std::max<int64_t>(1, s.total_epochs)));
    lr = min_lr_ + (base_ - min_lr_) * 0.5 * (1.0 + std::cos(kPi * t));
  }
  if (warmup_epochs_ > 0 && progress < warmup_epochs_) {
    lr *= (progress + 1.0 / steps_per_epoch) / warmup_epochs_;
  }
  return static_cast<float>(lr);
}

}  // namespace nereid
