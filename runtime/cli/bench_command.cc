// nereid bench allreduce: Nereid's allreduce against raw Gloo and the
// alpha-beta bound of the measured link, per message size.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/graph_io.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "runtime/cli/local_launch.h"
#include "runtime/comm/allreduce_bench.h"
#include "runtime/comm/launch_env.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/launcher/progress_reporter.h"
#include "runtime/version.h"

namespace nereid {
namespace {

constexpr char kHelp[] =
    "Usage: nereid bench allreduce [flags]\n\n"
    "Times allreduce through Nereid's Gloo communicator and through raw Gloo (alternating, in the\n"
    "same processes), per size: time, algbw and busbw as nccl-tests define them, and the ratio to\n"
    "the alpha-beta bound of the link measured between ranks 0 and 1.\n\n"
    "  --workers N        local worker processes (default 2)\n"
    "  --sizes LIST       message sizes (default 4K,256K,4M,64M)\n"
    "  --rounds R         alternations of ours and raw Gloo per size (default 3)\n"
    "  --json PATH        write the results as JSON\n"
    "One worker per invocation: --rendezvous SPEC --rank R --world N [--bind ADDR] (as for\n"
    "`nereid run`).\n";

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return kExitFailure;
}

int Bench(const std::vector<std::string>& args) {
  Flags flags({"workers", "sizes", "rounds", "json", "rendezvous", "rank", "world", "threads", "worker-timeout", "bind"},
              {"help"});
  absl::Status parsed = flags.Parse(args);
  if (!parsed.ok() || flags.positional().size() != 1 || flags.positional()[0] != "allreduce") {
    if (!parsed.ok()) std::fprintf(stderr, "error: %s\n\n", std::string(parsed.message()).c_str());
    std::fputs(kHelp, stderr);
    return kExitUsage;
  }
  absl::StatusOr<int64_t> workers = flags.Int("workers", 2), rounds = flags.Int("rounds", 3),
                          rank = flags.Int("rank", -1), world = flags.Int("world", -1);
  for (const auto* v : {&workers, &rounds, &rank, &world}) {
    if (!v->ok()) return Fail(v->status());
  }
  AllReduceBenchOptions options;
  if (flags.Has("sizes")) {
    absl::StatusOr<std::vector<int64_t>> sizes = ParseSizes(flags.String("sizes"));
    if (!sizes.ok()) return Fail(sizes.status());
    options.sizes_bytes = *sizes;
  }
  options.rounds = static_cast<int>(std::max<int64_t>(1, *rounds));
  if (!flags.Has("rendezvous")) {
    if (*workers < 2) {
      std::fprintf(stderr, "error: --workers must be >= 2 for an allreduce benchmark\n");
      return kExitUsage;
    }
    LocalLaunch launch;
    launch.command = "bench";
    launch.args = args;
    launch.not_passed = {"--workers", "--json", "--threads"};
    launch.workers = static_cast<int>(*workers);
    launch.threads = 1;
    if (flags.Has("json")) launch.rank0_args = {"--json", flags.String("json")};
    return LaunchLocalWorkers(launch);
  }
  absl::StatusOr<LaunchInfo> info = ResolveLaunch(static_cast<int>(*rank), static_cast<int>(*world), ProcessEnv());
  if (!info.ok()) return Fail(info.status());
  absl::StatusOr<RendezvousSpec> spec = ParseRendezvousSpec(flags.String("rendezvous"), info->run_id);
  if (!spec.ok()) return Fail(spec.status());
  launcher::ProgressReporter reporter = launcher::ProgressReporter::FromEnvironment();
  reporter.Report("phase=rendezvous");
  WorkerIdentity identity{kNereidVersion, absl::StrCat("bench allreduce ", flags.String("sizes")), info->world};
  GlooConnectOptions connect;
  connect.hostname = flags.String("bind", connect.hostname);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = ConnectGloo(*spec, info->rank, info->world, identity, connect);
  if (!comm.ok()) return Fail(comm.status());
  auto* gloo = dynamic_cast<GlooCommunicator*>(comm->get());
  if (gloo == nullptr) return Fail(absl::InternalError("the allreduce benchmark needs the Gloo communicator"));
  reporter.Report("phase=bench");
  absl::StatusOr<AllReduceBenchResult> result = RunAllReduceBench(*gloo, options);
  if (!result.ok()) return Fail(result.status());
  if (info->rank != 0) return kExitOk;
  std::fputs(FormatBenchTable(*result).c_str(), stdout);
  if (flags.Has("json")) {
    absl::Status written = WriteFileAtomically(flags.String("json"), BenchJson(*result));
    if (!written.ok()) return Fail(written);
  }
  return kExitOk;
}

}  // namespace

const Command& BenchCommand() {
  static const Command command{"bench", "benchmarks: allreduce (ours vs raw Gloo vs the link's bound)", kHelp, Bench};
  return command;
}

}  // namespace nereid
