// Plans placed on a real GPU (--config=cuda). Two kinds of case:
//   * Coverage (no GPU needed, runs in CI's CUDA pass): the models the GPU
//     script trains plan onto cuda with every compute node on the device,
//     and every node's GPU kernel is created and initialised.
//   * On a GPU (skipped with a message where none is found): they train like
//     the host. cuBLAS, cuDNN and batch norm sum in other orders than oneDNN, so losses
//     and parameters agree within float tolerance, not bit for bit.

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/nccl_communicator.h"
#include "comm/rendezvous_spec.h"
#include "gtest/gtest.h"
#include "ops/collective_schedule.h"
#include "ops/kernel.h"
#include "plan/split_by_rank.h"
#include "schedulers/collective_engine.h"
#include "tests/gpu_gate.h"
#include "tests/training/plan_util.h"
#include "tests/training/train_util.h"

namespace nereid {
namespace {

constexpr char kSgd[] = "autodiff,sgd(lr=0.01,momentum=0.9)";
constexpr char kDataParallel[] = "autodiff,data_parallel(bucket_kb=64),sgd(lr=0.1)";
constexpr char kDataParallelOnCuda[] =
    "autodiff,data_parallel(bucket_kb=64),sgd(lr=0.1),place(device=cuda,streams=2,comm=device)";

struct ModelCase {
  std::string model;
  int steps;
  int batch;
  std::string passes = kSgd;
};

// Models whose every op has a GPU kernel: dense, convolutional, with batch
// norm, residual adds and global pooling (resnet20, vgg11_bn), the hinge
// loss (svm), a transformer (embedding, layer norm, attention, GELU); and an
// optimizer other than SGD.
const std::vector<ModelCase>& Models() {
  static const auto* models = new std::vector<ModelCase>{{"mlp_fashion", 4, 16},
                                                         {"lenet_fashion", 4, 8},
                                                         {"vgg11_cifar", 2, 4},
                                                         {"resnet20_cifar", 2, 4},
                                                         {"vgg11_bn_cifar", 2, 4},
                                                         {"svm_fashion", 4, 16},
                                                         {"logreg_fashion", 4, 16},
                                                         {"char_transformer", 2, 2, "autodiff,adam(lr=0.001)"},
                                                         {"mlp_fashion", 4, 16, "autodiff,adam(lr=0.001)"}};
  return *models;
}

std::string OnCuda(const ModelCase& c, int streams) {
  return absl::StrCat(c.passes, ",place(device=cuda,streams=", streams, ")");
}

TEST(GpuKernelCoverage, EveryComputeNodeOfTheGpuScriptsModelsHasAGpuKernel) {
  for (const ModelCase& c : Models()) {
    SCOPED_TRACE(c.model + " with " + c.passes);
    // place's default fallback=error refuses a node without a GPU kernel.
    auto graph = testing::PlanModel(c.model, OnCuda(c, 1));
    ASSERT_TRUE(graph.ok()) << graph.status();
    int on_device = 0;
    for (const Node* n : (*graph)->nodes()) {
      if (n->def().device() != "cuda:0") continue;
      ++on_device;
      if (n->op() == "Parameter" || n->op() == "Feedback" || n->op() == "CopyToDevice") continue;
      auto kernel = KernelRegistry::Global().Create(**graph, *n, kGpu);
      EXPECT_TRUE(kernel.ok()) << n->name() << " (" << n->op() << "): " << kernel.status();
    }
    // Only data feeding stays on the host.
    int on_host = 0;
    for (const Node* n : (*graph)->nodes()) on_host += n->def().device() == "cuda:0" ? 0 : 1;
    EXPECT_GT(on_device, 10 * on_host);
  }
}


// NCCL in a world of one on GPU 0 (the GPU script's machine has one), its
// rendezvous a file `store` under the test's temporary directory.
absl::StatusOr<std::unique_ptr<Communicator>> NcclWorldOfOne(const std::string& store) {
  absl::StatusOr<RendezvousSpec> spec =
      ParseRendezvousSpec(absl::StrCat("file:", ::testing::TempDir(), "/", store), "gpu_training_test");
  if (!spec.ok()) return spec.status();
  WorkerIdentity identity;
  identity.plan_fingerprint = "gpu_training_test";
  identity.world_size = 1;
  return ConnectNccl(*spec, /*rank=*/0, /*world=*/1, /*device=*/0, identity, absl::Seconds(60));
}

// |a - b| within `tolerance` of the larger magnitude (at least 1).
bool Near(float a, float b, float tolerance) {
  return std::fabs(a - b) <= tolerance * std::max({1.0f, std::fabs(a), std::fabs(b)});
}

TEST(CudaTraining, ModelsTrainLikeTheHostOnOneAndThreeStreams) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const ModelCase& c : Models()) {
    SCOPED_TRACE(c.model + " with " + c.passes);
    std::vector<FeedMap> feeds = testing::FeedsFor(c.model, c.steps, c.batch);
    testing::Trained host = testing::Train(c.model, c.passes, feeds);
    ASSERT_TRUE(host.status.ok()) << host.status;
    for (int streams : {1, 3}) {
      SCOPED_TRACE(absl::StrCat(streams, " compute streams"));
      testing::Trained gpu = testing::Train(c.model, OnCuda(c, streams), feeds);
      ASSERT_TRUE(gpu.status.ok()) << gpu.status;
      ASSERT_EQ(gpu.losses.size(), host.losses.size());
      for (size_t t = 0; t < host.losses.size(); ++t) {
        EXPECT_TRUE(Near(host.losses[t], gpu.losses[t], 1e-3f))
            << "step " << t << ": host " << host.losses[t] << ", gpu " << gpu.losses[t];
      }
      ASSERT_EQ(gpu.state.size(), host.state.size());
      for (size_t i = 0; i < host.state.size(); ++i) {
        const Tensor& a = host.state[i].second;
        const Tensor& b = gpu.state[i].second;
        ASSERT_EQ(a.dims(), b.dims()) << host.state[i].first;
        if (a.dtype() != DT_FLOAT) continue;
        int64_t far = 0;
        for (int64_t j = 0; j < a.num_elements(); ++j) far += Near(a.data<float>()[j], b.data<float>()[j], 1e-3f) ? 0 : 1;
        EXPECT_EQ(far, 0) << host.state[i].first << ": " << far << " of " << a.num_elements() << " values differ";
      }
      EXPECT_GT(gpu.device.launches, 0);
      // The host waits for the device only at the step's end and for the copies out.
      EXPECT_LE(gpu.device.host_waits, static_cast<int64_t>(c.steps) * 8);
    }
  }
}

