// The place pass (passes/place_pass.cc) on mlp_fashion: every node gets a
// device, data feeding and communication stay on the host, every value that
// crosses goes through exactly one copy, the record counts what the graph
// holds; refusals; and a placed plan trains bit for bit like the unplaced one.

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/collective_schedule.h"
#include "ops/kernel.h"
#include "ops/model_loader.h"
#include "passes/pass_manager.h"
#include "schedulers/executor.h"
#include "tests/training/plan_util.h"

namespace nereid {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kPlaced[] = "autodiff,sgd(lr=0.1),place(device=sim)";

absl::StatusOr<std::unique_ptr<Graph>> Planned(const std::string& passes, const std::string& model = "mlp_fashion") {
  return testing::PlanModel(model, passes);
}

std::string PlanError(const std::string& passes) { return std::string(Planned(passes).status().message()); }

// Stand-ins for CUDA kernels of two ops, in a binary built without CUDA
// (which has no GPU kernel): the kernel registry is all the pass consults,
// and nothing here runs them. Under --config=cuda the real kernels are
// linked and the cases that need a lacking op skip.
class UnusedGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext*) override { return absl::UnimplementedError("a stand-in"); }
};
// Registers the stand-ins once (after static initialisation, so the real
// kernels, if linked, are registered already); false under --config=cuda.
// The Relu stand-in runs only some of its op's nodes (KernelCovers).
bool StandInsRegistered() {
  static const bool registered = [] {
    if (KernelRegistry::Global().Has("ApplySgd", kGpu, DT_FLOAT)) return false;
    auto make = [] { return std::unique_ptr<OpKernel>(new UnusedGpuKernel()); };
    for (const char* op : {"MatMul", "Parameter"}) {
      KernelRegistry::Global().Register(op, std::string(kGpu), DT_FLOAT, make).IgnoreError();
    }
    KernelRegistry::Global()
        .Register("Relu", std::string(kGpu), DT_FLOAT, make,
                  [](const Node& node, const AttrMap&) {
                    return node.name() == "fc1/relu" ? absl::OkStatus()
                                                     : absl::UnimplementedError("a stand-in that runs fc1/relu only");
                  })
        .IgnoreError();
    return true;
  }();
  return registered;
}

bool OnHost(const Node& n) { return n.def().device() == "cpu:0"; }
bool OnSim(const Node& n) { return n.def().device() == "sim:0"; }

// Every data edge stays on one side, or enters the copy that moves it:
// host -> CopyToDevice (on the device) or device -> CopyToHost (on the host);
// a copy reads from the other side. And each (source output, side) has one copy.
void ExpectCopiesExactlyWhereValuesCross(const Graph& graph, const std::string& device = "sim:0") {
  auto on_device = [&](const Node& n) { return n.def().device() == device; };
  std::map<std::tuple<std::string, int, std::string>, int> copies_of;  // (source, port, copy op) -> count
  for (const Node* n : graph.nodes()) {
    for (int p = 0; p < n->num_inputs(); ++p) {
      const Edge* e = n->input_edge(p);
      const Node& src = *e->src;
      SCOPED_TRACE(absl::StrCat(src.name(), " -> ", n->name()));
      if (n->op() == "CopyToDevice") {
        EXPECT_TRUE(OnHost(src) && on_device(*n));
        ++copies_of[{src.name(), e->src_port, n->op()}];
      } else if (n->op() == "CopyToHost") {
        EXPECT_TRUE(on_device(src) && OnHost(*n));
        ++copies_of[{src.name(), e->src_port, n->op()}];
      } else {
        EXPECT_EQ(src.def().device(), n->def().device()) << "a value crosses sides without a copy";
      }
    }
  }
  for (const auto& [key, count] : copies_of) {
    EXPECT_EQ(count, 1) << std::get<0>(key) << ":" << std::get<1>(key) << " has " << count << " " << std::get<2>(key);
  }
}

// The record's counts, taken again from the graph.
void ExpectRecordCountsTheGraph(const Graph& graph, const std::string& device) {
  int device_nodes = 0, host_nodes = 0, copies = 0;
  for (const Node* n : graph.nodes()) {
    device_nodes += n->def().device() == device && device != "cpu:0";
    host_nodes += OnHost(*n);
    copies += n->op() == "CopyToDevice" || n->op() == "CopyToHost";
  }
  const PlanRecords::Placement& r = graph.header().records().placement();
  EXPECT_EQ(r.device(), device);
  EXPECT_EQ(r.device_nodes(), device_nodes);
  EXPECT_EQ(r.host_nodes(), host_nodes);
  EXPECT_EQ(r.copies(), copies);
  EXPECT_EQ(device_nodes + host_nodes, graph.num_nodes()) << "a node without a device";
}

