#ifndef NEREID_TESTS_GPU_GATE_H_
#define NEREID_TESTS_GPU_GATE_H_

// For the GPU tests (--config=cuda): whether a CUDA device is here; where
// none is, the test's log says why in a [  SKIPPED ] line.

#include <iostream>
#include <string>

#include "ops/cuda/elementwise_kernels.h"

namespace nereid {
namespace testing {

inline bool HaveGpu() {
  absl::StatusOr<int> count = cuda::DeviceCount();
  if (!count.ok() || *count == 0) {
    std::cout << "[  SKIPPED ] no CUDA device: "
              << (count.ok() ? std::string("cudaGetDeviceCount found none") : std::string(count.status().message()))
              << "\n";
    return false;
  }
  return true;
}

}  // namespace testing
}  // namespace nereid

#endif  // NEREID_TESTS_GPU_GATE_H_
