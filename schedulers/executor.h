#ifndef NEREID_SCHEDULERS_EXECUTOR_H_
#define NEREID_SCHEDULERS_EXECUTOR_H_

// Runs a planned graph, one training step (loop iteration) at a time or
// several overlapped, as the progress tracker's bound allows.
//
// Within a step every node is a oneTBB task, dispatched once all its inputs of
// that step exist. Across steps, a Parameter at step s takes the value its
// Feedback produced at step s-1 (or its initial value at the first step), so
// step s+1 may start as soon as the tracker lets it (K = max_steps_in_flight:
// 1 is synchronous) and each Parameter's read waits for its own value only.
//
// Cores: the worker's T threads are tokens. A node is dispatched once the
// cores it needs are free and holds them while it runs; its kernel's
// intra-op parallelism (oneDNN's OpenMP threads or oneTBB loops) uses exactly
// those. How many a node needs is fixed, not taken from what happens to be
// idle: min(T, what its kernel finds useful for its shapes), learnt from its
// first run with those feed shapes (which reserves all T). So two light nodes
// run at once on two cores, a heavy one gets every core, at most T threads
// are busy, and every reduction splits the same way in every run: results are
// bit for bit reproducible for a given T, whatever the timing.
//
// Memory: each value of a step is dropped once its last consumer in that step
// has run, which returns its buffer to the pool for the next allocation.
//
// A placed plan (passes/place_pass.cc, on the sim) runs its device nodes
// asynchronously on the device's streams (schedulers/device_streams.h): the
// node's task allocates its outputs in device memory, enqueues its kernel
// behind event waits for its inputs, and finishes at once, so the host
// dispatches ahead of the device and work on different streams overlaps. A
// CopyToHost finishes when its copy has, and the host waits for the device
// nowhere else inside a step; FinishStep waits for the step's device work
// and reads fetched values back.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/tensor.h"
#include "core/trace.h"
#include "graph/ir.h"
#include "ops/collective_schedule.h"
#include "ops/kernel.h"
#include "schedulers/collective_engine.h"
#include "schedulers/device_streams.h"
#include "schedulers/progress_tracker.h"
#include "schedulers/stream_issued_queue.h"
#include "schedulers/fixed_bucket_queue.h"

namespace nereid {

struct ExecutorOptions {
  int threads = 1;
  std::string device = std::string(kCpu);
  // 0: take it from the graph's training loop scope (default 1).
  int max_steps_in_flight = 0;
  // A step that makes no progress for this long fails, naming what it waits on.
  absl::Duration step_timeout = absl::Minutes(10);
  // The worker's collective engine for communication kernels (null: a worker
  // alone). On a failure the executor aborts it, so no kernel waits forever.
  CollectiveEngine* collectives = nullptr;
  // The engines of the process groups this rank belongs to, by the declared
  // group name (the plan's groups): one for training steps, one for
  // evaluation (which issues only the forward collectives). A collective node
  // gets the engine its `group` attribute names.
  absl::flat_hash_map<std::string, CollectiveEngine*> group_collectives;
  // Send and Recv nodes' transfers (null: the worker runs alone).
  PointToPointChannel* point_to_point = nullptr;
  absl::flat_hash_map<std::string, CollectiveEngine*> group_eval_collectives;
  // This rank's index in each group, by name: a sharded Parameter
  // (shard_group) starts from that block of its full initial value.
  absl::flat_hash_map<std::string, int> group_ranks;
  // Records every node run (name, op type, step) on its thread's track, and an
  // asynchronous node's wait from submission to done (null: none). Must
  // outlive the executor.
  TraceRecorder* trace = nullptr;
  // The nice value the threads running nodes take (0: unchanged). Raised in
  // multi-worker runs so that communication threads, which sleep on the
  // network, preempt computation the moment their data arrives: with more
  // busy threads than cores, every hop of a ring allreduce otherwise waits
  // for a scheduler slot, and the allreduce overlapping the next step's
  // compute (Pipe-SGD) runs at a fraction of the link's speed.
  int compute_nice = 0;
  // Fault injection (NEREID_FAULTS slow=30ms): every training step holds a
  // core this much longer, at its first node to run, as a slower machine
  // would. Zero: none.
  absl::Duration slow_step = absl::ZeroDuration();
  // Tests only: the device node whose launch skips its waits for other
  // streams (DeviceStreamsOptions::skip_waits_of).
  std::string skip_device_waits_of;
};

// Feed name ("images", "labels") -> the batch tensor.
using FeedMap = absl::flat_hash_map<std::string, Tensor>;

class Executor {
 public:
  // `graph` must have passed validation and shape inference and outlive the
  // executor. Creates a kernel per node (an error names a node without one)
  // and materialises every Parameter's initial value.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const Graph* graph, ExecutorOptions options);
  ~Executor();

