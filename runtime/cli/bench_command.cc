// nereid bench allreduce: Nereid's allreduce against raw Gloo and the
// alpha-beta bound of the measured link, per message size.
// nereid bench compress MODEL: the aggregation time of the model's gradients,
// uncompressed and with each compressor (benchmarks/aggregation_bench.h).
// nereid bench peak: the cores' float32 FMA peak (benchmarks/fma_peak.h), the roof
// a compute-bound step is measured against.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "benchmarks/allreduce_bench.h"
#include "comm/launch_env.h"
#include "comm/rendezvous.h"
#include "comm/run_token.h"
#include "comm/communicator_factory.h"
#include "comm/wire_format.h"
#include "benchmarks/aggregation_bench.h"
#include "core/file_io.h"
#include "benchmarks/fma_peak.h"
#include "core/status_macros.h"
#include "core/version.h"
#include "ops/model_loader.h"
#include "passes/pass_manager.h"
#include "plan/build_plan.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "runtime/cli/local_launch.h"
#include "runtime/launcher/progress_reporter.h"

namespace nereid {
namespace {

Flags BenchFlags() {
  Flags f("nereid bench allreduce [flags]\n       nereid bench compress MODEL --methods LIST [flags]\n"
          "       nereid bench peak [--threads T] [--rounds R] [--json PATH]",
          "allreduce: times allreduce through Nereid's Gloo communicator and through raw Gloo\n"
          "(alternating, in the same processes), per size: time, algbw and busbw as nccl-tests define\n"
          "them, and the ratio to the alpha-beta bound of the link measured between ranks 0 and 1; and\n"
          "the machine's busy CPU time (/proc/stat) per byte a rank sends, which `nereid model` charges\n"
          "a pipelined step.\n\n"
          "compress: aggregates one step's gradients of MODEL across the workers, back to back with no\n"
          "training compute, uncompressed and with each method, alternating in rounds: the median of\n"
          "the slowest rank's aggregation time, its encode+decode time, and the bytes sent (GradiVeQ's\n"
          "measure).\n\n"
          "peak: the float32 fused multiply-add rate of T cores at once (default 1), in every vector\n"
          "ISA this CPU has, the median of R trials (default 5) of 0.2 s: the roof for a training\n"
          "step's matrix products (bench/train_vs_pytorch.py reports each engine's share of it).");
  f.Value("workers", "N", "local worker processes (default 2)")
      .Value("rounds", "R", "alternations (allreduce: of ours and raw Gloo per size; default 3)")
      .Value("json", "PATH", "write the results as JSON");
  f.Section("allreduce")
      .Value("sizes", "LIST", "message sizes (default 4K,256K,4M,64M)")
      .Switch("no-link-probe",
              "skip the link's latency and bandwidth probe (5 x 16 MiB one way, rank\n"
              "0 to 1: about 11 s at 60mbit); rank 0 tells stderr when each\n"
              "size's timed calls begin, so a script can keep the links busy with\n"
              "many --rounds and know when the traffic flows")
      .Value("also", "BACKEND",
             "also time allreduce through another communicator backend of the same\n"
             "ranks: shm (shared memory, every rank on this machine) or hierarchical\n"
             "(shared memory within machines, gloo across)")
      .Switch("shm", "the same as --also shm")
      .Value("wire", "FORMAT",
             "ours sends float32 (default), float16 or bfloat16 (Nereid's 16-bit ring, as\n"
             "compress(method=fp16) uses); sizes are then bytes on the wire, so raw Gloo's\n"
             "float32 message of the same size carries half the values");
  f.Section("compress")
      .Value("methods", "LIST",
             "e.g. none,qsgd(bits=4),topk(ratio=0.01,momentum=0.9),gradiveq: each a\n"
             "codec with compress(...)'s options; 'none' is the baseline and is added\n"
             "first if missing")
      .Value("iterations", "I", "timed steps per method and round (default 10)")
      .Value("warmup", "W", "untimed first steps (default 25: GradiVeQ's first basis)");
  f.Section("One worker per invocation (as for `nereid run`)")
      .Value("rendezvous", "SPEC", "where the workers meet")
      .Switch("insecure", "meet through a store other machines reach without a run token (SECURITY.md)")
      .Value("rank", "R", "this worker's rank")
      .Value("world", "N", "the number of workers")
      .Value("bind", "ADDR", "the address this worker listens on")
      .Value("threads", "T", "cores per worker")
      .Value("worker-timeout", "S", "seconds a local worker may go without progress (default 300)");
  return f;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return kExitFailure;
}

// The plans `nereid bench compress` compares: MODEL planned with
// autodiff,data_parallel and each method's compress pass.
// "none,qsgd(bits=4),topk(ratio=0.01,momentum=0.9)": split at the commas
// outside parentheses; each is METHOD or METHOD(OPTIONS), compress(...)'s
// syntax with the method first.
absl::StatusOr<std::vector<std::string>> MethodSpecs(const std::string& methods) {
  std::vector<std::string> specs(1);
  int depth = 0;
  for (char c : methods) {
    if (c == ',' && depth == 0) {
      specs.emplace_back();
      continue;
    }
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (depth < 0) return absl::InvalidArgumentError(absl::StrCat("--methods '", methods, "': unbalanced ')'"));
    if (c != ' ') specs.back().push_back(c);
  }
  if (depth != 0) return absl::InvalidArgumentError(absl::StrCat("--methods '", methods, "': unbalanced '('"));
  std::vector<std::string> kept;
  for (std::string& spec : specs) {
    if (spec.empty()) continue;
    if (spec.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--methods: '", spec, "': write options as compress(...) does, "
                                                     "METHOD(OPTION=VALUE,...), e.g. topk(ratio=0.01,momentum=0.9)"));
    }
    kept.push_back(std::move(spec));
  }
  return kept;
}