TEST(PlacePassTest, EveryNodeIsPlacedAndEveryCrossingCopiedOnce) {
  auto graph = Planned(kPlaced);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph& g = **graph;
  int inputs = 0;
  for (const Node* n : g.nodes()) {
    SCOPED_TRACE(n->name());
    EXPECT_TRUE(OnHost(*n) || OnSim(*n)) << "device '" << n->def().device() << "'";
    if (n->op() == "Input") {
      ++inputs;
      EXPECT_TRUE(OnHost(*n));
    } else if (n->op() != "CopyToHost") {
      EXPECT_TRUE(OnSim(*n)) << n->op() << " has a CPU kernel, so it runs on the sim";
    }
  }
  EXPECT_EQ(inputs, 2);
  // The images and the labels are each copied once, whatever reads them.
  ASSERT_NE(g.FindNode("images/to_sim"), nullptr);
  ASSERT_NE(g.FindNode("labels/to_sim"), nullptr);
  EXPECT_EQ(g.FindNode("images/to_sim")->op(), "CopyToDevice");
  EXPECT_EQ(g.FindNode("images/to_sim")->def().attr().at("device").s(), "sim:0");
  ExpectCopiesExactlyWhereValuesCross(g);
  ExpectRecordCountsTheGraph(g, "sim:0");
  const PlanRecords::Placement& r = g.header().records().placement();
  EXPECT_EQ(r.copies(), 2);  // the two Inputs; nothing comes back to the host
  EXPECT_EQ(r.device_nodes(), 50);
  EXPECT_EQ(r.host_nodes(), 2);
  EXPECT_EQ(r.fallback_host_nodes(), 0);
  // The same plan without place, plus the copies.
  auto unplaced = Planned("autodiff,sgd(lr=0.1)");
  ASSERT_TRUE(unplaced.ok());
  EXPECT_EQ(g.num_nodes(), (*unplaced)->num_nodes() + r.copies());
}

// The allreduce reads and writes host memory (no device channels yet):
// each gradient bucket is copied to the host before it and back after it.
TEST(PlacePassTest, AllReduceStaysOnTheHostBetweenCopies) {
  auto graph = Planned("autodiff,data_parallel(bucket_kb=64),sgd(lr=0.1),place(device=sim)");
  ASSERT_TRUE(graph.ok()) << graph.status();
  int allreduces = 0;
  for (const Node* n : (*graph)->nodes()) {
    if (n->op() != "AllReduce") continue;
    ++allreduces;
    SCOPED_TRACE(n->name());
    EXPECT_TRUE(OnHost(*n));
    for (int p = 0; p < n->num_inputs(); ++p) {
      const Node& in = *n->input_edge(p)->src;
      EXPECT_EQ(in.op(), "CopyToHost") << "input " << p;
      EXPECT_TRUE(OnHost(in));
      EXPECT_TRUE(OnSim(*in.input_edge(0)->src));
    }
    std::set<int> ports_out;
    for (const Edge* e : n->out_edges()) {
      EXPECT_EQ(e->dst->op(), "CopyToDevice") << "output " << e->src_port << " read by " << e->dst->name();
      EXPECT_TRUE(OnSim(*e->dst));
      EXPECT_TRUE(ports_out.insert(e->src_port).second) << "output " << e->src_port << " copied twice";
    }
    EXPECT_EQ(static_cast<int>(ports_out.size()), n->num_inputs());
  }
  EXPECT_GT(allreduces, 1);
  ExpectCopiesExactlyWhereValuesCross(**graph);
  ExpectRecordCountsTheGraph(**graph, "sim:0");
}

