#include "comm/traffic_accounting.h"

namespace nereid {
namespace {

// Index of the highest set bit of v, or -1 for v == 0.
int HighestBit(int v) {
  int h = -1;
  while (v > 0) {
    v >>= 1;
    ++h;
  }
  return h;
}

}  // namespace

TrafficBytes RingAllReduceTraffic(int world, int64_t bytes) {
  if (world <= 1 || bytes <= 0) return {};
  const int64_t each_way = 2 * (world - 1) * bytes / world;
  return {each_way, each_way};
}

TrafficBytes RingAllGatherTraffic(int world, int64_t output_bytes) {
  if (world <= 1 || output_bytes <= 0) return {};
  const int64_t each_way = (world - 1) * output_bytes / world;
  return {each_way, each_way};
}

TrafficBytes RingReduceScatterTraffic(int world, int64_t input_bytes) {
  if (world <= 1 || input_bytes <= 0) return {};
  const int64_t each_way = (world - 1) * input_bytes / world;
  return {each_way, each_way};
}

int BinomialBroadcastChildren(int world, int rank, int root) {
  if (world <= 1) return 0;
  const int vrank = (rank - root + world) % world;
  int children = 0;
  for (int bit = HighestBit(vrank) + 1; (1 << bit) < world; ++bit) {
    if (vrank + (1 << bit) < world) ++children;
  }
  return children;
}

TrafficBytes BinomialBroadcastTraffic(int world, int rank, int root, int64_t bytes) {
  if (world <= 1 || bytes <= 0) return {};
  TrafficBytes t;
  t.sent = bytes * BinomialBroadcastChildren(world, rank, root);
  t.received = rank == root ? 0 : bytes;
  return t;
}

void TrafficMeter::RecordCall(TrafficBytes bytes) {
  sent_.fetch_add(bytes.sent, std::memory_order_relaxed);
  received_.fetch_add(bytes.received, std::memory_order_relaxed);
  calls_.fetch_add(1, std::memory_order_relaxed);
}

TrafficCounters TrafficMeter::Snapshot() const {
  TrafficCounters c;
  c.bytes_sent = sent_.load(std::memory_order_relaxed);
  c.bytes_received = received_.load(std::memory_order_relaxed);
  c.calls = calls_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace nereid
