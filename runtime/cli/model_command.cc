// nereid model: predicts the iteration time of synchronous ring-allreduce SGD,
// a parameter server and Pipe-SGD from a compute profile, the plan's gradient
// buckets and the link (timing/timing_model.h, docs/TIMING_MODEL.md).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "compress/layer_bytes.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "core/tensor_shape.h"
#include "graph/ir.h"
#include "ops/model_loader.h"
#include "passes/pass_manager.h"
#include "plan/build_plan.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "timing/hybrid_timing.h"
#include "timing/timing_model.h"
#include "timing/trace_profile.h"

namespace nereid {
namespace {


Flags ModelFlags() {
  Flags f("nereid model MODEL_OR_PLAN --workers N (--compute-ms X | --profile TRACE.json)\n"
          "                   (--latency-us A --bandwidth-gbit G | --link BENCH.json) [flags]",
          "Predicts the time per iteration of synchronous ring-allreduce SGD, a parameter server,\n"
          "Pipe-SGD of width K (Li et al., NeurIPS 2018) and SGP, plain and overlapped (Assran et al.,\n"
          "2019), on N workers, from one worker's compute time, the plan's gradient buckets (its\n"
          "AllReduce nodes) and parameters, and the link's latency and bandwidth.\n"
          "docs/TIMING_MODEL.md gives the formulas.");
  f.Value("workers", "N", "cluster size (required, >= 2)")
      .Value("batch", "B", "samples per worker per step (default 64)")
      .Value("width", "K", "Pipe-SGD width (default 2; 1 is synchronous SGD)")
      .Value("passes", "PIPELINE",
             "passes for a model that is not planned yet (default: the same as\n"
             "nereid run's; data_parallel is added after autodiff when missing)")
      .Value("json", "PATH", "write the prediction as JSON");
  f.Section("Compute (one of)")
      .Value("compute-ms", "X", "one worker's step, in milliseconds")
      .Value("straggler-ms", "X",
             "one worker computes X ms longer every step (as NEREID_FAULTS\n"
             "slow=X, before its step's compute): each strategy here moves at\n"
             "its slowest worker's pace, so every step is taken to be X ms\n"
             "longer, its gradients ready X ms later (default 0)")
      .Value("profile", "TRACE.json[,...]",
             "traces of 1-worker `nereid run --trace` runs (same\n"
             "batch; several taken at once share the cores as the cluster's\n"
             "ranks will): their steps after --warmup-steps (default 5) each,\n"
             "pooled, and the first trace's slowest nodes; their end times say\n"
             "when each bucket's gradients are ready, so synchronous SGD's\n"
             "allreduces overlap the rest of the backward pass")
      .Value("warmup-steps", "N", "profiled steps to skip in each trace (default 5)")
      .Value("compute-stat", "S",
             "what one iteration's compute is, from the profiled steps:\n"
             "slowest (the expected slowest of --workers draws, since every\n"
             "rank waits for the last one's gradients) or median; default\n"
             "slowest, median when the ranks share cores (--link's report or\n"
             "--cores-per-worker < 1: a step then ends when the shared cores\n"
             "have done every rank's work, the profiles' median pace)")
      .Value("top", "N", "nodes to list from the profile (default 10)")
      .Value("busy-link-profile", "TRACE.json[,...]",
             "with --profile: the same runs taken while allreduces\n"
             "keep the workers' links busy (bench/pipe_sgd.py takes both); the\n"
             "compute they lose sets how much communication that overlaps a\n"
             "step slows it (default: the host CPU below)");
  f.Section("Link (--latency-us and --bandwidth-gbit, or --link)")
      .Value("latency-us", "A", "the link's latency in microseconds")
      .Value("bandwidth-gbit", "G", "the link's bandwidth in Gbit/s")
      .Value("link", "BENCH.json", "alpha and beta of the link measured by `nereid bench allreduce --json`")
      .Switch("link-fit",
              "with --link: alpha and beta fitted to the allreduce times it measured\n"
              "(Nereid's communicator, overheads included) instead of the link's")
      .Value("gamma-ns-per-byte", "Y", "cost of summing one byte in a reduction (default 0)")
      .Value("busy-compute-link", "BENCH.json",
             "with --link: the same benchmark taken while every rank computes\n"
             "(bench/pipe_sgd.py takes it); the communication that overlaps\n"
             "compute (Pipe-SGD, overlap SGP) runs at its alpha and beta");
  f.Section("Host (the CPU an overlapped allreduce takes from the compute it overlaps, without\n"
            "--busy-link-profile; default: from --link's report when it measured them, else 0 = none)")
      .Value("comm-cpu-ns-per-byte", "K", "the machine's CPU time per byte a worker sends")
      .Value("cores-per-worker", "C", "cores each worker has (e.g. 0.5: 4 workers on 2 cores)");
  f.Section("Variants")
      .Value("servers", "S", "parameter-server shards (default 1)")
      .Value("chunk-kb", "KB",
             "the parameter server's chunks, as parameter_server(chunk_kb) (default\n"
             "0: the pass's own choice); a model (not a plan) is planned with the pass to find them")
      .Switch("split", "the parameter server's chunks balanced over the servers, as parameter_server(split=true)")
      .Value("server-bandwidth-gbit", "G", "the servers' links (default: the workers')")
      .Value("server-link", "BENCH.json",
             "the servers' links as `nereid bench allreduce --json` measured one\n"
             "between two ranks (its payload rate; instead of --server-bandwidth-gbit)")
      .Value("staleness", "S", "the stale-synchronous server's staleness (default 1)")
      .Value("compression-ratio", "R", "gradient bytes on the wire divided by R (default 1)")
      .Value("codec-ms", "C", "encode + decode time per step (default 0), on the collective thread: added to\n"
                              "a synchronous step, and to a pipelined step's communication")
      .Value("gossip-peers", "P", "SGP's out-neighbours per step (default 1)")
      .Value("gossip-overlap", "T", "overlap SGP's tau (default 1)")
      .Value("gossip-bucket-kb", "KB", "SGP's parameters packed per message, as gossip(bucket_kb) (default 4096)");
  return f;
}

int Usage(const std::string& error) {
  std::fprintf(stderr, "error: %s\n", error.c_str());
  return kExitUsage;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return kExitFailure;
}

absl::StatusOr<double> Number(const Flags& flags, const std::string& name, double fallback) {
  if (!flags.Has(name)) return fallback;
  double v;
  std::string text = flags.String(name);
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", text, " is not a number"));
  }
  return v;
}

// The plan's AllReduce nodes, in bucket order: the bytes of each one's
// inputs and the nodes producing them.
struct PlannedBuckets {
  std::vector<int64_t> bytes;
  std::vector<std::vector<std::string>> producers;
  std::vector<int64_t> parameter_bytes;  // the trained parameters' (SGP's messages)
};

// A bucket's bytes are what it puts on the wire, as the ring allreduce that
// sends as much (compress/layer_bytes.h RingMessageOf: 16-bit wires, codec
// payloads), so the ring formula prices every message alike.
absl::StatusOr<PlannedBuckets> BucketsOf(const Graph& graph, const std::string& path, int workers) {
  struct Bucket {
    int64_t order, bytes = 0;
    std::vector<std::string> producers;
  };
  std::vector<Bucket> buckets;
  for (Node* n : graph.nodes()) {
    if (n->op() != "AllReduce" && n->op() != "CompressedAllReduce") continue;
    auto bucket = n->def().attr().find("bucket");
    buckets.push_back({bucket == n->def().attr().end() ? n->id() : bucket->second.i()});
    for (int i = 0; i < n->num_inputs(); ++i) {
      const Edge* e = n->input_edge(i);
      if (e == nullptr) continue;
      buckets.back().producers.push_back(e->src->name());
      const ShapeAndType& out = e->src->outputs()[e->src_port];
      if (!out.shape.IsFullyDefined()) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, ": input ", i, " of '", n->name(), "' has unknown shape ", out.shape.ToString()));
      }
    }
    absl::StatusOr<RingMessage> message = RingMessageOf(*n, workers);
    if (!message.ok()) return message.status();
    // A codec's rounds are collectives one after another: a message each
    // (their latencies add), the payload shared out among them.
    buckets.back().bytes = message->bytes / message->rounds;
    const Bucket round = buckets.back();
    for (int r = 1; r < message->rounds; ++r) buckets.push_back(round);
  }
  std::sort(buckets.begin(), buckets.end(), [](const Bucket& a, const Bucket& b) { return a.order < b.order; });
  PlannedBuckets planned;
  for (Node* n : graph.nodes()) {
    if (n->op() == "Parameter" && NodeAttrBool(*n, "trainable", true) && n->outputs()[0].shape.IsFullyDefined()) {
      planned.parameter_bytes.push_back(n->outputs()[0].shape.KnownElements() * 4);
    }
  }
  for (Bucket& b : buckets) {
    planned.bytes.push_back(b.bytes);
    planned.producers.push_back(std::move(b.producers));
  }
  return planned;
}

