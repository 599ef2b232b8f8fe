#include "benchmarks/allreduce_bench.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "comm/gloo_status.h"
#include "core/host_cpu.h"
#include "core/json.h"
#include "core/stats.h"
#include "core/status_macros.h"
#include "gloo/allreduce.h"

namespace nereid {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);
// Tags: ours and raw Gloo's allreduces, the link probe, and coordination.
constexpr uint32_t kOursTag = 100, kRawTag = 200, kProbeTag = 300, kControlTag = 400, kShmTag = 500;

// One thread's memcpy bandwidth over `bytes` (median of 5 copies).
double MemcpyBytesPerSecond(int64_t bytes) {
  std::vector<char> from(static_cast<size_t>(bytes), 1), to(static_cast<size_t>(bytes), 0);
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    std::memcpy(to.data(), from.data(), to.size());
    times.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return static_cast<double>(bytes) / std::max(Median(times), 1e-9);
}

void SumFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

class Bench {
 public:
  explicit Bench(GlooCommunicator& comm) : comm_(comm) {}

  // Rank 0's value of `x`, on every rank.
  absl::StatusOr<double> FromRoot(double x) {
    std::vector<float> v = {static_cast<float>(x)};
    RETURN_IF_ERROR(comm_.Broadcast(absl::MakeSpan(v), 0, {kControlTag, kTimeout}));
    return v[0];
  }

  // The slowest rank's time of each iteration.
  absl::StatusOr<std::vector<double>> SlowestPerIteration(const std::vector<double>& mine) {
    std::vector<float> in(mine.begin(), mine.end()), all(in.size() * comm_.world());
    RETURN_IF_ERROR(comm_.AllGather(in, absl::MakeSpan(all), {kControlTag, kTimeout}));
    std::vector<double> slowest(mine.size(), 0);
    for (int r = 0; r < comm_.world(); ++r) {
      for (size_t i = 0; i < mine.size(); ++i) slowest[i] = std::max<double>(slowest[i], all[r * mine.size() + i]);
    }
    return slowest;
  }

