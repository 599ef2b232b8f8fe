#include "timing/timing_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;

// 4 workers on a 1 Gbit/s link with 100 us latency; 10 ms of compute; one
// 1,000,000-byte bucket.
TimingInputs Base() {
  TimingInputs in;
  in.workers = 4;
  in.batch_per_worker = 32;
  in.compute_seconds = 0.010;
  in.bucket_bytes = {1000000};
  in.link.alpha_seconds = 100e-6;
  in.link.beta_bytes_per_second = 1e9 / 8;  // 125e6
  return in;
}

const StrategyTime& Find(const TimingPrediction& p, const std::string& name) {
  for (const StrategyTime& s : p.strategies) {
    if (s.name == name) return s;
  }
  ADD_FAILURE() << "no strategy " << name;
  return p.strategies.front();
}

constexpr double kEps = 1e-12;

TEST(TimingModelTest, FormulasMatchHandComputedNumbers) {
  TimingPrediction p = PredictIteration(Base()).value();
  // Ring: 2(n-1) = 6 steps of alpha + M/(n beta) = 100 us + 1e6/(4 * 125e6) s = 2.1 ms.
  EXPECT_THAT(p.ring_comm_seconds, DoubleNear(0.0126, kEps));
  // PS: 2 * (alpha + n M / beta) = 2 * (100 us + 32 ms) = 64.2 ms.
  EXPECT_THAT(p.ps_comm_seconds, DoubleNear(0.0642, kEps));
  EXPECT_EQ(p.gradient_bytes, 1000000);
  EXPECT_THAT(p.wire_bytes_per_step, DoubleNear(1.5e6, 1e-6));  // 2(n-1)/n * M
  EXPECT_THAT(p.one_worker_samples_per_second, DoubleNear(3200, 1e-9));

  ASSERT_EQ(p.strategies.size(), 5u);
  const StrategyTime& sync = Find(p, "sync_allreduce");
  const StrategyTime& ps = Find(p, "parameter_server");
  const StrategyTime& pipe = Find(p, "pipe_sgd");
  EXPECT_THAT(sync.seconds_per_iteration, DoubleNear(0.0226, kEps));
  EXPECT_THAT(ps.seconds_per_iteration, DoubleNear(0.0742, kEps));
  EXPECT_THAT(pipe.seconds_per_iteration, DoubleNear(0.0126, kEps));  // max(10 ms, 12.6 ms)
  EXPECT_THAT(sync.speedup, DoubleNear(1, kEps));
  EXPECT_THAT(pipe.speedup, DoubleNear(0.0226 / 0.0126, 1e-9));
  EXPECT_THAT(ps.speedup, DoubleNear(0.0226 / 0.0742, 1e-9));
  EXPECT_THAT(pipe.samples_per_second, DoubleNear(32 * 4 / 0.0126, 1e-6));
  EXPECT_THAT(ps.bytes_sent_per_worker, DoubleNear(1e6, 1e-6));
  EXPECT_EQ(pipe.description, "Pipe-SGD (K=2)");
}