// comm=device: the collectives go on the sim (on their group's stream, the
// executor's affair), reading the gradients and feeding the optimizer
// with no copy between; on cuda the collectives need GPU kernels (NCCL).
TEST(PlacePassTest, CommDevicePutsTheCollectivesOnTheSimWithoutCopies) {
  auto graph = Planned("autodiff,data_parallel(bucket_kb=64),sgd(lr=0.1),place(device=sim,comm=device)");
  ASSERT_TRUE(graph.ok()) << graph.status();
  int allreduces = 0;
  for (const Node* n : (*graph)->nodes()) {
    if (n->op() == "CopyToHost") ADD_FAILURE() << "a copy out: " << n->name();
    if (n->op() != "AllReduce") continue;
    ++allreduces;
    EXPECT_TRUE(OnSim(*n)) << n->name();
  }
  EXPECT_GT(allreduces, 1);
  ExpectCopiesExactlyWhereValuesCross(**graph);
  ExpectRecordCountsTheGraph(**graph, "sim:0");
  EXPECT_THAT(PlanError("autodiff,data_parallel,sgd(lr=0.1),place(device=cpu,comm=device)"),
              HasSubstr("comm=device runs communication on a device's streams (sim or cuda), not on cpu"));
  // On cuda the collectives need GPU kernels like any other node (here only
  // the stand-ins have them, so the allreduce is named).
  if (StandInsRegistered()) {
    EXPECT_THAT(PlanError("autodiff,data_parallel,sgd(lr=0.1),place(device=cuda,comm=device)"),
                HasSubstr("AllReduce x"));
  }
  EXPECT_THAT(PlanError("autodiff,sgd(lr=0.1),place(device=sim,comm=gpu)"), HasSubstr("comm=gpu is not host or device"));
}

// Only MatMul and Parameter have (stand-in) cuda kernels here: fallback=error
// names every other op in one message; fallback=host keeps them on the host,
// counts them, and copies what crosses.
TEST(PlacePassTest, CudaWithoutKernelsIsRefusedOrFallsBackToTheHost) {
  if (!StandInsRegistered()) GTEST_SKIP() << "this binary has real GPU kernels for every op of the plan";
  std::string error = PlanError("autodiff,sgd(lr=0.1),place(device=cuda)");
  EXPECT_THAT(error, AllOf(HasSubstr("failed after place: place:"), HasSubstr("have no cuda kernel: "),
                           HasSubstr("ApplySgd x6"), HasSubstr("BiasAdd x3"), HasSubstr("(first: flatten"),
                           HasSubstr("fallback=host")));
  // A kernel for some of its op's nodes: the others are named with its reason.
  EXPECT_THAT(error, HasSubstr("Relu x1 (a stand-in that runs fc1/relu only)"));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("MatMul"))) << "MatMul has a cuda kernel";
  EXPECT_THAT(error, ::testing::Not(HasSubstr("Input x"))) << "Inputs stay on the host whatever the device";

  auto graph = Planned("autodiff,sgd(lr=0.1),place(device=cuda,fallback=host)");
  ASSERT_TRUE(graph.ok()) << graph.status();
  int matmuls = 0, lacking = 0;
  for (const Node* n : (*graph)->nodes()) {
    SCOPED_TRACE(n->name());
    if (n->op() == "MatMul" || n->name() == "fc1/relu") {
      matmuls += n->op() == "MatMul";
      EXPECT_EQ(n->def().device(), "cuda:0");
    } else if (n->op() == "Feedback") {
      // Needs no kernel (the executor hands its value on) and shares a side
      // with the Parameter it carries into.
      EXPECT_EQ(OnHost(*n), OnHost(*n->out_edges().front()->dst));
    } else if (n->op() == "Parameter") {
      continue;
    } else if (n->op() != "Input" && n->op() != "CopyToDevice" && n->op() != "CopyToHost") {
      ++lacking;
      EXPECT_TRUE(OnHost(*n));
    }
  }
  EXPECT_EQ(matmuls, 8);
  const Node* uncovered = (*graph)->FindNode("fc2/relu");
  ASSERT_NE(uncovered, nullptr);
  EXPECT_TRUE(OnHost(*uncovered));
  EXPECT_THAT(std::string(KernelRegistry::Global().Create(**graph, *uncovered, kGpu).status().message()),
              HasSubstr("no GPU kernel for this node: a stand-in that runs fc1/relu only"));
  ASSERT_NE((*graph)->FindNode("flatten/to_cuda"), nullptr);
  ASSERT_NE((*graph)->FindNode("fc1/matmul/to_host"), nullptr);
  ExpectCopiesExactlyWhereValuesCross(**graph, "cuda:0");
  ExpectRecordCountsTheGraph(**graph, "cuda:0");
  const PlanRecords::Placement& r = (*graph)->header().records().placement();
  EXPECT_EQ(r.fallback_host_nodes(), lacking);
  EXPECT_GT(r.copies(), 8);
}

