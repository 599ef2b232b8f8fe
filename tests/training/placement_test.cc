// Placed plans (graph/placement.h, ops/placement_plan.h) in one process:
// placement follows the forward nodes through autodiff and the optimizer,
// each rank's part holds its own nodes and its ends of the cut pairs, and
// plans that would deadlock or mismatch are refused naming ranks and nodes.
// The same plans across real processes: tests/distributed/stage_split_test.cc.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

#include "gmock/gmock.h"
#include "graph/graph_io.h"
#include "graph/import_export.h"
#include "graph/placement.h"
#include "gtest/gtest.h"
#include "ops/collective_schedule.h"
#include "ops/model_loader.h"
#include "plan/split_by_rank.h"
#include "plan/plan_file.h"
#include "passes/pass_manager.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

// x (every rank) -> h = x W0 on rank 0 -> Send -> Recv on rank 1 -> y = h W1, loss on rank 1.
constexpr char kTwoRanks[] = R"pb(
  version: 1
  records { workers: 2 }
  attr { key: "loss" value { s: "loss" } }
  attr { key: "logits" value { s: "y" } }
  node { name: "x" op: "Input" attr { key: "shape" value { shape { dim: -1 dim: 4 } } } attr { key: "feed" value { s: "x" } } }
  node { name: "labels" op: "Input" attr { key: "shape" value { shape { dim: -1 } } } attr { key: "dtype" value { type: DT_INT32 } } attr { key: "feed" value { s: "labels" } } }
  node { name: "w0" op: "Parameter" worker: 0 attr { key: "shape" value { shape { dim: 4 dim: 3 } } } }
  node { name: "h" op: "MatMul" input: "x" input: "w0" worker: 0 }
  node { name: "h/send" op: "Send" input: "h" worker: 0 }
  node { name: "h/recv" op: "Recv" input: "h/send" worker: 1 }
  node { name: "w1" op: "Parameter" worker: 1 attr { key: "shape" value { shape { dim: 3 dim: 2 } } } }
  node { name: "y" op: "MatMul" input: "h/recv" input: "w1" worker: 1 }
  node { name: "loss" op: "SoftmaxCrossEntropy" input: "y" input: "labels" }
)pb";

absl::StatusOr<std::unique_ptr<Graph>> Load(const std::string& text) {
  absl::StatusOr<GraphFile> file = ParseGraphText(text, "placement_test.pbtxt");
  if (!file.ok()) return file.status();
  return LoadModel(*file);
}

absl::StatusOr<std::unique_ptr<Graph>> Trained(const std::string& text) {
  auto graph = Load(text);
  if (!graph.ok()) return graph.status();
  auto pipeline = ParsePipeline("autodiff,sgd(lr=0.1)");
  if (!pipeline.ok()) return pipeline.status();
  auto reports = RunPipeline(**graph, *pipeline);
  if (!reports.ok()) return reports.status();
  return graph;
}

std::string Where(const Graph& g, const std::string& name) { return PlacementOf(*g.FindNode(name)).ToString(); }

TEST(PlacementTest, GradientsAndUpdatesRunWhereTheirForwardNodesDo) {
  auto graph = Trained(kTwoRanks);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph& g = **graph;
  EXPECT_EQ(Where(g, "loss"), "rank 1");  // from y
  EXPECT_EQ(Where(g, "w1/grad"), "rank 1");
  EXPECT_EQ(Where(g, "w0/grad"), "rank 0");
  // The activation's gradient goes back through a pair of its own.
  EXPECT_EQ(g.FindNode("h/recv/grad/send")->op(), "Send");
  EXPECT_EQ(Where(g, "h/recv/grad/send"), "rank 1");
  EXPECT_EQ(g.FindNode("h/recv/grad/x")->op(), "Recv");
  EXPECT_EQ(Where(g, "h/recv/grad/x"), "rank 0");
  // Pairs are numbered, and evaluation runs only the forward one.
  EXPECT_EQ(NodeAttrInt(*g.FindNode("h/send"), "channel", -1), NodeAttrInt(*g.FindNode("h/recv"), "channel", -2));
  EXPECT_NE(NodeAttrInt(*g.FindNode("h/recv"), "channel", -1), NodeAttrInt(*g.FindNode("h/recv/grad/x"), "channel", -1));
  EXPECT_TRUE(NodeAttrBool(*g.FindNode("h/recv"), "eval", false));
  EXPECT_FALSE(NodeAttrBool(*g.FindNode("h/recv/grad/x"), "eval", true));
  EXPECT_TRUE(SplitPlanAcrossRanks(g, 2).ok());
}