// place(device=cuda, comm=device): the data-parallel buckets' allreduces are
// GPU kernels too (NCCL on the world's communication stream).
TEST(GpuKernelCoverage, TheDataParallelBucketsHaveGpuKernelsWithCommDevice) {
  auto graph = testing::PlanModel("mlp_fashion", kDataParallelOnCuda);
  ASSERT_TRUE(graph.ok()) << graph.status();
  int buckets = 0;
  for (const Node* n : (*graph)->nodes()) {
    if (n->op() != "AllReduce") continue;
    ++buckets;
    EXPECT_EQ(n->def().device(), "cuda:0") << n->name();
    auto kernel = KernelRegistry::Global().Create(**graph, *n, kGpu);
    EXPECT_TRUE(kernel.ok()) << n->name() << ": " << kernel.status();
  }
  EXPECT_GT(buckets, 1);
}

// place(device=cuda, comm=device) on the strategies that talk through
// process groups: the group collectives are GPU kernels too (NCCL on their
// group's communication stream), so nothing of them stays on the host.
TEST(GpuKernelCoverage, TheGroupCollectivesHaveGpuKernelsWithCommDevice) {
  struct GroupPlan {
    std::string model, passes;
    int workers;
  };
  // The colocated servers' shards in a world of 3 are padded (Pad, Slice).
  const std::vector<GroupPlan> plans = {
      {"mlp_fashion", "hybrid_partition(group_size=2),autodiff,sgd(lr=0.05)", 2},
      {"char_transformer", "hybrid_partition(style=megatron,group_size=2),autodiff,adam(lr=0.001)", 2},
      {"lenet_fashion",
       "autodiff,sgd(lr=0.05,momentum=0.9),parameter_server(colocated=true,exchange=collective,chunk_kb=16)", 3},
  };
  for (const auto& [model, passes, workers] : plans) {
    SCOPED_TRACE(model + " with " + passes);
    auto graph = testing::PlanModel(model, passes + ",place(device=cuda,comm=device)", workers);
    ASSERT_TRUE(graph.ok()) << graph.status();
    int group_ops = 0;
    for (const Node* n : (*graph)->nodes()) {
      if (!absl::StartsWith(n->op(), "Group")) continue;
      ++group_ops;
      EXPECT_EQ(n->def().device(), "cuda:0") << n->name() << " (" << n->op() << ")";
      auto kernel = KernelRegistry::Global().Create(**graph, *n, kGpu);
      EXPECT_TRUE(kernel.ok()) << n->name() << " (" << n->op() << "): " << kernel.status();
    }
    EXPECT_GT(group_ops, 1);
  }
}

