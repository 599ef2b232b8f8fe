#ifndef NEREID_BENCHMARKS_ALLREDUCE_BENCH_H_
#define NEREID_BENCHMARKS_ALLREDUCE_BENCH_H_

// `nereid bench allreduce`: times Nereid's allreduce (GlooCommunicator) and
// raw Gloo's (gloo::allreduce on the same context, no wrapper) per message
// size, alternating the two in rounds so drift hits both alike, and compares
// both with the alpha-beta bound of the measured link.
//
// Figures follow nccl-tests: time t is the median over iterations of the
// slowest rank's time; algbw = S / t; busbw = algbw * 2(n-1)/n, the bytes
// each rank's link carries per second in a ring allreduce.
//
// The link: alpha is half the median round trip of a 4-byte message between
// ranks 0 and 1; beta is the bandwidth of a one-way 16 MiB transfer between
// them (minus one alpha). A ring allreduce of S bytes over n ranks cannot
// take less than T = 2(n-1) * (alpha + S / (n * beta)); ratio_to_bound is
// T / t (1.0 would be perfect).
//
// With options.also, the same allreduce through another backend of the same
// ranks (shared memory, hierarchical) is timed too (a third alternation), with
// its ratio to raw Gloo, beside the memcpy bandwidth of rank 0's machine.
//
// The CPU communication costs: the machine's busy CPU time (/proc/stat,
// core/host_cpu.h) around our timed calls, per byte a rank sends, what the
// timing model charges a pipelined step's compute for the allreduce it overlaps.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/gloo_communicator.h"
#include "comm/wire_format.h"

namespace nereid {

struct AllReduceBenchOptions {
  std::vector<int64_t> sizes_bytes = {4 << 10, 256 << 10, 4 << 20, 64 << 20};
  int rounds = 3;                                    // alternations of ours and raw Gloo
  absl::Duration time_per_round = absl::Milliseconds(500);  // per size and implementation
  int max_iterations = 1000;
  // Probe the link (alpha, beta) between ranks 0 and 1 first; false leaves
  // them 0, e.g. when the benchmark only keeps the links busy.
  bool probe_link = true;
  // Told, on every rank, when each size's timed calls begin (null: silent).
  std::function<void(const std::string&)> progress;
  // Also timed, alternating with the other two: the same world's ranks
  // through another backend, named `also_label` ("shm"); null: not timed.
  Communicator* also = nullptr;
  std::string also_label;
  // Ours sends this wire format (float16/bfloat16: Nereid's own 16-bit ring).
  // Sizes are bytes on the wire either way, so a 16-bit message carries twice
  // the floats of raw Gloo's float32 message of the same size.
  WireType wire = WireType::kFloat32;
};

struct LinkEstimate {
  double alpha_seconds = 0;
  double beta_bytes_per_second = 0;
};

struct AllReduceBenchRow {
  int64_t bytes = 0;
  int iterations = 0;  // per round and implementation
  double seconds = 0, algbw = 0, busbw = 0;              // Nereid's communicator
  double raw_seconds = 0, raw_algbw = 0, raw_busbw = 0;  // raw Gloo
  double also_seconds = 0, also_busbw = 0;  // options.also (0: not timed)
  double also_ratio_to_raw = 0;             // raw_seconds / also_seconds
  double bound_seconds = 0;
  double ratio_to_raw = 0;    // raw_seconds / seconds: busbw ratio, ours over raw
  double ratio_to_bound = 0;  // bound_seconds / seconds
  double host_cpu_seconds = 0;  // rank 0's machine's busy CPU time per call of ours, all cores
};

struct AllReduceBenchResult {
  int world = 0;
  WireType wire = WireType::kFloat32;  // ours' (options.wire)
  LinkEstimate link;
  int ranks_on_host = 0;  // ranks sharing rank 0's machine
  int host_cores = 0;     // its cores
  // The machine's busy CPU time (kernel network stack included) per byte one
  // rank sends: sum over sizes of host_cpu_seconds / (ranks_on_host * sum of
  // the bytes a rank sends per call). 0 when /proc/stat is unreadable.
  double comm_cpu_seconds_per_byte = 0;
  // memcpy on rank 0, one thread, of the largest size (at least 16 MiB): the
  // bound of any transport that moves bytes through memory.
  double memcpy_bytes_per_second = 0;
  std::string also_label;  // options.also's
  std::vector<AllReduceBenchRow> rows;
};

// Every rank of `comm` calls this with the same options; all get the result.
absl::StatusOr<AllReduceBenchResult> RunAllReduceBench(GlooCommunicator& comm, const AllReduceBenchOptions& options);

// "4K,256K,4M,64M" -> bytes (K, M, G are powers of 1024; a multiple of 4).
absl::StatusOr<std::vector<int64_t>> ParseSizes(const std::string& text);

std::string FormatBenchTable(const AllReduceBenchResult& result);
std::string BenchJson(const AllReduceBenchResult& result);

}  // namespace nereid

#endif  // NEREID_BENCHMARKS_ALLREDUCE_BENCH_H_