TEST(PlacementTest, EachRanksPartHoldsItsNodesAndItsEndsOfThePairs) {
  auto graph = Trained(kTwoRanks);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto first = ProjectForRank(**graph, 0, 2);
  auto second = ProjectForRank(**graph, 1, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE((*first)->FindNode("w0"), nullptr);
  EXPECT_EQ((*first)->FindNode("w1"), nullptr);
  EXPECT_EQ((*first)->FindNode("loss"), nullptr);
  EXPECT_NE((*first)->FindNode("x"), nullptr);       // inputs are fed everywhere
  EXPECT_NE((*second)->FindNode("labels"), nullptr);
  const Node* recv = (*second)->FindNode("h/recv");
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(recv->num_inputs(), 0);
  EXPECT_EQ(NodeAttrInt(*recv, "peer", -1), 0);
  EXPECT_EQ(recv->outputs()[0].shape.ToString(), "[?,3]");
  EXPECT_EQ(NodeAttrInt(*(*first)->FindNode("h/send"), "peer", -1), 1);
}

TEST(PlacementTest, ANodeReadingTwoRanksIsRefusedNamingBoth) {
  std::string text = kTwoRanks;
  text += R"pb(node { name: "mixed" op: "Add" input: "h" input: "h/recv" })pb";
  auto graph = Trained(text);
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr("'mixed'"));
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr("reads values placed on rank 0 and on rank 1"));
}

TEST(PlacementTest, AValueCrossingRanksWithoutAPairIsRefused) {
  std::string text = kTwoRanks;
  text += R"pb(node { name: "late" op: "Relu" input: "h" worker: 1 })pb";
  auto graph = Trained(text);
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(std::string(graph.status().message()),
              HasSubstr("runs on rank 1 but reads 'h' on rank 0: move the value with Send and Recv"));
}

// A hand-edited plan: rank 1 waits for a transfer no rank sends.
TEST(PlacementTest, ARecvWithoutItsSendIsRefusedBeforeAnythingRuns) {
  std::string text = kTwoRanks;
  text += R"pb(node {
    name: "orphan" op: "Recv" worker: 1
    attr { key: "peer" value { i: 0 } }
    attr { key: "channel" value { i: 7 } }
    attr { key: "shape" value { shape { dim: -1 dim: 3 } } }
  })pb";
  auto graph = Load(text);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::Status s = SplitPlanAcrossRanks(**graph, 2).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1's Recv 'orphan' has no Send on rank 0: rank 1 would wait forever"));
}

// Two ends of one rank with the same peer and channel would take each
// other's messages.
TEST(PlacementTest, EndsSharingPeerAndChannelAreRefused) {
  std::string text = kTwoRanks;
  for (const char* name : {"a", "b"}) {
    text += absl::StrCat(R"pb(node { name: ")pb", name, R"pb(" op: "Recv" worker: 1
      attr { key: "peer" value { i: 0 } } attr { key: "channel" value { i: 9 } }
      attr { key: "shape" value { shape { dim: 2 } } } })pb");
  }
  auto graph = Load(text);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_THAT(std::string(SplitPlanAcrossRanks(**graph, 2).status().message()),
              HasSubstr("rank 1: Recvs 'a' and 'b' share peer and channel 9"));
}

