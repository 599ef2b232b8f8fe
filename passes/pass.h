#ifndef NEREID_PASSES_PASS_H_
#define NEREID_PASSES_PASS_H_

// A compiler pass rewrites the graph. Each pass declares its options (name,
// type, default, doc), so a pipeline string such as
//   autodiff,sgd(lr=0.05,momentum=0.9,weight_decay=5e-4)
// can be checked before anything runs. Adding a pass is one new file with a
// NEREID_REGISTER_PASS line.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

class Pass {
 public:
  virtual ~Pass() = default;
  virtual absl::Status Run(Graph& graph, const PassOptions& options, PassLog* log) = 0;
};

struct PassInfo {
  std::string name;
  std::string summary;
  std::vector<PassOptionSpec> options;
  std::function<std::unique_ptr<Pass>()> factory;
  // Non-empty: the pass also takes undeclared key=value options (strings) and
  // checks them itself (compress hands them to its codec); says what they are.
  std::string extra_options;
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

struct PassRegistrar {
  explicit PassRegistrar(PassInfo info);
};

}  // namespace nereid

#define NEREID_REGISTER_PASS(info) \
  [[maybe_unused]] static ::nereid::PassRegistrar NEREID_PASS_CONCAT(nereid_pass_registrar_, __COUNTER__)(info)
#define NEREID_PASS_CONCAT(a, b) NEREID_PASS_CONCAT_INNER(a, b)
#define NEREID_PASS_CONCAT_INNER(a, b) a##b

#endif  // NEREID_PASSES_PASS_H_
