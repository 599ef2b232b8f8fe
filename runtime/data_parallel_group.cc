#include "runtime/data_parallel_group.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "comm/communicator_factory.h"
#include "comm/rendezvous_spec.h"
#include "core/fingerprint.h"
#include "core/status_macros.h"
#include "core/version.h"

namespace nereid {

absl::StatusOr<std::unique_ptr<DataParallelGroup>> DataParallelGroup::Join(const Graph& graph,
                                                                           const GroupOptions& options) {
  const int buckets = CollectivesPerStep(graph);
  std::unique_ptr<DataParallelGroup> group(new DataParallelGroup());
  group->timeout_ = options.timeout;
  CommunicatorSpec spec;
  spec.backend = "gloo";
  ASSIGN_OR_RETURN(spec.rendezvous, ParseRendezvousSpec(options.rendezvous, options.run_id));
  spec.rank = options.rank;
  spec.world = options.world;
  spec.identity.nereid_version = kNereidVersion;
  spec.identity.plan_fingerprint = options.plan_fingerprint;
  spec.identity.world_size = options.world;
  spec.hostname = options.hostname;
  spec.connect_timeout = options.timeout;
  // Also applies NEREID_FAULTS, through which tests kill or stop a rank.
  ASSIGN_OR_RETURN(group->communicator_, CreateCommunicator(spec));
  group->engine_ = std::make_unique<CollectiveEngine>(group->communicator_.get(), std::max(buckets, 1), options.timeout);
  return group;
}

DataParallelGroup::~DataParallelGroup() { engine_.reset(); }

absl::Status DataParallelGroup::CheckIdenticalState(const Executor& executor,
                                                     const absl::flat_hash_set<std::string>& per_rank) {
  for (const auto& [name, value] : executor.State()) {
    if (value.dtype() != DT_FLOAT || per_rank.contains(name)) continue;
    std::vector<float> root(value.data<float>(), value.data<float>() + value.num_elements());
    CollectiveOptions o{NextDriverTag(), timeout_};
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

absl::Status DataParallelGroup::SumAcrossRanks(std::vector<double>& values) {
  // Split each double into a high and a low float so the sum keeps ~48 bits.
  std::vector<float> parts;
  for (double v : values) {
    float hi = static_cast<float>(v);
    parts.push_back(hi);
    parts.push_back(static_cast<float>(v - hi));
  }
  CollectiveOptions o{NextDriverTag(), timeout_};
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

int DataParallelGroup::CollectivesPerStep(const Graph& graph) {
  int collectives = 0;
  for (Node* n : graph.nodes()) collectives += n->op() == "AllReduce" || n->op() == "CompressedAllReduce";
  return collectives;
}

absl::flat_hash_set<std::string> DataParallelGroup::PerRankState(const Graph& graph) {
  absl::flat_hash_set<std::string> names;
  for (Node* n : graph.nodes()) {
    if (n->op() != "Parameter") continue;
    auto it = n->def().attr().find("per_rank");
    if (it != n->def().attr().end() && it->second.b()) names.insert(n->name());
  }
  return names;
}

}  // namespace nereid