// A group one of whose members would issue a collective the other never
// joins: the whole plan's numbering is fine, the parts are not.
TEST(PlacementTest, GroupMembersIssuingDifferentCollectivesAreRefused) {
  std::string text = absl::StrReplaceAll(
      kTwoRanks, {{"records { workers: 2 }", "records { workers: 2 group { name: \"pair\" layout: RANKS size: 2 } }"}});
  text += R"pb(
  node { name: "sum0" op: "GroupAllReduce" input: "h" worker: 0
         attr { key: "group" value { s: "pair" } } attr { key: "group_size" value { i: 2 } } attr { key: "bucket" value { i: 0 } } })pb";
  auto graph = Load(text);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::Status s = SplitPlanAcrossRanks(**graph, 2).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("group 'pair.0': collective 0 is 'sum0' (GroupAllReduce of [?,3]) on "
                                                  "rank 0 but nothing on rank 1"));
}

TEST(PlacementTest, StageSplitRefusesBadRequestsBeforeAnythingRuns) {
  auto graph = LoadModel("models/mlp_fashion.pbtxt");
  ASSERT_TRUE(graph.ok()) << graph.status();
  (*graph)->mutable_header()->mutable_records()->set_workers(3);
  auto bad_layer = ParsePipeline("stage_split(at=fc9),autodiff");
  ASSERT_TRUE(bad_layer.ok());
  EXPECT_THAT(std::string(RunPipeline(**graph, *bad_layer).status().message()), HasSubstr("'fc9' is not a layer"));
  auto two_parts = ParsePipeline("stage_split(at=fc2),autodiff");
  ASSERT_TRUE(two_parts.ok());
  EXPECT_THAT(std::string(RunPipeline(**graph, *two_parts).status().message()),
              HasSubstr("2 parts run on 2 workers, but the plan is for 3"));
  auto backwards = ParsePipeline("stage_split(at=fc3+fc2),autodiff");
  ASSERT_TRUE(backwards.ok());
  EXPECT_THAT(std::string(RunPipeline(**graph, *backwards).status().message()),
              HasSubstr("name the layers in the order the model runs them"));
}

