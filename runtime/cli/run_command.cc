// nereid run: trains a model (or a plan) and evaluates it every epoch.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/launch_env.h"
#include "comm/rendezvous_spec.h"
#include "comm/run_token.h"
#include "comm/shm_communicator.h"
#include "core/build_revision.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "data/normalize.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "runtime/cli/local_launch.h"
#include "runtime/cli/run_config.h"
#include "graph/plan_io.h"
#include "plan/build_plan.h"
#include "runtime/launcher/progress_reporter.h"
#include "runtime/trainer.h"

namespace nereid {
namespace {

// The flags of runs across machines and of workers started one by one.
void AddDistributedFlags(Flags& f) {
  f.Section("Several machines, each running the local launcher")
      .Value("nnodes", "M", "machines; with --node-rank K this machine's --workers N are ranks")
      .Value("node-rank", "K",
             "K*N .. K*N+N-1 of M*N; every machine names the same --rendezvous\n"
             "tcp://HOST:PORT (node 0's address: rank 0 serves the store) and its\n"
             "own --bind ADDR");
  f.Section("One worker per invocation (across machines, or under mpirun/Slurm/torchrun)")
      .Value("rendezvous", "SPEC",
             "where the workers meet: tcp://HOST:PORT (rank 0 serves it there),\n"
             "file:DIR (a shared file system) or redis://HOST:PORT; default under\n"
             "a launcher: tcp://MASTER_ADDR:MASTER_PORT (under torchrun the port\n"
             "after MASTER_PORT, which torchrun's agent holds)")
      .Value("rank", "R", "this worker's rank (default: OMPI_COMM_WORLD_RANK, SLURM_PROCID or RANK)")
      .Value("world", "N",
             "the number of workers (default: OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or\n"
             "WORLD_SIZE)")
      .Value("run-id", "ID", "keeps runs sharing a store apart (default: NEREID_RUN_ID, the Slurm job...)")
      .Value("bind", "ADDR",
             "the address this worker listens on and its peers reach it at\n"
             "(default 127.0.0.1; on a cluster: this machine's address on the\n"
             "training network)")
      .Value("plan-file", "FILE",
             "run this plan file's part for --rank (the local launcher plans once\n"
             "and hands each worker the plan this way); MODEL names it in messages")
      .Value("transport", "T",
             "how the workers talk: auto (the default for --workers N: shared\n"
             "memory among this machine's workers when /dev/shm has room, else\n"
             "gloo; hierarchical across --nnodes machines), gloo (TCP; the default\n"
             "for workers started one by one), shm (shared memory, every worker on\n"
             "this machine) or hierarchical (shared memory within each machine,\n"
             "gloo between machines)");
}

// The security and supervision flags.
void AddSupervisionFlags(Flags& f) {
  f.Section("Security (SECURITY.md)")
      .Value("token-file", "FILE",
             "the run's secret token, in a file only its owner can read; default:\n"
             "NEREID_TOKEN, else a fresh one the local launcher makes for its\n"
             "workers. Every process of a run across machines gives the same one")
      .Switch("insecure",
              "let a run meet through a tcp:// or redis:// store that other machines\n"
              "can reach without a token (only on a network you trust)");
  f.Section("Supervision")
      .Value("comm-timeout", "S", "seconds a collective waits for its peers (default 60)")
      .Value("worker-timeout", "S",
             "seconds a local worker may go without progress before the run is\n"
             "stopped (default 300)")
      .Value("max-restarts", "N",
             "when a local worker dies, hangs or fails, restart every worker from\n"
             "the last checkpoint (--checkpoint DIR), up to N times (default 0)")
      .Value("stall-check", "P",
             "after P% of the steps, flag a loss not below its start (progress\n"
             "and metrics: loss_not_improving; default 50, 0: off)")
      .Value("check-every", "N",
             "compare the ranks' parameters every N steps, before every\n"
             "checkpoint and at the end; ranks that drift apart are an error\n"
             "(default 500; 0: checkpoints and the end only)");
}

// Every flag of `nereid run`, with its help.
Flags RunFlags() {
  Flags f("nereid run MODEL_OR_PLAN [flags]",
          "Trains on the model's dataset and evaluates on its test set after every epoch.");
  f.Value("passes", "P",
          "pass pipeline for a model (default autodiff,sgd(lr=0.01,momentum=0.9));\n"
          "ignored for a plan written by `nereid plan`")
      .Value("workers", "N",
             "data-parallel worker processes (default 1); N > 1 starts N local\n"
             "workers over Gloo on loopback and adds data_parallel to the passes")
      .Value("servers", "S",
             "parameter servers beside the --workers N (N + S processes, the\n"
             "servers the last S ranks); without --passes, the default passes end\n"
             "with parameter_server(servers=S); the plan's count must be S")
      .Value("threads", "T",
             "cores per worker, every library included (default 1; with\n"
             "--workers and no --threads, the machine's cores are split); at most\n"
             "4 per core of this machine unless --oversubscribe")
      .Switch("oversubscribe", "allow --threads up to 1024 whatever the machine's cores")
      .Value("epochs", "N", "(default 1)")
      .Value("batch", "B", "batch size per worker (default 64)")
      .Value("seed", "S", "data shuffling seed (default 0)")
      .Value("dataset", "NAME",
             "override the model's dataset: fashion-mnist, cifar10, synthetic,\n"
             "npy:DIR (DIR/train.npz, DIR/test.npz), csv:DIR (train.csv, test.csv)")
      .Value("data-dir", "DIR", "where the dataset's files are")
      .Value("normalize", "SPEC",
             "the inputs' standardisation: default (the dataset's own: Fashion-MNIST\n"
             "(x - 0.2860) / 0.3530 after scaling to [0, 1]; none for npy:, csv:,\n"
             "synthetic), none, MEAN/STD, or M1,M2,M3/S1,S2,S3 per channel")
      .Value("train-limit", "N", "use the first N training examples (0: all)")
      .Value("test-limit", "N", "use the first N test examples (0: all)")
      .Value("max-steps", "N", "stop after N steps (benchmarks)")
      .Value("eval-every", "N",
             "also score the test set every N steps within an epoch (the epoch's\n"
             "end scores it anyway); text datasets print bits per character")
      .Value("metrics-json", "PATH", "write the run's metrics as JSON")
      .Value("log-jsonl", "PATH",
             "stream the run as it goes, a JSON line per step (loss, step time,\n"
             "bytes sent) and per epoch, flushed as written")
      .Value("trace", "PATH",
             "write a timeline (Chrome trace-event JSON, for Perfetto or\n"
             "chrome://tracing): every node run, collective, wait, step and\n"
             "evaluation; with several workers rank R writes PATH with .rankR\n"
             "before the extension (trace.json -> trace.rank0.json, ...)")
      .Value("checkpoint", "DIR", "save parameters and optimizer state after every epoch")
      .Value("checkpoint-every", "N", "also save one every N steps within an epoch (keeping the newest)")
      .Switch("resume", "continue from the last complete checkpoint in DIR")
      .Switch("quiet", "no progress output")
      .Value("log-level", "LEVEL",
             "what the log (stderr, timestamped) shows: trace, debug, info (default),\n"
             "warn, error or off")
      .Value("gossip-eval", "WHAT",
             "gossip (SGP) plans: what each epoch but the last scores: ranks (each\n"
             "rank's own model on its shard of the test set; default) or average\n"
             "(the ranks' average; each rank goes on from its own)")
      .Switch("verify-messages",
              "check every transfer (CRC, tag, order) and every collective's result\n"
              "across ranks: a corrupted message is an error naming it (debugging)")
      .Value("config", "FILE",
             "settings from a file (graph.proto's RunConfig in text form); flags\n"
             "on the command line override it");
  AddDistributedFlags(f);
  AddSupervisionFlags(f);
  return f;
}

// Threads one worker may ask for: more than a few per core only slows a run
// down, and a mistyped count would start thousands (--oversubscribe: 1024).
int MaxThreads(bool oversubscribe) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return oversubscribe ? 1024 : 4 * cores;
}

// Local worker processes one machine may start: beyond this the launcher
// would fork until the process limit (start workers by hand for more).
int MaxLocalWorkers() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(16, 8 * cores);
}

