#ifndef NEREID_TESTS_FUZZ_MUTATOR_H_
#define NEREID_TESTS_FUZZ_MUTATOR_H_

// The random mutator the fuzz tests share: byte flips, deleted, duplicated
// and moved ranges, extreme numbers, and fragments from a dictionary that
// steers mutations toward a format's structure.

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace nereid {
namespace testing {

// NEREID_FUZZ_ITERATIONS_<TARGET> (the target's name in capitals), else
// NEREID_FUZZ_ITERATIONS, else `fallback` (the suite's short slice).
inline int FuzzIterations(int fallback, std::string target = "") {
  for (char& c : target) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string own = "NEREID_FUZZ_ITERATIONS_" + target;
  const char* env = target.empty() ? nullptr : std::getenv(own.c_str());
  if (env == nullptr) env = std::getenv("NEREID_FUZZ_ITERATIONS");
  return env != nullptr ? std::max(1, std::atoi(env)) : fallback;
}

inline std::string Mutate(std::string s, std::mt19937_64& rng, const std::vector<std::string>& dictionary) {
  const int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    const size_t n = s.size();
    const size_t pos = n == 0 ? 0 : rng() % n;
    const size_t len = n == 0 ? 0 : 1 + rng() % std::min<size_t>(64, n - pos);
    switch (rng() % 7) {
      case 0:  // flip a byte
        if (n > 0) s[pos] = static_cast<char>(rng());
        break;
      case 1:  // delete a range
        s.erase(pos, len);
        break;
      case 2:  // duplicate a range
        s.insert(pos, s.substr(pos, len));
        break;
      case 3:  // insert a dictionary fragment
        if (!dictionary.empty()) s.insert(pos, dictionary[rng() % dictionary.size()]);
        break;
      case 4: {  // replace a number with an extreme one
        const size_t digit = s.find_first_of("0123456789", pos);
        if (digit != std::string::npos) s.replace(digit, 1, rng() % 2 ? "99999999999" : "-2");
        break;
      }
      case 5: {  // move a line elsewhere
        const size_t end = s.find('\n', pos);
        if (end == std::string::npos) break;
        const std::string line = s.substr(pos, end - pos + 1);
        s.erase(pos, line.size());
        s.insert(s.empty() ? 0 : rng() % s.size(), line);
        break;
      }
      case 6:  // overwrite 4 bytes with an extreme 32-bit little-endian value
        if (n >= 4) {
          static const unsigned kExtremes[] = {0xFFFFFFFFu, 0x7FFFFFFFu, 0x80000000u, 0u, 0x00100000u};
          const unsigned v = kExtremes[rng() % 5];
          const size_t at = rng() % (n - 3);
          for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
        }
        break;
    }
  }
  return s;
}

}  // namespace testing
}  // namespace nereid

#endif  // NEREID_TESTS_FUZZ_MUTATOR_H_
