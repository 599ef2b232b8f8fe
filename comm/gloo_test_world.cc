#include "comm/gloo_test_world.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/rendezvous.h"

namespace nereid {
namespace testing {

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t n = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

int DialLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string TestTempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) : std::string("/tmp");
}

RendezvousSpec LocalFileSpec(absl::string_view label) {
  static std::atomic<int> counter{0};
  RendezvousSpec spec;
  spec.kind = RendezvousSpec::Kind::kFile;
  spec.path = absl::StrCat(TestTempDir(), "/rendezvous");
  spec.run_id = absl::StrCat(label, "-", getpid(), "-", counter.fetch_add(1));
  return spec;
}

std::vector<absl::Status> RunOnRanks(int world, const std::function<absl::Status(int rank)>& fn) {
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&statuses, &fn, r] { statuses[r] = fn(r); });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

absl::Status AllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(statuses[r].code(), absl::StrCat("rank ", r, ": ", statuses[r].message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> ConnectWorld(const RendezvousSpec& spec, int world,
                                                                        absl::Duration connect_timeout) {
  std::vector<std::unique_ptr<Communicator>> communicators(world);
  GlooConnectOptions options;
  options.connect_timeout = connect_timeout;
  const absl::Status status = AllOk(RunOnRanks(world, [&](int rank) -> absl::Status {
    WorkerIdentity identity{"test", "plan", world};
    absl::StatusOr<std::unique_ptr<Communicator>> c = ConnectGloo(spec, rank, world, identity, options);
    if (!c.ok()) return c.status();
    communicators[rank] = std::move(*c);
    return absl::OkStatus();
  }));
  if (!status.ok()) return status;
  return communicators;
}

}  // namespace testing
}  // namespace nereid