// Whether `path`'s directory exists and is writable (an output written at the
// end of a run must not fail only then).
absl::Status CheckOutputPath(const char* flag, const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  std::error_code error;
  if (!std::filesystem::is_directory(parent, error)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": the directory ", parent.string(),
                                                   " does not exist"));
  }
  if (access(parent.c_str(), W_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": the directory ", parent.string(),
                                                   " is not writable"));
  }
  if (std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, " is a directory, not a file"));
  }
  return absl::OkStatus();
}

// Every flag's bounds, before any work starts: a mistake is a usage error
// (exit 2) at once, not a failure after training.
absl::Status CheckRunFlags(const Flags& flags, int64_t workers, int64_t threads, int64_t seed,
                           const TrainOptions& o) {
  auto at_least = [&](const char* name, int64_t value, int64_t low) -> absl::Status {
    if (flags.Has(name) && value < low) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " must be >= ", low, " (got ", value, ")"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(at_least("threads", threads, 1));
  if (const int most = MaxThreads(flags.Has("oversubscribe")); threads > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads ", threads, ": at most ", most,
        flags.Has("oversubscribe") ? std::string(" even with --oversubscribe")
                                   : absl::StrCat(" on this machine (", std::thread::hardware_concurrency(),
                                                  " cores; --oversubscribe allows up to 1024)")));
  }
  RETURN_IF_ERROR(at_least("epochs", o.epochs, 1));
  RETURN_IF_ERROR(at_least("batch", o.batch, 1));
  RETURN_IF_ERROR(at_least("seed", seed, 0));
  RETURN_IF_ERROR(at_least("max-steps", o.max_steps, 0));
  RETURN_IF_ERROR(at_least("train-limit", o.train_limit, 0));
  RETURN_IF_ERROR(at_least("test-limit", o.test_limit, 0));
  RETURN_IF_ERROR(at_least("check-every", o.check_every, 0));
  const bool by_hand = flags.Has("rendezvous") || flags.Has("rank") || flags.Has("world");
  if (!by_hand && workers > MaxLocalWorkers()) {
    return absl::InvalidArgumentError(absl::StrCat("--workers ", workers, ": at most ", MaxLocalWorkers(),
                                                   " local workers on this machine (",
                                                   std::thread::hardware_concurrency(),
                                                   " cores); start more by hand with --rank/--world/--rendezvous"));
  }
  if (!o.checkpoint_dir.empty()) {
    std::error_code error;
    if (std::filesystem::exists(o.checkpoint_dir, error) && !std::filesystem::is_directory(o.checkpoint_dir, error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--checkpoint ", o.checkpoint_dir, " is a file, not a directory"));
    }
  }
  if (!o.metrics_json.empty()) RETURN_IF_ERROR(CheckOutputPath("metrics-json", o.metrics_json));
  if (!o.log_jsonl.empty()) RETURN_IF_ERROR(CheckOutputPath("log-jsonl", o.log_jsonl));
  if (!o.trace_path.empty()) RETURN_IF_ERROR(CheckOutputPath("trace", o.trace_path));
  return absl::OkStatus();
}

