#ifndef NEREID_SCHEDULERS_DEVICE_STREAMS_H_
#define NEREID_SCHEDULERS_DEVICE_STREAMS_H_

// The executor's side of a placed plan (passes/place_pass.cc): the device
// the plan names, its streams, its memory, and the rule that orders work
// across streams without the host waiting.
//
// Streams: `compute_streams` compute streams, a host-to-device and a
// device-to-host copy stream. A node keeps one stream for the whole run:
// CopyToDevice on the first copy stream, CopyToHost on the second, every
// other device node on compute stream (its position in topological order mod
// compute_streams), so consecutive nodes alternate streams and every edge
// between them is ordered by an event, not by a queue.
//
// Ordering: every device tensor is a fresh block from the stream-ordered
// caching allocator, written once, by the work that produced it. The block
// remembers that write (an event recorded on the producer's stream right
// after it). Work launched on a stream first waits for the writes of the
// blocks it reads that came from other streams (Stream::Wait: the stream
// waits, the host does not) and declares those blocks used on its stream
// (CachingAllocator::RecordUse), so a block freed by the host once its last
// reader was enqueued is not handed out again before that reader ran.
//
// Communication placed on the device (place(comm=device)) runs on one
// stream per collective group, in the order the worker's collective queue
// issues it (schedulers/stream_issued_queue.h): its kernels are launched with
// LaunchAsync, whose launch is over when the collective has been issued.
//
// Copies between host and device go through pinned host blocks kept for
// reuse (device/pinned_pool.h), so that on CUDA they are queued on their
// copy stream rather than staged by the driver (a copy into pageable memory
// makes the host wait until it is done).
//
// The host waits only where it reads device memory: a CopyToHost's
// completion (on a watcher thread, which then calls back), fetched values
// and evaluation results, State(). A host node given a device tensor is an
// error, as a host pointer given to a device node is.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "core/trace.h"
#include "device/caching_allocator.h"
#include "device/device.h"
#include "device/pinned_pool.h"
#include "graph/ir.h"

namespace nereid {

struct DeviceStreamsOptions {
  // The plan's device ("sim:0"); its kind picks the backend.
  std::string device;
  int compute_streams = 1;
  // The sim's random delay before each launch and copy, and its seed.
  int64_t delay_us_max = 0;
  uint64_t seed = 0;
  // The sim's memory in bytes (0: as much as the host gives).
  int64_t memory_bytes = 0;
  // Records each stream's kernels ("kernel") and copies ("copy") on a track
  // named for the stream, and every wait of the host for the device
  // ("sync") on the waiting thread's track (null: nothing).
  TraceRecorder* trace = nullptr;
  // Tests only: the node whose launch skips its waits for other streams'
  // writes, so that a test can show the simulation catching a missing wait.
  std::string skip_waits_of;
};

// Counters for tests and traces.
struct DeviceStreamsStats {
  int64_t launches = 0;
  int64_t cross_stream_waits = 0;  // Stream::Wait calls on other streams' writes
  int64_t host_waits = 0;          // the host waiting for device work (copies out, Synchronize, kernels' reads)
  AllocatorStats memory;
  PinnedPoolStats pinned;  // the copies' page-locked staging blocks
};

class DeviceStreams {
 public:
  // Streams for the nodes of `graph` placed on options.device.
  static absl::StatusOr<std::unique_ptr<DeviceStreams>> Create(const Graph& graph, DeviceStreamsOptions options);
  // Waits for the device, then frees what it holds.
  ~DeviceStreams();

  const std::string& device_name() const { return options_.device; }
  // Whether the device runs the host's kernels as stream work (the sim) or
  // GPU kernels that enqueue their own work (CUDA).
  KernelStyle kernel_style() const { return device_->kernel_style(); }
  bool OnDevice(const Node& node) const { return node.def().device() == options_.device; }
  // The stream `node`'s work runs on (null: not on this device).
  Stream* StreamOf(const Node& node) const;
  // Whether `tensor`'s data lies in a block of this device.
  bool IsDeviceTensor(const Tensor& tensor) const;

  // A device tensor for work on `node`'s stream; its block goes back to the
  // allocator when the last Tensor sharing it is gone.
  absl::StatusOr<Tensor> Allocate(const Node& node, DataType dtype, std::vector<int64_t> dims);

  // Runs `work` on `node`'s stream once the writes of `inputs` (device
  // tensors) are done; marks `outputs` (allocated for the node) written by
  // it. `step` labels its trace span. On a device of KernelStyle::kEnqueued,
  // `work` is called here, after the stream's waits are enqueued, and
  // enqueues the kernel's own work on the stream.
  absl::Status Launch(const Node& node, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                      int64_t step, Stream::Work work);
  // An asynchronous kernel (a collective) on `node`'s stream: the stream's
  // waits for the writes of `inputs` are enqueued now, then `start(finish)`
  // starts the kernel (on the sim as work on the stream, on CUDA here). The
  // kernel calls `finish` once, from any thread, when its last work is on the
  // stream (or it failed); `outputs` are then marked written by that work and
  // `done` gets the status. Should the stream fail before the kernel started
  // (its work is then skipped), FailPending ends the launch instead.
  using Finish = std::function<void(absl::Status)>;
  absl::Status LaunchAsync(const Node& node, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs,
                           int64_t step, std::function<void(Finish)> start, std::function<void(absl::Status)> done);
  // Ends every asynchronous launch whose kernel has not started with
  // `status` (the run failed: a kernel skipped on a failed stream would never
  // finish). A started kernel ends through its queue, which ends every issue.
  void FailPending(const absl::Status& status);

