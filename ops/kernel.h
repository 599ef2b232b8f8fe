#ifndef NEREID_OPS_KERNEL_H_
#define NEREID_OPS_KERNEL_H_

// Kernels: the code that computes an op on a device for a dtype. One kernel
// object is created per graph node (so it can cache what depends on the
// node's attributes and input shapes, such as oneDNN primitives) and is
// registered per (op, device, dtype):
//
//   class ReluKernel : public OpKernel { ... };
//   NEREID_REGISTER_KERNEL("Relu", kCpu, DT_FLOAT, ReluKernel);
//
// The executor supplies an OpKernelContext per run: the inputs, the output
// dims that shape inference computed for these inputs, the step, and the
// cores the executor reserved for this run.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "graph/ir.h"
#include "ops/collective_queue.h"
#include "ops/op_registry.h"

namespace nereid {

class Stream;  // device/device.h

inline constexpr absl::string_view kCpu = "CPU";
inline constexpr absl::string_view kGpu = "GPU";

// What a GPU kernel is given to enqueue its work: the node's stream (its
// native_handle() is the cudaStream_t) and scratch memory from the
// stream-ordered allocator, which later work on the stream may reuse once
// the kernel's work is done (so scratch needs no host wait).
struct DeviceLaunch {
  Stream* stream = nullptr;
  std::function<absl::StatusOr<Tensor>(DataType, std::vector<int64_t>)> allocate_scratch;
  // The host waiting inside the launch for the stream's work (a size the
  // kernel reads back): runs the wait, counted and traced as the
  // scheduler's own host waits. Null outside the executor.
  std::function<absl::Status(const std::string& what, const std::function<absl::Status()>& wait)> host_wait;
};

// Where in training a run happens: the loop timestamp and the phase.
struct StepInfo {
  int64_t epoch = 0;
  int64_t step = 0;             // global iteration counter, monotone across epochs
  int64_t step_in_epoch = 0;
  int64_t steps_per_epoch = 1;
  int64_t total_epochs = 1;
  bool training = true;         // false for evaluation: dropout off, batch norm uses running statistics
  // The key communication is ordered and tagged by: the step in training,
  // the batch in evaluation.
  int64_t issue_key() const { return training ? step : step_in_epoch; }
};

class OpKernelContext {
 public:
  OpKernelContext(const Node* node, std::vector<const Tensor*> inputs,
                  const std::vector<std::vector<int64_t>>* output_dims, const StepInfo* step, int reserved_threads = 1)
      : node_(node), inputs_(std::move(inputs)), output_dims_(output_dims), step_(step),
        reserved_threads_(reserved_threads < 1 ? 1 : reserved_threads), outputs_(output_dims->size()) {}

