#ifndef NEREID_COMM_RING_COLLECTIVES_H_
#define NEREID_COMM_RING_COLLECTIVES_H_

// Ring collectives over a streaming exchange with the ring's neighbours: the
// right neighbour (rank + 1) is sent to, the left one (rank - 1) received
// from, both at once in each of the ring's steps. The exchange hands the
// message over piece by piece (produce fills a piece, consume takes one), so
// reductions add straight out of the transport's buffer and 16-bit wire
// formats are encoded into it and decoded out of it: no staging copy.
//
// Chunk c of an n-rank all-reduce is elements [total*c/n, total*(c+1)/n).
// Reduce-scatter: at step s a rank sends its partial sum of chunk r-s and
// adds its left neighbour's partial sum of chunk r-s-1; rank r ends owning
// chunk r+1 with all n terms (summed in one fixed order, so every run and
// every rank agrees bitwise). The owner rounds it once to the wire format;
// the all-gather then passes finished chunks around unchanged, so every rank
// ends with the same bits. Each rank sends and receives 2(n-1)/n of the data.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "comm/wire_format.h"

namespace nereid {

struct RingStep {
  size_t send_bytes = 0;  // to the right neighbour; 0: nothing
  std::function<void(uint8_t* dst, size_t offset, size_t length)> produce;
  size_t recv_bytes = 0;  // from the left neighbour; 0: nothing
  std::function<void(const uint8_t* src, size_t offset, size_t length)> consume;
};
using RingExchange = std::function<absl::Status(const RingStep& step)>;

// ReduceOp::kAvg as every backend finishes it: the sum times 1/world.
void ScaleToAverage(absl::Span<float> data, int world);

// In place; `world` >= 2. kAvg is the caller's (ScaleToAverage after).
absl::Status RingAllReduce(absl::Span<float> data, int rank, int world, WireType wire, const RingExchange& exchange);
// `data` holds world * out.size(); `out` ends with the sum of chunk `rank`.
absl::Status RingReduceScatter(absl::Span<const float> data, absl::Span<float> out, int rank, int world,
                               const RingExchange& exchange);
// `out` (world * in.size()) ends with rank 0's block first.
absl::Status RingAllGather(absl::Span<const float> in, absl::Span<float> out, int rank, int world,
                           const RingExchange& exchange);

}  // namespace nereid

#endif  // NEREID_COMM_RING_COLLECTIVES_H_