std::string Bytes(double b) {
  if (b >= 1 << 20) return absl::StrFormat("%.2f MiB", b / (1 << 20));
  if (b >= 1 << 10) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrFormat("%.0f B", b);
}

std::string Ms(double seconds) { return absl::StrFormat("%.3f", seconds * 1e3); }

// What `nereid model` prints and writes: the prediction and where its inputs came from.
struct Report {
  std::string model;
  TimingInputs in;
  TimingPrediction p;
  std::string compute_source, link_source;
  std::unique_ptr<TraceProfile> profile;  // null: compute given
  std::string compute_stat;               // with a profile: how compute was taken
  std::string busy_link_source;           // with --busy-link-profile: its traces
  std::string busy_compute_link_source;   // with --busy-compute-link: its benchmark
  std::string server_link_source;         // "given", or the --server-link benchmark
  double straggler_seconds = 0;           // --straggler-ms, included in in.compute_seconds
  int top = 10;                           // nodes listed from the profile
  std::optional<HybridInputs> hybrid;     // a hybrid plan's (hybrid_partition)
  HybridTime hybrid_time;
  std::vector<std::string> unprofiled_producers;  // bucket inputs the profile has not timed
};

// The chunks the parameter_server pass cuts the model's parameters into for
// `servers` servers, in plan order, with the node producing each one's
// gradient (for its ready time); none for a graph planned already.
struct PlannedChunk {
  ServerChunk chunk;
  std::string producer;
};

absl::StatusOr<std::vector<PlannedChunk>> PlanServerChunks(const std::string& path, int workers, int servers,
                                                           double chunk_kb, bool split) {
  const PlanTarget target{workers + servers, servers};
  ASSIGN_OR_RETURN(std::vector<PipelineStage> pipeline,
                   PipelineFor(absl::StrCat("autodiff,sgd(lr=0.01),parameter_server(servers=", servers,
                                            ",chunk_kb=", chunk_kb, split ? ",split=true" : "", ")"),
                               target));
  PlanRequest request{path, std::move(pipeline), target};
  request.check_trainable = false;
  request.whole_only = true;
  absl::StatusOr<BuiltPlan> built = BuildPlan(request);
  if (!built.ok()) return built.status();
  // A plan given as the model has its own strategy.
  if (built->reports.empty() || built->whole == nullptr) return std::vector<PlannedChunk>{};
  const std::unique_ptr<Graph>* graph = &built->whole;
  std::vector<PlannedChunk> chunks;
  for (Node* n : (*graph)->nodes()) {
    // A worker's push: Send <- Slice (the chunk) <- Reshape (the flat gradient) <- the gradient.
    if (n->op() != "Send" || !absl::EndsWith(n->name(), "/push")) continue;
    const Node* flat = n->input_edge(0)->src->input_edge(0)->src;
    PlannedChunk c;
    c.chunk.bytes = n->input_edge(0)->src->outputs()[0].shape.KnownElements() * 4;
    c.chunk.server = static_cast<int>(NodeAttrInt(*n, "peer", workers) - workers);
    c.producer = flat->input_edge(0)->src->name();
    chunks.push_back(std::move(c));
  }
  return chunks;
}

