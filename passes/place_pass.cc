// place(device=sim|cuda|cpu, fallback=error|host): puts every node on the
// host ("cpu:0") or on the device ("sim:0", "cuda:0"), in NodeDef.device, and
// inserts the copies where a value crosses between them.
//
// The host keeps data feeding (Input) and, unless comm=device, every op that
// talks to other ranks (OpDef::communicates: collectives, Send/Recv, the
// coded ends), which then reads and writes host memory. With comm=device
// the collectives and the transfers of planned shapes go on the device, on
// their group's stream (transfers: a stream of their own), the sim's through
// the host's communicators, cuda's through NCCL: the world's buckets, the
// group collectives and Send/Recv have GPU kernels, the compressed and
// low-rank collectives do not.
// Every other node goes on the device when the device has a
// kernel for it: on the sim, a CPU kernel (the sim runs CPU kernels on its
// memory); on cuda, a kernel registered for the GPU (ops/kernel.h). A node
// without one is an error listing them all (fallback=error), or stays on the
// host (fallback=host). A Feedback and the Parameter it carries into, and an
// op that updates state with that state's Parameter, share a side: if one
// must stay on the host, all do. device=cpu places everything on the host and
// inserts nothing.
//
// Where a data edge crosses, one copy per (source output, destination side)
// serves every consumer on that side: CopyToDevice "<src>/to_<kind>" on the
// device for host -> device, CopyToHost "<src>/to_host" on the host for
// device -> host ("_<port>" appended for an output other than 0). Control
// edges order without moving values and are left as they are.
//
// Runs last (PassInfo::runs_last), after the optimizer and any strategy pass,
// and once: the plan's records.placement says what it decided, and how the
// device runs it (compute streams; the sim's delays). The executor runs a
// plan placed on the sim or on cuda on its streams (schedulers/device_streams.h).

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "ops/collective_schedule.h"
#include "ops/gradient_builder.h"
#include "ops/kernel.h"
#include "ops/op_registry.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

constexpr char kHost[] = "cpu:0";

// What `device=` names.
struct Target {
  std::string kind;           // "sim", "cuda", "cpu"
  std::string device;         // "sim:0"
  std::string kernel_device;  // the KernelRegistry's device for its kernels; "" for cpu
};

absl::StatusOr<Target> ParseTarget(const std::string& device) {
  if (device.empty()) {
    return absl::InvalidArgumentError("place: the device option is required: place(device=sim), device=cuda or "
                                      "device=cpu");
  }
  if (device == "sim") return Target{"sim", "sim:0", std::string(kCpu)};  // the sim runs CPU kernels
  if (device == "cuda") return Target{"cuda", "cuda:0", std::string(kGpu)};
  if (device == "cpu") return Target{"cpu", kHost, ""};
  return absl::InvalidArgumentError(
      absl::StrCat("place: unknown device '", device, "'; the devices are sim, cuda and cpu"));
}

// Data feeding, and communication: collectives go on the device with
// comm=device (on their group's stream), and so do Send/Recv whose shape the
// plan knows whole (ops/collective_schedule.h: IsDeviceTransfer). A Send/Recv
// whose dims come with its message (a batch's activations) and the coded
// ends stay on the host: a device output is allocated before its node runs.
bool MustStayOnHost(const Node& node, bool comm_on_device) {
  if (node.op() == "Input") return true;
  if (!Communicates(node)) return false;
  return !(comm_on_device && (IsCollective(node) || IsPlannedTransfer(node)));
}

// OK, or why the device cannot run the node (NotFound: no kernel for its op).
absl::Status DeviceKernelFor(const Node& node, const Target& target) {
  // The executor hands these values on itself (a Parameter's value, a
  // Feedback's next value), on either side.
  if (node.op() == "Parameter" || node.op() == "Feedback") return absl::OkStatus();
  return KernelRegistry::Global().Covers(node, target.kernel_device);
}

