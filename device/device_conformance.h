#ifndef NEREID_DEVICE_DEVICE_CONFORMANCE_H_
#define NEREID_DEVICE_DEVICE_CONFORMANCE_H_

// The cases every device backend must pass, written once against the Device
// interface (device.h): copies, stream order, cross-stream waits, events,
// failed work and draining. A backend's test instantiates them:
//
//   INSTANTIATE_TEST_SUITE_P(Sim, DeviceConformanceTest,
//                            ::testing::Values(DeviceConformanceParam{"sim", "sim", {}, nullptr}),
//                            DeviceConformanceName);
//
// Launched work here touches only pinned host memory, which both the sim
// and CUDA's host callbacks may; device memory is reached by copies.

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "device/device.h"
#include "gtest/gtest.h"

namespace nereid {

struct DeviceConformanceParam {
  std::string label;  // the instantiation's name: letters, digits, '_'
  std::string backend;
  DeviceOptions options;
  // Null, or says why the backend cannot run here (no GPU): the cases skip.
  std::function<std::string()> unavailable;
};

// gtest prints a case's parameter by this, not as raw bytes.
void PrintTo(const DeviceConformanceParam& param, std::ostream* os);

std::string DeviceConformanceName(const ::testing::TestParamInfo<DeviceConformanceParam>& info);

class DeviceConformanceTest : public ::testing::TestWithParam<DeviceConformanceParam> {
 protected:
  void SetUp() override;

  std::unique_ptr<Device> device_;
};

}  // namespace nereid

#endif  // NEREID_DEVICE_DEVICE_CONFORMANCE_H_
