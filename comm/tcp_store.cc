#include "comm/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/store_handshake.h"
#include "core/logging.h"
#include "gloo/common/error.h"

namespace nereid {
namespace {

namespace hs = store_handshake;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxKeyBytes = 4 << 10;
constexpr uint32_t kMaxValueBytes = 1 << 20;
constexpr size_t kMaxStoreBytes = size_t{64} << 20;
constexpr size_t kMaxAnnouncedBytes = size_t{64} << 20;
constexpr int kMaxConnections = 1024;      // authenticated, each with a thread
constexpr size_t kMaxPending = 4096;       // not yet authenticated, in all
constexpr size_t kMaxPendingPerPeer = 1024;
// Descriptors left to the rest of the process (Gloo's pairs, shared memory,
// checkpoints, data) whatever strangers hold.
constexpr size_t kReservedDescriptors = 512;
// Connections accepted per round of the gate, so answers already waiting
// are read between bursts of a flood.
constexpr int kAcceptsPerRound = 64;
// Distinct (address, reason) pairs the drop log keeps apart; the rest are
// counted as "other addresses".
constexpr size_t kMaxDropKinds = 64;
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
constexpr auto kDropReportInterval = std::chrono::seconds(5);
// Once a request's first byte arrived, the rest must follow within this.
constexpr int kRequestTimeoutSeconds = 30;
constexpr auto kPoll = std::chrono::milliseconds(10);
// A server that stops answering mid-request ends the request after this.
constexpr int kReplyTimeoutSeconds = 60;

std::string Address(const std::string& host, int port) {
  const bool bracket = host.find(':') != std::string::npos;
  return absl::StrCat(bracket ? "[" : "", host, bracket ? "]" : "", ":", port);
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, char* data, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, data, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    data += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void AppendLength(std::string* out, uint32_t n) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
}

bool ReadLength(int fd, uint32_t* n) {
  unsigned char b[4];
  if (!ReadAll(fd, reinterpret_cast<char*>(b), 4)) return false;
  *n = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
       static_cast<uint32_t>(b[3]) << 24;
  return true;
}

void SetReceiveTimeout(int fd, int seconds) {
  const timeval timeout = {seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
}

// The addresses `host:port` names, for binding (passive) or connecting.
absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("tcp store ", Address(host, port), ": ", ::gai_strerror(rc)));
  }
  return found;
}

// A flood holds one descriptor per connection: allow as many as the system
// lets this process have (bounded), rather than the shell's default 1024.
// Returns the limit now in force.
size_t RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  const rlim_t wanted = std::min<rlim_t>(limit.rlim_max, 65536);
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = wanted;
    ::setrlimit(RLIMIT_NOFILE, &limit);
    ::getrlimit(RLIMIT_NOFILE, &limit);
  }
  return static_cast<size_t>(limit.rlim_cur);
}

// How many connections the store holds, so that strangers can take at most
// half of what the descriptor limit leaves beyond the reserve.
struct Capacity {
  size_t pending, per_peer, connections;
};

Capacity CapacityFor(size_t descriptors) {
  const size_t spare = descriptors > kReservedDescriptors ? descriptors - kReservedDescriptors : 64;
  Capacity c;
  c.pending = std::clamp<size_t>(spare / 2, 16, kMaxPending);
  c.per_peer = std::clamp<size_t>(c.pending / 4, 4, kMaxPendingPerPeer);
  c.connections = std::clamp<size_t>(spare / 4, 16, kMaxConnections);
  return c;
}

class TcpStoreServer {
 public:
  TcpStoreServer(int listen_fd, std::string address, std::string token, Capacity capacity)
      : listen_fd_(listen_fd), address_(std::move(address)), token_(std::move(token)), capacity_(capacity) {}

  const std::string& token() const { return token_; }

