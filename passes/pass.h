#ifndef NEREID_PASSES_PASS_H_
#define NEREID_PASSES_PASS_H_

// A compiler pass rewrites the graph. Each pass declares its options (name,
// type, default, doc), so a pipeline string such as
//   autodiff,sgd(lr=0.05,momentum=0.9,weight_decay=5e-4)
// can be checked before anything runs. Each pass also declares the graph
// properties it needs and provides (passes/pass_properties.h), so the pass
// manager checks a pipeline's order, and adds the passes a run implies,
// before any pass runs. Adding a pass is one new file with a
// NEREID_REGISTER_PASS line.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/registration.h"
#include "graph/ir.h"

namespace nereid {

enum class OptionType { kFloat, kInt, kBool, kString };

struct PassOptionSpec {
  std::string name;
  OptionType type;
  std::string default_value;
  std::string doc;
};

// Option values after parsing and type checking, defaults filled in.
class PassOptions {
 public:
  PassOptions() = default;
  explicit PassOptions(absl::flat_hash_map<std::string, std::string> values) : values_(std::move(values)) {}
  double GetFloat(absl::string_view name) const;
  int64_t GetInt(absl::string_view name) const;
  bool GetBool(absl::string_view name) const;
  const std::string& GetString(absl::string_view name) const;
  // "lr=0.05, momentum=0.9" in declaration order of `specs`, then any
  // undeclared options (a pass with extra_options) sorted by key.
  std::string ToString(const std::vector<PassOptionSpec>& specs) const;
  // Options `specs` does not declare, sorted by key.
  std::vector<std::pair<std::string, std::string>> Undeclared(const std::vector<PassOptionSpec>& specs) const;

 private:
  absl::flat_hash_map<std::string, std::string> values_;
};

// What a pass tells the person running it, beyond the node diff the pass
// manager computes.
struct PassLog {
  std::vector<std::string> notes;
};

// What the plan is for: the world its passes partition the model over.
struct PlanTarget {
  int workers = 1;  // every rank of the run, servers included; 0: not known
  int servers = -1;  // parameter servers among them; -1: whatever the plan has
};

// What a pass is given besides the graph: its options and the plan's target
// (passes that place work on ranks read the world here, not from the graph).
struct PassContext {
  const PassOptions& options;
  PlanTarget target;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) = 0;
};

struct PassInfo {
  std::string name;
  std::string summary;
  std::vector<PassOptionSpec> options;
  std::function<std::unique_ptr<Pass>()> factory;
  // Non-empty: the pass also takes undeclared key=value options (strings) and
  // checks them itself (compress hands them to its codec); says what they are.
  std::string extra_options;

  // Order, as graph properties (passes/pass_properties.h):
  //   needs:    an earlier pass must provide each (or the input graph has it;
  //             the pass checks that itself when it runs)
  //   provides: true of the graph after this pass
  //   precedes: must not be true yet: the pass runs before what provides it
  std::vector<std::string> needs;
  std::vector<std::string> provides;
  std::vector<std::string> precedes;
  // Set: the manager adds this pass to a pipeline for `target` when no stage
  // provides what it provides, right after the first stage by which all it
  // needs is provided (data_parallel for several workers).
  std::function<bool(const PlanTarget& target)> implied_for;
  // Set: the pass must be the pipeline's last stage, and a graph it ran on
  // takes no further passes (place: it places every node the others add).
  bool runs_last = false;
};

class PassRegistry {
 public:
  static PassRegistry& Global();
  absl::Status Register(PassInfo info);
  const PassInfo* Find(absl::string_view name) const;
  std::vector<std::string> Names() const;  // sorted

 private:
  absl::flat_hash_map<std::string, PassInfo> passes_;
};

}  // namespace nereid

#define NEREID_REGISTER_PASS(info) NEREID_REGISTER(::nereid::PassRegistry, info)

#endif  // NEREID_PASSES_PASS_H_
