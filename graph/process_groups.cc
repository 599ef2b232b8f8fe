#include "graph/process_groups.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/key_values.h"

namespace nereid {

namespace {

// "blocks:4", "strided:4", "ranks:0-1" or "ranks:2" into `g`.
bool ParseLayout(absl::string_view text, GroupDecl& g) {
  std::pair<absl::string_view, absl::string_view> kind_arg = absl::StrSplit(text, absl::MaxSplits(':', 1));
  const absl::string_view kind = kind_arg.first, arg = kind_arg.second;
  if (kind == "ranks") {
    std::pair<absl::string_view, absl::string_view> range = absl::StrSplit(arg, absl::MaxSplits('-', 1));
    int last = 0;
    constexpr int kMaxRank = 1 << 20;
    if (!absl::SimpleAtoi(range.first, &g.first) || g.first < 0 || g.first > kMaxRank) return false;
    if (range.second.empty()) {
      last = g.first;
    } else if (!absl::SimpleAtoi(range.second, &last) || last < g.first || last > kMaxRank) {
      return false;
    }
    g.layout = GroupLayout::kRanks;
    g.size = last - g.first + 1;
    return true;
  }
  if (kind != "blocks" && kind != "strided") return false;
  g.layout = kind == "blocks" ? GroupLayout::kBlocks : GroupLayout::kStrided;
  return absl::SimpleAtoi(arg, &g.size) && g.size >= 1;
}

}  // namespace

absl::StatusOr<std::vector<GroupDecl>> ParseGroupDecls(const std::string& text) {
  std::vector<GroupDecl> groups;
  constexpr absl::string_view kForms = "NAME=blocks:SIZE, NAME=strided:SIZE or NAME=ranks:FIRST-LAST";
  absl::StatusOr<KeyValues> declared = ParseKeyValues(text, ';', "group declaration");
  if (!declared.ok()) return absl::InvalidArgumentError(absl::StrCat(declared.status().message(), " (", kForms, ")"));
  for (const auto& [name, layout] : *declared) {
    GroupDecl g;
    if (!ParseLayout(layout, g)) {
      return absl::InvalidArgumentError(absl::StrCat("group declaration '", name, "=", layout, "' is not ", kForms));
    }
    g.name = name;
    for (const GroupDecl& other : groups) {
      if (other.name == g.name) return absl::InvalidArgumentError(absl::StrCat("group '", g.name, "' is declared twice"));
    }
    groups.push_back(g);
  }
  return groups;
}

absl::StatusOr<std::vector<GroupDecl>> DeclaredGroups(const Graph& graph) {
  absl::StatusOr<std::vector<GroupDecl>> groups = ParseGroupDecls(GraphAttr(graph, "groups"));
  if (!groups.ok()) return absl::InvalidArgumentError(absl::StrCat("graph attribute 'groups': ", groups.status().message()));
  return groups;
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