  // CopyToDevice: `host` into `device_out`, on the copy stream. `host` is
  // kept alive until the copy has run.
  absl::Status CopyIn(const Node& node, Tensor host, const Tensor& device_out);
  // CopyToHost: `device_in` into `host_out` once written; `done` runs on the
  // watcher thread when the copy has completed (or failed). `host_out` must
  // stay alive until then.
  void CopyOut(const Node& node, const Tensor& device_in, Tensor host_out, std::function<void(absl::Status)> done);

  // Synchronous transfers outside steps: a Parameter's value onto `node`'s
  // stream (initial values, restored state), whose work reuses its block
  // later; values read back (State, fetches).
  absl::StatusOr<Tensor> Upload(const Node& node, const Tensor& host);
  absl::StatusOr<Tensor> Download(const Tensor& device);

  // The host waits for every stream; the first failure of the device's work.
  absl::Status Synchronize();
  // A wait a GPU kernel makes for its own stream inside a launch (a size it
  // must read back before its next call): `wait` runs counted in host_waits
  // and recorded as a "sync" span named `what`, as the scheduler's own.
  absl::Status KernelHostWait(const std::string& what, const std::function<absl::Status()>& wait);
  // Synchronize, then each of `values` that is a device tensor replaced by
  // its host copy (fetched values, evaluation results).
  absl::Status SynchronizeAndReadBack(std::vector<Tensor>& values);

  DeviceStreamsStats stats() const;

 private:
  struct Written {
    DeviceBlock block;
    std::shared_ptr<Event> event;  // recorded after the write; null until written
    Stream* writer = nullptr;
  };
  struct Watch {
    std::shared_ptr<Event> event;
    std::string what;  // the copy's node
    std::function<void(absl::Status)> done;
  };

  explicit DeviceStreams(DeviceStreamsOptions options) : options_(std::move(options)) {}
  // `work` recorded on its stream's track (when tracing).
  Stream::Work Traced(Stream* stream, std::string name, const char* category, int64_t step, Stream::Work work);
  // Enqueues a copy; when tracing, a span from its start to its end.
  absl::Status TracedCopy(Stream* stream, const std::string& name, const std::function<absl::Status()>& enqueue);
  // Waits for `event` (or, null, the whole device), recorded as a "sync".
  absl::Status HostWait(const std::string& what, Event* event);
  absl::StatusOr<Tensor> AllocateOn(Stream* stream, DataType dtype, std::vector<int64_t> dims);
  // Makes `stream` wait for the writes of `inputs` on other streams.
  absl::Status WaitForWrites(Stream* stream, const std::vector<Tensor>& inputs, bool skip);
  // Records the event that marks `outputs` written by `stream`'s work so far.
  absl::Status MarkWritten(Stream* stream, const std::vector<Tensor>& outputs);
  void Released(void* ptr);
  // Calls each watch's `done` with its event's outcome, in `queue`'s order;
  // `host_wait`: counted and traced as the host's wait (copies out).
  void WatchLoop(std::deque<Watch>* queue, bool host_wait);
  // Launch `id`'s end, taken out of pending_, if its kernel has not started
  // (and it has not ended); else null.
  Finish TakeUnstarted(int64_t id);

  const DeviceStreamsOptions options_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<PinnedPool> pinned_;  // host<->device copies are staged through it
  std::vector<std::unique_ptr<Stream>> compute_;
  std::map<std::string, std::unique_ptr<Stream>> comm_;  // one per collective group (place(comm=device))
  std::unique_ptr<Stream> copy_in_, copy_out_;
  std::map<int, Stream*> stream_of_;  // node id -> its stream
  std::map<Stream*, int> track_of_;   // its trace track
  int skip_waits_of_ = -1;            // node id (tests)

  mutable std::mutex mu_;
  std::map<const void*, Written> written_;  // by block start; guarded by mu_
  struct Pending {
    Finish end;
    bool started = false;  // the kernel was started; it ends through its own path
  };
  std::map<int64_t, Pending> pending_;      // asynchronous launches not finished; guarded by mu_
  int64_t next_pending_ = 0;                // guarded by mu_
  DeviceStreamsStats stats_;                // guarded by mu_

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::deque<Watch> watches_;  // copies out; guarded by watch_mu_
  // Asynchronous launches on the sim, each watched by an event after its
  // kernel's task: one skipped because another stream's failure poisoned
  // this one ends with that failure at once, not at the step's timeout.
  // Apart from the copies out, which a collective waiting for its peers
  // would otherwise hold up.
  std::deque<Watch> launch_watches_;  // guarded by watch_mu_
  bool stopping_ = false;             // guarded by watch_mu_
  std::thread watcher_, launch_watcher_;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_DEVICE_STREAMS_H_
