#include "ops/kernel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/tensor_shape.h"
#include "graph/errors.h"

namespace nereid {
namespace {

std::string KeyOf(absl::string_view op, absl::string_view device, DataType dtype) {
  return absl::StrCat(op, "|", device, "|", dtype);
}

}  // namespace

absl::StatusOr<Tensor*> OpKernelContext::AllocateOutput(int i, DataType dtype) {
  if (preset_outputs_) {
    if (outputs_[i].dtype() != dtype) {
      return absl::InternalError(absl::StrCat("output ", i, " was allocated as ", outputs_[i].DebugString(),
                                              " but the kernel writes ", DataTypeName(dtype)));
    }
    return &outputs_[i];
  }
  ASSIGN_OR_RETURN(outputs_[i], Tensor::Allocate(dtype, (*output_dims_)[i]));
  return &outputs_[i];
}

absl::Status OpKernelContext::SetOutput(int i, Tensor tensor) {
  if (tensor.dims() != (*output_dims_)[i]) {
    return absl::InternalError(absl::StrCat("output ", i, " is ", tensor.DebugString(), " but shape inference said ",
                                            DimsToString((*output_dims_)[i])));
  }
  if (preset_outputs_) {
    if (device_launch_ != nullptr) {
      return absl::InternalError(absl::StrCat("a GPU kernel set output ", i,
                                              " from another tensor; it must write the preset device block"));
    }
    if (tensor.dtype() != outputs_[i].dtype()) {
      return absl::InternalError(absl::StrCat("output ", i, " was allocated as ", outputs_[i].DebugString(),
                                              " but the kernel sets ", tensor.DebugString()));
    }
    if (tensor.raw() != outputs_[i].raw() && tensor.num_bytes() > 0) {
      std::memmove(outputs_[i].raw(), tensor.raw(), tensor.num_bytes());
    }
    return absl::OkStatus();
  }
  outputs_[i] = std::move(tensor);
  return absl::OkStatus();
}

int OpKernelContext::AcquireThreads(int64_t work_items, int64_t min_items_per_thread) {
  int64_t useful = std::max<int64_t>(1, work_items / std::max<int64_t>(1, min_items_per_thread));
  if (threads_ == 0) {
    first_request_ = static_cast<int>(std::min<int64_t>(useful, 1 << 16));
    threads_ = std::min(reserved_threads_, first_request_);
  }
  return static_cast<int>(std::min<int64_t>(threads_, useful));
}

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry* registry = new KernelRegistry();
  return *registry;
}

absl::Status KernelRegistry::Register(std::string op, std::string device, DataType dtype, KernelFactory factory,
                                      KernelCovers covers) {
  std::string key = KeyOf(op, device, dtype);
  if (factories_.contains(key)) {
    return absl::AlreadyExistsError(
        absl::StrCat("a ", device, " kernel for ", op, " (", DataTypeName(dtype), ") is already registered"));
  }
  factories_[key] = Entry{std::move(factory), std::move(covers)};
  return absl::OkStatus();
}

bool KernelRegistry::Has(absl::string_view op, absl::string_view device, DataType dtype) const {
  return factories_.contains(KeyOf(op, device, dtype));
}

absl::Status KernelRegistry::Covers(const Node& node, absl::string_view device) const {
  auto it = factories_.find(KeyOf(node.op(), device, KernelDtype(node)));
  if (it == factories_.end()) return absl::NotFoundError(absl::StrCat("no ", device, " kernel for ", node.op()));
  if (!it->second.covers) return absl::OkStatus();
  const OpDef* def = OpRegistry::Global().Find(node.op());
  if (def == nullptr) return absl::NotFoundError(absl::StrCat("unknown op ", node.op()));
  return it->second.covers(node, AttrsWithDefaults(node, *def));
}

bool KernelRegistry::HasAny(absl::string_view device) const {
  const std::string infix = absl::StrCat("|", device, "|");
  for (const auto& [key, factory] : factories_) {
    if (absl::StrContains(key, infix)) return true;
  }
  return false;
}

std::vector<DataType> KernelRegistry::DtypesFor(absl::string_view op, absl::string_view device) const {
  std::vector<DataType> dtypes;
  for (int t = DataType_MIN; t <= DataType_MAX; ++t) {
    if (DataType_IsValid(t) && Has(op, device, static_cast<DataType>(t))) dtypes.push_back(static_cast<DataType>(t));
  }
  return dtypes;
}

absl::StatusOr<std::unique_ptr<OpKernel>> KernelRegistry::Create(const Graph& graph, const Node& node,
                                                                 absl::string_view device) const {
  DataType dtype = KernelDtype(node);
  auto it = factories_.find(KeyOf(node.op(), device, dtype));
  if (it == factories_.end()) {
    std::vector<std::string> have;
    for (DataType t : DtypesFor(node.op(), device)) have.push_back(DataTypeName(t));
    return NodeError(graph, node, absl::StrCat("no ", device, " kernel for ", DataTypeName(dtype),
                                        have.empty() ? std::string(" (this op has no kernels on that device)")
                                                     : absl::StrCat("; kernels exist for ", absl::StrJoin(have, ", "))));
  }
  const OpDef* def = OpRegistry::Global().Find(node.op());
  if (def == nullptr) return NodeError(graph, node, "unknown op");
  const AttrMap attrs = AttrsWithDefaults(node, *def);
  if (it->second.covers) {
    if (absl::Status covered = it->second.covers(node, attrs); !covered.ok()) {
      return NodeError(graph, node, absl::StrCat("no ", device, " kernel for this node: ", covered.message()));
    }
  }
  std::unique_ptr<OpKernel> kernel = it->second.factory();
  absl::Status init = kernel->Init(node, attrs);
  if (!init.ok()) return NodeError(graph, node, init.message());
  return kernel;
}

DataType KernelDtype(const Node& node) {
  if (!node.outputs().empty()) return node.outputs()[0].dtype;
  return DT_INVALID;
}

absl::Status AsyncOpKernel::Compute(OpKernelContext* ctx) {
  std::promise<absl::Status> finished;
  std::future<absl::Status> result = finished.get_future();
  ComputeAsync(ctx, [&finished](absl::Status s) { finished.set_value(std::move(s)); });
  return result.get();
}

}  // namespace nereid