  // Runs one training step: every node of the graph once, at `step`.
  // Returns the fetched nodes' output 0.
  absl::StatusOr<std::vector<Tensor>> RunStep(const StepInfo& step, const FeedMap& feeds,
                                              const std::vector<std::string>& fetches);
  // RunStep in two halves, so a driver can start step s+1 before step s has
  // finished (the tracker decides whether it may: StartStep blocks until it
  // does). Steps must start in order, one after the other.
  absl::Status StartStep(const StepInfo& step, FeedMap feeds, const std::vector<std::string>& fetches);
  absl::StatusOr<std::vector<Tensor>> FinishStep(int64_t step);

  // Computes `fetches` from the current parameter values without changing
  // them (evaluation: step.training is normally false). Runs only the nodes
  // the fetches need.
  absl::StatusOr<std::vector<Tensor>> Evaluate(const StepInfo& step, const FeedMap& feeds,
                                               const std::vector<std::string>& fetches);

  // The value every Parameter (trainable or state) has after the last
  // completed step, by node name.
  std::vector<std::pair<std::string, Tensor>> State() const;
  // Replaces a Parameter's current value (restoring a checkpoint); dims must
  // match.
  absl::Status SetState(const std::string& name, const Tensor& value);

  // Fails every step in flight with `status` (and aborts the collective
  // engine); FinishStep then returns it once their nodes have stopped.
  void Abort(absl::Status status) { Fail(std::move(status)); }

  int threads() const { return threads_; }
  // The plan's device, when it places nodes on one (null otherwise).
  const DeviceStreams* device() const { return streams_.get(); }
  const ProgressTracker& tracker() const { return *tracker_; }

 private:
  struct StepRun;

  Executor(const Graph* graph, ExecutorOptions options);
  absl::Status Init();
  // The last few full initial values drawn for pieces or shards, so that the
  // pieces of one tensor (near each other in node order, interleaved with
  // their optimizer state's pieces) draw it once between them, not once
  // each: he_normal for a 16.7M-float weight takes ~0.4 s, and a server
  // holds 64 of its pieces. A few, not all: a model's worth would double a
  // server's memory at start-up.
  // Keyed by shape and initialiser, most recent first, at most kKeptFullValues.
  using FullInitialValues = std::vector<std::pair<std::string, Tensor>>;
  static constexpr size_t kKeptFullValues = 4;
  // A Parameter's value at step 0 (a piece's or a shard's part of the full value).
  absl::StatusOr<Tensor> InitialValue(const Node& parameter, const TensorProto& init, FullInitialValues* recent) const;
  // `init` drawn for `shape`, reusing one of `recent` where it holds the same.
  static absl::StatusOr<const Tensor*> FullValue(const TensorProto& init, const TensorShape& shape,
                                                 FullInitialValues* recent);
  // The nodes `fetches` need, in topological order (cached: evaluation asks
  // for the same fetches every batch).
  absl::StatusOr<const std::vector<int64_t>*> EvaluationOrder(const std::vector<std::string>& fetches);
  // A node's kernel context: its inputs from `values`, its output dims.
  struct NodeRun;
  absl::StatusOr<std::unique_ptr<NodeRun>> PrepareNode(const Node& node, const StepInfo& step, const FeedMap& feeds,
                                                       const std::vector<std::vector<Tensor>>& values,
                                                       const Tensor* source, int reserved_threads);
  // Runs one node's kernel to completion (an asynchronous one is waited for)
  // on `reserved_threads` cores; `first_request` (if not null) gets what the
  // kernel found useful (OpKernelContext::first_request).
  absl::Status RunNode(const Node& node, const StepInfo& step, const FeedMap& feeds,
                       const std::vector<std::vector<Tensor>>& values, const Tensor* source, int reserved_threads,
                       std::vector<Tensor>* outputs, int* first_request);
  absl::Status KernelError(const Node& node, const StepInfo& step, const absl::Status& status) const;
  // A device node other than a Parameter or a Feedback (which only pass
  // device tensors on, on the host).
  bool LaunchesOnDevice(const Node& node) const;
  // The worker's collective queue (for a training step or evaluation) and
  // point-to-point channel, for a kernel that communicates.
  void ConnectCommunication(const Node& node, const StepInfo& step, OpKernelContext& ctx) const;
  // Allocates the node's outputs on the device and enqueues its kernel (or
  // its copy in) on its stream; the outputs, to be read by device work only.
  // An asynchronous kernel (a collective placed with comm=device) is over
  // when its collective is issued: `issued` gets the status and the outputs
  // then, on any thread (this one included).
  using IssuedCallback = std::function<void(absl::Status, std::vector<Tensor>)>;
  absl::StatusOr<std::vector<Tensor>> LaunchOnDevice(const Node& node, const StepInfo& step,
                                                     const std::vector<std::vector<Tensor>>& values,
                                                     IssuedCallback issued = nullptr);
  // What a launch needs once its work runs, which may be after the step's
  // values are gone: views of the inputs and outputs (the executor's Tensors
  // keep the blocks; the stream-ordered allocator keeps them from being
  // reused before the work ran) and its own copy of the step.
  struct DeviceLaunchState {
    StepInfo step;
    std::vector<Tensor> input_views;
    std::unique_ptr<OpKernelContext> ctx;
    DeviceLaunch device;                          // GPU kernels only
    std::unique_ptr<StreamIssuedQueue> issuing;  // asynchronous kernels with a queue only
  };
  absl::Status LaunchAsyncOnDevice(const Node& node, OpKernel& kernel, const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& outputs, std::shared_ptr<DeviceLaunchState> launch,
                                   IssuedCallback issued);
  // A step's device node or CopyToHost.
  void ExecuteOnDevice(StepRun* run, int node_id, int cores);
  // A host node must not be handed device memory.
  absl::Status CheckHostInputs(const Node& node, const std::vector<std::vector<Tensor>>& values) const;
  absl::StatusOr<const std::vector<std::vector<int64_t>>*> OutputDims(const Node& node,
                                                                      const std::vector<const Tensor*>& inputs);
  void Dispatch(std::unique_lock<std::mutex>& lock);
  void Execute(StepRun* run, int node_id, int cores);
  // The first failure of a collective enqueued on a device stream (NCCL:
  // the world's or a group's), found after the step; OK if none.
  absl::Status DeferredCollectiveFailure();
  // The index of these feeds' dims among those seen (a step's node core
  // counts are learnt per feed shapes: a smaller last batch may need fewer).
  // Under mu_.
  int ShapeClass(const FeedMap& feeds);
  // The cores `node_id` is dispatched with in `run`; under mu_.
  int CoresFor(const StepRun& run, int node_id) const;
  // A node whose kernel waits without a core (a transfer, a copy out, a
  // collective's issue) gives back the `cores` it was dispatched with.
  void GiveBackCores(int shape_class, int node_id, int cores);
  // Records what the node's kernel found useful; under mu_.
  void LearnCores(int shape_class, int node_id, int first_request);
  // `cores_held`: the cores the node still holds (0 for an asynchronous
  // kernel, which gave them back when it started). `first_request`: what its
  // kernel found useful, learnt for its next runs (-1: nothing to learn).
  void Finish(StepRun* run, int node_id, absl::Status status, std::vector<Tensor> outputs, int cores_held,
              int first_request);
  // Records the first failure; aborts the collective engine. Called without mu_.
  void Fail(absl::Status status);