// SGP: the parameters and the 4-byte weight packed into messages to each
// peer, alpha + P M_m / beta each; plain after the compute, overlapped beside
// it; never compressed.
TEST(TimingModelTest, SgpPushesEachParameterToItsPeers) {
  TimingInputs in = Base();
  TimingPrediction p = PredictIteration(in).value();
  constexpr double kWeight = 4 / 125e6;
  // The bucket and the weight as one message: 100 us + (1e6 + 4) / 125e6 s = 8.1 ms.
  EXPECT_THAT(Find(p, "sgp").comm_seconds, DoubleNear(0.0081 + kWeight, kEps));
  EXPECT_THAT(Find(p, "sgp").seconds_per_iteration, DoubleNear(0.0181 + kWeight, kEps));
  EXPECT_THAT(Find(p, "sgp_overlap").seconds_per_iteration, DoubleNear(0.010, kEps));  // max(10 ms, 8.1 ms)
  EXPECT_THAT(Find(p, "sgp").bytes_sent_per_worker, DoubleNear(1e6 + 4, 1e-6));
  EXPECT_EQ(Find(p, "sgp_overlap").description, "overlap SGP (1 peer, tau=1)");
  in.parameter_bytes = {600000, 400000};
  in.gossip_peers = 2;
  p = PredictIteration(in).value();
  // One message to each of two peers: 100 us + 2 (1e6 + 4) / 125e6 s = 16.1 ms, longer than the compute.
  EXPECT_THAT(Find(p, "sgp_overlap").seconds_per_iteration, DoubleNear(0.0161 + 2 * kWeight, kEps));
  EXPECT_THAT(Find(p, "sgp").bytes_sent_per_worker, DoubleNear(2e6 + 8, 1e-6));
  in.gossip_bucket_bytes = 0;  // a message per parameter and the weight's: 3 * 100 us + 16 ms
  EXPECT_THAT(Find(PredictIteration(in).value(), "sgp_overlap").seconds_per_iteration,
              DoubleNear(0.0163 + 2 * kWeight, kEps));
  in.compression_ratio = 2;  // compress(fp16) on the pushes
  EXPECT_THAT(Find(PredictIteration(in).value(), "sgp").bytes_sent_per_worker, DoubleNear(1e6 + 4, 1e-6));
  in.gossip_overlap = 0;
  EXPECT_THAT(std::string(PredictIteration(in).status().message()), ::testing::HasSubstr("tau must be >= 1"));
}

// A ring step never costs less than the link's floor: a small message pays
// it (6 steps of 1 ms), a large one its bytes.
TEST(TimingModelTest, SmallMessagesPayTheLinksFloor) {
  LinkModel link;
  link.alpha_seconds = 100e-6;
  link.beta_bytes_per_second = 1e8;
  link.min_step_seconds = 1e-3;
  EXPECT_THAT(RingAllReduceSeconds(4, 4096, link), DoubleNear(6e-3, kEps));
  EXPECT_THAT(RingAllReduceSeconds(4, 4e6, link), DoubleNear(6 * (100e-6 + 1e6 / 1e8), kEps));
}

TEST(TimingModelTest, ReductionCostCompressionAndShards) {
  TimingInputs in = Base();
  in.link.gamma_seconds_per_byte = 1e-9;
  TimingPrediction p = PredictIteration(in).value();
  // + (n-1)/n * M * gamma = 0.75 ms for the ring; + (n-1) M gamma / S = 3 ms for the server.
  EXPECT_THAT(p.ring_comm_seconds, DoubleNear(0.0126 + 0.00075, kEps));
  EXPECT_THAT(p.ps_comm_seconds, DoubleNear(0.0642 + 0.003, kEps));

  in = Base();
  in.compression_ratio = 4;
  in.codec_seconds = 0.001;
  p = PredictIteration(in).value();
  // 250,000 bytes on the wire: 6 * (100 us + 0.5 ms) = 3.6 ms; compute 11 ms.
  EXPECT_THAT(p.ring_comm_seconds, DoubleNear(0.0036, kEps));
  EXPECT_THAT(p.compute_seconds, DoubleNear(0.011, kEps));
  EXPECT_THAT(Find(p, "sync_allreduce").seconds_per_iteration, DoubleNear(0.0146, kEps));
  // Pipelined, the codec runs on the collective thread: max(10 ms of compute, 3.6 + 1 ms).
  EXPECT_THAT(Find(p, "pipe_sgd").seconds_per_iteration, DoubleNear(0.010, kEps));
  EXPECT_THAT(Find(p, "pipe_sgd").comm_seconds, DoubleNear(0.0046, kEps));
  EXPECT_THAT(p.wire_bytes_per_step, DoubleNear(375000, 1e-6));
  EXPECT_EQ(p.gradient_bytes, 1000000);  // uncompressed

  in = Base();
  in.servers = 2;
  p = PredictIteration(in).value();
  // 2 * (100 us + 4e6 / (2 * 125e6)) = 32.2 ms: bandwidth halves, latency stays.
  EXPECT_THAT(p.ps_comm_seconds, DoubleNear(0.0322, kEps));
  EXPECT_EQ(Find(p, "parameter_server").description, "parameter server (2 shards)");
}

