#ifndef NEREID_COMM_RENDEZVOUS_SPEC_H_
#define NEREID_COMM_RENDEZVOUS_SPEC_H_

// Where the ranks of a run meet: a key-value store every rank can reach.
//
//   file:/some/dir       a directory on a file system all ranks share
//                        (gloo::rendezvous::FileStore; the default for runs on
//                        one machine). `file:///some/dir` means the same;
//                        a relative path is taken from the working directory.
//                        The directory is created if missing.
//   redis://host:port    a Redis server (gloo::rendezvous::RedisStore); the
//                        port defaults to 6379; an IPv6 host goes in brackets
//                        (redis://[::1]:6379).
//   tcp://host:port      a store rank 0 serves itself on that address
//                        (comm/tcp_store.h): torchrun's MASTER_ADDR and
//                        MASTER_PORT. The port is required.
//
// Keys are written once, so every run needs its own `run_id`: all keys of a
// run live under "nereid/<run_id>/" (gloo::rendezvous::PrefixStore), and two
// runs that share a store do not mix.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nereid {

struct RendezvousSpec {
  enum class Kind { kFile, kRedis, kTcp };
  Kind kind = Kind::kFile;
  std::string path;  // kFile
  std::string host;  // kRedis, kTcp
  int port = 6379;   // kRedis, kTcp
  std::string run_id = "default";
  // tcp:// only: whether the spec's rank 0 starts the server. A group's spec
  // (communicator_factory.h) says no: its rank 0 may be on any machine, and
  // the world's rank 0 serves the store for the life of its process.
  bool rank0_serves = true;
  // The run's secret (comm/run_token.h); "" for none. Never printed.
  std::string token;

  // "file:/tmp/x", "redis://host:6379" or "tcp://host:29500", without the run id.
  std::string ToString() const;
};

// Parses `spec` (see above); `run_id` must be non-empty and free of '/'.
absl::StatusOr<RendezvousSpec> ParseRendezvousSpec(absl::string_view spec, absl::string_view run_id = "default");

}  // namespace nereid

#endif  // NEREID_COMM_RENDEZVOUS_SPEC_H_