// Gossip's low-rank pushes (gossip, then compress(method=powersgd)) on the
// GPU: each LowRankPush is a GPU kernel (its codes made on the GPU, sent
// through NCCL), and no collective of the plan stays on the host.
TEST(GpuKernelCoverage, TheLowRankPushesHaveGpuKernelsWithCommDevice) {
  for (const std::string model : {"mlp_fashion", "lenet_fashion"}) {
    SCOPED_TRACE(model);
    auto graph = testing::PlanModel(
        model, "autodiff,sgd(lr=0.02,momentum=0.9),gossip(overlap=1),compress(method=powersgd),"
               "place(device=cuda,comm=device)",
        4);
    ASSERT_TRUE(graph.ok()) << graph.status();
    int pushes = 0;
    for (const Node* n : (*graph)->nodes()) {
      if (!IsCollective(*n)) continue;
      pushes += n->op() == "LowRankPush" ? 1 : 0;
      EXPECT_EQ(n->def().device(), "cuda:0") << n->name() << " (" << n->op() << ")";
      auto kernel = KernelRegistry::Global().Create(**graph, *n, kGpu);
      EXPECT_TRUE(kernel.ok()) << n->name() << " (" << n->op() << "): " << kernel.status();
    }
    EXPECT_GT(pushes, 0);
  }
}

// place(device=cuda, comm=device) on the parameter server's plan: its
// chunks' Send/Recv (shapes the plan knows whole) are GPU kernels too (NCCL
// on the transfers' stream), on each rank's part as it runs them (the ends
// cut, with their peers). The colocated servers' exchange by transfers,
// some to the rank itself, is refused on cuda before anything runs.
TEST(GpuKernelCoverage, TheParameterServersTransfersHaveGpuKernelsWithCommDevice) {
  auto graph = testing::PlanModel(
      "logreg_fashion", "autodiff,sgd(lr=0.05),parameter_server(servers=1),place(device=cuda,comm=device)", 3);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto parts = SplitPlanAcrossRanks(**graph, 3);
  ASSERT_TRUE(parts.ok()) << parts.status();
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    const Graph& part = *(*parts)[rank];
    int transfers = 0;
    for (const Node* n : part.nodes()) {
      if (n->op() != "Send" && n->op() != "Recv") continue;
      ++transfers;
      EXPECT_EQ(n->def().device(), "cuda:0") << n->name();
      EXPECT_TRUE(IsDeviceTransfer(*n)) << n->name();
      auto kernel = KernelRegistry::Global().Create(part, *n, kGpu);
      EXPECT_TRUE(kernel.ok()) << n->name() << " (" << n->op() << "): " << kernel.status();
    }
    EXPECT_GT(transfers, 1);
  }
  auto colocated = testing::PlanModel(
      "mlp_fashion",
      "autodiff,sgd(lr=0.05),parameter_server(colocated=true,exchange=p2p,chunk_kb=64),place(device=cuda,comm=device)",
      2);
  ASSERT_TRUE(colocated.ok()) << colocated.status();
  absl::Status refused = SplitPlanAcrossRanks(**colocated, 2).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "a transfer to the rank itself placed on cuda")) << refused;
}