// E[max of n draws] from {1, 2, 3, 4}: n = 1 is the mean; n = 2 by hand over
// the 16 ordered pairs (max 1 once, 2 three times, 3 five, 4 seven) = 50/16.
TEST(TimingModelTest, ExpectedMaxOfDraws) {
  EXPECT_DOUBLE_EQ(ExpectedMaxOf({4, 2, 1, 3}, 1), 2.5);
  EXPECT_DOUBLE_EQ(ExpectedMaxOf({4, 2, 1, 3}, 2), 50.0 / 16);
  EXPECT_DOUBLE_EQ(ExpectedMaxOf({7, 7, 7}, 8), 7);
  EXPECT_LT(ExpectedMaxOf({1, 2, 3, 4}, 64), 4.0);
  EXPECT_GT(ExpectedMaxOf({1, 2, 3, 4}, 64), 3.99);
  EXPECT_EQ(ExpectedMaxOf({}, 4), 0);
}

TEST(TimingModelTest, WidthOneIsSynchronous) {
  TimingInputs in = Base();
  in.pipe_width = 1;
  TimingPrediction p = PredictIteration(in).value();
  EXPECT_DOUBLE_EQ(Find(p, "pipe_sgd").seconds_per_iteration, Find(p, "sync_allreduce").seconds_per_iteration);
  EXPECT_DOUBLE_EQ(Find(p, "pipe_sgd").speedup, 1.0);
  // Wider pipelines are no faster than K = 2 (they add staleness only).
  in.pipe_width = 2;
  double k2 = Find(PredictIteration(in).value(), "pipe_sgd").seconds_per_iteration;
  in.pipe_width = 8;
  EXPECT_DOUBLE_EQ(Find(PredictIteration(in).value(), "pipe_sgd").seconds_per_iteration, k2);
}

TEST(TimingModelTest, PipeNeverSlowerThanSyncAndAtMostTwiceAsFast) {
  for (int n : {2, 4, 16, 128}) {
    for (double compute : {1e-4, 1e-3, 1e-2, 1e-1}) {
      for (int64_t bytes : {int64_t{4096}, int64_t{1} << 20, int64_t{100} << 20}) {
        TimingInputs in = Base();
        in.workers = n;
        in.compute_seconds = compute;
        in.bucket_bytes = {bytes, bytes / 2};
        TimingPrediction p = PredictIteration(in).value();
        double sync = Find(p, "sync_allreduce").seconds_per_iteration;
        double pipe = Find(p, "pipe_sgd").seconds_per_iteration;
        EXPECT_LE(pipe, sync);
        EXPECT_GE(pipe * 2, sync);  // max(a, b) >= (a + b) / 2
      }
    }
  }
  // The best case, compute and communication balanced, halves the iteration.
  TimingInputs in = Base();
  in.compute_seconds = 0.0126;
  TimingPrediction p = PredictIteration(in).value();
  EXPECT_THAT(Find(p, "pipe_sgd").speedup, DoubleNear(2, 1e-9));
}

TEST(TimingModelTest, ParameterServerWinsOnlyWhenLatencyDominates) {
  // ring - ps = 2(n-2) alpha - 2M/beta * (n - (n-1)/n): equal at
  // M* = (n-2) alpha beta / (n - (n-1)/n).
  TimingInputs in = Base();
  in.workers = 8;
  in.link.alpha_seconds = 1e-3;
  const double n = 8, beta = in.link.beta_bytes_per_second;
  const double crossover = (n - 2) * in.link.alpha_seconds * beta / (n - (n - 1) / n);
  in.bucket_bytes = {static_cast<int64_t>(crossover * 0.9)};
  TimingPrediction small = PredictIteration(in).value();
  EXPECT_LT(small.ps_comm_seconds, small.ring_comm_seconds);
  EXPECT_GT(Find(small, "parameter_server").speedup, 1);
  in.bucket_bytes = {static_cast<int64_t>(crossover * 1.1)};
  TimingPrediction large = PredictIteration(in).value();
  EXPECT_GT(large.ps_comm_seconds, large.ring_comm_seconds);
  EXPECT_LT(Find(large, "parameter_server").speedup, 1);
  // Two workers: the ring has no latency advantage to lose (2 alpha each), and
  // the server carries twice the bytes, so the ring always wins.
  in.workers = 2;
  for (int64_t bytes : {int64_t{4}, int64_t{1} << 20}) {
    in.bucket_bytes = {bytes};
    TimingPrediction p = PredictIteration(in).value();
    EXPECT_LT(p.ring_comm_seconds, p.ps_comm_seconds);
  }
}

