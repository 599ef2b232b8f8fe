#ifndef NEREID_COMM_TCP_STORE_H_
#define NEREID_COMM_TCP_STORE_H_

// A rendezvous key-value store over TCP (`tcp://HOST:PORT`): rank 0 serves it
// from a thread of its own process, every rank (rank 0 included) is a client.
// So a run needs no shared file system and no Redis, only an address all
// ranks reach: what torchrun, mpirun and Slurm users give as MASTER_ADDR and
// MASTER_PORT.
//
// The protocol (one TCP connection per client, requests answered in order):
//   'S' key value   write a key once        -> 0 (written) or 1 (taken)
//   'G' key         read a key              -> 1 value, or 0 (absent)
//   'C' n key...    are all these present?  -> 1 or 0
// A key or value is a 32-bit little-endian length and its bytes. Keys are at
// most 4 KiB, values at most 1 MiB and a store at most 64 MiB in all: a
// malformed or hostile request closes its connection, it never sizes an
// allocation beyond those bounds.
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

// Starts (once per process and address) the server on host:port. An address
// that cannot be bound (taken, not this machine's) is Unavailable, naming it.
absl::Status ServeTcpStore(const std::string& host, int port);

class TcpStoreClient : public gloo::rendezvous::Store {
 public:
  // Connects, retrying until `timeout` (the server's rank may start later).
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, int port,
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
