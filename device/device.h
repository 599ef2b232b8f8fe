#ifndef NEREID_DEVICE_DEVICE_H_
#define NEREID_DEVICE_DEVICE_H_

// The device abstraction: a Device owns memory that is not host memory, and
// Streams, in-order queues of work on it; Events order work across streams.
// The semantics are CUDA's, so that code written and tested against the
// simulated backend (sim_device.cc, any machine) behaves the same on a GPU
// (cuda_device.cc, --config=cuda):
//
//   * Work enqueued on one stream runs in enqueue order; work on two streams
//     is unordered unless one waits for an event recorded on the other.
//   * Enqueue calls return at once: a status from Launch or a copy says the
//     work was queued (or refused on bad arguments), not that it ran.
//   * Record(event) marks the work enqueued on the stream so far; the event
//     completes when that work has. Wait(event) makes the stream's later work
//     wait for that mark without blocking the host. An event never recorded
//     counts as complete, and Wait on it does nothing.
//   * A failure inside queued work is kept by its stream and returned by the
//     stream's (and the device's) next Synchronize, naming the work. A
//     failed stream stays failed, like a CUDA context after a kernel fault:
//     its later work is refused or skipped, so nothing runs on bad data.
//
// Streams and events belong to the device that made them and must be
// destroyed before it. Devices come from the registry (device_registry.h).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nereid {

enum class DeviceKind { kSim, kCuda };

// How a device runs kernels. The sim runs the host's (CPU) kernels as host
// work in stream order (Stream::Launch), on its memory. On CUDA the host
// calls a GPU kernel, which enqueues its own work on the stream's
// native_handle() and returns at once.
enum class KernelStyle { kHostWork, kEnqueued };

// What a backend's factory is given; each backend reads the fields it knows.
struct DeviceOptions {
  // Which device of its kind: "sim:1", "cuda:1".
  int ordinal = 0;
  // sim only: before each launch and copy, sleep a random time in
  // [0, delay_us_max] microseconds, drawn from `seed`, so that a missing
  // Wait shows up as wrong data rather than passing by luck.
  int64_t delay_us_max = 0;
  uint64_t seed = 0;
  // sim only: the device's memory in bytes; an allocation beyond it is
  // ResourceExhausted, as on a GPU (0: as much as the host gives).
  int64_t memory_bytes = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  // True once the work marked by the last Record has completed (true if
  // never recorded). An error if that work failed.
  virtual absl::StatusOr<bool> Query() = 0;
  // The host waits for the marked work; its error if it failed.
  virtual absl::Status Synchronize() = 0;
};

class Stream {
 public:
  // Work the stream runs in its order. On the sim it may read and write
  // device memory (the sim's kernels are CPU kernels); on CUDA it is a host
  // callback that must not touch device memory or call CUDA (real kernels
  // are launched by op code on native_handle()).
  using Work = std::function<absl::Status()>;

  virtual ~Stream() = default;

  // "<device>/<name given to CreateStream>", e.g. "sim:0/compute".
  virtual const std::string& name() const = 0;
  // cudaStream_t as void* on CUDA; nullptr on the sim.
  virtual void* native_handle() const = 0;

  // `name` names the work in errors.
  virtual absl::Status Launch(std::string name, Work work) = 0;
  virtual absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes) = 0;

  // `event` must come from this stream's device.
  virtual absl::Status Record(Event& event) = 0;
  virtual absl::Status Wait(const Event& event) = 0;

  // The host waits for everything enqueued so far; the stream's first error.
  virtual absl::Status Synchronize() = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  virtual KernelStyle kernel_style() const = 0;
  // "sim:0", "cuda:0".
  virtual const std::string& name() const = 0;

  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream(std::string name) = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;

  // Device memory, aligned to 256 bytes. FreeRaw waits for the device's
  // streams first, as cudaFree does, so queued work never touches freed
  // memory (so it must not be called from work on a stream);
  // FreeRaw(nullptr) does nothing.
  virtual absl::StatusOr<void*> AllocateRaw(size_t bytes) = 0;
  virtual absl::Status FreeRaw(void* ptr) = 0;

  // Page-locked host memory: the host reads and writes it, and copies from
  // or to it can overlap with work.
  virtual absl::StatusOr<void*> AllocateHostPinned(size_t bytes) = 0;
  virtual absl::Status FreeHostPinned(void* ptr) = 0;

  // The host waits for every stream of the device; the first error among them.
  virtual absl::Status Synchronize() = 0;
};

}  // namespace nereid

#endif  // NEREID_DEVICE_DEVICE_H_