// The parameter server updates a parameter chunk by chunk when its update is
// elementwise: each chunk has its own Adam update on the server, reading its
// slices of the parameter and both moments, so a chunk's pull waits for its
// own gradients only; the whole update is gone and the plan still checks.
TEST(PlacementTest, TheParameterServerUpdatesEachChunkOnItsOwn) {
  auto graph = LoadModel("models/logreg_fashion.pbtxt");
  ASSERT_TRUE(graph.ok()) << graph.status();
  (*graph)->mutable_header()->mutable_records()->set_workers(3);
  auto pipeline = ParsePipeline("autodiff,adam(lr=0.001),parameter_server(servers=1,chunk_kb=16)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(RunPipeline(**graph, *pipeline).ok());
  const Graph& g = **graph;
  EXPECT_EQ(g.FindNode("linear/weight/adam"), nullptr);
  EXPECT_EQ(g.FindNode("linear/weight/grad"), nullptr);
  // 784 x 10 floats in chunks of 4096: two chunks.
  for (const char* chunk : {"linear/weight/adam/chunk0", "linear/weight/adam/chunk1"}) {
    const Node* update = g.FindNode(chunk);
    ASSERT_NE(update, nullptr) << chunk;
    EXPECT_EQ(update->op(), "ApplyAdam");
    EXPECT_EQ(Where(g, chunk), "rank 2");
    EXPECT_EQ(update->input_edge(1)->src->op(), "Gradient");
    for (int input : {0, 3, 4}) EXPECT_EQ(update->input_edge(input)->src->op(), "Slice") << chunk << " input " << input;
  }
  EXPECT_EQ(g.FindNode("linear/weight/adam/chunk1")->outputs()[0].shape.KnownElements(), 7840 - 4096);
  EXPECT_EQ(g.FindNode("linear/weight/adam/chunk2"), nullptr);
  // A parameter's chunks are pushed in order: chunk 1's Send waits for chunk 0's.
  const Node* second_push = g.FindNode("ps/linear/weight/chunk1/push");
  ASSERT_NE(second_push, nullptr);
  ASSERT_EQ(second_push->control_inputs().size(), 1u);
  EXPECT_EQ(second_push->control_inputs()[0]->src->name(), "ps/linear/weight/chunk0/push");
  EXPECT_TRUE(g.FindNode("ps/linear/weight/chunk0/push")->control_inputs().empty());
  EXPECT_TRUE(SplitPlanAcrossRanks(g, 3).ok());
}

// Shapes the plan knows whole (a batch of 8): with place(comm=device) every
// transfer goes on the device, issued in each rank's order of device
// transfers, which the plan check plays out before anything runs.
constexpr char kRoundTrip[] = R"pb(
  version: 1
  records { workers: 2 }
  attr { key: "loss" value { s: "loss" } }
  attr { key: "logits" value { s: "y/recv" } }
  node { name: "x" op: "Input" attr { key: "shape" value { shape { dim: 8 dim: 4 } } } attr { key: "feed" value { s: "x" } } }
  node { name: "labels" op: "Input" attr { key: "shape" value { shape { dim: 8 } } } attr { key: "dtype" value { type: DT_INT32 } } attr { key: "feed" value { s: "labels" } } }
  node { name: "w0" op: "Parameter" worker: 0 attr { key: "shape" value { shape { dim: 4 dim: 3 } } } }
  node { name: "h" op: "MatMul" input: "x" input: "w0" worker: 0 }
  node { name: "h/send" op: "Send" input: "h" worker: 0 }
  node { name: "h/recv" op: "Recv" input: "h/send" worker: 1 }
  node { name: "w1" op: "Parameter" worker: 1 attr { key: "shape" value { shape { dim: 3 dim: 2 } } } }
  node { name: "y" op: "MatMul" input: "h/recv" input: "w1" worker: 1 }
  node { name: "y/send" op: "Send" input: "y" worker: 1 }
  node { name: "y/recv" op: "Recv" input: "y/send" worker: 0 }
  node { name: "loss" op: "SoftmaxCrossEntropy" input: "y/recv" input: "labels" worker: 0 }
)pb";

absl::StatusOr<std::unique_ptr<Graph>> RoundTripOnTheSim() {
  auto graph = Load(kRoundTrip);
  if (!graph.ok()) return graph.status();
  auto pipeline = ParsePipeline("autodiff,sgd(lr=0.1),place(device=sim,comm=device)");
  if (!pipeline.ok()) return pipeline.status();
  if (auto reports = RunPipeline(**graph, *pipeline); !reports.ok()) return reports.status();
  return graph;
}

TEST(PlacementTest, DeviceTransfersAreIssuedInAnOrderBothEndsAgreeOn) {
  auto graph = RoundTripOnTheSim();
  ASSERT_TRUE(graph.ok()) << graph.status();
  int on_device = 0;
  for (const Node* n : (*graph)->nodes()) {
    on_device += (n->op() == "Send" || n->op() == "Recv") && n->def().device() == "sim:0" ? 1 : 0;
  }
  EXPECT_EQ(on_device, 8);  // h and y forward, and their gradients back
  auto parts = SplitPlanAcrossRanks(**graph, 2);
  ASSERT_TRUE(parts.ok()) << parts.status();
  // Each rank's transfers by their place in its order, as (phase, channel,
  // sender, receiver): both ranks hold one end of each, in the same order.
  std::vector<std::vector<std::vector<int64_t>>> orders(2);
  for (int rank : {0, 1}) {
    const Graph& part = *(*parts)[rank];
    const TransferBuckets buckets = DeviceTransferBuckets(part, rank);
    EXPECT_EQ(buckets.per_step, 4);        // h and y forward, their gradients back
    EXPECT_EQ(buckets.per_evaluation, 2);  // evaluation runs the forward ones only
    orders[rank].resize(buckets.per_step);
    for (const Node* n : part.nodes()) {
      auto found = buckets.of_node.find(n->id());
      if (found == buckets.of_node.end()) continue;
      const TransferBucket& bucket = found->second;
      const int64_t peer = NodeAttrInt(*n, "peer", -1);
      const bool send = n->op() == "Send";
      orders[rank][bucket.step] = {NodeAttrInt(*n, "phase", 0), NodeAttrInt(*n, "channel", -1), send ? rank : peer,
                                   send ? peer : rank};
    }
  }
  EXPECT_EQ(orders[0], orders[1]);
  // h goes to rank 1 before y comes back; the gradients after both.
  EXPECT_EQ(orders[0][0][2], 0);
  EXPECT_EQ(orders[0][1][2], 1);
}