// Union-find over node ids: the nodes that must share a side.
class Together {
 public:
  explicit Together(const Graph& graph) {
    int max_id = 0;
    for (const Node* n : graph.nodes()) max_id = std::max(max_id, n->id() + 1);
    parent_.resize(max_id);
    std::iota(parent_.begin(), parent_.end(), 0);
    for (const Node* n : graph.nodes()) {
      // The executor hands a Feedback's value straight to its Parameter.
      if (n->op() == "Feedback") {
        for (const Edge* e : n->out_edges()) Join(n->id(), e->dst->id());
      }
      // The runtime finds running statistics as the updating op's direct input.
      const OpDef* def = OpRegistry::Global().Find(n->op());
      if (def == nullptr) continue;
      for (const auto& [input, output] : def->state_updates) {
        if (input >= n->num_inputs() || n->input_edge(input) == nullptr) continue;
        const Node* state = n->input_edge(input)->src;
        if (state->op() == "Parameter") Join(n->id(), state->id());
      }
    }
  }
  int Root(int id) {
    while (parent_[id] != id) id = parent_[id] = parent_[parent_[id]];
    return id;
  }

 private:
  void Join(int a, int b) { parent_[Root(a)] = Root(b); }
  std::vector<int> parent_;
};

// Which nodes go on the device.
struct Sides {
  absl::flat_hash_map<const Node*, bool> on_device;
  int fallback_host_nodes = 0;
};

// A node the device has no kernel for, and why where its op has one (the
// kernel runs only some of the op's nodes).
struct Lacking {
  const Node* node;
  absl::Status why;
};

// "place: 31 nodes have no cuda kernel: ApplySgd x6, MatMul x3 (first: ...)".
absl::Status LackingKernels(const std::vector<Lacking>& lacking, const Target& target) {
  std::map<std::string, int> by_op;
  std::map<std::string, std::string> reason;  // by op: the first node's, where its op has a kernel
  for (const Lacking& l : lacking) {
    ++by_op[l.node->op()];
    if (!absl::IsNotFound(l.why)) reason.try_emplace(l.node->op(), l.why.message());
  }
  std::vector<std::string> ops, first;
  for (const auto& [op, count] : by_op) {
    auto why = reason.find(op);
    ops.push_back(absl::StrCat(op, " x", count, why == reason.end() ? "" : absl::StrCat(" (", why->second, ")")));
  }
  for (size_t i = 0; i < lacking.size() && i < 5; ++i) first.push_back(lacking[i].node->name());
  return absl::FailedPreconditionError(absl::StrCat(
      "place: ", lacking.size(), " node", lacking.size() == 1 ? " has" : "s have", " no ", target.kind, " kernel: ",
      absl::StrJoin(ops, ", "), " (first: ", absl::StrJoin(first, ", "), lacking.size() > first.size() ? ", ..." : "",
      "); ",
      KernelRegistry::Global().HasAny(target.kernel_device)
          ? absl::StrCat("register ", target.kernel_device, " kernels for them (ops/kernel.h)")
          : "this binary has no GPU kernels: build it with --config=cuda (NEREID_CUDA=1 ./nereid ...)",
      ", or keep them on the host with place(device=", target.kind, ", fallback=host)"));
}

absl::StatusOr<Sides> ChooseSides(const Graph& graph, const Target& target, bool fallback_host, bool comm_on_device,
                                  const absl::flat_hash_set<std::string>& host_ops) {
  Sides sides;
  std::vector<Lacking> lacking;
  for (const Node* n : graph.nodes()) {
    bool device =
        !target.kernel_device.empty() && !MustStayOnHost(*n, comm_on_device) && !host_ops.contains(n->op());
    if (absl::Status kernel = device ? DeviceKernelFor(*n, target) : absl::OkStatus(); !kernel.ok()) {
      lacking.push_back({n, std::move(kernel)});
      device = false;
    }
    sides.on_device[n] = device;
  }
  if (!lacking.empty() && !fallback_host) return LackingKernels(lacking, target);
  sides.fallback_host_nodes = static_cast<int>(lacking.size());
  // A group goes on the device only if all of it can.
  Together together(graph);
  absl::flat_hash_map<int, bool> group_on_device;
  for (const Node* n : graph.nodes()) {
    auto it = group_on_device.try_emplace(together.Root(n->id()), true).first;
    it->second = it->second && sides.on_device[n];
  }
  for (const Node* n : graph.nodes()) sides.on_device[n] = group_on_device[together.Root(n->id())];
  return sides;
}

