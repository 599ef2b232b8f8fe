#ifndef NEREID_RUNTIME_LAUNCHER_SPLIT_THREADS_H_
#define NEREID_RUNTIME_LAUNCHER_SPLIT_THREADS_H_

// SplitThreads(T, N): how many threads each of N worker processes gets when
// the run may use T cores. Every worker gets at least one thread and the
// counts sum to max(T, N); when T is not a multiple of N the first T % N ranks
// get one more than the rest (T=7, N=3 -> {3, 2, 2}). N < 1 gives an empty
// vector; T < 1 is treated as 1.

#include <vector>

namespace nereid {
namespace launcher {

std::vector<int> SplitThreads(int total_threads, int workers);

}  // namespace launcher
}  // namespace nereid

#endif  // NEREID_RUNTIME_LAUNCHER_SPLIT_THREADS_H_
