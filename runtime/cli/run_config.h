#ifndef NEREID_RUNTIME_CLI_RUN_CONFIG_H_
#define NEREID_RUNTIME_CLI_RUN_CONFIG_H_

// `nereid run --config FILE`: a run's settings in a file, the RunConfig
// message of graph.proto in text form, for runs too long for a command line:
//
//   world_size: 4              # --workers
//   epochs: 10
//   batch_per_worker: 64       # --batch
//   seed: 7
//   dataset: "fashion-mnist"
//   rendezvous: "tcp://10.0.0.1:29500"
//   passes: "autodiff,sgd(lr=0.04,momentum=0.9)"
//   option { key: "checkpoint" value { s: "/data/ckpt" } }   # any other flag:
//   option { key: "max-restarts" value { i: 3 } }            # s, i, f, or
//   option { key: "quiet" value { b: true } }                # b for a switch
//
// The file becomes flags placed before the command line's, so a flag given
// on the command line overrides the file. Errors name the file, and the line
// and column of a syntax error.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace nereid {

// The flags `--config FILE` stands for.
absl::StatusOr<std::vector<std::string>> RunConfigFlags(const std::string& path);

// `args` with every `--config FILE` (or `--config=FILE`) replaced by the
// flags its file holds.
absl::StatusOr<std::vector<std::string>> ExpandRunConfig(const std::vector<std::string>& args);

}  // namespace nereid

#endif  // NEREID_RUNTIME_CLI_RUN_CONFIG_H_
