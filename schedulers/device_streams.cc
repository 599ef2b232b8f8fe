#include "schedulers/device_streams.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "device/device_registry.h"
#include "ops/collective_schedule.h"
#include "ops/topo_order.h"

namespace nereid {

absl::StatusOr<std::unique_ptr<DeviceStreams>> DeviceStreams::Create(const Graph& graph,
                                                                      DeviceStreamsOptions options) {
  const std::string& device = options.device;
  const size_t colon = device.find(':');
  int ordinal = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(device.substr(colon + 1), &ordinal)) {
    return absl::InvalidArgumentError(absl::StrCat("the plan's device '", device, "' is not <kind>:<ordinal>"));
  }
  const std::string kind = device.substr(0, colon);
  const std::vector<std::string> backends = DeviceRegistry::Global().Names();
  if (kind == "cuda" && std::find(backends.begin(), backends.end(), kind) == backends.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan places nodes on ", device, ", and this binary was built without CUDA: build it with "
        "--config=cuda (NEREID_CUDA=1 ./nereid ...), or plan with place(device=sim)"));
  }
  if (options.compute_streams < 1) {
    return absl::InvalidArgumentError(absl::StrCat("compute_streams must be at least 1, not ",
                                                   options.compute_streams));
  }
  std::unique_ptr<DeviceStreams> s(new DeviceStreams(std::move(options)));
  DeviceOptions dopts;
  dopts.ordinal = ordinal;
  dopts.delay_us_max = s->options_.delay_us_max;
  dopts.seed = s->options_.seed;
  dopts.memory_bytes = s->options_.memory_bytes;
  ASSIGN_OR_RETURN(s->device_, DeviceRegistry::Global().Create(kind, dopts));
  for (int i = 0; i < s->options_.compute_streams; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, s->device_->CreateStream(absl::StrCat("compute", i)));
    s->compute_.push_back(std::move(stream));
  }
  ASSIGN_OR_RETURN(s->copy_in_, s->device_->CreateStream("copy_in"));
  ASSIGN_OR_RETURN(s->copy_out_, s->device_->CreateStream("copy_out"));
  s->allocator_ = std::make_unique<CachingAllocator>(s->device_.get());
  s->pinned_ = std::make_unique<PinnedPool>(s->device_.get());

  ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
  int position = 0;
  for (const Node* n : order) {
    Stream* stream;
    if (n->op() == "CopyToDevice") {
      stream = s->copy_in_.get();
    } else if (n->op() == "CopyToHost") {
      stream = s->copy_out_.get();
    } else if (s->OnDevice(*n) && Communicates(*n)) {
      // A group's collectives share its stream, which runs them in the order
      // the group's queue issues them (stream_issued_queue.h); the
      // transfers have theirs.
      const std::string group = IsDeviceTransfer(*n) ? std::string(kTransferGroup) : CollectiveGroup(*n);
      std::unique_ptr<Stream>& comm = s->comm_[group];
      if (comm == nullptr) {
        ASSIGN_OR_RETURN(comm, s->device_->CreateStream(group.empty() ? "comm" : absl::StrCat("comm/", group)));
      }
      stream = comm.get();
    } else if (s->OnDevice(*n)) {
      stream = s->compute_[position++ % s->compute_.size()].get();
    } else {
      continue;
    }
    s->stream_of_[n->id()] = stream;
    if (n->name() == s->options_.skip_waits_of) s->skip_waits_of_ = n->id();
  }
  if (TraceRecorder* trace = s->options_.trace; trace != nullptr) {
    // Clear of the threads' tracks and the collective engine's (1000).
    int track = 2000;
    for (auto& stream : s->compute_) s->track_of_[stream.get()] = track++;
    for (auto& [group, stream] : s->comm_) s->track_of_[stream.get()] = track++;
    s->track_of_[s->copy_in_.get()] = track++;
    s->track_of_[s->copy_out_.get()] = track++;
    for (const auto& [stream, tid] : s->track_of_) trace->NameTrack(tid, stream->name());
  }
  if (!s->options_.skip_waits_of.empty() && s->skip_waits_of_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("skip_waits_of: no node '", s->options_.skip_waits_of, "' on ", s->options_.device));
  }
  s->watcher_ = std::thread([raw = s.get()] { raw->WatchLoop(&raw->watches_, /*host_wait=*/true); });
  s->launch_watcher_ = std::thread([raw = s.get()] { raw->WatchLoop(&raw->launch_watches_, /*host_wait=*/false); });
  return s;
}