  absl::Status Ours(std::vector<float>& data, WireType wire) {
    CollectiveOptions options{kOursTag, kTimeout};
    options.wire = wire;
    return comm_.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, options);
  }

  absl::Status Raw(std::vector<float>& data) {
    return CallGloo("raw gloo::allreduce", [&] {
      gloo::AllreduceOptions o(comm_.context());
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setOutput(data.data(), data.size());
      o.setReduceFunction(&SumFloats);
      o.setTag(kRawTag);
      o.setTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(kTimeout)));
      gloo::allreduce(o);
    });
  }

  // How many ranks share rank 0's machine (the same boot id), on every rank.
  absl::StatusOr<int> RanksOnRootHost() {
    // A 24-bit hash: exact in the float the collectives carry.
    std::vector<float> in = {static_cast<float>(std::hash<std::string>{}(HostBootId()) & 0xffffff)};
    std::vector<float> all(comm_.world());
    RETURN_IF_ERROR(comm_.AllGather(in, absl::MakeSpan(all), {kControlTag, kTimeout}));
    return static_cast<int>(std::count(all.begin(), all.end(), all[0]));
  }

  absl::StatusOr<LinkEstimate> MeasureLink() {
    LinkEstimate link;
    if (comm_.world() < 2) return link;
    const int rank = comm_.rank();
    std::vector<double> round_trips;
    std::vector<float> one(1);
    if (rank <= 1) {
      for (int i = 0; i < 50; ++i) {
        absl::Time start = absl::Now();
        if (rank == 0) {
          RETURN_IF_ERROR(comm_.Send(one, 1, {kProbeTag, kTimeout}));
          RETURN_IF_ERROR(comm_.Recv(absl::MakeSpan(one), 1, {kProbeTag, kTimeout}));
        } else {
          RETURN_IF_ERROR(comm_.Recv(absl::MakeSpan(one), 0, {kProbeTag, kTimeout}));
          RETURN_IF_ERROR(comm_.Send(one, 0, {kProbeTag, kTimeout}));
        }
        round_trips.push_back(absl::ToDoubleSeconds(absl::Now() - start));
      }
    }
    double alpha = Median(round_trips) / 2;
    std::vector<float> big((16 << 20) / sizeof(float), 1.0f);
    std::vector<double> one_way;
    if (rank <= 1) {
      for (int i = 0; i < 5; ++i) {
        absl::Time start = absl::Now();
        if (rank == 0) {
          RETURN_IF_ERROR(comm_.Send(big, 1, {kProbeTag + 1, kTimeout}));
          RETURN_IF_ERROR(comm_.Recv(absl::MakeSpan(one), 1, {kProbeTag + 2, kTimeout}));
        } else {
          RETURN_IF_ERROR(comm_.Recv(absl::MakeSpan(big), 0, {kProbeTag + 1, kTimeout}));
          RETURN_IF_ERROR(comm_.Send(one, 0, {kProbeTag + 2, kTimeout}));
        }
        one_way.push_back(absl::ToDoubleSeconds(absl::Now() - start) - 2 * alpha);
      }
    }
    double beta = rank == 0 ? big.size() * sizeof(float) / std::max(1e-9, Median(one_way)) : 0;
    ASSIGN_OR_RETURN(link.alpha_seconds, FromRoot(alpha));
    // Broadcast in MB/s: a float holds it without overflow or much rounding.
    ASSIGN_OR_RETURN(double mbps, FromRoot(beta / 1e6));
    link.beta_bytes_per_second = mbps * 1e6;
    return link;
  }

  // Runs `iterations` timed calls of `call`; every rank's time per iteration.
  template <typename Call>
  absl::StatusOr<std::vector<double>> Time(int iterations, std::vector<float>& data, Call call) {
    RETURN_IF_ERROR(comm_.Barrier({kControlTag, kTimeout}));
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) {
      absl::Time start = absl::Now();
      RETURN_IF_ERROR(call(data));
      times.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    return SlowestPerIteration(times);
  }

 private:
  GlooCommunicator& comm_;
};

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseSizes(const std::string& text) {
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t scale = 1;
    std::string digits(part);
    char last = digits.empty() ? '\0' : static_cast<char>(std::toupper(digits.back()));
    if (last == 'K' || last == 'M' || last == 'G') {
      scale = last == 'K' ? 1 << 10 : last == 'M' ? 1 << 20 : 1 << 30;
      digits.pop_back();
    }
    int64_t n;
    if (!absl::SimpleAtoi(digits, &n) || n <= 0 || n * scale % 4 != 0 || n > (int64_t{4} << 30) / scale) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sizes: '", part, "' is not a size in bytes such as 4K, 256K, 4M (a positive multiple of 4, <= 4G)"));
    }
    sizes.push_back(n * scale);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--sizes is empty");
  return sizes;
}

