#ifndef NEREID_COMM_TRAFFIC_ACCOUNTING_H_
#define NEREID_COMM_TRAFFIC_ACCOUNTING_H_

// Traffic accounting: the bytes one rank puts on and takes off the wire for
// each collective, computed from the algorithm's formula (payload only; no
// headers, notifications or retransmissions), and a thread-safe meter that
// sums them into TrafficCounters.
//
//   ring allreduce of S bytes over n ranks:  sent = received = 2(n-1)S/n
//   ring allgather, output T = n*s bytes:    sent = received = (n-1)T/n = (n-1)s
//   ring reduce-scatter, input T = n*c bytes: sent = received = (n-1)T/n = (n-1)c
//   binomial-tree broadcast of S bytes:      a non-root receives S; every rank
//                                            sends S to each of its children,
//                                            so the n ranks send S(n-1) in all
//   send / recv of S bytes:                  exactly S
//   barrier:                                 0 (zero-byte notifications only)
//
// Fractions round down (2(n-1)S/n with integer division). One rank, or zero
// bytes, means no traffic.

#include <atomic>
#include <cstdint>

#include "comm/communicator.h"

namespace nereid {

struct TrafficBytes {
  int64_t sent = 0;
  int64_t received = 0;
};

TrafficBytes RingAllReduceTraffic(int world, int64_t bytes);
TrafficBytes RingAllGatherTraffic(int world, int64_t output_bytes);
TrafficBytes RingReduceScatterTraffic(int world, int64_t input_bytes);
// The binomial tree Gloo's broadcast runs: virtual rank v = (rank - root) mod
// n receives from v with its highest set bit cleared and sends to v + 2^i for
// every 2^i above v's highest bit with v + 2^i < n.
TrafficBytes BinomialBroadcastTraffic(int world, int rank, int root, int64_t bytes);
// Number of children of `rank` in that tree.
int BinomialBroadcastChildren(int world, int rank, int root);

// Totals since construction; RecordCall and Snapshot may be called from any
// thread (relaxed atomics: each field is exact, a snapshot taken while calls
// complete may mix fields from before and after one of them).
class TrafficMeter {
 public:
  // One call that moved `bytes` (zero for a call that moved nothing).
  void RecordCall(TrafficBytes bytes = {});
  TrafficCounters Snapshot() const;

 private:
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> received_{0};
  std::atomic<int64_t> calls_{0};
};

}  // namespace nereid

#endif  // NEREID_COMM_TRAFFIC_ACCOUNTING_H_
