#ifndef NEREID_BENCHMARKS_FMA_PEAK_H_
#define NEREID_BENCHMARKS_FMA_PEAK_H_

// The float32 fused multiply-add peak of this machine's cores, measured: a
// loop of independent FMAs (no loads) in the widest vector ISA the CPU has.
// It is the roof a compute-bound training step is measured against
// (`nereid bench peak`; bench/train_vs_pytorch.py reports each engine's
// matrix FLOPs per second as a share of it), since a data sheet's figure
// leaves out the clock this core really runs at.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace nereid {

struct FmaPeakOptions {
  int trials = 5;                  // the median is reported
  double seconds_per_trial = 0.2;  // per ISA, per trial
  int threads = 1;                 // cores measured at once (one loop each)
};

struct FmaPeakRow {
  std::string isa;                    // "avx512f", "avx2+fma", "sse2" (multiply then add)
  std::vector<double> trial_gflops;   // summed over the threads
  double median_gflops = 0;
};

struct FmaPeak {
  int threads = 1;
  std::vector<FmaPeakRow> rows;  // every ISA this CPU runs, widest first
  double best_gflops = 0;        // the highest median
  std::string best_isa;
};

// Fails on a non-x86 machine (no loop written for it) or bad options.
absl::StatusOr<FmaPeak> MeasureFmaPeak(const FmaPeakOptions& options);

// A table for people; JSON for scripts.
std::string FormatFmaPeak(const FmaPeak& peak);
std::string FmaPeakJson(const FmaPeak& peak);

}  // namespace nereid

#endif  // NEREID_BENCHMARKS_FMA_PEAK_H_
