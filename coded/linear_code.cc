#include "coded/linear_code.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nereid {
namespace {

constexpr int kMaxCodedPartitions = 4096;
constexpr double kRankThreshold = 1e-10;

Eigen::MatrixXd RowsOf(const Eigen::MatrixXd& g, const std::vector<int>& rows) {
  Eigen::MatrixXd out(static_cast<Eigen::Index>(rows.size()), g.cols());
  for (size_t r = 0; r < rows.size(); ++r) out.row(static_cast<Eigen::Index>(r)) = g.row(rows[r]);
  return out;
}

// Kuhn's augmenting path from coded row `row` over its support.
bool Augment(const std::vector<std::vector<int>>& support, int row, std::vector<int>& partition_row,
             std::vector<char>& visited) {
  for (int p : support[static_cast<size_t>(row)]) {
    if (visited[static_cast<size_t>(p)]) continue;
    visited[static_cast<size_t>(p)] = 1;
    int& holder = partition_row[static_cast<size_t>(p)];
    if (holder < 0 || Augment(support, holder, partition_row, visited)) {
      holder = row;
      return true;
    }
  }
  return false;
}

double LogChoose(int n, int r) {
  return std::lgamma(n + 1.0) - std::lgamma(r + 1.0) - std::lgamma(n - r + 1.0);
}

}  // namespace

absl::StatusOr<CodeScheme> ParseCodeScheme(absl::string_view name) {
  if (name == "none") return CodeScheme::kNone;
  if (name == "replication") return CodeScheme::kReplication;
  if (name == "mds") return CodeScheme::kMds;
  if (name == "rlnc") return CodeScheme::kRlnc;
  return absl::InvalidArgumentError(
      absl::StrCat("scheme '", name, "': expected rlnc, mds, replication or none"));
}

const char* CodeSchemeName(CodeScheme scheme) {
  switch (scheme) {
    case CodeScheme::kNone:
      return "none";
    case CodeScheme::kReplication:
      return "replication";
    case CodeScheme::kMds:
      return "mds";
    case CodeScheme::kRlnc:
      return "rlnc";
  }
  return "?";
}

absl::StatusOr<LinearCode> LinearCode::Make(const CodeSpec& spec) {
  const int n = spec.n, k = spec.k;
  if (k < 1) return absl::InvalidArgumentError(absl::StrCat("k=", k, ": at least 1 data partition"));
  if (n < k || n > kMaxCodedPartitions) {
    return absl::InvalidArgumentError(
        absl::StrCat("n=", n, ": between k (", k, ") and ", kMaxCodedPartitions, " coded partitions"));
  }
  if (spec.scheme == CodeScheme::kNone && n != k) {
    return absl::InvalidArgumentError(absl::StrCat("scheme none codes nothing: n (", n, ") must equal k (", k, ")"));
  }
  if (spec.scheme == CodeScheme::kReplication && n % k != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("replication: n (", n, ") must be a multiple of k (", k, "), the same copies of each"));
  }
  if (spec.scheme == CodeScheme::kRlnc && (spec.degree < 1 || spec.degree > k)) {
    return absl::InvalidArgumentError(absl::StrCat("rlnc: degree=", spec.degree, " must be in [1, k=", k, "]"));
  }
  LinearCode code;
  code.spec_ = spec;
  code.generator_ = Eigen::MatrixXd::Zero(n, k);
  code.support_.resize(static_cast<size_t>(n));
  std::mt19937_64 random(spec.seed);
  std::normal_distribution<double> gaussian;
  std::vector<int> partitions(static_cast<size_t>(k));
  std::iota(partitions.begin(), partitions.end(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<int>& support = code.support_[static_cast<size_t>(i)];
    switch (spec.scheme) {
      case CodeScheme::kNone:
      case CodeScheme::kReplication:
        support = {i % k};
        break;
      case CodeScheme::kMds:
        support = partitions;
        break;
      case CodeScheme::kRlnc:
        // A uniformly random `degree`-subset (a partial Fisher-Yates shuffle).
        for (int j = 0; j < spec.degree; ++j) {
          std::uniform_int_distribution<int> pick(j, k - 1);
          std::swap(partitions[static_cast<size_t>(j)], partitions[static_cast<size_t>(pick(random))]);
        }
        support.assign(partitions.begin(), partitions.begin() + spec.degree);
        std::sort(support.begin(), support.end());
        break;
    }
    const bool copies = spec.scheme == CodeScheme::kNone || spec.scheme == CodeScheme::kReplication;
    for (int p : support) code.generator_(i, p) = copies ? 1.0 : gaussian(random);
  }
  return code;
}