  const Graph* graph_;
  ExecutorOptions options_;
  int threads_;
  std::vector<const Node*> nodes_;  // by id (null for removed ids)
  std::vector<std::unique_ptr<OpKernel>> kernels_;
  // The plan's device (null: every node on the host). Declared before every
  // member that may hold device tensors, so it is destroyed after them.
  std::unique_ptr<DeviceStreams> streams_;
  std::vector<int> feedback_target_;  // by id: the Parameter a Feedback feeds, or -1
  std::vector<int> in_step_inputs_;   // by id: data and control inputs within a step
  std::vector<int> consumers_;        // by id: data out-edges within a step
  // by id: the collective queue a node's kernel gets in training and in
  // evaluation (null: none).
  std::vector<CollectiveQueue*> step_queue_, eval_queue_;
  // The transfers placed on a device: their places in the rank's order;
  // and the queues of the nodes issued at a place of their own (the
  // transfers, the collectives of groups split across a GPU and the host).
  std::optional<TransferBuckets> transfer_buckets_;
  std::vector<std::unique_ptr<FixedBucketQueue>> fixed_queues_;
  // Gives node n queues issuing it into `step` and `eval` (null: none in
  // evaluation) at `place`.
  void IssueAtFixedPlaces(const Node& n, CollectiveQueue* step, CollectiveQueue* eval, TransferBucket place);
  std::unique_ptr<ProgressTracker> tracker_;

  struct ShapeCache {
    std::mutex mu;
    std::map<std::vector<std::vector<int64_t>>, std::vector<std::vector<int64_t>>> dims;
  };
  std::vector<std::unique_ptr<ShapeCache>> shape_caches_;

  std::mutex order_mu_;
  std::map<std::vector<std::string>, std::vector<int64_t>> evaluation_orders_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  // Parameter id -> its value by the step it is valid at.
  std::map<int, std::map<int64_t, Tensor>> parameter_values_;
  int64_t last_completed_step_ = -1;
  int64_t next_step_ = -1;  // -1 until the first step
  std::map<int64_t, std::unique_ptr<StepRun>> runs_;
  std::deque<std::pair<StepRun*, int>> ready_;  // FIFO: first ready, first run
  int free_cores_;
  // Feed names and dims of each shape class, and by class and node id the
  // cores the node runs on (0: not learnt yet, so all T).
  std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>> feed_shapes_;
  std::vector<std::vector<int>> cores_needed_;
  int running_ = 0;
  absl::Status failed_;
  struct Pool;
  std::unique_ptr<Pool> pool_;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_EXECUTOR_H_