TEST(TimingModelTest, EachBucketPaysItsLatency) {
  TimingInputs one = Base();
  one.bucket_bytes = {1200000};
  TimingInputs three = Base();
  three.bucket_bytes = {400000, 400000, 400000};
  TimingPrediction p1 = PredictIteration(one).value(), p3 = PredictIteration(three).value();
  // Same bytes; two more buckets cost 2 * 2(n-1) alpha in the ring and 2 * 2 alpha at the server.
  EXPECT_THAT(p3.ring_comm_seconds - p1.ring_comm_seconds, DoubleNear(2 * 6 * 100e-6, kEps));
  EXPECT_THAT(p3.ps_comm_seconds - p1.ps_comm_seconds, DoubleNear(2 * 2 * 100e-6, kEps));
  EXPECT_EQ(p3.gradient_bytes, p1.gradient_bytes);
  EXPECT_DOUBLE_EQ(p3.wire_bytes_per_step, p1.wire_bytes_per_step);
}

TEST(TimingModelTest, SyncStartsEachBucketWhenItsGradientsAreReady) {
  TimingInputs in = Base();
  in.bucket_bytes = {400000, 400000, 400000};  // each 6 * (100 us + 800 us) = 5.4 ms in the ring
  in.bucket_ready_fraction = {0.3, 0.5, 1.0};  // ready 3, 5 and 10 ms into the 10 ms step
  TimingPrediction p = PredictIteration(in).value();
  // Ring: 3 + 5.4 = 8.4; max(5, 8.4) + 5.4 = 13.8; max(10, 13.8) + 5.4 = 19.2 ms,
  // against 10 + 16.2 = 26.2 ms without overlap.
  EXPECT_THAT(Find(p, "sync_allreduce").seconds_per_iteration, DoubleNear(0.0192, kEps));
  EXPECT_THAT(p.ring_hidden_seconds, DoubleNear(0.007, kEps));
  // Server: each bucket 2 * (100 us + 4 * 400000 / 125e6 s) = 25.8 ms; 3 + 3 * 25.8 = 80.4 ms.
  EXPECT_THAT(Find(p, "parameter_server").seconds_per_iteration, DoubleNear(0.0804, kEps));
  EXPECT_THAT(p.ps_hidden_seconds, DoubleNear(0.007, kEps));
  // Pipe-SGD is unchanged, max(10, 16.2) ms; width 1 is the overlapped sync.
  EXPECT_THAT(Find(p, "pipe_sgd").seconds_per_iteration, DoubleNear(0.0162, kEps));
  in.pipe_width = 1;
  EXPECT_THAT(Find(PredictIteration(in).value(), "pipe_sgd").seconds_per_iteration, DoubleNear(0.0192, kEps));
  // Every bucket ready at the end: no overlap, T_compute + T_comm.
  in.bucket_ready_fraction = {1, 1, 1};
  p = PredictIteration(in).value();
  EXPECT_THAT(Find(p, "sync_allreduce").seconds_per_iteration, DoubleNear(0.0262, kEps));
  EXPECT_THAT(p.ring_hidden_seconds, DoubleNear(0, kEps));
  // Ready at once: the communication alone bounds it, or the compute.
  EXPECT_THAT(OverlappedIterationSeconds(0.010, {0, 0, 0}, {0.0054, 0.0054, 0.0054}), DoubleNear(0.0162, kEps));
  EXPECT_THAT(OverlappedIterationSeconds(0.010, {0.1, 0.2}, {0.001, 0.001}), DoubleNear(0.010, kEps));
  EXPECT_THAT(OverlappedIterationSeconds(0.010, {}, {0.001, 0.002}), DoubleNear(0.013, kEps));
}

