#ifndef NEREID_BENCHMARKS_AGGREGATION_BENCH_H_
#define NEREID_BENCHMARKS_AGGREGATION_BENCH_H_

// `nereid bench compress`: the time to aggregate one step's gradients of a
// model across the ranks, uncompressed and with each compressor, with no
// training compute around it: GradiVeQ's "gradient aggregation time". A plan
// is the model's collectives in issue order (dense allreduce buckets and
// compressed gradients, as the compress pass made them); each rank feeds them
// random gradients (its own seed) and runs them back to back. Plans alternate
// in rounds so the machine's drift hits all alike. Figures: the median over
// iterations of the slowest rank's time, and of its codec time (encode and
// decode: its run less the time inside collectives).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "graph/ir.h"

namespace nereid {

struct AggregationItem {
  std::string name;
  // A compressed node's gradients' dims (one collective per round for all);
  // a dense bucket: {{elements}}.
  std::vector<std::vector<int64_t>> gradients;
  std::string method;         // empty: a dense allreduce bucket
  std::string options;        // the codec's options, "k=v;..."
  std::string wire = "float32";  // a dense bucket's wire format (compress(method=fp16|bf16))
  int64_t layer = 0;
};

struct AggregationPlan {
  std::string label;
  std::vector<AggregationItem> items;  // issue order
};

// The plan's collectives (AllReduce and CompressedAllReduce nodes) in bucket order.
absl::StatusOr<AggregationPlan> AggregationPlanOf(const Graph& planned, const std::string& label);

struct AggregationBenchOptions {
  int iterations = 10;    // timed steps per plan and round
  int rounds = 3;
  int warmup_steps = 25;  // untimed first steps (GradiVeQ's basis, PowerSGD's warm start)
};

struct AggregationRow {
  std::string label;
  int64_t gradient_bytes = 0;  // float32 bytes of every gradient
  double bytes_sent = 0;       // per rank per step, measured by the communicator (rank 0)
  double seconds = 0;          // median slowest-rank aggregation time
  double codec_seconds = 0;    // median slowest-rank encode + decode time
  int iterations = 0;
};

// Every rank calls this with the same plans and options; all get the rows.
absl::StatusOr<std::vector<AggregationRow>> RunAggregationBench(Communicator& comm,
                                                                const std::vector<AggregationPlan>& plans,
                                                                const AggregationBenchOptions& options);

// Rows against the first (the uncompressed baseline).
std::string FormatAggregationTable(const std::vector<AggregationRow>& rows, int world);
std::string AggregationJson(const std::vector<AggregationRow>& rows, int world);

}  // namespace nereid

#endif  // NEREID_BENCHMARKS_AGGREGATION_BENCH_H_
