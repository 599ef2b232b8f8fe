#include "schedulers/reachability.h"

#include <deque>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nereid {
namespace {

// A summary with one path that has it, for naming a bad cycle.
struct Witnessed {
  PathSummary summary;
  std::vector<int> path;  // dense indices, source first, target last
};

bool LessEqual(const Witnessed& a, const Witnessed& b) { return nereid::LessEqual(a.summary, b.summary); }

std::string LocationName(int id) { return absl::StrCat("location ", id); }

}  // namespace

int Reachability::Index(int location) const {
  auto it = index_.find(location);
  return it == index_.end() ? -1 : it->second;
}

int Reachability::Depth(int location) const {
  const int i = Index(location);
  return i < 0 ? -1 : depths_[i];
}

const Antichain<PathSummary>& Reachability::Summaries(int source, int target) const {
  static const auto* const kNone = new Antichain<PathSummary>();
  const int i = Index(source);
  const int j = Index(target);
  if (i < 0 || j < 0) return *kNone;
  return summaries_[static_cast<size_t>(i) * ids_.size() + j];
}

bool Reachability::CouldResultIn(const ScopedTimestamp& t1, int loc1, const ScopedTimestamp& t2, int loc2) const {
  const int i = Index(loc1);
  const int j = Index(loc2);
  if (i < 0 || j < 0) return false;
  if (i == j && LessEqual(t1, t2)) return true;
  for (const PathSummary& s : summaries_[static_cast<size_t>(i) * ids_.size() + j].elements()) {
    std::optional<ScopedTimestamp> r = s.ResultsIn(t1);
    if (r && LessEqual(*r, t2)) return true;
  }
  return false;
}

void ReachabilityBuilder::AddLocation(int id, int depth) { locations_.emplace_back(id, depth); }

void ReachabilityBuilder::AddEdge(int from, int to, PathSummary summary) {
  edges_.push_back(Edge{from, to, std::move(summary)});
}

absl::StatusOr<Reachability> ReachabilityBuilder::Build(int64_t max_relaxations) const {
  Reachability r;
  for (const auto& [id, depth] : locations_) {
    if (depth < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reachability: ", LocationName(id), " has depth ", depth, "; depths are >= 0"));
    }
    if (!r.index_.emplace(id, 0).second) {
      return absl::InvalidArgumentError(absl::StrCat("reachability: ", LocationName(id), " declared twice"));
    }
  }
  // Dense indices in ascending id order, so errors and results do not depend on
  // declaration order.
  for (auto& [id, index] : r.index_) {
    index = static_cast<int>(r.ids_.size());
    r.ids_.push_back(id);
  }
  r.depths_.resize(r.ids_.size());
  for (const auto& [id, depth] : locations_) r.depths_[r.index_[id]] = depth;
  const size_t n = r.ids_.size();

  struct Out {
    int to;
    const PathSummary* summary;
  };
  std::vector<std::vector<Out>> out(n);
  for (const Edge& e : edges_) {
    const std::string name = absl::StrCat("reachability: edge ", LocationName(e.from), " -> ", LocationName(e.to));
    const int from = r.Index(e.from);
    const int to = r.Index(e.to);
    if (from < 0 || to < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": unknown location ", from < 0 ? e.from : e.to, " (declare it with AddLocation)"));
    }
    if (e.summary.input_depth() != r.depths_[from] || e.summary.output_depth() != r.depths_[to]) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": summary ", e.summary.ToString(), " maps depth ", e.summary.input_depth(), " to ",
          e.summary.output_depth(), ", but the locations have depths ", r.depths_[from], " and ", r.depths_[to]));
    }
    out[from].push_back(Out{to, &e.summary});
  }

  // Relax to a fixed point: every summary newly minimal for (source, target) is
  // extended by every edge out of target. It terminates because summaries of one
  // shape are vectors of naturals, each insertion is not above any earlier one,
  // and such sequences are finite (Dickson's lemma); the cap bounds the work.
  std::vector<Antichain<Witnessed>> reach(n * n);
  struct Item {
    int source;
    int target;
    Witnessed w;
  };
  std::deque<Item> work;
  for (size_t from = 0; from < n; ++from) {
    for (const Out& o : out[from]) {
      Witnessed w{*o.summary, {static_cast<int>(from), o.to}};
      if (reach[from * n + o.to].Insert(w)) work.push_back(Item{static_cast<int>(from), o.to, std::move(w)});
    }
  }
  int64_t relaxations = 0;
  while (!work.empty()) {
    Item item = std::move(work.front());
    work.pop_front();
    bool still_minimal = false;  // a later insertion may have dropped it; its replacement is queued
    for (const Witnessed& e : reach[item.source * n + item.target].elements()) {
      still_minimal = still_minimal || e.summary == item.w.summary;
    }
    if (!still_minimal) continue;
    for (const Out& o : out[item.target]) {
      if (++relaxations > max_relaxations) {
        return absl::ResourceExhaustedError(
            absl::StrCat("reachability: no fixed point after ", max_relaxations,
                         " relaxations (compositions of path summaries); the graph has ", n, " locations and ",
                         edges_.size(), " edges. Raise max_relaxations if the graph is that large"));
      }
      // nullopt: a counter sum overflows int64, so no representable time results.
      std::optional<PathSummary> composed = item.w.summary.FollowedBy(*o.summary);
      if (!composed) continue;
      Witnessed w{std::move(*composed), item.w.path};
      w.path.push_back(o.to);
      if (reach[item.source * n + o.to].Insert(w)) work.push_back(Item{item.source, o.to, std::move(w)});
    }
  }

  // A cycle that does not advance: some minimal summary from a location back to
  // itself is one (a non-advancing cycle is >= a minimal one of its shape, which
  // then does not advance either).
  for (size_t i = 0; i < n; ++i) {
    for (const Witnessed& w : reach[i * n + i].elements()) {
      if (w.summary.Advances()) continue;
      std::vector<std::string> names;
      for (int p : w.path) names.push_back(LocationName(r.ids_[p]));
      return absl::InvalidArgumentError(
          absl::StrCat("reachability: cycle ", absl::StrJoin(names, " -> "), " has summary ", w.summary.ToString(),
                       ", which advances no loop counter it keeps; every cycle must pass a Feedback"));
    }
  }

  r.summaries_.resize(n * n);
  for (size_t k = 0; k < n * n; ++k) {
    for (const Witnessed& w : reach[k].elements()) r.summaries_[k].Insert(w.summary);
  }
  return r;
}

}  // namespace nereid