// The colocated servers' point-to-point exchange sends some chunks to the
// rank itself: on the sim each such Send is issued before its Recv (the
// host's self-delivery would wait for ever the other way round).
TEST(PlacementTest, ATransferToTheRankItselfSendsBeforeItReceives) {
  auto graph = LoadModel("models/mlp_fashion.pbtxt");
  ASSERT_TRUE(graph.ok()) << graph.status();
  (*graph)->mutable_header()->mutable_records()->set_workers(2);
  auto pipeline = ParsePipeline(
      "autodiff,sgd(lr=0.05),parameter_server(colocated=true,exchange=p2p,chunk_kb=64),place(device=sim,comm=device)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(RunPipeline(**graph, *pipeline).ok());
  auto parts = SplitPlanAcrossRanks(**graph, 2);
  ASSERT_TRUE(parts.ok()) << parts.status();
  int to_itself = 0;
  for (int rank : {0, 1}) {
    const Graph& part = *(*parts)[rank];
    const TransferBuckets buckets = DeviceTransferBuckets(part, rank);
    std::map<std::pair<int64_t, int64_t>, int> send_bucket;  // (phase, channel) of a Send to itself
    for (const Node* n : part.nodes()) {
      if (n->op() == "Send" && IsDeviceTransfer(*n) && NodeAttrInt(*n, "peer", -1) == rank) {
        send_bucket[{NodeAttrInt(*n, "phase", 0), NodeAttrInt(*n, "channel", -1)}] = buckets.of_node.at(n->id()).step;
      }
    }
    for (const Node* n : part.nodes()) {
      if (n->op() != "Recv" || !IsDeviceTransfer(*n) || NodeAttrInt(*n, "peer", -1) != rank) continue;
      auto send = send_bucket.find({NodeAttrInt(*n, "phase", 0), NodeAttrInt(*n, "channel", -1)});
      ASSERT_NE(send, send_bucket.end()) << n->name();
      EXPECT_EQ(send->second + 1, buckets.of_node.at(n->id()).step) << n->name();
      ++to_itself;
    }
  }
  EXPECT_GT(to_itself, 1);
}

// A third rank with no transfers (a per-rank plan file's own graph): the
// device transfers' communicator spans every rank, so the parts are refused.
TEST(PlacementTest, DeviceTransfersOnSomeRanksOnlyAreRefused) {
  auto graph = RoundTripOnTheSim();
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto parts = SplitPlanAcrossRanks(**graph, 2);
  ASSERT_TRUE(parts.ok()) << parts.status();
  auto alone = LoadModel("models/mlp_fashion.pbtxt");
  ASSERT_TRUE(alone.ok()) << alone.status();
  absl::Status refused = CheckDeviceTransferOrder({(*parts)[0].get(), (*parts)[1].get(), alone->get()});
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("has transfers placed on a device and rank 2 has none"));
}

TEST(PlacementTest, DeviceTransfersInAnOrderTheDataFlowBreaksAreRefused) {
  auto graph = RoundTripOnTheSim();
  ASSERT_TRUE(graph.ok()) << graph.status();
  // h's pair numbered after y's, which needs h: rank 1 would send y first.
  for (const char* end : {"h/send", "h/recv"}) {
    (*(*graph)->FindNode(end)->mutable_def()->mutable_attr())["channel"].set_i(900);
  }
  absl::Status refused = SplitPlanAcrossRanks(**graph, 2).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("rank 1: the device transfer 'y/send'"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("before a transfer its value depends on"));
}

