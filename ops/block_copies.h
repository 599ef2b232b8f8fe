#ifndef NEREID_OPS_BLOCK_COPIES_H_
#define NEREID_OPS_BLOCK_COPIES_H_

// Where the copies of Concat, Slice and Pad (and their gradients) go, shared
// by their CPU and GPU kernels: each is a block of `rows` runs of `width`
// elements, one run every `pitch` elements on each side. The CPU copies a
// block run by run, the GPU in one cudaMemcpy2DAsync.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/op_registry.h"

namespace nereid {

// One block between the `part` side (a concat input, a slice, Pad's small
// tensor) and the `whole` side (the concat output, the sliced or padded
// tensor), in elements.
struct BlockCopy {
  int64_t part_at = 0, part_pitch = 0;
  int64_t whole_at = 0, whole_pitch = 0;
  int64_t width = 0, rows = 0;
};

inline int64_t DimsProduct(const std::vector<int64_t>& dims, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= dims[static_cast<size_t>(i)];
  return p;
}

inline int NormalizedAxis(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }

// Concat: input `part_dims` at `offset` (in elements of its axis) of the
// output `whole_dims` along `axis`.
inline BlockCopy ConcatBlock(const std::vector<int64_t>& part_dims, const std::vector<int64_t>& whole_dims, int axis,
                             int64_t offset) {
  const int rank = static_cast<int>(whole_dims.size());
  const int64_t outer = DimsProduct(whole_dims, 0, axis), inner = DimsProduct(whole_dims, axis + 1, rank);
  const int64_t row = part_dims[static_cast<size_t>(axis)] * inner;
  return {0, row, offset * inner, whole_dims[static_cast<size_t>(axis)] * inner, row, outer};
}

// Slice: `size` entries of `whole_dims`' `axis` from `begin`, `stride`
// apart. One block when the stride is 1 (each outer index's part is one run
// of size x inner), else one per outer index. An error if the slice leaves
// the axis.
inline absl::Status SliceBlocks(const std::vector<int64_t>& whole_dims, int axis, int64_t begin, int64_t size,
                                int64_t stride, std::vector<BlockCopy>* blocks) {
  const int rank = static_cast<int>(whole_dims.size());
  const int64_t outer = DimsProduct(whole_dims, 0, axis), inner = DimsProduct(whole_dims, axis + 1, rank);
  const int64_t n = whole_dims[static_cast<size_t>(axis)];
  if (begin < 0 || (size > 0 && begin + (size - 1) * stride >= n)) {
    return absl::InvalidArgumentError(absl::StrCat("slice of ", size, " from ", begin, " in steps of ", stride,
                                                   " is outside dimension ", axis, " of [",
                                                   absl::StrJoin(whole_dims, ", "), "]"));
  }
  blocks->clear();
  if (stride == 1) {
    blocks->push_back({0, size * inner, begin * inner, n * inner, size * inner, outer});
    return absl::OkStatus();
  }
  for (int64_t o = 0; o < outer; ++o) {
    blocks->push_back({o * size * inner, inner, (o * n + begin) * inner, stride * inner, inner, size});
  }
  return absl::OkStatus();
}

// Pad: the small tensor `small_dims` inside `large_dims`, shifted by the
// begin pads (`pads`: the begins, then the ends). One block per plane of the
// small tensor (every axis but the last two), its rows the second-to-last
// axis. An error if `pads` does not match the rank.
inline absl::Status PadBlocks(const std::vector<int64_t>& small_dims, const std::vector<int64_t>& large_dims,
                              const std::vector<int64_t>& pads, std::vector<BlockCopy>* blocks) {
  const int rank = static_cast<int>(small_dims.size());
  if (static_cast<int>(pads.size()) != 2 * rank) return absl::InvalidArgumentError("pads do not match the rank");
  blocks->clear();
  if (DimsProduct(small_dims, 0, rank) == 0) return absl::OkStatus();
  std::vector<int64_t> strides(static_cast<size_t>(rank), 1);
  for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * large_dims[static_cast<size_t>(d + 1)];
  const int64_t row = rank == 0 ? 1 : small_dims[static_cast<size_t>(rank - 1)];
  const int64_t rows = rank < 2 ? 1 : small_dims[static_cast<size_t>(rank - 2)];
  const int64_t large_pitch = rank == 0 ? 1 : large_dims[static_cast<size_t>(rank - 1)];
  const int64_t planes = DimsProduct(small_dims, 0, rank) / (row * rows);
  for (int64_t p = 0; p < planes; ++p) {
    int64_t rest = p, offset = 0;
    if (rank >= 1) offset += pads[static_cast<size_t>(rank - 1)];
    if (rank >= 2) offset += pads[static_cast<size_t>(rank - 2)] * strides[static_cast<size_t>(rank - 2)];
    for (int d = rank - 3; d >= 0; --d) {
      offset += (rest % small_dims[static_cast<size_t>(d)] + pads[static_cast<size_t>(d)]) * strides[d];
      rest /= small_dims[static_cast<size_t>(d)];
    }
    blocks->push_back({p * rows * row, row, offset, large_pitch, row, rows});
  }
  return absl::OkStatus();
}

// Pad's attributes: the pads (begins, then ends) and the value around.
struct PadAttrs {
  std::vector<int64_t> pads;
  float value = 0.0f;
};
inline PadAttrs ReadPadAttrs(const AttrMap& attrs) {
  PadAttrs a;
  const auto& pads = attrs.at("pads")->list().i();
  a.pads.assign(pads.begin(), pads.end());
  auto value = attrs.find("value");
  a.value = value == attrs.end() ? 0.0f : value->second->f();
  return a;
}

// Slice's, SliceGrad's and SliceLike's attributes (SliceLike, Concat's
// gradient, has no stride: 1; its length is its output's).
struct SliceAttrs {
  int64_t axis = 0, begin = 0, stride = 1;
};
inline SliceAttrs ReadSliceAttrs(const AttrMap& attrs) {
  auto stride = attrs.find("stride");
  return {attrs.at("axis")->i(), attrs.at("begin")->i(), stride == attrs.end() ? 1 : stride->second->i()};
}

}  // namespace nereid

#endif  // NEREID_OPS_BLOCK_COPIES_H_
