#include "comm/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/collective_checks.h"
#include "comm/rendezvous.h"
#include "comm/ring_collectives.h"
#include "comm/shm_communicator.h"
#include "core/status_macros.h"

namespace nereid {
namespace {

void Copy(absl::Span<const float> from, float* to) {
  if (!from.empty()) std::memcpy(to, from.data(), from.size() * sizeof(float));
}

}  // namespace

HierarchicalCommunicator::HierarchicalCommunicator(int rank, HostLayout layout, std::unique_ptr<Communicator> local,
                                                   std::unique_ptr<Communicator> leaders,
                                                   std::unique_ptr<Communicator> everyone)
    : rank_(rank),
      layout_(std::move(layout)),
      local_(std::move(local)),
      leaders_(std::move(leaders)),
      everyone_(std::move(everyone)) {}

std::string HierarchicalCommunicator::backend() const {
  std::string parts;
  if (local_) absl::StrAppend(&parts, local_->backend(), " within hosts");
  if (leaders_ || everyone_) {
    absl::StrAppend(&parts, parts.empty() ? "" : ", ", (leaders_ ? leaders_ : everyone_)->backend(), " across");
  }
  return absl::StrCat("hierarchical(", parts.empty() ? "one rank" : parts, "; ", layout_.Describe(), ")");
}

std::string HierarchicalCommunicator::Where(const char* op, uint32_t tag) const {
  return absl::StrCat("hierarchical ", op, " (tag ", tag, ", rank ", rank_, " of ", world(), ")");
}

absl::StatusOr<CollectiveOptions> HierarchicalCommunicator::Within(const CollectiveOptions& options,
                                                                   absl::Time deadline,
                                                                   const std::string& where) const {
  CollectiveOptions within = options;
  within.timeout = deadline - absl::Now();
  if (within.timeout <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError(
        absl::StrCat(where, ": the timeout (", absl::FormatDuration(options.timeout), ") ran out between stages"));
  }
  return within;
}

absl::Status HierarchicalCommunicator::Staged(absl::Status status, Stage stage, const std::string& where) const {
  if (status.ok()) return status;
  std::string group;
  switch (stage) {
    case Stage::kLocal:
      group = absl::StrCat("within host ", layout_.host_of[rank_], " (world ranks ",
                           absl::StrJoin(layout_.hosts[layout_.host_of[rank_]], ","), ")");
      break;
    case Stage::kLeaders:
      group = absl::StrCat("across hosts (leaders: world ranks ", absl::StrJoin(layout_.Leaders(), ","), ")");
      break;
    case Stage::kEveryone:
      group = "between hosts (group ranks are world ranks)";
      break;
  }
  return absl::Status(status.code(), absl::StrCat(where, ", ", group, ": ", status.message()));
}

Communicator& HierarchicalCommunicator::PeerGroup(int peer, int* group_rank) const {
  if (same_host(peer)) {
    *group_rank = layout_.local_index[peer];
    return *local_;
  }
  *group_rank = peer;  // the every-rank group, or the leaders when they are every rank
  return everyone_ ? *everyone_ : *leaders_;
}

absl::Status HierarchicalCommunicator::AllReduce(absl::Span<float> data, ReduceOp op,
                                                 const CollectiveOptions& options) {
  const std::string where = Where("allreduce", options.tag);
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  const absl::Time deadline = absl::Now() + options.timeout;
  if (world() == 1) return absl::OkStatus();
  if (one_host()) return Staged(local_->AllReduce(data, op, options), Stage::kLocal, where);
  if (one_rank_per_host()) return Staged(leaders_->AllReduce(data, op, options), Stage::kLeaders, where);
  if (local_) {
    ASSIGN_OR_RETURN(CollectiveOptions within, Within(options, deadline, where));
    within.wire = WireType::kFloat32;  // shared memory: no bytes to save
    RETURN_IF_ERROR(Staged(local_->AllReduce(data, ReduceOp::kSum, within), Stage::kLocal, where));
  }
  if (leaders_) {
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(Staged(leaders_->AllReduce(data, ReduceOp::kSum, within), Stage::kLeaders, where));
    if (op == ReduceOp::kAvg) ScaleToAverage(data, world());
  }
  if (local_) {
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(Staged(local_->Broadcast(data, 0, within), Stage::kLocal, where));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                                     const CollectiveOptions& options) {
  const std::string where = Where("reduce-scatter", options.tag);
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  RETURN_IF_ERROR(CheckReduceScatterSizes(where, data.size(), out.size(), world()));
  if (world() == 1) {
    Copy(data, out.data());
    return absl::OkStatus();
  }
  if (one_host()) return Staged(local_->ReduceScatter(data, out, op, options), Stage::kLocal, where);
  if (one_rank_per_host()) return Staged(leaders_->ReduceScatter(data, out, op, options), Stage::kLeaders, where);
  std::vector<float> all(data.begin(), data.end());
  CollectiveOptions exact = options;
  exact.wire = WireType::kFloat32;  // the wire format is AllReduce's option only
  RETURN_IF_ERROR(AllReduce(absl::MakeSpan(all), op, exact));
  Copy(absl::MakeConstSpan(all).subspan(static_cast<size_t>(rank_) * out.size(), out.size()), out.data());
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::AllGather(absl::Span<const float> in, absl::Span<float> out,
                                                 const CollectiveOptions& options) {
  const std::string where = Where("allgather", options.tag);
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  RETURN_IF_ERROR(CheckAllGatherSizes(where, in.size(), out.size(), world()));
  const absl::Time deadline = absl::Now() + options.timeout;
  if (world() == 1) {
    Copy(in, out.data());
    return absl::OkStatus();
  }
  if (one_host()) return Staged(local_->AllGather(in, out, options), Stage::kLocal, where);
  if (one_rank_per_host()) return Staged(leaders_->AllGather(in, out, options), Stage::kLeaders, where);
  const size_t n = in.size();
  size_t widest = 0;
  for (const std::vector<int>& ranks : layout_.hosts) widest = std::max(widest, ranks.size());
  const std::vector<int>& here = layout_.hosts[layout_.host_of[rank_]];
  // This host's inputs in local order, padded to the widest host's block.
  std::vector<float> block(widest * n, 0.0f);
  if (local_) {
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(
        Staged(local_->AllGather(in, absl::MakeSpan(block.data(), here.size() * n), within), Stage::kLocal, where));
  } else {
    Copy(in, block.data());
  }
  if (leaders_) {
    std::vector<float> blocks(layout_.hosts.size() * block.size());
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(Staged(leaders_->AllGather(block, absl::MakeSpan(blocks), within), Stage::kLeaders, where));
    for (size_t h = 0; h < layout_.hosts.size(); ++h) {
      for (size_t i = 0; i < layout_.hosts[h].size(); ++i) {
        Copy(absl::MakeConstSpan(blocks).subspan((h * widest + i) * n, n),
             out.data() + static_cast<size_t>(layout_.hosts[h][i]) * n);
      }
    }
  }
  if (local_) {
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(Staged(local_->Broadcast(out, 0, within), Stage::kLocal, where));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) {
  const std::string where = Where("broadcast", options.tag);
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  RETURN_IF_ERROR(CheckRoot(where, root, world()));
  const absl::Time deadline = absl::Now() + options.timeout;
  if (world() == 1) return absl::OkStatus();
  if (one_host()) return Staged(local_->Broadcast(data, root, options), Stage::kLocal, where);
  if (one_rank_per_host()) return Staged(leaders_->Broadcast(data, root, options), Stage::kLeaders, where);
  const int root_host = layout_.host_of[root];
  const bool root_here = layout_.host_of[rank_] == root_host;
  if (root_here && local_) {
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(Staged(local_->Broadcast(data, layout_.local_index[root], within), Stage::kLocal, where));
  }
  if (leaders_) {
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(Staged(leaders_->Broadcast(data, root_host, within), Stage::kLeaders, where));
  }
  if (!root_here && local_) {
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(Staged(local_->Broadcast(data, 0, within), Stage::kLocal, where));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) {
  const std::string where = Where("send", options.tag);
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  RETURN_IF_ERROR(CheckPeer(where, peer, rank_, world()));
  int group_rank = 0;
  Communicator& group = PeerGroup(peer, &group_rank);
  return Staged(group.Send(data, group_rank, options), same_host(peer) ? Stage::kLocal : Stage::kEveryone, where);
}

absl::Status HierarchicalCommunicator::Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) {
  const std::string where = Where("recv", options.tag);
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  RETURN_IF_ERROR(CheckPeer(where, peer, rank_, world()));
  int group_rank = 0;
  Communicator& group = PeerGroup(peer, &group_rank);
  return Staged(group.Recv(data, group_rank, options), same_host(peer) ? Stage::kLocal : Stage::kEveryone, where);
}

absl::Status HierarchicalCommunicator::SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                                const CollectiveOptions& options) {
  const std::string where = Where("sendrecv", options.tag);
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  RETURN_IF_ERROR(CheckSendRecvPeers(where, to, from, rank_, world()));
  if (to == rank_) {
    if (send.size() != recv.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a copy to this rank needs equal sizes (", send.size(), " vs ", recv.size(), ")"));
    }
    Copy(send, recv.data());
    return absl::OkStatus();
  }
  int to_rank = 0, from_rank = 0;
  Communicator& to_group = PeerGroup(to, &to_rank);
  Communicator& from_group = PeerGroup(from, &from_rank);
  const Stage to_stage = same_host(to) ? Stage::kLocal : Stage::kEveryone;
  const Stage from_stage = same_host(from) ? Stage::kLocal : Stage::kEveryone;
  if (&to_group == &from_group) {
    return Staged(to_group.SendRecv(send, to_rank, recv, from_rank, options), to_stage, where);
  }
  // One peer through shared memory, the other through TCP: both transfers
  // must be posted before either is waited for (see Communicator::SendRecv).
  absl::Status sent;
  std::thread sender([&] { sent = to_group.Send(send, to_rank, options); });
  const absl::Status received = from_group.Recv(recv, from_rank, options);
  sender.join();
  RETURN_IF_ERROR(Staged(sent, to_stage, where));
  return Staged(received, from_stage, where);
}

absl::Status HierarchicalCommunicator::Barrier(const CollectiveOptions& options) {
  const std::string where = Where("barrier", options.tag);
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  const absl::Time deadline = absl::Now() + options.timeout;
  for (Communicator* stage : {local_.get(), leaders_.get(), local_.get()}) {
    if (stage == nullptr) continue;
    ASSIGN_OR_RETURN(const CollectiveOptions within, Within(options, deadline, where));
    RETURN_IF_ERROR(Staged(stage->Barrier(within), stage == local_.get() ? Stage::kLocal : Stage::kLeaders, where));
    if (one_host() || one_rank_per_host()) break;  // one stage is the whole world
  }
  return absl::OkStatus();
}

TrafficCounters HierarchicalCommunicator::traffic() const {
  TrafficCounters total;
  for (const Communicator* c : {local_.get(), leaders_.get(), everyone_.get()}) {
    if (c == nullptr) continue;
    const TrafficCounters t = c->traffic();
    total.bytes_sent += t.bytes_sent;
    total.bytes_received += t.bytes_received;
    total.calls += t.calls;
  }
  return total;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectHierarchical(const CommunicatorSpec& spec) {
  const std::string where = absl::StrCat("hierarchical connect (rank ", spec.rank, " of ", spec.world, ")");
  auto here = [&](const absl::Status& status, const std::string& stage) {
    return absl::Status(status.code(), absl::StrCat(where, ", ", stage, ": ", status.message()));
  };
  const absl::Time deadline = absl::Now() + spec.connect_timeout;
  absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
      OpenRendezvous(spec.rendezvous, spec.rank, spec.world, spec.identity, spec.connect_timeout);
  if (!store.ok()) return here(store.status(), "rendezvous");
  if (absl::Status s =
          (*store)->Set(absl::StrCat("hier/host/", spec.rank), HostKey(spec.env ? spec.env : ProcessEnv()));
      !s.ok()) {
    return here(s, "publishing the host key");
  }
  std::vector<std::string> keys;
  for (int r = 0; r < spec.world; ++r) {
    absl::StatusOr<std::string> key = (*store)->WaitAndGet(absl::StrCat("hier/host/", r), deadline - absl::Now());
    if (!key.ok()) return here(key.status(), absl::StrCat("rank ", r, "'s host key"));
    keys.push_back(*std::move(key));
  }
  HostLayout layout = HostLayout::FromKeys(keys);
  const int host = layout.host_of[spec.rank];
  const std::vector<int>& members = layout.hosts[host];
  const bool leader = members.front() == spec.rank;
  CommunicatorSpec gloo = spec;
  gloo.backend = "gloo";
  // Every stage within the one connect_timeout.
  auto remaining = [&](CommunicatorSpec s) {
    s.connect_timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    return s;
  };

  std::unique_ptr<Communicator> local, leaders, everyone;
  if (members.size() > 1) {
    // The host's leader decides for the host, so its ranks cannot disagree.
    const std::string key = absl::StrCat("hier/local/", host);
    std::string backend;
    if (leader) {
      backend = ShmFits(static_cast<int>(members.size())).ok() ? "shm" : "gloo";
      if (absl::Status s = (*store)->Set(key, backend); !s.ok()) return here(s, "publishing the host's transport");
    } else {
      absl::StatusOr<std::string> got = (*store)->WaitAndGet(key, deadline - absl::Now());
      if (!got.ok()) return here(got.status(), absl::StrCat("host ", host, "'s transport"));
      backend = *std::move(got);
    }
    CommunicatorSpec within = spec;
    within.backend = backend;
    within = remaining(within);
    absl::StatusOr<std::unique_ptr<Communicator>> c =
        ConnectBackend(GroupSpec(within, absl::StrCat("host", host), members, layout.local_index[spec.rank]));
    if (!c.ok())
      return here(c.status(), absl::StrCat("host ", host, " (world ranks ", absl::StrJoin(members, ","), ")"));
    local = *std::move(c);
  }
  if (layout.hosts.size() > 1 && leader) {
    absl::StatusOr<std::unique_ptr<Communicator>> c =
        ConnectBackend(GroupSpec(remaining(gloo), "leaders", layout.Leaders(), host));
    if (!c.ok()) return here(c.status(), "the hosts' leaders");
    leaders = *std::move(c);
  }
  if (layout.hosts.size() > 1 && layout.hosts.size() < static_cast<size_t>(spec.world)) {
    std::vector<int> all(spec.world);
    for (int r = 0; r < spec.world; ++r) all[r] = r;
    absl::StatusOr<std::unique_ptr<Communicator>> c =
        ConnectBackend(GroupSpec(remaining(gloo), "everyone", all, spec.rank));
    if (!c.ok()) return here(c.status(), "every rank");
    everyone = *std::move(c);
  }
  auto connected = std::make_unique<HierarchicalCommunicator>(spec.rank, std::move(layout), std::move(local),
                                                              std::move(leaders), std::move(everyone));
  // No rank returns before every rank has connected every group: a rank that
  // made no transfer could otherwise leave, closing sockets a slower rank's
  // connect still uses.
  CollectiveOptions settle;
  settle.timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  if (absl::Status s = connected->Barrier(settle); !s.ok()) return here(s, "the closing barrier");
  return std::unique_ptr<Communicator>(std::move(connected));
}

}  // namespace nereid
