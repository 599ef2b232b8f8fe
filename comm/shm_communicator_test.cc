// What only the shm backend has: its transport's rings and slots, its
// messages, its segment's cleanup, and a peer process that exits. Ranks as
// threads of one process (each with its own communicator and mapping of the
// segment), and forked processes.
//
// Collectives at every size and world, 16-bit wires, ring shifts of messages
// larger than a ring, point-to-point transfers, the barrier, traffic, the
// argument checks, a silent peer and aborts are checked for shm as for every
// backend in communicator_conformance_test.cc.

#include "comm/shm_communicator.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/communicator_factory.h"
#include "comm/gloo_test_world.h"
#include "comm/shm_segment.h"
#include "comm/shm_transport.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::AllOk;
using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;
using ::testing::HasSubstr;

CollectiveOptions Options(uint32_t tag, absl::Duration timeout = absl::Seconds(30)) {
  CollectiveOptions o;
  o.tag = tag;
  o.timeout = timeout;
  return o;
}

absl::StatusOr<std::unique_ptr<Communicator>> Connect(const RendezvousSpec& rendezvous, int rank, int world) {
  CommunicatorSpec spec;
  spec.backend = "shm";
  spec.rendezvous = rendezvous;
  spec.rank = rank;
  spec.world = world;
  spec.identity = WorkerIdentity{"test", "plan", world};
  spec.connect_timeout = absl::Seconds(30);
  spec.env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return CreateCommunicator(spec);
}

// Runs fn(rank, communicator) on every rank of a fresh shm world.
absl::Status OnShmWorld(int world, const std::function<absl::Status(int, Communicator&)>& fn) {
  const RendezvousSpec rendezvous = LocalFileSpec("shm");
  return AllOk(RunOnRanks(world, [&](int rank) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, Connect(rendezvous, rank, world));
    return fn(rank, *c);
  }));
}

absl::Status Expect(bool ok, const std::string& what) { return ok ? absl::OkStatus() : absl::InternalError(what); }

