#ifndef NEREID_SCHEDULERS_ANTICHAIN_H_
#define NEREID_SCHEDULERS_ANTICHAIN_H_

// Antichain<T>: a set of mutually incomparable elements of a partial order,
// kept minimal. It stands for everything at or above one of its elements (its
// upward closure): a frontier ("every time that could still arrive is >= one of
// these") or the minimal path summaries between two locations. Insert(x) adds x
// unless some element is already <= x, and drops the elements x is <= to.
// T is ordered by a free function LessEqual(a, b), found by argument-dependent
// lookup, or else by operator<=.
//
// Laws (antichain_test.cc tests each under its name):
//   ElementsAreIncomparable  no element is <= another (no duplicates either).
//   CoversWhatWasInserted    LessEqual(x) iff some element ever inserted is
//                            <= x: dropping dominated elements loses nothing.
//   InsertReportsChange      Insert(x) returns true iff LessEqual(x) was false
//                            before; afterwards x is an element.
// Operations are linear in the number of elements, which stays small here.

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace nereid {
namespace antichain_internal {

template <typename T, typename = void>
struct HasLessEqual : std::false_type {};
template <typename T>
struct HasLessEqual<T, std::void_t<decltype(LessEqual(std::declval<const T&>(), std::declval<const T&>()))>>
    : std::true_type {};

template <typename T>
bool Le(const T& a, const T& b) {
  if constexpr (HasLessEqual<T>::value) {
    return LessEqual(a, b);
  } else {
    return a <= b;
  }
}

}  // namespace antichain_internal

template <typename T>
class Antichain {
 public:
  Antichain() = default;

  // Returns whether the antichain changed (InsertReportsChange).
  bool Insert(T x) {
    if (LessEqual(x)) return false;
    std::vector<T> kept;
    kept.reserve(elements_.size() + 1);
    for (T& e : elements_) {
      if (!antichain_internal::Le(x, e)) kept.push_back(std::move(e));
    }
    kept.push_back(std::move(x));
    elements_ = std::move(kept);
    return true;
  }

  // Some element is <= x.
  bool LessEqual(const T& x) const {
    for (const T& e : elements_) {
      if (antichain_internal::Le(e, x)) return true;
    }
    return false;
  }

  const std::vector<T>& elements() const { return elements_; }
  bool empty() const { return elements_.empty(); }
  size_t size() const { return elements_.size(); }

  // Equal as sets (element order is insertion order and carries no meaning).
  friend bool operator==(const Antichain& a, const Antichain& b) {
    if (a.elements_.size() != b.elements_.size()) return false;
    for (const T& x : a.elements_) {
      bool found = false;
      for (const T& y : b.elements_) found = found || x == y;
      if (!found) return false;
    }
    return true;
  }
  friend bool operator!=(const Antichain& a, const Antichain& b) { return !(a == b); }

 private:
  std::vector<T> elements_;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_ANTICHAIN_H_
