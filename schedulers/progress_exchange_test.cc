// Tests for the progress exchange, one per law of progress_exchange.h: the wire
// format, per-sender order, and three ranks as objects in one process under
// random (seeded, bounded) interleavings of deliveries; then a stale-synchronous
// bound read from a frontier that spans ranks.

#include "schedulers/progress_exchange.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedulers/path_summary.h"
#include "schedulers/progress_state.h"
#include "schedulers/reachability.h"
#include "schedulers/scoped_timestamp.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

ScopedTimestamp T(int64_t epoch, std::vector<int64_t> counters) { return ScopedTimestamp{epoch, std::move(counters)}; }

constexpr int kRanks = 3;

// ---- The wire format -----------------------------------------------------------

void ExpectSameBatch(const ProgressBatch& got, int rank, uint64_t sequence, const std::vector<ProgressDelta>& d) {
  EXPECT_EQ(got.rank, rank);
  EXPECT_EQ(got.sequence, sequence);
  ASSERT_EQ(got.deltas.size(), d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(got.deltas[i].time, d[i].time) << i;
    EXPECT_EQ(got.deltas[i].location, d[i].location) << i;
    EXPECT_EQ(got.deltas[i].delta, d[i].delta) << i;
  }
}

TEST(ProgressExchangeTest, EncodingRoundTrips) {
  const std::vector<ProgressDelta> edge_cases = {
      {T(INT64_MAX, {INT64_MIN, 0, -1}), INT_MIN, INT64_MIN},
      {T(0, {}), INT_MAX, INT64_MAX},
      {T(-5, {7}), -1, 0},
  };
  {
    absl::StatusOr<ProgressBatch> got = DecodeProgressBatch(EncodeProgressBatch(INT_MAX, UINT64_MAX, edge_cases));
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameBatch(*got, INT_MAX, UINT64_MAX, edge_cases);
  }
  {
    absl::StatusOr<ProgressBatch> got = DecodeProgressBatch(EncodeProgressBatch(0, 0, {}));
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameBatch(*got, 0, 0, {});
  }
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<ProgressDelta> deltas(rng() % 6);
    for (ProgressDelta& d : deltas) {
      d.time.epoch = static_cast<int64_t>(rng() >> (rng() % 64));
      d.time.counters.resize(rng() % 4);
      for (int64_t& c : d.time.counters) c = static_cast<int64_t>(rng());
      d.location = static_cast<int>(static_cast<int64_t>(rng()) % 1000);
      d.delta = static_cast<int64_t>(rng()) >> (rng() % 64);
    }
    const int rank = static_cast<int>(rng() % 100);
    const uint64_t sequence = rng() >> (rng() % 64);
    absl::StatusOr<ProgressBatch> got = DecodeProgressBatch(EncodeProgressBatch(rank, sequence, deltas));
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameBatch(*got, rank, sequence, deltas);
  }
}

// Hand-made buffers with a correct checksum, to reach the checks behind it.
class Bytes {
 public:
  Bytes& Raw(const std::string& s) {
    body_ += s;
    return *this;
  }
  Bytes& Varint(uint64_t v) {
    while (v >= 0x80) {
      body_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    body_.push_back(static_cast<char>(v));
    return *this;
  }
  std::string Sealed() const {
    std::string out = body_;
    const uint32_t crc = static_cast<uint32_t>(
        crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body_.data()), static_cast<uInt>(body_.size())));
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
    return out;
  }

 private:
  std::string body_;
};

void ExpectDataLoss(const std::string& encoded, const std::string& says) {
  absl::StatusOr<ProgressBatch> got = DecodeProgressBatch(encoded);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(says));
}

