// The hierarchical backend: ranks as threads of one process, each naming its
// "host" through NEREID_HOST_ID, so that one machine holds the layouts of
// several (shared memory within a named host, Gloo over loopback across).
//
// What only this backend has: host layouts, its two levels on layouts the
// conformance suite does not run, every pair of ranks through the right
// group, 16-bit wires rounding only across hosts, its name, and errors naming
// the stage. The collectives, point-to-point transfers, barrier, traffic,
// argument checks and faults of every backend are in
// communicator_conformance_test.cc.

#include "comm/hierarchical_communicator.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/communicator_factory.h"
#include "comm/gloo_test_world.h"
#include "comm/host_layout.h"
#include "comm/wire_format.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;
using ::testing::HasSubstr;

CollectiveOptions Options(uint32_t tag, absl::Duration timeout = absl::Seconds(30)) {
  CollectiveOptions o;
  o.tag = tag;
  o.timeout = timeout;
  return o;
}

// `hosts`: one letter per rank, its host ("AABB": ranks 0,1 on A, 2,3 on B).
absl::Status OnHosts(const std::string& hosts, const std::function<absl::Status(int, Communicator&)>& fn) {
  const int world = static_cast<int>(hosts.size());
  const RendezvousSpec rendezvous = LocalFileSpec("hier");
  const std::vector<absl::Status> statuses = RunOnRanks(world, [&](int rank) -> absl::Status {
    CommunicatorSpec spec;
    spec.backend = "hierarchical";
    spec.rendezvous = rendezvous;
    spec.rank = rank;
    spec.world = world;
    spec.identity = WorkerIdentity{"test", "plan", world};
    spec.connect_timeout = absl::Seconds(30);
    const std::string host(1, hosts[rank]);
    spec.env = [host](const std::string& name) -> std::optional<std::string> {
      if (name == "NEREID_HOST_ID") return host;
      return std::nullopt;
    };
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, CreateCommunicator(spec));
    return fn(rank, *c);
  });
  // Every rank's error: the first to fail is not always the first rank.
  std::string errors;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) absl::StrAppend(&errors, "\nrank ", r, ": ", statuses[r].ToString());
  }
  return errors.empty() ? absl::OkStatus() : absl::InternalError(errors);
}

void ExpectOk(const absl::Status& status) { EXPECT_TRUE(status.ok()) << status; }

absl::Status Expect(bool ok, const std::string& what) { return ok ? absl::OkStatus() : absl::InternalError(what); }

// Integer values: every order of summation gives the exact sum.
float Value(int rank, size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 977)); }

// Layouts beyond the conformance suite's (communicator_conformance_test runs
// every collective on "A", "AB", "AAB", "AABB" and "AAAABBBB" at sizes 0 to
// 262147): interleaved hosts, uneven hosts, one host, a rank per host.
const char* const kLayouts[] = {"ABAB", "AAAB", "ABBB", "AAAA", "ABCD"};