DeviceStreams::~DeviceStreams() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (launch_watcher_.joinable()) launch_watcher_.join();
  if (device_ != nullptr) device_->Synchronize().IgnoreError();  // errors were reported where they happened
  {
    std::lock_guard<std::mutex> lock(mu_);
    written_.clear();
  }
  // Cached blocks go back to the device before the streams they belong to do.
  allocator_.reset();
  pinned_.reset();  // every copy is over: its blocks are back
}

Stream* DeviceStreams::StreamOf(const Node& node) const {
  auto it = stream_of_.find(node.id());
  return it == stream_of_.end() ? nullptr : it->second;
}

bool DeviceStreams::IsDeviceTensor(const Tensor& tensor) const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_.count(tensor.raw()) > 0;
}

void DeviceStreams::Released(void* ptr) {
  DeviceBlock block;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = written_.find(ptr);
    if (it == written_.end()) return;
    block = it->second.block;
    written_.erase(it);
  }
  // A failure here leaves the block out of the cache; the device's own
  // error, if any, is what the run reports.
  allocator_->Free(block).IgnoreError();
}

absl::StatusOr<Tensor> DeviceStreams::AllocateOn(Stream* stream, DataType dtype, std::vector<int64_t> dims) {
  int64_t elements = 1;
  for (int64_t d : dims) elements *= d;
  ASSIGN_OR_RETURN(DeviceBlock block, allocator_->Allocate(static_cast<size_t>(elements) * DataTypeSize(dtype), stream));
  {
    std::lock_guard<std::mutex> lock(mu_);
    written_[block.ptr] = Written{block, nullptr, stream};
  }
  std::shared_ptr<void> buffer(block.ptr, [this](void* ptr) { Released(ptr); });
  return Tensor::Wrap(dtype, std::move(dims), std::move(buffer));
}

absl::StatusOr<Tensor> DeviceStreams::Allocate(const Node& node, DataType dtype, std::vector<int64_t> dims) {
  Stream* stream = StreamOf(node);
  if (stream == nullptr) {
    return absl::InternalError(absl::StrCat("'", node.name(), "' is not on ", options_.device));
  }
  return AllocateOn(stream, dtype, std::move(dims));
}

absl::Status DeviceStreams::WaitForWrites(Stream* stream, const std::vector<Tensor>& inputs, bool skip) {
  for (const Tensor& input : inputs) {
    std::shared_ptr<Event> event;
    DeviceBlock block;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = written_.find(input.raw());
      if (it == written_.end()) {
        return absl::InternalError(absl::StrCat("an input (", input.DebugString(), ") is not in ", options_.device,
                                                "'s memory: a host value reaches the device without a copy"));
      }
      if (it->second.writer == stream) continue;  // the stream's own order covers it
      event = it->second.event;
      block = it->second.block;
      if (!skip) ++stats_.cross_stream_waits;
    }
    if (!skip && event != nullptr) RETURN_IF_ERROR(stream->Wait(*event));
    RETURN_IF_ERROR(allocator_->RecordUse(block, stream));
  }
  return absl::OkStatus();
}

absl::Status DeviceStreams::MarkWritten(Stream* stream, const std::vector<Tensor>& outputs) {
  ASSIGN_OR_RETURN(std::unique_ptr<Event> made, device_->CreateEvent());
  std::shared_ptr<Event> event = std::move(made);
  RETURN_IF_ERROR(stream->Record(*event));
  std::lock_guard<std::mutex> lock(mu_);
  for (const Tensor& out : outputs) {
    auto it = written_.find(out.raw());
    if (it == written_.end() || it->second.writer != stream) {
      return absl::InternalError(absl::StrCat("an output (", out.DebugString(), ") was not allocated for ",
                                              stream->name()));
    }
    it->second.event = event;
  }
  return absl::OkStatus();
}