TEST(ProgressExchangeTest, MalformedBatchIsRefused) {
  const std::string good = EncodeProgressBatch(2, 9, {{T(0, {3, 1}), 104, -1}, {T(1, {4}), 203, +2}});
  ASSERT_TRUE(DecodeProgressBatch(good).ok());
  // Every truncation.
  for (size_t n = 0; n < good.size(); ++n) {
    absl::StatusOr<ProgressBatch> got = DecodeProgressBatch(good.substr(0, n));
    ASSERT_FALSE(got.ok()) << n;
    ASSERT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << n;
  }
  // Every single-byte change, and a trailing byte.
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ flip);
      ASSERT_EQ(DecodeProgressBatch(bad).status().code(), absl::StatusCode::kDataLoss) << i;
    }
  }
  ExpectDataLoss(good + "x", "checksum mismatch");
  ExpectDataLoss("", "shorter than any batch");
  // Past the checksum: each structural check, and no allocation sized by the input.
  ExpectDataLoss(Bytes().Raw("NOPE").Varint(1).Sealed(), "bad magic");
  ExpectDataLoss(Bytes().Raw("NPXB").Varint(2).Varint(0).Varint(0).Varint(0).Sealed(), "version 2 is not supported");
  ExpectDataLoss(Bytes().Raw("NPXB").Varint(1).Varint(uint64_t{1} << 31).Varint(0).Varint(0).Sealed(), "out of range");
  ExpectDataLoss(Bytes().Raw("NPXB").Varint(1).Varint(0).Varint(0).Varint(UINT32_MAX).Sealed(), "cannot fit");
  ExpectDataLoss(
      Bytes().Raw("NPXB").Varint(1).Varint(0).Varint(0).Varint(3).Varint(0).Varint(0).Varint(0).Varint(0).Sealed(),
      "cannot fit");
  ExpectDataLoss(Bytes()
                     .Raw("NPXB")
                     .Varint(1)
                     .Varint(0)
                     .Varint(0)
                     .Varint(1)
                     .Varint(0)
                     .Varint(0)
                     .Varint(1000000)
                     .Raw(std::string(8, '\0'))
                     .Sealed(),
                 "depth 1000000");
  ExpectDataLoss(Bytes()
                     .Raw("NPXB")
                     .Varint(1)
                     .Varint(0)
                     .Varint(0)
                     .Varint(1)
                     .Varint(0)
                     .Varint(0)
                     .Varint(2)
                     .Varint(0)
                     .Raw(std::string(2, '\x80'))
                     .Sealed(),
                 "truncated");
  ExpectDataLoss(Bytes().Raw("NPXB").Varint(1).Varint(0).Varint(0).Varint(0).Raw("junk").Sealed(), "trailing bytes");
  // Random buffers with a correct checksum: refused or decoded, never a crash.
  std::mt19937 rng(5);
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string body = trial % 2 == 0 ? "NPXB\x01" : "";
    const int n = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < n; ++i) body.push_back(static_cast<char>(rng()));
    refused += !DecodeProgressBatch(Bytes().Raw(body).Sealed()).ok();
  }
  EXPECT_GT(refused, 2500);
}

// ---- Three ranks as objects in one process ---------------------------------------

// Each rank r runs the training loop at locations 100r + {Input 0, Forward 1,
// Reduce 2, Update 3, Feedback 4}; Forward sends a gradient to every rank's Reduce.
enum : int { kInput = 0, kForward = 1, kReduce = 2, kUpdate = 3, kFeedback = 4 };
int Loc(int rank, int role) { return 100 * rank + role; }
int Owner(int location) { return location / 100; }
constexpr int64_t kSteps = 4;

std::shared_ptr<const Reachability> AllReduceLoops() {
  ReachabilityBuilder b;
  for (int r = 0; r < kRanks; ++r) {
    for (int role : {kInput, kForward, kReduce, kUpdate, kFeedback}) b.AddLocation(Loc(r, role), 1);
    b.AddEdge(Loc(r, kInput), Loc(r, kForward), PathSummary::Identity(1));
    for (int q = 0; q < kRanks; ++q) b.AddEdge(Loc(r, kForward), Loc(q, kReduce), PathSummary::Identity(1));
    b.AddEdge(Loc(r, kReduce), Loc(r, kUpdate), PathSummary::Identity(1));
    b.AddEdge(Loc(r, kUpdate), Loc(r, kFeedback), PathSummary::Identity(1));
    b.AddEdge(Loc(r, kFeedback), Loc(r, kForward), PathSummary::Feedback(1, 0));
  }
  absl::StatusOr<Reachability> r = b.Build();
  EXPECT_TRUE(r.ok()) << r.status();
  return std::make_shared<const Reachability>(*std::move(r));
}