TEST(HostLayoutTest, GroupsRanksByKeyInOrderOfTheirLowestRank) {
  const HostLayout layout = HostLayout::FromKeys({"b", "a", "b", "c", "a"});
  EXPECT_EQ(layout.hosts, (std::vector<std::vector<int>>{{0, 2}, {1, 4}, {3}}));
  EXPECT_EQ(layout.host_of, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(layout.local_index, (std::vector<int>{0, 0, 1, 0, 1}));
  EXPECT_EQ(layout.Leaders(), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(layout.Describe(), "3 hosts: 0,2 | 1,4 | 3");
}

TEST(HostLayoutTest, TheMachineKeyIsStableAndTheOverrideWins) {
  const EnvGetter none = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  EXPECT_EQ(HostKey(none), HostKey(none));
  EXPECT_THAT(HostKey(none), HasSubstr(" boot "));
  const EnvGetter named = [](const std::string&) -> std::optional<std::string> { return "rack7-node3"; };
  EXPECT_EQ(HostKey(named), "id rack7-node3");
}

TEST(HierarchicalCommunicatorTest, AllReduceSumsExactlyAndRanksAgreeOnEveryLayout) {
  for (const std::string layout : kLayouts) {
    SCOPED_TRACE(layout);
    const int world = static_cast<int>(layout.size());
    for (size_t size : {size_t{0}, size_t{3}, size_t{100003}}) {
      ExpectOk(OnHosts(layout, [&](int rank, Communicator& c) -> absl::Status {
                    // Size 0 moves nothing: without the barrier a rank could leave
                    // and close its sockets while a slower one still connects.
                    RETURN_IF_ERROR(c.Barrier(Options(9)));
                    std::vector<float> sum(size), avg(size);
                    for (size_t i = 0; i < size; ++i) sum[i] = avg[i] = Value(rank, i);
                    RETURN_IF_ERROR(c.AllReduce(absl::MakeSpan(sum), ReduceOp::kSum, Options(1)));
                    RETURN_IF_ERROR(c.AllReduce(absl::MakeSpan(avg), ReduceOp::kAvg, Options(2)));
                    for (size_t i = 0; i < size; ++i) {
                      float want = 0;
                      for (int r = 0; r < world; ++r) want += Value(r, i);
                      RETURN_IF_ERROR(Expect(sum[i] == want, absl::StrCat("sum[", i, "] = ", sum[i], ", not ", want)));
                      RETURN_IF_ERROR(Expect(std::fabs(avg[i] - want / world) <= 1e-6f * want,
                                             absl::StrCat("avg[", i, "] = ", avg[i])));
                    }
                    // Every rank holds the same bits: rank 0's average, sent to all.
                    std::vector<float> first = avg;
                    RETURN_IF_ERROR(c.Broadcast(absl::MakeSpan(first), 0, Options(3)));
                    return Expect(first == avg, "ranks' averages differ");
                  }));
    }
  }
}

TEST(HierarchicalCommunicatorTest, SixteenBitWireKeepsRanksBitwiseEqual) {
  for (const std::string layout : {"AABB", "AAAB", "ABCD"}) {
    SCOPED_TRACE(layout);
    ExpectOk(OnHosts(layout, [&](int rank, Communicator& c) -> absl::Status {
                  std::vector<float> data(50001);
                  for (size_t i = 0; i < data.size(); ++i) data[i] = 0.001f * Value(rank, i) + 0.1f * rank;
                  CollectiveOptions o = Options(1);
                  o.wire = WireType::kBFloat16;
                  RETURN_IF_ERROR(c.AllReduce(absl::MakeSpan(data), ReduceOp::kAvg, o));
                  std::vector<float> first = data;
                  RETURN_IF_ERROR(c.Broadcast(absl::MakeSpan(first), 0, Options(2)));
                  RETURN_IF_ERROR(Expect(first == data, "ranks differ after a 16-bit allreduce"));
                  const float mean_rank = (c.world() - 1) / 2.0f;  // element 26: the mean of its values
                  const float want = 0.001f * ((mean_rank + 1) * 1000 + 26) + 0.1f * mean_rank;
                  return Expect(std::fabs(data[26] - want) < 0.02f * want, absl::StrCat("data[26] = ", data[26]));
                }));
  }
}

TEST(HierarchicalCommunicatorTest, ReduceScatterAllGatherAndBroadcastOnEveryLayout) {
  for (const std::string layout : kLayouts) {
    SCOPED_TRACE(layout);
    const int world = static_cast<int>(layout.size());
    ExpectOk(OnHosts(layout, [&](int rank, Communicator& c) -> absl::Status {
                  const size_t chunk = 1001;
                  std::vector<float> data(world * chunk), out(chunk);
                  for (size_t i = 0; i < data.size(); ++i) data[i] = Value(rank, i);
                  RETURN_IF_ERROR(c.ReduceScatter(data, absl::MakeSpan(out), ReduceOp::kSum, Options(1)));
                  for (size_t i = 0; i < chunk; ++i) {
                    float want = 0;
                    for (int r = 0; r < world; ++r) want += Value(r, rank * chunk + i);
                    RETURN_IF_ERROR(Expect(out[i] == want, absl::StrCat("reduce-scatter[", i, "] = ", out[i])));
                  }
                  std::vector<float> mine(chunk, static_cast<float>(rank)), all(world * chunk, -1.0f);
                  for (size_t i = 0; i < chunk; ++i) mine[i] += 0.5f * static_cast<float>(i % 7);
                  RETURN_IF_ERROR(c.AllGather(mine, absl::MakeSpan(all), Options(2)));
                  for (int r = 0; r < world; ++r) {
                    for (size_t i = 0; i < chunk; ++i) {
                      const float want = static_cast<float>(r) + 0.5f * static_cast<float>(i % 7);
                      RETURN_IF_ERROR(Expect(all[r * chunk + i] == want,
                                             absl::StrCat("allgather block ", r, "[", i, "] = ", all[r * chunk + i])));
                    }
                  }
                  for (int root = 0; root < world; ++root) {
                    std::vector<float> b(777, static_cast<float>(rank == root ? 100 + root : -1));
                    RETURN_IF_ERROR(c.Broadcast(absl::MakeSpan(b), root, Options(10 + root)));
                    RETURN_IF_ERROR(Expect(b.front() == 100 + root && b.back() == 100 + root,
                                           absl::StrCat("broadcast from ", root, " gave ", b.front())));
                  }
                  return c.Barrier(Options(99));
                }));
  }
}

TEST(HierarchicalCommunicatorTest, PointToPointBetweenEveryPairAndMixedRingShifts) {
  for (const std::string layout : {"AABB", "ABAB", "AAAB", "ABCD"}) {
    SCOPED_TRACE(layout);
    const int world = static_cast<int>(layout.size());
    ExpectOk(OnHosts(layout, [&](int rank, Communicator& c) -> absl::Status {
                  // Every ordered pair, one at a time (tags keep them apart).
                  for (int from = 0; from < world; ++from) {
                    for (int to = 0; to < world; ++to) {
                      if (from == to) continue;
                      const uint32_t tag = 100 + from * world + to;
                      std::vector<float> m(4099, static_cast<float>(from * 10 + to));
                      if (rank == from) RETURN_IF_ERROR(c.Send(m, to, Options(tag)));
                      if (rank == to) {
                        std::vector<float> got(m.size());
                        RETURN_IF_ERROR(c.Recv(absl::MakeSpan(got), from, Options(tag)));
                        RETURN_IF_ERROR(Expect(got == m, absl::StrCat(from, "->", to, " garbled")));
                      }
                    }
                  }
                  // Shifts by every distance: the peers are often one local,
                  // one remote, and every rank sends first.
                  for (int d = 1; d < world; ++d) {
                    std::vector<float> send(65537, static_cast<float>(rank)), recv(65537, -1.0f);
                    RETURN_IF_ERROR(c.SendRecv(send, (rank + d) % world, absl::MakeSpan(recv),
                                               (rank - d + world) % world, Options(500 + d)));
                    RETURN_IF_ERROR(Expect(recv.back() == static_cast<float>((rank - d + world) % world),
                                           absl::StrCat("shift by ", d, " gave ", recv.back())));
                  }
                  return absl::OkStatus();
                }));
  }
}

TEST(HierarchicalCommunicatorTest, TheBackendNamesItsLayout) {
  ExpectOk(OnHosts("AABB", [](int, Communicator& c) -> absl::Status {
                return Expect(c.backend() == "hierarchical(shm within hosts, gloo/tcp across; 2 hosts: 0,1 | 2,3)",
                              c.backend());
              }));
  ExpectOk(OnHosts("AAA", [](int, Communicator& c) -> absl::Status {
                return Expect(c.backend() == "hierarchical(shm within hosts; 1 host: 0,1,2)", c.backend());
              }));
}

TEST(HierarchicalCommunicatorTest, AMissingRankTimesOutNamingTheStage) {
  std::vector<absl::Status> got(4);
  (void)OnHosts("AABB", [&](int rank, Communicator& c) -> absl::Status {
    if (rank == 3) {
      absl::SleepFor(absl::Seconds(3));  // never joins; stays connected past the others' timeout
      return absl::OkStatus();
    }
    std::vector<float> data(1000, 1.0f);
    got[rank] = c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Options(1, absl::Seconds(1)));
    return absl::OkStatus();
  });
  // Rank 2 waits for rank 3 within host 1; rank 0 waits for rank 2 across hosts.
  EXPECT_EQ(got[2].code(), absl::StatusCode::kDeadlineExceeded) << got[2];
  EXPECT_THAT(got[2].message(), HasSubstr("within host 1 (world ranks 2,3)"));
  EXPECT_FALSE(got[0].ok());
  EXPECT_THAT(got[0].message(), HasSubstr("across hosts (leaders: world ranks 0,2)"));
  EXPECT_THAT(got[0].message(), HasSubstr("hierarchical allreduce (tag 1, rank 0 of 4)"));
}

}  // namespace
}  // namespace nereid
