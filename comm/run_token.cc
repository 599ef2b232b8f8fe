#include "comm/run_token.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nereid {
namespace {

constexpr absl::string_view kMacPrefix = "\nmac ";
constexpr absl::string_view kNoMac = "none";
// A token file is a few bytes; anything larger is not one.
constexpr std::streamsize kMaxTokenFileBytes = 4096;

absl::StatusOr<std::string> Checked(std::string token, const std::string& from) {
  token = std::string(absl::StripAsciiWhitespace(token));
  if (token.size() < kMinRunTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(from, " holds a token of ", token.size(), " characters; at least ",
                                                   kMinRunTokenBytes,
                                                   " are needed (make one with: head -c 32 /dev/urandom | xxd -p -c 64)"));
  }
  return token;
}

}  // namespace

void SecureRandomBytes(char* out, size_t n) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out), static_cast<int>(n)) == 1) return;
  // RAND_bytes fails only without an entropy source; /dev/urandom is one.
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (urandom.read(out, static_cast<std::streamsize>(n)) && urandom.gcount() == static_cast<std::streamsize>(n)) return;
  // A guessable secret would be worse than no run at all.
  std::fprintf(stderr, "fatal: no cryptographic random source (OpenSSL's RAND_bytes and /dev/urandom failed)\n");
  std::abort();
}

std::string NewRunToken() {
  char bytes[32];
  SecureRandomBytes(bytes, sizeof(bytes));
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

absl::StatusOr<std::string> ResolveRunToken(const std::string& token_file, const EnvGetter& env) {
  if (!token_file.empty()) {
    struct stat st {};
    if (::stat(token_file.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("--token-file ", token_file, ": ", std::strerror(errno)));
    }
    if ((st.st_mode & 077) != 0) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "--token-file %s: permissions %04o let others read the run's secret; run: chmod 600 %s", token_file,
          st.st_mode & 0777, token_file));
    }
    std::ifstream in(token_file, std::ios::binary);
    std::string text(kMaxTokenFileBytes + 1, '\0');
    in.read(text.data(), kMaxTokenFileBytes + 1);
    if (in.bad()) return absl::UnavailableError(absl::StrCat("--token-file ", token_file, ": cannot read it"));
    if (in.gcount() > kMaxTokenFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file ", token_file, ": more than ", kMaxTokenFileBytes, " bytes; a token is one line"));
    }
    text.resize(static_cast<size_t>(in.gcount()));
    return Checked(std::move(text), absl::StrCat("--token-file ", token_file));
  }
  if (std::optional<std::string> value = env(kRunTokenEnvVar); value.has_value() && !value->empty()) {
    return Checked(*value, kRunTokenEnvVar);
  }
  return std::string();
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, std::string(host).c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

absl::Status CheckRendezvousToken(const RendezvousSpec& spec, bool insecure) {
  if (!spec.token.empty() || insecure || spec.kind == RendezvousSpec::Kind::kFile || IsLoopbackHost(spec.host)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--rendezvous ", spec.ToString(),
      " can be reached from other machines, and this process has no run token: anyone who reaches it could join "
      "or stall the run. Give every process the same secret with --token-file FILE (chmod 600) or ",
      kRunTokenEnvVar, "=..., or pass --insecure on a network you trust (see SECURITY.md)"));
}

std::string RunTokenMac(absl::string_view token, absl::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // An empty key is valid HMAC; OpenSSL wants a non-null pointer for it.
  static const char kEmpty = 0;
  if (HMAC(EVP_sha256(), token.empty() ? &kEmpty : token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &length) == nullptr ||
      length != kRunTokenMacBytes) {
    // An empty or short MAC would compare equal to another: never go on.
    std::fprintf(stderr, "fatal: HMAC-SHA256 failed in OpenSSL\n");
    std::abort();
  }
  return std::string(reinterpret_cast<const char*>(mac), length);
}

bool MacsEqual(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {
std::string ValueMac(absl::string_view token, absl::string_view key, absl::string_view payload) {
  return RunTokenMac(token, absl::StrCat("nereid-rendezvous-value", absl::string_view("\0", 1), key,
                                         absl::string_view("\0", 1), payload));
}
}  // namespace

std::string SignValue(absl::string_view token, absl::string_view key, absl::string_view payload) {
  if (token.empty()) return absl::StrCat(payload, kMacPrefix, kNoMac);
  return absl::StrCat(payload, kMacPrefix, absl::BytesToHexString(ValueMac(token, key, payload)));
}

absl::StatusOr<std::string> OpenSignedValue(absl::string_view token, absl::string_view key, absl::string_view value,
                                            absl::string_view writer, absl::string_view reader) {
  const size_t at = value.rfind(kMacPrefix);
  if (at == absl::string_view::npos) {
    return absl::PermissionDeniedError(absl::StrCat(writer, "'s value under ", key, " carries no signature"));
  }
  const absl::string_view payload = value.substr(0, at);
  const absl::string_view mac = value.substr(at + kMacPrefix.size());
  const std::string how = absl::StrCat(" (give every process the run's token: --token-file FILE or ",
                                       kRunTokenEnvVar, "; see SECURITY.md)");
  if (mac == kNoMac) {
    if (token.empty()) return std::string(payload);
    return absl::PermissionDeniedError(absl::StrCat(
        writer, " has no run token and ", reader, " has one: a process without the run's token cannot join", how));
  }
  if (token.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat(writer, " has a run token and ", reader, " has none: ", reader, " cannot join the run", how));
  }
  if (mac.size() != 2 * kRunTokenMacBytes || !MacsEqual(absl::BytesToHexString(ValueMac(token, key, payload)), mac)) {
    return absl::PermissionDeniedError(
        absl::StrCat(writer, " holds another token than ", reader, " (two runs mixed, or a stranger)", how));
  }
  return std::string(payload);
}

}  // namespace nereid
