#include "plan/split_by_rank.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "graph/import_export.h"
#include "graph/placement.h"
#include "graph/process_groups.h"
#include "ops/collective_schedule.h"
#include "ops/model_loader.h"
#include "ops/op_registry.h"
#include "ops/placement_propagation.h"

namespace nereid {
namespace {

// A Send's Recv in the whole plan (null: none).
const Node* RecvOf(const Node& send) {
  for (const Edge* e : send.out_edges()) {
    if (e->dst->op() == "Recv") return e->dst;
  }
  return nullptr;
}

// Coded computing's ends (ops/coded_ops.cc): every CodedSend to rank p on a
// channel meets p's CodedGather of that channel, which lists the sender among
// its peers and has the same code and departures; every peer a CodedGather
// lists runs a CodedSend to it on that channel.
absl::Status CheckCodedEnds(const std::vector<std::unique_ptr<Graph>>& parts) {
  const int world = static_cast<int>(parts.size());
  auto gather_on = [&](int rank, int64_t channel) -> const Node* {
    if (rank < 0 || rank >= world) return nullptr;
    for (const Node* n : parts[rank]->nodes()) {
      if (n->op() == "CodedGather" && NodeAttrInt(*n, "channel", -1) == channel) return n;
    }
    return nullptr;
  };
  for (int r = 0; r < world; ++r) {
    for (const Node* send : parts[r]->nodes()) {
      if (send->op() != "CodedSend") continue;
      const int p = static_cast<int>(NodeAttrInt(*send, "peer", -1));
      const int64_t channel = NodeAttrInt(*send, "channel", -1);
      const Node* gather = gather_on(p, channel);
      if (gather == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("rank ", r, "'s CodedSend '", send->name(), "' (channel ",
                                                          channel, ") has no CodedGather on rank ", p));
      }
      const auto& peers = gather->def().attr().at("peers").list().i();
      if (std::find(peers.begin(), peers.end(), r) == peers.end()) {
        return absl::FailedPreconditionError(absl::StrCat("rank ", p, "'s CodedGather '", gather->name(),
                                                          "' does not list rank ", r, ", whose CodedSend '",
                                                          send->name(), "' sends to it"));
      }
      for (const char* attr : {"scheme", "n", "k", "degree", "seed", "departures"}) {
        const auto& attrs_s = send->def().attr();
        const auto& attrs_g = gather->def().attr();
        const std::string mine = attrs_s.contains(attr) ? attrs_s.at(attr).ShortDebugString() : "";
        const std::string theirs = attrs_g.contains(attr) ? attrs_g.at(attr).ShortDebugString() : "";
        if (mine != theirs) {
          return absl::FailedPreconditionError(absl::StrCat("rank ", r, "'s CodedSend '", send->name(), "' has ", attr,
                                                            " {", mine, "} but rank ", p, "'s CodedGather '",
                                                            gather->name(), "' has {", theirs, "}"));
        }
      }
    }
    for (const Node* gather : parts[r]->nodes()) {
      if (gather->op() != "CodedGather") continue;
      const int64_t channel = NodeAttrInt(*gather, "channel", -1);
      for (int64_t q : gather->def().attr().at("peers").list().i()) {
        bool found = false;
        for (const Node* n : q >= 0 && q < world ? parts[q]->nodes() : std::vector<Node*>{}) {
          found |= n->op() == "CodedSend" && NodeAttrInt(*n, "peer", -1) == r && NodeAttrInt(*n, "channel", -1) == channel;
        }
        if (!found) {
          return absl::FailedPreconditionError(absl::StrCat("rank ", r, "'s CodedGather '", gather->name(),
                                                            "' waits for rank ", q, ", which has no CodedSend to it on "
                                                            "channel ", channel));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ProjectForRank(const Graph& graph, int rank, int world) {
  ASSIGN_OR_RETURN(std::vector<GroupDecl> groups, DeclaredGroups(graph));
  ASSIGN_OR_RETURN(auto at, EffectivePlacement(graph));
  absl::flat_hash_set<std::string> kept;
  for (const Node* n : graph.nodes()) {
    absl::StatusOr<bool> runs = RunsOn(at[n], rank, world, groups);
    if (!runs.ok()) return NodeError(graph, *n, runs.status().message());
    if (*runs) kept.insert(n->name());
  }
  GraphDef whole = ExportGraph(graph);
  GraphDef part = whole;
  part.clear_node();
  for (const NodeDef& def : whole.node()) {
    if (!kept.contains(def.name())) continue;
    const Node& node = *graph.FindNode(def.name());
    NodeDef* out = part.add_node();
    *out = def;
    if (node.op() == "Send") {
      const Node* recv = RecvOf(node);
      if (recv != nullptr && !kept.contains(recv->name())) {
        (*out->mutable_attr())["peer"] = IntAttr(*PlacementOf(*recv).worker);
      }
    }
    if (node.op() == "Recv" && node.num_inputs() == 1 && !kept.contains(node.input_edge(0)->src->name())) {
      const Node& send = *node.input_edge(0)->src;
      out->clear_input();
      (*out->mutable_attr())["peer"] = IntAttr(*PlacementOf(send).worker);
      (*out->mutable_attr())["shape"] = ShapeAttr(send.outputs()[0].shape.dims());
      continue;
    }
    for (const std::string& input : def.input()) {
      const std::string src = std::string(absl::StripPrefix(input.substr(0, input.find(':')), "^"));
      if (!kept.contains(src)) {
        return NodeError(graph, node, absl::StrCat("runs on rank ", rank, " but reads '", src,
                                                   "', which does not: move the value with Send and Recv"));
      }
    }
  }
  for (LoopScope& loop : *part.mutable_loop()) {
    for (auto* names : {loop.mutable_ingress(), loop.mutable_feedback(), loop.mutable_egress()}) {
      google::protobuf::RepeatedPtrField<std::string> left;
      for (const std::string& name : *names) {
        if (kept.contains(name)) *left.Add() = name;
      }
      names->Swap(&left);
    }
  }
  GraphFile file;
  file.path = absl::StrCat("rank ", rank, "'s part of the plan");
  file.def = std::move(part);
  return LoadModel(file);
}

namespace {

// What a collective moves, to compare members: op and input shape.
// A collective's side counts: a group split across a device and the host
// (SplitAcrossSides) must split alike on every member.
std::string CollectiveSignature(const Node& n) {
  return absl::StrCat(n.op(), " of ", n.num_inputs() > 0 ? n.input_edge(0)->src->outputs()[0].shape.ToString() : "",
                      OnDevice(n) ? " on the device" : "");
}

// The ranks agree on the plan's records, loss and logits, and on its world.
absl::Status CheckRecordsAgree(const std::vector<std::unique_ptr<Graph>>& parts) {
  const int world = static_cast<int>(parts.size());
  for (int r = 1; r < world; ++r) {
    if (parts[r]->header().records().SerializeAsString() != parts[0]->header().records().SerializeAsString()) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, "'s graph records the plan (workers, groups, "
                                                        "strategies) differently from rank 0's"));
    }
    for (const char* attr : {"loss", "logits"}) {
      if (GraphAttr(*parts[r], attr) != GraphAttr(*parts[0], attr)) {
        return absl::FailedPreconditionError(absl::StrCat("rank ", r, "'s graph declares ", attr, " differently from rank 0's"));
      }
    }
  }
  const int recorded = parts[0]->header().records().workers();
  if (recorded > 0 && recorded != world) {
    return absl::FailedPreconditionError(
        absl::StrCat("the graphs are planned for ", recorded, " workers but the plan has ", world));
  }
  return absl::OkStatus();
}

// No two cut ends of a rank share a peer and channel (a message tag).
absl::Status CheckCutEndsDistinct(const std::vector<std::unique_ptr<Graph>>& parts) {
  const int world = static_cast<int>(parts.size());
  for (int r = 0; r < world; ++r) {
    absl::flat_hash_map<std::tuple<std::string, int64_t, int64_t>, const Node*> ends;
    for (const Node* n : parts[r]->nodes()) {
      if (!IsCutEnd(*n)) continue;
      auto [it, fresh] = ends.try_emplace({n->op(), NodeAttrInt(*n, "peer", -1), NodeAttrInt(*n, "channel", -1)}, n);
      if (!fresh) {
        return absl::FailedPreconditionError(absl::StrCat("rank ", r, ": ", n->op(), "s '", it->second->name(), "' and '",
                                                          n->name(), "' share peer and channel ", std::get<2>(it->first),
                                                          ": their messages would be confused"));
      }
    }
  }
  return absl::OkStatus();
}

// Every cut Send of rank r meets its peer's Recv: same channel, shape, dtype.
absl::Status CheckSendsMeetRecvs(const std::vector<std::unique_ptr<Graph>>& parts, int r) {
  const int world = static_cast<int>(parts.size());
  for (const Node* send : parts[r]->nodes()) {
    if (send->op() != "Send" || !IsCutEnd(*send)) continue;
    const int p = static_cast<int>(NodeAttrInt(*send, "peer", -1));
    const int64_t channel = NodeAttrInt(*send, "channel", -1);
    if (p >= world) return absl::FailedPreconditionError(absl::StrCat("rank ", r, ": Send '", send->name(), "' sends to rank ", p, " of ", world));
    const Node* match = nullptr;
    for (const Node* recv : parts[p]->nodes()) {
      if (recv->op() == "Recv" && NodeAttrInt(*recv, "peer", -1) == r && NodeAttrInt(*recv, "channel", -1) == channel) {
        match = recv;
      }
    }
    if (match == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, "'s Send '", send->name(), "' (channel ", channel,
                                                        ") has no Recv on rank ", p, ": rank ", r, " would wait forever"));
    }
    const ShapeAndType& sent = send->outputs()[0];
    const ShapeAndType& expected = match->outputs()[0];
    if (sent.shape.ToString() != expected.shape.ToString() || sent.dtype != expected.dtype) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, "'s Send '", send->name(), "' sends ", DataTypeName(sent.dtype), sent.shape.ToString(),
          " but rank ", p, "'s Recv '", match->name(), "' expects ", DataTypeName(expected.dtype),
          expected.shape.ToString()));
    }
  }
  return absl::OkStatus();
}

