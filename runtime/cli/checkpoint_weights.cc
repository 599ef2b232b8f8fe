#include "runtime/cli/checkpoint_weights.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "runtime/checkpoint.h"

namespace nereid {

absl::Status RestoreParameters(const Graph& graph, Executor& executor, const std::string& where) {
  absl::StatusOr<Checkpoint> checkpoint =
      absl::EndsWith(where, ".ckpt") ? ReadCheckpointFile(where) : LoadLatestCheckpoint(where);
  if (!checkpoint.ok()) return checkpoint.status();
  int restored = 0;
  for (const auto& [name, value] : checkpoint->tensors) {
    const Node* n = graph.FindNode(name);
    if (n == nullptr || n->op() != "Parameter") continue;
    RETURN_IF_ERROR(executor.SetState(name, value));
    ++restored;
  }
  if (restored == 0) return absl::InvalidArgumentError(absl::StrCat(where, " holds none of the model's parameters"));
  return absl::OkStatus();
}

}  // namespace nereid