  const Node& node() const { return *node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Tensor& input(int i) const { return *inputs_[i]; }
  const StepInfo& step() const { return *step_; }

  // Allocates output i with the dims shape inference gave it for these inputs.
  absl::StatusOr<Tensor*> AllocateOutput(int i, DataType dtype = DT_FLOAT);
  // Makes output i an existing tensor (sharing its buffer); its dims must be
  // the inferred ones.
  absl::Status SetOutput(int i, Tensor tensor);
  // For a source whose dims come at run time (a Recv's, with the message),
  // which the kernel has checked against the node's declared shape.
  void SetRunTimeOutput(int i, Tensor tensor) { outputs_[i] = std::move(tensor); }
  const std::vector<int64_t>& output_dims(int i) const { return (*output_dims_)[i]; }
  // Outputs allocated before the kernel runs, where its consumers were handed
  // them already (a device stream's: the scheduler enqueues work ahead of
  // it). AllocateOutput then returns output i (whose dtype must be the one
  // asked for) and SetOutput copies the tensor's data into it.
  void PresetOutputs(std::vector<Tensor> outputs) {
    outputs_ = std::move(outputs);
    preset_outputs_ = true;
  }
  std::vector<Tensor>& outputs() { return outputs_; }

  // The threads this kernel uses for work of `work_items` independent items of
  // which each thread should get at least `min_items_per_thread`: the useful
  // count, capped by the cores the executor reserved. The first call fixes
  // the count for the run (later calls get at most as many). It depends on
  // the shapes and the reservation only, never on what else is running, so
  // every reduction splits the same way in every run.
  int AcquireThreads(int64_t work_items, int64_t min_items_per_thread);
  // The useful count the first AcquireThreads call found (0: never called).
  // The executor reserves min(that, its cores) for the node's next runs with
  // these shapes, and nothing more.
  int first_request() const { return first_request_; }

  // Inputs of source ops, supplied by the executor: the batch for an Input
  // node, the current value for a Parameter.
  void set_source_value(const Tensor* value) { source_value_ = value; }
  const Tensor* source_value() const { return source_value_; }

  // The worker's collective queue (communication kernels); null when the
  // worker runs alone.
  void set_collectives(CollectiveQueue* queue) { collectives_ = queue; }
  CollectiveQueue* collectives() const { return collectives_; }
  // The worker's point-to-point channel (Send and Recv); null when alone.
  void set_point_to_point(PointToPointChannel* channel) { point_to_point_ = channel; }
  PointToPointChannel* point_to_point() const { return point_to_point_; }
  // Set for a GPU kernel, which enqueues its work on the stream and returns
  // at once; its inputs and preset outputs are device memory, so it neither
  // reads them on the host nor calls SetOutput.
  void set_device_launch(const DeviceLaunch* launch) { device_launch_ = launch; }
  const DeviceLaunch* device_launch() const { return device_launch_; }

 private:
  const Node* node_;
  std::vector<const Tensor*> inputs_;
  const std::vector<std::vector<int64_t>>* output_dims_;
  const StepInfo* step_;
  int reserved_threads_;
  std::vector<Tensor> outputs_;
  const Tensor* source_value_ = nullptr;
  CollectiveQueue* collectives_ = nullptr;
  PointToPointChannel* point_to_point_ = nullptr;
  const DeviceLaunch* device_launch_ = nullptr;
  int first_request_ = 0;
  bool preset_outputs_ = false;
  int threads_ = 0;  // 0 until AcquireThreads is first called
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  // Reads attributes; called once when the kernel is created for a node.
  virtual absl::Status Init(const Node& node, const AttrMap& attrs) { return absl::OkStatus(); }
  // Computes the outputs. May run concurrently for different steps, so state
  // shared across runs (caches) must be guarded.
  virtual absl::Status Compute(OpKernelContext* ctx) = 0;

  // Asynchronous kernels (communication) start their work in ComputeAsync and
  // return; the executor gives the node's core back meanwhile and finishes
  // the node when `done` runs (on any thread). `ctx` lives until then.
  virtual bool IsAsync() const { return false; }
  virtual void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) { done(Compute(ctx)); }
};

// Base for asynchronous kernels: Compute (used where a caller must wait, as
// in evaluation) runs ComputeAsync and blocks until it is done.
class AsyncOpKernel : public OpKernel {
 public:
  bool IsAsync() const override { return true; }
  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override = 0;
  absl::Status Compute(OpKernelContext* ctx) override;
};

using KernelFactory = std::function<std::unique_ptr<OpKernel>()>;
// Whether a kernel runs this node, for a kernel that runs only some of its
// op's nodes (CompressedAllReduce on the GPU: only the codecs with GPU
// kernels); OK or the reason, which names what it lacks. Checked by `place`
// before it puts a node on the device, and by Create.
using KernelCovers = std::function<absl::Status(const Node&, const AttrMap&)>;

class KernelRegistry {
 public:
  static KernelRegistry& Global();

  absl::Status Register(std::string op, std::string device, DataType dtype, KernelFactory factory,
                        KernelCovers covers = nullptr);
  bool Has(absl::string_view op, absl::string_view device, DataType dtype) const;
  // Whether `device` has a kernel that runs `node`: NotFound without one for
  // its op and dtype, else the kernel's KernelCovers verdict.
  absl::Status Covers(const Node& node, absl::string_view device) const;
  // Whether any op has a kernel on `device` (a binary built without CUDA has
  // no kGpu kernel).
  bool HasAny(absl::string_view device) const;
  // The dtypes `op` has kernels for on `device`.
  std::vector<DataType> DtypesFor(absl::string_view op, absl::string_view device) const;

  // Creates and initialises the kernel for `node` (after shape inference: the
  // key's dtype is that of the node's first output). The error names the node
  // and lists the dtypes that do have kernels.
  absl::StatusOr<std::unique_ptr<OpKernel>> Create(const Graph& graph, const Node& node,
                                                   absl::string_view device) const;

 private:
  struct Entry {
    KernelFactory factory;
    KernelCovers covers;  // null: every node of the op
  };
  absl::flat_hash_map<std::string, Entry> factories_;  // "op|device|dtype"
};

// The dtype a node's kernel is chosen by.
DataType KernelDtype(const Node& node);

}  // namespace nereid

#define NEREID_REGISTER_KERNEL(op, device, dtype, KernelClass)                      \
  NEREID_REGISTER(::nereid::KernelRegistry, op, std::string(device), dtype, [] { \
    return std::unique_ptr<::nereid::OpKernel>(new KernelClass());               \
  })

// A kernel for some of its op's nodes: `covers` (a KernelCovers) says which.
#define NEREID_REGISTER_KERNEL_COVERING(op, device, dtype, KernelClass, covers)                        \
  NEREID_REGISTER(                                                                                      \
      ::nereid::KernelRegistry, op, std::string(device), dtype,                                         \
      [] { return std::unique_ptr<::nereid::OpKernel>(new KernelClass()); }, ::nereid::KernelCovers(covers))

#endif  // NEREID_OPS_KERNEL_H_