// The launch flags' bounds and combinations.
absl::Status CheckLaunchFlags(const Flags& flags, int64_t workers, int64_t max_restarts, int64_t nnodes,
                              int64_t node_rank, const TrainOptions& o) {
  if (o.servers > 0 && nnodes > 1) {
    return absl::InvalidArgumentError(
        "--servers starts local servers; across machines (--nnodes) the servers are ranks like the workers, the "
        "last S of the world: count them in every node's --workers");
  }
  if (o.stall_check_percent < 0 || o.stall_check_percent > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stall-check must be a percent in [0, 100] (got ", o.stall_check_percent, ")"));
  }
  if (o.eval_every < 0) return absl::InvalidArgumentError(absl::StrCat("--eval-every must be >= 0 (got ", o.eval_every, ")"));
  if (o.checkpoint_every < 0 || (o.checkpoint_every > 0 && o.checkpoint_dir.empty())) {
    return absl::InvalidArgumentError("--checkpoint-every must be >= 0 and needs --checkpoint DIR");
  }
  if (max_restarts < 0 || max_restarts > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("--max-restarts must be in [0, 1000] (got ", max_restarts, ")"));
  }
  if (max_restarts > 0 && (o.checkpoint_dir.empty() || workers < 2 || flags.Has("rendezvous") || flags.Has("rank"))) {
    return absl::InvalidArgumentError(
        "--max-restarts restarts local workers (--workers N > 1) from their checkpoints: it needs --checkpoint DIR; "
        "under another launcher use its restarts with --resume");
  }
  if (nnodes < 1 || nnodes > 4096 || node_rank < 0 || node_rank >= nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("--nnodes must be in [1, 4096] and --node-rank in [0, nnodes) (got ",
                                                   nnodes, " and ", node_rank, ")"));
  }
  if (nnodes > 1 && (!flags.Has("rendezvous") || flags.Has("rank") || flags.Has("world") || max_restarts > 0)) {
    return absl::InvalidArgumentError(
        "--nnodes M starts --workers N local workers as ranks node-rank*N .. of M*N: every machine needs the same "
        "--rendezvous tcp://HOST:PORT (node 0's HOST, where rank 0 serves it) and no --rank, --world or "
        "--max-restarts");
  }
  return absl::OkStatus();
}