std::vector<ProgressDelta> Inputs() {
  std::vector<ProgressDelta> initial;
  for (int r = 0; r < kRanks; ++r) initial.push_back({T(0, {0}), Loc(r, kInput), +1});
  return initial;
}

std::vector<ProgressExchange> MakeRanks(const std::shared_ptr<const Reachability>& reach,
                                        const std::vector<ProgressDelta>& initial) {
  std::vector<ProgressExchange> ranks;
  for (int r = 0; r < kRanks; ++r) {
    absl::StatusOr<ProgressExchange> ex = ProgressExchange::Create(r, kRanks, reach, initial);
    EXPECT_TRUE(ex.ok()) << ex.status();
    ranks.push_back(*std::move(ex));
  }
  return ranks;
}

TEST(ProgressExchangeTest, BatchesApplyInSenderOrder) {
  std::vector<ProgressExchange> ranks = MakeRanks(AllReduceLoops(), Inputs());
  EXPECT_EQ(ProgressExchange::Create(3, 3, AllReduceLoops()).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> b0 = ranks[0].Local({{T(0, {0}), Loc(0, kInput), -1}, {T(0, {1}), Loc(0, kInput), +1}});
  ASSERT_TRUE(b0.ok()) << b0.status();
  // A refused local batch uses no sequence number.
  EXPECT_FALSE(ranks[0].Local({{T(0, {0}), Loc(0, kInput), -1}}).ok());
  absl::StatusOr<std::string> b1 = ranks[0].Local({{T(0, {1}), Loc(0, kInput), -1}, {T(0, {2}), Loc(0, kInput), +1}});
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(ranks[0].next_sequence(), 2u);

  const ProgressState::Counts before = ranks[1].state().counts();
  absl::Status st = ranks[1].Absorb(*b1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("received batch sequence 1 from rank 0, but rank 0's next is 0"));
  EXPECT_EQ(ranks[1].state().counts(), before);
  ASSERT_TRUE(ranks[1].Absorb(*b0).ok());
  ASSERT_TRUE(ranks[1].Absorb(*b1).ok());
  EXPECT_EQ(ranks[1].expected_sequence(0), 2u);
  st = ranks[1].Absorb(*b1);  // a duplicate
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("sequence 1 from rank 0, but rank 0's next is 2"));
  EXPECT_EQ(ranks[1].state().counts(), ranks[0].state().counts());
  // Its own batch, an unknown rank, and a batch naming an unknown location.
  st = ranks[0].Absorb(*b0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("its own batch"));
  st = ranks[1].Absorb(EncodeProgressBatch(7, 0, {}));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("from rank 7, but there are 3 ranks"));
  st = ranks[1].Absorb(EncodeProgressBatch(2, 0, {{T(0, {0}), 999, +1}}));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("batch 0 from rank 2"));
  EXPECT_EQ(ranks[1].expected_sequence(2), 0u);
  // A corrupt buffer is refused and leaves the sender's sequence where it was.
  std::string corrupt = *b0;
  corrupt[corrupt.size() / 2] ^= 0x10;
  EXPECT_EQ(ranks[2].Absorb(corrupt).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ranks[2].Absorb(b0->substr(0, b0->size() - 1)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ranks[2].expected_sequence(0), 0u);
  EXPECT_TRUE(ranks[2].Absorb(*b0).ok());
}

// Probes for completeness: every location at steps 0..kSteps+1.
void CheckConservative(const ProgressState& view, const ProgressState& truth, int rank) {
  for (int loc : truth.reachability().locations()) {
    for (int64_t s = 0; s <= kSteps + 1; ++s) {
      if (view.IsComplete(T(0, {s}), loc)) {
        ASSERT_TRUE(truth.IsComplete(T(0, {s}), loc))
            << "rank " << rank << " thinks (0; " << s << ") complete at location " << loc << " but work remains";
      }
    }
  }
}