TEST(PlacementTest, DeviceTransfersWhoseEndsDisagreeOnTheirPlaceAreRefused) {
  auto graph = RoundTripOnTheSim();
  ASSERT_TRUE(graph.ok()) << graph.status();
  // Only the Send of h is put in a later phase: the ends no longer meet.
  (*(*graph)->FindNode("h/send")->mutable_def()->mutable_attr())["phase"].set_i(1);
  absl::Status refused = SplitPlanAcrossRanks(**graph, 2).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("the device transfers would wait for ever"));
}

// Left to the pass, chunks are 256 KiB, larger where the model would need
// more chunks than a pair has channels (1024): a model it would refuse with
// chunk_kb=256 plans with 512 KiB chunks. Planning allocates nothing.
TEST(PlacementTest, TheParameterServerRaisesItsDefaultChunkToFitTheChannels) {
  const std::string wide = R"pb(
    version: 1
    records { workers: 2 }
    attr { key: "loss" value { s: "loss" } }
    attr { key: "logits" value { s: "y" } }
    node { name: "x" op: "Input" attr { key: "shape" value { shape { dim: -1 dim: 784 } } } attr { key: "feed" value { s: "x" } } }
    node { name: "labels" op: "Input" attr { key: "shape" value { shape { dim: -1 } } } attr { key: "dtype" value { type: DT_INT32 } } attr { key: "feed" value { s: "labels" } } }
    node { name: "w" op: "Parameter" attr { key: "shape" value { shape { dim: 784 dim: 100000 } } } }
    node { name: "y" op: "MatMul" input: "x" input: "w" }
    node { name: "loss" op: "SoftmaxCrossEntropy" input: "y" input: "labels" }
  )pb";
  auto plan = [&](const std::string& options) -> absl::StatusOr<std::vector<PassReport>> {
    auto graph = Load(wide);
    if (!graph.ok()) return graph.status();
    auto pipeline = ParsePipeline(absl::StrCat("autodiff,sgd(lr=0.1),parameter_server(servers=1", options, ")"));
    if (!pipeline.ok()) return pipeline.status();
    return RunPipeline(**graph, *pipeline);
  };
  // 78.4 million floats: 1197 chunks of 256 KiB.
  auto explicit_256 = plan(",chunk_kb=256");
  ASSERT_FALSE(explicit_256.ok());
  EXPECT_THAT(std::string(explicit_256.status().message()), HasSubstr("more than 1024 chunks; raise chunk_kb (256)"));
  auto chosen = plan("");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_THAT(absl::StrJoin(chosen->back().notes, "\n"), HasSubstr("599 chunks of at most 512 KiB"));
}

