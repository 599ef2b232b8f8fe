// Coded computing (the coded pass) end to end: real `nereid` processes over
// loopback TCP, rank 0 the master, ranks 1..n coded workers. Full-batch
// gradient descent on a linear model must end where uncoded full-batch
// gradient descent ends, for every scheme and both linear models, with
// workers gone in some rounds; a round that cannot be decoded is an error
// naming the missing workers; a model that is not linear is refused.

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coded/linear_code.h"
#include "core/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint.h"
#include "tests/process_util.h"

namespace nereid {
namespace {

using ::nereid::testing::Outcome;
using ::nereid::testing::Shell;
using ::testing::HasSubstr;

constexpr char kNereid[] = "runtime/cli/nereid";
constexpr int kSteps = 20;
constexpr int kExamples = 600;

class CodedTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir(); }

  // kSteps full-batch steps of `model` (one per epoch) on `ranks` processes
  // (1: uncoded), checkpointed under a fresh directory, returned.
  Outcome Run(const std::string& model, int ranks, const std::string& passes, std::string* checkpoint,
              std::string* metrics = nullptr) {
    *checkpoint = absl::StrCat(dir_, "/run", ++runs_);
    const std::string json = *checkpoint + ".json";
    if (metrics != nullptr) *metrics = json;
    return Shell(absl::StrCat(kNereid, " run models/", model, ".pbtxt --workers ", ranks, " --threads 1 --batch ",
                              kExamples, " --train-limit ", kExamples, " --test-limit 100 --epochs ", kSteps,
                              " --quiet --comm-timeout 60 --passes \"", passes, "\" --checkpoint ", *checkpoint,
                              " --metrics-json ", json),
                 280);
  }

  std::string dir_;
  int runs_ = 0;
};

// The parameters a checkpoint directory's newest checkpoint holds.
std::vector<std::pair<std::string, Tensor>> Parameters(const std::string& dir) {
  absl::StatusOr<Checkpoint> c = LoadLatestCheckpoint(dir);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return {};
  EXPECT_EQ(c->step, kSteps);
  return c->tensors;
}

// The largest |a - b| over the parameters `reference` holds, relative to the
// largest |reference| (at least 1).
double WorstDifference(const std::vector<std::pair<std::string, Tensor>>& reference,
                       const std::vector<std::pair<std::string, Tensor>>& other) {
  double worst = 0, scale = 1;
  for (const auto& [name, ref] : reference) {
    auto it = std::find_if(other.begin(), other.end(), [&](const auto& p) { return p.first == name; });
    EXPECT_NE(it, other.end()) << name;
    if (it == other.end() || it->second.num_elements() != ref.num_elements()) return INFINITY;
    for (int64_t i = 0; i < ref.num_elements(); ++i) {
      worst = std::max(worst, std::fabs(double{ref.data<float>()[i]} - it->second.data<float>()[i]));
      scale = std::max(scale, std::fabs(double{ref.data<float>()[i]}));
    }
  }
  return worst / scale;
}

// Departures that leave `code` decodable: in rounds 3-5 the last worker
// whose loss keeps the rest decodable, in rounds 9-10 up to n - k workers
// while that holds, every other round everyone. Empty if none can go.
std::string DecodableDepartures(const CodeSpec& spec) {
  absl::StatusOr<LinearCode> code = LinearCode::Make(spec);
  EXPECT_TRUE(code.ok()) << code.status();
  std::vector<int> present(static_cast<size_t>(spec.n));
  for (int w = 0; w < spec.n; ++w) present[static_cast<size_t>(w)] = w;
  std::vector<int> gone;
  for (int w = spec.n - 1; w >= 0 && static_cast<int>(gone.size()) < spec.n - spec.k; --w) {
    std::vector<int> rest;
    for (int p : present) {
      if (p != w) rest.push_back(p);
    }
    if (code->Decodable(rest)) {
      present = rest;
      gone.push_back(w);
    }
  }
  if (gone.empty()) return "";
  return absl::StrCat("3-5:", gone[0], ";9-10:", absl::StrJoin(gone, "+"));
}

struct Scheme {
  CodeSpec spec;
  const char* text;  // the pass's options but departures
};

