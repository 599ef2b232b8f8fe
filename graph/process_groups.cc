#include "graph/process_groups.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace nereid {

absl::StatusOr<std::vector<GroupDecl>> ParseGroupDecls(const std::string& text) {
  std::vector<GroupDecl> groups;
  for (absl::string_view entry : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    std::vector<std::string> name_layout = absl::StrSplit(entry, '=');
    std::vector<std::string> layout_size =
        name_layout.size() == 2 ? absl::StrSplit(name_layout[1], ':') : std::vector<std::string>{};
    GroupDecl g;
    bool ok = name_layout.size() == 2 && !name_layout[0].empty() && layout_size.size() == 2 &&
              absl::SimpleAtoi(layout_size[1], &g.size) && g.size >= 1;
    if (ok && layout_size[0] == "blocks") {
      g.layout = GroupLayout::kBlocks;
    } else if (ok && layout_size[0] == "strided") {
      g.layout = GroupLayout::kStrided;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("group declaration '", entry,
                                                     "' is not NAME=blocks:SIZE or NAME=strided:SIZE"));
    }
    g.name = name_layout[0];
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
    absl::StrAppend(&text, text.empty() ? "" : ";", g.name, "=",
                    g.layout == GroupLayout::kBlocks ? "blocks:" : "strided:", g.size);
  }
  return text;
}

bool HoldsPerRankValue(const Node& parameter) {
  return NodeAttrBool(parameter, "per_rank", false) || !NodeAttrString(parameter, "shard_group").empty();
}

int GroupSize(const GroupDecl& group, int world) {
  return group.layout == GroupLayout::kBlocks ? group.size : world / group.size;
}

absl::StatusOr<GroupMembership> MembershipOf(const GroupDecl& group, int rank, int world) {
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
