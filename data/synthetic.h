#ifndef NEREID_DATA_SYNTHETIC_H_
#define NEREID_DATA_SYNTHETIC_H_

// A deterministic, learnable synthetic classification dataset. Each class k
// has a fixed prototype image whose pixels are drawn N(0, 1); example i has
// label i % num_classes and image prototype[label] + N(0, kSyntheticNoiseStddev^2)
// noise per pixel. The classes are linearly separable with high probability,
// so a small model converges quickly on them.
//
// Everything is a function of the arguments only (std::mt19937_64 and a
// hand-written Box-Muller, no implementation-defined distributions), so the
// same arguments give bit-identical data on every platform. The prototypes
// depend on (seed, c, h, w, num_classes) only; `draw` selects an independent
// set of noisy examples around the same prototypes: use draw 0 for a training
// split and draw 1 for a test split that the training split generalises to.
//
// Non-positive arguments give an empty dataset (num_examples 0) that fails
// Dataset::Validate(); the caller is expected to bound the size
// (LoadNamedDataset does).

#include <cstdint>

#include "data/dataset.h"

namespace nereid {
namespace data {

inline constexpr float kSyntheticNoiseStddev = 0.5f;

Dataset MakeSynthetic(int64_t num_examples, int64_t c, int64_t h, int64_t w, int num_classes,
                      uint64_t seed, uint64_t draw = 0);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_SYNTHETIC_H_
