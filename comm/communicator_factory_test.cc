// The communicator factory and process groups. The registry, the fault
// wrapper and the derived group spec run against a fake backend registered
// here; groups run over Gloo on loopback TCP, ranks as threads of one
// process meeting in a FileStore under the test's temporary directory.

#include "comm/communicator_factory.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "comm/fault_injection.h"
#include "comm/self_delivery.h"
#include "comm/gloo_test_world.h"
#include "comm/launch_env.h"
#include "comm/rendezvous_spec.h"
#include "comm/worker_identity.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::AllOk;
using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;
using ::testing::HasSubstr;

constexpr char kFake[] = "fake-for-test";

// Records the spec it was made from; every call succeeds without moving data.
class FakeCommunicator final : public Communicator {
 public:
  explicit FakeCommunicator(const CommunicatorSpec& spec) : spec_(spec) {}
  int rank() const override { return spec_.rank; }
  int world() const override { return spec_.world; }
  std::string backend() const override { return "fake"; }
  absl::Status AllReduce(absl::Span<float>, ReduceOp, const CollectiveOptions&) override { return absl::OkStatus(); }
  absl::Status ReduceScatter(absl::Span<const float>, absl::Span<float>, ReduceOp, const CollectiveOptions&) override {
    return absl::OkStatus();
  }
  absl::Status AllGather(absl::Span<const float>, absl::Span<float>, const CollectiveOptions&) override {
    return absl::OkStatus();
  }
  absl::Status Broadcast(absl::Span<float>, int, const CollectiveOptions&) override { return absl::OkStatus(); }
  absl::Status Send(absl::Span<const float>, int, const CollectiveOptions&) override { return absl::OkStatus(); }
  absl::Status Recv(absl::Span<float>, int, const CollectiveOptions&) override { return absl::OkStatus(); }
  absl::Status Barrier(const CollectiveOptions&) override { return absl::OkStatus(); }
  TrafficCounters traffic() const override { return {}; }

  const CommunicatorSpec& spec() const { return spec_; }

 private:
  const CommunicatorSpec spec_;
};

absl::StatusOr<std::unique_ptr<Communicator>> ConnectFake(const CommunicatorSpec& spec) {
  return std::unique_ptr<Communicator>(std::make_unique<FakeCommunicator>(spec));
}

NEREID_REGISTER_COMMUNICATOR(kFake, ConnectFake);

EnvGetter Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

CommunicatorSpec Spec(const std::string& backend, const RendezvousSpec& rendezvous, int rank, int world,
                      absl::Duration timeout = absl::Seconds(30)) {
  CommunicatorSpec spec;
  spec.backend = backend;
  spec.rendezvous = rendezvous;
  spec.rank = rank;
  spec.world = world;
  spec.identity = WorkerIdentity{"test", "plan", world};
  spec.connect_timeout = timeout;
  spec.env = Env({});  // the process's NEREID_FAULTS must not leak in
  return spec;
}

// The fake under a possible fault wrapper.
const FakeCommunicator& Fake(Communicator& c) {
  if (auto* fault = dynamic_cast<FaultInjectingCommunicator*>(&c)) return Fake(fault->inner());
  if (auto* self = dynamic_cast<SelfDeliveringCommunicator*>(&c)) return Fake(self->inner());
  return dynamic_cast<const FakeCommunicator&>(c);
}

CollectiveOptions Options(uint32_t tag) {
  CollectiveOptions o;
  o.tag = tag;
  o.timeout = absl::Seconds(30);
  return o;
}

// Allreduces base * (world_rank + 1) + i over `comm` and checks every element
// equals `want_base` + comm.world() * i.
absl::Status AllReduceAndCheck(Communicator& comm, int world_rank, float base, float want_base,
                               const std::string& what) {
  constexpr int kElements = 1000;
  std::vector<float> data(kElements);
  for (int i = 0; i < kElements; ++i) data[i] = base * static_cast<float>(world_rank + 1) + static_cast<float>(i);
  RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Options(7)));
  for (int i = 0; i < kElements; ++i) {
    const float want = want_base + static_cast<float>(comm.world() * i);
    if (data[i] != want) {
      return absl::InternalError(
          absl::StrCat(what, " on world rank ", world_rank, ": element ", i, " is ", data[i], ", want ", want));
    }
  }
  return absl::OkStatus();
}

