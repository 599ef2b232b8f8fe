#include "comm/ring_collectives.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/status_macros.h"

namespace nereid {
namespace {

int Mod(int x, int n) { return ((x % n) + n) % n; }

// How floats go onto the wire and come off it. Pieces are whole elements
// (the exchange cuts messages at multiples of 4 bytes).
struct Wire {
  WireType type;

  size_t element_bytes() const { return static_cast<size_t>(WireBytesPerElement(type)); }
  void Put(const float* src, uint8_t* dst, size_t count) const {
    if (type == WireType::kFloat32) {
      std::memcpy(dst, src, count * sizeof(float));
    } else {
      EncodeWire(type, absl::MakeConstSpan(src, count), reinterpret_cast<uint16_t*>(dst));
    }
  }
  void Get(const uint8_t* src, float* dst, size_t count) const {
    if (type == WireType::kFloat32) {
      std::memcpy(dst, src, count * sizeof(float));
    } else {
      DecodeWire(type, reinterpret_cast<const uint16_t*>(src), absl::MakeSpan(dst, count));
    }
  }
  void Add(const uint8_t* src, float* dst, size_t count) const {
    if (type == WireType::kFloat32) {
      const float* in = reinterpret_cast<const float*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] += in[i];
    } else {
      DecodeWireAdd(type, reinterpret_cast<const uint16_t*>(src), absl::MakeSpan(dst, count));
    }
  }
};

// Sends `send_count` floats from `send_from` and receives `recv_count` into
// `recv_into`, adding them there when `add`.
RingStep Step(Wire wire, const float* send_from, size_t send_count, float* recv_into, size_t recv_count, bool add) {
  const size_t e = wire.element_bytes();
  RingStep step;
  step.send_bytes = send_count * e;
  step.produce = [=](uint8_t* dst, size_t offset, size_t length) { wire.Put(send_from + offset / e, dst, length / e); };
  step.recv_bytes = recv_count * e;
  step.consume = [=](const uint8_t* src, size_t offset, size_t length) {
    if (add) {
      wire.Add(src, recv_into + offset / e, length / e);
    } else {
      wire.Get(src, recv_into + offset / e, length / e);
    }
  };
  return step;
}

}  // namespace

void ScaleToAverage(absl::Span<float> data, int world) {
  const float scale = 1.0f / static_cast<float>(world);
  for (float& x : data) x *= scale;
}

absl::Status RingAllReduce(absl::Span<float> data, int rank, int world, WireType wire_type,
                           const RingExchange& exchange) {
  const int n = world, r = rank;
  const Wire wire{wire_type};
  const size_t total = data.size();
  auto begin = [&](int c) { return total * static_cast<size_t>(c) / static_cast<size_t>(n); };
  auto size = [&](int c) { return begin(c + 1) - begin(c); };
  float* base = data.data();
  for (int s = 0; s < n - 1; ++s) {
    const int out = Mod(r - s, n), in = Mod(r - s - 1, n);
    RETURN_IF_ERROR(exchange(Step(wire, base + begin(out), size(out), base + begin(in), size(in), /*add=*/true)));
  }
  const int owned = Mod(r + 1, n);
  if (wire_type != WireType::kFloat32 && size(owned) > 0) {  // round once, as the others will receive it
    std::vector<uint16_t> rounded(size(owned));
    EncodeWire(wire_type, absl::MakeConstSpan(base + begin(owned), size(owned)), rounded.data());
    DecodeWire(wire_type, rounded.data(), absl::MakeSpan(base + begin(owned), size(owned)));
  }
  for (int s = 0; s < n - 1; ++s) {
    const int out = Mod(r + 1 - s, n), in = Mod(r - s, n);
    RETURN_IF_ERROR(exchange(Step(wire, base + begin(out), size(out), base + begin(in), size(in), /*add=*/false)));
  }
  return absl::OkStatus();
}

absl::Status RingReduceScatter(absl::Span<const float> data, absl::Span<float> out, int rank, int world,
                               const RingExchange& exchange) {
  const int n = world, r = rank;
  const size_t chunk = out.size();
  const Wire wire{WireType::kFloat32};
  if (n == 1) {
    std::copy(data.begin(), data.end(), out.begin());
    return absl::OkStatus();
  }
  // A block is summed into once per step on its way round the ring, so two
  // blocks of scratch hold the partial sums, not a copy of the whole input
  // (a 67 MB gradient's copy, fresh pages each call, cost more than its
  // ring): step s sends what step s - 1 summed and sums the block it
  // receives into the other; the last step's sum, this rank's block, lands
  // in `out`. The scratch stays with the thread, which runs every call.
  thread_local std::vector<float> partial[2];
  const float* sending = data.data() + static_cast<size_t>(Mod(r - 1, n)) * chunk;
  for (int s = 0; s < n - 1; ++s) {
    const size_t recv = static_cast<size_t>(Mod(r - s - 2, n));
    float* into = out.data();
    if (s < n - 2) {
      std::vector<float>& scratch = partial[s % 2];
      if (scratch.size() < chunk) scratch.resize(chunk);
      into = scratch.data();
    }
    std::copy(data.begin() + recv * chunk, data.begin() + (recv + 1) * chunk, into);
    RETURN_IF_ERROR(exchange(Step(wire, sending, chunk, into, chunk, /*add=*/true)));
    sending = into;
  }
  return absl::OkStatus();
}

absl::Status RingAllGather(absl::Span<const float> in, absl::Span<float> out, int rank, int world,
                           const RingExchange& exchange) {
  const int n = world, r = rank;
  const size_t block = in.size();
  const Wire wire{WireType::kFloat32};
  std::copy(in.begin(), in.end(), out.begin() + r * block);
  for (int s = 0; s < n - 1; ++s) {
    const int send = Mod(r - s, n), recv = Mod(r - s - 1, n);
    RETURN_IF_ERROR(exchange(
        Step(wire, out.data() + send * block, block, out.data() + recv * block, block, /*add=*/false)));
  }
  return absl::OkStatus();
}

}  // namespace nereid
