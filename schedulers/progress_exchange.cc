#include "schedulers/progress_exchange.h"

#include <zlib.h>

#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace nereid {
namespace {

using ::google::protobuf::io::CodedInputStream;
using ::google::protobuf::io::CodedOutputStream;
using ::google::protobuf::io::StringOutputStream;

constexpr char kMagic[4] = {'N', 'P', 'X', 'B'};
constexpr size_t kChecksumBytes = 4;
// The least bytes one delta takes (location, epoch, depth, delta: a varint each),
// so a count larger than the bytes left over this is refused before allocating.
constexpr size_t kMinDeltaBytes = 4;
// CodedInputStream takes an int size; batches are far smaller.
constexpr size_t kMaxEncodedBytes = size_t{1} << 30;

uint64_t ZigZag64(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
int64_t UnZigZag64(uint64_t u) { return static_cast<int64_t>((u >> 1) ^ (uint64_t{0} - (u & 1))); }
uint32_t ZigZag32(int32_t v) { return (static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31); }
int32_t UnZigZag32(uint32_t u) { return static_cast<int32_t>((u >> 1) ^ (uint32_t{0} - (u & 1))); }

uint32_t Checksum(const char* data, size_t size) {
  return static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size)));
}

absl::Status Malformed(const std::string& why) {
  return absl::DataLossError(absl::StrCat("progress exchange: malformed batch: ", why));
}

}  // namespace

std::string EncodeProgressBatch(int rank, uint64_t sequence, absl::Span<const ProgressDelta> deltas) {
  std::string out;
  {
    StringOutputStream stream(&out);
    CodedOutputStream coded(&stream);  // flushes into `out` when destroyed
    coded.WriteRaw(kMagic, sizeof(kMagic));
    coded.WriteVarint32(kProgressBatchVersion);
    coded.WriteVarint32(static_cast<uint32_t>(rank));  // a negative rank decodes above INT_MAX: refused
    coded.WriteVarint64(sequence);
    coded.WriteVarint32(static_cast<uint32_t>(deltas.size()));
    for (const ProgressDelta& d : deltas) {
      coded.WriteVarint32(ZigZag32(d.location));
      coded.WriteVarint64(ZigZag64(d.time.epoch));
      coded.WriteVarint32(static_cast<uint32_t>(d.time.counters.size()));
      for (int64_t c : d.time.counters) coded.WriteVarint64(ZigZag64(c));
      coded.WriteVarint64(ZigZag64(d.delta));
    }
  }
  const uint32_t crc = Checksum(out.data(), out.size());
  for (size_t i = 0; i < kChecksumBytes; ++i) out.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return out;
}