// The plan's gradient buckets: the model's AllReduce nodes, after planning it
// with `passes` if it is not planned yet.
absl::StatusOr<PlannedBuckets> PlanBuckets(const std::string& path, const std::vector<PipelineStage>& pipeline,
                                           int workers, std::string* model, std::optional<HybridInputs>* hybrid) {
  PlanRequest request{path, pipeline, PlanTarget{workers}};
  request.check_trainable = false;
  request.whole_only = true;
  absl::StatusOr<BuiltPlan> built = BuildPlan(request);
  if (!built.ok()) return built.status();
  if (built->whole == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is a per-rank plan: give the model, or a one-graph plan (nereid plan without --per-rank)"));
  }
  const std::unique_ptr<Graph>* graph = &built->whole;
  bool has_allreduce = false;
  for (Node* n : (*graph)->nodes()) has_allreduce |= n->op() == "AllReduce" || n->op() == "CompressedAllReduce";
  if (!has_allreduce && built->reports.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is a plan without gradient communication: plan the model with data_parallel, or give the model"));
  }
  absl::StatusOr<PlannedBuckets> buckets = BucketsOf(**graph, path, workers);
  if (buckets.ok() && buckets->bytes.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": the plan has no AllReduce buckets"));
  }
  *model = GraphAttr(**graph, "name").empty() ? path : GraphAttr(**graph, "name");
  *hybrid = HybridInputsFromPlan(**graph);
  return buckets;
}

// Steps of one-worker traces (comma-separated), for the compute time.
absl::StatusOr<TraceProfile> ReadComputeProfile(const std::string& paths, int warmup_steps) {
  TraceProfileOptions options;
  options.warmup_steps = warmup_steps;
  std::vector<std::string> files = absl::StrSplit(paths, ',', absl::SkipEmpty());
  absl::StatusOr<TraceProfile> profile = ReadTraceProfiles(files, options);
  if (!profile.ok()) return profile.status();
  if (!(profile->step_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(paths, ": the median step takes 0 s"));
  }
  if (profile->has_communication) {
    std::fprintf(stderr,
                 "warning: %s holds communication (a multi-worker run?): its steps include it; profile a "
                 "1-worker run for the compute time\n",
                 paths.c_str());
  }
  return profile;
}

// One iteration's compute from profiled steps: their median, or the expected
// slowest of the workers' draws (each ring allreduce waits for the last rank).
double StepStatistic(const TraceProfile& profile, const std::string& stat, int workers) {
  return stat == "median" ? profile.step_seconds : ExpectedMaxOf(profile.measured_step_seconds, workers);
}

// How much of synchronous SGD's communication the backward pass hides.
std::string OverlapLine(const Report& r) {
  const TimingInputs& in = r.in;
  if (in.bucket_ready_fraction.empty()) {
    return "overlap: none assumed (no profile of the nodes: every bucket starts when the step's compute ends)\n";
  }
  std::string out = "overlap: buckets ready at ";
  for (size_t b = 0; b < in.bucket_ready_fraction.size(); ++b) {
    if (b == 8) {
      absl::StrAppend(&out, ", ...");
      break;
    }
    absl::StrAppendFormat(&out, "%s%.0f%%", b > 0 ? ", " : "", 100 * in.bucket_ready_fraction[b]);
  }
  absl::StrAppendFormat(&out, " of the step; synchronous SGD hides %s of its %s ms of communication\n",
                        Ms(r.p.ring_hidden_seconds), Ms(r.p.ring_comm_seconds));
  if (!r.unprofiled_producers.empty()) {
    absl::StrAppendFormat(&out, "  (%d gradient producers are not in the profile, e.g. %s: their buckets start at "
                          "the step's end)\n",
                          r.unprofiled_producers.size(), r.unprofiled_producers.front());
  }
  return out;
}

