#ifndef NEREID_CODED_DEPARTURE_PLAN_H_
#define NEREID_CODED_DEPARTURE_PLAN_H_

// Which coded workers are gone in which round of coded training: the fault
// plan of `coded(departures=...)`. Every rank evaluates it alike (the master
// to know whom not to wait for, a worker to know when to stay silent), so it
// is a pure function of the text, the seed, the round and the worker.
//
//   ""                 nobody leaves
//   "random:P"         in every round each worker is gone with probability P
//                      (a hash of seed, round and worker: the same on every
//                      rank, different from round to round)
//   "R:W+W;R:W"        scripted: in round R (a training step, from 0) the
//                      workers W (0-based coded worker numbers) are gone;
//                      rounds not listed have everyone
//   "R-S:W+W"          the same workers gone in rounds R to S inclusive
//
// A worker gone in a round returns in the next one it is not listed in.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nereid {

class DeparturePlan {
 public:
  // InvalidArgument naming the text for a malformed plan, P outside [0, 1),
  // a worker outside [0, workers) or a round below 0.
  static absl::StatusOr<DeparturePlan> Parse(absl::string_view text, int workers, uint64_t seed);

  bool Gone(int64_t round, int worker) const;
  // The workers gone in `round`, ascending.
  std::vector<int> GoneIn(int64_t round) const;
  bool empty() const { return probability_ == 0 && scripted_.empty(); }

 private:
  int workers_ = 0;
  uint64_t seed_ = 0;
  double probability_ = 0;
  // Scripted: [first round, last round] -> the workers gone.
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<int>>> scripted_;
};

}  // namespace nereid

#endif  // NEREID_CODED_DEPARTURE_PLAN_H_