  absl::Status Start() {
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return absl::InternalError(absl::StrCat("tcp store: epoll: ", std::strerror(errno)));
    epoll_event listen_event{};
    listen_event.events = EPOLLIN;
    listen_event.data.u64 = 0;  // pending connections are numbered from 1
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_event);
    std::thread([this] { GateLoop(); }).detach();
    return absl::OkStatus();
  }

  std::string DropReport() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> parts;
    for (const auto& [peer_reason, count] : drops_total_) {
      if (parts.size() == 8) {
        parts.push_back(absl::StrCat("and ", drops_total_.size() - 8, " more kinds"));
        break;
      }
      parts.push_back(absl::StrCat(count, count == 1 ? " connection" : " connections", " from ", peer_reason.first,
                                   ": ", peer_reason.second));
    }
    return absl::StrJoin(parts, "; ");
  }

 private:
  // A connection that has not yet proved it holds the token. Owned by the
  // gate thread only.
  struct Pending {
    int fd = -1;
    std::string peer;
    Clock::time_point deadline;
    std::string nonce;
    std::string answer;  // at most kAnswerBytes
  };

  // One thread admits connections: it accepts, sends each its challenge,
  // reads the answers as they come, and drops the silent and the wrong.
  void GateLoop() {
    epoll_event events[256];
    for (;;) {
      const int n = ::epoll_wait(epoll_fd_, events, 256, 200);
      if (n < 0 && errno != EINTR) return;
      bool listening = false;
      // Answers already waiting first: a flood of new connections must not
      // keep the ranks' answers unread.
      for (int i = 0; i < n; ++i) {
        if (events[i].data.u64 == 0) {
          listening = true;
        } else {
          ReadAnswer(events[i].data.u64);
        }
      }
      if (listening) AcceptSome();
      DropExpired();
      ReportDrops(/*force=*/false);
    }
  }

  void AcceptSome() {
    for (int accepted = 0; accepted < kAcceptsPerRound; ++accepted) {
      sockaddr_storage from{};
      socklen_t from_length = sizeof(from);
      const int fd =
          ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_length, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors or memory: free one if a stranger holds it,
          // else wait a little rather than spin on the waiting connection.
          if (!EvictOldest("", "this process is out of descriptors")) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }
        return;  // EAGAIN: all accepted
      }
      char host[NI_MAXHOST] = "?";
      ::getnameinfo(reinterpret_cast<sockaddr*>(&from), from_length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
      Pending p;
      p.fd = fd;
      p.peer = host;
      p.deadline = Clock::now() + kHandshakeTimeout;
      p.nonce = hs::NewNonce();
      const std::string challenge = hs::Challenge(p.nonce);
      // A fresh socket's send buffer always takes these 20 bytes.
      if (::send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(challenge.size())) {
        ::close(fd);
        continue;
      }
      if (pending_.size() >= capacity_.pending) EvictOldest("", "too many connections waiting to authenticate");
      if (++pending_per_peer_[p.peer] > capacity_.per_peer) {
        EvictOldest(p.peer, "too many connections from one address waiting to authenticate");
      }
      const uint64_t id = next_id_++;
      epoll_event event{};
      event.events = EPOLLIN | EPOLLRDHUP;
      event.data.u64 = id;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
      pending_.emplace(id, std::move(p));
    }
  }

  void ReadAnswer(uint64_t id) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    Pending& p = it->second;
    char buffer[hs::kAnswerBytes];
    const ssize_t r = ::recv(p.fd, buffer, hs::kAnswerBytes - p.answer.size(), 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) {
      Drop(it, "no token (closed before authenticating)");
      return;
    }
    p.answer.append(buffer, static_cast<size_t>(r));
    if (p.answer.size() < hs::kAnswerBytes) return;
    const std::string refusal = hs::RefusalOf(token_, p.nonce, p.answer);
    if (!refusal.empty()) {
      const char refused = hs::kRefused;
      ::send(p.fd, &refused, 1, MSG_NOSIGNAL);
      Drop(it, refusal);
      return;
    }
    bool admitted = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (connections_ < static_cast<int>(capacity_.connections)) {
        ++connections_;
        admitted = true;
      }
    }
    if (!admitted) {
      const char full = hs::kFull;
      ::send(p.fd, &full, 1, MSG_NOSIGNAL);
      Drop(it, absl::StrCat("the store already serves ", capacity_.connections, " connections"));
      return;
    }
    const std::string accept = hs::Accept(token_, p.nonce, p.answer.substr(1, hs::kNonceBytes));
    const int fd = p.fd;
    Forget(it);
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    std::thread([this, fd, accept] {
      if (WriteAll(fd, accept.data(), accept.size())) Serve(fd);
      ::close(fd);
      std::lock_guard<std::mutex> lock(mu_);
      --connections_;
    }).detach();
  }

  // Removes a pending connection from the gate without closing it.
  void Forget(std::map<uint64_t, Pending>::iterator it) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
    auto per_peer = pending_per_peer_.find(it->second.peer);
    if (per_peer != pending_per_peer_.end() && --per_peer->second == 0) pending_per_peer_.erase(per_peer);
    pending_.erase(it);
  }

  void Drop(std::map<uint64_t, Pending>::iterator it, const std::string& reason) {
    const int fd = it->second.fd;
    const std::string peer = it->second.peer;
    Forget(it);
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::pair<std::string, std::string> kind{peer, reason};
      if (drops_total_.count(kind) == 0 && drops_total_.size() >= kMaxDropKinds) kind = {"other addresses", reason};
      first = drops_total_[kind]++ == 0;
      ++drops_unreported_[kind];
    }
    ::close(fd);  // after counting: whoever sees the close finds it counted
    if (first) ReportDrops(/*force=*/true);
  }

  // Drops the oldest pending connection (of `peer`, or of anyone when
  // empty) that has sent nothing yet, else the oldest: a rank's answer may
  // already be on its way. False when there is none.
  bool EvictOldest(const std::string& peer, const std::string& reason) {
    auto victim = pending_.end();
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (!peer.empty() && it->second.peer != peer) continue;
      if (it->second.answer.empty()) {
        victim = it;
        break;
      }
      if (victim == pending_.end()) victim = it;
    }
    if (victim == pending_.end()) return false;
    Drop(victim, reason);
    return true;
  }

  void DropExpired() {
    const Clock::time_point now = Clock::now();
    // Connections are numbered in arrival order, so deadlines ascend.
    while (!pending_.empty() && pending_.begin()->second.deadline <= now) {
      Drop(pending_.begin(), "no token (idle past 5 s)");
    }
  }

  void ReportDrops(bool force) {
    std::map<std::pair<std::string, std::string>, int64_t> report;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (drops_unreported_.empty() || (!force && Clock::now() < next_report_)) return;
      report.swap(drops_unreported_);
      next_report_ = Clock::now() + kDropReportInterval;
    }
    for (const auto& [peer_reason, count] : report) {
      Log().warn("tcp store {}: dropped {} connection{} from {}: {}", address_, count, count == 1 ? "" : "s",
                 peer_reason.first, peer_reason.second);
    }
  }

  // A request's key or value: at most `limit` bytes, read only while the
  // store's budget for announced bytes allows.
  bool ReadString(int fd, uint32_t limit, std::string* out) {
    uint32_t n = 0;
    if (!ReadLength(fd, &n) || n > limit) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (announced_ + n > kMaxAnnouncedBytes) return false;
      announced_ += n;
    }
    out->resize(n);
    const bool ok = ReadAll(fd, out->data(), n);
    std::lock_guard<std::mutex> lock(mu_);
    announced_ -= n;
    return ok;
  }

  // Answers one authenticated client's requests until it closes or sends a
  // malformed one. It may stay idle between requests (a run's sub-groups
  // reopen the store much later), but not in the middle of one.
  void Serve(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    SetReceiveTimeout(fd, kRequestTimeoutSeconds);
    for (;;) {
      pollfd wait_for_request = {fd, POLLIN, 0};
      if (::poll(&wait_for_request, 1, -1) < 0 && errno != EINTR) return;
      char op = 0;
      if (!ReadAll(fd, &op, 1)) return;
      std::string reply;
      if (op == 'S') {
        std::string key, value;
        if (!ReadString(fd, kMaxKeyBytes, &key) || !ReadString(fd, kMaxValueBytes, &value)) return;
        std::lock_guard<std::mutex> lock(mu_);
        if (bytes_ + key.size() + value.size() > kMaxStoreBytes) return;
        const bool taken = !data_.emplace(key, value).second;
        if (!taken) bytes_ += key.size() + value.size();
        reply.push_back(taken ? 1 : 0);
      } else if (op == 'G') {
        std::string key;
        if (!ReadString(fd, kMaxKeyBytes, &key)) return;
        std::lock_guard<std::mutex> lock(mu_);
        auto it = data_.find(key);
        reply.push_back(it != data_.end() ? 1 : 0);
        if (it != data_.end()) {
          AppendLength(&reply, static_cast<uint32_t>(it->second.size()));
          reply += it->second;
        }
      } else if (op == 'C') {
        uint32_t n = 0;
        if (!ReadLength(fd, &n) || n > 4096) return;
        std::vector<std::string> keys(n);
        for (std::string& key : keys) {
          if (!ReadString(fd, kMaxKeyBytes, &key)) return;
        }
        std::lock_guard<std::mutex> lock(mu_);
        bool all = true;
        for (const std::string& key : keys) all = all && data_.contains(key);
        reply.push_back(all ? 1 : 0);
      } else {
        return;
      }
      if (!WriteAll(fd, reply.data(), reply.size())) return;
    }
  }

  const int listen_fd_;
  const std::string address_;
  const std::string token_;
  const Capacity capacity_;
  int epoll_fd_ = -1;
  // The gate thread's own.
  std::map<uint64_t, Pending> pending_;
  absl::flat_hash_map<std::string, size_t> pending_per_peer_;
  uint64_t next_id_ = 1;
  // Shared with the serving threads.
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::string> data_;
  size_t bytes_ = 0;
  size_t announced_ = 0;
  int connections_ = 0;
  std::map<std::pair<std::string, std::string>, int64_t> drops_total_, drops_unreported_;
  Clock::time_point next_report_;
};

