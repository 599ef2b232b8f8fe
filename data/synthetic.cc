#include "data/synthetic.h"

#include <cmath>
#include <random>
#include <vector>

namespace nereid {
namespace data {
namespace {

// Standard normal deviates from a 64-bit Mersenne Twister (Box-Muller, both
// outputs used), independent of the standard library's distributions.
class Gaussian {
 public:
  explicit Gaussian(std::seed_seq& seq) : rng_(seq) {}
  float Next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
    const double u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * M_PI * u2;
    spare_ = static_cast<float>(r * std::sin(theta));
    have_spare_ = true;
    return static_cast<float>(r * std::cos(theta));
  }

 private:
  double Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::mt19937_64 rng_;
  float spare_ = 0;
  bool have_spare_ = false;
};

uint32_t Lo(uint64_t x) { return static_cast<uint32_t>(x); }
uint32_t Hi(uint64_t x) { return static_cast<uint32_t>(x >> 32); }

}  // namespace

Dataset MakeSynthetic(int64_t num_examples, int64_t c, int64_t h, int64_t w, int num_classes,
                      uint64_t seed, uint64_t draw) {
  Dataset ds;
  ds.name = "synthetic";
  if (num_examples <= 0 || c <= 0 || h <= 0 || w <= 0 || num_classes <= 0) return ds;
  ds.num_examples = num_examples;
  ds.channels = c;
  ds.height = h;
  ds.width = w;
  ds.num_classes = num_classes;
  const int64_t size = ds.image_size();

  // Stream tags keep the prototype and noise streams apart.
  std::seed_seq proto_seq{Lo(seed), Hi(seed), 0x70726f74u /* "prot" */};
  Gaussian proto_rng(proto_seq);
  std::vector<float> prototypes(static_cast<size_t>(num_classes * size));
  for (float& p : prototypes) p = proto_rng.Next();

  std::seed_seq noise_seq{Lo(seed), Hi(seed), Lo(draw), Hi(draw), 0x6e6f6973u /* "nois" */};
  Gaussian noise_rng(noise_seq);
  ds.images.resize(static_cast<size_t>(num_examples * size));
  ds.labels.resize(static_cast<size_t>(num_examples));
  for (int64_t i = 0; i < num_examples; ++i) {
    const int32_t label = static_cast<int32_t>(i % num_classes);
    ds.labels[i] = label;
    const float* proto = prototypes.data() + label * size;
    float* out = ds.images.data() + i * size;
    for (int64_t j = 0; j < size; ++j) out[j] = proto[j] + kSyntheticNoiseStddev * noise_rng.Next();
  }
  return ds;
}

}  // namespace data
}  // namespace nereid