// Trains in this process (one worker, or one rank of several) and prints
// the run's line on rank 0.
int TrainHere(TrainOptions& o) {
  bool error_written = false;
  o.report_error = [&error_written](const absl::Status& status) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    std::fflush(stderr);
    error_written = true;
  };
  absl::StatusOr<TrainResult> result = Train(o);
  if (!result.ok()) {
    if (!error_written) std::fprintf(stderr, "error: %s\n", std::string(result.status().message()).c_str());
    return kExitFailure;
  }
  if (o.rank != 0) return kExitOk;  // rank 0 reports the run
  std::printf("%s: %lld epochs, %lld steps, final train loss %.4f, test accuracy %.2f%%, %.0f samples/s, "
              "%.1f s, peak RSS %.1f MiB, peak tensors %.1f MiB\n",
              o.model_path.c_str(), static_cast<long long>(result->epochs), static_cast<long long>(result->steps),
              result->final_train_loss, 100 * result->final_test_accuracy, result->samples_per_second,
              result->wall_seconds, result->peak_rss_bytes / 1048576.0, result->peak_tensor_bytes / 1048576.0);
  return kExitOk;
}

// The plan the local launcher handed this worker (--plan-file).
absl::StatusOr<std::shared_ptr<const PlanDef>> ReadLauncherPlan(const std::string& path) {
  absl::StatusOr<std::optional<PlanDef>> plan = ReadPlanFile(path);
  if (!plan.ok()) return absl::InvalidArgumentError(absl::StrCat("--plan-file ", path, ": ", plan.status().message()));
  if (!plan->has_value()) return absl::InvalidArgumentError(absl::StrCat("--plan-file ", path, ": not a plan file"));
  return std::make_shared<const PlanDef>(**std::move(plan));
}

// A worker started as one rank of several (--rank/--world, or under
// torchrun, mpirun or Slurm): its rank, world and rendezvous.
absl::Status TakeRank(const Flags& flags, int64_t rank, int64_t world, const std::string& rendezvous,
                      launcher::ProgressReporter& reporter, TrainOptions& o) {
  if (rendezvous.empty()) {
    return absl::InvalidArgumentError(
        "a worker started with --rank/--world needs --rendezvous tcp://HOST:PORT, file:DIR or redis://HOST:PORT");
  }
  ASSIGN_OR_RETURN(LaunchInfo launch, ResolveLaunch(static_cast<int>(rank), static_cast<int>(world), ProcessEnv()));
  o.rank = launch.rank;
  o.workers = launch.world;
  o.rendezvous = rendezvous;
  ASSIGN_OR_RETURN(RendezvousSpec spec, ParseRendezvousSpec(rendezvous));
  spec.token = o.rendezvous_token;
  RETURN_IF_ERROR(CheckRendezvousToken(spec, flags.Has("insecure")));
  o.run_id = flags.String("run-id", launch.run_id);
  o.bind_address = flags.String("bind", o.bind_address);
  if (reporter.enabled()) o.report = [&reporter](const std::string& line) { reporter.Report(line); };
  // The log names the rank, unless a local launcher's prefix does already.
  if (!reporter.enabled()) (void)ConfigureLogging(flags.String("log-level"), o.rank);  // checked before
  return absl::OkStatus();
}