absl::StatusOr<std::vector<AggregationPlan>> CompressPlans(const std::string& model, const std::string& methods) {
  ASSIGN_OR_RETURN(std::vector<std::string> specs, MethodSpecs(methods));
  if (specs.empty() || specs[0] != "none") specs.insert(specs.begin(), "none");
  std::vector<AggregationPlan> plans;
  for (const std::string& spec : specs) {
    std::string passes = "autodiff,data_parallel";
    if (spec != "none") {
      const size_t open = spec.find('(');
      const std::string method = spec.substr(0, open);
      std::string options = open == std::string::npos ? "" : spec.substr(open + 1, spec.size() - open - 2);
      if (open != std::string::npos && spec.back() != ')') {
        return absl::InvalidArgumentError(absl::StrCat("--methods: '", spec, "' must end with ')'"));
      }
      absl::StrAppend(&passes, ",compress(method=", method, options.empty() ? "" : ",", options, ")");
    }
    ASSIGN_OR_RETURN(std::vector<PipelineStage> pipeline, PipelineFor(passes, PlanTarget{}));
    PlanRequest request{model, std::move(pipeline), PlanTarget{}};
    request.check_trainable = false;
    request.whole_only = true;
    absl::StatusOr<BuiltPlan> built = BuildPlan(request);
    if (!built.ok()) return absl::Status(built.status().code(), absl::StrCat(spec, ": ", built.status().message()));
    if (built->reports.empty()) return absl::InvalidArgumentError(absl::StrCat(model, " is a plan already: give the model"));
    ASSIGN_OR_RETURN(AggregationPlan plan, AggregationPlanOf(*built->whole, spec));
    plans.push_back(std::move(plan));
  }
  return plans;
}