Stream::Work DeviceStreams::Traced(Stream* stream, std::string name, const char* category, int64_t step,
                                   Stream::Work work) {
  TraceRecorder* trace = options_.trace;
  if (trace == nullptr) return work;
  return [trace, tid = track_of_.at(stream), name = std::move(name), category, step,
          work = std::move(work)]() -> absl::Status {
    const absl::Time begin = absl::Now();
    absl::Status status = work();
    trace->CompleteOnTrack(tid, name, category, begin, absl::Now(), {{"step", step}});
    return status;
  };
}

absl::Status DeviceStreams::TracedCopy(Stream* stream, const std::string& name,
                                       const std::function<absl::Status()>& enqueue) {
  if (options_.trace == nullptr) return enqueue();
  // The copy's start is the end of a mark before it on the stream.
  auto begin = std::make_shared<absl::Time>();
  RETURN_IF_ERROR(stream->Launch(absl::StrCat(name, " (trace mark)"), [begin] {
    *begin = absl::Now();
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(enqueue());
  return stream->Launch(absl::StrCat(name, " (trace)"),
                        [trace = options_.trace, tid = track_of_.at(stream), name, begin] {
                          trace->CompleteOnTrack(tid, name, "copy", *begin, absl::Now());
                          return absl::OkStatus();
                        });
}

absl::Status DeviceStreams::HostWait(const std::string& what, Event* event) {
  return KernelHostWait(what, [&] { return event != nullptr ? event->Synchronize() : device_->Synchronize(); });
}

absl::Status DeviceStreams::KernelHostWait(const std::string& what, const std::function<absl::Status()>& wait) {
  const absl::Time begin = absl::Now();
  absl::Status status = wait();
  if (options_.trace != nullptr) options_.trace->Complete(what, "sync", begin, absl::Now());
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.host_waits;
  return status;
}

absl::Status DeviceStreams::Launch(const Node& node, const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& outputs, int64_t step, Stream::Work work) {
  Stream* stream = StreamOf(node);
  if (stream == nullptr) return absl::InternalError(absl::StrCat("'", node.name(), "' is not on ", options_.device));
  RETURN_IF_ERROR(WaitForWrites(stream, inputs, node.id() == skip_waits_of_));
  if (device_->kernel_style() == KernelStyle::kHostWork) {
    RETURN_IF_ERROR(stream->Launch(node.name(), Traced(stream, node.name(), "kernel", step, std::move(work))));
  } else {
    // The kernel enqueues its device work on the stream now; the span is the
    // enqueueing, on the host.
    RETURN_IF_ERROR(Traced(stream, node.name(), "launch", step, std::move(work))());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.launches;
  }
  return MarkWritten(stream, outputs);
}

absl::Status DeviceStreams::LaunchAsync(const Node& node, const std::vector<Tensor>& inputs,
                                        std::vector<Tensor> outputs, int64_t step, std::function<void(Finish)> start,
                                        std::function<void(absl::Status)> done) {
  Stream* stream = StreamOf(node);
  if (stream == nullptr) return absl::InternalError(absl::StrCat("'", node.name(), "' is not on ", options_.device));
  RETURN_IF_ERROR(WaitForWrites(stream, inputs, node.id() == skip_waits_of_));
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.launches;
    id = next_pending_++;
    // Marks the outputs written by the work enqueued so far (the kernel's
    // last), unless the launch failed; runs once, whoever calls it first.
    Pending& pending = pending_[id];
    pending.end = [this, stream, outputs = std::move(outputs), done = std::move(done)](absl::Status status) {
      if (status.ok()) status = MarkWritten(stream, outputs);
      done(std::move(status));
    };
  }
  Finish finish = [this, id](absl::Status status) {
    Finish end;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;  // FailPending ended it
      end = std::move(it->second.end);
      pending_.erase(it);
    }
    end(std::move(status));
  };
  // A kernel once started ends through its own path (its queue ends every
  // issue, even on failure), so FailPending leaves it alone; one not started
  // yet (skipped on a failed stream) only FailPending ends.
  auto started = [this, id] {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return false;
    it->second.started = true;
    return true;
  };
  if (device_->kernel_style() == KernelStyle::kEnqueued) {
    if (started()) start(std::move(finish));
    return absl::OkStatus();
  }
  absl::Status enqueued = stream->Launch(
      node.name(), Traced(stream, node.name(), "kernel", step, [start = std::move(start), finish, started]() {
        if (started()) start(finish);
        return absl::OkStatus();
      }));
  // Skipped, the kernel never starts: the event after it says why.
  absl::StatusOr<std::unique_ptr<Event>> event = device_->CreateEvent();
  if (enqueued.ok()) enqueued = event.ok() ? stream->Record(**event) : event.status();
  if (!enqueued.ok()) {
    // Returned here unless it started (it ends through its own path) or
    // FailPending ended it meanwhile (its callback has the failure).
    return TakeUnstarted(id) ? enqueued : absl::OkStatus();
  }
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    launch_watches_.push_back({std::shared_ptr<Event>(*std::move(event)), node.name(), [this, id](absl::Status s) {
                                 if (s.ok()) return;
                                 if (Finish end = TakeUnstarted(id)) end(std::move(s));
                               }});
  }
  watch_cv_.notify_all();
  return absl::OkStatus();
}