TEST(PlacePassTest, DeviceCpuPlacesEverythingOnTheHostAndAddsNothing) {
  auto graph = Planned("autodiff,sgd(lr=0.1),place(device=cpu)");
  auto unplaced = Planned("autodiff,sgd(lr=0.1)");
  ASSERT_TRUE(graph.ok() && unplaced.ok()) << graph.status();
  for (const Node* n : (*graph)->nodes()) EXPECT_TRUE(OnHost(*n)) << n->name();
  EXPECT_EQ((*graph)->num_nodes(), (*unplaced)->num_nodes());
  ExpectRecordCountsTheGraph(**graph, "cpu:0");
}

TEST(PlacePassTest, RefusesWhatItCannotDo) {
  EXPECT_THAT(PlanError("autodiff,sgd(lr=0.1),place"),
              HasSubstr("place: the device option is required: place(device=sim), device=cuda or device=cpu"));
  EXPECT_THAT(PlanError("autodiff,sgd(lr=0.1),place(device=tpu)"),
              HasSubstr("place: unknown device 'tpu'; the devices are sim, cuda and cpu"));
  EXPECT_THAT(PlanError("autodiff,sgd(lr=0.1),place(device=sim,fallback=later)"),
              HasSubstr("fallback=later is not a fallback; use error or host"));
  EXPECT_THAT(PlanError("autodiff,sgd(lr=0.1),place(device=sim,host_ops=MatMul+Matmul)"),
              HasSubstr("place: host_ops names 'Matmul', which is not an op"));
  // Before the optimizer, named by the pipeline's order or, without one, by the graph.
  EXPECT_THAT(PlanError("autodiff,place(device=sim),sgd(lr=0.1)"),
              HasSubstr("place must come after sgd in the pass list (place needs optimizer"));
  EXPECT_THAT(PlanError("autodiff,place(device=sim)"), HasSubstr("place: the graph has no optimizer"));
  // Last, and once.
  EXPECT_THAT(PlanError("autodiff,sgd(lr=0.1),place(device=sim),data_parallel"),
              HasSubstr("place must be the last pass in the pass list (data_parallel follows it)"));
  EXPECT_THAT(PlanError("autodiff,sgd(lr=0.1),place(device=sim),place(device=sim)"),
              HasSubstr("place must be the last pass in the pass list (place follows it)"));
}

// host_ops keeps ops on the host; with comm=device a collective kept so
// splits its group (the world here) into a device share and a host share,
// each numbered again in the group's order (ops/collective_schedule.h).
TEST(PlacePassTest, HostOpsStayOnTheHostAndSplitTheirGroup) {
  auto graph = testing::PlanModel(
      "lenet_fashion",
      "autodiff,data_parallel(bucket_kb=16),compress(method=qsgd),sgd(lr=0.1),"
      "place(device=sim,comm=device,host_ops=CompressedAllReduce+Flatten)",
      2);
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::vector<const Node*> device_buckets, host_buckets;
  for (const Node* n : (*graph)->nodes()) {
    if (n->op() == "Flatten") {
      EXPECT_TRUE(OnHost(*n)) << n->name();
    }
    if (!IsCollective(*n)) continue;
    const bool host = n->op() == "CompressedAllReduce";
    EXPECT_EQ(OnHost(*n), host) << n->name();
    (host ? host_buckets : device_buckets).push_back(n);
  }
  ASSERT_GE(device_buckets.size(), 2u) << "bucket_kb=16 makes several dense buckets";
  ASSERT_GE(host_buckets.size(), 2u) << "and several compressed ones";
  const SplitGroups split = SplitAcrossSides(**graph);
  EXPECT_EQ(split.groups, (absl::flat_hash_set<std::string>{""}));
  EXPECT_EQ(HostShare(""), "-host");
  EXPECT_EQ(split.counts.at("").per_step, static_cast<int>(device_buckets.size()));
  EXPECT_EQ(split.counts.at("-host").per_step, static_cast<int>(host_buckets.size()));
  // Each share's places are 0..n-1 in bucket order.
  for (const auto* share : {&device_buckets, &host_buckets}) {
    std::map<int64_t, int> places;  // bucket -> place
    for (const Node* n : *share) places[NodeAttrInt(*n, "bucket", -1)] = split.of_node.at(n->id()).step;
    int expected = 0;
    for (const auto& [bucket, place] : places) EXPECT_EQ(place, expected++) << "bucket " << bucket;
  }
  // Without host_ops nothing is split.
  auto whole = testing::PlanModel(
      "lenet_fashion", "autodiff,data_parallel,compress(method=qsgd),sgd(lr=0.1),place(device=sim,comm=device)", 2);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(SplitAcrossSides(**whole).groups.empty());
}

