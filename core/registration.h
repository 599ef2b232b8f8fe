#ifndef NEREID_CORE_REGISTRATION_H_
#define NEREID_CORE_REGISTRATION_H_

// One registration shape for every registry: ops, kernels, passes, codecs and
// subcommands (and the communicators and topologies to come). A registry is a
// class with `static Registry& Global()` and `absl::Status Register(...)`;
// each kind's macro forwards to NEREID_REGISTER:
//
//   #define NEREID_REGISTER_PASS(...) NEREID_REGISTER(::nereid::PassRegistry, __VA_ARGS__)
//
// so adding a pass, an op or a codec is one new file ending in one line:
//
//   NEREID_REGISTER_PASS(PipelineInfo());
//
// The line defines a static object whose constructor registers the entry
// when the program starts. A failed registration (a duplicate name, a
// malformed record) is a programming error: it aborts, naming the file and
// line. Libraries that hold registrations are `alwayslink`, so the linker
// keeps them.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace nereid {

template <typename Registry>
class Registration {
 public:
  template <typename... Entry>
  Registration(const char* file, int line, Entry&&... entry) {
    absl::Status status = Registry::Global().Register(std::forward<Entry>(entry)...);
    if (!status.ok()) {
      std::fprintf(stderr, "%s:%d: registration failed: %s\n", file, line, std::string(status.message()).c_str());
      std::abort();
    }
  }
};

}  // namespace nereid

#define NEREID_CONCAT_INNER(a, b) a##b
#define NEREID_CONCAT(a, b) NEREID_CONCAT_INNER(a, b)
#define NEREID_REGISTER(Registry, ...)                                                                     \
  [[maybe_unused]] static ::nereid::Registration<Registry> NEREID_CONCAT(nereid_registration_, __COUNTER__)( \
      __FILE__, __LINE__, __VA_ARGS__)

#endif  // NEREID_CORE_REGISTRATION_H_
