#ifndef NEREID_SCHEDULERS_REACHABILITY_H_
#define NEREID_SCHEDULERS_REACHABILITY_H_

// Reachability: Naiad's could-result-in relation over a graph of locations
// nested in loop scopes. A location is an int id with a depth (the number of
// loops around it); an edge carries the PathSummary of moving along it. For
// every (source, target) pair Reachability holds the antichain of minimal
// summaries over all non-empty paths, computed by relaxing to a fixed point.
// Then (t1, loc1) could result in (t2, loc2) iff loc1 == loc2 and t1 <= t2, or
// some minimal summary s from loc1 to loc2 has ResultsIn(s, t1) <= t2. The
// minimal summaries suffice because a smaller summary gives a smaller result
// (path_summary.h). The graph must be well-formed: every edge's summary maps its
// source's depth to its target's, and every cycle strictly advances a loop
// counter it keeps (passes a Feedback), so nothing could result in an earlier
// time at its own location.
//
// Laws (reachability_test.cc tests each under its name):
//   SameLocationIsTheOrder     (t1, l) could result in (t2, l) iff t1 <= t2,
//                              whatever the cycles through l.
//   StraightLineIsTheOrder     along identity edges a -> b -> c, (t1, a) could
//                              result in (t2, c) iff t1 <= t2, and nothing flows
//                              back from c to a.
//   FeedbackAdvancesTheStep    in the training loop Input -> Forward -> Update ->
//                              Feedback -(+1)-> Forward, (e; s) at Feedback could
//                              result in (e; s+1) at Forward but not (e; s).
//   NestedLoopsRoundsAndSteps  for a gossip loop inside a step (Forward -Enter->
//                              Gossip -> Mix -(+1 round)-> Gossip, Mix -Leave->
//                              Update): round k of step s at Mix could result in
//                              round k+1 of step s and round 0 of step s+1 at
//                              Gossip, never in an earlier or the same round of
//                              step s, nor in step s-1; it holds step s at Update
//                              incomplete; and the minimal summaries from Mix back
//                              to Mix are exactly {+1 round, next step's round 0}.
//   CouldResultInIsTransitive  and agrees with enumerating every path (up to a
//                              length that covers the minimal ones).
//   CycleWithoutFeedbackIsRefused
//                              Build fails (InvalidArgument) naming the
//                              locations of a cycle whose summary does not
//                              advance, e.g. a -> b -> a with identity edges, or
//                              leaving a loop and entering it again at round 0.
//   EdgeDepthMismatchIsRefused Build fails naming the edge whose summary does not
//                              fit its endpoints' depths (or an unknown location).
//   RelaxationIsBounded        the fixed-point iteration stops after
//                              max_relaxations compositions with ResourceExhausted.

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "schedulers/antichain.h"
#include "schedulers/path_summary.h"
#include "schedulers/scoped_timestamp.h"

namespace nereid {

class Reachability {
 public:
  bool HasLocation(int location) const { return index_.count(location) > 0; }
  // The location's depth, or -1 when it is unknown.
  int Depth(int location) const;
  // Every location id, ascending.
  const std::vector<int>& locations() const { return ids_; }

  // The minimal summaries of the non-empty paths from source to target (empty
  // when there is none or a location is unknown).
  const Antichain<PathSummary>& Summaries(int source, int target) const;

  // False for unknown locations.
  bool CouldResultIn(const ScopedTimestamp& t1, int loc1, const ScopedTimestamp& t2, int loc2) const;

 private:
  friend class ReachabilityBuilder;

  int Index(int location) const;  // -1 when unknown

  std::map<int, int> index_;                       // location id -> dense index
  std::vector<int> ids_;                           // dense index -> location id
  std::vector<int> depths_;                        // by dense index
  std::vector<Antichain<PathSummary>> summaries_;  // [source * n + target]
};

class ReachabilityBuilder {
 public:
  // A bound on the relaxation's work (compositions tried); graphs of a few
  // hundred locations with nested loops need far fewer.
  static constexpr int64_t kDefaultMaxRelaxations = 10'000'000;

  // Errors are reported by Build, so a graph can be declared without checks.
  void AddLocation(int id, int depth);
  void AddEdge(int from, int to, PathSummary summary);

  // InvalidArgument for a duplicate location, a negative depth, an edge with an
  // unknown endpoint or a summary that does not map its source's depth to its
  // target's (naming the edge), or a cycle that does not advance (naming its
  // locations); ResourceExhausted when the fixed point needs more than
  // max_relaxations compositions.
  absl::StatusOr<Reachability> Build(int64_t max_relaxations = kDefaultMaxRelaxations) const;

 private:
  struct Edge {
    int from;
    int to;
    PathSummary summary;
  };
  std::vector<std::pair<int, int>> locations_;  // (id, depth) in declaration order
  std::vector<Edge> edges_;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_REACHABILITY_H_