TEST(TimingModelTest, OverlappedCommunicationTakesCpuFromPipelinedCompute) {
  TimingInputs in = Base();
  in.compute_seconds = 0.020;
  in.link.cpu_seconds_per_byte_sent = 4e-9;  // 4 ns per byte sent
  in.link.cores_per_worker = 0.5;            // 4 workers on 2 cores
  TimingPrediction p = PredictIteration(in).value();
  // T_cpu = 4 ns * 1.5e6 bytes / 0.5 cores = 12 ms, on top of 20 ms of compute.
  EXPECT_THAT(p.overlapped_comm_cpu_seconds, DoubleNear(0.012, kEps));
  const StrategyTime& pipe = Find(p, "pipe_sgd");
  EXPECT_THAT(pipe.compute_seconds, DoubleNear(0.032, kEps));
  EXPECT_THAT(pipe.seconds_per_iteration, DoubleNear(0.032, kEps));  // max(32 ms, 12.6 ms)
  // Synchronous training does not overlap: unchanged (20 + 12.6 ms).
  EXPECT_THAT(Find(p, "sync_allreduce").seconds_per_iteration, DoubleNear(0.0326, kEps));
  // Width 1 is synchronous, also here.
  in.pipe_width = 1;
  EXPECT_THAT(Find(PredictIteration(in).value(), "pipe_sgd").seconds_per_iteration, DoubleNear(0.0326, kEps));
  // Without the cores per worker nothing is charged.
  in.pipe_width = 2;
  in.link.cores_per_worker = 0;
  EXPECT_THAT(Find(PredictIteration(in).value(), "pipe_sgd").seconds_per_iteration, DoubleNear(0.020, kEps));
}

// On a host whose cores the ranks' compute holds, the communication that
// overlaps compute runs at the link measured beside busy compute: Pipe-SGD's
// and overlap SGP's stages lengthen, the synchronous step does not.
TEST(TimingModelTest, OverlappedCommunicationRunsOnTheLinkBesideBusyCompute) {
  TimingInputs in = Base();
  const TimingPrediction quiet = PredictIteration(in).value();
  EXPECT_THAT(quiet.overlapped_ring_comm_seconds, DoubleNear(0.0126, kEps));
  EXPECT_THAT(Find(quiet, "sgp_overlap").seconds_per_iteration, DoubleNear(0.010, kEps));
  // Half the bandwidth, twice the latency: each of the ring's 6 steps moves
  // 250 KB in 0.2 + 4 ms.
  in.busy_compute_link.alpha_seconds = 200e-6;
  in.busy_compute_link.beta_bytes_per_second = 62.5e6;
  const TimingPrediction p = PredictIteration(in).value();
  EXPECT_THAT(p.overlapped_ring_comm_seconds, DoubleNear(0.0252, kEps));
  EXPECT_THAT(Find(p, "pipe_sgd").comm_seconds, DoubleNear(0.0252, kEps));
  EXPECT_THAT(Find(p, "pipe_sgd").seconds_per_iteration, DoubleNear(0.0252, kEps));
  EXPECT_THAT(Find(p, "sync_allreduce").seconds_per_iteration,
              DoubleNear(Find(quiet, "sync_allreduce").seconds_per_iteration, kEps));
  // One 1,000,004-byte push (the bucket and the weight): 0.2 + 16.0 ms.
  EXPECT_THAT(Find(p, "sgp_overlap").seconds_per_iteration, DoubleNear(0.0162, 1e-6));
  EXPECT_THAT(Find(p, "sgp").seconds_per_iteration, DoubleNear(Find(quiet, "sgp").seconds_per_iteration, kEps));
}

