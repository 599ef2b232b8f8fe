// The "sim" device backend: CUDA's stream and event semantics on the host,
// for machines without a GPU. Each stream is an in-order queue run by a
// thread of its own; an event marks a position in its stream's queue; a
// Wait is a task that blocks its stream's thread (never the host) until the
// marked position has completed. Device memory is SimMemory: poisoned,
// guarded and kept apart from host memory. With `delay_us_max` set, every
// launch and copy first sleeps a random time drawn from `seed`, so work
// whose order is not enforced by a Wait runs in varying orders.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "device/device.h"
#include "device/device_registry.h"
#include "device/sim_memory.h"

namespace nereid {
namespace {

// One queued piece of work: a launch, a copy or a wait.
struct Task {
  std::string name;  // in errors: "launch 'matmul'"
  bool delayed = false;  // launches and copies; waits are not
  std::function<absl::Status()> run;
};

// A stream's queue and progress. Shared with the events recorded on the
// stream and the streams waiting on them, which may outlive the stream.
struct StreamState {
  explicit StreamState(std::string n) : name(std::move(n)) {}
  const std::string name;
  std::mutex mu;
  std::condition_variable work_ready;  // the stream's thread waits for tasks
  std::condition_variable progress;    // others wait for `completed` to grow
  std::deque<Task> queue;              // the rest guarded by mu
  uint64_t enqueued = 0;               // tasks ever queued
  uint64_t completed = 0;              // tasks finished (run, failed or skipped), always a prefix
  absl::Status error;                  // the first failure; sticky
  uint64_t error_position = 0;         // the failed task's index
  bool stopping = false;
};

// A position in a stream: complete once the stream's first `position` tasks are.
struct Mark {
  std::shared_ptr<StreamState> stream;
  uint64_t position = 0;
};

// The marked work's failure, if one of its tasks failed (call with mu held).
absl::Status MarkError(const Mark& mark) {
  const StreamState& s = *mark.stream;
  return !s.error.ok() && s.error_position < mark.position ? s.error : absl::OkStatus();
}

absl::Status WaitForMark(const Mark& mark) {
  std::unique_lock<std::mutex> lock(mark.stream->mu);
  mark.stream->progress.wait(lock, [&] { return mark.stream->completed >= mark.position; });
  return MarkError(mark);
}

absl::Status Annotate(const std::string& where, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

// Runs a task's work; an exception becomes an Internal status, not a crash.
absl::Status RunCaught(const Task& task) {
  try {
    return task.run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("threw: ", e.what()));
  } catch (...) {
    return absl::InternalError("threw a non-standard exception");
  }
}

class SimEvent : public Event {
 public:
  absl::StatusOr<bool> Query() override {
    std::optional<Mark> mark = Get();
    if (!mark) return true;
    std::lock_guard<std::mutex> lock(mark->stream->mu);
    if (mark->stream->completed < mark->position) return false;
    RETURN_IF_ERROR(MarkError(*mark));
    return true;
  }

  absl::Status Synchronize() override {
    std::optional<Mark> mark = Get();
    return mark ? WaitForMark(*mark) : absl::OkStatus();
  }

  void Set(Mark mark) {
    std::lock_guard<std::mutex> lock(mu_);
    mark_ = std::move(mark);
  }
  std::optional<Mark> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return mark_;
  }

 private:
  mutable std::mutex mu_;
  std::optional<Mark> mark_;  // guarded by mu_; empty until recorded
};

// What a stream needs of its device.
struct DeviceShared {
  DeviceShared(const std::string& n, int64_t memory_bytes) : name(n), memory(n, memory_bytes) {}
  const std::string name;
  SimMemory memory;
  std::mutex mu;
  std::vector<std::weak_ptr<StreamState>> streams;  // guarded by mu
};

class SimStream : public Stream {
 public:
  SimStream(std::shared_ptr<DeviceShared> device, std::string name, int64_t delay_us_max, uint64_t seed)
      : device_(std::move(device)), state_(std::make_shared<StreamState>(std::move(name))) {
    thread_ = std::thread([state = state_, delay_us_max, seed] { Run(*state, delay_us_max, seed); });
  }

  // Drains the queue, then joins the thread.
  ~SimStream() override {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stopping = true;
    }
    state_->work_ready.notify_one();
    thread_.join();
  }

