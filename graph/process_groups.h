#ifndef NEREID_GRAPH_PROCESS_GROUPS_H_
#define NEREID_GRAPH_PROCESS_GROUPS_H_

// The process groups a plan's collectives run on, declared in the plan's
// records (PlanRecords.group) by the pass that partitions it, e.g. a
// "model" group in blocks of 4 and a "replicas" group strided by 4.
//
// A layout cuts the world's ranks into instances of `size` ranks each, so a
// plan is written once for every rank (each rank finds its own instance):
//   blocks:G   consecutive ranks: rank r is in instance r / G, as member r % G
//              (a model-parallel group: ranks 0-3, 4-7, ...);
//   strided:G  ranks equal modulo G: rank r is in instance r % G, as member
//              r / G (the replicas of one shard: ranks 1, 5, 9, ...);
//   ranks:A-B  one instance of ranks A..B; the other ranks are not members
//              (a role: the servers of a parameter server, ranks 0-1).
// A collective op names its group in its `group` attribute; an empty name is
// the whole world.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

enum class GroupLayout { kBlocks, kStrided, kRanks };

struct GroupDecl {
  std::string name;
  GroupLayout layout = GroupLayout::kBlocks;
  int size = 1;  // blocks: the group's ranks; strided: the stride (the group has world / size ranks)
  int first = 0;  // ranks: the first rank (the group is first .. first + size - 1)
};

// One rank's place in a declared group at a given world size.
struct GroupMembership {
  std::string name;            // the declared name
  std::string instance;        // "<name>.<instance>": unique among the run's groups
  std::vector<int> members;    // world ranks, in group-rank order
  int group_rank = 0;          // this rank's index in `members`
};

// The groups the graph's plan declares (none: empty), checked: names
// unique and not empty, sizes at least 1, ranks in range. Errors name the
// declaration.
absl::StatusOr<std::vector<GroupDecl>> DeclaredGroups(const Graph& graph);
// Replaces the graph's declarations with `groups`.
void DeclareGroups(Graph& graph, const std::vector<GroupDecl>& groups);
// "model=blocks:4;replicas=strided:4": for reports and errors.
std::string GroupDeclsText(const std::vector<GroupDecl>& groups);

// Where `rank` of `world` sits in `group`. FailedPrecondition if the layout
// does not divide the world (a plan made for another world size) or names
// ranks outside it; NotFound if `rank` is not a member (ranks: layouts).
absl::StatusOr<GroupMembership> MembershipOf(const GroupDecl& group, int rank, int world);

// The number of ranks each instance of `group` has at `world`.
int GroupSize(const GroupDecl& group, int world);

// Whether a Parameter's value differs between ranks: state marked per_rank
// (error-feedback residuals), a shard of a group (shard_group), or state
// placed on some ranks only (graph/placement.h). Such values
// are checkpointed per rank and left out of every cross-rank comparison.
bool HoldsPerRankValue(const Node& parameter);

}  // namespace nereid

#endif  // NEREID_GRAPH_PROCESS_GROUPS_H_
