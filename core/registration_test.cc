#include "core/registration.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

// The smallest registry: names, refused twice.
class NameRegistry {
 public:
  static NameRegistry& Global() {
    static NameRegistry* registry = new NameRegistry();
    return *registry;
  }
  absl::Status Register(const std::string& name, int arity) {
    if (!names_.insert(name).second) return absl::AlreadyExistsError(absl::StrCat("'", name, "' is registered twice"));
    arity_sum_ += arity;
    return absl::OkStatus();
  }
  bool Has(const std::string& name) const { return names_.count(name) > 0; }
  int arity_sum() const { return arity_sum_; }

 private:
  std::set<std::string> names_;
  int arity_sum_ = 0;
};

#define REGISTER_NAME(...) NEREID_REGISTER(::nereid::NameRegistry, __VA_ARGS__)

REGISTER_NAME("relu", 1);
REGISTER_NAME(std::string("matmul"), 2);

TEST(RegistrationTest, StaticRegistrationsRunBeforeMain) {
  EXPECT_TRUE(NameRegistry::Global().Has("relu"));
  EXPECT_TRUE(NameRegistry::Global().Has("matmul"));
  EXPECT_EQ(NameRegistry::Global().arity_sum(), 3);  // every argument reached Register
}

TEST(RegistrationDeathTest, AFailedRegistrationAbortsNamingWhere) {
  EXPECT_DEATH(Registration<NameRegistry>("ops/relu.cc", 12, "relu", 1),
               "ops/relu.cc:12: registration failed: 'relu' is registered twice");
}

}  // namespace
}  // namespace nereid