TEST(TimingModelTest, CommunicationInsideTheComputeSlowsIt) {
  // Beside a busy link the step took 20 ms instead of 10: rho = (20 - 10) / 20.
  TimingInputs in = Base();
  in.busy_link_compute_seconds = 0.020;
  TimingPrediction p = PredictIteration(in).value();
  EXPECT_TRUE(p.interference_from_busy_profile);
  EXPECT_THAT(p.comm_interference, DoubleNear(0.5, kEps));
  // Pipelined, the 12.6 ms allreduce runs inside the step: 10 + 0.5 * 12.6 ms.
  EXPECT_THAT(Find(p, "pipe_sgd").compute_seconds, DoubleNear(0.0163, kEps));
  EXPECT_THAT(Find(p, "pipe_sgd").seconds_per_iteration, DoubleNear(0.0163, kEps));
  // One bucket sent when the step ends overlaps nothing: unchanged.
  EXPECT_THAT(Find(p, "sync_allreduce").seconds_per_iteration, DoubleNear(0.0226, kEps));
  // Beside the busy link 12 ms: a step overlapped throughout takes those 12 ms,
  // and the 12.6 ms allreduce is the longer stage.
  in.busy_link_compute_seconds = 0.012;
  p = PredictIteration(in).value();
  EXPECT_THAT(Find(p, "pipe_sgd").compute_seconds, DoubleNear(0.012, kEps));
  EXPECT_THAT(Find(p, "pipe_sgd").seconds_per_iteration, DoubleNear(0.0126, kEps));
  // A busy-link profile faster than the quiet one charges nothing.
  in.busy_link_compute_seconds = 0.009;
  p = PredictIteration(in).value();
  EXPECT_THAT(p.comm_interference, DoubleNear(0, kEps));
  EXPECT_THAT(Find(p, "pipe_sgd").seconds_per_iteration, DoubleNear(0.0126, kEps));

  // Synchronous with three 5.4 ms buckets ready at 30%, 50% and 100% of the
  // step, rho = 0.5: the first two run back to back from 0.3 T'' past T'', so
  // busy = 0.7 T'' and T'' = 10 / (1 - 0.5 * 0.7) ms; the third waits for the
  // second: 0.3 T'' + 3 * 5.4 ms.
  in.bucket_bytes = {400000, 400000, 400000};
  in.bucket_ready_fraction = {0.3, 0.5, 1.0};
  in.busy_link_compute_seconds = 0.020;
  p = PredictIteration(in).value();
  const double slowed = 0.010 / 0.65;
  EXPECT_THAT(Find(p, "sync_allreduce").compute_seconds, DoubleNear(slowed, 1e-10));
  EXPECT_THAT(Find(p, "sync_allreduce").seconds_per_iteration, DoubleNear(0.3 * slowed + 0.0162, 1e-10));
  // The server's 25.8 ms buckets also run from 0.3 T'' past T''.
  EXPECT_THAT(Find(p, "parameter_server").seconds_per_iteration, DoubleNear(0.3 * slowed + 3 * 0.0258, 1e-10));

  // From the host CPU instead: T_cpu = 4 ns * 1.8e6 bytes / 0.5 cores = 14.4 ms
  // over 16.2 ms of communication. The first two buckets (10.8 ms) end inside
  // the step: T'' = 10 + 14.4 * 10.8 / 16.2 = 19.6 ms, then the third, 25 ms.
  in.busy_link_compute_seconds = 0;
  in.link.cpu_seconds_per_byte_sent = 4e-9;
  in.link.cores_per_worker = 0.5;
  p = PredictIteration(in).value();
  EXPECT_FALSE(p.interference_from_busy_profile);
  EXPECT_THAT(p.comm_interference, DoubleNear(0.0144 / 0.0162, 1e-10));
  EXPECT_THAT(Find(p, "sync_allreduce").compute_seconds, DoubleNear(0.0196, 1e-10));
  EXPECT_THAT(Find(p, "sync_allreduce").seconds_per_iteration, DoubleNear(0.025, 1e-10));
}

