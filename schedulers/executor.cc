#include "schedulers/executor.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <future>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/initializers.h"
#include "core/tensor_slice.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "ops/collective_schedule.h"
#include "ops/op_registry.h"
#include "ops/topo_order.h"
#include "tbb/global_control.h"
#include "tbb/task_arena.h"

namespace nereid {

namespace {

// oneTBB's workers are shared by every arena in the process and capped, by
// default, at hardware_concurrency - 1: on two cores an executor of two
// threads would run one node at a time. The cap is raised to the live
// executors' threads together (plus the thread that submits), so each
// executor's reserved cores are real threads; ranks run as threads in one
// process (tests) each get theirs. It only grows: idle workers sleep.
void AdjustTbbWorkers(int delta) {
  static std::mutex* mu = new std::mutex();
  static int live = 0;
  static size_t cap = 0;
  static tbb::global_control* control = nullptr;
  std::lock_guard<std::mutex> lock(*mu);
  live += delta;
  const size_t want = std::max<size_t>(std::max(1u, std::thread::hardware_concurrency()), live + 1);
  if (want <= cap) return;
  auto* raised = new tbb::global_control(tbb::global_control::max_allowed_parallelism, want);
  delete control;
  control = raised;
  cap = want;
}

}  // namespace

// oneTBB's arena (T slots, none reserved for the thread that submits work:
// the driver only waits) and a count of the node tasks not yet returned.
//
// Node tasks are enqueued, never submitted through arena.execute: Dispatch
// runs under mu_ and on any thread (the driver starting a step, the collective
// engine finishing an allreduce), and an external thread's execute blocks
// until a worker is free. That stalled the collective engine behind whatever
// node was running (every allreduce waited for the next compute node to end)
// and could deadlock: the engine, holding mu_, waited for the worker, whose
// node waited for mu_ to finish.
struct Executor::Pool {
  struct Task {
    StepRun* run = nullptr;
    int node_id = 0;
    int cores = 0;                        // reserved for it at dispatch
    std::function<void()>* call = nullptr;  // instead of a node: Run's work
    bool* done = nullptr;                 // set under mu once `call` returned
  };
  Pool(Executor* executor, int threads) : executor(executor), threads(threads), arena(threads, 0) {
    AdjustTbbWorkers(threads);
  }
  ~Pool() { AdjustTbbWorkers(-threads); }
  Executor* const executor;
  const int threads;
  tbb::task_arena arena;
  std::mutex mu;
  std::condition_variable idle;
  int live = 0;             // guarded by mu: enqueued, not yet returned
  std::deque<Task> pending;  // guarded by mu: nodes handed over, not yet taken

  // The node goes through `pending`, under mu: the lock hands it (and
  // everything the submitter wrote before) to the worker in a way
  // ThreadSanitizer can see; Debian's libtbb is not instrumented, so a
  // capture read straight from TBB's task object would be reported as a race
  // (only the captured `this` is, suppressed in tsan.supp).
  void Enqueue(Task task) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++live;
      pending.push_back(task);
    }
    arena.enqueue([this] { RunOne(); });
  }
  // Runs `work` on one of the arena's threads and waits for it (handed over
  // and back under mu, as a node is).
  void Run(std::function<void()> work) {
    bool done = false;
    Task task;
    task.call = &work;
    task.done = &done;
    Enqueue(task);
    std::unique_lock<std::mutex> lock(mu);
    idle.wait(lock, [&] { return done; });
  }
  void RunOne() {
    Task task;
    {
      std::lock_guard<std::mutex> lock(mu);
      task = pending.front();
      pending.pop_front();
    }
    if (task.call != nullptr) {
      (*task.call)();
    } else {
      executor->Execute(task.run, task.node_id, task.cores);
    }
    std::lock_guard<std::mutex> lock(mu);
    if (task.done != nullptr) *task.done = true;
    if (--live == 0 || task.done != nullptr) idle.notify_all();
  }
  void WaitIdle() {
    std::unique_lock<std::mutex> lock(mu);
    idle.wait(lock, [&] { return live == 0; });
  }
};

struct Executor::StepRun {
  StepInfo info;
  Timestamp time;
  FeedMap feeds;
  std::vector<std::string> fetch_names;
  std::vector<int> fetch_ids;
  std::vector<int> pending;                 // by node id: inputs not yet produced
  std::vector<int> uses_left;               // by node id: consumers not yet run
  int shape_class = 0;                      // index of its feeds' dims in feed_shapes_
  std::vector<std::vector<Tensor>> values;  // by node id: outputs
  std::vector<Tensor> fetched;
  absl::flat_hash_map<int, Tensor> sources;  // Parameter values read at this step
  int nodes_left = 0;
  std::atomic<bool> slowed{false};  // ExecutorOptions::slow_step taken
  bool done = false;
  absl::Status status;
};

Executor::Executor(const Graph* graph, ExecutorOptions options)
    : graph_(graph), options_(std::move(options)), threads_(std::max(1, options_.threads)), free_cores_(threads_) {}

Executor::~Executor() {
  // Nodes still running (a communication node's callback comes on the
  // communicator's thread, not the pool's): stop dispatching, abort what is
  // queued so that their callbacks come, and wait for them; then for the
  // pool's tasks to return.
  bool busy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy = running_ > 0;
  }
  if (busy) Fail(absl::CancelledError("the executor was shut down"));
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return running_ == 0; });
  }
  if (pool_ != nullptr) pool_->WaitIdle();
  // Device work still queued reads and writes blocks that the values below
  // hold: it finishes first.
  if (streams_ != nullptr) {
    streams_->Synchronize().IgnoreError();
    runs_.clear();
    parameter_values_.clear();
  }
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const Graph* graph, ExecutorOptions options) {
  std::unique_ptr<Executor> e(new Executor(graph, std::move(options)));
  RETURN_IF_ERROR(e->Init());
  return e;
}

absl::StatusOr<const Tensor*> Executor::FullValue(const TensorProto& init, const TensorShape& shape,
                                                  FullInitialValues* recent) {
  std::string key = absl::StrCat(shape.ToString(), "|", init.SerializeAsString());
  FullInitialValues& kept = *recent;
  auto hit = std::find_if(kept.begin(), kept.end(), [&](const auto& entry) { return entry.first == key; });
  if (hit == kept.end()) {
    ASSIGN_OR_RETURN(Tensor value, MaterializeTensor(init, shape));
    if (kept.size() >= kKeptFullValues) kept.pop_back();
    kept.emplace_back(std::move(key), std::move(value));
    hit = kept.end() - 1;
  }
  std::rotate(kept.begin(), hit, hit + 1);  // most recent first
  return &kept.front().second;
}

