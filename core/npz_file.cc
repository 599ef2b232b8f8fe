#include "core/npz_file.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <cstdio>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/npy_format.h"

namespace nereid {
namespace {

std::string ZipError(zip_t* archive) { return zip_strerror(archive); }

// What zip_open's error code means.
std::string OpenError(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string message = zip_error_strerror(&e);
  zip_error_fini(&e);
  return message;
}

// Members larger than this are refused when reading: the .npy inside is
// decoded into one tensor, which may hold at most 2^32 elements anyway.
constexpr zip_uint64_t kMaxMemberBytes = zip_uint64_t{1} << 35;

}  // namespace

absl::Status WriteNpz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int error = 0;
  zip_t* archive = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  if (archive == nullptr) return absl::UnavailableError(absl::StrCat(path, ": cannot create: ", OpenError(error)));
  // libzip reads the buffers at zip_close, so they must live until then.
  std::vector<std::string> buffers;
  buffers.reserve(arrays.size());
  for (const auto& [name, tensor] : arrays) {
    absl::StatusOr<std::string> npy = EncodeNpy(tensor);
    if (!npy.ok()) {
      zip_discard(archive);
      return absl::InvalidArgumentError(absl::StrCat(path, ": array '", name, "': ", npy.status().message()));
    }
    buffers.push_back(*std::move(npy));
    zip_source_t* source = zip_source_buffer(archive, buffers.back().data(), buffers.back().size(), 0);
    zip_int64_t index = source == nullptr ? -1
                                          : zip_file_add(archive, absl::StrCat(name, ".npy").c_str(), source,
                                                         ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      if (source != nullptr) zip_source_free(source);
      std::string message = ZipError(archive);
      zip_discard(archive);
      return absl::InternalError(absl::StrCat(path, ": cannot add '", name, "': ", message));
    }
    zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0);
  }
  if (zip_close(archive) != 0) {
    std::string message = ZipError(archive);
    zip_discard(archive);
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": cannot write: ", message));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": cannot rename the finished file into place"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadNpz(const std::string& path) {
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_RDONLY, &error);
  if (archive == nullptr) {
    std::string message = absl::StrCat(path, ": cannot open as .npz: ", OpenError(error));
    return error == ZIP_ER_NOENT || error == ZIP_ER_OPEN ? absl::NotFoundError(message)
                                                         : absl::InvalidArgumentError(message);
  }
  std::unique_ptr<zip_t, int (*)(zip_t*)> closer(archive, zip_close);
  // A member's compressed size is the archive's claim: no member is larger
  // than the file holding it.
  struct stat file{};
  const zip_uint64_t file_bytes = ::stat(path.c_str(), &file) == 0 ? static_cast<zip_uint64_t>(file.st_size) : 0;
  std::vector<std::pair<std::string, Tensor>> out;
  const zip_int64_t n = zip_get_num_entries(archive, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    if (zip_stat_index(archive, static_cast<zip_uint64_t>(i), 0, &st) != 0) {
      return absl::DataLossError(absl::StrCat(path, ": member ", i, ": ", ZipError(archive)));
    }
    const std::string name = st.name;
    if (!absl::EndsWith(name, ".npy")) continue;
    // Deflate expands at most ~1032:1, so a member claiming more than that
    // over its compressed size is damaged or hostile: refused before the
    // buffer for it is allocated.
    if (st.size > kMaxMemberBytes || st.comp_size > file_bytes || st.size > 1100 * st.comp_size + 1024) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": member ", name, " claims ", st.size, " bytes (",
                                                     st.comp_size, " compressed); refused"));
    }
    zip_file_t* file = zip_fopen_index(archive, static_cast<zip_uint64_t>(i), 0);
    if (file == nullptr) return absl::DataLossError(absl::StrCat(path, ": ", name, ": ", ZipError(archive)));
    std::string bytes(st.size, '\0');
    const zip_int64_t got = zip_fread(file, bytes.data(), st.size);
    zip_fclose(file);
    if (got < 0 || static_cast<zip_uint64_t>(got) != st.size) {
      return absl::DataLossError(absl::StrCat(path, ": ", name, ": short read"));
    }
    absl::StatusOr<Tensor> tensor = DecodeNpy(bytes);
    if (!tensor.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, ": ", tensor.status().message()));
    out.emplace_back(std::string(absl::StripSuffix(name, ".npy")), *std::move(tensor));
  }
  return out;
}

}  // namespace nereid