std::string FormatReport(const Report& r) {
  const TimingInputs& in = r.in;
  const TimingPrediction& p = r.p;
  std::string out;
  absl::StrAppendFormat(&out, "model %s: %d workers, batch %d per worker\n", r.model, in.workers, in.batch_per_worker);
  absl::StrAppendFormat(&out, "gradients: %d bytes in %d bucket%s (", p.gradient_bytes, in.bucket_bytes.size(),
                        in.bucket_bytes.size() == 1 ? "" : "s");
  for (size_t i = 0; i < in.bucket_bytes.size(); ++i) {
    if (i == 8) {
      absl::StrAppend(&out, ", ...");
      break;
    }
    absl::StrAppend(&out, i > 0 ? ", " : "", Bytes(static_cast<double>(in.bucket_bytes[i])));
  }
  absl::StrAppend(&out, ")");
  if (in.compression_ratio != 1) absl::StrAppendFormat(&out, ", compressed %gx", in.compression_ratio);
  absl::StrAppendFormat(&out, "; ring allreduce sends %s per worker per step\n", Bytes(p.wire_bytes_per_step));
  if (!in.server_chunks.empty()) {
    absl::StrAppendFormat(&out, "parameter server: %d chunks on %d server%s, whose links carry %.3f Gbit/s (%s)\n",
                          in.server_chunks.size(), in.servers, in.servers == 1 ? "" : "s",
                          (in.server_beta_bytes_per_second > 0 ? in.server_beta_bytes_per_second
                                                               : in.link.beta_bytes_per_second) * 8e-9,
                          r.server_link_source.empty() ? "the workers' link" : r.server_link_source);
  }
  absl::StrAppendFormat(&out, "link (%s): alpha %.1f us, beta %.3f Gbit/s (%.1f MB/s)", r.link_source,
                        in.link.alpha_seconds * 1e6, in.link.beta_bytes_per_second * 8e-9,
                        in.link.beta_bytes_per_second * 1e-6);
  if (in.link.gamma_seconds_per_byte > 0) {
    absl::StrAppendFormat(&out, ", gamma %.3f ns/byte", in.link.gamma_seconds_per_byte * 1e9);
  }
  absl::StrAppend(&out, "\n");
  if (in.busy_compute_link.beta_bytes_per_second > 0) {
    absl::StrAppendFormat(&out, "link beside busy compute (%s): alpha %.1f us, beta %.1f MB/s: an overlapped "
                          "allreduce takes %s ms (%s alone)\n",
                          r.busy_compute_link_source, in.busy_compute_link.alpha_seconds * 1e6,
                          in.busy_compute_link.beta_bytes_per_second * 1e-6, Ms(p.overlapped_ring_comm_seconds),
                          Ms(p.ring_comm_seconds));
  }
  if (p.overlapped_comm_cpu_seconds > 0) {
    absl::StrAppendFormat(&out, "host: %.1f ns of CPU per byte sent, %.2f cores per worker: an overlapped allreduce "
                          "takes %s ms of CPU%s\n",
                          in.link.cpu_seconds_per_byte_sent * 1e9, in.link.cores_per_worker,
                          Ms(p.overlapped_comm_cpu_seconds),
                          p.interference_from_busy_profile ? " (not charged: the busy-link profile is)"
                                                           : " from the compute it overlaps");
  }
  if (r.profile != nullptr) {
    const TraceProfile& prof = *r.profile;
    absl::StrAppendFormat(&out, "compute: %s ms per step, %s of %d profiled steps (median %s ms; %d warm-up steps "
                          "skipped) (%s)\n",
                          Ms(in.compute_seconds), r.compute_stat, prof.measured_steps,
                          Ms(prof.step_seconds), prof.warmup_steps, r.compute_source);
    const int listed = std::min(r.top, static_cast<int>(prof.nodes.size()));
    absl::StrAppendFormat(&out, "nodes: %d; their medians sum to %s ms, %.0f%% of the step%s\n", prof.nodes.size(),
                          Ms(prof.node_seconds), 100 * prof.node_seconds / prof.step_seconds,
                          listed > 0 ? "; the slowest:" : "");
    if (listed > 0) absl::StrAppendFormat(&out, "  %-40s %-22s %10s %7s\n", "node", "op", "ms", "share");
    for (int i = 0; i < listed; ++i) {
      const NodeTime& n = prof.nodes[i];
      absl::StrAppendFormat(&out, "  %-40s %-22s %10s %6.1f%%\n", n.name, n.op, Ms(n.median_seconds),
                            prof.node_seconds > 0 ? 100 * n.median_seconds / prof.node_seconds : 0.0);
    }
  } else {
    absl::StrAppendFormat(&out, "compute: %s ms per step (given)\n", Ms(in.compute_seconds));
  }
  if (r.straggler_seconds > 0) {
    absl::StrAppendFormat(&out, "straggler: one worker %s ms slower per step, included above: every strategy "
                          "moves at its pace\n", Ms(r.straggler_seconds));
  }
  if (in.codec_seconds > 0) {
    absl::StrAppendFormat(&out, "codec: %s ms per step added to compute\n", Ms(in.codec_seconds));
  }
  if (p.interference_from_busy_profile) {
    absl::StrAppendFormat(&out, "beside a busy link: %s ms per step, %s (%s)\n", Ms(in.busy_link_compute_seconds),
                          r.compute_stat, r.busy_link_source);
  }
  if (p.comm_interference > 0) {
    absl::StrAppendFormat(&out, "interference: each ms of communication during a step's compute delays it by %.3f ms "
                          "(from %s)\n",
                          p.comm_interference,
                          p.interference_from_busy_profile ? "the busy-link profile" : "the host CPU");
  }
  absl::StrAppend(&out, OverlapLine(r));
  absl::StrAppendFormat(&out, "one worker alone: %.0f samples/s\n", p.one_worker_samples_per_second);
  absl::StrAppendFormat(&out, "\n%-32s %11s %11s %13s %12s %8s\n", "strategy", "compute ms", "comm ms", "iteration ms",
                        "samples/s", "speedup");
  for (const StrategyTime& s : p.strategies) {
    absl::StrAppendFormat(&out, "%-32s %11s %11s %13s %12.0f %7.2fx\n", s.description, Ms(s.compute_seconds),
                          Ms(s.comm_seconds), Ms(s.seconds_per_iteration), s.samples_per_second, s.speedup);
  }
  return out;
}

// Hybrid against data parallelism on this cluster, then both scaled to
// larger ones with one model-parallel group of all workers.
absl::StatusOr<std::string> HybridSection(const Report& r) {
  const HybridInputs& in = *r.hybrid;
  const HybridTime& t = r.hybrid_time;
  std::string out = absl::StrFormat(
      "\nhybrid (hybrid_partition, groups of %d; the strategies above average only its replicated gradients):\n"
      "  data parallel %s ms per iteration (%.1f MB sent per worker), hybrid %s ms (%s ms of group exchanges, %.1f MB"
      " sent): %.2fx\n  (timing/hybrid_timing.h: neither overlaps its communication)\n",
      in.group_size, Ms(t.data_parallel_seconds), t.data_parallel_bytes_sent / 1e6, Ms(t.hybrid_seconds),
      Ms(t.exchange_seconds), t.hybrid_bytes_sent / 1e6, t.speedup);
  absl::StrAppendFormat(&out, "\nscaling (one group of all workers, latency %.0f us, the same compute per worker):\n",
                        in.link.alpha_seconds * 1e6);
  absl::StrAppendFormat(&out, "%8s %10s %16s %16s %9s %22s\n", "workers", "Gbit/s", "data parallel ms", "hybrid ms",
                        "speedup", "efficiency dp / hybrid");
  for (int workers : {8, 16, 32, 64}) {
    for (double gbit : {10.0, 25.0, 100.0}) {
      ASSIGN_OR_RETURN(HybridTime s, PredictHybridAt(in, workers, gbit));
      absl::StrAppendFormat(&out, "%8d %10.0f %16s %16s %8.2fx %11.2f / %.2f\n", workers, gbit,
                            Ms(s.data_parallel_seconds), Ms(s.hybrid_seconds), s.speedup, s.data_parallel_efficiency,
                            s.hybrid_efficiency);
    }
  }
  return out;
}

