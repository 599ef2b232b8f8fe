#include "comm/store_handshake.h"

#include "absl/strings/str_cat.h"
#include "comm/run_token.h"

namespace nereid::store_handshake {
namespace {

std::string Mac(absl::string_view side, absl::string_view token, absl::string_view server_nonce,
                absl::string_view client_nonce) {
  return RunTokenMac(token, absl::StrCat("nereid-store ", side, absl::string_view("\0", 1), server_nonce, client_nonce));
}

}  // namespace

std::string NewNonce() {
  std::string nonce(kNonceBytes, '\0');
  SecureRandomBytes(nonce.data(), nonce.size());
  return nonce;
}

std::string Challenge(absl::string_view server_nonce) { return absl::StrCat(kMagic, server_nonce); }

std::string Answer(absl::string_view token, absl::string_view server_nonce, absl::string_view client_nonce) {
  return absl::StrCat(std::string(1, token.empty() ? kNoToken : kHasToken), client_nonce,
                      Mac("client", token, server_nonce, client_nonce));
}

std::string Accept(absl::string_view token, absl::string_view server_nonce, absl::string_view client_nonce) {
  return absl::StrCat(std::string(1, kAccepted), Mac("server", token, server_nonce, client_nonce));
}

std::string RefusalOf(absl::string_view token, absl::string_view server_nonce, absl::string_view answer) {
  if (answer.size() != kAnswerBytes || (answer[0] != kHasToken && answer[0] != kNoToken)) return "not a Nereid client";
  const absl::string_view client_nonce = answer.substr(1, kNonceBytes);
  if (MacsEqual(answer.substr(1 + kNonceBytes), Mac("client", token, server_nonce, client_nonce))) return "";
  return answer[0] == kNoToken ? "no token" : "wrong token";
}

bool AcceptIsValid(absl::string_view token, absl::string_view server_nonce, absl::string_view client_nonce,
                   absl::string_view accept) {
  return accept.size() == kAcceptBytes && accept[0] == kAccepted &&
         MacsEqual(accept.substr(1), Mac("server", token, server_nonce, client_nonce));
}

}  // namespace nereid::store_handshake