// Runs every function on its own thread; the first error.
absl::Status Concurrently(const std::vector<std::function<absl::Status()>>& fns) {
  std::vector<absl::Status> statuses(fns.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < fns.size(); ++i) threads.emplace_back([&, i] { statuses[i] = fns[i](); });
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : statuses) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// --- The registry and the fault wrapper (fake backend) ----------------------

TEST(CommunicatorRegistryTest, UnknownBackendListsTheRegisteredOnes) {
  absl::StatusOr<std::unique_ptr<Communicator>> c = CreateCommunicator(Spec("mpi", LocalFileSpec("unknown"), 0, 1));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("unknown communicator backend 'mpi'"));
  EXPECT_THAT(c.status().message(), HasSubstr("registered: fake-for-test, gloo"));
}

TEST(CommunicatorRegistryTest, RefusesTakenAndEmptyNamesAndMissingFactories) {
  CommunicatorRegistry& registry = CommunicatorRegistry::Global();
  EXPECT_EQ(registry.Register("gloo", ConnectFake).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Register("", ConnectFake).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("no-factory", nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry.Find("gloo"));
  EXPECT_FALSE(registry.Find("no-factory"));
}

TEST(CommunicatorFactoryTest, FaultsWrapOnlyTheRankThePlanNames) {
  CommunicatorSpec spec = Spec(kFake, LocalFileSpec("faults"), 0, 2);
  spec.env = Env({{"NEREID_FAULTS", "rank=1:drop@1"}});
  absl::StatusOr<std::unique_ptr<Communicator>> rank0 = CreateCommunicator(spec);
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  EXPECT_EQ((*rank0)->backend(), "fake");
  spec.rank = 1;
  absl::StatusOr<std::unique_ptr<Communicator>> rank1 = CreateCommunicator(spec);
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  EXPECT_EQ((*rank1)->backend(), "fault(fake)");

  spec.env = Env({{"NEREID_FAULTS", "explode@1"}});
  absl::StatusOr<std::unique_ptr<Communicator>> bad = CreateCommunicator(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("NEREID_FAULTS"));
}

TEST(CommunicatorFactoryTest, GroupSpecIsTheGroupsAndFaultsFollowTheWorldRank) {
  CommunicatorSpec world = Spec(kFake, LocalFileSpec("derived"), 3, 4);
  world.env = Env({{"NEREID_FAULTS", "rank=3:drop@1"}});
  absl::StatusOr<std::unique_ptr<Communicator>> odd = CreateGroupCommunicator(world, "odd", {1, 3});
  ASSERT_TRUE(odd.ok()) << odd.status();
  // World rank 3 is group rank 1; the plan's rank=3 still names it.
  EXPECT_EQ((*odd)->backend(), "fault(fake)");
  const CommunicatorSpec& got = Fake(**odd).spec();
  EXPECT_EQ(got.rank, 1);
  EXPECT_EQ(got.world, 2);
  EXPECT_EQ(got.group, "odd");
  EXPECT_EQ(got.rendezvous.run_id, world.rendezvous.run_id + "/group/odd");
  EXPECT_EQ(got.rendezvous.path, world.rendezvous.path);
  EXPECT_EQ(got.identity.plan_fingerprint, "plan | group odd members 1,3");
  EXPECT_EQ(got.identity.world_size, 2);
  EXPECT_EQ(got.identity.nereid_version, "test");

  // rank=1 is world rank 1, not this rank's group rank 1.
  world.env = Env({{"NEREID_FAULTS", "rank=1:drop@1"}});
  absl::StatusOr<std::unique_ptr<Communicator>> plain = CreateGroupCommunicator(world, "odd2", {1, 3});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->backend(), "fake");
}

