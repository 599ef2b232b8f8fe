#include "runtime/coded_partitions.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace nereid {
namespace {

// Tags of the encoding transfers: beside every step's (ops/cpu/
// point_to_point_tag.h uses channels below 1023 and keys below 2^20); the
// resends of returning workers on the channel below.
uint32_t EncodingTag(uint32_t channel, int64_t transfer) {
  return (3u << 30) | (channel << 20) | static_cast<uint32_t>(transfer & 0xFFFFF);
}
constexpr uint32_t kEncodingChannel = 1023, kResendChannel = 1022;

struct Blocks {
  int64_t m = 0, d = 0, k = 0, row_block = 0, column_block = 0;
};

// Row block j of X, zero-padded to row_block rows.
std::vector<float> RowBlock(const data::Dataset& train, const Blocks& b, int64_t j) {
  std::vector<float> block(static_cast<size_t>(b.row_block * b.d), 0.0f);
  const int64_t first = j * b.row_block, last = std::min(b.m, first + b.row_block);
  if (last > first) {
    std::copy(train.images.begin() + first * b.d, train.images.begin() + last * b.d, block.begin());
  }
  return block;
}

// Column block j of X, zero-padded to column_block columns.
std::vector<float> ColumnBlock(const data::Dataset& train, const Blocks& b, int64_t j) {
  std::vector<float> block(static_cast<size_t>(b.m * b.column_block), 0.0f);
  const int64_t first = j * b.column_block, last = std::min(b.d, first + b.column_block);
  for (int64_t r = 0; r < b.m; ++r) {
    for (int64_t c = first; c < last; ++c) block[static_cast<size_t>(r * b.column_block + c - first)] = train.images[static_cast<size_t>(r * b.d + c)];
  }
  return block;
}

void Accumulate(std::vector<double>& sum, const std::vector<float>& block, double coefficient) {
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += coefficient * block[i];
}

absl::StatusOr<Tensor> ToTensor(const std::vector<double>& values, std::vector<int64_t> dims) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(DT_FLOAT, std::move(dims)));
  float* out = t.data<float>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<float>(values[i]);
  return t;
}

}  // namespace

namespace {

// The exchange that builds the partitions of the coded workers in
// `receivers` (ascending), `worker`'s part of it: for each receiver, for each
// partition its row mixes, the holder sends and the receiver accumulates.
absl::StatusOr<std::optional<CodedPartition>> Exchange(const data::Dataset& train, const LinearCode& code, int worker,
                                                       const std::vector<int>& receivers, uint32_t channel,
                                                       int first_rank, Communicator& comm, absl::Duration timeout) {
  Blocks b;
  b.m = train.num_examples;
  b.d = train.image_size();
  b.k = code.spec().k;
  b.row_block = (b.m + b.k - 1) / b.k;
  b.column_block = (b.d + b.k - 1) / b.k;
  if (b.m < b.k) {
    return absl::FailedPreconditionError(
        absl::StrCat("coded: ", b.m, " training examples cannot fill k=", b.k, " data partitions"));
  }
  const bool receiving = std::find(receivers.begin(), receivers.end(), worker) != receivers.end();
  std::vector<double> rows(receiving ? static_cast<size_t>(b.row_block * b.d) : 0, 0.0);
  std::vector<double> columns(receiving ? static_cast<size_t>(b.m * b.column_block) : 0, 0.0);
  CollectiveOptions options;
  options.timeout = timeout;
  int64_t transfer = 0;
  for (int i : receivers) {
    for (int j : code.support(i)) {
      const int holder = j;  // worker j holds data partition j
      const bool mine = i == worker;
      if (holder == i) {
        if (mine) {
          Accumulate(rows, RowBlock(train, b, j), code.generator()(i, j));
          Accumulate(columns, ColumnBlock(train, b, j), code.generator()(i, j));
        }
        continue;
      }
      const int64_t pair = transfer++;
      if (worker == holder) {
        options.tag = EncodingTag(channel, 2 * pair);
        RETURN_IF_ERROR(comm.Send(RowBlock(train, b, j), first_rank + i, options));
        options.tag = EncodingTag(channel, 2 * pair + 1);
        RETURN_IF_ERROR(comm.Send(ColumnBlock(train, b, j), first_rank + i, options));
      } else if (mine) {
        std::vector<float> row_block(static_cast<size_t>(b.row_block * b.d));
        std::vector<float> column_block(static_cast<size_t>(b.m * b.column_block));
        options.tag = EncodingTag(channel, 2 * pair);
        RETURN_IF_ERROR(comm.Recv(absl::MakeSpan(row_block), first_rank + holder, options));
        options.tag = EncodingTag(channel, 2 * pair + 1);
        RETURN_IF_ERROR(comm.Recv(absl::MakeSpan(column_block), first_rank + holder, options));
        Accumulate(rows, row_block, code.generator()(i, j));
        Accumulate(columns, column_block, code.generator()(i, j));
      }
    }
  }
  if (!receiving) return std::optional<CodedPartition>();
  CodedPartition partition;
  ASSIGN_OR_RETURN(partition.rows, ToTensor(rows, {b.row_block, b.d}));
  ASSIGN_OR_RETURN(partition.columns, ToTensor(columns, {b.m, b.column_block}));
  return std::optional<CodedPartition>(std::move(partition));
}

}  // namespace

absl::StatusOr<CodedPartition> BuildCodedPartition(const data::Dataset& train, const LinearCode& code, int worker,
                                                   int first_rank, Communicator& comm, absl::Duration timeout) {
  std::vector<int> everyone(static_cast<size_t>(code.spec().n));
  for (int i = 0; i < code.spec().n; ++i) everyone[static_cast<size_t>(i)] = i;
  ASSIGN_OR_RETURN(std::optional<CodedPartition> mine,
                   Exchange(train, code, worker, everyone, kEncodingChannel, first_rank, comm, timeout));
  if (!mine.has_value()) return absl::InternalError("coded: no partition built for this worker");
  return *std::move(mine);
}

absl::StatusOr<std::optional<CodedPartition>> ResendCodedPartitions(const data::Dataset& train, const LinearCode& code,
                                                                    int worker, const std::vector<int>& returning,
                                                                    int first_rank, Communicator& comm,
                                                                    absl::Duration timeout) {
  return Exchange(train, code, worker, returning, kResendChannel, first_rank, comm, timeout);
}

}  // namespace nereid
