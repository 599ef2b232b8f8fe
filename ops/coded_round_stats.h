#ifndef NEREID_OPS_CODED_ROUND_STATS_H_
#define NEREID_OPS_CODED_ROUND_STATS_H_

// What the master's CodedGather nodes saw, for the run's metrics: rounds,
// workers present and gone, how many answers each decode used, the time from
// posting the receives to a decodable set, and the decode time. Process-wide
// (one training run per process); thread-safe.

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace nereid {

struct CodedRoundTotals {
  int64_t gathers = 0;          // CodedGather runs (two per round in a linear model's step)
  int64_t present = 0;          // workers present, summed over gathers
  int64_t gone = 0;             // workers gone, summed over gathers
  int64_t answers_used = 0;     // results each decode used, summed
  absl::Duration wait;          // receives posted -> decodable, summed
  absl::Duration decode;        // solving, summed
};

class CodedRoundStats {
 public:
  static CodedRoundStats& Global();

  void RecordRound(int present, int gone);
  void RecordAnswers(int used, absl::Duration wait);
  void RecordDecode(absl::Duration decode);
  CodedRoundTotals totals() const;

 private:
  mutable absl::Mutex mu_;
  CodedRoundTotals totals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nereid

#endif  // NEREID_OPS_CODED_ROUND_STATS_H_
