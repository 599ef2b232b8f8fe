#ifndef NEREID_COMM_STORE_HANDSHAKE_H_
#define NEREID_COMM_STORE_HANDSHAKE_H_

// The TCP store's opening exchange (tcp_store.h): each side proves it holds
// the run's token without sending it. Pure functions over bytes, so both ends
// and the tests share one definition.

#include <string>

#include "absl/strings/string_view.h"

namespace nereid::store_handshake {

inline constexpr absl::string_view kMagic = "NRD1";
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMacBytes = 32;
// Server's challenge: magic + nonce.
inline constexpr size_t kChallengeBytes = 4 + kNonceBytes;
// Client's answer: 'T'/'N' + nonce + MAC.
inline constexpr size_t kAnswerBytes = 1 + kNonceBytes + kMacBytes;
// Server's verdict: 'A' + MAC, or one byte 'R' (refused) / 'F' (full).
inline constexpr size_t kAcceptBytes = 1 + kMacBytes;
inline constexpr char kHasToken = 'T';
inline constexpr char kNoToken = 'N';
inline constexpr char kAccepted = 'A';
inline constexpr char kRefused = 'R';
inline constexpr char kFull = 'F';

// kNonceBytes from the system's cryptographic random source.
std::string NewNonce();

std::string Challenge(absl::string_view server_nonce);
std::string Answer(absl::string_view token, absl::string_view server_nonce, absl::string_view client_nonce);
std::string Accept(absl::string_view token, absl::string_view server_nonce, absl::string_view client_nonce);

// Why the server refuses `answer` (kAnswerBytes long) to its challenge:
// "" when it proves the token, else "no token" or "wrong token".
std::string RefusalOf(absl::string_view token, absl::string_view server_nonce, absl::string_view answer);

// Whether `accept` (kAcceptBytes long) proves the server holds the token.
bool AcceptIsValid(absl::string_view token, absl::string_view server_nonce, absl::string_view client_nonce,
                   absl::string_view accept);

}  // namespace nereid::store_handshake

#endif  // NEREID_COMM_STORE_HANDSHAKE_H_
