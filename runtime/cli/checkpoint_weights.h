#ifndef NEREID_RUNTIME_CLI_CHECKPOINT_WEIGHTS_H_
#define NEREID_RUNTIME_CLI_CHECKPOINT_WEIGHTS_H_

// Loading a checkpoint's parameters into an executor, for the commands that
// run a trained model forward (infer, generate).

#include <string>

#include "absl/status/status.h"
#include "graph/ir.h"
#include "schedulers/executor.h"

namespace nereid {

// `where` is a .ckpt file or a checkpoint directory (its latest). Sets every
// Parameter of `graph` the checkpoint holds; an error when it holds none.
absl::Status RestoreParameters(const Graph& graph, Executor& executor, const std::string& where);

}  // namespace nereid

#endif  // NEREID_RUNTIME_CLI_CHECKPOINT_WEIGHTS_H_