void DeviceStreams::FailPending(const absl::Status& status) {
  std::vector<Finish> ends;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.started) {
        ++it;
        continue;
      }
      ends.push_back(std::move(it->second.end));
      it = pending_.erase(it);
    }
  }
  for (Finish& end : ends) end(status);
}

absl::Status DeviceStreams::CopyIn(const Node& node, Tensor host, const Tensor& device_out) {
  Stream* stream = StreamOf(node);
  if (stream == nullptr) return absl::InternalError(absl::StrCat("'", node.name(), "' is not on ", options_.device));
  if (host.num_bytes() != device_out.num_bytes()) {
    return absl::InternalError(absl::StrCat("'", node.name(), "' copies ", host.DebugString(), " into ",
                                            device_out.DebugString()));
  }
  // The release below runs as a host callback, which on CUDA must not free
  // device memory (a call into CUDA): the input must be host memory.
  if (IsDeviceTensor(host)) {
    return absl::InternalError(absl::StrCat("'", node.name(), "' copies to the device a value already there"));
  }
  if (host.num_bytes() == 0) return MarkWritten(stream, {device_out});
  // Through pinned memory, so that the copy is queued, not staged by the
  // driver; the block goes back to the pool once the copy has read it.
  ASSIGN_OR_RETURN(std::shared_ptr<void> staged, pinned_->Acquire(host.num_bytes()));
  std::memcpy(staged.get(), host.raw(), host.num_bytes());
  RETURN_IF_ERROR(TracedCopy(stream, node.name(), [&] {
    return stream->CopyHostToDevice(const_cast<void*>(device_out.raw()), staged.get(), host.num_bytes());
  }));
  absl::Status released = stream->Launch(absl::StrCat(node.name(), " (release the pinned block)"),
                                         [kept = staged]() mutable {
                                           kept.reset();
                                           return absl::OkStatus();
                                         });
  if (!released.ok()) {
    // The copy may still read the block: it goes back once the stream is done.
    stream->Synchronize().IgnoreError();  // the refusal is what this reports
    return released;
  }
  return MarkWritten(stream, {device_out});
}