TEST(TimingModelTest, SlowedComputeIsTheLeastFixedPoint) {
  // busy(T) = min(5, T) with rho 0.5: T = 10 + 2.5.
  auto capped = [](double t) { return std::min(0.005, t); };
  EXPECT_THAT(SlowedCompute(0.010, 0.5, 0.005, capped), DoubleNear(0.0125, 1e-12));
  // busy(T) = T with rho 0.5 (never capped below 100 ms): T = 10 / 0.5.
  EXPECT_THAT(SlowedCompute(0.010, 0.5, 0.1, [](double t) { return t; }), DoubleNear(0.020, 1e-12));
  // rho >= 1 stops at the bound, compute + rho * max_busy.
  EXPECT_THAT(SlowedCompute(0.010, 2, 0.005, capped), DoubleNear(0.020, 1e-12));
  EXPECT_THAT(SlowedCompute(0.010, 0, 0.005, capped), DoubleNear(0.010, 0));
  // Time inside [0, 10 ms] with buckets from 3 ms (5.4 ms) and then from 8.4 ms.
  EXPECT_THAT(CommBusyDuring(0.010, {0.3, 0.5, 1.0}, {0.0054, 0.0054, 0.0054}), DoubleNear(0.007, kEps));
  EXPECT_THAT(CommBusyDuring(0.010, {}, {0.0054}), DoubleNear(0, kEps));
}

TEST(TimingModelTest, RejectsBadInputs) {
  auto error = [](auto mutate) {
    TimingInputs in = Base();
    mutate(in);
    absl::StatusOr<TimingPrediction> p = PredictIteration(in);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(p.status().message());
  };
  EXPECT_THAT(error([](TimingInputs& in) { in.workers = 1; }), HasSubstr("workers must be >= 2"));
  EXPECT_THAT(error([](TimingInputs& in) { in.batch_per_worker = 0; }), HasSubstr("batch"));
  EXPECT_THAT(error([](TimingInputs& in) { in.compute_seconds = 0; }), HasSubstr("compute time"));
  EXPECT_THAT(error([](TimingInputs& in) { in.bucket_bytes.clear(); }), HasSubstr("no gradient messages"));
  EXPECT_THAT(error([](TimingInputs& in) { in.bucket_bytes = {10, 0}; }), HasSubstr("a bucket of 0 bytes"));
  EXPECT_THAT(error([](TimingInputs& in) { in.link.beta_bytes_per_second = 0; }), HasSubstr("bandwidth"));
  EXPECT_THAT(error([](TimingInputs& in) { in.link.alpha_seconds = -1; }), HasSubstr("latency"));
  EXPECT_THAT(error([](TimingInputs& in) { in.pipe_width = 0; }), HasSubstr("width"));
  EXPECT_THAT(error([](TimingInputs& in) { in.servers = 0; }), HasSubstr("servers"));
  EXPECT_THAT(error([](TimingInputs& in) { in.compression_ratio = 0.5; }), HasSubstr("compression ratio"));
  EXPECT_THAT(error([](TimingInputs& in) { in.codec_seconds = -1; }), HasSubstr("codec"));
  EXPECT_THAT(error([](TimingInputs& in) { in.link.cpu_seconds_per_byte_sent = -1; }), HasSubstr("CPU cost"));
  EXPECT_THAT(error([](TimingInputs& in) { in.link.cores_per_worker = -1; }), HasSubstr("cores per worker"));
  EXPECT_THAT(error([](TimingInputs& in) { in.busy_link_compute_seconds = -1; }), HasSubstr("beside a busy link"));
  EXPECT_THAT(error([](TimingInputs& in) { in.busy_compute_link.beta_bytes_per_second = -1; }),
              HasSubstr("beside busy compute"));
  EXPECT_THAT(error([](TimingInputs& in) { in.busy_link_compute_seconds = std::nan(""); }),
              HasSubstr("beside a busy link"));
  EXPECT_THAT(error([](TimingInputs& in) { in.bucket_ready_fraction = {0.5, 0.5}; }),
              HasSubstr("2 bucket ready times for 1 buckets"));
  EXPECT_THAT(error([](TimingInputs& in) { in.bucket_ready_fraction = {1.5}; }),
              HasSubstr("bucket 0 ready fraction must be in [0, 1]"));
}