absl::StatusOr<AllReduceBenchResult> RunAllReduceBench(GlooCommunicator& comm, const AllReduceBenchOptions& options) {
  Bench bench(comm);
  AllReduceBenchResult result;
  result.world = comm.world();
  if (options.probe_link) {
    ASSIGN_OR_RETURN(result.link, bench.MeasureLink());
  }
  ASSIGN_OR_RETURN(result.ranks_on_host, bench.RanksOnRootHost());
  result.host_cores = HostCores();
  result.also_label = options.also_label;
  const int n = comm.world();
  // The machine's busy CPU time around our timed allreduces (rank 0's reading;
  // the ranks on its machine read the same counters). Unreadable: not measured.
  bool cpu_measured = true;
  double cpu_seconds_all = 0, bytes_sent_all = 0;
  const double bus = n > 1 ? 2.0 * (n - 1) / n : 0;
  result.wire = options.wire;
  auto ours = [&](std::vector<float>& d) { return bench.Ours(d, options.wire); };
  auto raw = [&](std::vector<float>& d) { return bench.Raw(d); };
  auto also = [&](std::vector<float>& d) {
    return options.also->AllReduce(absl::MakeSpan(d), ReduceOp::kSum, {kShmTag, kTimeout});
  };
  for (int64_t bytes : options.sizes_bytes) {
    // As many floats as fill `bytes` on each one's wire.
    std::vector<float> data(bytes / sizeof(float), 1.0f), ours_data(bytes / WireBytesPerElement(options.wire), 1.0f);
    // Warm up both, then size the rounds from one timed call (rank 0's).
    RETURN_IF_ERROR(ours(ours_data));
    RETURN_IF_ERROR(bench.Raw(data));
    if (options.also != nullptr) RETURN_IF_ERROR(also(data));
    absl::Time start = absl::Now();
    RETURN_IF_ERROR(ours(ours_data));
    double once = absl::ToDoubleSeconds(absl::Now() - start);
    ASSIGN_OR_RETURN(double planned,
                     bench.FromRoot(absl::ToDoubleSeconds(options.time_per_round) / std::max(once, 1e-6)));
    int iterations = std::clamp(static_cast<int>(planned), 3, options.max_iterations);
    std::vector<double> ours_times, raw_times, also_times;
    double cpu_seconds = 0;
    if (options.progress) {
      options.progress(absl::StrCat("timing ", bytes, " bytes: ", options.rounds, " rounds of ", iterations,
                                    " calls each"));
    }
    for (int round = 0; round < options.rounds; ++round) {
      absl::StatusOr<double> cpu_before = HostBusyCpuSeconds();
      ASSIGN_OR_RETURN(std::vector<double> a, bench.Time(iterations, ours_data, ours));
      absl::StatusOr<double> cpu_after = HostBusyCpuSeconds();
      cpu_measured = cpu_measured && cpu_before.ok() && cpu_after.ok();
      if (cpu_measured) cpu_seconds += *cpu_after - *cpu_before;
      ASSIGN_OR_RETURN(std::vector<double> b, bench.Time(iterations, data, raw));
      ours_times.insert(ours_times.end(), a.begin(), a.end());
      raw_times.insert(raw_times.end(), b.begin(), b.end());
      if (options.also != nullptr) {
        ASSIGN_OR_RETURN(std::vector<double> c, bench.Time(iterations, data, also));
        also_times.insert(also_times.end(), c.begin(), c.end());
      }
    }
    AllReduceBenchRow row;
    row.bytes = bytes;
    row.iterations = iterations;
    row.seconds = Median(ours_times);
    row.raw_seconds = Median(raw_times);
    row.algbw = bytes / row.seconds;
    row.busbw = row.algbw * bus;
    row.raw_algbw = bytes / row.raw_seconds;
    row.raw_busbw = row.raw_algbw * bus;
    if (n > 1 && result.link.beta_bytes_per_second > 0) {
      row.bound_seconds =
          2.0 * (n - 1) * (result.link.alpha_seconds + bytes / (n * result.link.beta_bytes_per_second));
      row.ratio_to_bound = row.bound_seconds / row.seconds;
    }
    row.ratio_to_raw = row.raw_seconds / row.seconds;
    if (!also_times.empty()) {
      row.also_seconds = Median(also_times);
      row.also_busbw = bytes / row.also_seconds * bus;
      row.also_ratio_to_raw = row.raw_seconds / row.also_seconds;
    }
    ASSIGN_OR_RETURN(double calls_cpu, bench.FromRoot(cpu_seconds));
    row.host_cpu_seconds = calls_cpu / (options.rounds * iterations);
    cpu_seconds_all += row.host_cpu_seconds;
    bytes_sent_all += bus * bytes;
    result.rows.push_back(row);
  }
  if (comm.rank() == 0 && !options.sizes_bytes.empty()) {
    result.memcpy_bytes_per_second =
        MemcpyBytesPerSecond(std::max<int64_t>(*std::max_element(options.sizes_bytes.begin(), options.sizes_bytes.end()),
                                               int64_t{16} << 20));
  }
  ASSIGN_OR_RETURN(double all_measured, bench.FromRoot(cpu_measured ? 1 : 0));
  if (all_measured > 0 && bytes_sent_all > 0) {
    result.comm_cpu_seconds_per_byte = cpu_seconds_all / (result.ranks_on_host * bytes_sent_all);
  }
  return result;
}

