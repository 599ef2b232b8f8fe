#ifndef NEREID_OPS_VALIDATE_H_
#define NEREID_OPS_VALIDATE_H_

// Structural validation against the op registry: every op is known, every
// node has the inputs its op takes, every input port exists, attributes are
// declared, of the right type and present when required, enum attributes hold
// an allowed value, placement fields are sane, loop scopes are declared, and
// the graph has no cycle except through a Feedback node. The first problem
// found is returned, naming the file, line, node and op.

#include "absl/status/status.h"
#include "graph/ir.h"

namespace nereid {

absl::Status ValidateGraph(const Graph& graph);

}  // namespace nereid

#endif  // NEREID_OPS_VALIDATE_H_