absl::StatusOr<Tensor> Executor::InitialValue(const Node& parameter, const TensorProto& init,
                                              FullInitialValues* recent) const {
  const int64_t count = NodeAttrInt(parameter, "shard_count", 1);
  // A shard's place in its group.
  auto rank = options_.group_ranks.end();
  if (count > 1) {
    const std::string group = NodeAttrString(parameter, "shard_group");
    rank = options_.group_ranks.find(group);
    if (rank == options_.group_ranks.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("a shard of group '", group, "', which this worker is not a member of"));
    }
  }
  if (int64_t offset = NodeAttrInt(parameter, "init_offset", -1); offset >= 0) {
    // A piece: its elements of the larger tensor's initial value (a sharded
    // piece: member i's starts i pieces on; zeros past the tensor's end).
    ASSIGN_OR_RETURN(TensorShape of, TensorShape::FromProto(parameter.def().attr().at("init_of_shape").shape()));
    ASSIGN_OR_RETURN(const Tensor* full_value, FullValue(init, of, recent));
    const Tensor& full = *full_value;
    const TensorShape& shape = parameter.outputs()[0].shape;
    ASSIGN_OR_RETURN(Tensor piece, Tensor::Allocate(full.dtype(), shape.dims()));
    const int64_t element = full.num_elements() > 0 ? full.num_bytes() / full.num_elements() : 0;
    if (count > 1) offset += rank->second * shape.KnownElements();
    const size_t taken =
        static_cast<size_t>(std::clamp<int64_t>(full.num_elements() - offset, 0, shape.KnownElements()) * element);
    char* dst = static_cast<char*>(piece.raw());
    if (taken > 0) std::memcpy(dst, static_cast<const char*>(full.raw()) + offset * element, taken);
    std::memset(dst + taken, 0, piece.num_bytes() - taken);  // past the tensor's end
    return piece;
  }
  if (count <= 1) return MaterializeTensor(init, parameter.outputs()[0].shape);
  // A shard: its block of the full tensor the unsharded model starts from.
  const int axis = static_cast<int>(NodeAttrInt(parameter, "shard_axis", 0));
  std::vector<int64_t> dims = parameter.outputs()[0].shape.dims();
  dims[axis] *= count;
  ASSIGN_OR_RETURN(const Tensor* full, FullValue(init, TensorShape(dims), recent));
  return SliceAlongAxis(*full, axis, rank->second, count);
}

void Executor::IssueAtFixedPlaces(const Node& n, CollectiveQueue* step, CollectiveQueue* eval, TransferBucket place) {
  fixed_queues_.push_back(std::make_unique<FixedBucketQueue>(step, place.step, n.name()));
  step_queue_[n.id()] = fixed_queues_.back().get();
  if (eval == nullptr) return;
  fixed_queues_.push_back(std::make_unique<FixedBucketQueue>(eval, place.evaluation, n.name()));
  eval_queue_[n.id()] = fixed_queues_.back().get();
}

