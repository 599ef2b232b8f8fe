#ifndef NEREID_DEVICE_DEVICE_REGISTRY_H_
#define NEREID_DEVICE_DEVICE_REGISTRY_H_

// Devices by backend name. A backend is one file of its own ending in one
// registration line, in the project's registration shape (core/registration.h):
//
//   NEREID_REGISTER_DEVICE("sim", CreateSimDevice);
//
// and its library is alwayslink, so the linker keeps the line. Callers ask
// by name and never name a backend's type:
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
//                    DeviceRegistry::Global().Create("sim", DeviceOptions{}));

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/registration.h"
#include "device/device.h"

namespace nereid {

class DeviceRegistry {
 public:
  using Factory = std::function<absl::StatusOr<std::unique_ptr<Device>>(const DeviceOptions& options)>;

  static DeviceRegistry& Global();

  // Fails on an empty or taken name, or a missing factory.
  absl::Status Register(std::string backend, Factory factory);
  // Unknown `backend`: InvalidArgument listing the registered ones.
  absl::StatusOr<std::unique_ptr<Device>> Create(const std::string& backend, const DeviceOptions& options = {}) const;
  // Sorted.
  std::vector<std::string> Names() const;

 private:
  // std::mutex, not absl::Mutex: Debian's Abseil is not built with TSan.
  mutable std::mutex mu_;
  std::map<std::string, Factory> factories_;  // guarded by mu_
};

}  // namespace nereid

#define NEREID_REGISTER_DEVICE(...) NEREID_REGISTER(::nereid::DeviceRegistry, __VA_ARGS__)

#endif  // NEREID_DEVICE_DEVICE_REGISTRY_H_
