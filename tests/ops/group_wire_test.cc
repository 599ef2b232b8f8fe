// The group collectives with a 16-bit wire (compress(fp16|bf16) on gossip's
// pushes), ranks as threads of this process over real Gloo on loopback:
//   GroupSendRecv: x travels rounded, half the bytes; the receiver gets the
//     rounded x exactly, and the sender keeps what rounding took off, so the
//     members' sum of y is their sum of x (push-sum's mass is conserved);
//   GroupAllReduce: about half float32's bytes, and every member ends with
//     the same sum, within the 16-bit format's rounding of the float32 sum.

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/gloo_test_world.h"
#include "comm/wire_format.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "schedulers/collective_engine.h"
#include "schedulers/executor.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using testing::Attr;
using testing::OpNode;
using testing::ShapeValue;

constexpr int64_t kRows = 3, kCols = 7;  // 21 values: an odd count fills half a slot
constexpr int64_t kValues = kRows * kCols;

std::string BuildGraph(const std::string& op, const std::string& wire, int world) {
  std::string text = absl::StrCat("records { group { name: \"g\" size: ", world, " } }\n");
  text += OpNode("x", "Parameter", {}, Attr("shape", ShapeValue({kRows, kCols})));
  std::string attrs = Attr("group", "s: \"g\"") + Attr("group_size", absl::StrCat("i: ", world)) +
                      Attr("bucket", "i: 0") + Attr("wire", absl::StrCat("s: \"", wire, "\""));
  if (op == "GroupSendRecv") attrs += Attr("offsets", "list { i: 1 }");
  text += OpNode("y", op, {"x"}, attrs);
  return text;
}

// Values with more bits than a 16-bit format keeps, spread over magnitudes.
std::vector<float> Draw(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(kValues);
  for (size_t i = 0; i < v.size(); ++i) v[i] = u(rng) * std::pow(10.0f, static_cast<float>(i % 5) - 2.0f);
  return v;
}

std::vector<float> Rounded(WireType wire, const std::vector<float>& x) {
  std::vector<uint16_t> codes(x.size());
  EncodeWire(wire, x, codes.data());
  std::vector<float> back(x.size());
  DecodeWire(wire, codes.data(), absl::MakeSpan(back));
  return back;
}

struct RankResult {
  std::vector<float> x, y;
  int64_t bytes_sent = 0;
};

// Runs `op` once on every rank; each rank's input, output and bytes sent.
std::vector<RankResult> RunOnce(const std::string& op, const std::string& wire, int world) {
  std::vector<RankResult> results(world);
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> comms = nereid::testing::ConnectWorld(
      nereid::testing::LocalFileSpec(absl::StrCat("wire_", op, "_", wire, "_", world)), world, absl::Seconds(30));
  EXPECT_TRUE(comms.ok()) << comms.status();
  if (!comms.ok()) return {};
  std::vector<absl::Status> statuses = nereid::testing::RunOnRanks(world, [&](int rank) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, testing::LoadText(BuildGraph(op, wire, world)));
    Communicator* comm = (*comms)[rank].get();
    CollectiveEngine engine(comm, /*per_step=*/1, absl::Seconds(30));
    ExecutorOptions options;
    options.group_collectives["g"] = &engine;
    options.group_ranks["g"] = rank;
    ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(graph.get(), options));
    results[rank].x = Draw(11 + rank);
    ASSIGN_OR_RETURN(Tensor x, Tensor::FromVector({kRows, kCols}, results[rank].x));
    RETURN_IF_ERROR(executor->SetState("x", x));
    const int64_t before = comm->traffic().bytes_sent;
    engine.Reset(0);
    ASSIGN_OR_RETURN(std::vector<Tensor> out, executor->Evaluate(StepInfo{}, {}, {"y"}));
    results[rank].y.assign(out[0].data<float>(), out[0].data<float>() + kValues);
    results[rank].bytes_sent = comm->traffic().bytes_sent - before;
    return absl::OkStatus();
  });
  EXPECT_TRUE(nereid::testing::AllOk(statuses).ok()) << nereid::testing::AllOk(statuses);
  return results;
}

class GroupWireTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GroupWireTest, SendRecvKeepsTheSumAndHalvesTheBytes) {
  const auto& [wire_name, world] = GetParam();
  absl::StatusOr<WireType> wire = ParseWireType(wire_name);
  ASSERT_TRUE(wire.ok());
  std::vector<RankResult> r = RunOnce("GroupSendRecv", wire_name, world);
  ASSERT_EQ(r.size(), static_cast<size_t>(world));
  double sum_x = 0, sum_y = 0, scale = 0;
  for (int rank = 0; rank < world; ++rank) {
    const RankResult& from = r[(rank - 1 + world) % world];
    const std::vector<float> arrived = Rounded(*wire, from.x);
    const std::vector<float> own_sent = Rounded(*wire, r[rank].x);
    int rounded = 0;
    for (int64_t i = 0; i < kValues; ++i) {
      // y = the in-neighbour's x, rounded, + what rounding took off this x.
      EXPECT_FLOAT_EQ(r[rank].y[i], arrived[i] + (r[rank].x[i] - own_sent[i])) << "rank " << rank << " value " << i;
      rounded += own_sent[i] != r[rank].x[i];
      sum_x += r[rank].x[i];
      sum_y += r[rank].y[i];
      scale += std::fabs(r[rank].x[i]);
    }
    EXPECT_GT(rounded, kValues / 2) << "the values should lose bits on this wire";
    // 21 codes of 2 bytes, carried in 11 four-byte slots.
    EXPECT_EQ(r[rank].bytes_sent, (kValues + 1) / 2 * 4) << "rank " << rank;
  }
  EXPECT_NEAR(sum_y, sum_x, 1e-6 * scale);
}

TEST_P(GroupWireTest, AllReduceAgreesWithinTheWireRounding) {
  const auto& [wire_name, world] = GetParam();
  std::vector<RankResult> r = RunOnce("GroupAllReduce", wire_name, world);
  std::vector<RankResult> full = RunOnce("GroupAllReduce", "float32", world);
  ASSERT_EQ(r.size(), static_cast<size_t>(world));
  ASSERT_EQ(full.size(), static_cast<size_t>(world));
  // The 16-bit wire is used: about half float32's bytes.
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_LE(r[rank].bytes_sent, full[rank].bytes_sent * 0.6) << "rank " << rank;
  }
  const double relative = wire_name == "float16" ? 1.0 / 1024 : 1.0 / 128;  // a few ulps of the format
  for (int64_t i = 0; i < kValues; ++i) {
    double exact = 0, magnitude = 0;
    for (const RankResult& rank : r) {
      exact += rank.x[i];
      magnitude += std::fabs(rank.x[i]);
    }
    for (int rank = 0; rank < world; ++rank) {
      EXPECT_EQ(r[rank].y[i], r[0].y[i]) << "rank " << rank << " value " << i;  // every member the same
      EXPECT_NEAR(r[rank].y[i], exact, 2 * world * relative * magnitude) << "value " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Wires, GroupWireTest,
                         ::testing::Combine(::testing::Values("float16", "bfloat16"), ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param), "_ranks");
                         });

}  // namespace
}  // namespace nereid