// A 16-bit wire (compress(method=fp16|bf16)) on the GPU: the buckets'
// allreduces and gossip's pushes keep their wire and their kernels take it
// (NCCL's 16-bit allreduce; the pushes coded around a float32 transfer).
TEST(GpuKernelCoverage, SixteenBitWiresHaveGpuKernelsWithCommDevice) {
  struct WirePlan {
    std::string passes;
    int workers;
    std::string wire;
  };
  const std::vector<WirePlan> plans = {
      {"autodiff,data_parallel(bucket_kb=64),compress(method=bf16),sgd(lr=0.1)", 2, "bfloat16"},
      {"autodiff,sgd(lr=0.05),gossip(peers=2),compress(method=fp16)", 4, "float16"},
      {"autodiff,sgd(lr=0.05),gossip(topology=complete),compress(method=bf16)", 4, "bfloat16"},
  };
  std::set<std::string> coded_ops;
  for (const auto& [passes, workers, wire] : plans) {
    SCOPED_TRACE(passes);
    auto graph = testing::PlanModel("mlp_fashion", passes + ",place(device=cuda,comm=device)", workers);
    ASSERT_TRUE(graph.ok()) << graph.status();
    int coded = 0;
    for (const Node* n : (*graph)->nodes()) {
      const auto attr = n->def().attr().find("wire");
      if (attr == n->def().attr().end() || attr->second.s() == "float32") continue;
      ++coded;
      coded_ops.insert(n->op());
      EXPECT_EQ(attr->second.s(), wire) << n->name();
      EXPECT_EQ(n->def().device(), "cuda:0") << n->name() << " (" << n->op() << ")";
      auto kernel = KernelRegistry::Global().Create(**graph, *n, kGpu);
      EXPECT_TRUE(kernel.ok()) << n->name() << " (" << n->op() << "): " << kernel.status();
    }
    EXPECT_GT(coded, 0);
  }
  // The buckets, and gossip's pushes of both kinds.
  EXPECT_EQ(coded_ops, (std::set<std::string>{"AllReduce", "GroupAllReduce", "GroupSendRecv"}));
}

// The codecs on the GPU (ops/cuda/gpu_codecs.h): the compressed node and
// the dense bucket beside it are GPU kernels, so the world's collectives stay
// on one communicator (NCCL). Kept on the host (host_ops), the compressed
// node runs through the host's communicator beside NCCL's dense bucket.
TEST(GpuKernelCoverage, TheCodecsHaveGpuKernelsWithCommDevice) {
  for (const std::string codec :
       {"terngrad", "onebit", "qsgd,coding=fixed,bits=3", "qsgd", "qsgd,bits=8,bucket=100", "topk,ratio=0.05",
        "powersgd", "gradiveq", "gradiveq,error_feedback=1,slice=25,coefficients=4"}) {
    SCOPED_TRACE(codec);
    const std::string passes =
        absl::StrCat("autodiff,data_parallel,compress(method=", codec, "),sgd(lr=0.1),place(device=cuda,comm=device");
    auto graph = testing::PlanModel("lenet_fashion", passes + ")", 2);
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::set<std::string> ops;
    for (const Node* n : (*graph)->nodes()) {
      if (!IsCollective(*n)) continue;
      ops.insert(n->op());
      EXPECT_EQ(n->def().device(), "cuda:0") << n->name() << " (" << n->op() << ")";
      auto kernel = KernelRegistry::Global().Create(**graph, *n, kGpu);
      EXPECT_TRUE(kernel.ok()) << n->name() << " (" << n->op() << "): " << kernel.status();
    }
    EXPECT_EQ(ops, (std::set<std::string>{"AllReduce", "CompressedAllReduce"}));
    auto split = testing::PlanModel("lenet_fashion", passes + ",host_ops=CompressedAllReduce)", 2);
    ASSERT_TRUE(split.ok()) << split.status();
    for (const Node* n : (*split)->nodes()) {
      if (!IsCollective(*n)) continue;
      EXPECT_EQ(OnDevice(*n), n->op() == "AllReduce") << n->name();
    }
    EXPECT_EQ(SplitAcrossSides(**split).groups, (absl::flat_hash_set<std::string>{""}));
  }
}

