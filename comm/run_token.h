#ifndef NEREID_COMM_RUN_TOKEN_H_
#define NEREID_COMM_RUN_TOKEN_H_

// A run's secret token: what proves that a process belongs to the run.
//
// The local launcher makes a fresh token for every run and hands it to its
// workers in the environment (never on a command line, which other users of
// the machine can read in /proc). Across machines the user gives the same
// token to every process, with `--token-file FILE` (a file only its owner can
// read) or the NEREID_TOKEN environment variable.
//
// The token never travels: the TCP store (tcp_store.h) asks every connection
// for an HMAC-SHA256 of a fresh challenge, and every identity a rank
// publishes in the rendezvous store (any kind: tcp, file or redis) carries an
// HMAC of its key and contents, so a process without the token can neither
// read the store nor pass for a rank. See SECURITY.md for what a token does
// not protect (Gloo's own data connections are neither authenticated nor
// encrypted).

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/launch_env.h"
#include "comm/rendezvous_spec.h"

namespace nereid {

inline constexpr char kRunTokenEnvVar[] = "NEREID_TOKEN";
// A token shorter than this is refused: it could be guessed.
inline constexpr size_t kMinRunTokenBytes = 16;

inline constexpr size_t kRunTokenMacBytes = 32;

// 64 hex digits from the system's cryptographic random source (the process
// aborts, saying so, when there is none: a guessable token is worse).
std::string NewRunToken();
// `n` bytes from the same source, for challenges.
void SecureRandomBytes(char* out, size_t n);

// The token this process was given: the contents of `token_file` (when not
// empty; trailing whitespace dropped; refused when group or others may read
// it, as ssh refuses a private key), else $NEREID_TOKEN, else "" (none).
// Errors name the file or the variable.
absl::StatusOr<std::string> ResolveRunToken(const std::string& token_file, const EnvGetter& env);

// Whether `host` names this machine only (localhost, 127.0.0.0/8, ::1).
bool IsLoopbackHost(absl::string_view host);

// A run met through a store other machines can reach (tcp:// or redis:// on
// a host that is not loopback) needs a token, unless the user said
// `--insecure`: FailedPrecondition saying how to give one.
absl::Status CheckRendezvousToken(const RendezvousSpec& spec, bool insecure);

// HMAC-SHA256 of `message` under `token` (32 raw bytes), and a comparison
// that takes the same time wherever the two differ.
std::string RunTokenMac(absl::string_view token, absl::string_view message);
bool MacsEqual(absl::string_view a, absl::string_view b);

// A rendezvous value signed for its key: "<payload>\nmac <hex>" with a token,
// "<payload>\nmac none" without. OpenSignedValue returns the payload, or
// PermissionDenied saying whether the writer or the reader had no token, or
// they hold different ones (`writer` and `reader` name them: "rank 1").
std::string SignValue(absl::string_view token, absl::string_view key, absl::string_view payload);
absl::StatusOr<std::string> OpenSignedValue(absl::string_view token, absl::string_view key, absl::string_view value,
                                            absl::string_view writer, absl::string_view reader);

}  // namespace nereid

#endif  // NEREID_COMM_RUN_TOKEN_H_