// What the local launcher needs beyond the trainer's options.
struct LocalRun {
  int64_t workers, threads, nnodes, node_rank, worker_timeout, max_restarts;
  std::string transport, rendezvous;
};

// --workers N (and --nnodes): plans once, here, so that a bad pipeline or
// model is refused before any worker starts; then starts this machine's
// workers, each handed the plan.
int LaunchLocally(const Flags& flags, const std::vector<std::string>& args, const TrainOptions& o,
                  const LocalRun& run) {
  const auto& [workers, threads, nnodes, node_rank, worker_timeout, max_restarts, transport, rendezvous] = run;
  LocalLaunch launch;
  launch.command = "run";
  launch.args = args;  // a --config file's flags, so not_passed applies to them too
  launch.not_passed = {"--workers", "--threads", "--metrics-json", "--worker-timeout", "--max-restarts",
                       "--nnodes",  "--node-rank", "--rendezvous", "--transport", "--plan-file", "--token-file"};
  // The workers get the run's token in their environment: a fresh one on one
  // machine, the user's across machines (where none is refused without
  // --insecure: other machines can reach the store).
  launch.token = o.rendezvous_token;
  if (launch.token.empty() && nnodes == 1) launch.token = NewRunToken();
  if (launch.token.empty()) {
    absl::StatusOr<RendezvousSpec> spec = ParseRendezvousSpec(rendezvous);
    const absl::Status secure = spec.ok() ? CheckRendezvousToken(*spec, flags.Has("insecure")) : spec.status();
    if (!secure.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(secure.message()).c_str());
      return kExitUsage;
    }
  }
  const PlanTarget target{static_cast<int>(workers * nnodes), o.servers};
  absl::StatusOr<std::vector<PipelineStage>> pipeline = PipelineFor(o.passes, target);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "error: --passes: %s\n", std::string(pipeline.status().message()).c_str());
    return kExitUsage;
  }
  absl::StatusOr<BuiltPlan> built =
      BuildPlan(PlanRequest{o.model_path, *std::move(pipeline), target, o.dataset});
  if (!built.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(built.status().message()).c_str());
    return kExitFailure;
  }
  built->whole.reset();  // the workers need the plan only
  launch.plan = &built->plan;
  // Workers of one machine share memory (when /dev/shm has room for them);
  // across machines, those of each machine still do, and TCP joins the machines.
  const absl::Status shm_fits = nnodes == 1 ? ShmFits(static_cast<int>(workers))
                                            : absl::FailedPreconditionError("the workers span --nnodes machines");
  const std::string chosen = transport != "auto" ? transport
                             : nnodes > 1        ? "hierarchical"
                             : shm_fits.ok()     ? "shm"
                                                 : "gloo";
  if (chosen == "shm" && !shm_fits.ok()) {
    std::fprintf(stderr, "error: --transport shm: %s (use --transport gloo)\n", std::string(shm_fits.message()).c_str());
    return kExitUsage;
  }
  launch.worker_args = {"--transport", chosen};
  launch.nnodes = static_cast<int>(nnodes);
  launch.node_rank = static_cast<int>(node_rank);
  if (nnodes > 1) launch.rendezvous = rendezvous;
  launch.bool_flags = {"--resume", "--quiet", "--verify-messages", "--oversubscribe", "--insecure"};
  launch.workers = static_cast<int>(workers);
  launch.threads = threads;
  launch.worker_timeout = absl::Seconds(worker_timeout);
  launch.max_restarts = static_cast<int>(max_restarts);
  launch.checkpoint_dir = o.checkpoint_dir;
  // Rank 0's metrics are the run's: it sums its figures over the ranks.
  if (flags.Has("metrics-json")) launch.rank0_args = {"--metrics-json", flags.String("metrics-json")};
  return LaunchLocalWorkers(launch);
}

// A command-line mistake: its message on stderr, and the usage exit code.
int UsageError(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return kExitUsage;
}

