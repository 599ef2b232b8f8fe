#include "benchmarks/fma_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/json.h"

namespace nereid {
namespace {

#if defined(__x86_64__)

// Enough independent accumulators to cover the FMA latency (4-5 cycles) on
// two pipes; each is a chain the compiler cannot shorten.
constexpr int kChains = 12;
constexpr int64_t kItersPerCheck = 1 << 16;

// Registers of 16, 8 and 4 floats (GCC's vector extension): one loop for
// every ISA, whose instructions the caller's target attribute picks.
typedef float Floats16 __attribute__((vector_size(64)));
typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats4 __attribute__((vector_size(16)));

// Runs until `deadline` and returns the FLOPs done (2 per lane per step: a
// fused multiply-add, or a multiply and an add where the ISA has no FMA);
// `sink` consumes the result so the loop is not removed. Always inlined, so
// it compiles with its caller's ISA (checked: 12 zmm FMAs, 12 ymm FMAs, 12
// SSE multiplies in the three callers).
template <typename V>
__attribute__((always_inline)) inline double ChainLoop(float a_value, float b_value,
                                                        std::chrono::steady_clock::time_point deadline,
                                                        float* sink) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = V{} + static_cast<float>(i);
  const V a = V{} + a_value, b = V{} + b_value;
  int64_t iters = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int64_t it = 0; it < kItersPerCheck; ++it) {
      for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * a + b;  // contracted to an FMA where there is one
    }
    iters += kItersPerCheck;
  }
  float sum = 0;
  for (int i = 0; i < kChains; ++i) {
    for (int lane = 0; lane < kLanes; ++lane) sum += acc[i][lane];
  }
  *sink = sum;
  return 2.0 * kLanes * kChains * static_cast<double>(iters);
}

__attribute__((target("avx512f"))) double Avx512Loop(float a, float b, std::chrono::steady_clock::time_point deadline,
                                                     float* sink) {
  return ChainLoop<Floats16>(a, b, deadline, sink);
}
__attribute__((target("avx2,fma"))) double Avx2Loop(float a, float b, std::chrono::steady_clock::time_point deadline,
                                                    float* sink) {
  return ChainLoop<Floats8>(a, b, deadline, sink);
}
double Sse2Loop(float a, float b, std::chrono::steady_clock::time_point deadline, float* sink) {
  return ChainLoop<Floats4>(a, b, deadline, sink);
}

using Loop = double (*)(float, float, std::chrono::steady_clock::time_point, float*);

struct Isa {
  const char* name;
  Loop loop;
};

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  if (__builtin_cpu_supports("avx512f")) isas.push_back({"avx512f", Avx512Loop});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isas.push_back({"avx2+fma", Avx2Loop});
  isas.push_back({"sse2", Sse2Loop});
  return isas;
}

// One trial: every thread runs `loop` for the same span; FLOPs summed over
// them per second of the span.
double Trial(Loop loop, int threads, double seconds) {
  // Values that keep the chains finite and that the compiler cannot fold.
  static volatile float a_value = 0.9999999f, b_value = 1e-7f;
  std::vector<double> flops(threads, 0);
  std::vector<float> sinks(threads, 0);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    workers.emplace_back([&, t] { flops[t] = loop(a_value, b_value, deadline, &sinks[t]); });
  }
  flops[0] = loop(a_value, b_value, deadline, &sinks[0]);
  for (std::thread& w : workers) w.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double total = 0;
  for (double f : flops) total += f;
  return total / elapsed / 1e9;
}

#endif  // __x86_64__

}  // namespace

absl::StatusOr<FmaPeak> MeasureFmaPeak(const FmaPeakOptions& options) {
  if (options.trials < 1 || options.threads < 1 || !(options.seconds_per_trial > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("FMA peak: trials (", options.trials, ") and threads (",
                                                   options.threads, ") must be >= 1 and seconds per trial (",
                                                   options.seconds_per_trial, ") > 0"));
  }
#if defined(__x86_64__)
  FmaPeak peak;
  peak.threads = options.threads;
  for (const Isa& isa : SupportedIsas()) {
    FmaPeakRow row;
    row.isa = isa.name;
    for (int t = 0; t < options.trials; ++t) {
      row.trial_gflops.push_back(Trial(isa.loop, options.threads, options.seconds_per_trial));
    }
    std::vector<double> sorted = row.trial_gflops;
    std::sort(sorted.begin(), sorted.end());
    row.median_gflops = sorted[sorted.size() / 2];
    if (row.median_gflops > peak.best_gflops) {
      peak.best_gflops = row.median_gflops;
      peak.best_isa = row.isa;
    }
    peak.rows.push_back(std::move(row));
  }
  return peak;
#else
  return absl::UnimplementedError("FMA peak: measured on x86-64 only (no loop written for this CPU)");
#endif
}

std::string FormatFmaPeak(const FmaPeak& peak) {
  std::string out = absl::StrFormat("float32 FMA peak, %d thread%s at once (median of %d trials):\n", peak.threads,
                                    peak.threads == 1 ? "" : "s",
                                    peak.rows.empty() ? 0 : static_cast<int>(peak.rows[0].trial_gflops.size()));
  for (const FmaPeakRow& row : peak.rows) {
    const auto [lo, hi] = std::minmax_element(row.trial_gflops.begin(), row.trial_gflops.end());
    absl::StrAppendFormat(&out, "  %-9s %8.1f GFLOP/s (%.1f-%.1f)%s\n", row.isa, row.median_gflops, *lo, *hi,
                          row.isa == peak.best_isa ? "  <- peak" : "");
  }
  return out;
}

std::string FmaPeakJson(const FmaPeak& peak) {
  Json doc;
  doc["threads"] = peak.threads;
  doc["peak_gflops"] = peak.best_gflops;
  doc["peak_isa"] = peak.best_isa;
  Json rows = Json::array();
  for (const FmaPeakRow& row : peak.rows) {
    rows.push_back({{"isa", row.isa}, {"median_gflops", row.median_gflops}, {"trial_gflops", row.trial_gflops}});
  }
  doc["isas"] = rows;
  return JsonLine(doc);
}

}  // namespace nereid