void DeviceStreams::CopyOut(const Node& node, const Tensor& device_in, Tensor host_out,
                            std::function<void(absl::Status)> done) {
  // Into pinned memory, so that the copy is queued and the host does not
  // wait for it here (a copy into pageable memory returns only once done);
  // the watcher moves the values into `host_out` once the copy is over.
  std::shared_ptr<void> staged;
  auto enqueue = [&]() -> absl::StatusOr<std::shared_ptr<Event>> {
    Stream* stream = StreamOf(node);
    if (stream == nullptr) return absl::InternalError(absl::StrCat("'", node.name(), "' has no copy stream"));
    RETURN_IF_ERROR(WaitForWrites(stream, {device_in}, node.id() == skip_waits_of_));
    if (device_in.num_bytes() > 0) {
      ASSIGN_OR_RETURN(staged, pinned_->Acquire(device_in.num_bytes()));
      RETURN_IF_ERROR(TracedCopy(stream, node.name(), [&] {
        return stream->CopyDeviceToHost(staged.get(), device_in.raw(), device_in.num_bytes());
      }));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Event> event, device_->CreateEvent());
    RETURN_IF_ERROR(stream->Record(*event));
    return std::shared_ptr<Event>(std::move(event));
  };
  absl::StatusOr<std::shared_ptr<Event>> event = enqueue();
  if (!event.ok()) {
    // A copy already queued may still write the block: it goes back once
    // the stream is done.
    if (staged != nullptr) {
      if (Stream* stream = StreamOf(node)) stream->Synchronize().IgnoreError();
    }
    done(event.status());
    return;
  }
  if (staged != nullptr) {
    done = [staged = std::move(staged), host_out, done = std::move(done)](absl::Status status) mutable {
      if (status.ok()) std::memcpy(host_out.raw(), staged.get(), host_out.num_bytes());
      staged.reset();
      done(std::move(status));
    };
  }
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watches_.push_back({*std::move(event), node.name(), std::move(done)});
  }
  watch_cv_.notify_all();  // two watchers share the condition
}

void DeviceStreams::WatchLoop(std::deque<Watch>* queue, bool host_wait) {
  for (;;) {
    Watch watch;
    {
      std::unique_lock<std::mutex> lock(watch_mu_);
      watch_cv_.wait(lock, [&] { return stopping_ || !queue->empty(); });
      if (queue->empty()) return;
      watch = std::move(queue->front());
      queue->pop_front();
    }
    // Copies out complete in their stream's order, so waiting in queue order
    // delays no callback behind a later one (launches: a group's, likewise).
    watch.done(host_wait ? HostWait(absl::StrCat("wait for ", watch.what), watch.event.get())
                         : watch.event->Synchronize());
  }
}

DeviceStreams::Finish DeviceStreams::TakeUnstarted(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second.started) return nullptr;
  Finish end = std::move(it->second.end);
  pending_.erase(it);
  return end;
}

absl::StatusOr<Tensor> DeviceStreams::Upload(const Node& node, const Tensor& host) {
  Stream* stream = StreamOf(node);
  if (stream == nullptr) return absl::InternalError(absl::StrCat("'", node.name(), "' is not on ", options_.device));
  ASSIGN_OR_RETURN(Tensor device, AllocateOn(stream, host.dtype(), host.dims()));
  if (host.num_bytes() > 0) RETURN_IF_ERROR(stream->CopyHostToDevice(device.raw(), host.raw(), host.num_bytes()));
  RETURN_IF_ERROR(MarkWritten(stream, {device}));
  // `host` may be gone once this returns.
  RETURN_IF_ERROR(stream->Synchronize());
  return device;
}

absl::StatusOr<Tensor> DeviceStreams::Download(const Tensor& device) {
  ASSIGN_OR_RETURN(Tensor host, Tensor::Allocate(device.dtype(), device.dims()));
  RETURN_IF_ERROR(WaitForWrites(copy_out_.get(), {device}, /*skip=*/false));
  if (device.num_bytes() > 0) {
    RETURN_IF_ERROR(copy_out_->CopyDeviceToHost(host.raw(), device.raw(), device.num_bytes()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Event> done, device_->CreateEvent());
  RETURN_IF_ERROR(copy_out_->Record(*done));
  RETURN_IF_ERROR(HostWait("read back", done.get()));
  return host;
}

absl::Status DeviceStreams::Synchronize() { return HostWait("synchronize", nullptr); }

absl::Status DeviceStreams::SynchronizeAndReadBack(std::vector<Tensor>& values) {
  RETURN_IF_ERROR(Synchronize());
  for (Tensor& t : values) {
    if (!IsDeviceTensor(t)) continue;
    ASSIGN_OR_RETURN(t, Download(t));
  }
  return absl::OkStatus();
}

DeviceStreamsStats DeviceStreams::stats() const {
  DeviceStreamsStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  s.memory = allocator_->stats();
  s.pinned = pinned_->stats();
  return s;
}

}  // namespace nereid
