#include "graph/process_groups.h"

#include "absl/strings/str_cat.h"

namespace nereid {

absl::StatusOr<std::vector<GroupDecl>> DeclaredGroups(const Graph& graph) {
  constexpr int kMaxRank = 1 << 20;
  std::vector<GroupDecl> groups;
  for (const GroupDeclaration& d : graph.header().records().group()) {
    const std::string what = absl::StrCat("the plan's group '", d.name(), "'");
    if (d.name().empty()) return absl::InvalidArgumentError("the plan declares a group without a name");
    if (d.name()[0] == '-') {
      return absl::InvalidArgumentError(absl::StrCat(what, ": names starting with '-' are the runtime's own"));
    }
    if (d.size() < 1 || d.size() > kMaxRank || d.first() < 0 || d.first() > kMaxRank) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has size ", d.size(), " from rank ", d.first(),
                                                     "; it needs size >= 1 and ranks within 0..", kMaxRank));
    }
    GroupDecl g;
    g.name = d.name();
    g.size = d.size();
    g.first = d.first();
    switch (d.layout()) {
      case GroupDeclaration::BLOCKS:
        g.layout = GroupLayout::kBlocks;
        break;
      case GroupDeclaration::STRIDED:
        g.layout = GroupLayout::kStrided;
        break;
      case GroupDeclaration::RANKS:
        g.layout = GroupLayout::kRanks;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(what, " has an unknown layout ", d.layout()));
    }
    for (const GroupDecl& other : groups) {
      if (other.name == g.name) return absl::InvalidArgumentError(absl::StrCat(what, " is declared twice"));
    }
    groups.push_back(g);
  }
  return groups;
}

void DeclareGroups(Graph& graph, const std::vector<GroupDecl>& groups) {
  auto* declared = graph.mutable_header()->mutable_records()->mutable_group();
  declared->Clear();
  for (const GroupDecl& g : groups) {
    GroupDeclaration* d = declared->Add();
    d->set_name(g.name);
    d->set_size(g.size);
    d->set_first(g.first);
    d->set_layout(g.layout == GroupLayout::kBlocks    ? GroupDeclaration::BLOCKS
                  : g.layout == GroupLayout::kStrided ? GroupDeclaration::STRIDED
                                                      : GroupDeclaration::RANKS);
  }
}

std::string GroupDeclsText(const std::vector<GroupDecl>& groups) {
  std::string text;
  for (const GroupDecl& g : groups) {
    absl::StrAppend(&text, text.empty() ? "" : ";", g.name, "=");
    switch (g.layout) {
      case GroupLayout::kBlocks:
        absl::StrAppend(&text, "blocks:", g.size);
        break;
      case GroupLayout::kStrided:
        absl::StrAppend(&text, "strided:", g.size);
        break;
      case GroupLayout::kRanks:
        absl::StrAppend(&text, "ranks:", g.first, "-", g.first + g.size - 1);
        break;
    }
  }
  return text;
}

bool HoldsPerRankValue(const Node& parameter) {
  // A placed parameter (graph/placement.h) lives on some ranks only.
  const bool placed = parameter.def().has_worker() || !parameter.def().role().empty();
  return placed || NodeAttrBool(parameter, "per_rank", false) || !NodeAttrString(parameter, "shard_group").empty();
}

int GroupSize(const GroupDecl& group, int world) {
  return group.layout == GroupLayout::kStrided ? world / group.size : group.size;
}

absl::StatusOr<GroupMembership> MembershipOf(const GroupDecl& group, int rank, int world) {
  if (group.layout == GroupLayout::kRanks) {
    const int last = group.first + group.size - 1;
    if (last >= world) {
      return absl::FailedPreconditionError(absl::StrCat("group '", group.name, "' holds ranks ", group.first, "-", last,
                                                        ", beyond the ", world, " workers"));
    }
    if (rank < group.first || rank > last) {
      return absl::NotFoundError(absl::StrCat("rank ", rank, " is not in group '", group.name, "' (ranks ",
                                              group.first, "-", last, ")"));
    }
    GroupMembership m;
    m.name = group.name;
    m.instance = absl::StrCat(group.name, ".0");
    m.group_rank = rank - group.first;
    for (int r = group.first; r <= last; ++r) m.members.push_back(r);
    return m;
  }
  if (world % group.size != 0) {
    return absl::FailedPreconditionError(absl::StrCat("group '", group.name, "' is laid out in ",
                                                      group.layout == GroupLayout::kBlocks ? "blocks" : "strides",
                                                      " of ", group.size, ", which does not divide ", world,
                                                      " workers (was the plan made for another number of workers?)"));
  }
  GroupMembership m;
  m.name = group.name;
  int instance;
  if (group.layout == GroupLayout::kBlocks) {
    instance = rank / group.size;
    m.group_rank = rank % group.size;
    for (int i = 0; i < group.size; ++i) m.members.push_back(instance * group.size + i);
  } else {
    instance = rank % group.size;
    m.group_rank = rank / group.size;
    for (int r = instance; r < world; r += group.size) m.members.push_back(r);
  }
  m.instance = absl::StrCat(group.name, ".", instance);
  return m;
}

}  // namespace nereid
