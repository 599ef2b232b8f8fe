#include "runtime/checkpoint.h"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include <cstring>
#include <filesystem>
#include <optional>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/file_io.h"
#include "core/fingerprint.h"
#include "core/status_macros.h"
#include "core/tensor_shape.h"

namespace nereid {
namespace {

// Where a checkpoint file stands: epochs completed, then whether it was
// written within the next epoch, then its step (epoch-N.ckpt is older than
// epoch-N-step-S.ckpt, which is older than epoch-(N+1).ckpt).
struct CheckpointOrder {
  int64_t epochs = 0;
  bool within_epoch = false;
  int64_t step = 0;
  bool operator<(const CheckpointOrder& o) const {
    return std::tie(epochs, within_epoch, step) < std::tie(o.epochs, o.within_epoch, o.step);
  }
};

// The order of a checkpoint file's name, or nullopt for another file.
std::optional<CheckpointOrder> OrderOf(absl::string_view name) {
  CheckpointOrder order;
  if (!absl::ConsumePrefix(&name, "epoch-") || !absl::ConsumeSuffix(&name, ".ckpt")) return std::nullopt;
  if (const size_t at = name.find("-step-"); at != absl::string_view::npos) {
    order.within_epoch = true;
    if (!absl::SimpleAtoi(name.substr(at + 6), &order.step)) return std::nullopt;
    name = name.substr(0, at);
  }
  if (!absl::SimpleAtoi(name, &order.epochs)) return std::nullopt;
  return order;
}


constexpr char kMagic[8] = {'N', 'E', 'R', 'E', 'I', 'D', 'C', 'K'};
constexpr uint32_t kVersion = 2;  // 1: no run identity
constexpr uint32_t kMaxTensors = 1 << 20;
constexpr uint32_t kMaxNameLength = 4096;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

class Reader {
 public:
  Reader(absl::string_view data, std::string path) : data_(data), path_(std::move(path)) {}
  template <typename T>
  absl::StatusOr<T> Get(const char* what) {
    T v;
    if (data_.size() - pos_ < sizeof(T)) return Truncated(what);
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  absl::StatusOr<absl::string_view> Bytes(uint64_t n, const char* what) {
    if (data_.size() - pos_ < n) return Truncated(what);
    absl::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  absl::Status Error(absl::string_view msg) const {
    return absl::DataLossError(absl::StrCat(path_, ": ", msg, " (at byte ", pos_, ")"));
  }

 private:
  absl::Status Truncated(const char* what) const { return Error(absl::StrCat("truncated while reading ", what)); }
  absl::string_view data_;
  std::string path_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status SaveCheckpoint(const std::string& dir, const Checkpoint& c) {
  std::error_code error;  // parents too: per-rank state goes to DIR/rank-<r>
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat(dir, ": cannot create the checkpoint directory: ", error.message()));
  }
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, kVersion);
  Put<int64_t>(&out, c.epochs_completed);
  Put<int64_t>(&out, c.step);
  Put<uint32_t>(&out, static_cast<uint32_t>(c.run_identity.size()));
  out.append(c.run_identity);
  Put<uint32_t>(&out, static_cast<uint32_t>(c.tensors.size()));
  for (const auto& [name, t] : c.tensors) {
    Put<uint32_t>(&out, static_cast<uint32_t>(name.size()));
    out.append(name);
    Put<int32_t>(&out, t.dtype());
    Put<uint32_t>(&out, static_cast<uint32_t>(t.rank()));
    for (int64_t d : t.dims()) Put<int64_t>(&out, d);
    Put<uint64_t>(&out, static_cast<uint64_t>(t.num_bytes()));
    out.append(static_cast<const char*>(t.raw()), t.num_bytes());
  }
  Put<uint64_t>(&out, Fnv1a(out));
  const std::string file = CheckpointFileName(c);
  RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(dir, "/", file), out));
  RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(dir, "/LATEST"), absl::StrCat(file, "\n")));
  // Older checkpoints from within an epoch: LATEST now names a newer one.
  std::vector<std::filesystem::path> older;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    std::optional<CheckpointOrder> order = OrderOf(name);
    if (order.has_value() && order->within_epoch && name != file) older.push_back(entry.path());
  }
  for (const std::filesystem::path& path : older) std::filesystem::remove(path, error);
  return absl::OkStatus();
}

std::string CheckpointFileName(const Checkpoint& c) {
  if (c.within_epoch) return absl::StrCat("epoch-", c.epochs_completed, "-step-", c.step, ".ckpt");
  return absl::StrCat("epoch-", c.epochs_completed, ".ckpt");
}

