#ifndef NEREID_COMM_TCP_STORE_H_
#define NEREID_COMM_TCP_STORE_H_

// A rendezvous key-value store over TCP (`tcp://HOST:PORT`): rank 0 serves it
// from threads of its own process, every rank (rank 0 included) is a client.
// So a run needs no shared file system and no Redis, only an address all
// ranks reach: what torchrun, mpirun and Slurm users give as MASTER_ADDR and
// MASTER_PORT.
//
// Every connection first proves it holds the run's token (run_token.h):
//   server: "NRD1" + a 16-byte random challenge
//   client: 'T' (has a token) or 'N' (has none) + its own 16-byte challenge
//           + HMAC-SHA256(token, "nereid-store client" + both challenges)
//   server: 'A' + HMAC-SHA256(token, "nereid-store server" + both challenges),
//           or 'R' (refused: wrong or missing token) or 'F' (full), and closes.
// So the token never travels, a client knows it reached its run's store, and
// a replayed answer is worthless. A run without a token uses the empty key
// (only on loopback, or with --insecure: run_token.h).
//
// Then requests, answered in order:
//   'S' key value   write a key once        -> 0 (written) or 1 (taken)
//   'G' key         read a key              -> 1 value, or 0 (absent)
//   'C' n key...    are all these present?  -> 1 or 0
// A key or value is a 32-bit little-endian length and its bytes.
//
// Bounds, so that whoever reaches the port cannot bloat rank 0 or lock the
// ranks out: connections that have not authenticated are held by one thread
// with no buffer beyond the 49-byte answer, for at most 5 s; at most half of
// the descriptors the process may open beyond a reserve of 512 (with common
// limits 4096 in all and 1024 per peer address), the oldest silent one
// dropped for a newcomer; answers already waiting are read before more
// connections are accepted. At most 1024 authenticated connections, each
// with a thread; keys at most 4 KiB, values 1 MiB, the store 64 MiB,
// announced but unsent bytes 64 MiB in all; a request's bytes may pause at
// most 30 s each. Dropped connections are logged by peer and reason (the
// first at once, then a count every few seconds; 64 kinds kept apart) and
// reported by TcpStoreDropReport, which rank 0 adds to a rendezvous that
// timed out.
//
// The server lives as long as the process (a run's sub-groups open the store
// again after the first rendezvous); it stops accepting when the process
// exits. Serving the same HOST:PORT twice in one process reuses the server.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gloo/rendezvous/store.h"

namespace nereid {

// Starts (once per process and address) the server on host:port for the run
// holding `token`. An address that cannot be bound (taken, not this
// machine's) is Unavailable, naming it.
absl::Status ServeTcpStore(const std::string& host, int port, const std::string& token);

// What the server at host:port (in this process) dropped so far: "" when
// nothing, else "976 connections from 127.0.0.1: too many connections from
// one address waiting to authenticate; 1024 connections from 127.0.0.1: no
// token (idle past 5 s)".
std::string TcpStoreDropReport(const std::string& host, int port);

class TcpStoreClient : public gloo::rendezvous::Store {
 public:
  // Connects and authenticates, retrying until `timeout` (the server's rank
  // may start later, or a flood may have pushed this connection out). A
  // refused token is PermissionDenied at once.
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, int port,
                                                                  const std::string& token,
                                                                  std::chrono::milliseconds timeout);
  ~TcpStoreClient() override;

  // gloo::rendezvous::Store. Gloo's interface reports errors by throwing
  // (gloo::IoException), which CallGloo turns into a status.
  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key up to the default timeout, then reads it.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // Whether every key is present now (no waiting).
  bool check(const std::vector<std::string>& keys);

 private:
  TcpStoreClient(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  // Sends a request and returns the one-byte answer; with `value`, reads the
  // value that follows an answer of 1 ('G').
  char Call(const std::string& request, std::string* value);

  std::mutex mu_;  // one request at a time on the connection
  int fd_;
  std::string address_;
};

}  // namespace nereid

#endif  // NEREID_COMM_TCP_STORE_H_
