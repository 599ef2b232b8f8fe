#include "runtime/cli/run_config.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file_io.h"
#include "graph/graph.pb.h"
#include "graph/graph_io.h"

namespace nereid {

constexpr size_t kMaxConfigBytes = 1 << 20;

absl::StatusOr<std::vector<std::string>> RunConfigFlags(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--config: ", text.status().message()));
  if (text->size() > kMaxConfigBytes) return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": over 1 MiB"));
  RunConfig config;
  absl::Status parsed = ParseTextProto(*text, path, &config);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("--config ", parsed.message()));
  std::vector<std::string> flags;
  auto add = [&](const std::string& name, const std::string& value) {
    flags.push_back("--" + name);
    flags.push_back(value);
  };
  if (config.world_size() != 0) add("workers", absl::StrCat(config.world_size()));
  if (config.epochs() != 0) add("epochs", absl::StrCat(config.epochs()));
  if (config.batch_per_worker() != 0) add("batch", absl::StrCat(config.batch_per_worker()));
  if (config.seed() != 0) add("seed", absl::StrCat(config.seed()));
  if (!config.dataset().empty()) add("dataset", config.dataset());
  if (!config.rendezvous().empty()) add("rendezvous", config.rendezvous());
  if (!config.passes().empty()) add("passes", config.passes());
  for (const auto& [key, value] : config.option()) {
    if (key.empty() || absl::StartsWith(key, "-") || key == "config") {
      return absl::InvalidArgumentError(
          absl::StrCat("--config ", path, ": option '", key, "' must be a flag's name without dashes (not config)"));
    }
    switch (value.value_case()) {
      case AttrValue::kS:
        add(key, value.s());
        break;
      case AttrValue::kI:
        add(key, absl::StrCat(value.i()));
        break;
      case AttrValue::kF:
        add(key, absl::StrCat(value.f()));
        break;
      case AttrValue::kB:
        if (value.b()) flags.push_back("--" + key);
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("--config ", path, ": option '", key, "' must hold s, i, f or b"));
    }
  }
  return flags;
}

absl::StatusOr<std::vector<std::string>> ExpandRunConfig(const std::vector<std::string>& args) {
  std::vector<std::string> from_files, rest;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string path;
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError("--config needs a file");
      path = args[++i];
    } else if (absl::StartsWith(args[i], "--config=")) {
      path = args[i].substr(9);
    } else {
      rest.push_back(args[i]);
      continue;
    }
    absl::StatusOr<std::vector<std::string>> flags = RunConfigFlags(path);
    if (!flags.ok()) return flags.status();
    from_files.insert(from_files.end(), flags->begin(), flags->end());
  }
  from_files.insert(from_files.end(), rest.begin(), rest.end());
  return from_files;
}

}  // namespace nereid
