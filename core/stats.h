#ifndef NEREID_CORE_STATS_H_
#define NEREID_CORE_STATS_H_

// Summary statistics of measurements (benchmark times, trace profiles).

#include <vector>

namespace nereid {

// The median: the middle value, or the mean of the two middle values for an
// even count; 0 for none. Takes the values by value (it reorders them).
double Median(std::vector<double> values);

}  // namespace nereid

#endif  // NEREID_CORE_STATS_H_
