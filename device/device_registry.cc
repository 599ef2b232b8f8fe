#include "device/device_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nereid {

DeviceRegistry& DeviceRegistry::Global() {
  static DeviceRegistry* registry = new DeviceRegistry();
  return *registry;
}

absl::Status DeviceRegistry::Register(std::string backend, Factory factory) {
  if (backend.empty() || !factory) {
    return absl::InvalidArgumentError(
        absl::StrCat("device backend '", backend, "': a backend needs a name and a factory"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!factories_.emplace(backend, std::move(factory)).second) {
    return absl::AlreadyExistsError(absl::StrCat("device backend '", backend, "' is registered twice"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Device>> DeviceRegistry::Create(const std::string& backend,
                                                               const DeviceOptions& options) const {
  Factory factory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(backend);
    if (it != factories_.end()) factory = it->second;
  }
  if (!factory) {
    const std::vector<std::string> names = Names();
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown device backend '", backend, "' (registered: ",
        names.empty() ? "none (link a backend library such as //device:sim_device)" : absl::StrJoin(names, ", "),
        ")"));
  }
  // The factory runs unlocked: creating a device may take long (CUDA's
  // context) and must not hold up other lookups.
  absl::StatusOr<std::unique_ptr<Device>> device = factory(options);
  if (device.ok() && *device == nullptr) {
    return absl::InternalError(absl::StrCat("device backend '", backend, "' returned no device"));
  }
  return device;
}

std::vector<std::string> DeviceRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories_) names.push_back(name);
  return names;
}

}  // namespace nereid