// Each codec's GPU kernel run by the executor in a world of one, NCCL's
// stream beside it: QSGD's Elias coding reads its lengths back and sizes a
// second round, GradiVeQ (slices of 25, a bucket's last one mostly short)
// reads its basis's state word back after its warm-up (exact steps, a first
// basis, compressed steps, a refresh), PowerSGD keeps P between its rounds. The
// losses follow the host's (the GPU's convolutions sum in their own order,
// and stochastic rounding turns that difference into a level now and then,
// so the bound is looser than the dense run's).
TEST(CudaTraining, CodecsRunOnTheStreamWithNccl) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const std::string codec :
       {"qsgd", "gradiveq,warmup=2,refresh=3,slice=25,coefficients=4", "powersgd", "topk,ratio=0.05"}) {
    SCOPED_TRACE(codec);
    const std::string passes = absl::StrCat("autodiff,data_parallel(bucket_kb=64),compress(method=", codec,
                                            "),sgd(lr=0.05)");
    const std::string on_cuda = passes + ",place(device=cuda,streams=2,comm=device)";
    auto graph = testing::PlanModel("lenet_fashion", on_cuda);
    ASSERT_TRUE(graph.ok()) << graph.status();
    int collectives = 0;
    for (const Node* n : (*graph)->nodes()) collectives += IsCollective(*n) ? 1 : 0;
    auto comm = NcclWorldOfOne(absl::StrCat("nccl_codec_store_", codec.substr(0, 4)));
    ASSERT_TRUE(comm.ok()) << comm.status();
    CollectiveEngine engine(comm->get(), collectives, absl::Seconds(60));
    constexpr int kSteps = 6;
    std::vector<FeedMap> feeds = testing::FeedsFor("lenet_fashion", kSteps, 16);
    testing::Trained host = testing::Train("lenet_fashion", passes, feeds);
    testing::Trained gpu = testing::Train("lenet_fashion", on_cuda, feeds, "", &engine);
    ASSERT_TRUE(host.status.ok()) << host.status;
    ASSERT_TRUE(gpu.status.ok()) << gpu.status;
    ASSERT_EQ(gpu.losses.size(), host.losses.size());
    for (size_t t = 0; t < host.losses.size(); ++t) {
      EXPECT_TRUE(Near(host.losses[t], gpu.losses[t], 2e-2f))
          << "step " << t << ": host " << host.losses[t] << ", gpu " << gpu.losses[t];
    }
    ASSERT_NE((*comm)->stream_collectives(), nullptr);
    EXPECT_TRUE((*comm)->stream_collectives()->DeferredFailure().ok());
  }
}

// The buckets through NCCL on the GPU's communication stream, issued by the
// collective engine in the ranks' order, in a world of one (NCCL takes a GPU
// per rank, and the GPU script's machine has one): the host's losses, and
// every bucket of every step enqueued through NCCL.
TEST(CudaTraining, DataParallelBucketsRunThroughNcclOnTheStream) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto graph = testing::PlanModel("mlp_fashion", kDataParallelOnCuda);
  ASSERT_TRUE(graph.ok()) << graph.status();
  int buckets = 0;
  for (const Node* n : (*graph)->nodes()) buckets += n->op() == "AllReduce" ? 1 : 0;
  ASSERT_GT(buckets, 1);
  auto comm = NcclWorldOfOne("nccl_store");
  ASSERT_TRUE(comm.ok()) << comm.status();
  CollectiveEngine engine(comm->get(), buckets, absl::Seconds(60));
  constexpr int kSteps = 4;
  std::vector<FeedMap> feeds = testing::FeedsFor("mlp_fashion", kSteps, 16);
  testing::Trained host = testing::Train("mlp_fashion", kDataParallel, feeds);
  testing::Trained gpu = testing::Train("mlp_fashion", kDataParallelOnCuda, feeds, "", &engine);
  ASSERT_TRUE(host.status.ok()) << host.status;
  ASSERT_TRUE(gpu.status.ok()) << gpu.status;
  ASSERT_EQ(gpu.losses.size(), host.losses.size());
  for (size_t t = 0; t < host.losses.size(); ++t) {
    EXPECT_TRUE(Near(host.losses[t], gpu.losses[t], 1e-3f))
        << "step " << t << ": host " << host.losses[t] << ", gpu " << gpu.losses[t];
  }
  EXPECT_EQ((*comm)->traffic().calls, kSteps * buckets);
  ASSERT_NE((*comm)->stream_collectives(), nullptr);
  EXPECT_TRUE((*comm)->stream_collectives()->DeferredFailure().ok());
}

}  // namespace
}  // namespace nereid
