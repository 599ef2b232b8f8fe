#ifndef NEREID_GRAPH_DOT_EXPORT_H_
#define NEREID_GRAPH_DOT_EXPORT_H_

// Graphviz rendering of a graph: one box per node (name, op, output shape),
// parameters and inputs drawn differently, control edges dashed, feedback
// edges in red.

#include <string>

#include "graph/ir.h"

namespace nereid {

std::string GraphToDot(const Graph& graph);

}  // namespace nereid

#endif  // NEREID_GRAPH_DOT_EXPORT_H_