  const std::shared_ptr<StreamState>& state() const { return state_; }
  const std::string& name() const override { return state_->name; }
  void* native_handle() const override { return nullptr; }

  absl::Status Launch(std::string name, Work work) override {
    if (!work) return absl::InvalidArgumentError(absl::StrCat(state_->name, ": launch '", name, "' has no work"));
    return Enqueue(Task{absl::StrCat("launch '", name, "'"), true, std::move(work)});
  }

  absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes) override {
    return Copy("CopyHostToDevice", dst, false, src, false, bytes);
  }
  absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes) override {
    return Copy("CopyDeviceToHost", dst, true, src, true, bytes);
  }
  absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes) override {
    return Copy("CopyDeviceToDevice", dst, false, src, true, bytes);
  }

  absl::Status Record(Event& event) override {
    auto* sim = dynamic_cast<SimEvent*>(&event);
    if (sim == nullptr) return absl::InvalidArgumentError(absl::StrCat(state_->name, ": Record: not a sim event"));
    std::lock_guard<std::mutex> lock(state_->mu);
    sim->Set(Mark{state_, state_->enqueued});
    return absl::OkStatus();
  }

  absl::Status Wait(const Event& event) override {
    auto* sim = dynamic_cast<const SimEvent*>(&event);
    if (sim == nullptr) return absl::InvalidArgumentError(absl::StrCat(state_->name, ": Wait: not a sim event"));
    // The mark as it is now: a later Record does not change what we wait for.
    std::optional<Mark> mark = sim->Get();
    if (!mark) return absl::OkStatus();
    std::string name = absl::StrCat("wait for ", mark->stream->name, " to reach task ", mark->position);
    return Enqueue(Task{std::move(name), false, [mark = *mark]() -> absl::Status {
                          absl::Status status = WaitForMark(mark);
                          // The other stream's failure poisons this one's later work too.
                          if (!status.ok()) return absl::Status(status.code(), absl::StrCat("waited on failed work: ",
                                                                                            status.message()));
                          return absl::OkStatus();
                        }});
  }

  absl::Status Synchronize() override {
    std::unique_lock<std::mutex> lock(state_->mu);
    const uint64_t target = state_->enqueued;
    state_->progress.wait(lock, [&] { return state_->completed >= target; });
    return state_->error;
  }

 private:
  // The stream's thread: runs tasks in order until stopped with nothing left.
  static void Run(StreamState& s, int64_t delay_us_max, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> delay(0, delay_us_max);
    for (;;) {
      Task task;
      bool skip = false;
      {
        std::unique_lock<std::mutex> lock(s.mu);
        s.work_ready.wait(lock, [&] { return !s.queue.empty() || s.stopping; });
        if (s.queue.empty()) return;
        task = std::move(s.queue.front());
        s.queue.pop_front();
        // After a failure nothing more runs: it could only read bad data.
        skip = !s.error.ok();
      }
      absl::Status status;
      if (!skip) {
        if (task.delayed && delay_us_max > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay(rng)));
        status = RunCaught(task);
      }
      {
        std::lock_guard<std::mutex> lock(s.mu);
        if (!status.ok() && s.error.ok()) {
          s.error = Annotate(absl::StrCat(s.name, ": ", task.name), status);
          s.error_position = s.completed;
        }
        ++s.completed;
      }
      s.progress.notify_all();
    }
  }

  absl::Status Enqueue(Task task) {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (!state_->error.ok()) return state_->error;
      state_->queue.push_back(std::move(task));
      ++state_->enqueued;
    }
    state_->work_ready.notify_one();
    return absl::OkStatus();
  }

  // Checks each side is the memory its direction says, then queues a memmove
  // (device-to-device ranges may overlap).
  absl::Status Copy(const char* what, void* dst, bool dst_host, const void* src, bool src_device, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    const std::string where = absl::StrCat(state_->name, ": ", what);
    const SimMemory& memory = device_->memory;
    RETURN_IF_ERROR(Annotate(where, dst_host ? memory.CheckHostRange(dst, bytes, "destination")
                                             : memory.CheckDeviceRange(dst, bytes, "destination")));
    RETURN_IF_ERROR(Annotate(where, src_device ? memory.CheckDeviceRange(src, bytes, "source")
                                               : memory.CheckHostRange(src, bytes, "source")));
    return Enqueue(Task{absl::StrCat(what, " (", bytes, " bytes)"), true, [dst, src, bytes] {
                          std::memmove(dst, src, bytes);
                          return absl::OkStatus();
                        }});
  }

  const std::shared_ptr<DeviceShared> device_;
  const std::shared_ptr<StreamState> state_;
  std::thread thread_;
};