absl::Status Executor::Init() {
  int max_id = 0;
  for (Node* n : graph_->nodes()) max_id = std::max(max_id, n->id() + 1);
  nodes_.assign(max_id, nullptr);
  kernels_.resize(max_id);
  feedback_target_.assign(max_id, -1);
  in_step_inputs_.assign(max_id, 0);
  consumers_.assign(max_id, 0);
  shape_caches_.resize(max_id);
  step_queue_.assign(max_id, nullptr);
  eval_queue_.assign(max_id, nullptr);
  FullInitialValues recent_full_values;
  const PlanRecords::Placement& placement = graph_->header().records().placement();
  if (placement.device_nodes() > 0) {
    DeviceStreamsOptions dopts;
    dopts.device = placement.device();
    dopts.compute_streams = std::max(1, placement.compute_streams());
    dopts.delay_us_max = placement.sim_delay_us();
    dopts.seed = placement.sim_seed();
    dopts.memory_bytes = placement.sim_memory_bytes();
    dopts.skip_waits_of = options_.skip_device_waits_of;
    dopts.trace = options_.trace;
    ASSIGN_OR_RETURN(streams_, DeviceStreams::Create(*graph_, std::move(dopts)));
  }
  // The sim runs the CPU's kernels on its memory; a GPU runs GPU kernels for
  // the nodes it launches (Parameter and Feedback pass values on and keep
  // the host's). place names every op without one when it plans; a plan
  // made by a binary with more GPU kernels fails here, naming the node.
  const bool gpu_kernels = streams_ != nullptr && streams_->kernel_style() == KernelStyle::kEnqueued;
  const SplitGroups split = SplitAcrossSides(*graph_);
  for (Node* n : graph_->nodes()) {
    nodes_[n->id()] = n;
    const bool gpu = gpu_kernels && LaunchesOnDevice(*n) && n->op() != "CopyToDevice";
    ASSIGN_OR_RETURN(kernels_[n->id()],
                     KernelRegistry::Global().Create(*graph_, *n, gpu ? kGpu : absl::string_view(options_.device)));
    shape_caches_[n->id()] = std::make_unique<ShapeCache>();
    if (n->op() == "Parameter") {
      auto it = n->def().attr().find("init");
      TensorProto init;
      if (it != n->def().attr().end()) {
        init = it->second.tensor();
      } else {
        init.set_dtype(DT_FLOAT);
        init.mutable_init()->set_kind("glorot_uniform");
      }
      absl::StatusOr<Tensor> value = InitialValue(*n, init, &recent_full_values);
      if (!value.ok()) return NodeError(*graph_, *n, absl::StrCat("initial value: ", value.status().message()));
      if (streams_ != nullptr && streams_->OnDevice(*n)) {
        value = streams_->Upload(*n, *value);
        if (!value.ok()) return NodeError(*graph_, *n, absl::StrCat("initial value: ", value.status().message()));
      }
      parameter_values_[n->id()][0] = *std::move(value);
    }
    if (IsDeviceTransfer(*n) && streams_ != nullptr && streams_->OnDevice(*n)) {
      // Issued at its place in the rank's transfer order, through the
      // transfer group's engines.
      auto step = options_.group_collectives.find(kTransferGroup);
      auto eval = options_.group_eval_collectives.find(kTransferGroup);
      auto rank = options_.group_ranks.find(kTransferGroup);
      if (step == options_.group_collectives.end() || eval == options_.group_eval_collectives.end() ||
          rank == options_.group_ranks.end()) {
        return NodeError(*graph_, *n, "placed on a device with a peer, but this run has no engine for the "
                                      "transfers placed on devices");
      }
      if (!transfer_buckets_.has_value()) transfer_buckets_ = DeviceTransferBuckets(*graph_, rank->second);
      IssueAtFixedPlaces(*n, step->second, eval->second, transfer_buckets_->of_node.at(n->id()));
    } else if (IsCollective(*n) && split.groups.contains(CollectiveGroup(*n)) && options_.collectives != nullptr) {
      // Its share's engines: the group's own for the device's share (the
      // world's is the worker's engine; NCCL's on cuda), the host's for the
      // rest.
      const std::string share = OnDevice(*n) ? CollectiveGroup(*n) : HostShare(CollectiveGroup(*n));
      auto step = options_.group_collectives.find(share);
      auto eval = options_.group_eval_collectives.find(share);
      CollectiveQueue* step_engine = share.empty() ? options_.collectives
                                     : step == options_.group_collectives.end() ? nullptr
                                                                                : step->second;
      if (step_engine == nullptr) {
        return NodeError(*graph_, *n, absl::StrCat("its group is split across a device and the host, but this run has "
                                                   "no engine for the share '", share, "'"));
      }
      // The world's collectives do not run in evaluation (as unsplit).
      CollectiveQueue* eval_engine = CollectiveGroup(*n).empty() || eval == options_.group_eval_collectives.end()
                                         ? nullptr
                                         : eval->second;
      IssueAtFixedPlaces(*n, step_engine, eval_engine, split.of_node.at(n->id()));
    } else if (IsCollective(*n)) {
      const std::string group = CollectiveGroup(*n);
      if (group.empty()) {
        step_queue_[n->id()] = options_.collectives;
      } else {
        auto step = options_.group_collectives.find(group);
        auto eval = options_.group_eval_collectives.find(group);
        if (step != options_.group_collectives.end()) step_queue_[n->id()] = step->second;
        if (eval != options_.group_eval_collectives.end()) eval_queue_[n->id()] = eval->second;
      }
    }
  }
  for (Node* n : graph_->nodes()) {
    if (n->op() == "Feedback") {
      for (const Edge* e : n->out_edges()) {
        if (e->dst->op() != "Parameter") {
          return NodeError(*graph_, *n,
                           absl::StrCat("a Feedback may only feed Parameters, not '", e->dst->name(), "'"));
        }
        feedback_target_[n->id()] = e->dst->id();
      }
      continue;
    }
    for (const Edge* e : n->out_edges()) {
      ++in_step_inputs_[e->dst->id()];
      if (!e->IsControl()) ++consumers_[n->id()];
    }
  }
  int k = options_.max_steps_in_flight;
  if (k <= 0) {
    k = 1;
    for (const LoopScope& loop : graph_->header().loop()) k = std::max(k, loop.max_in_flight());
  }
  ASSIGN_OR_RETURN(tracker_, ProgressTracker::Create(k));
  pool_ = std::make_unique<Pool>(this, threads_);
  return absl::OkStatus();
}

absl::StatusOr<const std::vector<std::vector<int64_t>>*> Executor::OutputDims(
    const Node& node, const std::vector<const Tensor*>& inputs) {
  ShapeCache& cache = *shape_caches_[node.id()];
  std::vector<std::vector<int64_t>> key;
  for (const Tensor* t : inputs) key.push_back(t->dims());
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.dims.find(key);
  if (it != cache.dims.end()) return &it->second;
  // Shape inference with the concrete shapes: kernels allocate exactly what
  // the static checks promised, and a wrong run-time shape is the same clear
  // error as a wrong static one.
  const OpDef* def = OpRegistry::Global().Find(node.op());
  std::vector<ShapeAndType> in(inputs.size());
  std::vector<const ShapeAndType*> in_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in[i] = {TensorShape(inputs[i]->dims()), inputs[i]->dtype()};
    in_ptrs.push_back(&in[i]);
  }
  AttrMap attrs = AttrsWithDefaults(node, *def);
  InferenceContext context(&node, def, in_ptrs, attrs);
  absl::StatusOr<std::vector<ShapeAndType>> out = def->shape_fn(context);
  if (!out.ok()) return NodeError(*graph_, node, out.status().message());
  std::vector<std::vector<int64_t>> dims;
  for (size_t i = 0; i < out->size(); ++i) {
    const TensorShape& s = (*out)[i].shape;
    if (!s.IsFullyDefined()) {
      // Sources: an Input's batch dimension comes from the fed value, a
      // Recv's from the message.
      if (node.op() == "Input" || node.op() == "Recv") {
        dims.push_back({});
        continue;
      }
      return NodeError(*graph_, node, absl::StrCat("output ", i, " has unknown shape ", s.ToString(), " at run time"));
    }
    dims.push_back(s.dims());
  }
  return &cache.dims.emplace(std::move(key), std::move(dims)).first->second;
}

struct Executor::NodeRun {
  std::vector<std::vector<int64_t>> fed_dims;  // an Input's dims: those of the fed batch
  Tensor reshaped_feed;                        // the fed batch seen in the Input's shape
  std::unique_ptr<OpKernelContext> ctx;
};

absl::Status Executor::KernelError(const Node& node, const StepInfo& step, const absl::Status& status) const {
  return NodeError(*graph_, node, absl::StrCat("at step ", step.step, ": ", status.message()), status.code());
}