std::mutex servers_mu;
// Servers by address; they live as long as the process.
std::map<std::string, TcpStoreServer*>& Servers() {
  static auto* servers = new std::map<std::string, TcpStoreServer*>();
  return *servers;
}

[[noreturn]] void Fail(const std::string& address, const std::string& what) {
  throw ::gloo::IoException(absl::StrCat("tcp store ", address, ": ", what));
}

// One connection attempt's handshake on a connected socket: OK, a refusal
// (PermissionDenied: final), or Unavailable (retry: the server was busy or
// dropped this connection in a flood).
absl::Status Authenticate(int fd, const std::string& address, const std::string& token) {
  SetReceiveTimeout(fd, static_cast<int>(kHandshakeTimeout.count()));
  std::string challenge(hs::kChallengeBytes, '\0');
  if (!ReadAll(fd, challenge.data(), challenge.size())) {
    return absl::UnavailableError("the server closed the connection before its challenge");
  }
  if (absl::string_view(challenge).substr(0, hs::kMagic.size()) != hs::kMagic) {
    return absl::PermissionDeniedError(
        absl::StrCat("tcp store ", address, ": what answers there is not a Nereid store (another program on the port?)"));
  }
  const std::string server_nonce = challenge.substr(hs::kMagic.size());
  const std::string client_nonce = hs::NewNonce();
  const std::string answer = hs::Answer(token, server_nonce, client_nonce);
  if (!WriteAll(fd, answer.data(), answer.size())) return absl::UnavailableError("the server closed the connection");
  std::string accept(1, '\0');
  if (!ReadAll(fd, accept.data(), 1)) return absl::UnavailableError("the server closed the connection");
  if (accept[0] == hs::kRefused) {
    return absl::PermissionDeniedError(absl::StrCat(
        "tcp store ", address, " refused this process: ",
        token.empty() ? "the run has a token and this process has none"
                      : "this process's token is not the run's (or rank 0 has none)",
        " (give every process the same --token-file or NEREID_TOKEN; see SECURITY.md)"));
  }
  if (accept[0] == hs::kFull) return absl::UnavailableError("the server is full");
  accept.resize(hs::kAcceptBytes);
  if (accept[0] != hs::kAccepted || !ReadAll(fd, accept.data() + 1, hs::kAcceptBytes - 1) ||
      !hs::AcceptIsValid(token, server_nonce, client_nonce, accept)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "tcp store ", address, ": the server there cannot prove it holds this run's token (another run's store?)"));
  }
  SetReceiveTimeout(fd, kReplyTimeoutSeconds);
  return absl::OkStatus();
}

}  // namespace

