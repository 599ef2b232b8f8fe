#include "ops/coded_round_stats.h"

namespace nereid {

CodedRoundStats& CodedRoundStats::Global() {
  static CodedRoundStats* stats = new CodedRoundStats();
  return *stats;
}

void CodedRoundStats::RecordRound(int present, int gone) {
  absl::MutexLock lock(&mu_);
  ++totals_.gathers;
  totals_.present += present;
  totals_.gone += gone;
}

void CodedRoundStats::RecordAnswers(int used, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  totals_.answers_used += used;
  totals_.wait += wait;
}

void CodedRoundStats::RecordDecode(absl::Duration decode) {
  absl::MutexLock lock(&mu_);
  totals_.decode += decode;
}

CodedRoundTotals CodedRoundStats::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

}  // namespace nereid