class SimDevice : public Device {
 public:
  explicit SimDevice(const DeviceOptions& options)
      : options_(options),
        shared_(std::make_shared<DeviceShared>(absl::StrCat("sim:", options.ordinal), options.memory_bytes)) {}

  DeviceKind kind() const override { return DeviceKind::kSim; }
  KernelStyle kernel_style() const override { return KernelStyle::kHostWork; }
  const std::string& name() const override { return shared_->name; }

  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(std::string name) override {
    uint64_t index;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      index = streams_created_++;
    }
    // Each stream draws its own delays, reproducibly from the device's seed.
    auto stream = std::make_unique<SimStream>(shared_, absl::StrCat(shared_->name, "/", name), options_.delay_us_max,
                                              options_.seed + 0x9E3779B97F4A7C15ull * (index + 1));
    std::lock_guard<std::mutex> lock(shared_->mu);
    auto& streams = shared_->streams;
    streams.erase(std::remove_if(streams.begin(), streams.end(), [](const auto& s) { return s.expired(); }),
                  streams.end());
    streams.push_back(stream->state());
    return std::unique_ptr<Stream>(std::move(stream));
  }

  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override { return std::make_unique<SimEvent>(); }

  absl::StatusOr<void*> AllocateRaw(size_t bytes) override { return shared_->memory.Allocate(bytes); }

  absl::Status FreeRaw(void* ptr) override {
    if (ptr == nullptr) return absl::OkStatus();
    WaitForStreams();
    return shared_->memory.Free(ptr, "FreeRaw");
  }

  absl::StatusOr<void*> AllocateHostPinned(size_t bytes) override {
    void* ptr = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(kSimGuardBytes), std::nothrow);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(name(), ": AllocateHostPinned: out of memory for ", bytes,
                                                       " bytes"));
    }
    std::lock_guard<std::mutex> lock(pinned_mu_);
    pinned_.insert(ptr);
    return ptr;
  }

  absl::Status FreeHostPinned(void* ptr) override {
    if (ptr == nullptr) return absl::OkStatus();
    {
      std::lock_guard<std::mutex> lock(pinned_mu_);
      if (pinned_.erase(ptr) == 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: FreeHostPinned: %p is not pinned memory of this device", name(), ptr));
      }
    }
    WaitForStreams();  // cudaFreeHost waits too
    ::operator delete(ptr, std::align_val_t(kSimGuardBytes));
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    absl::Status first;
    for (const std::shared_ptr<StreamState>& s : LiveStreams()) {
      std::unique_lock<std::mutex> lock(s->mu);
      const uint64_t target = s->enqueued;
      s->progress.wait(lock, [&] { return s->completed >= target; });
      if (first.ok()) first = s->error;
    }
    return first;
  }

  ~SimDevice() override {
    for (void* ptr : pinned_) ::operator delete(ptr, std::align_val_t(kSimGuardBytes));
  }

 private:
  std::vector<std::shared_ptr<StreamState>> LiveStreams() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    std::vector<std::shared_ptr<StreamState>> live;
    for (const auto& weak : shared_->streams) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
    return live;
  }

  // Memory is freed only once no queued work can touch it; errors are left
  // for Synchronize to report.
  void WaitForStreams() { Synchronize().IgnoreError(); }

  const DeviceOptions options_;
  const std::shared_ptr<DeviceShared> shared_;
  uint64_t streams_created_ = 0;  // guarded by shared_->mu
  std::mutex pinned_mu_;
  std::set<void*> pinned_;  // guarded by pinned_mu_
};

absl::StatusOr<std::unique_ptr<Device>> CreateSimDevice(const DeviceOptions& options) {
  if (options.ordinal < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sim device: negative ordinal ", options.ordinal));
  }
  if (options.delay_us_max < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sim device: negative delay_us_max ", options.delay_us_max));
  }
  if (options.memory_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sim device: negative memory_bytes ", options.memory_bytes));
  }
  return std::unique_ptr<Device>(std::make_unique<SimDevice>(options));
}

}  // namespace

NEREID_REGISTER_DEVICE("sim", CreateSimDevice);

}  // namespace nereid