// Runs the three ranks under one random schedule: a rank runs work it holds (a
// pointstamp at its own locations that its state has seen created) as one Local
// batch and broadcasts it; or one queued batch is delivered, in order per
// (sender, receiver). Checks the exchange's laws after every event, and adds to
// *negative_seen each time a rank's state held a negative count.
void RunRandomSchedule(uint32_t seed, int* negative_seen) {
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::shared_ptr<const Reachability> reach = AllReduceLoops();
  std::vector<ProgressExchange> ranks = MakeRanks(reach, Inputs());
  absl::StatusOr<ProgressState> truth = ProgressState::Create(reach, Inputs());
  ASSERT_TRUE(truth.ok());
  std::map<std::pair<int, int>, std::deque<std::string>> inbox;  // (sender, receiver)
  std::vector<std::map<int, Antichain<ScopedTimestamp>>> last_frontier(kRanks);
  int delivered = 0;
  int ran = 0;

  for (int op = 0; op < 20000; ++op) {
    // What can happen now.
    std::vector<std::pair<int, Pointstamp>> runnable;
    for (int r = 0; r < kRanks; ++r) {
      for (const auto& [p, count] : ranks[r].state().counts()) {
        if (count <= 0 || Owner(p.location) != r) continue;
        if (p.location % 100 == kInput && p.time.counters[0] >= kSteps) continue;  // the input's last capability
        runnable.emplace_back(r, p);
      }
    }
    std::vector<std::pair<int, int>> queues;
    for (const auto& [key, q] : inbox) {
      if (!q.empty()) queues.push_back(key);
    }
    if (runnable.empty() && queues.empty()) break;
    const bool deliver = runnable.empty() || (!queues.empty() && uniform(0, 2) != 0);
    if (deliver) {
      const auto [sender, receiver] = queues[uniform(0, static_cast<int>(queues.size()) - 1)];
      std::deque<std::string>& q = inbox[{sender, receiver}];
      absl::Status st = ranks[receiver].Absorb(q.front());
      ASSERT_TRUE(st.ok()) << st;
      q.pop_front();
      ++delivered;
    } else {
      const auto [r, p] = runnable[uniform(0, static_cast<int>(runnable.size()) - 1)];
      const int64_t step = p.time.counters[0];
      std::vector<ProgressDelta> batch = {{p.time, p.location, -1}};
      switch (p.location % 100) {
        case kInput:
          batch.push_back({T(0, {step + 1}), p.location, +1});
          batch.push_back({p.time, Loc(r, kForward), +1});
          break;
        case kForward:
          for (int q = 0; q < kRanks; ++q) {  // one gradient on average, so the work stays bounded
            if (uniform(0, 2) == 0) batch.push_back({p.time, Loc(q, kReduce), +1});
          }
          break;
        case kReduce:
          batch.push_back({p.time, Loc(r, kUpdate), +1});
          break;
        case kUpdate:
          batch.push_back({p.time, Loc(r, kFeedback), +1});
          break;
        case kFeedback:
          if (step + 1 < kSteps) batch.push_back({T(0, {step + 1}), Loc(r, kForward), +1});
          break;
      }
      absl::StatusOr<std::string> encoded = ranks[r].Local(batch);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      absl::Status st = truth->Apply(batch);  // the true state, in the order things happened
      ASSERT_TRUE(st.ok()) << st;
      for (int q = 0; q < kRanks; ++q) {
        if (q != r) inbox[{r, q}].push_back(*encoded);
      }
      ++ran;
    }
    // ViewsAreConservative, and each view's frontiers only move forward.
    for (int r = 0; r < kRanks; ++r) {
      const ProgressState& view = ranks[r].state();
      CheckConservative(view, *truth, r);
      if (::testing::Test::HasFatalFailure()) return;
      for (const auto& [p, count] : view.counts()) *negative_seen += count < 0;
      for (int loc : reach->locations()) {
        Antichain<ScopedTimestamp> f = view.Frontier(loc);
        auto it = last_frontier[r].find(loc);
        if (it != last_frontier[r].end()) {
          for (const ScopedTimestamp& t : f.elements()) {
            ASSERT_TRUE(it->second.LessEqual(t)) << "rank " << r << " location " << loc << " moved back to " << t;
          }
        }
        last_frontier[r][loc] = std::move(f);
      }
    }
  }
  for (const auto& [key, q] : inbox) ASSERT_TRUE(q.empty()) << "the schedule did not finish";
  // EveryRankEndsWithTheSameCounts: the true counts, so the same frontiers.
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ranks[r].state().counts(), truth->counts()) << "rank " << r;
    for (int loc : reach->locations()) EXPECT_EQ(ranks[r].state().Frontier(loc), truth->Frontier(loc)) << loc;
  }
  // Only the inputs' last capabilities remain: every Reduce waits for step kSteps.
  EXPECT_EQ(truth->Frontier(Loc(1, kReduce)).elements(), std::vector<ScopedTimestamp>{T(0, {kSteps})});
  EXPECT_GT(ran, 40);
  EXPECT_GT(delivered, 80);
}