struct Copies {
  int to_device = 0;
  int to_host = 0;
};

// One copy per (source output, destination side), shared by the consumers on
// that side; the copies join `sides`.
absl::StatusOr<Copies> InsertCopies(Graph& graph, const Target& target, Sides& sides) {
  Copies copies;
  std::map<std::tuple<int, int, bool>, Node*> made;  // (source id, port, to the device)
  for (Node* dst : graph.nodes()) {                   // the nodes before any copy
    const bool to_device = sides.on_device.at(dst);
    for (int port = 0; port < dst->num_inputs(); ++port) {
      const Edge* e = dst->input_edge(port);
      if (e == nullptr || sides.on_device.at(e->src) == to_device) continue;
      Node*& copy = made[{e->src->id(), e->src_port, to_device}];
      if (copy == nullptr) {
        const std::string name = absl::StrCat(e->src->name(), "/to_", to_device ? target.kind : "host",
                                              e->src_port == 0 ? "" : absl::StrCat("_", e->src_port));
        ASSIGN_OR_RETURN(copy, AddOpNode(&graph, name, to_device ? "CopyToDevice" : "CopyToHost",
                                         {NodeOut{e->src, e->src_port}}, {{"device", StringAttr(target.device)}}));
        sides.on_device[copy] = to_device;
        ++(to_device ? copies.to_device : copies.to_host);
      }
      RETURN_IF_ERROR(graph.ReplaceInput(dst, port, copy, 0));
    }
  }
  return copies;
}

class PlacePass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    if (GraphHasProperty(graph, kPlacedProperty)) {
      return absl::FailedPreconditionError(absl::StrCat("place: the graph is already placed (on ",
                                                        graph.header().records().placement().device(),
                                                        "); place runs once, last"));
    }
    ASSIGN_OR_RETURN(const Target target, ParseTarget(context.options.GetString("device")));
    const std::string& fallback = context.options.GetString("fallback");
    if (fallback != "error" && fallback != "host") {
      return absl::InvalidArgumentError(
          absl::StrCat("place: fallback=", fallback, " is not a fallback; use error or host"));
    }
    if (!GraphHasProperty(graph, kOptimizerProperty)) {
      return absl::FailedPreconditionError(
          "place: the graph has no optimizer: place runs last, after autodiff, sgd or adam and any strategy pass");
    }
    const std::string& comm = context.options.GetString("comm");
    if (comm != "host" && comm != "device") {
      return absl::InvalidArgumentError(absl::StrCat("place: comm=", comm, " is not host or device"));
    }
    if (comm == "device" && target.kind != "sim" && target.kind != "cuda") {
      return absl::InvalidArgumentError(
          absl::StrCat("place: comm=device runs communication on a device's streams (sim or cuda), not on ",
                       target.kind));
    }
    // Ops the user keeps on the host (a GPU kernel slower than the host's;
    // a codec beside device collectives, which then run split).
    absl::flat_hash_set<std::string> host_ops;
    for (absl::string_view op : absl::StrSplit(context.options.GetString("host_ops"), '+', absl::SkipWhitespace())) {
      if (OpRegistry::Global().Find(op) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("place: host_ops names '", op, "', which is not an op"));
      }
      host_ops.insert(std::string(op));
    }
    ASSIGN_OR_RETURN(Sides sides, ChooseSides(graph, target, fallback == "host", comm == "device", host_ops));
    ASSIGN_OR_RETURN(const Copies copies, InsertCopies(graph, target, sides));

    const int64_t streams = context.options.GetInt("streams");
    const int64_t delay_us = context.options.GetInt("sim_delay_us");
    if (streams < 1 || streams > 64) {
      return absl::InvalidArgumentError(absl::StrCat("place: streams=", streams, " is not in 1..64"));
    }
    if (delay_us < 0 || (delay_us > 0 && target.kind != "sim")) {
      return absl::InvalidArgumentError(
          absl::StrCat("place: sim_delay_us=", delay_us, " must be >= 0, and is for device=sim only"));
    }
    PlanRecords::Placement record;
    record.set_device(target.device);
    record.set_compute_streams(static_cast<int32_t>(streams));
    record.set_sim_delay_us(delay_us);
    record.set_sim_seed(static_cast<uint64_t>(context.options.GetInt("sim_seed")));
    const double memory_mb = context.options.GetFloat("sim_memory_mb");
    if (memory_mb < 0 || (memory_mb > 0 && target.kind != "sim")) {
      return absl::InvalidArgumentError(
          absl::StrCat("place: sim_memory_mb=", memory_mb, " must be >= 0, and is for device=sim only"));
    }
    record.set_sim_memory_bytes(static_cast<int64_t>(memory_mb * (1 << 20)));
    record.set_copies(copies.to_device + copies.to_host);
    record.set_fallback_host_nodes(sides.fallback_host_nodes);
    for (Node* n : graph.nodes()) {
      const bool on_device = sides.on_device.at(n);
      n->mutable_def()->set_device(on_device ? target.device : kHost);
      if (on_device) {
        record.set_device_nodes(record.device_nodes() + 1);
      } else {
        record.set_host_nodes(record.host_nodes() + 1);
      }
    }
    *graph.mutable_header()->mutable_records()->mutable_placement() = record;

    std::string note = target.kind == "cpu"
                           ? absl::StrCat("every node (", record.host_nodes(), ") on cpu:0, no copies")
                           : absl::StrCat(record.device_nodes(), " nodes on ", target.device, ", ", record.host_nodes(),
                                          " on the host, ", record.copies(), " copies (", copies.to_device,
                                          " CopyToDevice, ", copies.to_host, " CopyToHost)");
    if (record.fallback_host_nodes() > 0) {
      absl::StrAppend(&note, "; ", record.fallback_host_nodes(), " kept on the host without a ", target.kind,
                      " kernel");
    }
    log->notes.push_back(std::move(note));
    return absl::OkStatus();
  }
};