std::string ReportJson(const Report& r) {
  const TimingInputs& in = r.in;
  const TimingPrediction& p = r.p;
  Json j;
  j["model"] = r.model;
  j["workers"] = int64_t{in.workers};
  j["batch"] = in.batch_per_worker;
  j["compute_seconds"] = p.compute_seconds;
  j["comm_seconds"] = p.ring_comm_seconds;
  j["bytes_per_step"] = static_cast<int64_t>(std::llround(p.wire_bytes_per_step));
  j["gradient_bytes"] = p.gradient_bytes;
  j["buckets"] = static_cast<int64_t>(in.bucket_bytes.size());
  j["bucket_bytes"] = in.bucket_bytes;
  j["alpha_seconds"] = in.link.alpha_seconds;
  j["beta_bytes_per_second"] = in.link.beta_bytes_per_second;
  j["gamma_seconds_per_byte"] = in.link.gamma_seconds_per_byte;
  j["comm_cpu_seconds_per_byte"] = in.link.cpu_seconds_per_byte_sent;
  j["cores_per_worker"] = in.link.cores_per_worker;
  j["overlapped_comm_cpu_seconds"] = p.overlapped_comm_cpu_seconds;
  j["busy_link_compute_seconds"] = in.busy_link_compute_seconds;
  j["overlapped_comm_seconds"] = p.overlapped_ring_comm_seconds;
  j["busy_compute_alpha_seconds"] = in.busy_compute_link.alpha_seconds;
  j["busy_compute_beta_bytes_per_second"] = in.busy_compute_link.beta_bytes_per_second;
  j["comm_interference"] = p.comm_interference;
  j["interference_source"] = p.interference_from_busy_profile ? "busy_link_profile"
                             : p.comm_interference > 0        ? "host_cpu"
                                                              : "none";
  j["bucket_ready_fraction"] = in.bucket_ready_fraction;
  j["sync_hidden_comm_seconds"] = p.ring_hidden_seconds;
  j["ps_hidden_comm_seconds"] = p.ps_hidden_seconds;
  j["unprofiled_producers"] = static_cast<int64_t>(r.unprofiled_producers.size());
  j["width"] = int64_t{in.pipe_width};
  j["servers"] = int64_t{in.servers};
  j["server_chunks"] = static_cast<int64_t>(in.server_chunks.size());
  j["server_bandwidth_bytes_per_second"] =
      in.server_beta_bytes_per_second > 0 ? in.server_beta_bytes_per_second : in.link.beta_bytes_per_second;
  j["ps_staleness"] = int64_t{in.ps_staleness};
  j["gossip_peers"] = int64_t{in.gossip_peers};
  j["gossip_overlap"] = int64_t{in.gossip_overlap};
  j["compression_ratio"] = in.compression_ratio;
  j["codec_seconds"] = in.codec_seconds;
  j["compute_source"] = r.compute_source;
  j["straggler_seconds"] = r.straggler_seconds;
  j["link_source"] = r.link_source;
  j["one_worker_samples_per_second"] = p.one_worker_samples_per_second;
  Json strategies = Json::array();
  for (const StrategyTime& s : p.strategies) {
    Json strategy;
    strategy["name"] = s.name;
    strategy["description"] = s.description;
    strategy["seconds_per_iteration"] = s.seconds_per_iteration;
    strategy["compute_seconds"] = s.compute_seconds;
    strategy["comm_seconds"] = s.comm_seconds;
    strategy["bytes_sent_per_worker"] = static_cast<int64_t>(std::llround(s.bytes_sent_per_worker));
    strategy["samples_per_second"] = s.samples_per_second;
    strategy["speedup"] = s.speedup;
    strategies.push_back(std::move(strategy));
  }
  j["strategies"] = std::move(strategies);
  if (r.hybrid) {
    Json hybrid;
    hybrid["group_size"] = int64_t{r.hybrid->group_size};
    hybrid["data_parallel_seconds"] = r.hybrid_time.data_parallel_seconds;
    hybrid["hybrid_seconds"] = r.hybrid_time.hybrid_seconds;
    hybrid["exchange_seconds"] = r.hybrid_time.exchange_seconds;
    hybrid["data_parallel_bytes_sent"] = r.hybrid_time.data_parallel_bytes_sent;
    hybrid["hybrid_bytes_sent"] = r.hybrid_time.hybrid_bytes_sent;
    hybrid["speedup"] = r.hybrid_time.speedup;
    j["hybrid"] = std::move(hybrid);
  }
  if (r.profile != nullptr) {
    const TraceProfile& prof = *r.profile;
    Json profile;
    profile["steps"] = int64_t{prof.total_steps};
    profile["warmup_steps"] = int64_t{prof.warmup_steps};
    profile["measured_steps"] = int64_t{prof.measured_steps};
    profile["step_seconds"] = prof.step_seconds;
    profile["node_seconds"] = prof.node_seconds;
    profile["has_communication"] = prof.has_communication;
    Json nodes = Json::array();
    for (size_t i = 0; i < prof.nodes.size() && static_cast<int>(i) < r.top; ++i) {
      Json node;
      node["name"] = prof.nodes[i].name;
      node["op"] = prof.nodes[i].op;
      node["seconds"] = prof.nodes[i].median_seconds;
      node["end_seconds"] = prof.nodes[i].median_end_seconds;
      node["end_fraction"] = prof.nodes[i].median_end_fraction;
      nodes.push_back(std::move(node));
    }
    profile["nodes"] = std::move(nodes);
    j["profile"] = std::move(profile);
  }
  return JsonLine(j);
}

// The numbers `nereid model` reads from its flags (ReadModelOptions sets every field).
struct ModelOptions {
  int64_t workers = 0, batch = 0, width = 0, servers = 0, warmup = 0, top = 0, gossip_peers = 0,
          gossip_overlap = 0, gossip_bucket_kb = 0, staleness = 0;
  double compute_ms = 0, latency_us = 0, bandwidth = 0, gamma = 0, ratio = 0, codec_ms = 0, comm_cpu_ns = 0,
         cores = 0, chunk_kb = 0, server_bandwidth = 0, straggler_ms = 0;
  std::vector<PipelineStage> pipeline;  // --passes, for a model not planned yet
};