bool LinearCode::Decodable(const std::vector<int>& rows) const {
  if (static_cast<int>(rows.size()) < spec_.k) return false;
  Eigen::FullPivLU<Eigen::MatrixXd> lu(RowsOf(generator_, rows));
  lu.setThreshold(kRankThreshold);
  return lu.rank() == spec_.k;
}

bool LinearCode::StructurallyDecodable(const std::vector<int>& rows) const {
  std::vector<std::vector<int>> support;
  for (int r : rows) support.push_back(support_[static_cast<size_t>(r)]);
  std::vector<int> partition_row(static_cast<size_t>(spec_.k), -1);
  int matched = 0;
  for (int r = 0; r < static_cast<int>(support.size()) && matched < spec_.k; ++r) {
    std::vector<char> visited(static_cast<size_t>(spec_.k), 0);
    if (Augment(support, r, partition_row, visited)) ++matched;
  }
  return matched == spec_.k;
}

absl::StatusOr<Eigen::MatrixXd> LinearCode::Decode(const std::vector<int>& rows, const Eigen::MatrixXd& results) const {
  if (results.rows() != static_cast<Eigen::Index>(rows.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(results.rows(), " results for ", rows.size(), " coded partitions"));
  }
  for (int r : rows) {
    if (r < 0 || r >= spec_.n) return absl::InvalidArgumentError(absl::StrCat("coded partition ", r, " of ", spec_.n));
  }
  if (!Decodable(rows)) {
    std::vector<char> reached(static_cast<size_t>(spec_.k), 0);
    for (int r : rows) {
      for (int p : support_[static_cast<size_t>(r)]) reached[static_cast<size_t>(p)] = 1;
    }
    std::vector<int> missing;
    for (int p = 0; p < spec_.k; ++p) {
      if (!reached[static_cast<size_t>(p)]) missing.push_back(p);
    }
    if (!missing.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "not decodable: data partition", missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", "),
          missing.size() == 1 ? " is" : " are", " in none of the ", rows.size(), " coded partitions received"));
    }
    Eigen::FullPivLU<Eigen::MatrixXd> lu(RowsOf(generator_, rows));
    lu.setThreshold(kRankThreshold);
    return absl::FailedPreconditionError(absl::StrCat("not decodable: the ", rows.size(),
                                                      " coded partitions received have rank ", lu.rank(), " of ",
                                                      spec_.k));
  }
  return Eigen::MatrixXd(RowsOf(generator_, rows).colPivHouseholderQr().solve(results));
}

int64_t LinearCode::PartitionsMoved() const {
  int64_t moved = 0;
  for (int i = 0; i < spec_.n; ++i) {
    for (int p : support_[static_cast<size_t>(i)]) moved += (i < spec_.k && p == i) ? 0 : 1;
  }
  return moved;
}

double CoverageProbability(int k, int degree, int m) {
  if (k < 1 || degree < 1 || degree > k || m < 1) return 0;
  if (static_cast<int64_t>(m) * degree < k) return 0;  // too few partitions mixed in all
  // P(every partition reached) = sum_j (-1)^j C(k, j) (C(k-j, d) / C(k, d))^m.
  double p = 0;
  for (int j = 0; j <= k - degree; ++j) {
    const double log_term = LogChoose(k, j) + m * (LogChoose(k - j, degree) - LogChoose(k, degree));
    p += (j % 2 == 0 ? 1.0 : -1.0) * std::exp(log_term);
  }
  return std::clamp(p, 0.0, 1.0);
}

}  // namespace nereid