TEST(ProgressExchangeTest, EveryRankEndsWithTheSameCounts) {
  int negative_seen = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    RunRandomSchedule(seed, &negative_seen);
    if (HasFatalFailure()) return;
  }
  // The schedules reach the case Absorb must tolerate: a retirement before its creation.
  EXPECT_GT(negative_seen, 0);
}

TEST(ProgressExchangeTest, ViewsAreConservative) {
  // The same schedules check this after every event; here, the case that needs
  // it: a retirement that reaches a rank before the creation it retires.
  const std::shared_ptr<const Reachability> reach = AllReduceLoops();
  std::vector<ProgressExchange> ranks = MakeRanks(reach, Inputs());
  // Rank 0 runs its input: work at Forward_0, and a gradient to Reduce_1.
  absl::StatusOr<std::string> a = ranks[0].Local(
      {{T(0, {0}), Loc(0, kInput), -1}, {T(0, {1}), Loc(0, kInput), +1}, {T(0, {0}), Loc(0, kForward), +1}});
  ASSERT_TRUE(a.ok());
  absl::StatusOr<std::string> b = ranks[0].Local({{T(0, {0}), Loc(0, kForward), -1}, {T(0, {0}), Loc(1, kReduce), +1}});
  ASSERT_TRUE(b.ok());
  // Rank 1 absorbs both, then consumes the gradient.
  ASSERT_TRUE(ranks[1].Absorb(*a).ok());
  ASSERT_TRUE(ranks[1].Absorb(*b).ok());
  absl::StatusOr<std::string> c = ranks[1].Local({{T(0, {0}), Loc(1, kReduce), -1}, {T(0, {0}), Loc(1, kUpdate), +1}});
  ASSERT_TRUE(c.ok()) << c.status();
  // Rank 2 hears from rank 1 first: a count goes negative, yet rank 2's view still
  // holds step 0 at Update_1 incomplete, through rank 0's input, which it still sees at (0; 0).
  ASSERT_TRUE(ranks[2].Absorb(*c).ok());
  EXPECT_EQ(ranks[2].state().Count(T(0, {0}), Loc(1, kReduce)), -1);
  EXPECT_FALSE(ranks[2].state().IsComplete(T(0, {0}), Loc(1, kUpdate)));
  EXPECT_FALSE(ranks[2].state().IsComplete(T(0, {0}), Loc(1, kReduce)));
  ASSERT_TRUE(ranks[2].Absorb(*a).ok());
  ASSERT_TRUE(ranks[2].Absorb(*b).ok());
  EXPECT_EQ(ranks[2].state().Count(T(0, {0}), Loc(1, kReduce)), 0);
  EXPECT_EQ(ranks[2].state().counts(), ranks[1].state().counts());
  // Rank 2 may not retire what it has not seen created.
  absl::Status st = ranks[2].Local({{T(0, {0}), Loc(2, kReduce), -1}}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("negative"));
}