// The bounds of the cluster's, the parameter server's and SGP's flags.
absl::Status CheckClusterOptions(const Flags& flags, const ModelOptions& o) {
  if (!flags.Has("workers")) return absl::InvalidArgumentError("--workers is required");
  if (o.workers < 2 || o.workers > 1000000) return absl::InvalidArgumentError("--workers must be in [2, 1000000]");
  if (o.batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  if (o.width < 1 || o.width > 1000) return absl::InvalidArgumentError("--width must be in [1, 1000]");
  if (o.servers < 1 || o.servers > 1000000) return absl::InvalidArgumentError("--servers must be in [1, 1000000]");
  if (!(o.chunk_kb == 0 || o.chunk_kb >= 1)) {
    return absl::InvalidArgumentError("--chunk-kb must be >= 1 (or 0: the pass's default)");
  }
  if (flags.Has("server-bandwidth-gbit") && !(o.server_bandwidth > 0)) {
    return absl::InvalidArgumentError("--server-bandwidth-gbit must be > 0");
  }
  if (flags.Has("server-bandwidth-gbit") && flags.Has("server-link")) {
    return absl::InvalidArgumentError(
        "give the servers' links one way: --server-bandwidth-gbit G or --server-link BENCH.json");
  }
  if (o.staleness < 1 || o.staleness > 63) return absl::InvalidArgumentError("--staleness must be in [1, 63]");
  if (o.gossip_peers < 1 || o.gossip_peers >= o.workers) {
    return absl::InvalidArgumentError("--gossip-peers must be in [1, workers)");
  }
  if (o.gossip_overlap < 1 || o.gossip_overlap > 16) {
    return absl::InvalidArgumentError("--gossip-overlap must be in [1, 16]");
  }
  if (o.gossip_bucket_kb < 0 || o.gossip_bucket_kb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--gossip-bucket-kb must be in [0, 2^30]");
  }
  if (o.warmup < 0 || o.top < 0) return absl::InvalidArgumentError("--warmup-steps and --top must be >= 0");
  return absl::OkStatus();
}

// The compute flags (one source of it), the link flags (one way of giving it) and the costs' bounds.
absl::Status CheckComputeAndLinkOptions(const Flags& flags, const ModelOptions& o) {
  if (flags.Has("compute-ms") == flags.Has("profile")) {
    return absl::InvalidArgumentError("give the compute time: --compute-ms X or --profile TRACE.json (one of them)");
  }
  if (flags.Has("compute-ms") && !(o.compute_ms > 0)) return absl::InvalidArgumentError("--compute-ms must be > 0");
  if (!(o.straggler_ms >= 0)) return absl::InvalidArgumentError("--straggler-ms must be >= 0");
  if (flags.Has("busy-link-profile") && !flags.Has("profile")) {
    return absl::InvalidArgumentError("--busy-link-profile needs --profile (the same runs without the busy link)");
  }
  const bool given_link = flags.Has("latency-us") || flags.Has("bandwidth-gbit");
  if (given_link == flags.Has("link")) {
    return absl::InvalidArgumentError(
        "give the link: --latency-us A --bandwidth-gbit G, or --link BENCH.json (one of them)");
  }
  if (given_link && !(flags.Has("latency-us") && flags.Has("bandwidth-gbit"))) {
    return absl::InvalidArgumentError("--latency-us and --bandwidth-gbit go together");
  }
  if (given_link && (o.latency_us < 0 || !(o.bandwidth > 0))) {
    return absl::InvalidArgumentError("--latency-us must be >= 0 and --bandwidth-gbit > 0");
  }
  if (flags.Has("link-fit") && !flags.Has("link")) {
    return absl::InvalidArgumentError("--link-fit needs --link BENCH.json");
  }
  if (flags.Has("busy-compute-link") && !flags.Has("link")) {
    return absl::InvalidArgumentError(
        "--busy-compute-link needs --link BENCH.json (the same benchmark on idle cores)");
  }
  if (o.gamma < 0) return absl::InvalidArgumentError("--gamma-ns-per-byte must be >= 0");
  if (o.ratio < 1) return absl::InvalidArgumentError("--compression-ratio must be >= 1");
  if (o.codec_ms < 0) return absl::InvalidArgumentError("--codec-ms must be >= 0");
  return absl::OkStatus();
}

// Reads and checks the flags (the first bad one's error, in the order
// integers, numbers, bounds) and the pipeline for --passes.
absl::StatusOr<ModelOptions> ReadModelOptions(const Flags& flags) {
  ModelOptions o;
  ASSIGN_OR_RETURN(o.workers, flags.Int("workers", 0));
  ASSIGN_OR_RETURN(o.batch, flags.Int("batch", 64));
  ASSIGN_OR_RETURN(o.width, flags.Int("width", 2));
  ASSIGN_OR_RETURN(o.servers, flags.Int("servers", 1));
  ASSIGN_OR_RETURN(o.warmup, flags.Int("warmup-steps", 5));
  ASSIGN_OR_RETURN(o.top, flags.Int("top", 10));
  ASSIGN_OR_RETURN(o.gossip_peers, flags.Int("gossip-peers", 1));
  ASSIGN_OR_RETURN(o.gossip_overlap, flags.Int("gossip-overlap", 1));
  ASSIGN_OR_RETURN(o.gossip_bucket_kb, flags.Int("gossip-bucket-kb", 4096));
  ASSIGN_OR_RETURN(o.staleness, flags.Int("staleness", 1));
  ASSIGN_OR_RETURN(o.compute_ms, Number(flags, "compute-ms", 0));
  ASSIGN_OR_RETURN(o.latency_us, Number(flags, "latency-us", 0));
  ASSIGN_OR_RETURN(o.bandwidth, Number(flags, "bandwidth-gbit", 0));
  ASSIGN_OR_RETURN(o.gamma, Number(flags, "gamma-ns-per-byte", 0));
  ASSIGN_OR_RETURN(o.ratio, Number(flags, "compression-ratio", 1));
  ASSIGN_OR_RETURN(o.codec_ms, Number(flags, "codec-ms", 0));
  ASSIGN_OR_RETURN(o.comm_cpu_ns, Number(flags, "comm-cpu-ns-per-byte", 0));
  ASSIGN_OR_RETURN(o.cores, Number(flags, "cores-per-worker", 0));
  ASSIGN_OR_RETURN(o.chunk_kb, Number(flags, "chunk-kb", 0));
  ASSIGN_OR_RETURN(o.server_bandwidth, Number(flags, "server-bandwidth-gbit", 0));
  ASSIGN_OR_RETURN(o.straggler_ms, Number(flags, "straggler-ms", 0));
  RETURN_IF_ERROR(CheckClusterOptions(flags, o));
  RETURN_IF_ERROR(CheckComputeAndLinkOptions(flags, o));
  // The run modelled has several workers: the passes they imply (data_parallel) join, as with `nereid run`.
  absl::StatusOr<std::vector<PipelineStage>> pipeline =
      PipelineFor(flags.String("passes"), PlanTarget{static_cast<int>(o.workers)});
  if (!pipeline.ok()) return absl::InvalidArgumentError(absl::StrCat("--passes: ", pipeline.status().message()));
  o.pipeline = *std::move(pipeline);
  return o;
}

// Plans the model: its gradient buckets (their producers into
// `bucket_producers`) and the cluster's figures, into r.in.
absl::Status PlanModel(const Flags& flags, const ModelOptions& o, Report& r,
                       std::vector<std::vector<std::string>>* bucket_producers) {
  r.top = static_cast<int>(std::min<int64_t>(o.top, 1 << 20));
  ASSIGN_OR_RETURN(PlannedBuckets buckets,
                   PlanBuckets(flags.positional()[0], o.pipeline, static_cast<int>(o.workers), &r.model, &r.hybrid));
  TimingInputs& in = r.in;
  in.bucket_bytes = buckets.bytes;
  in.parameter_bytes = buckets.parameter_bytes;
  in.gossip_peers = static_cast<int>(o.gossip_peers);
  in.gossip_overlap = static_cast<int>(o.gossip_overlap);
  in.gossip_bucket_bytes = o.gossip_bucket_kb * 1024;
  in.workers = static_cast<int>(o.workers);
  in.batch_per_worker = o.batch;
  in.pipe_width = static_cast<int>(o.width);
  in.servers = static_cast<int>(o.servers);
  in.compression_ratio = o.ratio;
  in.codec_seconds = o.codec_ms * 1e-3;
  in.ps_staleness = static_cast<int>(o.staleness);
  in.server_beta_bytes_per_second = o.server_bandwidth * 1e9 / 8;
  *bucket_producers = std::move(buckets.producers);
  return absl::OkStatus();
}

// The parameter server: its servers' link and the chunks it is planned to
// cut the parameters into (their producers into `chunk_producers`).
absl::Status PlanServers(const Flags& flags, const ModelOptions& o, Report& r,
                         std::vector<std::vector<std::string>>* chunk_producers) {
  TimingInputs& in = r.in;
  if (flags.Has("server-bandwidth-gbit")) r.server_link_source = "given";
  if (flags.Has("server-link")) {
    ASSIGN_OR_RETURN(LinkModel server_link, ReadBenchLink(flags.String("server-link"), BenchLink::kProbe));
    in.server_beta_bytes_per_second = server_link.beta_bytes_per_second;
    r.server_link_source = absl::StrCat("measured ", flags.String("server-link"));
  }
  absl::StatusOr<std::vector<PlannedChunk>> chunks =
      PlanServerChunks(flags.positional()[0], in.workers, in.servers, o.chunk_kb, flags.Has("split"));
  if (!chunks.ok()) {
    // The other rows do not need it: the parameter server's row falls back to the bucket formula.
    std::fprintf(stderr, "warning: no chunked parameter server (%s): its row uses the bucket formula\n",
                 std::string(chunks.status().message()).c_str());
    chunks = std::vector<PlannedChunk>{};
  }
  for (const PlannedChunk& c : *chunks) {
    in.server_chunks.push_back(c.chunk);
    chunk_producers->push_back({c.producer});
  }
  return absl::OkStatus();
}

// The workers' link (given, or measured by --link and --busy-compute-link),
// the reduction's cost and the host's, into r.in.link.
absl::Status ReadLinks(const Flags& flags, const ModelOptions& o, Report& r) {
  TimingInputs& in = r.in;
  if (flags.Has("link")) {
    const bool fit = flags.Has("link-fit");
    ASSIGN_OR_RETURN(in.link, ReadBenchLink(flags.String("link"), fit ? BenchLink::kFit : BenchLink::kProbe));
    r.link_source = absl::StrCat(fit ? "fitted to the allreduces of " : "measured ", flags.String("link"));
    if (flags.Has("busy-compute-link")) {
      ASSIGN_OR_RETURN(in.busy_compute_link,
                       ReadBenchLink(flags.String("busy-compute-link"), fit ? BenchLink::kFit : BenchLink::kProbe));
      r.busy_compute_link_source = flags.String("busy-compute-link");
    }
  } else {
    in.link.alpha_seconds = o.latency_us * 1e-6;
    in.link.beta_bytes_per_second = o.bandwidth * 1e9 / 8;
    r.link_source = "given";
  }
  in.link.gamma_seconds_per_byte = o.gamma * 1e-9;
  if (flags.Has("comm-cpu-ns-per-byte")) in.link.cpu_seconds_per_byte_sent = o.comm_cpu_ns * 1e-9;
  if (flags.Has("cores-per-worker")) in.link.cores_per_worker = o.cores;
  return absl::OkStatus();
}

// Whether the ranks share cores (--cores-per-worker or --link's report below 1).
bool SharedCores(const TimingInputs& in) {
  return in.link.cores_per_worker > 0 && in.link.cores_per_worker < 1;
}

// The compute from --profile (and --busy-link-profile) as `stat` takes it,
// and when each bucket and chunk is ready from its producers' end times.
absl::Status ReadProfiles(const Flags& flags, const ModelOptions& o, const std::string& stat,
                          const std::vector<std::vector<std::string>>& bucket_producers,
                          const std::vector<std::vector<std::string>>& chunk_producers, Report& r) {
  TimingInputs& in = r.in;
  const std::string path = flags.String("profile");
  const int warmup_steps = static_cast<int>(std::min<int64_t>(o.warmup, 1 << 30));
  ASSIGN_OR_RETURN(TraceProfile profile, ReadComputeProfile(path, warmup_steps));
  in.compute_seconds = StepStatistic(profile, stat, in.workers);
  if (flags.Has("busy-link-profile")) {
    r.busy_link_source = flags.String("busy-link-profile");
    ASSIGN_OR_RETURN(TraceProfile busy, ReadComputeProfile(r.busy_link_source, warmup_steps));
    in.busy_link_compute_seconds = StepStatistic(busy, stat, in.workers);
  }
  // When each bucket can start: its gradients' producers, timed in the
  // profile (a profile of another graph has none of them: no overlap).
  in.bucket_ready_fraction = BucketReadyFractions(profile, bucket_producers, &r.unprofiled_producers);
  std::vector<std::string> unprofiled_chunks;  // the same producers as the buckets'
  const std::vector<double> chunk_ready = BucketReadyFractions(profile, chunk_producers, &unprofiled_chunks);
  for (size_t c = 0; c < chunk_ready.size() && c < in.server_chunks.size(); ++c) {
    in.server_chunks[c].ready_fraction = chunk_ready[c];
  }
  r.compute_stat = stat == "median" ? (SharedCores(in) && !flags.Has("compute-stat")
                                           ? absl::StrFormat("the median (ranks share cores: %.2f each)",
                                                             in.link.cores_per_worker)
                                           : std::string("the median"))
                                    : absl::StrCat("the expected slowest of ", in.workers);
  r.profile = std::make_unique<TraceProfile>(std::move(profile));
  r.compute_source = absl::StrCat("profile ", path);
  return absl::OkStatus();
}

// A straggler holds every strategy modelled here to its pace: the
// synchronous ones wait for it each step, the pipelined and stale ones
// within their bound of steps. It starts each step's compute late (as the
// fault does), so its gradients are ready X + f c into the longer step.
void AddStraggler(double straggler_ms, Report& r) {
  TimingInputs& in = r.in;
  r.straggler_seconds = straggler_ms * 1e-3;
  if (r.straggler_seconds > 0) {
    const double c = in.compute_seconds, x = r.straggler_seconds;
    auto later = [&](double& f) { f = (x + f * c) / (x + c); };
    for (double& f : in.bucket_ready_fraction) later(f);
    for (ServerChunk& chunk : in.server_chunks) later(chunk.ready_fraction);
    in.compute_seconds += x;
    if (in.busy_link_compute_seconds > 0) in.busy_link_compute_seconds += x;
  }
}

// Predicts the iteration times and prints them (with a hybrid plan's
// section), then writes the --json report.
absl::Status PredictAndReport(const Flags& flags, Report& r) {
  const TimingInputs& in = r.in;
  ASSIGN_OR_RETURN(r.p, PredictIteration(in));
  std::fputs(FormatReport(r).c_str(), stdout);
  if (r.hybrid) {
    r.hybrid->workers = in.workers;
    r.hybrid->batch_per_worker = in.batch_per_worker;
    r.hybrid->compute_seconds = in.compute_seconds;
    r.hybrid->link = in.link;
    ASSIGN_OR_RETURN(r.hybrid_time, PredictHybrid(*r.hybrid));
    ASSIGN_OR_RETURN(std::string section, HybridSection(r));
    std::fputs(section.c_str(), stdout);
  }
  if (flags.Has("json")) RETURN_IF_ERROR(WriteFileAtomically(flags.String("json"), ReportJson(r)));
  return absl::OkStatus();
}

// nereid model: reads the flags, plans the model, reads the link and compute, and reports the prediction.
int Model(const std::vector<std::string>& args) {
  Flags flags = ModelFlags();
  absl::Status parsed = flags.Parse(args);
  if (!parsed.ok()) return Usage(std::string(parsed.message()));
  if (flags.positional().size() != 1) return Usage(flags.positional().empty() ? "no model given (see nereid model --help)" : "one model only");
  absl::StatusOr<ModelOptions> o = ReadModelOptions(flags);
  if (!o.ok()) return Usage(std::string(o.status().message()));

  Report r;
  std::vector<std::vector<std::string>> bucket_producers, chunk_producers;
  if (absl::Status planned = PlanModel(flags, *o, r, &bucket_producers); !planned.ok()) return Fail(planned);
  if (absl::Status planned = PlanServers(flags, *o, r, &chunk_producers); !planned.ok()) return Fail(planned);
  if (absl::Status read = ReadLinks(flags, *o, r); !read.ok()) return Fail(read);
  if (flags.Has("profile")) {
    // Ranks that share cores finish a step together, when the cores have done
    // all their work: the median pace, not the slowest of independent draws.
    const std::string stat = flags.String("compute-stat", SharedCores(r.in) ? "median" : "slowest");
    if (stat != "slowest" && stat != "median") {
      std::fprintf(stderr, "error: --compute-stat %s: use slowest or median\n", stat.c_str());
      return kExitUsage;
    }
    absl::Status read = ReadProfiles(flags, *o, stat, bucket_producers, chunk_producers, r);
    if (!read.ok()) return Fail(read);
  } else {
    r.in.compute_seconds = o->compute_ms * 1e-3;
    r.compute_source = "given";
  }
  AddStraggler(o->straggler_ms, r);
  if (absl::Status reported = PredictAndReport(flags, r); !reported.ok()) return Fail(reported);
  return kExitOk;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"model", "predict iteration time: sync allreduce vs parameter server vs Pipe-SGD vs SGP", [] { return ModelFlags().Help(); }, Model});

}  // namespace nereid
