#include "runtime/data_parallel_group.h"

#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/communicator_factory.h"
#include "comm/fault_injection.h"
#include "comm/rendezvous_spec.h"
#include "core/fingerprint.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/version.h"
#include "graph/process_groups.h"
#include "ops/collective_schedule.h"
#include "ops/op_registry.h"

namespace nereid {
namespace {

// Which collectives are placed on a GPU (place(device=cuda, comm=device)):
// the GPU, and the groups ("" for the world) whose collectives run through
// NCCL there. A group with some collectives left on the host (host_ops, or
// fallback=host for a node without a GPU kernel) is split (SplitAcrossSides):
// the host's communicator runs that share. Collectives on a second GPU are
// refused.
struct CollectivesOnGpu {
  int gpu = -1;
  absl::flat_hash_set<std::string> groups;
};

absl::StatusOr<CollectivesOnGpu> PlacedCollectives(const Graph& graph) {
  CollectivesOnGpu placed;
  for (const Node* n : graph.nodes()) {
    const bool transfer = IsDeviceTransfer(*n);
    if (!transfer && !IsCollective(*n)) continue;
    const std::string& device = n->def().device();
    if (!absl::StartsWith(device, "cuda:")) continue;
    int ordinal = -1;
    if (!absl::SimpleAtoi(device.substr(5), &ordinal) || (placed.gpu >= 0 && ordinal != placed.gpu)) {
      return absl::InvalidArgumentError(absl::StrCat("'", n->name(), "' is placed on '", device,
                                                     "', another collective on cuda:", placed.gpu));
    }
    placed.gpu = ordinal;
    placed.groups.insert(transfer ? std::string(kTransferGroup) : CollectiveGroup(*n));
  }
  return placed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataParallelGroup>> DataParallelGroup::Join(const Graph& graph,
                                                                           const GroupOptions& options) {
  // Collectives per step and per evaluation batch, by group ("": the world),
  // and by share where a group is split across a GPU and the host.
  absl::flat_hash_map<std::string, CollectiveCounts> counts = CollectivesByGroup(graph);
  const SplitGroups split = SplitAcrossSides(graph);
  for (const auto& [share, c] : split.counts) counts[share] = c;
  std::unique_ptr<DataParallelGroup> group(new DataParallelGroup());
  group->timeout_ = options.timeout;
  CommunicatorSpec spec;
  spec.backend = options.backend;
  ASSIGN_OR_RETURN(spec.rendezvous, ParseRendezvousSpec(options.rendezvous, options.run_id));
  spec.rendezvous.token = options.token;
  spec.rank = options.rank;
  spec.world = options.world;
  spec.identity.nereid_version = kNereidVersion;
  spec.identity.plan_fingerprint = options.plan_fingerprint;
  spec.identity.settings = options.settings;
  spec.identity.world_size = options.world;
  spec.hostname = options.hostname;
  spec.connect_timeout = options.timeout;
  spec.verify_messages = options.verify_messages;
  // Also applies NEREID_FAULTS, through which tests kill or stop a rank.
  ASSIGN_OR_RETURN(group->communicator_, CreateCommunicator(spec));
  Log().debug("communicator: {}", group->communicator_->backend());
  Communicator* collectives = group->communicator_.get();
  ASSIGN_OR_RETURN(const CollectivesOnGpu on_gpu, PlacedCollectives(graph));
  // Collectives on the GPU's streams go through NCCL, which meets its peers
  // under the run's own keys; the host's communicator keeps the rest
  // (transfers, the run's exchanges of host values).
  CommunicatorSpec nccl = spec;
  nccl.backend = "nccl";
  nccl.device = on_gpu.gpu;
  nccl.rendezvous.run_id = absl::StrCat(spec.rendezvous.run_id, "/nccl");
  nccl.rendezvous.rank0_serves = false;  // rank 0 already serves a tcp:// store
  // The verifier reads the values it checks on the host; NCCL's are in
  // device memory (and enqueued, not done, when a call returns).
  nccl.verify_messages = false;
  if (on_gpu.gpu >= 0 && spec.verify_messages) {
    Log().warn("--verify-messages checks the host's communicators only, not NCCL's on cuda:{}", on_gpu.gpu);
  }
  if (on_gpu.groups.contains("")) {
    ASSIGN_OR_RETURN(group->device_communicator_, CreateCommunicator(nccl));
    collectives = group->device_communicator_.get();
  }
  group->engine_ = std::make_unique<CollectiveEngine>(collectives, std::max(counts[""].per_step, 1), options.timeout);
  group->point_to_point_ = std::make_unique<PointToPointEngine>(group->communicator_.get(), options.timeout);
  // The plan's process groups, in declaration order on every rank.
  ASSIGN_OR_RETURN(std::vector<GroupDecl> declared, DeclaredGroups(graph));
  std::vector<std::pair<GroupMembership, CollectiveCounts>> joining;
  auto join = [&](GroupMembership m) {
    if (split.groups.contains(m.name)) {  // the host's share: a group of its own
      GroupMembership host = m;
      host.name = HostShare(m.name);
      host.instance = HostShare(m.instance);
      joining.emplace_back(host, counts[host.name]);
    }
    const CollectiveCounts c = counts[m.name];
    joining.emplace_back(std::move(m), c);
  };
  for (const GroupDecl& decl : declared) {
    absl::StatusOr<GroupMembership> membership = MembershipOf(decl, options.rank, options.world);
    if (absl::IsNotFound(membership.status())) continue;  // a role this rank does not play
    ASSIGN_OR_RETURN(GroupMembership m, std::move(membership));
    join(std::move(m));
  }
  if (split.groups.contains("")) {  // the world's host share
    GroupMembership m;
    m.name = m.instance = HostShare("");
    m.members.resize(options.world);
    std::iota(m.members.begin(), m.members.end(), 0);
    m.group_rank = options.rank;
    joining.emplace_back(std::move(m), counts[HostShare("")]);
  }
  // Transfers placed on a device: a world-sized group of their own (NCCL on
  // cuda), issued in the rank's order of device transfers
  // (ops/collective_schedule.h). The plan check (CheckDeviceTransferOrder)
  // refuses a plan where some ranks have none, since joining it is a
  // rendezvous of every rank.
  const TransferBuckets transfers = DeviceTransferBuckets(graph, options.rank);
  if (transfers.per_step > 0) {
    GroupMembership m;
    m.name = m.instance = kTransferGroup;
    m.members.resize(options.world);
    std::iota(m.members.begin(), m.members.end(), 0);
    m.group_rank = options.rank;
    joining.emplace_back(std::move(m), CollectiveCounts{transfers.per_step, transfers.per_evaluation});
  }
  for (const auto& [m, c] : joining) {
    ProcessGroup g;
    g.name = m.name;
    g.group_rank = m.group_rank;
    ASSIGN_OR_RETURN(g.communicator,
                     CreateGroupCommunicator(on_gpu.groups.contains(m.name) ? nccl : spec, m.instance, m.members));
    g.steps = std::make_unique<CollectiveEngine>(g.communicator.get(), std::max(c.per_step, 1), options.timeout);
    g.evaluation =
        std::make_unique<CollectiveEngine>(g.communicator.get(), std::max(c.per_evaluation, 1), options.timeout);
    group->groups_.push_back(std::move(g));
  }
  return group;
}

DataParallelGroup::~DataParallelGroup() {
  groups_.clear();
  point_to_point_.reset();
  engine_.reset();
}

absl::Duration DataParallelGroup::world_busy_time() const {
  absl::Duration total = engine_->busy_time();
  for (const ProcessGroup& g : groups_) {
    if (g.name == HostShare("")) total += g.steps->busy_time();
  }
  return total;
}

absl::Duration DataParallelGroup::world_codec_time() const {
  absl::Duration total = engine_->codec_time();
  for (const ProcessGroup& g : groups_) {
    if (g.name == HostShare("")) total += g.steps->codec_time();
  }
  return total;
}

TrafficCounters DataParallelGroup::traffic() const {
  TrafficCounters total = communicator_->traffic();
  std::vector<const Communicator*> others;
  if (device_communicator_ != nullptr) others.push_back(device_communicator_.get());
  for (const ProcessGroup& g : groups_) others.push_back(g.communicator.get());
  for (const Communicator* other : others) {
    TrafficCounters t = other->traffic();
    total.bytes_sent += t.bytes_sent;
    total.bytes_received += t.bytes_received;
    total.calls += t.calls;
  }
  return total;
}

void DataParallelGroup::ConfigureExecutor(ExecutorOptions& options) {
  options.collectives = engine_.get();
  options.point_to_point = point_to_point_.get();
  for (ProcessGroup& g : groups_) {
    options.group_collectives[g.name] = g.steps.get();
    options.group_eval_collectives[g.name] = g.evaluation.get();
    options.group_ranks[g.name] = g.group_rank;
  }
}

std::optional<std::string> DataParallelGroup::WaitingFor() const {
  if (InInjectedDelay()) return std::nullopt;  // this rank plays a stuck one (NEREID_FAULTS delay)
  if (std::optional<std::pair<int64_t, int>> key = engine_->running()) {
    return absl::StrCat("allreduce step=", key->first, " bucket=", key->second);
  }
  for (const ProcessGroup& g : groups_) {
    for (const CollectiveEngine* engine : {g.steps.get(), g.evaluation.get()}) {
      if (std::optional<std::pair<int64_t, int>> key = engine->running()) {
        return absl::StrCat(g.name, engine == g.steps.get() ? " step=" : " eval_batch=", key->first,
                            " bucket=", key->second);
      }
    }
  }
  if (const int transfers = point_to_point_->running(); transfers > 0) {
    return absl::StrCat("point_to_point transfers=", transfers);
  }
  if (const char* driver = driver_collective_.load()) return std::string(driver);
  return std::nullopt;
}

void DataParallelGroup::StartAt(int64_t step) {
  engine_->Reset(step);
  for (ProcessGroup& g : groups_) g.steps->Reset(step);
}

void DataParallelGroup::StartEvaluation() {
  for (ProcessGroup& g : groups_) g.evaluation->Reset(0);
}

void DataParallelGroup::SetTrace(TraceRecorder* trace) {
  engine_->set_trace(trace);
  for (ProcessGroup& g : groups_) g.steps->set_trace(trace);
}

absl::Status DataParallelGroup::CheckIdenticalState(const Executor& executor,
                                                     const absl::flat_hash_set<std::string>& per_rank) {
  for (const auto& [name, value] : executor.State()) {
    if (value.dtype() != DT_FLOAT || per_rank.contains(name)) continue;
    std::vector<float> root(value.data<float>(), value.data<float>() + value.num_elements());
    CollectiveOptions o{NextDriverTag(), timeout_};
    DriverCollective running(this, "check_identical_state");
    RETURN_IF_ERROR(communicator_->Broadcast(absl::MakeSpan(root), 0, o));
    if (std::memcmp(root.data(), value.data<float>(), value.num_bytes()) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("parameter '", name, "' on rank ", rank(),
                       " differs from rank 0's: the ranks did not start from identical parameters (same plan, "
                       "seed and checkpoint are needed)"));
    }
  }
  return absl::OkStatus();
}

absl::Status DataParallelGroup::CheckSameState(const Executor& executor,
                                               const absl::flat_hash_set<std::string>& per_rank, int64_t step) {
  // Every rank takes the same branch: they call this at the same steps.
  if (step == checked_step_) return absl::OkStatus();
  checked_step_ = step;
  // The 64-bit fingerprint as four 16-bit pieces: floats hold them exactly.
  const uint64_t mine = StateFingerprint(executor, per_rank);
  std::vector<float> pieces(4);
  for (int i = 0; i < 4; ++i) pieces[i] = static_cast<float>((mine >> (16 * i)) & 0xffff);
  std::vector<float> all(4 * static_cast<size_t>(world()));
  CollectiveOptions o{NextDriverTag(), timeout_};
  {
    DriverCollective running(this, "check_state");
    RETURN_IF_ERROR(communicator_->AllGather(pieces, absl::MakeSpan(all), o));
  }
  auto fingerprint_of = [&](int r) {
    uint64_t f = 0;
    for (int i = 0; i < 4; ++i) f |= static_cast<uint64_t>(all[4 * r + i]) << (16 * i);
    return f;
  };
  std::vector<int> differ;
  for (int r = 1; r < world(); ++r) {
    if (fingerprint_of(r) != fingerprint_of(0)) differ.push_back(r);
  }
  if (differ.empty()) return absl::OkStatus();
  std::string text = absl::StrCat("the ranks' parameters drifted apart by step ", step, ": rank 0 has fingerprint ",
                                  absl::Hex(fingerprint_of(0), absl::kZeroPad16));
  for (int r : differ) absl::StrAppend(&text, ", rank ", r, " has ", absl::Hex(fingerprint_of(r), absl::kZeroPad16));
  return absl::DataLossError(absl::StrCat(text, " (a corrupted or lost message?); stopping before anything is "
                                                "checkpointed"));
}

absl::Status DataParallelGroup::SumAcrossRanks(std::vector<double>& values) {
  // Split each double into a high and a low float so the sum keeps ~48 bits.
  std::vector<float> parts;
  for (double v : values) {
    float hi = static_cast<float>(v);
    parts.push_back(hi);
    parts.push_back(static_cast<float>(v - hi));
  }
  CollectiveOptions o{NextDriverTag(), timeout_};
  DriverCollective running(this, "sum_metrics");
  RETURN_IF_ERROR(communicator_->AllReduce(absl::MakeSpan(parts), ReduceOp::kSum, o));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(parts[2 * i]) + parts[2 * i + 1];
  return absl::OkStatus();
}

uint64_t DataParallelGroup::StateFingerprint(const Executor& executor,
                                            const absl::flat_hash_set<std::string>& per_rank) {
  uint64_t h = kFnv1aOffset;
  for (const auto& [name, value] : executor.State()) {
    if (per_rank.contains(name)) continue;
    h = Fnv1a(name, h);
    h = Fnv1a(value.raw(), value.num_bytes(), h);
  }
  return h;
}

absl::flat_hash_set<std::string> DataParallelGroup::PerRankState(const Graph& graph) {
  absl::flat_hash_set<std::string> names;
  for (Node* n : graph.nodes()) {
    if (n->op() == "Parameter" && HoldsPerRankValue(*n)) names.insert(n->name());
  }
  return names;
}

std::vector<std::string> DataParallelGroup::RunningStatistics(const Graph& graph) {
  std::vector<std::string> names;
  for (Node* n : graph.nodes()) {
    const OpDef* def = OpRegistry::Global().Find(n->op());
    if (def == nullptr) continue;
    for (auto [input, output] : def->state_updates) {
      const Edge* e = n->input_edge(input);
      if (e == nullptr || e->src->op() != "Parameter") continue;
      const Node& p = *e->src;
      const bool placed = p.def().has_worker() || !p.def().role().empty();
      if (!placed && NodeAttrBool(p, "per_rank", false) && NodeAttrString(p, "shard_group").empty()) {
        names.push_back(p.name());
      }
    }
  }
  return names;
}

absl::StatusOr<std::vector<double>> DataParallelGroup::AverageAcrossRanks(
    Executor& executor, const std::vector<std::pair<std::string, Tensor>>& tensors, bool adopt) {
  std::vector<double> values;
  for (const auto& [name, t] : tensors) {
    if (t.dtype() != DT_FLOAT) return absl::InternalError(absl::StrCat("state '", name, "' is not float32"));
    values.insert(values.end(), t.data<float>(), t.data<float>() + t.num_elements());
  }
  if (values.empty()) return values;
  RETURN_IF_ERROR(SumAcrossRanks(values));
  for (double& v : values) v /= world();
  size_t at = 0;
  for (const auto& [name, t] : tensors) {
    if (!adopt) break;
    ASSIGN_OR_RETURN(Tensor averaged, Tensor::Allocate(DT_FLOAT, t.dims()));
    for (int64_t i = 0; i < averaged.num_elements(); ++i) averaged.data<float>()[i] = static_cast<float>(values[at++]);
    RETURN_IF_ERROR(executor.SetState(name, averaged));
  }
  return values;
}

}  // namespace nereid