absl::StatusOr<Checkpoint> LoadLatestCheckpoint(const std::string& dir) {
  // What LATEST names, if it is readable and valid.
  std::string reason, tried;
  absl::StatusOr<std::string> latest = ReadFileToString(absl::StrCat(dir, "/LATEST"));
  if (latest.ok()) {
    std::string name(absl::StripAsciiWhitespace(*latest));
    if (name.empty() || name.find('/') != std::string::npos) {
      reason = absl::StrCat(dir, "/LATEST does not name a checkpoint file");
    } else {
      tried = absl::StrCat(dir, "/", name);
      absl::StatusOr<Checkpoint> c = ReadCheckpointFile(tried);
      if (c.ok()) {
        c->path = absl::StrCat(dir, "/", name);
        return c;
      }
      reason = std::string(c.status().message());
    }
  } else {
    reason = absl::StrCat(dir, "/LATEST is missing");
  }
  // The newest valid checkpoint file instead.
  std::vector<std::pair<CheckpointOrder, std::string>> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::optional<CheckpointOrder> order = OrderOf(entry.path().filename().string());
    if (order.has_value()) found.emplace_back(*order, entry.path().string());
  }
  if (found.empty()) {
    if (latest.ok()) return absl::DataLossError(absl::StrCat("no valid checkpoint in ", dir, ": ", reason));
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
  }
  std::sort(found.rbegin(), found.rend());
  std::string faults = reason;
  for (const auto& [order, path] : found) {
    if (std::filesystem::path(path) == std::filesystem::path(tried)) continue;  // its fault is in `reason`
    absl::StatusOr<Checkpoint> c = ReadCheckpointFile(path);
    if (c.ok()) {
      c->path = path;
      c->fallback_reason = reason;
      return c;
    }
    absl::StrAppend(&faults, "; ", c.status().message());
  }
  return absl::DataLossError(absl::StrCat("no valid checkpoint in ", dir, ": ", faults));
}

int RemoveStaleTemporaryFiles(const std::string& dir) {
  int removed = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string file = entry.path().filename().string();
    const size_t at = file.rfind(".tmp.");
    int pid;
    if (at == std::string::npos || !absl::SimpleAtoi(file.substr(at + 5), &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its writer may still be running
    std::error_code ignored;
    if (std::filesystem::remove(entry.path(), ignored)) ++removed;
  }
  return removed;
}

absl::StatusOr<Checkpoint> ReadCheckpointFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  Reader r(data, path);
  if (data.size() < sizeof(kMagic) + 8 || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return r.Error("not a Nereid checkpoint (bad magic)");
  }
  uint64_t stored_hash;
  std::memcpy(&stored_hash, data.data() + data.size() - 8, 8);
  if (Fnv1a(absl::string_view(data).substr(0, data.size() - 8)) != stored_hash) {
    return r.Error("checksum mismatch: the file is corrupt");
  }
  Reader body(absl::string_view(data).substr(0, data.size() - 8), path);
  RETURN_IF_ERROR(body.Bytes(sizeof(kMagic), "magic").status());
  ASSIGN_OR_RETURN(uint32_t version, body.Get<uint32_t>("version"));
  if (version != 1 && version != kVersion) {
    return body.Error(absl::StrCat("version ", version, " is not 1 or ", kVersion));
  }
  Checkpoint c;
  ASSIGN_OR_RETURN(c.epochs_completed, body.Get<int64_t>("epoch"));
  ASSIGN_OR_RETURN(c.step, body.Get<int64_t>("step"));
  if (version >= 2) {
    ASSIGN_OR_RETURN(uint32_t length, body.Get<uint32_t>("run identity length"));
    if (length > kMaxNameLength) return body.Error("implausible run identity length");
    ASSIGN_OR_RETURN(absl::string_view identity, body.Bytes(length, "run identity"));
    c.run_identity = std::string(identity);
  }
  ASSIGN_OR_RETURN(uint32_t count, body.Get<uint32_t>("tensor count"));
  if (count > kMaxTensors) return body.Error(absl::StrCat("implausible tensor count ", count));
  for (uint32_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(uint32_t length, body.Get<uint32_t>("name length"));
    if (length > kMaxNameLength) return body.Error("implausible name length");
    ASSIGN_OR_RETURN(absl::string_view name, body.Bytes(length, "name"));
    ASSIGN_OR_RETURN(int32_t dtype, body.Get<int32_t>("dtype"));
    ASSIGN_OR_RETURN(uint32_t rank, body.Get<uint32_t>("rank"));
    if (rank > static_cast<uint32_t>(kMaxRank) || !DataType_IsValid(dtype)) return body.Error("bad dtype or rank");
    std::vector<int64_t> dims(rank);
    for (uint32_t d = 0; d < rank; ++d) {
      ASSIGN_OR_RETURN(dims[d], body.Get<int64_t>("dims"));
    }
    ASSIGN_OR_RETURN(uint64_t bytes, body.Get<uint64_t>("byte count"));
    absl::StatusOr<int64_t> elements = CheckedElementCount(dims);
    if (!elements.ok() || static_cast<uint64_t>(*elements) * DataTypeSize(static_cast<DataType>(dtype)) != bytes) {
      return body.Error(absl::StrCat("tensor '", name, "': byte count disagrees with its dims"));
    }
    // Read (bounds-checked against the file) before allocating anything.
    ASSIGN_OR_RETURN(absl::string_view raw, body.Bytes(bytes, "tensor data"));
    absl::StatusOr<Tensor> t = Tensor::Allocate(static_cast<DataType>(dtype), dims);
    if (!t.ok()) return body.Error(t.status().message());
    if (bytes > 0) std::memcpy(t->raw(), raw.data(), bytes);
    c.tensors.emplace_back(std::string(name), *std::move(t));
  }
  return c;
}

}  // namespace nereid