// Every cut Recv of rank r has a Send to r on its peer, on the same channel.
absl::Status CheckRecvsMeetSends(const std::vector<std::unique_ptr<Graph>>& parts, int r) {
  const int world = static_cast<int>(parts.size());
  for (const Node* recv : parts[r]->nodes()) {
    if (recv->op() != "Recv" || !IsCutEnd(*recv)) continue;
    const int p = static_cast<int>(NodeAttrInt(*recv, "peer", -1));
    bool found = false;
    for (const Node* send : p < world ? parts[p]->nodes() : std::vector<Node*>{}) {
      found |= send->op() == "Send" && NodeAttrInt(*send, "peer", -1) == r &&
               NodeAttrInt(*send, "channel", -1) == NodeAttrInt(*recv, "channel", -1);
    }
    if (!found) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, "'s Recv '", recv->name(), "' has no Send on rank ",
                                                        p, ": rank ", r, " would wait forever"));
    }
  }
  return absl::OkStatus();
}

// Every member of an instance of `g` issues the same collectives in order.
absl::Status CheckGroupCollectivesAgree(const std::vector<std::unique_ptr<Graph>>& parts, const GroupDecl& g) {
  const int world = static_cast<int>(parts.size());
  absl::flat_hash_map<std::string, std::pair<int, std::map<int64_t, std::string>>> first_member;  // by instance
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<GroupMembership> m = MembershipOf(g, r, world);
    if (absl::IsNotFound(m.status())) continue;
    RETURN_IF_ERROR(m.status());
    std::map<int64_t, std::string> issued;
    for (const Node* n : parts[r]->nodes()) {
      if (IsCollective(*n) && CollectiveGroup(*n) == g.name) {
        issued[NodeAttrInt(*n, "bucket", -1)] = absl::StrCat("'", n->name(), "' (", CollectiveSignature(*n), ")");
      }
    }
    auto [it, inserted] = first_member.try_emplace(m->instance, r, issued);
    if (inserted || it->second.second == issued) continue;
    const auto& [other, theirs] = it->second;
    for (int64_t b = 0;; ++b) {
      const auto mine = issued.find(b);
      const auto their = theirs.find(b);
      const std::string a = mine == issued.end() ? "nothing" : mine->second;
      const std::string o = their == theirs.end() ? "nothing" : their->second;
      if (a == o) continue;
      return absl::FailedPreconditionError(absl::StrCat("group '", m->instance, "': collective ", b, " is ", o,
                                                        " on rank ", other, " but ", a, " on rank ", r,
                                                        ": the members would deadlock or pair different data"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Graph>>> SplitPlanAcrossRanks(const Graph& graph, int world) {
  std::vector<std::unique_ptr<Graph>> parts;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<std::unique_ptr<Graph>> part = ProjectForRank(graph, r, world);
    if (!part.ok()) {
      return absl::Status(part.status().code(), absl::StrCat("rank ", r, ": ", part.status().message()));
    }
    parts.push_back(*std::move(part));
  }
  RETURN_IF_ERROR(CheckPartsAcrossRanks(parts));
  return parts;
}

absl::Status CheckPartsAcrossRanks(const std::vector<std::unique_ptr<Graph>>& parts) {
  const int world = static_cast<int>(parts.size());
  if (world == 0) return absl::InvalidArgumentError("a plan needs at least one rank's graph");
  RETURN_IF_ERROR(CheckRecordsAgree(parts));
  // Every cut pair: the Send on rank r to p has the Recv on p from r, with the
  // same channel and shape; no two ends of a rank share a peer and channel.
  RETURN_IF_ERROR(CheckCutEndsDistinct(parts));
  for (int r = 0; r < world; ++r) {
    RETURN_IF_ERROR(CheckSendsMeetRecvs(parts, r));
    RETURN_IF_ERROR(CheckRecvsMeetSends(parts, r));
  }
  RETURN_IF_ERROR(CheckCodedEnds(parts));
  // Every group's members issue the same collectives in the same order.
  ASSIGN_OR_RETURN(std::vector<GroupDecl> groups, DeclaredGroups(*parts[0]));
  for (const GroupDecl& g : groups) RETURN_IF_ERROR(CheckGroupCollectivesAgree(parts, g));
  // Transfers placed on a device are issued in each rank's order.
  std::vector<const Graph*> graphs;
  for (const auto& part : parts) graphs.push_back(part.get());
  return CheckDeviceTransferOrder(graphs);
}

}  // namespace nereid
