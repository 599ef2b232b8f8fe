#ifndef NEREID_COMPRESS_LAYER_BYTES_H_
#define NEREID_COMPRESS_LAYER_BYTES_H_

// Per-layer byte accounting of a plan's gradient communication: for every
// compressed gradient and for the dense buckets, the payload one rank puts
// into its collective per step and the bytes it sends for it on a ring of
// `world` ranks, beside what an uncompressed allreduce would send.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

struct LayerBytes {
  std::string name;        // the gradient, or "dense buckets"
  std::string method;      // codec, or the wire format of dense buckets
  std::string collective;  // "allgather" or "allreduce"
  int64_t elements = 0;
  int64_t payload_bytes = 0;           // one rank's contribution per step
  bool payload_is_bound = false;       // variable-length code: at most this
  double sent_bytes = 0;               // per rank per step on a ring of `world`
  double uncompressed_sent_bytes = 0;  // float32 ring allreduce of the same values
  int rounds = 1;                      // collectives one after another (PowerSGD: 2, its P and its Q)
};

// Ring algorithms: allreduce sends 2(n-1)/n of the buffer, allgather sends
// (n-1) blocks of the payload.
absl::StatusOr<std::vector<LayerBytes>> PlanLayerBytes(const Graph& graph, int world);

// One AllReduce or CompressedAllReduce node's message: its bytes as the
// buffer of a float32 ring allreduce over `world` ranks that sends as much per
// rank: an AllReduce's values at its wire format's bytes (2 for fp16/bf16),
// a codec's payload (an allgather codec's (n-1) payloads are a ring
// allreduce of n/2 of them); and how many collectives, one after another, it
// takes (a codec's rounds; 1 for an AllReduce). The timing model prices every
// message so.
struct RingMessage {
  int64_t bytes = 0;
  int rounds = 1;
};
absl::StatusOr<RingMessage> RingMessageOf(const Node& node, int world);

// The same for one CompressedAllReduce node: one entry per gradient it carries.
absl::StatusOr<std::vector<LayerBytes>> CompressedLayerBytes(const Node& compressed_allreduce, int world);

}  // namespace nereid

#endif  // NEREID_COMPRESS_LAYER_BYTES_H_
