#include "data/idx_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace nereid {
namespace data {
namespace {

constexpr int64_t kMaxSide = 65536;

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

absl::Status CheckMagic(const GzFile& file, uint32_t magic, uint32_t expected, const char* kind) {
  if (magic == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: bad IDX magic 0x%08x (expected 0x%08x for %s)", file.path(), magic, expected, kind));
}

absl::Status CheckNoTrailingData(GzFile& file, int64_t expected_bytes, const char* what) {
  ASSIGN_OR_RETURN(bool at_end, file.AtEnd());
  if (!at_end) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": trailing data after the ",
                                                   expected_bytes, " bytes of ", what,
                                                   " the header declares"));
  }
  return absl::OkStatus();
}

// Reads the first `n` bytes of payload; `whole` says whether that is all the
// header declared (then nothing may follow). The buffer grows with the data
// actually present, so a corrupt header declaring a huge size costs no more
// memory than the file really holds. A short file is reported in the header's
// terms via `describe`.
absl::StatusOr<std::vector<uint8_t>> ReadPayload(GzFile& file, int64_t n, bool whole,
                                                 const std::string& describe, const char* unit) {
  constexpr int64_t kChunk = int64_t{4} << 20;
  std::vector<uint8_t> out;
  int64_t have = 0;
  while (have < n) {
    const int64_t want = std::min(kChunk, n - have);
    out.resize(static_cast<size_t>(have + want));
    ASSIGN_OR_RETURN(int64_t got, file.Read(out.data() + have, want));
    have += got;
    if (got < want) {
      return absl::OutOfRangeError(absl::StrCat(file.path(), ": truncated: header says ", describe,
                                                " but the file holds ", have, " bytes of ", unit));
    }
  }
  if (whole) RETURN_IF_ERROR(CheckNoTrailingData(file, n, unit));
  return out;
}

}  // namespace

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                                int num_classes, const IdxLimits& limits) {
  const int64_t max_pixel_bytes = limits.max_pixel_bytes;
  if (num_classes <= 0 || num_classes > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        images_path, ": num_classes must be in [1, 256] for uint8 labels, got ", num_classes));
  }

  // Images header.
  ASSIGN_OR_RETURN(std::unique_ptr<GzFile> images, GzFile::Open(images_path));
  uint8_t header[16];
  RETURN_IF_ERROR(images->ReadExactly(header, 4, "IDX magic"));
  RETURN_IF_ERROR(CheckMagic(*images, BigEndian32(header), kIdxUint8ImagesMagic, "uint8 images"));
  RETURN_IF_ERROR(images->ReadExactly(header + 4, 12, "IDX image header"));
  const int64_t count = BigEndian32(header + 4);
  const int64_t rows = BigEndian32(header + 8);
  const int64_t cols = BigEndian32(header + 12);
  if (count == 0 || rows == 0 || cols == 0 || rows > kMaxSide || cols > kMaxSide) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, ": implausible IDX header: ", count,
                                                   " images of ", rows, "x", cols));
  }
  const int64_t image_bytes = rows * cols;  // <= 2^32: no overflow
  if (count > max_pixel_bytes / image_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(images_path, ": header declares ", count, " images of ", rows, "x", cols,
                     ", more than the ", max_pixel_bytes, "-byte limit on pixel data"));
  }

  // Labels header, checked before the big allocation so a mismatch fails fast.
  ASSIGN_OR_RETURN(std::unique_ptr<GzFile> labels_file, GzFile::Open(labels_path));
  RETURN_IF_ERROR(labels_file->ReadExactly(header, 4, "IDX magic"));
  RETURN_IF_ERROR(
      CheckMagic(*labels_file, BigEndian32(header), kIdxUint8LabelsMagic, "uint8 labels"));
  RETURN_IF_ERROR(labels_file->ReadExactly(header + 4, 4, "IDX label header"));
  const int64_t label_count = BigEndian32(header + 4);
  if (label_count != count) {
    return absl::InvalidArgumentError(absl::StrCat(labels_path, ": header says ", label_count,
                                                   " labels but ", images_path, " holds ", count,
                                                   " images"));
  }

  const int64_t kept = limits.max_examples > 0 ? std::min(count, limits.max_examples) : count;
  const bool whole = kept == count;
  ASSIGN_OR_RETURN(std::vector<uint8_t> raw_labels,
                   ReadPayload(*labels_file, kept, whole, absl::StrCat(count, " labels"), "labels"));
  Dataset ds;
  ds.labels.resize(static_cast<size_t>(kept));
  for (int64_t i = 0; i < kept; ++i) {
    if (raw_labels[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(labels_path, ": label ", int{raw_labels[i]},
                                                     " of example ", i, " is out of range [0, ",
                                                     num_classes, ")"));
    }
    ds.labels[i] = raw_labels[i];
  }

  const int64_t pixel_bytes = kept * image_bytes;
  ASSIGN_OR_RETURN(std::vector<uint8_t> pixels,
                   ReadPayload(*images, pixel_bytes, whole,
                               absl::StrCat(count, " images of ", rows, "x", cols), "pixels"));

  ds.name = images_path.substr(images_path.find_last_of('/') + 1);
  ds.num_examples = kept;
  ds.channels = 1;
  ds.height = rows;
  ds.width = cols;
  ds.num_classes = num_classes;
  ds.images.resize(static_cast<size_t>(pixel_bytes));
  float scaled[256];
  for (int v = 0; v < 256; ++v) scaled[v] = static_cast<float>(v) / 255.0f;
  for (int64_t i = 0; i < pixel_bytes; ++i) ds.images[i] = scaled[pixels[i]];
  return ds;
}

}  // namespace data
}  // namespace nereid