absl::StatusOr<std::unique_ptr<Executor::NodeRun>> Executor::PrepareNode(
    const Node& node, const StepInfo& step, const FeedMap& feeds, const std::vector<std::vector<Tensor>>& values,
    const Tensor* source, int reserved_threads) {
  std::vector<const Tensor*> inputs;
  if (node.op() != "Parameter") {
    for (int i = 0; i < node.num_inputs(); ++i) {
      const Edge* e = node.input_edge(i);
      const std::vector<Tensor>& v = values[e->src->id()];
      if (e->src_port >= static_cast<int>(v.size()) || !v[e->src_port].valid()) {
        return absl::InternalError(absl::StrCat("input ", i, " of '", node.name(), "' was not computed"));
      }
      inputs.push_back(&v[e->src_port]);
    }
  }
  auto prepared = std::make_unique<NodeRun>();
  const std::vector<std::vector<int64_t>>* dims;
  if (node.op() == "Input") {
    const std::string& feed = node.def().attr().count("feed") ? node.def().attr().at("feed").s() : node.name();
    auto it = feeds.find(feed);
    if (it == feeds.end()) return NodeError(*graph_, node, absl::StrCat("nothing was fed for '", feed, "'"));
    source = &it->second;
    if (source->dtype() != node.outputs()[0].dtype) {
      return NodeError(
          *graph_, node,
          absl::StrCat("fed ", source->DebugString(), " but expects ", DataTypeName(node.outputs()[0].dtype)));
    }
    const TensorShape& declared = node.outputs()[0].shape;
    bool fits = declared.rank() == source->rank();
    for (int i = 0; fits && i < declared.rank(); ++i) {
      fits = declared.dim(i) == kUnknownDim || declared.dim(i) == source->dim(i);
    }
    if (!fits && (declared.rank() == 2 || source->rank() == 2) && declared.rank() >= 1 && source->rank() >= 1 &&
        (declared.dim(0) == kUnknownDim || declared.dim(0) == source->dim(0))) {
      // Examples flattened to features or features seen as images, with as
      // many elements as the Input's ([N,1,28,28] for an Input [?,784]): the
      // data keeps its order. Two image layouts ([N,32,32,3] against
      // [?,3,32,32]) are not guessed between: that stays an error.
      std::vector<int64_t> seen = {source->dim(0)};
      int64_t declared_elements = 1, fed_elements = 1;
      for (int i = 1; i < declared.rank(); ++i) {
        seen.push_back(declared.dim(i));
        declared_elements = declared.dim(i) == kUnknownDim ? -1 : declared_elements * declared.dim(i);
        if (declared_elements < 0) break;
      }
      for (int i = 1; i < source->rank(); ++i) fed_elements *= source->dim(i);
      if (declared_elements == fed_elements) {
        ASSIGN_OR_RETURN(prepared->reshaped_feed, source->Reshaped(seen));
        source = &prepared->reshaped_feed;
        fits = true;
      }
    }
    if (!fits) {
      return NodeError(*graph_, node,
                       absl::StrCat("fed ", source->DebugString(), " but the node's shape is ", declared.ToString()));
    }
    prepared->fed_dims = {source->dims()};
    dims = &prepared->fed_dims;
  } else {
    ASSIGN_OR_RETURN(dims, OutputDims(node, inputs));
  }
  prepared->ctx = std::make_unique<OpKernelContext>(&node, std::move(inputs), dims, &step, reserved_threads);
  prepared->ctx->set_source_value(source);
  ConnectCommunication(node, step, *prepared->ctx);
  return prepared;
}

absl::Status Executor::RunNode(const Node& node, const StepInfo& step, const FeedMap& feeds,
                               const std::vector<std::vector<Tensor>>& values, const Tensor* source,
                               int reserved_threads, std::vector<Tensor>* outputs, int* first_request) {
  TraceSpan span(options_.trace, node.name(), node.op(), {{"step", step.step}});
  RETURN_IF_ERROR(CheckHostInputs(node, values));
  ASSIGN_OR_RETURN(std::unique_ptr<NodeRun> prepared,
                   PrepareNode(node, step, feeds, values, source, reserved_threads));
  absl::Status s = kernels_[node.id()]->Compute(prepared->ctx.get());
  if (!s.ok()) return KernelError(node, step, s);
  if (first_request != nullptr) *first_request = prepared->ctx->first_request();
  *outputs = std::move(prepared->ctx->outputs());
  return absl::OkStatus();
}

absl::StatusOr<const std::vector<int64_t>*> Executor::EvaluationOrder(const std::vector<std::string>& fetches) {
  std::lock_guard<std::mutex> lock(order_mu_);
  auto cached = evaluation_orders_.find(fetches);
  if (cached != evaluation_orders_.end()) return &cached->second;
  ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(*graph_));
  std::vector<bool> needed(nodes_.size(), false);
  for (const std::string& f : fetches) {
    Node* n = graph_->FindNode(f);
    if (n == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot fetch '", f, "': no such node"));
    needed[n->id()] = true;
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node* n = *it;
    if (!needed[n->id()] || n->op() == "Parameter") continue;
    for (int i = 0; i < n->num_inputs(); ++i) needed[n->input_edge(i)->src->id()] = true;
    for (const Edge* e : n->control_inputs()) needed[e->src->id()] = true;
  }
  std::vector<int64_t> ids;
  for (const Node* n : order) {
    if (needed[n->id()]) ids.push_back(n->id());
  }
  return &evaluation_orders_.emplace(fetches, std::move(ids)).first->second;
}