// The trainer's string and switch flags (and the run's token) into `o`.
absl::Status ReadTrainOptions(const Flags& flags, TrainOptions& o) {
  o.revision = NereidRevision();
  ASSIGN_OR_RETURN(o.rendezvous_token, ResolveRunToken(flags.String("token-file", ""), ProcessEnv()));
  o.model_path = flags.positional()[0];
  o.passes = flags.String("passes", o.passes);
  absl::StatusOr<int64_t> servers = flags.Int("servers", 0);
  if (!servers.ok() || *servers < 0 || *servers > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--servers must be in [0, 1024]", servers.ok() ? "" : absl::StrCat(" (", servers.status().message(), ")")));
  }
  if (flags.Has("servers")) o.servers = static_cast<int>(*servers);
  o.dataset = flags.String("dataset");
  o.data_dir = flags.String("data-dir");
  o.normalize = flags.String("normalize", "default");
  RETURN_IF_ERROR(data::ParseNormalization(o.normalize).status());
  o.metrics_json = flags.String("metrics-json");
  o.log_jsonl = flags.String("log-jsonl");
  o.trace_path = flags.String("trace");
  o.checkpoint_dir = flags.String("checkpoint");
  o.resume = flags.Has("resume");
  o.verify_messages = flags.Has("verify-messages");
  o.gossip_eval = flags.String("gossip-eval", "ranks");
  if (o.gossip_eval != "ranks" && o.gossip_eval != "average") {
    return absl::InvalidArgumentError(absl::StrCat("--gossip-eval must be ranks or average (got ", o.gossip_eval, ")"));
  }
  if (flags.Has("quiet")) o.progress = nullptr;
  return absl::OkStatus();
}

// The launch settings of `nereid run` beside the trainer's options.
struct RunSettings {
  int64_t workers = 1, threads = 0, seed = 0, rank = -1, world = -1, comm_timeout = 60, worker_timeout = 300,
          max_restarts = 0, nnodes = 1, node_rank = 0;
  std::string transport;   // --transport (default auto)
  std::string rendezvous;  // --rendezvous, or the launcher's MASTER_ADDR:MASTER_PORT
  bool one_of_many = false;  // this process is one rank of several
};

// The integer flags and --transport into `s` and `o`, with every flag's bounds.
absl::Status ReadRunSettings(const Flags& flags, TrainOptions& o, RunSettings& s) {
  struct IntFlag {
    const char* name;
    int64_t* target;
  };
  for (IntFlag f : {IntFlag{"workers", &s.workers}, IntFlag{"threads", &s.threads}, IntFlag{"epochs", &o.epochs},
                    IntFlag{"batch", &o.batch}, IntFlag{"seed", &s.seed}, IntFlag{"train-limit", &o.train_limit},
                    IntFlag{"test-limit", &o.test_limit}, IntFlag{"max-steps", &o.max_steps},
                    IntFlag{"rank", &s.rank}, IntFlag{"world", &s.world}, IntFlag{"comm-timeout", &s.comm_timeout},
                    IntFlag{"worker-timeout", &s.worker_timeout}, IntFlag{"check-every", &o.check_every},
                    IntFlag{"max-restarts", &s.max_restarts}, IntFlag{"checkpoint-every", &o.checkpoint_every},
                    IntFlag{"eval-every", &o.eval_every},
                    IntFlag{"stall-check", &o.stall_check_percent}, IntFlag{"nnodes", &s.nnodes},
                    IntFlag{"node-rank", &s.node_rank}}) {
    ASSIGN_OR_RETURN(*f.target, flags.Int(f.name, *f.target));
  }
  if (s.workers < 1 || s.comm_timeout < 1 || s.worker_timeout < 1) {
    return absl::InvalidArgumentError("--workers, --comm-timeout and --worker-timeout must be >= 1");
  }
  // Local workers share memory unless told otherwise (auto); a worker
  // started on its own talks TCP unless told otherwise (PrepareWorker).
  s.transport = flags.String("transport", "auto");
  if (s.transport != "auto" && s.transport != "shm" && s.transport != "gloo" && s.transport != "hierarchical") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport must be gloo, shm, hierarchical or auto (got '", s.transport, "')"));
  }
  // The local launcher starts both the workers and the servers.
  if (o.servers > 0 && !flags.Has("rank") && !flags.Has("world")) s.workers += o.servers;
  RETURN_IF_ERROR(CheckLaunchFlags(flags, s.workers, s.max_restarts, s.nnodes, s.node_rank, o));
  return CheckRunFlags(flags, s.workers, s.threads, s.seed, o);
}