TEST(PlacePassTest, APlacedGraphIsNotPlacedAgain) {
  auto graph = Planned(kPlaced);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto again = ParsePipeline("place(device=sim)");
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(std::string(RunPipeline(**graph, *again).status().message()),
              HasSubstr("place cannot run on a placed graph (on sim:0)"));
  // The pass itself refuses too, when run without the manager's check.
  std::unique_ptr<Pass> place = PassRegistry::Global().Find("place")->factory();
  PassOptions options({{"device", "sim"}, {"fallback", "error"}});
  PassLog log;
  const int nodes = (*graph)->num_nodes();
  EXPECT_THAT(std::string(place->Run(**graph, PassContext{options, PlanTarget{}}, &log).message()),
              HasSubstr("place: the graph is already placed (on sim:0)"));
  EXPECT_EQ((*graph)->num_nodes(), nodes);
}

TEST(PlacePassTest, TheReportSaysWhatWasPlaced) {
  auto graph = LoadModel("models/mlp_fashion.pbtxt");
  ASSERT_TRUE(graph.ok());
  auto pipeline = ParsePipeline(kPlaced);
  ASSERT_TRUE(pipeline.ok());
  auto reports = RunPipeline(**graph, *pipeline);
  ASSERT_TRUE(reports.ok()) << reports.status();
  const PassReport& place = reports->back();
  EXPECT_EQ(place.pass, "place");
  ASSERT_EQ(place.notes.size(), 1u);
  const PlanRecords::Placement& r = (*graph)->header().records().placement();
  EXPECT_EQ(place.notes[0], absl::StrCat(r.device_nodes(), " nodes on sim:0, 2 on the host, 2 copies (2 CopyToDevice, "
                                         "0 CopyToHost)"));
  EXPECT_EQ(place.added.size(), 2u);
}

// The sim runs the CPU's kernels on its memory: a placed plan trains
// exactly like the unplaced one.
TEST(PlacePassTest, APlacedPlanTrainsBitForBitLikeTheUnplacedOne) {
  auto placed_graph = Planned("autodiff,data_parallel,sgd(lr=0.1,momentum=0.9),place(device=sim)");
  auto plain_graph = Planned("autodiff,data_parallel,sgd(lr=0.1,momentum=0.9)");
  ASSERT_TRUE(placed_graph.ok()) << placed_graph.status();
  ASSERT_TRUE(plain_graph.ok()) << plain_graph.status();
  ASSERT_GT((*placed_graph)->header().records().placement().copies(), 2) << "copies around the allreduce expected";
  ExecutorOptions options;
  options.threads = 2;
  auto placed = Executor::Create(placed_graph->get(), options);
  auto plain = Executor::Create(plain_graph->get(), options);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  constexpr int kSteps = 4, kBatch = 16;
  std::vector<FeedMap> feeds = testing::RandomImageFeeds(3, kSteps, kBatch);
  std::vector<std::pair<std::string, Tensor>> initial = (*plain)->State();
  for (auto& [name, value] : initial) value = *value.Clone();
  for (int t = 0; t < kSteps; ++t) {
    const StepInfo step{0, t, t, kSteps, 1, true};
    auto placed_loss = (*placed)->RunStep(step, feeds[t], {"loss"});
    auto plain_loss = (*plain)->RunStep(step, feeds[t], {"loss"});
    ASSERT_TRUE(placed_loss.ok()) << placed_loss.status();
    ASSERT_TRUE(plain_loss.ok()) << plain_loss.status();
    EXPECT_EQ((*placed_loss)[0].data<float>()[0], (*plain_loss)[0].data<float>()[0]) << "step " << t;
  }
  auto x = (*placed)->State(), y = (*plain)->State();
  ASSERT_EQ(x.size(), y.size());
  ASSERT_EQ(x.size(), initial.size());
  bool trained = false;
  for (size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE(x[i].first);
    ASSERT_EQ(x[i].first, y[i].first);
    ASSERT_EQ(x[i].second.num_bytes(), y[i].second.num_bytes());
    EXPECT_EQ(0, std::memcmp(x[i].second.raw(), y[i].second.raw(), x[i].second.num_bytes()));
    trained |= std::memcmp(x[i].second.raw(), initial[i].second.raw(), x[i].second.num_bytes()) != 0;
  }
  EXPECT_TRUE(trained) << "the parameters never moved: the comparison would prove nothing";
}

}  // namespace
}  // namespace nereid