// For both linear models, every scheme, with workers gone in some rounds:
// the same weights as uncoded full-batch gradient descent within 1e-5 (at
// lr 0.02, where full-batch descent on these 600 examples is stable; at 0.1
// it oscillates, and any rounding difference, even the identity code's other
// summation order, grows to ~4e-6 in 20 steps).
TEST_F(CodedTest, EverySchemeEndsWhereUncodedGradientDescentEnds) {
  const std::vector<Scheme> schemes = {
      {{CodeScheme::kMds, 4, 2, 0, 1}, "scheme=mds,k=2,seed=1"},
      {{CodeScheme::kReplication, 4, 2, 0, 1}, "scheme=replication,k=2,seed=1"},
      {{CodeScheme::kRlnc, 4, 3, 2, 1}, "scheme=rlnc,k=3,degree=2,seed=1"},
  };
  for (const char* model : {"logreg_fashion", "svm_fashion"}) {
    SCOPED_TRACE(model);
    std::string uncoded;
    Outcome o = Run(model, 1, "autodiff,sgd(lr=0.02)", &uncoded);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    const std::vector<std::pair<std::string, Tensor>> reference = Parameters(uncoded);
    ASSERT_EQ(reference.size(), 2u);  // weight and bias
    for (const Scheme& s : schemes) {
      SCOPED_TRACE(s.text);
      const std::string departures = DecodableDepartures(s.spec);
      EXPECT_FALSE(departures.empty()) << "every worker is needed";
      std::string coded, metrics;
      o = Run(model, s.spec.n + 1,
              absl::StrCat("autodiff,sgd(lr=0.02),coded(", s.text, ",departures=", departures, ")"), &coded, &metrics);
      ASSERT_EQ(o.exit_code, 0) << o.output;
      EXPECT_LE(WorstDifference(reference, Parameters(coded + "/rank-0")), 1e-5);
      const Json j = Json::parse(testing::ReadFile(metrics));
      EXPECT_EQ(j["strategy"], "coded");
      EXPECT_GT(j["coded"]["gone_per_gather"].get<double>(), 0.0);  // the departures happened
      EXPECT_GT(j["coded"]["resent_bytes"].get<double>(), 0.0);     // and the returning got their partitions
    }
  }
}

// MDS codes every partition into every coded one; RLNC of degree 2 moves
// fewer partitions to build the same number, as the traffic counters see.
TEST_F(CodedTest, RlncEncodingMovesLessThanMds) {
  std::string ckpt, mds_json, rlnc_json;
  Outcome o = Run("logreg_fashion", 6, "autodiff,sgd(lr=0.1),coded(scheme=mds,k=4)", &ckpt, &mds_json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = Run("logreg_fashion", 6, "autodiff,sgd(lr=0.1),coded(scheme=rlnc,k=4,degree=2)", &ckpt, &rlnc_json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const double mds = Json::parse(testing::ReadFile(mds_json))["coded"]["encoding_bytes"].get<double>();
  const double rlnc = Json::parse(testing::ReadFile(rlnc_json))["coded"]["encoding_bytes"].get<double>();
  EXPECT_GT(rlnc, 0);
  EXPECT_LE(rlnc, 0.5 * mds) << "rlnc " << rlnc << " bytes, mds " << mds;
}

// Three of four workers gone: no code over 3 partitions survives it.
TEST_F(CodedTest, UndecodableRoundIsAnErrorNamingTheMissingWorkers) {
  std::string ckpt;
  Outcome o = Run("logreg_fashion", 5, "autodiff,sgd(lr=0.1),coded(scheme=mds,k=3,departures=2:0+1+2)", &ckpt);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("coded round 2: workers 0,1,2 (ranks 1,2,3) are gone and the 1 left cannot decode"));
}

TEST_F(CodedTest, ModelsNotOfTheCodedFormAndWrongWorldsAreRefused) {
  // LeNet's images meet a convolution, not a matrix product.
  Outcome o = Shell(absl::StrCat(kNereid, " plan models/lenet_fashion.pbtxt --workers 4 -o ", dir_,
                                 "/p.pbtxt --passes \"autodiff,sgd(lr=0.1),coded(k=2)\""));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("coded: the model's gradient is not of the coded form"));
  EXPECT_THAT(o.output, HasSubstr("no MatMul reads the fed images and a parameter"));
  o = Shell(absl::StrCat(kNereid, " plan models/logreg_fashion.pbtxt --workers 4 -o ", dir_,
                         "/p.pbtxt --passes \"autodiff,sgd(lr=0.1),coded(k=2,n=5)\""));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("coded: n=5 coded workers and the master need 6 ranks (--workers 6)"));
  o = Shell(absl::StrCat(kNereid, " plan models/logreg_fashion.pbtxt --workers 4 -o ", dir_,
                         "/p.pbtxt --passes \"autodiff,sgd(lr=0.1),coded(k=2,departures=3:7)\""));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("departures '3:7': '7' is not a worker in [0, 3)"));
}

// A per-rank plan whose worker was edited to another code: `nereid check`
// names the two ends that disagree, before anything runs.
TEST_F(CodedTest, EditedPlanWithDisagreeingEndsIsRefused) {
  const std::string plan = dir_ + "/per_rank.pbtxt";
  Outcome o = Shell(absl::StrCat(kNereid, " plan models/logreg_fashion.pbtxt --workers 4 --per-rank -o ", plan,
                                 " --passes \"autodiff,sgd(lr=0.1),coded(k=3)\""));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::string text = testing::ReadFile(plan);
  const size_t send = text.find("op: \"CodedSend\"");
  ASSERT_NE(send, std::string::npos);
  const size_t k = text.find("i: 3", text.find("key: \"k\"", send));
  ASSERT_NE(k, std::string::npos);
  text.replace(k, 4, "i: 2");
  const size_t fingerprint = text.find("\nfingerprint: ");
  ASSERT_NE(fingerprint, std::string::npos);
  text = text.substr(0, fingerprint + 1) + "fingerprint: \"\"\n";
  std::ofstream(plan) << text;
  o = Shell(absl::StrCat(kNereid, " check ", plan));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("rank 1's CodedSend 'coded/worker0/z/send' has k {i: 2} but rank 0's CodedGather "
                                  "'coded/z' has {i: 3}"));
}

}  // namespace
}  // namespace nereid