int BenchPeak(const Flags& flags) {
  for (const char* other : {"workers", "sizes", "also", "shm", "wire", "no-link-probe", "methods", "iterations", "warmup",
                            "rendezvous", "rank", "world", "bind", "worker-timeout"}) {
    if (flags.Has(other)) {
      std::fprintf(stderr, "error: --%s is not an option of `nereid bench peak`\n", other);
      return kExitUsage;
    }
  }
  absl::StatusOr<int64_t> threads = flags.Int("threads", 1), rounds = flags.Int("rounds", 5);
  for (const auto* v : {&threads, &rounds}) {
    if (!v->ok()) return Fail(v->status());
  }
  if (*threads < 1 || *threads > 1024 || *rounds < 1 || *rounds > 1000) {
    std::fprintf(stderr, "error: --threads must be 1-1024 and --rounds 1-1000\n");
    return kExitUsage;
  }
  FmaPeakOptions options;
  options.threads = static_cast<int>(*threads);
  options.trials = static_cast<int>(*rounds);
  absl::StatusOr<FmaPeak> peak = MeasureFmaPeak(options);
  if (!peak.ok()) return Fail(peak.status());
  std::fputs(FormatFmaPeak(*peak).c_str(), stdout);
  if (flags.Has("json")) {
    absl::Status written = WriteFileAtomically(flags.String("json"), FmaPeakJson(*peak));
    if (!written.ok()) return Fail(written);
  }
  return kExitOk;
}

// A command-line mistake: its message on stderr, and the usage exit code.
int UsageError(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return kExitUsage;
}

// What `nereid bench allreduce` and `nereid bench compress` read from their flags.
struct BenchSettings {
  bool compress = false;  // `nereid bench compress MODEL`
  int64_t workers = 0, rounds = 0, rank = 0, world = 0, iterations = 0, warmup = 0;
  std::vector<AggregationPlan> plans;  // compress: the plans compared
  AllReduceBenchOptions options;       // allreduce: the sizes and rounds
  std::string also_label;              // --also (or --shm): the other backend timed, or empty
};

// Reads the flags; compress plans MODEL with each method here, before
// launching too, so that a bad model or method fails once.
absl::StatusOr<BenchSettings> ReadBenchSettings(const Flags& flags, bool compress) {
  BenchSettings s;
  s.compress = compress;
  ASSIGN_OR_RETURN(s.workers, flags.Int("workers", 2));
  ASSIGN_OR_RETURN(s.rounds, flags.Int("rounds", 3));
  ASSIGN_OR_RETURN(s.rank, flags.Int("rank", -1));
  ASSIGN_OR_RETURN(s.world, flags.Int("world", -1));
  ASSIGN_OR_RETURN(s.iterations, flags.Int("iterations", 10));
  ASSIGN_OR_RETURN(s.warmup, flags.Int("warmup", 25));
  if (compress) {
    ASSIGN_OR_RETURN(s.plans, CompressPlans(flags.positional()[1], flags.String("methods")));
  }
  if (flags.Has("sizes")) {
    ASSIGN_OR_RETURN(s.options.sizes_bytes, ParseSizes(flags.String("sizes")));
  }
  s.options.rounds = static_cast<int>(std::max<int64_t>(1, s.rounds));
  s.also_label = flags.Has("shm") ? "shm" : flags.String("also", "");
  if (flags.Has("wire")) {
    if (compress) return absl::InvalidArgumentError("--wire is an option of `nereid bench allreduce`");
    ASSIGN_OR_RETURN(s.options.wire, ParseWireType(flags.String("wire")));
  }
  return s;
}

// --also and --shm: one of them, for the allreduce benchmark, naming a registered backend.
absl::Status CheckAlsoBackend(const Flags& flags, const BenchSettings& s) {
  if (flags.Has("shm") && flags.Has("also") && flags.String("also") != "shm") {
    return absl::InvalidArgumentError("--shm means --also shm; give one of them");
  }
  if (s.compress && !s.also_label.empty()) {
    return absl::InvalidArgumentError("--also and --shm time allreduce: they are for `nereid bench allreduce`");
  }
  if (!s.also_label.empty() && !CommunicatorRegistry::Global().Find(s.also_label)) {
    return absl::InvalidArgumentError(absl::StrCat("--also: unknown communicator backend '", s.also_label,
                                                   "' (registered: ",
                                                   absl::StrJoin(CommunicatorRegistry::Global().Names(), ", "), ")"));
  }
  return absl::OkStatus();
}