absl::StatusOr<std::vector<Tensor>> Executor::Evaluate(const StepInfo& step, const FeedMap& feeds,
                                                       const std::vector<std::string>& fetches) {
  ASSIGN_OR_RETURN(const std::vector<int64_t>* ids, EvaluationOrder(fetches));
  std::vector<std::vector<Tensor>> values(nodes_.size());
  absl::flat_hash_map<int, Tensor> params;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_;
    for (auto& [id, by_step] : parameter_values_) params[id] = by_step.rbegin()->second;
  }
  // Evaluation runs the nodes in order on one of the arena's threads, each
  // on every core (no step is in flight then). Not through arena.execute:
  // that hands the caller's stack to a oneTBB worker in a way
  // ThreadSanitizer cannot see (Pool::Run hands it over under a mutex).
  absl::Status status;
  pool_->Run([&] {
    for (int64_t id : *ids) {
      const Node& n = *nodes_[id];
      const Tensor* source = n.op() == "Parameter" ? &params[id] : nullptr;
      if (LaunchesOnDevice(n)) {
        // A collective's launch is over when it is issued: wait for that
        // (not for the collective), so the next node launches in order.
        // Shared: a launch ended late (after the bound below) still sets it.
        auto issued = std::make_shared<std::promise<absl::Status>>();
        std::future<absl::Status> issue = issued->get_future();
        IssuedCallback on_issue;
        if (kernels_[id] != nullptr && kernels_[id]->IsAsync()) {
          on_issue = [issued](absl::Status s, std::vector<Tensor>) { issued->set_value(std::move(s)); };
        }
        absl::StatusOr<std::vector<Tensor>> outputs = LaunchOnDevice(n, step, values, on_issue);
        status = outputs.status();
        if (status.ok() && on_issue) {
          // Bounded as a step is: a collective skipped on a failed stream
          // would never be issued.
          if (issue.wait_for(absl::ToChronoSeconds(options_.step_timeout)) != std::future_status::ready) {
            status = absl::DeadlineExceededError(absl::StrCat("evaluation: '", n.name(), "' was not issued within ",
                                                              absl::FormatDuration(options_.step_timeout)));
          } else {
            status = issue.get();
          }
        }
        if (status.ok()) values[id] = *std::move(outputs);
      } else if (streams_ != nullptr && n.op() == "CopyToHost") {
        const Edge* e = n.input_edge(0);
        absl::StatusOr<Tensor> host = streams_->Download(values[e->src->id()][e->src_port]);
        status = host.status();
        if (host.ok()) values[id] = {*std::move(host)};
      } else {
        status = RunNode(n, step, feeds, values, source, threads_, &values[id], nullptr);
      }
      if (!status.ok()) return;
    }
  });
  RETURN_IF_ERROR(status);
  std::vector<Tensor> out;
  for (const std::string& f : fetches) out.push_back(values[graph_->FindNode(f)->id()][0]);
  if (streams_ != nullptr) {
    RETURN_IF_ERROR(streams_->SynchronizeAndReadBack(out));
    // A collective that failed on a device stream (NCCL aborted: a peer
    // gone, a timeout) ended early: its outputs are not the result.
    RETURN_IF_ERROR(DeferredCollectiveFailure());
  }
  return out;
}

absl::StatusOr<std::vector<Tensor>> Executor::RunStep(const StepInfo& step, const FeedMap& feeds,
                                                      const std::vector<std::string>& fetches) {
  RETURN_IF_ERROR(StartStep(step, feeds, fetches));
  return FinishStep(step.step);
}

