#include "comm/message_verification.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace nereid {
namespace {

// The trailer: CRC-32 of the payload, the tag, the sequence number, each a
// uint32 carried in a float's bits (the transfers copy bytes unchanged).
constexpr size_t kTrailer = 3;

uint32_t Crc(absl::Span<const float> data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(data.data());
  size_t left = data.size() * sizeof(float);
  // zlib takes uInt lengths: feed it in pieces below 4 GiB.
  while (left > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
    crc = crc32(crc, bytes, piece);
    bytes += piece;
    left -= piece;
  }
  return static_cast<uint32_t>(crc);
}

float Bits(uint32_t v) {
  float f;
  std::memcpy(&f, &v, sizeof(f));
  return f;
}

uint32_t Word(float f) {
  uint32_t v;
  std::memcpy(&v, &f, sizeof(v));
  return v;
}

std::vector<float> Pack(absl::Span<const float> data, uint32_t tag, uint32_t sequence) {
  std::vector<float> message(data.size() + kTrailer);
  std::memcpy(message.data(), data.data(), data.size() * sizeof(float));
  message[data.size()] = Bits(Crc(data));
  message[data.size() + 1] = Bits(tag);
  message[data.size() + 2] = Bits(sequence);
  return message;
}

}  // namespace

uint32_t VerifyingCommunicator::NextSent(int peer, uint32_t tag) {
  absl::MutexLock lock(&mu_);
  return sent_[{peer, tag}]++;
}

uint32_t VerifyingCommunicator::NextReceived(int peer, uint32_t tag) {
  absl::MutexLock lock(&mu_);
  return received_[{peer, tag}]++;
}

absl::Status VerifyingCommunicator::Unpack(absl::Span<const float> message, absl::Span<float> data, int peer,
                                           uint32_t tag, const char* op) {
  const absl::Span<const float> payload = message.subspan(0, data.size());
  const uint32_t crc = Word(message[data.size()]), got_tag = Word(message[data.size() + 1]),
                 sequence = Word(message[data.size() + 2]);
  const uint32_t expected_sequence = NextReceived(peer, tag);
  const std::string where = absl::StrCat("--verify-messages: rank ", rank(), " ", op, " from rank ", peer, " (tag ",
                                         tag, ", ", data.size(), " floats): ");
  if (got_tag != tag) {
    return absl::DataLossError(absl::StrCat(where, "the message was sent with tag ", got_tag, " (misdirected)"));
  }
  if (sequence != expected_sequence) {
    return absl::DataLossError(absl::StrCat(where, "message ", sequence, " of this tag arrived where message ",
                                            expected_sequence, " was due (duplicated or reordered)"));
  }
  const uint32_t actual = Crc(payload);
  if (actual != crc) {
    return absl::DataLossError(absl::StrFormat("%spayload CRC-32 %08x, the sender's was %08x (changed in transit)",
                                               where, actual, crc));
  }
  std::memcpy(data.data(), payload.data(), data.size() * sizeof(float));
  return absl::OkStatus();
}

absl::Status VerifyingCommunicator::Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) {
  const std::vector<float> message = Pack(data, options.tag, NextSent(peer, options.tag));
  return inner_->Send(message, peer, options);
}

absl::Status VerifyingCommunicator::Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) {
  std::vector<float> message(data.size() + kTrailer);
  if (absl::Status s = inner_->Recv(absl::MakeSpan(message), peer, options); !s.ok()) return s;
  return Unpack(message, data, peer, options.tag, "recv");
}

absl::Status VerifyingCommunicator::SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                             const CollectiveOptions& options) {
  if (to == rank() && from == rank()) return inner_->SendRecv(send, to, recv, from, options);  // a local copy
  const std::vector<float> out = Pack(send, options.tag, NextSent(to, options.tag));
  std::vector<float> in(recv.size() + kTrailer);
  if (absl::Status s = inner_->SendRecv(out, to, absl::MakeSpan(in), from, options); !s.ok()) return s;
  return Unpack(in, recv, from, options.tag, "sendrecv");
}

absl::Status VerifyingCommunicator::CompareAcrossRanks(const char* op, absl::Span<const float> result,
                                                       const CollectiveOptions& options) {
  // Two 16-bit halves, each exact as a float, so no wire format or NaN
  // pattern can touch them.
  const uint32_t crc = Crc(result);
  const float mine[2] = {static_cast<float>(crc & 0xffff), static_cast<float>(crc >> 16)};
  std::vector<float> all(2 * static_cast<size_t>(world()));
  CollectiveOptions check = options;
  check.wire = WireType::kFloat32;
  if (absl::Status s = inner_->AllGather(absl::MakeConstSpan(mine, 2), absl::MakeSpan(all), check); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("--verify-messages: comparing the ", op, "'s result: ", s.message()));
  }
  std::vector<int> differ;
  for (int r = 1; r < world(); ++r) {
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) differ.push_back(r);
  }
  if (differ.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("--verify-messages: ", op, " (tag ", options.tag, ", ", result.size(),
                                          " floats) ended with different values on rank(s) ",
                                          absl::StrJoin(differ, ","), " than on rank 0 (seen from rank ", rank(),
                                          ")"));
}

absl::Status VerifyingCommunicator::AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) {
  if (absl::Status s = inner_->AllReduce(data, op, options); !s.ok()) return s;
  return CompareAcrossRanks("allreduce", data, options);
}

absl::Status VerifyingCommunicator::AllGather(absl::Span<const float> in, absl::Span<float> out,
                                              const CollectiveOptions& options) {
  if (absl::Status s = inner_->AllGather(in, out, options); !s.ok()) return s;
  return CompareAcrossRanks("allgather", out, options);
}

absl::Status VerifyingCommunicator::Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) {
  if (absl::Status s = inner_->Broadcast(data, root, options); !s.ok()) return s;
  return CompareAcrossRanks("broadcast", data, options);
}

std::unique_ptr<Communicator> WithMessageVerification(std::unique_ptr<Communicator> inner) {
  return std::make_unique<VerifyingCommunicator>(std::move(inner));
}

}  // namespace nereid