// Without --rendezvous: starts --workers local workers running this benchmark.
int LaunchBenchWorkers(const Flags& flags, const std::vector<std::string>& args, int64_t workers,
                       const std::string& token) {
  if (workers < 2) {
    std::fprintf(stderr, "error: --workers must be >= 2 for a communication benchmark\n");
    return kExitUsage;
  }
  LocalLaunch launch;
  launch.command = "bench";
  launch.args = args;
  launch.not_passed = {"--workers", "--json", "--threads"};
  launch.bool_flags = {"--shm", "--no-link-probe", "--insecure"};
  launch.token = token.empty() ? NewRunToken() : token;
  launch.workers = static_cast<int>(workers);
  launch.threads = 1;
  if (flags.Has("json")) launch.rank0_args = {"--json", flags.String("json")};
  return LaunchLocalWorkers(launch);
}

// This worker's rank and world, and where it meets the others.
struct BenchRendezvous {
  LaunchInfo info;
  RendezvousSpec spec;
};

// Resolves this worker's rank and world and its --rendezvous store (checked against the run's token).
absl::StatusOr<BenchRendezvous> ResolveBenchRendezvous(const Flags& flags, const BenchSettings& s,
                                                       const std::string& token) {
  ASSIGN_OR_RETURN(LaunchInfo info, ResolveLaunch(static_cast<int>(s.rank), static_cast<int>(s.world), ProcessEnv()));
  ASSIGN_OR_RETURN(RendezvousSpec spec, ParseRendezvousSpec(flags.String("rendezvous"), info.run_id));
  spec.token = token;
  RETURN_IF_ERROR(CheckRendezvousToken(spec, flags.Has("insecure")));
  return BenchRendezvous{std::move(info), std::move(spec)};
}

// The communicators timed: raw Gloo, and --also's backend beside it.
struct BenchComms {
  std::unique_ptr<Communicator> comm;  // Gloo's
  GlooCommunicator* gloo = nullptr;    // comm, as Gloo
  std::unique_ptr<Communicator> also;  // --also's backend, or null
};

// Connects this worker to the others: Gloo, and for allreduce --also's backend.
absl::StatusOr<BenchComms> ConnectBench(const Flags& flags, const BenchSettings& s, const BenchRendezvous& meet) {
  const LaunchInfo& info = meet.info;
  WorkerIdentity identity{
      kNereidVersion,
      s.compress ? absl::StrCat("bench compress ", flags.positional()[1], " ", flags.String("methods"))
                 : absl::StrCat("bench allreduce ", flags.String("sizes")),
      info.world};
  // Gloo itself, not the communicator factory: the allreduce benchmark times
  // raw Gloo on the same context, and no NEREID_FAULTS wrapper may sit between.
  GlooConnectOptions connect;
  connect.hostname = flags.String("bind", connect.hostname);
  BenchComms comms;
  ASSIGN_OR_RETURN(comms.comm, ConnectGloo(meet.spec, info.rank, info.world, identity, connect));
  comms.gloo = dynamic_cast<GlooCommunicator*>(comms.comm.get());
  if (comms.gloo == nullptr) return absl::InternalError("the allreduce benchmark needs the Gloo communicator");
  // The other backend through the factory's connect, without its wrappers
  // (no NEREID_FAULTS in a benchmark), in its own keys of the same store.
  if (!s.also_label.empty() && !s.compress) {
    CommunicatorSpec also_spec;
    also_spec.backend = s.also_label;
    also_spec.rendezvous = meet.spec;
    also_spec.rendezvous.run_id += "-" + s.also_label;
    also_spec.rank = info.rank;
    also_spec.world = info.world;
    also_spec.identity = identity;
    also_spec.hostname = connect.hostname;
    also_spec.connect_timeout = connect.connect_timeout;
    ASSIGN_OR_RETURN(comms.also, ConnectBackend(also_spec));
  }
  return comms;
}

