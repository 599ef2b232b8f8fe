#include "graph/placement.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace nereid {

std::string Placement::ToString() const {
  if (worker.has_value()) return absl::StrCat("rank ", *worker);
  if (!role.empty()) return absl::StrCat("role '", role, "'");
  return "every rank";
}

Placement PlacementOf(const Node& node) {
  Placement p;
  if (node.def().has_worker()) p.worker = node.def().worker();
  p.role = node.def().role();
  return p;
}

void SetPlacement(Node& node, const Placement& placement) {
  NodeDef* def = node.mutable_def();
  if (placement.worker.has_value()) {
    def->set_worker(*placement.worker);
  } else {
    def->clear_worker();
  }
  def->set_role(placement.role);
}

absl::StatusOr<bool> RunsOn(const Placement& placement, int rank, int world, const std::vector<GroupDecl>& groups) {
  if (placement.worker.has_value()) return *placement.worker == rank;
  if (placement.role.empty()) return true;
  for (const GroupDecl& g : groups) {
    if (g.name != placement.role) continue;
    absl::StatusOr<GroupMembership> m = MembershipOf(g, rank, world);
    if (absl::IsNotFound(m.status())) return false;
    RETURN_IF_ERROR(m.status());
    return true;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("role '", placement.role, "' is not a declared group (the plan's groups)"));
}

absl::StatusOr<std::vector<int>> RanksOf(const Placement& placement, int world, const std::vector<GroupDecl>& groups) {
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) {
    ASSIGN_OR_RETURN(bool runs, RunsOn(placement, r, world, groups));
    if (runs) ranks.push_back(r);
  }
  return ranks;
}

bool HasPlacedNodes(const Graph& graph) {
  for (const Node* n : graph.nodes()) {
    if (!PlacementOf(*n).everywhere()) return true;
  }
  return false;
}

}  // namespace nereid