std::string FormatBenchTable(const AllReduceBenchResult& r) {
  std::string out = absl::StrCat("allreduce over ", r.world, " ranks (gloo/tcp, ring",
                                 r.wire == WireType::kFloat32 ? "" : absl::StrCat("; ours on a ", WireTypeName(r.wire),
                                                                                  " wire, sizes in wire bytes"),
                                 "); ",
                                 r.link.beta_bytes_per_second > 0
                                     ? absl::StrFormat("link: alpha %.1f us, beta %.0f MB/s\n",
                                                       r.link.alpha_seconds * 1e6, r.link.beta_bytes_per_second / 1e6)
                                     : std::string("link not probed\n"));
  absl::StrAppend(&out, absl::StrFormat("%10s %6s %11s %10s %10s | %11s %10s | %8s %8s\n", "size", "iters",
                                        "time(us)", "algbw", "busbw", "raw(us)", "raw busbw", "vs raw",
                                        "vs bound"));
  for (const AllReduceBenchRow& row : r.rows) {
    std::string vs_bound = row.bound_seconds > 0 ? absl::StrFormat("%7.2fx", row.ratio_to_bound) : "       -";
    absl::StrAppend(&out, absl::StrFormat("%10d %6d %11.1f %10.3f %10.3f | %11.1f %10.3f | %7.2fx %s\n", row.bytes,
                                          row.iterations, row.seconds * 1e6, row.algbw / 1e9, row.busbw / 1e9,
                                          row.raw_seconds * 1e6, row.raw_busbw / 1e9, row.ratio_to_raw, vs_bound));
  }
  if (!r.rows.empty() && r.rows.front().also_seconds > 0) {
    absl::StrAppend(&out, absl::StrFormat("%10s | %11s %10s %8s   (%s)\n", "size", "time(us)", "busbw", "vs raw",
                                          r.also_label));
    for (const AllReduceBenchRow& row : r.rows) {
      absl::StrAppend(&out, absl::StrFormat("%10d | %11.1f %10.3f %7.2fx\n", row.bytes, row.also_seconds * 1e6,
                                            row.also_busbw / 1e9, row.also_ratio_to_raw));
    }
  }
  if (r.memcpy_bytes_per_second > 0) {
    absl::StrAppend(&out, absl::StrFormat("memcpy on rank 0's machine: %.2f GB/s (one thread)\n",
                                          r.memcpy_bytes_per_second / 1e9));
  }
  absl::StrAppend(&out, "(bandwidths in GB/s; time is the median of the slowest rank's per-call times)\n");
  if (r.comm_cpu_seconds_per_byte > 0) {
    absl::StrAppend(&out, absl::StrFormat("host CPU: %.1f ns per byte a rank sends (%d of the ranks share %d cores)\n",
                                          r.comm_cpu_seconds_per_byte * 1e9, r.ranks_on_host, r.host_cores));
  }
  return out;
}

std::string BenchJson(const AllReduceBenchResult& r) {
  Json j;
  j["world"] = int64_t{r.world};
  j["wire"] = std::string(WireTypeName(r.wire));
  j["alpha_seconds"] = r.link.alpha_seconds;
  j["beta_bytes_per_second"] = r.link.beta_bytes_per_second;
  j["ranks_on_host"] = int64_t{r.ranks_on_host};
  j["host_cores"] = int64_t{r.host_cores};
  j["comm_cpu_seconds_per_byte"] = r.comm_cpu_seconds_per_byte;
  j["memcpy_bytes_per_second"] = r.memcpy_bytes_per_second;
  if (r.ranks_on_host > 0) j["cores_per_rank"] = static_cast<double>(r.host_cores) / r.ranks_on_host;
  Json sizes = Json::array();
  for (const AllReduceBenchRow& row : r.rows) {
    Json size;
    size["bytes"] = row.bytes;
    size["iterations"] = int64_t{row.iterations};
    size["seconds"] = row.seconds;
    size["algbw"] = row.algbw;
    size["busbw"] = row.busbw;
    size["raw_gloo_seconds"] = row.raw_seconds;
    size["raw_gloo_busbw"] = row.raw_busbw;
    size["ratio_to_raw_gloo"] = row.ratio_to_raw;
    size["bound_seconds"] = row.bound_seconds;
    size["ratio_to_bound"] = row.ratio_to_bound;
    size["host_cpu_seconds"] = row.host_cpu_seconds;
    if (row.also_seconds > 0) {
      size[r.also_label + "_seconds"] = row.also_seconds;
      size[r.also_label + "_busbw"] = row.also_busbw;
      size[r.also_label + "_ratio_to_raw_gloo"] = row.also_ratio_to_raw;
    }
    sizes.push_back(std::move(size));
  }
  j["sizes"] = std::move(sizes);
  return JsonLine(j) + "\n";
}

}  // namespace nereid