// `nereid bench compress`: times the plans' aggregation; rank 0 prints the table and writes --json.
int BenchCompress(const Flags& flags, const BenchSettings& s, Communicator& comm, const LaunchInfo& info) {
  AggregationBenchOptions o;
  o.iterations = static_cast<int>(std::max<int64_t>(1, s.iterations));
  o.rounds = static_cast<int>(std::max<int64_t>(1, s.rounds));
  o.warmup_steps = static_cast<int>(std::max<int64_t>(0, s.warmup));
  absl::StatusOr<std::vector<AggregationRow>> rows = RunAggregationBench(comm, s.plans, o);
  if (!rows.ok()) return Fail(rows.status());
  if (info.rank != 0) return kExitOk;
  std::fputs(FormatAggregationTable(*rows, info.world).c_str(), stdout);
  if (flags.Has("json")) {
    absl::Status written = WriteFileAtomically(flags.String("json"), AggregationJson(*rows, info.world));
    if (!written.ok()) return Fail(written);
  }
  return kExitOk;
}

// `nereid bench allreduce`: times allreduce per size; rank 0 prints the table and writes --json.
int BenchAllReduce(const Flags& flags, BenchSettings& s, const BenchComms& comms, int rank) {
  AllReduceBenchOptions& options = s.options;
  options.probe_link = !flags.Has("no-link-probe");
  options.also = comms.also.get();
  options.also_label = s.also_label;
  if (rank == 0) {
    options.progress = [](const std::string& line) { std::fprintf(stderr, "bench allreduce: %s\n", line.c_str()); };
  }
  absl::StatusOr<AllReduceBenchResult> result = RunAllReduceBench(*comms.gloo, options);
  if (!result.ok()) return Fail(result.status());
  if (rank != 0) return kExitOk;
  std::fputs(FormatBenchTable(*result).c_str(), stdout);
  if (flags.Has("json")) {
    absl::Status written = WriteFileAtomically(flags.String("json"), BenchJson(*result));
    if (!written.ok()) return Fail(written);
  }
  return kExitOk;
}

// nereid bench: checks the command line, then launches local workers or, as one of them, runs the benchmark.
int Bench(const std::vector<std::string>& args) {
  Flags flags = BenchFlags();
  absl::Status parsed = flags.Parse(args);
  const bool compress = parsed.ok() && flags.positional().size() == 2 && flags.positional()[0] == "compress";
  if (parsed.ok() && flags.positional().size() == 1 && flags.positional()[0] == "peak") return BenchPeak(flags);
  if (parsed.ok() && !compress && (flags.positional().size() != 1 || flags.positional()[0] != "allreduce")) {
    parsed = absl::InvalidArgumentError(
        "nereid bench allreduce, nereid bench compress MODEL, or nereid bench peak (see nereid bench --help)");
  }
  if (!parsed.ok()) return UsageError(parsed);
  absl::StatusOr<BenchSettings> settings = ReadBenchSettings(flags, compress);
  if (!settings.ok()) return Fail(settings.status());
  if (absl::Status also = CheckAlsoBackend(flags, *settings); !also.ok()) return UsageError(also);
  // The run's token: NEREID_TOKEN, else a fresh one for local workers.
  absl::StatusOr<std::string> token = ResolveRunToken("", ProcessEnv());
  if (!token.ok()) return Fail(token.status());
  if (!flags.Has("rendezvous")) return LaunchBenchWorkers(flags, args, settings->workers, *token);
  absl::StatusOr<BenchRendezvous> meet = ResolveBenchRendezvous(flags, *settings, *token);
  if (!meet.ok()) return Fail(meet.status());
  launcher::ProgressReporter reporter = launcher::ProgressReporter::FromEnvironment();
  reporter.Report("phase=rendezvous");
  absl::StatusOr<BenchComms> comms = ConnectBench(flags, *settings, *meet);
  if (!comms.ok()) return Fail(comms.status());
  reporter.Report("phase=bench");
  if (compress) return BenchCompress(flags, *settings, *comms->comm, meet->info);
  return BenchAllReduce(flags, *settings, *comms, meet->info.rank);
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"bench", "benchmarks: allreduce (ours vs raw Gloo vs the link's bound), compress (gradient aggregation time), peak (the cores' FMA rate)", [] { return BenchFlags().Help(); }, Bench});

}  // namespace nereid
