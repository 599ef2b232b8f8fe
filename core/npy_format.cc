#include "core/npy_format.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/tensor_shape.h"

namespace nereid {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

struct Descr {
  DataType dtype;
  const char* text;
};
constexpr Descr kDescrs[] = {{DT_FLOAT, "<f4"}, {DT_DOUBLE, "<f8"}, {DT_INT32, "<i4"},
                             {DT_INT64, "<i8"}, {DT_UINT8, "|u1"}, {DT_BOOL, "|b1"}};

// The value of 'key' in the header dict, up to the next top-level comma.
absl::StatusOr<std::string> HeaderValue(absl::string_view header, absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "':");
  size_t at = header.find(quoted);
  if (at == absl::string_view::npos) return absl::InvalidArgumentError(absl::StrCat("npy header has no '", key, "'"));
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(header.substr(at + quoted.size()));
  if (rest.empty()) return absl::InvalidArgumentError(absl::StrCat("npy header has no value for '", key, "'"));
  size_t end = rest[0] == '(' ? rest.find(')') + 1 : rest.find_first_of(",}");
  if (end == absl::string_view::npos || end == 0) return absl::InvalidArgumentError("npy header is malformed");
  return std::string(absl::StripAsciiWhitespace(rest.substr(0, end)));
}

}  // namespace

absl::StatusOr<std::string> EncodeNpy(const Tensor& tensor) {
  const char* descr = nullptr;
  for (const Descr& d : kDescrs) {
    if (d.dtype == tensor.dtype()) descr = d.text;
  }
  if (descr == nullptr) return absl::InvalidArgumentError(absl::StrCat(tensor.DebugString(), ": no .npy dtype for it"));
  std::string shape = absl::StrJoin(tensor.dims(), ", ");
  if (tensor.rank() == 1) shape += ",";
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Magic, version, u16 length, header: padded with spaces so the data starts
  // at a multiple of 64 bytes, ending in a newline.
  const size_t unpadded = kMagicBytes + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, kMagicBytes);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(tensor.raw()), static_cast<size_t>(tensor.num_bytes()));
  return out;
}

absl::StatusOr<Tensor> DecodeNpy(absl::string_view bytes) {
  if (bytes.size() < kMagicBytes + 4 || bytes.substr(0, kMagicBytes) != absl::string_view(kMagic, kMagicBytes)) {
    return absl::InvalidArgumentError("not a .npy file (no \\x93NUMPY magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::InvalidArgumentError("truncated .npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    start = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(".npy format version ", major, " is not supported"));
  }
  if (bytes.size() < start + header_len) return absl::InvalidArgumentError("truncated .npy header");
  absl::string_view header = bytes.substr(start, header_len);
  absl::StatusOr<std::string> descr = HeaderValue(header, "descr");
  absl::StatusOr<std::string> order = HeaderValue(header, "fortran_order");
  absl::StatusOr<std::string> shape = HeaderValue(header, "shape");
  if (!descr.ok()) return descr.status();
  if (!order.ok()) return order.status();
  if (!shape.ok()) return shape.status();
  if (*order != "False") return absl::InvalidArgumentError("Fortran-order arrays are not supported (save C order)");
  std::string d = std::string(absl::StripPrefix(absl::StripSuffix(*descr, "'"), "'"));
  if (d == "<u1" || d == "u1") d = "|u1";
  if (d == "<b1" || d == "?" || d == "|?") d = "|b1";
  DataType dtype = DT_INVALID;
  for (const Descr& x : kDescrs) {
    if (d == x.text) dtype = x.dtype;
  }
  if (dtype == DT_INVALID) {
    return absl::InvalidArgumentError(absl::StrCat("dtype ", d, " is not supported (float32, float64, int32, int64, ",
                                                   "uint8, bool, little-endian)"));
  }
  std::vector<int64_t> dims;
  absl::string_view inner = absl::StripSuffix(absl::StripPrefix(*shape, "("), ")");
  for (absl::string_view part : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad shape ", *shape, " in .npy header"));
    }
    dims.push_back(v);
  }
  // The header's claim is checked against the bytes present before anything
  // is allocated for it.
  absl::StatusOr<int64_t> count = CheckedElementCount(dims);
  if (!count.ok()) return count.status();
  const size_t data_start = start + header_len;
  const uint64_t needed = static_cast<uint64_t>(*count) * static_cast<uint64_t>(DataTypeSize(dtype));
  if (bytes.size() - data_start != needed) {
    return absl::InvalidArgumentError(absl::StrCat(".npy data holds ", bytes.size() - data_start, " bytes; shape ",
                                                   *shape, " of ", d, " needs ", needed));
  }
  absl::StatusOr<Tensor> tensor = Tensor::Allocate(dtype, dims);
  if (!tensor.ok()) return tensor.status();
  if (tensor->num_bytes() > 0) std::memcpy(tensor->raw(), bytes.data() + data_start, tensor->num_bytes());
  return tensor;
}

}  // namespace nereid