// Whether this process is one rank of several (--rendezvous, --rank or
// --world, or started by torchrun, mpirun or Slurm), and where it meets them.
absl::Status FindRanks(const Flags& flags, RunSettings& s) {
  s.one_of_many = s.nnodes == 1 && (flags.Has("rendezvous") || flags.Has("rank") || flags.Has("world"));
  s.rendezvous = flags.String("rendezvous", "");
  if (!s.one_of_many && s.nnodes == 1 && HasLauncherEnv(ProcessEnv())) {
    // Started by torchrun, mpirun or Slurm: one of their world, meeting the
    // others at MASTER_ADDR:MASTER_PORT unless a store is named.
    ASSIGN_OR_RETURN(LaunchInfo launch, ResolveLaunch(-1, -1, ProcessEnv()));
    if (launch.world > 1) {
      ASSIGN_OR_RETURN(s.rendezvous, RendezvousFromEnv(launch, ProcessEnv()));
      s.one_of_many = true;
    }
  }
  return absl::OkStatus();
}

// A worker that trains here: the launcher's plan (--plan-file), its threads,
// seed, timeout and transport.
absl::Status PrepareWorker(const Flags& flags, const RunSettings& s, TrainOptions& o) {
  if (flags.Has("plan-file")) {
    ASSIGN_OR_RETURN(o.plan, ReadLauncherPlan(flags.String("plan-file")));
  }
  o.threads = s.threads > 0 ? static_cast<int>(s.threads) : 1;
  o.seed = static_cast<uint64_t>(s.seed);
  o.comm_timeout = absl::Seconds(s.comm_timeout);
  // A worker started on its own (by hand, torchrun, Slurm) talks TCP unless
  // told otherwise; told auto, it may have peers anywhere: the hierarchical
  // backend finds those on this machine.
  o.transport = !flags.Has("transport") ? "gloo" : s.transport == "auto" ? "hierarchical" : s.transport;
  return absl::OkStatus();
}

// nereid run: reads the flags, then starts local workers or trains here (one worker, or one rank of several).
int Run(const std::vector<std::string>& args) {
  Flags flags = RunFlags();
  absl::StatusOr<std::vector<std::string>> expanded = ExpandRunConfig(args);
  if (!expanded.ok()) return UsageError(expanded.status());
  absl::Status parsed = flags.Parse(*expanded);
  if (!parsed.ok() || flags.positional().size() != 1) {
    std::fprintf(stderr, "error: %s\n", parsed.ok() ? "nereid run takes one model or plan (see nereid run --help)"
                                                    : std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  if (absl::Status logging = ConfigureLogging(flags.String("log-level"), -1); !logging.ok()) return UsageError(logging);
  TrainOptions o;
  if (absl::Status read = ReadTrainOptions(flags, o); !read.ok()) return UsageError(read);
  RunSettings s;
  if (absl::Status read = ReadRunSettings(flags, o, s); !read.ok()) return UsageError(read);
  if (absl::Status found = FindRanks(flags, s); !found.ok()) return UsageError(found);
  if (!s.one_of_many && (s.workers > 1 || s.nnodes > 1)) {
    LocalRun local{s.workers, s.threads, s.nnodes, s.node_rank, s.worker_timeout, s.max_restarts, s.transport,
                   s.rendezvous};
    return LaunchLocally(flags, *expanded, o, local);
  }
  if (absl::Status prepared = PrepareWorker(flags, s, o); !prepared.ok()) return UsageError(prepared);
  launcher::ProgressReporter reporter = launcher::ProgressReporter::FromEnvironment();
  if (s.one_of_many) {
    absl::Status joined = TakeRank(flags, s.rank, s.world, s.rendezvous, reporter, o);
    if (!joined.ok()) return UsageError(joined);
  } else {
    o.workers = 1;
  }
  return TrainHere(o);
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"run", "train a model and evaluate it every epoch", [] { return RunFlags().Help(); }, Run});

}  // namespace nereid