absl::StatusOr<ProgressBatch> DecodeProgressBatch(std::string_view encoded) {
  if (encoded.size() < sizeof(kMagic) + kChecksumBytes) {
    return Malformed(absl::StrCat(encoded.size(), " bytes is shorter than any batch"));
  }
  if (encoded.size() > kMaxEncodedBytes) {
    return Malformed(absl::StrCat(encoded.size(), " bytes is over the limit of ", kMaxEncodedBytes));
  }
  const size_t body_size = encoded.size() - kChecksumBytes;
  uint32_t stored = 0;
  for (size_t i = 0; i < kChecksumBytes; ++i) {
    stored |= static_cast<uint32_t>(static_cast<unsigned char>(encoded[body_size + i])) << (8 * i);
  }
  if (stored != Checksum(encoded.data(), body_size)) {
    return Malformed(absl::StrCat("checksum mismatch over ", encoded.size(), " bytes (truncated or corrupt)"));
  }

  CodedInputStream in(reinterpret_cast<const uint8_t*>(encoded.data()), static_cast<int>(body_size));
  auto left = [&] { return body_size - static_cast<size_t>(in.CurrentPosition()); };
  auto at = [&] { return absl::StrCat(" at byte ", in.CurrentPosition()); };
  char magic[sizeof(kMagic)];
  if (!in.ReadRaw(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return Malformed("not a progress batch (bad magic)");
  }
  uint32_t version = 0;
  if (!in.ReadVarint32(&version)) return Malformed(absl::StrCat("truncated version", at()));
  if (version != kProgressBatchVersion) {
    return Malformed(
        absl::StrCat("version ", version, " is not supported (this build reads version ", kProgressBatchVersion, ")"));
  }
  ProgressBatch batch;
  uint32_t rank = 0;
  uint32_t n = 0;
  if (!in.ReadVarint32(&rank)) return Malformed(absl::StrCat("truncated rank", at()));
  if (rank > static_cast<uint32_t>(INT_MAX)) return Malformed(absl::StrCat("rank ", rank, " is out of range"));
  batch.rank = static_cast<int>(rank);
  if (!in.ReadVarint64(&batch.sequence)) return Malformed(absl::StrCat("truncated sequence", at()));
  if (!in.ReadVarint32(&n)) return Malformed(absl::StrCat("truncated delta count", at()));
  if (n > static_cast<uint32_t>(kMaxProgressBatchDeltas) || n > left() / kMinDeltaBytes) {
    return Malformed(absl::StrCat(n, " deltas cannot fit in the ", left(), " bytes left (limit ",
                                  kMaxProgressBatchDeltas, ")", at()));
  }
  batch.deltas.reserve(n);
  for (uint32_t k = 0; k < n; ++k) {
    uint32_t location = 0;
    uint64_t epoch = 0;
    uint32_t depth = 0;
    uint64_t delta = 0;
    if (!in.ReadVarint32(&location) || !in.ReadVarint64(&epoch) || !in.ReadVarint32(&depth)) {
      return Malformed(absl::StrCat("truncated delta ", k, at()));
    }
    if (depth > static_cast<uint32_t>(kMaxProgressBatchDepth) || depth > left()) {
      return Malformed(absl::StrCat("delta ", k, " has depth ", depth, " (limit ", kMaxProgressBatchDepth, ", ", left(),
                                    " bytes left)", at()));
    }
    ProgressDelta d;
    d.location = UnZigZag32(location);
    d.time.epoch = UnZigZag64(epoch);
    d.time.counters.reserve(depth);
    for (uint32_t i = 0; i < depth; ++i) {
      uint64_t c = 0;
      if (!in.ReadVarint64(&c)) return Malformed(absl::StrCat("truncated counter of delta ", k, at()));
      d.time.counters.push_back(UnZigZag64(c));
    }
    if (!in.ReadVarint64(&delta)) return Malformed(absl::StrCat("truncated delta ", k, at()));
    d.delta = UnZigZag64(delta);
    batch.deltas.push_back(std::move(d));
  }
  if (left() != 0) return Malformed(absl::StrCat(left(), " trailing bytes after ", n, " deltas", at()));
  return batch;
}

absl::StatusOr<ProgressExchange> ProgressExchange::Create(int rank, int num_ranks,
                                                          std::shared_ptr<const Reachability> reachability,
                                                          absl::Span<const ProgressDelta> initial) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress exchange: rank ", rank, " of ", num_ranks, " ranks; need 0 <= rank < num_ranks"));
  }
  absl::StatusOr<ProgressState> state = ProgressState::Create(std::move(reachability), initial);
  if (!state.ok()) return state.status();
  return ProgressExchange(rank, num_ranks, *std::move(state));
}

absl::StatusOr<std::string> ProgressExchange::Local(absl::Span<const ProgressDelta> deltas) {
  if (deltas.size() > static_cast<size_t>(kMaxProgressBatchDeltas)) {
    return absl::InvalidArgumentError(absl::StrCat("progress exchange: rank ", rank_, ": a batch of ", deltas.size(),
                                                   " deltas is over the limit of ", kMaxProgressBatchDeltas));
  }
  for (const ProgressDelta& d : deltas) {
    if (d.time.depth() > kMaxProgressBatchDepth) {
      return absl::InvalidArgumentError(absl::StrCat("progress exchange: rank ", rank_, ": pointstamp ",
                                                     Pointstamp{d.time, d.location}.ToString(), " is deeper than ",
                                                     kMaxProgressBatchDepth, " loops"));
    }
  }
  absl::Status applied = state_.Apply(deltas);
  if (!applied.ok()) return applied;
  return EncodeProgressBatch(rank_, next_sequence_++, deltas);
}

absl::Status ProgressExchange::Absorb(std::string_view encoded) {
  absl::StatusOr<ProgressBatch> batch = DecodeProgressBatch(encoded);
  if (!batch.ok()) return batch.status();
  if (batch->rank >= num_ranks_) {
    return absl::InvalidArgumentError(absl::StrCat("progress exchange: rank ", rank_, " received a batch from rank ",
                                                   batch->rank, ", but there are ", num_ranks_, " ranks"));
  }
  if (batch->rank == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("progress exchange: rank ", rank_,
                                                   " received its own batch (sequence ", batch->sequence,
                                                   "); Local already applied it"));
  }
  uint64_t& expected = expected_[batch->rank];
  if (batch->sequence != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        "progress exchange: rank ", rank_, " received batch sequence ", batch->sequence, " from rank ", batch->rank,
        ", but rank ", batch->rank, "'s next is ", expected, " (batches from one sender apply in order, each once)"));
  }
  absl::Status applied = state_.ApplyRemote(batch->deltas);
  if (!applied.ok()) {
    return absl::Status(applied.code(),
                        absl::StrCat("batch ", batch->sequence, " from rank ", batch->rank, ": ", applied.message()));
  }
  ++expected;
  return absl::OkStatus();
}

uint64_t ProgressExchange::expected_sequence(int sender) const {
  return sender >= 0 && sender < num_ranks_ ? expected_[sender] : 0;
}

}  // namespace nereid