absl::Status ServeTcpStore(const std::string& host, int port, const std::string& token) {
  const std::string address = Address(host, port);
  std::lock_guard<std::mutex> lock(servers_mu);
  if (auto it = Servers().find(address); it != Servers().end()) {
    if (it->second->token() != token) {
      return absl::FailedPreconditionError(
          absl::StrCat("tcp store ", address, ": this process already serves it for another run token"));
    }
    return absl::OkStatus();
  }
  const Capacity capacity = CapacityFor(RaiseDescriptorLimit());
  absl::StatusOr<addrinfo*> found = Resolve(host, port, /*passive=*/true);
  if (!found.ok()) return found.status();
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = *found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(*found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("tcp store: rank 0 cannot serve on ", address, ": ", error,
                                               " (is the port taken, or the address not this machine's?)"));
  }
  auto* server = new TcpStoreServer(fd, address, token, capacity);
  if (absl::Status started = server->Start(); !started.ok()) {
    ::close(fd);
    delete server;
    return started;
  }
  Servers()[address] = server;
  return absl::OkStatus();
}

std::string TcpStoreDropReport(const std::string& host, int port) {
  std::lock_guard<std::mutex> lock(servers_mu);
  auto it = Servers().find(Address(host, port));
  return it == Servers().end() ? "" : it->second->DropReport();
}

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host, int port,
                                                                        const std::string& token,
                                                                        std::chrono::milliseconds timeout) {
  const std::string address = Address(host, port);
  const auto deadline = Clock::now() + timeout;
  std::string error;
  for (;;) {
    absl::StatusOr<addrinfo*> found = Resolve(host, port, /*passive=*/false);
    if (!found.ok()) return found.status();
    for (addrinfo* a = *found; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        error = std::strerror(errno);
        ::close(fd);
        continue;
      }
      const absl::Status authenticated = Authenticate(fd, address, token);
      if (authenticated.ok()) {
        ::freeaddrinfo(*found);
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(fd, address));
      }
      ::close(fd);
      if (absl::IsPermissionDenied(authenticated)) {
        ::freeaddrinfo(*found);
        return authenticated;
      }
      error = std::string(authenticated.message());
    }
    ::freeaddrinfo(*found);
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("tcp store ", address, ": no server answered within ",
                                                      timeout.count(), "ms (", error,
                                                      "; rank 0 serves it: did it start?)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TcpStoreClient::~TcpStoreClient() { ::close(fd_); }

char TcpStoreClient::Call(const std::string& request, std::string* value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!WriteAll(fd_, request.data(), request.size())) Fail(address_, "the server closed the connection");
  char answer = 0;
  if (!ReadAll(fd_, &answer, 1)) Fail(address_, "no answer from the server");
  if (value != nullptr && answer == 1) {
    uint32_t n = 0;
    if (!ReadLength(fd_, &n) || n > kMaxValueBytes) Fail(address_, "a malformed answer from the server");
    value->resize(n);
    if (!ReadAll(fd_, value->data(), n)) Fail(address_, "a malformed answer from the server");
  }
  return answer;
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  if (key.size() > kMaxKeyBytes || data.size() > kMaxValueBytes) Fail(address_, "key or value too large: " + key);
  std::string request = "S";
  AppendLength(&request, static_cast<uint32_t>(key.size()));
  request += key;
  AppendLength(&request, static_cast<uint32_t>(data.size()));
  request.append(data.begin(), data.end());
  if (Call(request, nullptr) != 0) Fail(address_, absl::StrCat("key '", key, "' already exists"));
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  wait({key}, kDefaultTimeout);
  std::string request = "G";
  AppendLength(&request, static_cast<uint32_t>(key.size()));
  request += key;
  std::string value;
  if (Call(request, &value) != 1) Fail(address_, absl::StrCat("key '", key, "' vanished"));
  return std::vector<char>(value.begin(), value.end());
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  std::string request = "C";
  AppendLength(&request, static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) {
    AppendLength(&request, static_cast<uint32_t>(key.size()));
    request += key;
  }
  return Call(request, nullptr) == 1;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys) { wait(keys, kDefaultTimeout); }

void TcpStoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!check(keys)) {
    if (Clock::now() >= deadline) {
      Fail(address_, absl::StrCat("keys not set within ", timeout.count(), "ms (", keys.size() == 1 ? keys[0] : "",
                                  keys.size() == 1 ? "" : absl::StrCat(keys.size(), " keys"), ")"));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace nereid
