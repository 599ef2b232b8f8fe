#ifndef NEREID_COMM_WIRE_FORMAT_H_
#define NEREID_COMM_WIRE_FORMAT_H_

// The number format a collective puts on the wire. Float32 buffers may travel
// as 16-bit floats (Pipe-SGD's truncation compressor): half the bytes, with
// every addition still done in float32 by the receiver. fp16 keeps 11
// significant bits and a range of about 6e-5 (normal) to 65504; bf16 keeps 8
// bits and float32's range. Conversions round to nearest, ties to even; NaN
// stays NaN and out-of-range fp16 values become infinities (so a blown-up
// gradient is still caught by the trainer's NaN check rather than hidden).

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace nereid {

enum class WireType { kFloat32, kFloat16, kBFloat16 };

// "float32", "float16", "bfloat16".
absl::string_view WireTypeName(WireType type);
absl::StatusOr<WireType> ParseWireType(absl::string_view name);
int WireBytesPerElement(WireType type);

// 16-bit types only: `out` has in.size() elements.
void EncodeWire(WireType type, absl::Span<const float> in, uint16_t* out);
void DecodeWire(WireType type, const uint16_t* in, absl::Span<float> out);
// out[i] += decoded in[i].
void DecodeWireAdd(WireType type, const uint16_t* in, absl::Span<float> out);

}  // namespace nereid

#endif  // NEREID_COMM_WIRE_FORMAT_H_