// mode=ssp is Pipe-SGD's delay line on the servers' chunk gradients: each
// update reads a gradient `staleness` steps old from state on the server,
// and the workers keep staleness + 1 steps in flight; staleness=0 plans
// exactly what sync plans.
TEST(PlacementTest, StaleSynchronousServersDelayTheirChunkGradients) {
  auto plan = [](const std::string& options) -> std::unique_ptr<Graph> {
    auto graph = LoadModel("models/logreg_fashion.pbtxt");
    EXPECT_TRUE(graph.ok()) << graph.status();
    (*graph)->mutable_header()->mutable_records()->set_workers(3);
    auto pipeline = ParsePipeline(absl::StrCat("autodiff,sgd(lr=0.1),parameter_server(servers=1,chunk_kb=16", options, ")"));
    EXPECT_TRUE(pipeline.ok()) << pipeline.status();
    auto reports = RunPipeline(**graph, *pipeline);
    EXPECT_TRUE(reports.ok()) << reports.status();
    return std::move(*graph);
  };
  std::unique_ptr<Graph> ssp = plan(",mode=ssp,staleness=2");
  const Graph& g = *ssp;
  const Node* update = g.FindNode("linear/weight/sgd/chunk1");
  ASSERT_NE(update, nullptr);
  const Node* gradient = update->input_edge(1)->src;
  EXPECT_EQ(gradient->op(), "Gradient");
  // Gradient <- delay_2 <- (Feedback) delay_1 <- (Feedback) the mean chunk.
  const Node* delayed = gradient->input_edge(0)->src;
  EXPECT_EQ(delayed->name(), absl::StrCat(gradient->name(), "/delay_2"));
  EXPECT_EQ(delayed->op(), "Parameter");
  EXPECT_EQ(Where(g, delayed->name()), "rank 2");
  EXPECT_NE(g.FindNode(absl::StrCat(gradient->name(), "/delay_1")), nullptr);
  EXPECT_EQ(g.FindNode(absl::StrCat(gradient->name(), "/delay_3")), nullptr);
  ASSERT_EQ(g.header().loop_size(), 1);
  EXPECT_EQ(g.header().loop(0).max_in_flight(), 3);
  auto parts = SplitPlanAcrossRanks(g, 3);
  ASSERT_TRUE(parts.ok()) << parts.status();
  // A worker holds no delay state; the server holds all of it.
  EXPECT_EQ((*parts)[0]->FindNode(delayed->name()), nullptr);
  EXPECT_NE((*parts)[2]->FindNode(delayed->name()), nullptr);

  EXPECT_EQ(GraphDefToText(ExportGraph(*plan(",mode=ssp,staleness=0"))), GraphDefToText(ExportGraph(*plan(""))));
  EXPECT_EQ(GraphDefToText(ExportGraph(*plan(",mode=sync,staleness=5"))), GraphDefToText(ExportGraph(*plan(""))));
  auto graph = LoadModel("models/logreg_fashion.pbtxt");
  ASSERT_TRUE(graph.ok());
  (*graph)->mutable_header()->mutable_records()->set_workers(3);
  for (const char* bad : {"parameter_server(mode=async)", "parameter_server(mode=ssp,staleness=-1)",
                          "parameter_server(mode=ssp),pipeline(width=2)"}) {
    auto pipeline = ParsePipeline(absl::StrCat("autodiff,sgd(lr=0.1),", bad));
    ASSERT_TRUE(pipeline.ok()) << bad;
    auto copy = LoadModel("models/logreg_fashion.pbtxt");
    (*copy)->mutable_header()->mutable_records()->set_workers(3);
    EXPECT_FALSE(RunPipeline(**copy, *pipeline).ok()) << bad;
  }
}

