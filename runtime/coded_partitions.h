#ifndef NEREID_RUNTIME_CODED_PARTITIONS_H_
#define NEREID_RUNTIME_CODED_PARTITIONS_H_

// The encoding phase of coded training (passes/coded_pass.cc): before the
// first step, coded worker i builds its coded partition
//   rows    = sum_j G(i, j) X_j       [ceil(m / k), d]  (row block j of X)
//   columns = sum_j G(i, j) X^(j)     [m, ceil(d / k)]  (column block j of X)
// over the partitions j its row of the generator mixes. Data partition j is
// held by worker j (j < k): a worker uses its own and receives every other
// one it needs from its holder, over the communicator, so the bytes moved are
// the code's encoding cost as the traffic counters measure it (an MDS code
// moves nearly every partition to every worker; RLNC of degree d, d - 1 per
// worker). Each process reads the dataset file, but a worker uses only its
// own partition and what it received; the master uses only the labels.
//
// Transfers run in one global order (for each receiving worker, for each
// partition it mixes), which every worker follows, so none can deadlock.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "coded/linear_code.h"
#include "core/tensor.h"
#include "data/dataset.h"

namespace nereid {

struct CodedPartition {
  Tensor rows;     // fed as "coded_rows"
  Tensor columns;  // fed as "coded_columns"
};

// Coded worker `worker` (rank first_rank + worker)'s partition. `train` is
// the whole training set (rows: examples, features: an example's floats).
absl::StatusOr<CodedPartition> BuildCodedPartition(const data::Dataset& train, const LinearCode& code, int worker,
                                                   int first_rank, Communicator& comm, absl::Duration timeout);

// The same exchange for the workers in `returning` only (ascending): a
// worker that left lost its coded partition and is sent it again by the
// holders when it returns. Every coded worker calls it with the same list
// (holders send, the returning receive, the rest do nothing); `worker`'s
// rebuilt partition if it is returning, else nullopt.
absl::StatusOr<std::optional<CodedPartition>> ResendCodedPartitions(const data::Dataset& train, const LinearCode& code,
                                                                    int worker, const std::vector<int>& returning,
                                                                    int first_rank, Communicator& comm,
                                                                    absl::Duration timeout);

}  // namespace nereid

#endif  // NEREID_RUNTIME_CODED_PARTITIONS_H_