// ---- A stale-synchronous bound from a frontier that spans ranks --------------------

// Rank r holds a capability at Step_r = r at (0; s) while step s is unfinished;
// every Step_r feeds the parameter server's location kServer. Rank r may begin
// step s iff step s - bound - 1 is complete at every rank's Step location, which
// is the frontier at kServer read locally.
constexpr int kServer = 100;

std::shared_ptr<const Reachability> ParameterServer() {
  ReachabilityBuilder b;
  b.AddLocation(kServer, 1);
  for (int r = 0; r < kRanks; ++r) {
    b.AddLocation(r, 1);
    b.AddEdge(r, kServer, PathSummary::Identity(1));
  }
  absl::StatusOr<Reachability> r = b.Build();
  EXPECT_TRUE(r.ok()) << r.status();
  return std::make_shared<const Reachability>(*std::move(r));
}

class StaleSynchronous {
 public:
  explicit StaleSynchronous(int bound) : bound_(bound) {
    std::vector<ProgressDelta> initial;
    for (int r = 0; r < kRanks; ++r) initial.push_back({T(0, {0}), r, +1});
    ranks_ = MakeRanks(ParameterServer(), initial);
  }

  // Read from rank r's own state only.
  bool MayBegin(int r, int64_t s) const {
    const int64_t waits_on = s - bound_ - 1;
    if (waits_on < 0) return true;
    const ProgressState& view = ranks_[r].state();
    bool every_rank = true;
    for (int q = 0; q < kRanks; ++q) every_rank = every_rank && view.IsComplete(T(0, {waits_on}), q);
    EXPECT_EQ(every_rank, view.IsComplete(T(0, {waits_on}), kServer)) << "the server's frontier spans the ranks";
    return every_rank;
  }

  // Rank r finishes its current step: the capability moves to the next one and
  // the batch goes to every peer's inbox.
  void Finish(int r) {
    const int64_t s = finished_[r];
    absl::StatusOr<std::string> encoded = ranks_[r].Local({{T(0, {s}), r, -1}, {T(0, {s + 1}), r, +1}});
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    ++finished_[r];
    for (int q = 0; q < kRanks; ++q) {
      if (q != r) inbox_[{r, q}].push_back(*encoded);
    }
  }
  // Delivers rank sender's oldest batch not yet at receiver.
  void Deliver(int sender, int receiver) {
    std::deque<std::string>& q = inbox_[{sender, receiver}];
    ASSERT_FALSE(q.empty());
    ASSERT_TRUE(ranks_[receiver].Absorb(q.front()).ok());
    q.pop_front();
  }
  void DeliverAll() {
    for (auto& [key, q] : inbox_) {
      while (!q.empty()) Deliver(key.first, key.second);
    }
  }

  int64_t finished(int r) const { return finished_[r]; }
  int64_t min_finished() const { return *std::min_element(finished_.begin(), finished_.end()); }
  const ProgressState& view(int r) const { return ranks_[r].state(); }
  std::map<std::pair<int, int>, std::deque<std::string>>& inbox() { return inbox_; }

 private:
  int bound_;
  std::vector<ProgressExchange> ranks_;
  std::vector<int64_t> finished_ = std::vector<int64_t>(kRanks, 0);  // the true number of steps each finished
  std::map<std::pair<int, int>, std::deque<std::string>> inbox_;
};