absl::Status Executor::StartStep(const StepInfo& step, FeedMap feeds, const std::vector<std::string>& fetches) {
  auto run = std::make_unique<StepRun>();
  run->info = step;
  run->time = Timestamp{step.epoch, step.step};
  run->feeds = std::move(feeds);
  run->fetch_names = fetches;
  for (const std::string& f : fetches) {
    Node* n = graph_->FindNode(f);
    if (n == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot fetch '", f, "': no such node"));
    run->fetch_ids.push_back(n->id());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_;
    if (next_step_ >= 0 && step.step != next_step_) {
      return absl::FailedPreconditionError(
          absl::StrCat("steps must run in order: step ", next_step_, " is next, not ", step.step));
    }
  }
  RETURN_IF_ERROR(tracker_->WaitToBegin(step.step, absl::Now() + options_.step_timeout));
  StepRun* r = run.get();
  // Registered before the step begins (so it cannot fire yet: L6) and without
  // mu_ (delivering an older step's notification takes it). The step's
  // creation and first dispatch below then form one critical section: were
  // mu_ released between them, the previous step's Feedback could make one
  // of this step's Parameters ready, and the dispatch loop would run it twice.
  tracker_->NotifyAt(r->time, [this, r] {
    std::lock_guard<std::mutex> l(mu_);
    r->done = true;
    changed_.notify_all();
  });
  std::vector<PointstampDelta> begin = {{run->time, kStepOpen, +1}};
  std::unique_lock<std::mutex> lock(mu_);
  if (next_step_ < 0) {
    // The first step run: every Parameter's initial value is valid now.
    for (auto& [id, by_step] : parameter_values_) {
      Tensor v = by_step.rbegin()->second;
      by_step.clear();
      by_step[step.step] = v;
    }
    last_completed_step_ = step.step - 1;
  }
  next_step_ = step.step + 1;
  run->shape_class = ShapeClass(run->feeds);
  run->pending = in_step_inputs_;
  run->uses_left = consumers_;
  run->values.resize(nodes_.size());
  for (const Node* n : nodes_) {
    if (n == nullptr) continue;
    ++run->nodes_left;
    begin.push_back({run->time, n->id(), +1});
    if (n->op() == "Parameter") {
      auto& by_step = parameter_values_[n->id()];
      auto it = by_step.find(step.step);
      if (it != by_step.end()) {
        run->sources[n->id()] = it->second;
      } else if (n->num_inputs() == 0) {
        run->sources[n->id()] = by_step.rbegin()->second;  // no Feedback: it keeps its value
      } else {
        ++run->pending[n->id()];  // waits for its Feedback of the step before
      }
    }
  }
  for (int id : run->fetch_ids) ++run->uses_left[id];
  begin.push_back({run->time, kStepOpen, -1});
  RETURN_IF_ERROR(tracker_->Apply(begin));
  r->fetched.resize(r->fetch_ids.size());
  runs_[step.step] = std::move(run);
  for (const Node* n : nodes_) {
    if (n != nullptr && r->pending[n->id()] == 0) ready_.push_back({r, n->id()});
  }
  Dispatch(lock);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Executor::FinishStep(int64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = runs_.find(step);
  if (it == runs_.end()) return absl::FailedPreconditionError(absl::StrCat("step ", step, " was not started"));
  StepRun* run = it->second.get();
  absl::Time deadline = absl::Now() + options_.step_timeout;
  while (!run->done && failed_.ok()) {
    if (changed_.wait_for(lock, absl::ToChronoNanoseconds(deadline - absl::Now())) == std::cv_status::timeout &&
        absl::Now() >= deadline) {
      absl::Status timeout = absl::DeadlineExceededError(
          absl::StrCat("step ", step, " made no progress for ", absl::FormatDuration(options_.step_timeout)));
      lock.unlock();
      Fail(timeout);
      lock.lock();
    }
  }
  if (!failed_.ok()) {
    changed_.wait(lock, [&] { return running_ == 0; });
    tracker_->Cancel();
    return failed_;
  }
  // Older steps' parameter values are no longer needed.
  for (auto& [id, by_step] : parameter_values_) {
    while (by_step.size() > 1 && by_step.begin()->first <= step) by_step.erase(by_step.begin());
  }
  last_completed_step_ = step;
  std::vector<Tensor> fetched = std::move(run->fetched);
  runs_.erase(it);
  if (streams_ != nullptr) {
    // The step's device work, and reading its fetched values back: the host's
    // one wait for the device per step, outside the step.
    lock.unlock();
    if (absl::Status device = streams_->SynchronizeAndReadBack(fetched); !device.ok()) {
      Fail(device);
      return device;
    }
    // Collectives enqueued on the device's streams (NCCL) fail after their
    // issue: a peer gone, or a timeout, which aborted the communicator.
    if (absl::Status deferred = DeferredCollectiveFailure(); !deferred.ok()) {
      Fail(deferred);
      return deferred;
    }
  }
  return fetched;
}

absl::Status Executor::DeferredCollectiveFailure() {
  std::vector<CollectiveEngine*> engines = {options_.collectives};
  for (const auto* groups : {&options_.group_collectives, &options_.group_eval_collectives}) {
    for (const auto& [name, engine] : *groups) engines.push_back(engine);
  }
  for (CollectiveEngine* engine : engines) {
    if (engine == nullptr) continue;
    if (StreamCollectives* on_stream = engine->communicator().stream_collectives()) {
      RETURN_IF_ERROR(on_stream->DeferredFailure());
    }
  }
  return absl::OkStatus();
}

int Executor::ShapeClass(const FeedMap& feeds) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> dims;
  for (const auto& [name, tensor] : feeds) dims.emplace_back(name, tensor.dims());
  std::sort(dims.begin(), dims.end());
  for (size_t i = 0; i < feed_shapes_.size(); ++i) {
    if (feed_shapes_[i] == dims) return static_cast<int>(i);
  }
  feed_shapes_.push_back(std::move(dims));
  cores_needed_.emplace_back(nodes_.size(), 0);
  return static_cast<int>(feed_shapes_.size()) - 1;
}

int Executor::CoresFor(const StepRun& run, int node_id) const {
  const int known = cores_needed_[run.shape_class][node_id];
  return known > 0 ? known : threads_;
}

void Executor::Dispatch(std::unique_lock<std::mutex>& lock) {
  // First ready, first run, as long as its cores are free; a node that needs
  // more cores than are free waits, and smaller ones behind it may go first
  // (every node's core count is fixed, so the order changes no result).
  for (auto it = ready_.begin(); free_cores_ > 0 && it != ready_.end() && failed_.ok();) {
    const int cores = CoresFor(*it->first, it->second);
    if (cores > free_cores_) {
      ++it;
      continue;
    }
    free_cores_ -= cores;
    ++running_;
    pool_->Enqueue({it->first, it->second, cores});
    it = ready_.erase(it);
  }
}

void Executor::LearnCores(int shape_class, int node_id, int first_request) {
  cores_needed_[shape_class][node_id] = std::clamp(first_request, 1, threads_);
}

void Executor::Execute(StepRun* run, int node_id, int cores) {
  // Once per thread (TBB keeps its workers). Raising one's own nice value
  // needs no privilege; a failure only leaves the default priority.
  thread_local int thread_nice = 0;
  if (options_.compute_nice != thread_nice) {
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), options_.compute_nice) == 0) {
      thread_nice = options_.compute_nice;
    }
  }
  const Node& node = *nodes_[node_id];
  // A copy (it shares the buffer), not a pointer into `sources`: a Feedback
  // finishing on another thread may insert into that map meanwhile, and a
  // rehash would leave the pointer dangling (seen as an empty parameter value
  // with three steps in flight on two truly parallel workers).
  Tensor source_value;
  const Tensor* source = nullptr;
  if (node.op() == "Parameter") {
    std::lock_guard<std::mutex> lock(mu_);
    source_value = run->sources[node_id];
    source = &source_value;
  }
  if (LaunchesOnDevice(node) || (streams_ != nullptr && node.op() == "CopyToHost")) {
    ExecuteOnDevice(run, node_id, cores);
    return;
  }
  OpKernel& kernel = *kernels_[node_id];
  if (!kernel.IsAsync()) {
    if (options_.slow_step > absl::ZeroDuration() && !run->slowed.exchange(true)) absl::SleepFor(options_.slow_step);
    std::vector<Tensor> outputs;
    int first_request = 0;
    absl::Status status = RunNode(node, run->info, run->feeds, run->values, source, cores, &outputs, &first_request);
    Finish(run, node_id, std::move(status), std::move(outputs), cores, first_request);
    return;
  }
  // Asynchronous (communication): start it, then give the core back; the
  // kernel's callback finishes the node.
  TraceSpan span(options_.trace, node.name(), node.op(), {{"step", run->info.step}});
  absl::Time submitted = options_.trace != nullptr ? absl::Now() : absl::InfinitePast();
  absl::StatusOr<std::unique_ptr<NodeRun>> prepared =
      PrepareNode(node, run->info, run->feeds, run->values, source, /*reserved_threads=*/1);
  if (!prepared.ok()) {
    Finish(run, node_id, prepared.status(), {}, cores, /*first_request=*/-1);
    return;
  }
  std::shared_ptr<NodeRun> shared = *std::move(prepared);
  // Read now: once the kernel has started, its callback may finish the step
  // on another thread and free `run`.
  const int shape_class = run->shape_class;
  OpKernelContext* ctx = shared->ctx.get();
  kernel.ComputeAsync(ctx, [this, run, node_id, shared, submitted](absl::Status status) mutable {
    if (options_.trace != nullptr) {
      options_.trace->Async(nodes_[node_id]->name(), "wait", submitted, absl::Now(), {{"step", run->info.step}});
    }
    std::vector<Tensor> outputs = std::move(shared->ctx->outputs());
    if (!status.ok()) status = KernelError(*nodes_[node_id], run->info, status);
    shared.reset();
    Finish(run, node_id, std::move(status), std::move(outputs), /*cores_held=*/0, /*first_request=*/-1);
  });
  span.End();
  GiveBackCores(shape_class, node_id, cores);
}

void Executor::GiveBackCores(int shape_class, int node_id, int cores) {
  std::unique_lock<std::mutex> lock(mu_);
  // Starting a transfer or a device launch needs one core; its wait needs none.
  LearnCores(shape_class, node_id, 1);
  free_cores_ += cores;
  Dispatch(lock);
}

void Executor::ConnectCommunication(const Node& node, const StepInfo& step, OpKernelContext& ctx) const {
  ctx.set_collectives(step.training ? step_queue_[node.id()] : eval_queue_[node.id()]);
  ctx.set_point_to_point(options_.point_to_point);
}

