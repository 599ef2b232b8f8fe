#ifndef NEREID_CODED_LINEAR_CODE_H_
#define NEREID_CODED_LINEAR_CODE_H_

// Linear codes over the reals for coded computing: K data partitions are
// mixed into N coded partitions, coded partition i = sum_j G(i, j) *
// partition j, G the N x K generator. For a computation f that is linear in
// the data (the matrix products of a linear model's gradient),
// f(coded i) = sum_j G(i, j) f(partition j), so a master holding the results
// of any set of coded partitions whose rows of G have rank K recovers every
// f(partition j) by solving that system, however many of the others never
// answered.
//
// Schemes (the N x K generator):
//   none         N = K, the identity: every partition needed.
//   replication  row i is partition i mod K: N / K copies of each.
//   mds          every row mixes all K partitions with Gaussian coefficients:
//                any K rows have rank K (with probability 1), so any N - K
//                losses are survived, but building any coded partition needs
//                every partition.
//   rlnc         random linear network coding: every row mixes `degree`
//                partitions chosen uniformly at random, with Gaussian
//                coefficients. Building one needs `degree` partitions;
//                decodable with high probability rather than always (see
//                CoverageProbability and docs/CODED.md).
// Coefficients are Gaussian: with probability 1 a set of rows has rank K
// exactly when its supports admit a matching of rows to partitions covering
// every partition (StructurallyDecodable), which is what RLNC's
// decodability rests on.

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nereid {

enum class CodeScheme { kNone, kReplication, kMds, kRlnc };

absl::StatusOr<CodeScheme> ParseCodeScheme(absl::string_view name);
const char* CodeSchemeName(CodeScheme scheme);

struct CodeSpec {
  CodeScheme scheme = CodeScheme::kNone;
  int n = 0;       // coded partitions (workers)
  int k = 0;       // data partitions
  int degree = 0;  // rlnc: partitions each coded partition mixes
  uint64_t seed = 0;
};

class LinearCode {
 public:
  // InvalidArgument naming the option for k < 1, n < k, n > 4096, a
  // replication n not a multiple of k, an rlnc degree outside [1, k], or
  // none with n != k.
  static absl::StatusOr<LinearCode> Make(const CodeSpec& spec);

  const CodeSpec& spec() const { return spec_; }
  const Eigen::MatrixXd& generator() const { return generator_; }
  // The partitions coded partition `row` mixes (its nonzero columns), ascending.
  const std::vector<int>& support(int row) const { return support_[static_cast<size_t>(row)]; }

  // Whether the rows of G named by `rows` have rank K (numerically).
  bool Decodable(const std::vector<int>& rows) const;
  // Whether their supports admit a matching covering every partition (the
  // rank random coefficients give with probability 1).
  bool StructurallyDecodable(const std::vector<int>& rows) const;

  // Recovers f(partition j) for every j: `results` holds f(coded rows[r]) as
  // row r. Least squares over every row given (exact when the data are
  // consistent, and better conditioned than K rows alone).
  // FailedPrecondition naming the partitions no received row reaches, or
  // saying the rank, when the rows are not decodable.
  absl::StatusOr<Eigen::MatrixXd> Decode(const std::vector<int>& rows, const Eigen::MatrixXd& results) const;

  // Data partitions moved to build every coded partition when coded
  // partition i is built on the worker holding data partition i (i < K) and
  // the others on workers that hold none: the encoding traffic, in partitions.
  int64_t PartitionsMoved() const;

 private:
  CodeSpec spec_;
  Eigen::MatrixXd generator_;
  std::vector<std::vector<int>> support_;
};

// The probability that m coded partitions, each mixing `degree` of k
// partitions chosen uniformly at random, together reach every partition
// (inclusion-exclusion): a bound from above on RLNC's decodability from m
// rows, which also needs the matching.
double CoverageProbability(int k, int degree, int m);

}  // namespace nereid

#endif  // NEREID_CODED_LINEAR_CODE_H_