// More transfers between one pair at once than a channel has rings, with
// distinct tags, posted in opposite orders on the two sides: each meets its
// own partner.
TEST(ShmCommunicatorTest, ConcurrentTransfersWithDistinctTagsMeetTheirPartners) {
  constexpr int kTransfers = 6 * ShmTransport::kRings;
  const absl::Status status = OnShmWorld(2, [&](int rank, Communicator& c) -> absl::Status {
    std::vector<absl::Status> statuses(kTransfers);
    std::vector<std::thread> threads;
    for (int t = 0; t < kTransfers; ++t) {
      const int tag = rank == 0 ? t : kTransfers - 1 - t;
      threads.emplace_back([&, tag] {
        std::vector<float> data(60000 + tag, static_cast<float>(tag));
        if (rank == 0) {
          statuses[tag] = c.Send(data, 1, Options(tag));
        } else {
          std::vector<float> got(data.size());
          statuses[tag] = c.Recv(absl::MakeSpan(got), 0, Options(tag));
          if (statuses[tag].ok() && got != data) statuses[tag] = absl::InternalError(absl::StrCat("tag ", tag));
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : statuses) RETURN_IF_ERROR(s);
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Transfers handed to the communicator's progress thread
// (async_point_to_point): their statuses, and the threads they ended on.
class Completions {
 public:
  explicit Completions(int expected) : statuses_(expected) {}
  AsyncPointToPoint::Done For(int i) {
    return [this, i](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu_);
      // A copy of its own: Debian's absl is not TSan-instrumented, so a
      // status shared with the progress thread reads as raced under TSan.
      statuses_[i] = absl::Status(s.code(), std::string(s.message()));
      threads_.insert(std::this_thread::get_id());
      if (++done_ == static_cast<int>(statuses_.size())) all_done_.notify_all();
    };
  }
  // Every status, once all have come (or an error after `limit`).
  absl::StatusOr<std::vector<absl::Status>> Wait(absl::Duration limit) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!all_done_.wait_for(lock, absl::ToChronoSeconds(limit),
                            [this] { return done_ == static_cast<int>(statuses_.size()); })) {
      return absl::DeadlineExceededError(absl::StrCat(done_, " of ", statuses_.size(), " transfers ended"));
    }
    return statuses_;
  }
  size_t threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable all_done_;
  std::vector<absl::Status> statuses_;
  std::set<std::thread::id> threads_;
  int done_ = 0;
};

// Many transfers pending at once on one rank, started from one thread and
// met in the opposite order: one progress thread drives them all, each meets
// its partner, and no thread is parked per transfer.
TEST(ShmCommunicatorTest, OneProgressThreadDrivesManyPendingTransfers) {
  constexpr int kTransfers = 12 * ShmTransport::kRings;
  const absl::Status status = OnShmWorld(2, [&](int rank, Communicator& c) -> absl::Status {
    AsyncPointToPoint* async = c.async_point_to_point();
    RETURN_IF_ERROR(Expect(async != nullptr, "shm has no progress thread"));
    std::vector<std::vector<float>> data(kTransfers);
    Completions completions(kTransfers);
    for (int i = 0; i < kTransfers; ++i) {
      const int tag = rank == 0 ? i : kTransfers - 1 - i;
      data[tag].assign(40000 + 997 * tag, rank == 0 ? static_cast<float>(tag) : -1.0f);
      if (rank == 0) {
        async->StartSend(data[tag], 1, Options(tag), completions.For(tag));
      } else {
        async->StartRecv(absl::MakeSpan(data[tag]), 0, Options(tag), completions.For(tag));
      }
    }
    ASSIGN_OR_RETURN(std::vector<absl::Status> statuses, completions.Wait(absl::Seconds(60)));
    for (const absl::Status& s : statuses) RETURN_IF_ERROR(s);
    RETURN_IF_ERROR(Expect(completions.threads() == 1, absl::StrCat(completions.threads(), " completion threads")));
    for (int tag = 0; tag < kTransfers; ++tag) {
      for (float v : data[tag]) RETURN_IF_ERROR(Expect(v == static_cast<float>(tag), absl::StrCat("tag ", tag)));
    }
    const TrafficCounters traffic = c.traffic();
    const int64_t bytes = (40000 * kTransfers + 997 * kTransfers * (kTransfers - 1) / 2) * 4;
    return Expect((rank == 0 ? traffic.bytes_sent : traffic.bytes_received) == bytes, "traffic not counted");
  });
  EXPECT_TRUE(status.ok()) << status;
}

// A pending transfer ends at its timeout naming the peer, or at once when the
// rank aborts; the progress thread goes on with the others.
TEST(ShmCommunicatorTest, APendingTransferEndsAtItsTimeoutOrAnAbort) {
  const absl::Status status = OnShmWorld(2, [&](int rank, Communicator& c) -> absl::Status {
    if (rank == 1) return absl::OkStatus();
    AsyncPointToPoint* async = c.async_point_to_point();
    std::vector<float> late(5), aborted(5);
    AbortSignal abort;
    CollectiveOptions until_abort = Options(2, absl::Seconds(60));
    until_abort.abort = &abort;
    Completions completions(2);
    const absl::Time start = absl::Now();
    async->StartRecv(absl::MakeSpan(late), 1, Options(1, absl::Milliseconds(300)), completions.For(0));
    async->StartRecv(absl::MakeSpan(aborted), 1, until_abort, completions.For(1));
    absl::SleepFor(absl::Milliseconds(500));
    abort.Fire();
    ASSIGN_OR_RETURN(std::vector<absl::Status> statuses, completions.Wait(absl::Seconds(10)));
    RETURN_IF_ERROR(Expect(statuses[0].code() == absl::StatusCode::kDeadlineExceeded &&
                               absl::StrContains(statuses[0].message(), "shm recv (tag 1, rank 0 of 2, peer 1)"),
                           statuses[0].ToString()));
    RETURN_IF_ERROR(Expect(statuses[1].code() == absl::StatusCode::kCancelled ||
                               statuses[1].code() == absl::StatusCode::kFailedPrecondition,
                           statuses[1].ToString()));
    return Expect(absl::Now() - start < absl::Seconds(10), "the timeout and the abort were not kept");
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(ShmCommunicatorTest, SizesThatDisagreeFailBothSides) {
  std::vector<absl::Status> results(2);
  const absl::Status status = OnShmWorld(2, [&](int rank, Communicator& c) -> absl::Status {
    std::vector<float> data(rank == 0 ? 10 : 12);
    results[rank] = rank == 0 ? c.Send(data, 1, Options(3)) : c.Recv(absl::MakeSpan(data), 0, Options(3));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(results[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(results[0].message()), HasSubstr("sending 40 bytes but rank 1 expects 48"));
  EXPECT_EQ(results[1].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(results[1].message()), HasSubstr("48 bytes expected"));
}

// A receive nobody sends to ends at its timeout naming the call and the
// peer; the communicator is unusable afterwards. (That an abort ends a wait
// at once is a conformance case for every backend.)
TEST(ShmCommunicatorTest, ARecvThatTimesOutNamesThePeer) {
  const absl::Status status = OnShmWorld(2, [&](int rank, Communicator& c) -> absl::Status {
    if (rank == 1) return absl::OkStatus();
    std::vector<float> data(5);
    const absl::Time start = absl::Now();
    absl::Status late = c.Recv(absl::MakeSpan(data), 1, Options(1, absl::Milliseconds(300)));
    RETURN_IF_ERROR(Expect(late.code() == absl::StatusCode::kDeadlineExceeded, late.ToString()));
    RETURN_IF_ERROR(Expect(absl::StrContains(late.message(), "shm recv (tag 1, rank 0 of 2, peer 1)") &&
                               absl::StrContains(late.message(), "rank 1"),
                           late.ToString()));
    RETURN_IF_ERROR(Expect(absl::Now() - start < absl::Seconds(10), "the timeout was not kept"));
    absl::Status after = c.Send(data, 1, Options(2));
    return Expect(after.code() == absl::StatusCode::kFailedPrecondition &&
                      absl::StrContains(after.message(), "unusable after an earlier failure"),
                  after.ToString());
  });
  EXPECT_TRUE(status.ok()) << status;
}

// The segment's name is gone once the ranks have met: nothing is left in
// /dev/shm, however the run ends.
TEST(ShmCommunicatorTest, NothingIsLeftInDevShm) {
  const std::string prefix = absl::StrCat("nereid-", ::getpid(), "-");
  const absl::Status status = OnShmWorld(2, [&](int, Communicator& c) { return c.Barrier(Options(1)); });
  ASSERT_TRUE(status.ok()) << status;
  DIR* dir = ::opendir("/dev/shm");
  ASSERT_NE(dir, nullptr);
  while (struct dirent* entry = ::readdir(dir)) EXPECT_FALSE(absl::StartsWith(entry->d_name, prefix)) << entry->d_name;
  ::closedir(dir);
}

// Receives posted long before their sends (a server's pulls for later
// steps) do not hold up a send that is due now: many receives wait on one
// channel while the message the receiver needs first still gets through.
TEST(ShmCommunicatorTest, EarlyReceivesDoNotBlockTheSendDueNow) {
  constexpr int kEarly = 40;  // more than kRings
  const absl::Status status = OnShmWorld(2, [&](int rank, Communicator& c) -> absl::Status {
    std::vector<float> now(1000, 3.0f);
    if (rank == 0) {
      // Tag 0 first; the later tags only once rank 1 has answered on tag 0.
      RETURN_IF_ERROR(c.Send(now, 1, Options(0)));
      RETURN_IF_ERROR(c.Recv(absl::MakeSpan(now), 1, Options(1000)));
      for (int t = 1; t <= kEarly; ++t) RETURN_IF_ERROR(c.Send(now, 1, Options(t)));
      return absl::OkStatus();
    }
    std::vector<absl::Status> statuses(kEarly + 1);
    std::vector<std::thread> early;
    std::vector<std::vector<float>> got(kEarly + 1, std::vector<float>(1000));
    for (int t = 1; t <= kEarly; ++t) {
      early.emplace_back([&, t] { statuses[t] = c.Recv(absl::MakeSpan(got[t]), 0, Options(t)); });
    }
    absl::SleepFor(absl::Milliseconds(50));  // the early receives are posted
    statuses[0] = c.Recv(absl::MakeSpan(got[0]), 0, Options(0));
    if (statuses[0].ok()) statuses[0] = c.Send(got[0], 0, Options(1000));
    for (std::thread& t : early) t.join();
    for (const absl::Status& s : statuses) RETURN_IF_ERROR(s);
    for (const std::vector<float>& g : got) RETURN_IF_ERROR(Expect(g == now, "a message's values"));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// A rank 0 whose peer never comes ends at its timeout, and leaves no name
// in /dev/shm either.
TEST(ShmCommunicatorTest, AConnectThatTimesOutLeavesNothingInDevShm) {
  const std::string prefix = absl::StrCat("nereid-", ::getpid(), "-");
  const RendezvousSpec rendezvous = LocalFileSpec("shm-alone");
  CommunicatorSpec spec;
  spec.backend = "shm";
  spec.rendezvous = rendezvous;
  spec.rank = 0;
  spec.world = 2;
  spec.identity = WorkerIdentity{"test", "plan", 2};
  spec.connect_timeout = absl::Milliseconds(500);
  spec.env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  absl::StatusOr<std::unique_ptr<Communicator>> c = CreateCommunicator(spec);
  EXPECT_FALSE(c.ok());
  DIR* dir = ::opendir("/dev/shm");
  ASSERT_NE(dir, nullptr);
  while (struct dirent* entry = ::readdir(dir)) EXPECT_FALSE(absl::StartsWith(entry->d_name, prefix)) << entry->d_name;
  ::closedir(dir);
}

// A name whose creator died before the ranks met (killed at start-up) is
// removed by the next sweep; one whose creator lives is kept.
TEST(ShmSegmentTest, AbandonedNamesAreRemovedAndLiveOnesKept) {
  const std::string dead = absl::StrCat("/nereid-sweep-dead-", ::getpid());
  const std::string live = absl::StrCat("/nereid-sweep-live-", ::getpid());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<ShmSegment>> s = ShmSegment::Create(dead, 4096);
    ::_exit(s.ok() ? 0 : 1);  // no destructor: the name stays, the lock goes with the process
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  absl::StatusOr<std::unique_ptr<ShmSegment>> held = ShmSegment::Create(live, 4096);
  ASSERT_TRUE(held.ok()) << held.status();
  // Both are younger than the sweep's 10 s: age them.
  for (const std::string& name : {dead, live}) {
    const std::string path = "/dev/shm" + name;
    struct timespec old[2] = {{::time(nullptr) - 60, 0}, {::time(nullptr) - 60, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old, 0), 0) << path;
  }
  EXPECT_EQ(ShmSegment::RemoveAbandoned(absl::StrCat("nereid-sweep-")), 1);
  EXPECT_EQ(::access(("/dev/shm" + dead).c_str(), F_OK), -1);
  EXPECT_EQ(::access(("/dev/shm" + live).c_str(), F_OK), 0);
}

// A peer process that has exited is Unavailable within moments, not at the
// timeout (it will never post or drain anything).
TEST(ShmTransportTest, APeerThatExitedIsUnavailable) {
  const std::string name = absl::StrCat("/nereid-test-", ::getpid());
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment = ShmSegment::Create(name, ShmTransport::SegmentBytes(2));
  ASSERT_TRUE(segment.ok()) << segment.status();
  ShmTransport::Format((*segment)->base(), 2);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<ShmTransport>> t = ShmTransport::Attach((*segment)->base(), 2, 1);
    ::_exit(t.ok() ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  absl::StatusOr<std::unique_ptr<ShmTransport>> t = ShmTransport::Attach((*segment)->base(), 2, 0);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<uint8_t> buffer(16);
  const absl::Time start = absl::Now();
  const absl::Status s = (*t)->Exchange(
      1, {}, nullptr, {1, buffer.size()},
      [&](const uint8_t* src, size_t offset, size_t length) { std::memcpy(buffer.data() + offset, src, length); },
      absl::Now() + absl::Seconds(60), nullptr, "test recv");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("rank 1 (pid ", child, ") has exited")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ShmSegmentTest, BadNamesAndSizesAreRefused) {
  EXPECT_EQ(ShmSegment::Create("no-slash", 4096).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmSegment::Create("/a/b", 4096).status().code(), absl::StatusCode::kInvalidArgument);
  const std::string name = absl::StrCat("/nereid-test-size-", ::getpid());
  absl::StatusOr<std::unique_ptr<ShmSegment>> s = ShmSegment::Create(name, 8192);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<std::unique_ptr<ShmSegment>> wrong = ShmSegment::Open(name, 4096);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("holds 8192 bytes, expected 4096"));
  (*s)->Unlink();
  EXPECT_EQ(ShmSegment::Open(name, 8192).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace nereid