bool Executor::LaunchesOnDevice(const Node& node) const {
  return streams_ != nullptr && streams_->OnDevice(node) && node.op() != "Parameter" && node.op() != "Feedback";
}

absl::Status Executor::CheckHostInputs(const Node& node, const std::vector<std::vector<Tensor>>& values) const {
  if (streams_ == nullptr || streams_->OnDevice(node) || node.op() == "Parameter") return absl::OkStatus();
  for (int i = 0; i < node.num_inputs(); ++i) {
    const Edge* e = node.input_edge(i);
    const std::vector<Tensor>& v = values[e->src->id()];
    if (e->src_port < static_cast<int>(v.size()) && streams_->IsDeviceTensor(v[e->src_port])) {
      return NodeError(*graph_, node,
                       absl::StrCat("input ", i, " ('", e->src->name(), "') is in ", streams_->device_name(),
                                    "'s memory, and a host node reads only host memory: the plan lacks a CopyToHost"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Executor::LaunchOnDevice(const Node& node, const StepInfo& step,
                                                             const std::vector<std::vector<Tensor>>& values,
                                                             IssuedCallback issued) {
  auto launch = std::make_shared<DeviceLaunchState>();
  launch->step = step;
  std::vector<Tensor> inputs;
  for (int i = 0; i < node.num_inputs(); ++i) {
    const Edge* e = node.input_edge(i);
    const std::vector<Tensor>& v = values[e->src->id()];
    if (e->src_port >= static_cast<int>(v.size()) || !v[e->src_port].valid()) {
      return absl::InternalError(absl::StrCat("input ", i, " of '", node.name(), "' was not computed"));
    }
    inputs.push_back(v[e->src_port]);
    launch->input_views.push_back(Tensor::ViewOf(v[e->src_port]));
  }
  std::vector<const Tensor*> input_ptrs;
  for (const Tensor& t : launch->input_views) input_ptrs.push_back(&t);
  ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>>* dims, OutputDims(node, input_ptrs));
  std::vector<Tensor> outputs, output_views;
  for (size_t i = 0; i < dims->size(); ++i) {
    absl::StatusOr<Tensor> out = streams_->Allocate(node, node.outputs()[i].dtype, (*dims)[i]);
    if (!out.ok()) return KernelError(node, step, out.status());
    output_views.push_back(Tensor::ViewOf(*out));
    outputs.push_back(*std::move(out));
  }
  if (node.op() == "CopyToDevice") {
    absl::Status s = streams_->CopyIn(node, inputs[0], outputs[0]);
    if (!s.ok()) return KernelError(node, step, s);
    return outputs;
  }
  launch->ctx = std::make_unique<OpKernelContext>(&node, std::move(input_ptrs), dims, &launch->step, threads_);
  launch->ctx->PresetOutputs(std::move(output_views));
  ConnectCommunication(node, step, *launch->ctx);
  if (streams_->kernel_style() == KernelStyle::kEnqueued) {
    // Called now, on this thread: the kernel enqueues its work on the stream.
    launch->device.stream = streams_->StreamOf(node);
    launch->device.allocate_scratch = [this, &node](DataType dtype, std::vector<int64_t> scratch_dims) {
      return streams_->Allocate(node, dtype, std::move(scratch_dims));
    };
    launch->device.host_wait = [this](const std::string& what, const std::function<absl::Status()>& wait) {
      return streams_->KernelHostWait(what, wait);
    };
    launch->ctx->set_device_launch(&launch->device);
  }
  OpKernel* kernel = kernels_[node.id()].get();
  if (kernel->IsAsync()) {
    if (!issued) return absl::InternalError(absl::StrCat("'", node.name(), "' is asynchronous: its launch needs a callback"));
    RETURN_IF_ERROR(LaunchAsyncOnDevice(node, *kernel, inputs, outputs, launch, std::move(issued)));
    return outputs;
  }
  absl::Status s = streams_->Launch(node, inputs, outputs, step.step, [this, &node, kernel, launch]() -> absl::Status {
    absl::Status status = kernel->Compute(launch->ctx.get());
    return status.ok() ? status : KernelError(node, launch->step, status);
  });
  if (!s.ok()) return KernelError(node, step, s);
  return outputs;
}

absl::Status Executor::LaunchAsyncOnDevice(const Node& node, OpKernel& kernel, const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& outputs, std::shared_ptr<DeviceLaunchState> launch,
                                           IssuedCallback issued) {
  // The worker's queue orders the collective's issue onto its group's
  // stream (stream_issued_queue.h); the launch is over once it is issued.
  CollectiveQueue* queue = launch->ctx->collectives();
  auto start = [this, &node, &kernel, launch, queue](DeviceStreams::Finish finish) {
    if (queue != nullptr) {
      launch->issuing = std::make_unique<StreamIssuedQueue>(
          queue, streams_->StreamOf(node), streams_->kernel_style(), node.name(), finish,
          [this, &node, step = launch->step](absl::Status status) { Fail(KernelError(node, step, status)); });
      launch->ctx->set_collectives(launch->issuing.get());
    }
    kernel.ComputeAsync(launch->ctx.get(), [this, &node, launch, finish](absl::Status status) {
      if (launch->issuing == nullptr || !launch->issuing->submitted()) {
        finish(std::move(status));  // nothing was issued: the kernel is done
      } else if (!status.ok()) {
        Fail(KernelError(node, launch->step, status));  // its issue already ended the launch
      }
    });
  };
  return streams_->LaunchAsync(node, inputs, outputs, launch->step.step, std::move(start),
                               [this, &node, launch, outputs, issued = std::move(issued)](absl::Status status) {
                                 if (!status.ok()) return issued(KernelError(node, launch->step, status), {});
                                 issued(status, outputs);
                               });
}

void Executor::ExecuteOnDevice(StepRun* run, int node_id, int cores) {
  const Node& node = *nodes_[node_id];
  TraceSpan span(options_.trace, node.name(), node.op(), {{"step", run->info.step}});
  if (node.op() != "CopyToHost" && kernels_[node_id] != nullptr && kernels_[node_id]->IsAsync()) {
    // A collective: the node is over when its collective is issued (on the
    // queue's thread), and its core goes back meanwhile.
    const int shape_class = run->shape_class;
    absl::StatusOr<std::vector<Tensor>> launched = LaunchOnDevice(
        node, run->info, run->values, [this, run, node_id](absl::Status status, std::vector<Tensor> outputs) {
          Finish(run, node_id, std::move(status), std::move(outputs), /*cores_held=*/0, /*first_request=*/-1);
        });
    span.End();
    if (!launched.ok()) {
      Finish(run, node_id, launched.status(), {}, cores, /*first_request=*/-1);
      return;
    }
    GiveBackCores(shape_class, node_id, cores);
    return;
  }
  if (node.op() != "CopyToHost") {
    absl::StatusOr<std::vector<Tensor>> outputs = LaunchOnDevice(node, run->info, run->values);
    span.End();
    if (!outputs.ok()) {
      Finish(run, node_id, outputs.status(), {}, cores, /*first_request=*/-1);
    } else {
      Finish(run, node_id, absl::OkStatus(), *std::move(outputs), cores, /*first_request=*/1);
    }
    return;
  }
  // A copy out finishes when the copy has: the host node after it reads the
  // data. Its core goes back meanwhile, as an asynchronous kernel's does.
  const Edge* e = node.input_edge(0);
  const Tensor& input = run->values[e->src->id()][e->src_port];
  absl::StatusOr<Tensor> host = Tensor::Allocate(input.dtype(), input.dims());
  if (!host.ok()) {
    Finish(run, node_id, KernelError(node, run->info, host.status()), {}, cores, /*first_request=*/-1);
    return;
  }
  const int shape_class = run->shape_class;
  // Read now: the callback may finish the step on the watcher thread and free `run`.
  const StepInfo info = run->info;
  streams_->CopyOut(node, input, *host, [this, run, node_id, info, out = *host](absl::Status status) {
    if (!status.ok()) status = KernelError(*nodes_[node_id], info, status);
    Finish(run, node_id, std::move(status), {out}, /*cores_held=*/0, /*first_request=*/-1);
  });
  span.End();
  GiveBackCores(shape_class, node_id, cores);
}

void Executor::Fail(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.ok()) failed_ = status;
    changed_.notify_all();
  }
  if (options_.collectives != nullptr) options_.collectives->Abort(status);
  // Transfers waiting for peers end now, not at the timeout.
  if (options_.point_to_point != nullptr) options_.point_to_point->abort_signal()->Fire();
  for (auto* engines : {&options_.group_collectives, &options_.group_eval_collectives}) {
    for (auto& [name, engine] : *engines) engine->Abort(status);
  }
  // A collective whose stream failed before its kernel started never issues.
  if (streams_ != nullptr) streams_->FailPending(status);
}

void Executor::Finish(StepRun* run, int node_id, absl::Status status, std::vector<Tensor> outputs,
                      int cores_held, int first_request) {
  // running_ drops last, after every use of this executor: once it reaches 0
  // the executor may be destroyed (FinishStep after a failure returns then).
  absl::Cleanup done_running = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    // Only the waits for every node to return need this; waking the driver
    // at every node cost a futex call and a context switch each.
    if (--running_ == 0) changed_.notify_all();
  };
  if (!status.ok()) {
    if (cores_held > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      free_cores_ += cores_held;
    }
    Fail(std::move(status));
    return;
  }
  const Node& node = *nodes_[node_id];
  std::unique_lock<std::mutex> lock(mu_);
  free_cores_ += cores_held;
  if (first_request >= 0) LearnCores(run->shape_class, node_id, first_request);
  if (!failed_.ok()) return;
  run->values[node_id] = std::move(outputs);
  for (size_t i = 0; i < run->fetch_ids.size(); ++i) {
    if (run->fetch_ids[i] == node_id) {
      run->fetched[i] = run->values[node_id][0];
      --run->uses_left[node_id];
    }
  }
  if (feedback_target_[node_id] >= 0) {
    // The value of the target Parameter at the next step.
    int target = feedback_target_[node_id];
    int64_t next = run->info.step + 1;
    parameter_values_[target][next] = run->values[node_id][0];
    auto it = runs_.find(next);
    if (it != runs_.end() && !it->second->sources.contains(target)) {
      it->second->sources[target] = run->values[node_id][0];
      if (--it->second->pending[target] == 0) ready_.push_back({it->second.get(), target});
    }
  } else {
    for (const Edge* e : node.out_edges()) {
      if (--run->pending[e->dst->id()] == 0) ready_.push_back({run, e->dst->id()});
    }
  }
  // The memory plan: drop each input value whose consumers in this step have
  // all run, so its buffer returns to the pool.
  if (node.op() != "Parameter") {
    for (int i = 0; i < node.num_inputs(); ++i) {
      int src = node.input_edge(i)->src->id();
      if (--run->uses_left[src] == 0) run->values[src].clear();
    }
  }
  if (run->uses_left[node_id] == 0) run->values[node_id].clear();
  --run->nodes_left;
  Timestamp time = run->time;
  Dispatch(lock);
  lock.unlock();
  // May complete the step, whose notification takes mu_.
  absl::Status s = tracker_->Update(time, node_id, -1);
  if (!s.ok()) Fail(std::move(s));
}

std::vector<std::pair<std::string, Tensor>> Executor::State() const {
  std::vector<std::pair<std::string, Tensor>> state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, by_step] : parameter_values_) state.emplace_back(nodes_[id]->name(), by_step.rbegin()->second);
  }
  if (streams_ != nullptr) {
    for (auto& [name, value] : state) {
      if (!streams_->IsDeviceTensor(value)) continue;
      // State() has no error path: a failed device leaves the value empty,
      // and the run has failed already (its FinishStep said so).
      absl::StatusOr<Tensor> host = streams_->Download(value);
      value = host.ok() ? *std::move(host) : Tensor();
    }
  }
  std::sort(state.begin(), state.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return state;
}

absl::Status Executor::SetState(const std::string& name, const Tensor& value) {
  Node* n = graph_->FindNode(name);
  if (n == nullptr || n->op() != "Parameter") {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a Parameter of this graph"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!runs_.empty()) return absl::FailedPreconditionError("cannot set state while steps are running");
  auto& by_step = parameter_values_[n->id()];
  Tensor& current = by_step.rbegin()->second;
  if (current.dims() != value.dims() || current.dtype() != value.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is ", current.DebugString(), ", not ", value.DebugString()));
  }
  if (streams_ != nullptr && streams_->IsDeviceTensor(current)) {
    ASSIGN_OR_RETURN(current, streams_->Upload(*n, value));
    return absl::OkStatus();
  }
  current = value;
  return absl::OkStatus();
}

}  // namespace nereid
