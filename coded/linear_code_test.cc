// Linear codes for coded computing (coded/linear_code.h): each scheme's
// tolerance (MDS survives any N-K losses, replication any loss of all but one
// copy), exact decoding of linear results, RLNC's decodability tracking the
// matching and bounded by the coverage formula, and errors that name what is
// missing.

#include "coded/linear_code.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

LinearCode MakeOrDie(CodeScheme scheme, int n, int k, int degree = 0, uint64_t seed = 1) {
  absl::StatusOr<LinearCode> code = LinearCode::Make({scheme, n, k, degree, seed});
  EXPECT_TRUE(code.ok()) << code.status();
  return *code;
}

// Every subset of {0..n-1} of size `size`.
std::vector<std::vector<int>> Subsets(int n, int size) {
  std::vector<std::vector<int>> out;
  std::vector<char> pick(static_cast<size_t>(n), 0);
  std::fill(pick.begin(), pick.begin() + size, 1);
  do {
    std::vector<int> s;
    for (int i = 0; i < n; ++i) {
      if (pick[static_cast<size_t>(i)]) s.push_back(i);
    }
    out.push_back(s);
  } while (std::prev_permutation(pick.begin(), pick.end()));
  return out;
}

TEST(LinearCodeTest, MdsDecodesFromAnyKOfN) {
  const LinearCode code = MakeOrDie(CodeScheme::kMds, 7, 4);
  for (const auto& rows : Subsets(7, 4)) EXPECT_TRUE(code.Decodable(rows));
  for (const auto& rows : Subsets(7, 3)) EXPECT_FALSE(code.Decodable(rows));
  EXPECT_EQ(code.PartitionsMoved(), 4 * 3 + 3 * 4);  // the data workers miss 3 each, the others all 4
}

TEST(LinearCodeTest, ReplicationSurvivesAllButOneCopy) {
  const LinearCode code = MakeOrDie(CodeScheme::kReplication, 6, 3);  // two copies
  EXPECT_TRUE(code.Decodable({3, 4, 5}));
  EXPECT_TRUE(code.Decodable({0, 4, 2}));
  EXPECT_FALSE(code.Decodable({0, 3, 1, 4}));  // both copies of partition 2 gone
  absl::StatusOr<Eigen::MatrixXd> none = code.Decode({0, 3, 1, 4}, Eigen::MatrixXd::Zero(4, 2));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("data partition 2 is in none of the 4"));
  EXPECT_EQ(code.PartitionsMoved(), 3);
}

// f linear in the data: the master recovers every partition's result exactly.
TEST(LinearCodeTest, DecodingRecoversEveryPartitionsResult) {
  for (CodeScheme scheme : {CodeScheme::kMds, CodeScheme::kRlnc}) {
    const LinearCode code = MakeOrDie(scheme, 12, 8, 3, 7);
    std::mt19937 random(3);
    std::normal_distribution<double> gaussian;
    Eigen::MatrixXd truth(8, 50);
    for (int i = 0; i < truth.size(); ++i) truth.data()[i] = gaussian(random);
    const Eigen::MatrixXd coded = code.generator() * truth;
    // Workers 2 and 9 never answer; the rest (10 rows) are decodable for
    // this seed's RLNC too (checked).
    std::vector<int> rows;
    for (int i = 0; i < 12; ++i) {
      if (i != 2 && i != 9) rows.push_back(i);
    }
    ASSERT_TRUE(code.Decodable(rows)) << CodeSchemeName(scheme);
    Eigen::MatrixXd received(static_cast<Eigen::Index>(rows.size()), 50);
    for (size_t r = 0; r < rows.size(); ++r) received.row(static_cast<Eigen::Index>(r)) = coded.row(rows[r]);
    absl::StatusOr<Eigen::MatrixXd> decoded = code.Decode(rows, received);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_LT((*decoded - truth).cwiseAbs().maxCoeff(), 1e-9) << CodeSchemeName(scheme);
  }
}

// With Gaussian coefficients, numeric rank K exactly when the supports admit
// a matching; both need every partition reached, so the coverage formula
// bounds the decodable fraction from above and is close to it for degree >= 2.
TEST(LinearCodeTest, RlncDecodabilityFollowsTheMatchingAndTheCoverageBound) {
  const int k = 8, degree = 2, m = 12;
  int decodable = 0, covered = 0, trials = 400;
  for (int t = 0; t < trials; ++t) {
    const LinearCode code = MakeOrDie(CodeScheme::kRlnc, m, k, degree, 1000 + t);
    std::vector<int> rows(m);
    for (int i = 0; i < m; ++i) rows[static_cast<size_t>(i)] = i;
    const bool numeric = code.Decodable(rows);
    EXPECT_EQ(numeric, code.StructurallyDecodable(rows)) << "seed " << 1000 + t;
    decodable += numeric;
    std::vector<char> reached(k, 0);
    for (int i = 0; i < m; ++i) {
      for (int p : code.support(i)) reached[static_cast<size_t>(p)] = 1;
    }
    covered += std::all_of(reached.begin(), reached.end(), [](char c) { return c != 0; });
  }
  EXPECT_LE(decodable, covered);
  const double bound = CoverageProbability(k, degree, m);
  EXPECT_NEAR(static_cast<double>(covered) / trials, bound, 0.08);  // 400 trials: about 3 standard errors
  EXPECT_GT(decodable, 0);
}

TEST(LinearCodeTest, CoverageProbabilityAtItsEnds) {
  EXPECT_DOUBLE_EQ(CoverageProbability(4, 4, 1), 1.0);  // one dense row reaches everything
  EXPECT_DOUBLE_EQ(CoverageProbability(4, 1, 3), 0.0);  // 3 single partitions cannot reach 4
  EXPECT_NEAR(CoverageProbability(2, 1, 2), 0.5, 1e-12);
  EXPECT_EQ(CoverageProbability(4, 2, 0), 0.0);
}

TEST(LinearCodeTest, BadOptionsAreNamed) {
  auto bad = [](CodeSpec spec) { return std::string(LinearCode::Make(spec).status().message()); };
  EXPECT_THAT(bad({CodeScheme::kMds, 3, 4, 0, 0}), HasSubstr("n=3: between k (4)"));
  EXPECT_THAT(bad({CodeScheme::kRlnc, 6, 4, 5, 0}), HasSubstr("degree=5 must be in [1, k=4]"));
  EXPECT_THAT(bad({CodeScheme::kReplication, 7, 4, 0, 0}), HasSubstr("must be a multiple of k"));
  EXPECT_THAT(bad({CodeScheme::kNone, 5, 4, 0, 0}), HasSubstr("must equal k"));
  EXPECT_THAT(std::string(ParseCodeScheme("lt").status().message()), HasSubstr("expected rlnc, mds"));
}

}  // namespace
}  // namespace nereid
