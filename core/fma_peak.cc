#include "core/fma_peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/json.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace nereid {
namespace {

#if defined(__x86_64__)

// Enough independent accumulators to cover the FMA latency (4-5 cycles) on
// two pipes; each is a chain the compiler cannot shorten.
constexpr int kChains = 12;
constexpr int64_t kItersPerCheck = 1 << 16;

// Each loop runs until `deadline` and returns the FLOPs it did; `sink`
// consumes the result so the loop is not removed.
__attribute__((target("avx512f"))) double Avx512Loop(float a_value, float b_value,
                                                     std::chrono::steady_clock::time_point deadline, float* sink) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(a_value), b = _mm512_set1_ps(b_value);
  int64_t iters = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int64_t it = 0; it < kItersPerCheck; ++it) {
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    }
    iters += kItersPerCheck;
  }
  // A store, not _mm512_reduce_add_ps: GCC 12 warns inside that intrinsic.
  alignas(64) float lanes[16];
  float sum = 0;
  for (int i = 0; i < kChains; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (float x : lanes) sum += x;
  }
  *sink = sum;
  return 2.0 * 16 * kChains * static_cast<double>(iters);
}

__attribute__((target("avx2,fma"))) double Avx2Loop(float a_value, float b_value,
                                                    std::chrono::steady_clock::time_point deadline, float* sink) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(a_value), b = _mm256_set1_ps(b_value);
  int64_t iters = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int64_t it = 0; it < kItersPerCheck; ++it) {
      for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    }
    iters += kItersPerCheck;
  }
  alignas(32) float lanes[8];
  float sum = 0;
  for (int i = 0; i < kChains; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float x : lanes) sum += x;
  }
  *sink = sum;
  return 2.0 * 8 * kChains * static_cast<double>(iters);
}

// Without FMA: a multiply and an add per lane, the two FLOPs an FMA counts.
double Sse2Loop(float a_value, float b_value, std::chrono::steady_clock::time_point deadline, float* sink) {
  __m128 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm_set1_ps(static_cast<float>(i));
  const __m128 a = _mm_set1_ps(a_value), b = _mm_set1_ps(b_value);
  int64_t iters = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int64_t it = 0; it < kItersPerCheck; ++it) {
      for (int i = 0; i < kChains; ++i) acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], a), b);
    }
    iters += kItersPerCheck;
  }
  alignas(16) float lanes[4];
  float sum = 0;
  for (int i = 0; i < kChains; ++i) {
    _mm_store_ps(lanes, acc[i]);
    for (float x : lanes) sum += x;
  }
  *sink = sum;
  return 2.0 * 4 * kChains * static_cast<double>(iters);
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