TEST(CommunicatorFactoryTest, LongMemberListsAreFingerprinted) {
  std::vector<int> many(40);
  for (int i = 0; i < 40; ++i) many[i] = i;
  const std::string fingerprint = GroupFingerprint("plan", "big", many);
  EXPECT_THAT(fingerprint, HasSubstr("plan | group big members 40 ranks, fnv1a "));
  std::vector<int> other = many;
  std::swap(other[0], other[1]);
  EXPECT_NE(GroupFingerprint("plan", "big", other), fingerprint);
}

TEST(CommunicatorFactoryTest, GroupArgumentsAreChecked) {
  // Gloo: a refusal must come before the store is touched, or it would wait.
  const CommunicatorSpec world = Spec("gloo", LocalFileSpec("args"), 2, 4, absl::Seconds(30));
  auto code = [&](const std::string& name, const std::vector<int>& members) {
    return CreateGroupCommunicator(world, name, members).status().code();
  };
  EXPECT_EQ(code("g", {}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code("g", {2, 1, 2}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code("g", {2, 4}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code("g", {-1, 2}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code("", {2, 3}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code("a/b", {2, 3}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code("a b", {2, 3}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(std::string(65, 'x'), {2, 3}), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(CreateGroupCommunicator(world, "g", {2, 1, 2}).status().message(), HasSubstr("rank 2 is listed twice"));
  EXPECT_THAT(CreateGroupCommunicator(world, "g", {2, 4}).status().message(),
              HasSubstr("member 4 is not a rank of the world (0..3)"));

  const auto start = std::chrono::steady_clock::now();
  absl::Status outside = CreateGroupCommunicator(world, "pair0", {0, 1}).status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(outside.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(outside.message(), HasSubstr("rank 2 is not a member of group 'pair0' (members 0,1)"));

  CommunicatorSpec grouped = world;
  grouped.group = "g";
  EXPECT_EQ(CreateCommunicator(grouped).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGroupCommunicator(grouped, "h", {2, 3}).status().code(), absl::StatusCode::kInvalidArgument);
}

// --- Groups over Gloo --------------------------------------------------------

// World 4: {0,1} and {2,3}, and {1,3} across them; the world and every group
// allreduce at once, all with the same tag, and each sees its own sum only.
TEST(GlooGroupTest, DisjointAndOverlappingGroupsReduceTheirOwnValues) {
  const RendezvousSpec rendezvous = LocalFileSpec("groups");
  const absl::Status status = AllOk(RunOnRanks(4, [&](int rank) -> absl::Status {
    const CommunicatorSpec spec = Spec("gloo", rendezvous, rank, 4);
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, CreateCommunicator(spec));
    const bool low = rank < 2;
    ASSIGN_OR_RETURN(
        std::unique_ptr<Communicator> pair,
        CreateGroupCommunicator(spec, low ? "low" : "high", low ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
    std::unique_ptr<Communicator> odd;
    if (rank % 2 == 1) {
      ASSIGN_OR_RETURN(odd, CreateGroupCommunicator(spec, "odd", {1, 3}));
    }

    if (pair->rank() != rank % 2 || pair->world() != 2) return absl::InternalError("pair rank/world");
    if (odd != nullptr && (odd->rank() != rank / 2 || odd->world() != 2)) {
      return absl::InternalError("odd rank/world");
    }
    std::vector<std::function<absl::Status()>> calls = {
        [&] { return AllReduceAndCheck(*world, rank, 1, 1 + 2 + 3 + 4, "world"); },
        [&] { return AllReduceAndCheck(*pair, rank, 100, low ? 100 + 200 : 300 + 400, "pair"); },
    };
    if (odd != nullptr) {
      calls.push_back([&] { return AllReduceAndCheck(*odd, rank, 10000, 20000 + 40000, "odd"); });
    }
    return Concurrently(calls);
  }));
  EXPECT_TRUE(status.ok()) << status;
}

// Two groups of the same members under different names are two communicators
// that do not mix; a group's order of members is its rank order.
TEST(GlooGroupTest, SameMembersUnderDifferentNamesDoNotMix) {
  const RendezvousSpec rendezvous = LocalFileSpec("same-members");
  const absl::Status status = AllOk(RunOnRanks(4, [&](int rank) -> absl::Status {
    const CommunicatorSpec spec = Spec("gloo", rendezvous, rank, 4);
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> a, CreateGroupCommunicator(spec, "a", {0, 1, 2, 3}));
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> b, CreateGroupCommunicator(spec, "b", {0, 1, 2, 3}));
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> rev, CreateGroupCommunicator(spec, "rev", {3, 2, 1, 0}));
    if (rev->rank() != 3 - rank) return absl::InternalError(absl::StrCat("rev rank ", rev->rank()));
    RETURN_IF_ERROR(Concurrently({
        [&] { return AllReduceAndCheck(*a, rank, 1, 10, "a"); },
        [&] { return AllReduceAndCheck(*b, rank, 1000, 10000, "b"); },
    }));
    // Group rank 0 of "rev" is world rank 3.
    std::vector<float> value = {static_cast<float>(rank)};
    RETURN_IF_ERROR(rev->Broadcast(absl::MakeSpan(value), 0, Options(1)));
    if (value[0] != 3) return absl::InternalError(absl::StrCat("rev broadcast gave ", value[0]));
    return absl::OkStatus();
  }));
  EXPECT_TRUE(status.ok()) << status;
}

TEST(GlooGroupTest, AGroupNameIsUsedOncePerRun) {
  const RendezvousSpec rendezvous = LocalFileSpec("reuse");
  std::vector<absl::Status> statuses = RunOnRanks(2, [&](int rank) -> absl::Status {
    const CommunicatorSpec spec = Spec("gloo", rendezvous, rank, 2, absl::Seconds(5));
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> first, CreateGroupCommunicator(spec, "g", {0, 1}));
    absl::Status again = CreateGroupCommunicator(spec, "g", {0, 1}).status();
    // Neither rank closes the first group while the other may still be
    // connecting it (a closed peer would fail that connect instead).
    RETURN_IF_ERROR(first->Barrier(CollectiveOptions{1, absl::Seconds(5)}));
    return again;
  });
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
    EXPECT_THAT(s.message(), HasSubstr("group 'g' (members 0,1)"));
    EXPECT_THAT(s.message(), HasSubstr("a group name is used once per run"));
  }
}

// Rank 0 thinks group "g" is {0,1}, ranks 1 and 2 think {0,1,2}: the identity
// check refuses them all at once, naming the group.
TEST(GlooGroupTest, DisagreeingMembershipIsRefusedNamingTheGroup) {
  const RendezvousSpec rendezvous = LocalFileSpec("disagree");
  const absl::Duration timeout = absl::Seconds(10);
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> statuses = RunOnRanks(3, [&](int rank) -> absl::Status {
    const CommunicatorSpec spec = Spec("gloo", rendezvous, rank, 3, timeout);
    return CreateGroupCommunicator(spec, "g", rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2}).status();
  });
  // Well before the timeout: nobody waited for a peer that will not come.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (int rank = 0; rank < 3; ++rank) {
    const absl::Status& s = statuses[rank];
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "rank " << rank << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("group 'g'"));
    EXPECT_THAT(s.message(), HasSubstr("members 0,1,2 but rank 0 has plan | group g members 0,1"));
  }
}

// Ranks 0 and 1 list the same members in different orders, so both claim
// group rank 0 and nobody group rank 1: each fails within the timeout, naming
// the group. The code depends on timing: the key taken (AlreadyExists, or a
// failed rename when both write it at the same instant: Gloo's FileStore
// shares one temporary file per key), or group rank 1 never appearing.
TEST(GlooGroupTest, DisagreeingOrderFailsWithinTheTimeout) {
  const RendezvousSpec rendezvous = LocalFileSpec("order");
  const absl::Duration timeout = absl::Seconds(2);
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> statuses = RunOnRanks(2, [&](int rank) -> absl::Status {
    const CommunicatorSpec spec = Spec("gloo", rendezvous, rank, 2, timeout);
    return CreateGroupCommunicator(spec, "swapped", rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0})
        .status();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2 + 3));
  for (int rank = 0; rank < 2; ++rank) {
    const absl::Status& s = statuses[rank];
    EXPECT_FALSE(s.ok()) << "rank " << rank;
    EXPECT_THAT(s.message(), HasSubstr("group 'swapped'"));
  }
}

}  // namespace
}  // namespace nereid