// A random schedule of begins, finishes and deliveries until every rank has
// finished `steps`; returns the largest lag seen when a step began (the step
// minus the least number of steps any rank had finished).
int64_t RunStaleSynchronous(int bound, uint32_t seed, int64_t steps) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  StaleSynchronous ssp(bound);
  std::vector<bool> computing(kRanks, false);
  int64_t max_lag = 0;
  for (int op = 0; op < 10000; ++op) {
    std::vector<int> can_begin, can_finish;
    for (int r = 0; r < kRanks; ++r) {
      if (computing[r]) {
        can_finish.push_back(r);
      } else if (ssp.finished(r) < steps && ssp.MayBegin(r, ssp.finished(r))) {
        can_begin.push_back(r);
      }
    }
    std::vector<std::pair<int, int>> queues;
    for (const auto& [key, q] : ssp.inbox()) {
      if (!q.empty()) queues.push_back(key);
    }
    if (can_begin.empty() && can_finish.empty() && queues.empty()) break;
    const int kind = uniform(0, 2);
    if (kind == 0 && !can_begin.empty()) {
      const int r = can_begin[uniform(0, static_cast<int>(can_begin.size()) - 1)];
      const int64_t lag = ssp.finished(r) - ssp.min_finished();
      EXPECT_LE(lag, bound) << "rank " << r << " began step " << ssp.finished(r) << " too early";
      max_lag = std::max(max_lag, lag);
      computing[r] = true;
    } else if (kind == 1 && !can_finish.empty()) {
      const int r = can_finish[uniform(0, static_cast<int>(can_finish.size()) - 1)];
      ssp.Finish(r);
      computing[r] = false;
    } else if (!queues.empty()) {
      const auto [sender, receiver] = queues[uniform(0, static_cast<int>(queues.size()) - 1)];
      ssp.Deliver(sender, receiver);
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ssp.finished(r), steps) << "rank " << r << " did not finish: the bound wedged the run";
    EXPECT_EQ(ssp.view(r).Frontier(kServer).elements(), std::vector<ScopedTimestamp>{T(0, {steps})});
  }
  return max_lag;
}

TEST(ProgressExchangeTest, StaleSynchronousBoundZeroIsSynchronous) {
  StaleSynchronous ssp(/*bound=*/0);
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(ssp.MayBegin(r, 0));
  ssp.Finish(0);
  EXPECT_FALSE(ssp.MayBegin(0, 1)) << "ranks 1 and 2 have not finished step 0";
  ssp.Finish(1);
  ssp.Finish(2);
  EXPECT_FALSE(ssp.MayBegin(0, 1)) << "rank 0 has not heard yet";
  ssp.Deliver(1, 0);
  EXPECT_FALSE(ssp.MayBegin(0, 1));
  EXPECT_EQ(ssp.view(0).Frontier(kServer).elements(), std::vector<ScopedTimestamp>{T(0, {0})});
  ssp.Deliver(2, 0);
  EXPECT_TRUE(ssp.MayBegin(0, 1));
  EXPECT_EQ(ssp.view(0).Frontier(kServer).elements(), std::vector<ScopedTimestamp>{T(0, {1})});
  EXPECT_FALSE(ssp.MayBegin(1, 1)) << "rank 1 has not heard from rank 0 and rank 2";
  ssp.DeliverAll();
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(ssp.MayBegin(r, 1));
  for (uint32_t seed = 1; seed <= 8; ++seed) EXPECT_EQ(RunStaleSynchronous(0, seed, 6), 0) << seed;
}

TEST(ProgressExchangeTest, StaleSynchronousBoundTwoAllowsTwoStepsOfLag) {
  StaleSynchronous ssp(/*bound=*/2);
  // Rank 0 alone runs steps 0, 1 and 2, then waits for step 0 everywhere.
  for (int64_t s = 0; s <= 2; ++s) {
    ASSERT_TRUE(ssp.MayBegin(0, s)) << s;
    ssp.Finish(0);
  }
  EXPECT_FALSE(ssp.MayBegin(0, 3));
  ssp.Finish(1);
  ssp.Deliver(1, 0);
  EXPECT_FALSE(ssp.MayBegin(0, 3)) << "rank 2 has not finished step 0";
  ssp.Finish(2);
  ssp.Deliver(2, 0);
  EXPECT_TRUE(ssp.MayBegin(0, 3));
  EXPECT_FALSE(ssp.MayBegin(0, 4));
  EXPECT_EQ(ssp.view(0).Frontier(kServer).elements(), std::vector<ScopedTimestamp>{T(0, {1})});
  int64_t max_lag = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) max_lag = std::max(max_lag, RunStaleSynchronous(2, seed, 6));
  EXPECT_EQ(max_lag, 2) << "the random schedules use the whole bound";
}

}  // namespace
}  // namespace nereid