// Chunks on two servers behind fast links: the two pushes share the
// worker's uplink (50 MB/s each, both 50-70 ms), then the two pulls its
// downlink (70-90 ms). The links are busy 20 ms each inside the compute.
TEST(ServerChunkScheduleTest, PushesAndPullsShareTheWorkersLinks) {
  LinkModel link;
  link.beta_bytes_per_second = 1e8;
  const std::vector<ServerChunk> chunks = {{1000000, 0, 0.5}, {1000000, 1, 0.5}};
  const ServerChunkSchedule s = ScheduleServerChunks(0.1, chunks, 2, 2, link, 1e9);
  EXPECT_NEAR(s.last_pull_end, 0.090, 1e-12);
  EXPECT_NEAR(s.busy_during_compute, 0.040, 1e-12);
  EXPECT_NEAR(s.push_seconds, 0.020, 1e-12);
  EXPECT_NEAR(s.pull_seconds, 0.020, 1e-12);
  // Behind the workers' own links, one server takes both chunks' pieces from
  // 2 workers through its link: each worker gets half of it, 2 MB / 1e8 =
  // 20 ms a transfer, one chunk after the other.
  const std::vector<ServerChunk> one = {{1000000, 0, 0.5}, {1000000, 0, 0.5}};
  const ServerChunkSchedule slow = ScheduleServerChunks(0.1, one, 2, 1, link, 0);
  EXPECT_NEAR(slow.last_pull_end, 0.110, 1e-12);  // pushes 50-70, 70-90; pulls 70-90, 90-110
  EXPECT_NEAR(slow.push_seconds, 0.040, 1e-12);
  // The links carry half their rate while the one server's link is the
  // bottleneck: pushes 50-90 and pulls 70-100 ms inside the compute.
  EXPECT_NEAR(slow.busy_during_compute, (0.040 + 0.030) / 2, 1e-12);
}

// Servers behind links as slow as the workers': with two servers the two
// chunks go at once, each at half a worker's link (which is also each
// worker's share of its server's), and end the step 20 ms sooner than one
// server, which takes them one after another. The busiest link per step is
// a worker's (20 ms) with two servers, the one server's (40 ms) with one.
TEST(ServerChunkScheduleTest, ASecondServerTakesChunksWhileTheFirstIsBusy) {
  LinkModel link;
  link.beta_bytes_per_second = 1e8;
  const std::vector<ServerChunk> two = {{1000000, 0, 0.5}, {1000000, 1, 0.5}};
  const ServerChunkSchedule s = ScheduleServerChunks(0.1, two, 2, 2, link, 1e8);
  EXPECT_NEAR(s.last_pull_end, 0.090, 1e-12);  // pushes 50-70, pulls 70-90 ms
  EXPECT_NEAR(s.push_seconds, 0.020, 1e-12);
  const std::vector<ServerChunk> one = {{1000000, 0, 0.5}, {1000000, 0, 0.5}};
  const ServerChunkSchedule single = ScheduleServerChunks(0.1, one, 2, 1, link, 1e8);
  EXPECT_NEAR(single.last_pull_end, 0.110, 1e-12);  // server 0's egress: 70-90, 90-110 ms
  EXPECT_NEAR(single.push_seconds, 0.040, 1e-12);
}

// A chunk becomes a stream's only when ready, its pull one latency (plus
// the summing) after its push's last byte, and the pull ends a latency
// after its own last byte: one 1 MB chunk, 2 workers, alpha 1 ms, gamma
// 1 ns per byte, ready at 30 ms: push 30-40, pull from 40 + 1 + 1 = 42 to
// 52, seen at 53 ms.
TEST(ServerChunkScheduleTest, LatencyAndSummingDelayEachPull) {
  LinkModel link;
  link.beta_bytes_per_second = 1e8;
  link.alpha_seconds = 1e-3;
  link.gamma_seconds_per_byte = 1e-9;
  const ServerChunkSchedule s = ScheduleServerChunks(0.1, {{1000000, 0, 0.3}}, 2, 1, link, 1e9);
  EXPECT_NEAR(s.last_pull_end, 0.053, 1e-12);
  EXPECT_NEAR(s.busy_during_compute, 0.020, 1e-12);
}

}  // namespace
}  // namespace nereid