PassInfo PlaceInfo() {
  PassInfo info{"place",
                "Puts every node on the device or the host (NodeDef.device) and inserts CopyToDevice/CopyToHost "
                "where values cross; data feeding and communication stay on the host. Runs last. On the sim, the "
                "executor runs the device nodes on its streams.",
                {{"device", OptionType::kString, "", "sim, cuda or cpu (required)"},
                 {"fallback", OptionType::kString, "error",
                  "a node without a kernel on the device: error, or host (it stays on the host)"},
                 {"streams", OptionType::kInt, "1", "compute streams the device nodes are spread over"},
                 {"comm", OptionType::kString, "host",
                  "where collectives run: host (between copies), or device (sim or cuda: on one stream per "
                  "collective group, reading and writing device memory, and so do Send/Recv of planned shapes; a "
                  "group with some collectives left on the host runs that share through the host's "
                  "communicator)"},
                 {"host_ops", OptionType::kString, "",
                  "ops kept on the host whatever the device, '+' between them (CompressedAllReduce+LowRankPush)"},
                 {"sim_delay_us", OptionType::kInt, "0",
                  "sim: a random delay of up to this many microseconds before each launch and copy, so that a "
                  "missing wait between streams shows as a wrong result"},
                 {"sim_seed", OptionType::kInt, "0", "sim: the delays' seed"},
                 {"sim_memory_mb", OptionType::kFloat, "0",
                  "sim: the device's memory in MiB, as a GPU's is fixed (0: as much as the host gives); the "
                  "caching allocator gives its cache back when it runs out"}},
                [] { return std::make_unique<PlacePass>(); }};
  info.needs = {kOptimizerProperty};
  info.provides = {kPlacedProperty};
  info.runs_last = true;
  return info;
}

NEREID_REGISTER_PASS(PlaceInfo());

}  // namespace
}  // namespace nereid