// split=true balances chunks, not parameters: logreg's weight (7840
// floats, two chunks of 4096 and 3744) goes half to each of 2 servers, each
// chunk with its own piece of the weight and of Adam's moments, and the
// whole weight is gone from the servers.
TEST(PlacementTest, ASplitParameterKeepsEachChunkOnItsOwnServer) {
  auto graph = LoadModel("models/logreg_fashion.pbtxt");
  ASSERT_TRUE(graph.ok()) << graph.status();
  (*graph)->mutable_header()->mutable_records()->set_workers(4);
  auto pipeline = ParsePipeline("autodiff,adam(lr=0.001),parameter_server(servers=2,chunk_kb=16,split=true)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(RunPipeline(**graph, *pipeline).ok());
  const Graph& g = **graph;
  EXPECT_EQ(g.FindNode("linear/weight"), nullptr);
  const std::string first = Where(g, "linear/weight/adam/chunk0"), second = Where(g, "linear/weight/adam/chunk1");
  EXPECT_NE(first, second);
  for (int k : {0, 1}) {
    const Node* piece = g.FindNode(absl::StrCat("linear/weight/chunk", k));
    ASSERT_NE(piece, nullptr) << k;
    EXPECT_EQ(piece->op(), "Parameter");
    EXPECT_EQ(NodeAttrInt(*piece, "init_offset", -1), k * 4096);
    EXPECT_EQ(Where(g, piece->name()), k == 0 ? first : second);
    EXPECT_EQ(g.FindNode(absl::StrCat("linear/weight/adam/chunk", k))->input_edge(0)->src, piece);
    ASSERT_EQ(piece->num_inputs(), 1);
    EXPECT_EQ(piece->input_edge(0)->src->op(), "Feedback");
  }
  EXPECT_EQ(g.FindNode("linear/weight/chunk1")->outputs()[0].shape.KnownElements(), 7840 - 4096);
  // Pushes wait for the previous push to the same server only: the two
  // chunks go to different servers, so neither waits for the other.
  EXPECT_TRUE(g.FindNode("ps/linear/weight/chunk1/push")->control_inputs().empty());
  auto parts = SplitPlanAcrossRanks(g, 4);
  ASSERT_TRUE(parts.ok()) << parts.status();
}

// A per-rank plan file holds each rank's part as the rank runs it; read back,
// the parts are the same graphs, checked together.
TEST(PlacementTest, APerRankPlanRoundTripsAndIsCheckedOnItsOwnGraphs) {
  auto graph = Trained(kTwoRanks);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto parts = SplitPlanAcrossRanks(**graph, 2);
  ASSERT_TRUE(parts.ok()) << parts.status();
  PlanDef plan = MakePlanDef(*parts, GraphDef(), RunConfig());
  EXPECT_EQ(plan.config().world_size(), 2);
  ASSERT_EQ(plan.worker_size(), 2);
  auto loaded = LoadRankGraphs(plan, "p.pbtxt");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(PlanFingerprint(*loaded), plan.fingerprint());
  EXPECT_EQ((*loaded)[0]->FindNode("w1"), nullptr);
  EXPECT_NE((*loaded)[1]->FindNode("w1"), nullptr);

  // An edit the fingerprint catches: the file changed after it was written.
  PlanDef edited = plan;
  for (NodeDef& n : *edited.mutable_worker(1)->mutable_graph()->mutable_node()) {
    if (n.name() == "h/recv") (*n.mutable_attr())["channel"].set_i(41);
  }
  EXPECT_THAT(std::string(LoadRankGraphs(edited, "p.pbtxt").status().message()),
              HasSubstr("p.pbtxt: the fingerprint " + plan.fingerprint() + " does not match the graphs"));
  // Accepted as an edit, the parts no longer fit: named by rank and node.
  edited.clear_fingerprint();
  EXPECT_THAT(std::string(LoadRankGraphs(edited, "p.pbtxt").status().message()),
              HasSubstr("rank 0's Send 'h/send' (channel 0) has no Recv on rank 1: rank 0 would wait forever"));

  PlanDef swapped = plan;
  swapped.mutable_worker()->SwapElements(0, 1);
  EXPECT_THAT(std::string(LoadRankGraphs(swapped, "p.pbtxt").status().message()),
              HasSubstr("worker graph 0 is for rank 1: list the ranks 0..1 in order"));
  PlanDef short_one = plan;
  short_one.mutable_worker()->RemoveLast();
  EXPECT_THAT(std::string(LoadRankGraphs(short_one, "p.pbtxt").status().message()),
              HasSubstr("the plan is for 2 workers but holds 1 graphs"));
}

TEST(PlacementTest, APerRankGraphThatDoesNotLoadIsNamedByRank) {
  auto graph = Trained(kTwoRanks);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto parts = SplitPlanAcrossRanks(**graph, 2);
  ASSERT_TRUE(parts.ok()) << parts.status();
  PlanDef plan = MakePlanDef(*parts, GraphDef(), RunConfig());
  plan.clear_fingerprint();
  plan.mutable_worker(1)->mutable_graph()->mutable_node(0)->set_op("NoSuchOp");
  EXPECT_THAT(std::string(LoadRankGraphs(plan, "p.pbtxt").status().message()), HasSubstr("p.pbtxt, rank 1's graph"));
}

}  // namespace
}  // namespace nereid
