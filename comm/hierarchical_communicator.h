#ifndef NEREID_COMM_HIERARCHICAL_COMMUNICATOR_H_
#define NEREID_COMM_HIERARCHICAL_COMMUNICATOR_H_

// The hierarchical backend: ranks of one host talk through shared memory,
// hosts through Gloo, as NCCL splits its rings at the node boundary. At
// connect time the ranks exchange host keys (host_layout.h) and form up to
// three groups of the run: this host's ranks ("shm", or "gloo" when /dev/shm
// has no room), the hosts' first ranks, the leaders ("gloo"), and, with more
// than one host, every rank ("gloo", for transfers between hosts).
//
// Algorithms, with H hosts:
//   AllReduce      H = 1: the host's allreduce. Every host alone on one rank:
//                  Gloo's. Otherwise: sum within the host (float32), the
//                  leaders' allreduce across hosts (the call's wire format:
//                  16-bit formats round only what crosses hosts), the leader
//                  averages if asked, then broadcasts within its host. Only
//                  the leaders cross hosts: 2(H-1)/H of the buffer each way
//                  per host, against the flat ring's 2(n-1)/n per rank
//                  boundary. Every rank ends bitwise equal.
//   ReduceScatter  the allreduce above into a scratch buffer, then this
//                  rank's chunk.
//   AllGather      gather within the host, leaders gather across hosts (each
//                  host's block padded to the largest host's), the leader
//                  orders it by world rank and broadcasts within its host.
//   Broadcast      within the root's host, across the leaders, within the
//                  other hosts.
//   Send / Recv    within a host through shared memory, else through the
//                  every-rank group; a SendRecv whose peers are one local,
//                  one remote sends from a second thread.
//   Barrier        within hosts, across leaders, within hosts.
// Each call's timeout bounds the whole call, not each stage (and must be
// positive: InvalidArgument otherwise, as on every backend). Errors name the
// stage and the world ranks of its group. Thread-safety and failure
// behaviour are the inner communicators' (gloo_communicator.h), with one
// restriction: calls that run at once need distinct tags whatever their
// operations (AllReduce, AllGather and Broadcast all end in a broadcast
// within the host under the call's tag). When a leader's stage across hosts
// fails, its host's other ranks learn it at their timeout ("within host").
// traffic() sums the stages: shared-memory bytes count as Gloo's would.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/communicator_factory.h"
#include "comm/host_layout.h"

namespace nereid {

class HierarchicalCommunicator final : public Communicator {
 public:
  // `local`: this host's ranks (null when this rank is alone on its host);
  // `leaders`: the hosts' first ranks (null unless this rank leads a host and
  // there are several hosts); `everyone`: all ranks (null with one host).
  HierarchicalCommunicator(int rank, HostLayout layout, std::unique_ptr<Communicator> local,
                           std::unique_ptr<Communicator> leaders, std::unique_ptr<Communicator> everyone);

  int rank() const override { return rank_; }
  int world() const override { return static_cast<int>(layout_.host_of.size()); }
  std::string backend() const override;

  absl::Status AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) override;
  absl::Status ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                             const CollectiveOptions& options) override;
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out, const CollectiveOptions& options) override;
  absl::Status Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) override;
  absl::Status Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) override;
  absl::Status Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) override;
  absl::Status SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                        const CollectiveOptions& options) override;
  absl::Status Barrier(const CollectiveOptions& options) override;
  TrafficCounters traffic() const override;

 private:
  // Which group carries a stage, for the error message.
  enum class Stage { kLocal, kLeaders, kEveryone };

  std::string Where(const char* op, uint32_t tag) const;
  // `options` with the time left before `deadline`; DeadlineExceeded if none.
  absl::StatusOr<CollectiveOptions> Within(const CollectiveOptions& options, absl::Time deadline,
                                           const std::string& where) const;
  // `status` with the call and the stage's group prefixed.
  absl::Status Staged(absl::Status status, Stage stage, const std::string& where) const;
  bool one_host() const { return layout_.hosts.size() == 1; }
  // Every host holds one rank: the leaders' group is the world, in order.
  bool one_rank_per_host() const { return layout_.hosts.size() == layout_.host_of.size(); }
  bool same_host(int peer) const { return layout_.host_of[peer] == layout_.host_of[rank_]; }
  // The group and its rank for a transfer with `peer`.
  Communicator& PeerGroup(int peer, int* group_rank) const;

  int rank_;
  HostLayout layout_;
  std::unique_ptr<Communicator> local_, leaders_, everyone_;
};

// Connects `spec.rank` of `spec.world` as above (the "hierarchical" backend):
// the identity check, the host-key exchange, the groups, then a barrier, all
// within spec.connect_timeout.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectHierarchical(const CommunicatorSpec& spec);

}  // namespace nereid

#endif  // NEREID_COMM_HIERARCHICAL_COMMUNICATOR_H_
