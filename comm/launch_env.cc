#include "comm/launch_env.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nereid {
namespace {

struct Launcher {
  const char* name;
  const char* rank_var;
  const char* world_var;
};

constexpr Launcher kLaunchers[] = {
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS"},
    {"torchrun", "RANK", "WORLD_SIZE"},
};

constexpr const char* kRunIdVars[] = {"NEREID_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"};

absl::StatusOr<int> ReadInt(const EnvGetter& env, const std::string& var, const char* launcher) {
  const std::optional<std::string> value = env(var);
  if (!value.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(var, " is not set (", launcher, " launch detected)"));
  }
  int out = 0;
  if (!absl::SimpleAtoi(*value, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(var, "='", *value, "' is not an integer"));
  }
  return out;
}

}  // namespace

EnvGetter ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<LaunchInfo> ResolveLaunch(int rank, int world, const EnvGetter& env) {
  LaunchInfo info;
  std::string rank_from = "explicit rank";
  std::string world_from = "explicit world size";
  if (rank >= 0 && world >= 0) {
    info.source = "explicit";
  } else {
    const Launcher* launcher = nullptr;
    for (const Launcher& l : kLaunchers) {
      if (env(l.rank_var).has_value()) {
        launcher = &l;
        break;
      }
    }
    if (launcher == nullptr) {
      std::vector<std::string> vars;
      for (const Launcher& l : kLaunchers) vars.push_back(l.rank_var);
      return absl::InvalidArgumentError(absl::StrCat(
          rank < 0 ? "rank" : "world size", " not given and none of ", absl::StrJoin(vars, ", "),
          " is set: start with mpirun, srun or torchrun, or pass the rank and world size explicitly"));
    }
    info.source = (rank >= 0 || world >= 0) ? absl::StrCat("explicit+", launcher->name) : launcher->name;
    if (rank < 0) {
      auto value = ReadInt(env, launcher->rank_var, launcher->name);
      if (!value.ok()) return value.status();
      rank = *value;
      rank_from = launcher->rank_var;
    }
    if (world < 0) {
      auto value = ReadInt(env, launcher->world_var, launcher->name);
      if (!value.ok()) return value.status();
      world = *value;
      world_from = launcher->world_var;
    }
  }
  if (world < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world, " (", world_from, ") must be at least 1"));
  }
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " (", rank_from, ") is outside 0..", world - 1,
                                                   " for world size ", world, " (", world_from, ")"));
  }
  info.rank = rank;
  info.world = world;

  if (auto addr = env("MASTER_ADDR"); addr.has_value()) info.master_addr = *addr;
  if (auto port = env("MASTER_PORT"); port.has_value()) {
    int value = 0;
    if (!absl::SimpleAtoi(*port, &value) || value < 1 || value > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("MASTER_PORT='", *port, "' is not a port number (1..65535)"));
    }
    info.master_port = value;
  }
  for (const char* var : kRunIdVars) {
    if (auto id = env(var); id.has_value() && !id->empty()) {
      info.run_id = *id;
      break;
    }
  }
  return info;
}

bool HasLauncherEnv(const EnvGetter& env) {
  for (const Launcher& l : kLaunchers) {
    if (env(l.rank_var).has_value()) return true;
  }
  return false;
}

absl::StatusOr<std::string> RendezvousFromEnv(const LaunchInfo& info, const EnvGetter& env) {
  if (info.master_addr.empty() || info.master_port < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this is rank ", info.rank, " of ", info.world, " (", info.source,
        ") but there is no way to meet the others: pass --rendezvous tcp://HOST:PORT, file:DIR or "
        "redis://HOST:PORT, or set MASTER_ADDR and MASTER_PORT"));
  }
  int port = info.master_port;
  if (env("TORCHELASTIC_RUN_ID").has_value()) {
    if (port == 65535) return absl::FailedPreconditionError("MASTER_PORT=65535 leaves no next port for the store");
    ++port;  // torchrun's agent holds MASTER_PORT
  }
  const bool bracket = info.master_addr.find(':') != std::string::npos;
  return absl::StrCat("tcp://", bracket ? "[" : "", info.master_addr, bracket ? "]" : "", ":", port);
}

}  // namespace nereid
